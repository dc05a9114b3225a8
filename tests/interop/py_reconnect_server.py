#!/usr/bin/env python3
"""An independent grpc.testing.ReconnectService server on grpcio, for interop tests.

Written from the interop test's description (doc/connection-backoff-interop-test-description.md
and the behaviour of grpc's reconnect_interop_server), not from backoffd's code:

- control port: grpcio server, plaintext, generic handlers with hand-encoded protobuf
  (Start(ReconnectParams) -> Empty, Stop(Empty) -> ReconnectInfo);
- retry port: a plain TCP listener that records time.monotonic() for every accepted
  connection and closes it at once;
- Stop verifies: interval i = consecutive accept times in whole ms (truncated); E_1 = 1000,
  E_{i+1} = min(E_i * 1.6, cap) with cap = max_reconnect_backoff_ms or 120000 when 0;
  interval i passes iff E_i*0.8 - 100 <= b_i <= E_i*1.2 + 100; 0 or 1 accepts pass.

Usage: py_reconnect_server.py --control_port P --retry_port Q   (0 picks a free port)
       [--start_status CODE --start_message TEXT]   (answer every Start with that error)
Prints "listening control=P retry=Q" on stdout once both ports accept.
"""

import argparse
import signal
import socket
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "grpc.testing.ReconnectService"


# ---- protobuf wire format, by hand (proto3) ----

def read_varint(buf, i):
    value, shift = 0, 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def skip_field(buf, i, wire_type):
    if wire_type == 0:
        _, i = read_varint(buf, i)
    elif wire_type == 1:
        i += 8
    elif wire_type == 2:
        n, i = read_varint(buf, i)
        i += n
    elif wire_type == 5:
        i += 4
    else:
        raise ValueError("unsupported wire type %d" % wire_type)
    if i > len(buf):
        raise ValueError("truncated field")
    return i


def to_int32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def decode_reconnect_params(buf):
    """ReconnectParams { int32 max_reconnect_backoff_ms = 1; }"""
    max_ms, i = 0, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        field, wire_type = key >> 3, key & 7
        if field == 1 and wire_type == 0:
            v, i = read_varint(buf, i)
            max_ms = to_int32(v)
        else:
            i = skip_field(buf, i, wire_type)
    return max_ms


def encode_varint(v):
    if v < 0:
        v += 1 << 64  # negative int32 is sign-extended to 10 bytes
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_reconnect_info(passed, backoff_ms):
    """ReconnectInfo { bool passed = 1; repeated int32 backoff_ms = 2 [packed]; }"""
    out = bytearray()
    if passed:
        out += b"\x08\x01"
    if backoff_ms:
        packed = b"".join(encode_varint(b) for b in backoff_ms)
        out += b"\x12" + encode_varint(len(packed)) + packed
    return bytes(out)


# ---- the service ----

def verify(stamps, max_ms):
    cap = float(max_ms if max_ms != 0 else 120000)
    expected = 1000.0
    passed, intervals = True, []
    for k in range(1, len(stamps)):
        b = int((stamps[k] - stamps[k - 1]) * 1000)
        lo, hi = expected * 0.8 - 100, expected * 1.2 + 100
        ok = lo <= b <= hi
        log("interval %d: %d ms, expected %.1f, allowed [%.1f, %.1f] %s"
            % (k, b, expected, lo, hi, "ok" if ok else "FAIL"))
        passed = passed and ok
        intervals.append(b)
        expected = min(expected * 1.6, cap)
    return passed, intervals


def log(msg):
    sys.stderr.write("py_reconnect_server: %s\n" % msg)
    sys.stderr.flush()


class Reconnect:
    def __init__(self, start_status=0, start_message=""):
        self.start_status = start_status
        self.start_message = start_message
        self.lock = threading.Lock()
        self.stamps = []
        self.max_ms = 0
        self.peers = set()

    def on_accept(self, stamp, peer):
        with self.lock:
            self.stamps.append(stamp)
            self.peers.add(peer)
            n = len(self.stamps)
        log("retry connection %d from %s" % (n, peer))

    def start(self, request, context):
        max_ms = decode_reconnect_params(request)
        if self.start_status:
            code = next(c for c in grpc.StatusCode if c.value[0] == self.start_status)
            log("Start refused with %s" % code)
            context.abort(code, self.start_message)
        with self.lock:
            self.stamps = []
            self.peers = set()
            self.max_ms = max_ms
        log("Start max_reconnect_backoff_ms=%d" % max_ms)
        return b""

    def stop(self, request, context):
        with self.lock:
            stamps, max_ms, peers = self.stamps, self.max_ms, self.peers
            self.stamps = []
        passed, intervals = verify(stamps, max_ms)
        log("Stop passed=%s backoff_ms=%s peers=%s" % (passed, intervals, sorted(peers)))
        return encode_reconnect_info(passed, intervals)


def retry_listener(port):
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::", port))
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
    sock.listen(128)
    return sock


def accept_loop(sock, service):
    while True:
        conn, addr = sock.accept()
        stamp = time.monotonic()  # first, before anything else
        conn.close()
        host = addr[0]
        if host.startswith("::ffff:"):
            host = host[len("::ffff:"):]
        service.on_accept(stamp, host)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--control_port", type=int, required=True)
    parser.add_argument("--retry_port", type=int, required=True)
    parser.add_argument("--start_status", type=int, default=0)
    parser.add_argument("--start_message", default="")
    args = parser.parse_args()

    service = Reconnect(args.start_status, args.start_message)
    retry = retry_listener(args.retry_port)
    threading.Thread(target=accept_loop, args=(retry, service), daemon=True).start()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Start": grpc.unary_unary_rpc_method_handler(service.start),
        "Stop": grpc.unary_unary_rpc_method_handler(service.stop),
    })
    server.add_generic_rpc_handlers((handler,))
    control_port = server.add_insecure_port("[::]:%d" % args.control_port)
    server.start()

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print("listening control=%d retry=%d" % (control_port, retry.getsockname()[1]), flush=True)
    done.wait()
    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
