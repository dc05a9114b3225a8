"""A seeded lossy UDP relay for the interop tests (tests/coap_interop.rs).

Listens on --host, port 0, and relays every datagram to --target; answers from the target go
back to whichever source sent through that mapping (one upstream socket per source address,
like a NAT). Each datagram is dropped with probability --loss, decided by a random.Random
seeded with --seed (one stream per direction, so a run is reproducible for a given order of
datagrams).

--max-drops-per-datagram K bounds how often the same bytes are dropped: CoAP retransmissions
(of a request, of a cached piggybacked answer, of a separate response) are byte-identical,
so with K = 2 every exchange gets through within a few retransmissions. Loss stays random,
but a test's outcome no longer depends on a rare run of bad luck (e.g. one ACK lost five
times in a row, which makes a CoAP client give up, correctly, after ~45 s).

Prints `RELAY <port>` once bound. On SIGTERM (or when stdin closes) prints
`STATS to_target=<n> dropped_to_target=<n> to_source=<n> dropped_to_source=<n>` and exits.
With --trace, every datagram is logged on stderr: time, direction (`->` toward the target,
`<-` back toward the source), pass/DROP, the CoAP header, and the source's port (`peer=`).
"""

import argparse
import asyncio
import random
import signal
import socket
import sys
import time

TYPES = ("CON", "NON", "ACK", "RST")
START = time.monotonic()


def say(*words):
    print(*words, flush=True)


def describe(data, peer):
    """`CON 0.02 mid=1234 tok=ab12 len=N peer=P` for a CoAP datagram; P is the source's port."""
    if len(data) < 4:
        return "short len=%d peer=%d" % (len(data), peer[1])
    tkl = data[0] & 0x0F
    code = "%d.%02d" % (data[1] >> 5, data[1] & 0x1F)
    mid = int.from_bytes(data[2:4], "big")
    token = data[4 : 4 + tkl].hex()
    kind = TYPES[(data[0] >> 4) & 3]
    return "%s %s mid=%d tok=%s len=%d peer=%d" % (kind, code, mid, token, len(data), peer[1])


class Direction:
    """The loss decisions and counters of one direction."""

    def __init__(self, arrow, loss, seed, max_drops, trace):
        self.arrow = arrow
        self.loss = loss
        self.rng = random.Random(seed)
        self.max_drops = max_drops
        self.trace = trace
        self.seen = 0
        self.dropped = 0
        self.drops_of = {}

    def drop(self, data, peer):
        """Whether to drop this datagram from/to the source `peer` (and log it)."""
        self.seen += 1
        dropped = self.rng.random() < self.loss
        if dropped and self.max_drops is not None:
            if self.drops_of.get(data, 0) >= self.max_drops:
                dropped = False
            else:
                self.drops_of[data] = self.drops_of.get(data, 0) + 1
        if dropped:
            self.dropped += 1
        if self.trace:
            line = "%8.3f %s %s %s" % (
                time.monotonic() - START,
                self.arrow,
                "DROP" if dropped else "pass",
                describe(data, peer),
            )
            print(line, file=sys.stderr, flush=True)
        return dropped


class Upstream(asyncio.DatagramProtocol):
    """The socket toward the target for one source address."""

    def __init__(self, relay, source):
        self.relay = relay
        self.source = source
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if not self.relay.back.drop(data, self.source):
            self.relay.transport.sendto(data, self.source)

    def error_received(self, exc):
        pass  # ICMP errors toward the target are the proxy's business; keep relaying.


class Relay(asyncio.DatagramProtocol):
    def __init__(self, target, family, forward, back):
        self.target = target
        self.family = family
        self.forward = forward
        self.back = back
        self.transport = None
        self.upstreams = {}
        self.pending = {}

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if self.forward.drop(data, addr):
            return
        up = self.upstreams.get(addr)
        if up is not None:
            up.transport.sendto(data)
            return
        # First datagram from this source: open its upstream socket, queue until it exists.
        queue = self.pending.setdefault(addr, [])
        queue.append(data)
        if len(queue) == 1:
            asyncio.get_running_loop().create_task(self.open_upstream(addr))

    def error_received(self, exc):
        pass

    async def open_upstream(self, source):
        loop = asyncio.get_running_loop()
        _, up = await loop.create_datagram_endpoint(
            lambda: Upstream(self, source), remote_addr=self.target, family=self.family
        )
        self.upstreams[source] = up
        for data in self.pending.pop(source, []):
            up.transport.sendto(data)

    def stats(self):
        return "STATS to_target=%d dropped_to_target=%d to_source=%d dropped_to_source=%d" % (
            self.forward.seen,
            self.forward.dropped,
            self.back.seen,
            self.back.dropped,
        )


def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--target", required=True, help="HOST:PORT ([v6]:PORT for IPv6)")
    parser.add_argument("--loss", type=float, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-drops-per-datagram", type=int, default=None)
    parser.add_argument("--trace", action="store_true", help="log every datagram on stderr")
    args = parser.parse_args()

    host, _, port = args.target.rpartition(":")
    host = host.strip("[]")
    cap = args.max_drops_per_datagram
    forward = Direction("->", args.loss, args.seed, cap, args.trace)
    back = Direction("<-", args.loss, args.seed + 1, cap, args.trace)
    loop = asyncio.get_running_loop()
    transport, relay = await loop.create_datagram_endpoint(
        lambda: Relay((host, int(port)), family_of(host), forward, back),
        local_addr=(args.host, 0),
        family=family_of(args.host),
    )
    say("RELAY", transport.get_extra_info("socket").getsockname()[1])
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # Also stop when the test process goes away (stdin closes).
    loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1(4096) or stop.set())
    await stop.wait()
    say(relay.stats())


if __name__ == "__main__":
    asyncio.run(main())
