"""Hand-made HTTP/2 requests to the control port with the pure-Python `h2` package: what grpcio
never sends (a wrong content-type; Huffman-coded, indexed custom metadata), checked at the HTTP
level.

Run by tests/reconnect_grpcio.rs; prints `RESULT key=value` lines like grpcio_client.py.
"""

import argparse
import socket
import sys

import h2.config
import h2.connection
import h2.events

PATH = "/grpc.testing.ReconnectService/Stop"
# An empty message (Empty {}) in gRPC framing: uncompressed flag, zero length.
EMPTY_FRAME = b"\x00\x00\x00\x00\x00"


def result(key, value):
    print(f"RESULT {key}={value}", flush=True)


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.initiate_connection()
        self.flush()
        self.pings_acked = []

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def request(self, content_type, metadata=()):
        """One POST with `content_type` (None: no content-type at all); returns
        (":status", headers dict, trailers dict) once the stream ends."""
        stream = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH),
            (":authority", "127.0.0.1"),
            ("te", "trailers"),
        ]
        if content_type is not None:
            headers.append(("content-type", content_type))
        headers.extend(metadata)
        self.conn.send_headers(stream, headers)
        self.conn.send_data(stream, EMPTY_FRAME, end_stream=True)
        self.flush()
        response, trailers = {}, {}
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError(f"connection closed during stream {stream}")
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    response = dict(event.headers)
                elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == stream:
                    trailers = dict(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
                elif isinstance(event, h2.events.PingAckReceived):
                    self.pings_acked.append(event.ping_data)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    raise RuntimeError(f"stream {stream} reset: {event.error_code!r}")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise RuntimeError(f"GOAWAY: {event.error_code!r}")
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    self.flush()
                    return response.get(":status"), response, trailers
            self.flush()


def cmd_content_type(args):
    """Case 6b: wrong content-types get HTTP 415; the same connection then still serves a
    proper gRPC call."""
    client = Client(args.control)
    cases = [
        ("json", "application/json"),
        ("text", "text/plain"),
        ("grpcfoo", "application/grpcfoo"),
        ("none", None),
        ("grpc_proto", "application/grpc+proto"),
        ("grpc", "application/grpc"),
    ]
    for name, content_type in cases:
        status, headers, trailers = client.request(content_type)
        result(f"{name}_status", status)
        result(f"{name}_grpc_status", headers.get("grpc-status", trailers.get("grpc-status")))
    client.sock.close()


def cmd_many_calls(args):
    """Case 5b: many Stop calls on one connection with the `hpack` package's encoder, which,
    unlike grpcio's, indexes custom metadata in the dynamic table and Huffman-codes every string
    where that is shorter; a PING between calls, whose ACK must echo its payload."""
    client = Client(args.control)
    ok, bad = 0, []
    for i in range(args.calls):
        payload = i.to_bytes(8, "big")
        client.conn.ping(payload)
        client.flush()
        metadata = [
            ("x-backoffd-test", "repeated-metadata-value-for-hpack-indexing"),
            ("x-backoffd-tenant", "tenant-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
            ("x-call-index", f"call-{i:05d}"),
        ]
        status, headers, trailers = client.request("application/grpc", metadata)
        if status == "200" and trailers.get("grpc-status") == "0":
            ok += 1
        else:
            bad.append(f"{i}:{status}/{headers}/{trailers}")
    sent = {i.to_bytes(8, "big") for i in range(args.calls)}
    result("calls_ok", ok)
    result("pings_acked", len(sent & set(client.pings_acked)))
    result("bad", ";".join(bad))
    client.sock.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("content-type")
    p.set_defaults(fn=cmd_content_type)
    p.add_argument("--control", type=int, required=True)
    p = sub.add_parser("many-calls")
    p.set_defaults(fn=cmd_many_calls)
    p.add_argument("--control", type=int, required=True)
    p.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    args.fn(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
