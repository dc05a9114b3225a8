"""A seeded lossy UDP relay for the interop tests (tests/coap_interop.rs).

Listens on --host port 0 and relays every datagram to --target; answers from the target go
back to whichever source sent through that mapping (one upstream socket per source address,
like a NAT). Each datagram is dropped with probability --loss, decided by a random.Random
seeded with --seed (one stream per direction, so a run is reproducible for a given order of
datagrams). Prints `RELAY <port>` once bound. On SIGTERM prints
`STATS to_target=<n> dropped_to_target=<n> to_source=<n> dropped_to_source=<n>` and exits.
With --trace, every datagram is logged on stderr (time, direction, pass/DROP, CoAP header).
"""

import argparse
import asyncio
import random
import signal
import socket
import sys
import time


def say(*words):
    print(*words, flush=True)


TYPES = ("CON", "NON", "ACK", "RST")
START = time.monotonic()


def describe(data):
    """`CON 0.02 mid=1234 tok=ab12 len=N` for a CoAP datagram (for --trace)."""
    if len(data) < 4:
        return "short len=%d" % len(data)
    tkl = data[0] & 0x0F
    code = "%d.%02d" % (data[1] >> 5, data[1] & 0x1F)
    mid = int.from_bytes(data[2:4], "big")
    token = data[4 : 4 + tkl].hex()
    return "%s %s mid=%d tok=%s len=%d" % (TYPES[(data[0] >> 4) & 3], code, mid, token, len(data))


def trace(enabled, direction, dropped, data):
    if enabled:
        print(
            "%8.3f %s %s %s" % (time.monotonic() - START, direction, "DROP" if dropped else "pass", describe(data)),
            file=sys.stderr,
            flush=True,
        )


class Stats:
    def __init__(self):
        self.to_target = 0
        self.dropped_to_target = 0
        self.to_source = 0
        self.dropped_to_source = 0

    def line(self):
        return "STATS to_target=%d dropped_to_target=%d to_source=%d dropped_to_source=%d" % (
            self.to_target,
            self.dropped_to_target,
            self.to_source,
            self.dropped_to_source,
        )


class Upstream(asyncio.DatagramProtocol):
    """The socket towards the target for one source address."""

    def __init__(self, relay, source):
        self.relay = relay
        self.source = source
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.relay.stats.to_source += 1
        dropped = self.relay.rng_back.random() < self.relay.loss
        trace(self.relay.trace, "<-", dropped, data)
        if dropped:
            self.relay.stats.dropped_to_source += 1
            return
        self.relay.transport.sendto(data, self.source)

    def error_received(self, exc):
        pass  # ICMP errors towards the target are the proxy's business; keep relaying.


class Relay(asyncio.DatagramProtocol):
    def __init__(self, target, family, loss, seed, trace):
        self.trace = trace
        self.target = target
        self.family = family
        self.loss = loss
        self.rng_fwd = random.Random(seed)
        self.rng_back = random.Random(seed + 1)
        self.stats = Stats()
        self.transport = None
        self.upstreams = {}
        self.pending = {}

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.stats.to_target += 1
        dropped = self.rng_fwd.random() < self.loss
        trace(self.trace, "->", dropped, data)
        if dropped:
            self.stats.dropped_to_target += 1
            return
        up = self.upstreams.get(addr)
        if up is not None and up.transport is not None:
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


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--target", required=True, help="HOST:PORT ([v6]:PORT for IPv6)")
    parser.add_argument("--loss", type=float, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trace", action="store_true", help="log every datagram on stderr")
    args = parser.parse_args()

    host, _, port = args.target.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    loop = asyncio.get_running_loop()
    transport, relay = await loop.create_datagram_endpoint(
        lambda: Relay((host, int(port)), family, args.loss, args.seed, args.trace),
        local_addr=(args.host, 0),
        family=socket.AF_INET6 if ":" in args.host else socket.AF_INET,
    )
    say("RELAY", transport.get_extra_info("socket").getsockname()[1])
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # Also stop when the test process goes away (stdin closes).
    loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1(4096) or stop.set())
    await stop.wait()
    say(relay.stats.line())


if __name__ == "__main__":
    asyncio.run(main())
