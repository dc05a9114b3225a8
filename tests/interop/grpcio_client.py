"""Python grpcio driving reconnect_interop_server, one subcommand per end-to-end case.

Run by tests/reconnect_grpcio.rs with the venv that tests/interop/setup_grpc.sh makes. Each
subcommand prints what it measured as `RESULT key=value` lines on stdout (the Rust test asserts
on them) and exits non-zero only if the script itself broke; verdicts are the Rust side's.

Addresses: every channel targets 127.0.0.1, never "localhost". grpcio resolves "localhost" to
both ::1 and 127.0.0.1 and, within one connection attempt, tries both addresses (happy
eyeballs style): against the retry port, which accepts and closes at once, that is two accepts
per backoff attempt, so the server would record a ~0 ms interval before every real one and fail
the run. The C++ interop client has the same behaviour; a single-address target is the fix.
"""

import argparse
import socket
import sys
import time

import grpc

import reconnect_pb as pb


def result(key, value):
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    print(f"RESULT {key}={value}", flush=True)


def now_ms():
    return time.monotonic() * 1000.0


def control_channel(port, options=()):
    # A local subchannel pool gives every channel its own TCP connection, as separate client
    # processes would have; grpcio otherwise shares one connection between equal channels.
    opts = [("grpc.use_local_subchannel_pool", 1)] + list(options)
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=opts)


def identity(b):
    return b


def method(channel, path):
    return channel.unary_unary(path, request_serializer=identity, response_deserializer=identity)


def start(channel, max_ms=0, **kwargs):
    return method(channel, pb.START)(pb.reconnect_params(max_ms), **kwargs)


def stop(channel, **kwargs):
    return pb.decode_reconnect_info(method(channel, pb.STOP)(pb.EMPTY, **kwargs))


def call_outcome(fn):
    """('OK', value) or (status code name, details) of a blocking call or future.result."""
    try:
        return "OK", fn()
    except grpc.RpcError as e:
        return e.code().name, e.details()
    except grpc.FutureCancelledError:
        return "CANCELLED", "future cancelled"


def cmd_backoff(args):
    """Case 1: Start, a TLS channel reconnecting to the retry port with grpcio's own backoff
    for a while, Stop."""
    ctl = control_channel(args.control)
    start(ctl, args.max_backoff, timeout=10)
    options = [
        ("grpc.max_reconnect_backoff_ms", args.max_backoff),
        ("grpc.initial_reconnect_backoff_ms", 1000),
        ("grpc.min_reconnect_backoff_ms", 1000),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    # TLS like the reference client: the server closes before the handshake completes, so
    # every attempt fails and grpcio backs off.
    retry = grpc.secure_channel(
        f"127.0.0.1:{args.retry}", grpc.ssl_channel_credentials(), options=options
    )
    ready = grpc.channel_ready_future(retry)
    try:
        ready.result(timeout=args.seconds)
        result("unexpectedly_ready", True)
    except grpc.FutureTimeoutError:
        pass
    ready.cancel()
    retry.close()
    passed, backoff_ms = stop(ctl, timeout=10)
    result("passed", passed)
    result("backoff_ms", backoff_ms)


def cmd_raw_retry(args):
    """Case 2: a client that ignores backoff: plain TCP connects every `interval` seconds."""
    ctl = control_channel(args.control)
    start(ctl, 0, timeout=10)
    closed_by_server = 0
    for i in range(args.count):
        if i:
            time.sleep(args.interval)
        with socket.create_connection(("127.0.0.1", args.retry), timeout=5) as s:
            if s.recv(1) == b"":
                closed_by_server += 1
    passed, backoff_ms = stop(ctl, timeout=10)
    result("closed_by_server", closed_by_server)
    result("passed", passed)
    result("backoff_ms", backoff_ms)


def cmd_two_clients(args):
    """Case 3: B's Start (own channel, own connection) is parked until A's Stop."""
    a, b = control_channel(args.control), control_channel(args.control)
    start(a, 0, timeout=10)
    b_future = method(b, pb.START).future(pb.reconnect_params(0), timeout=30)
    done_at = []
    b_future.add_done_callback(lambda _f: done_at.append(now_ms()))
    time.sleep(args.park)
    result("b_done_before_stop", b_future.done())
    stop_sent = now_ms()
    stop(a, timeout=10)
    stop_returned = now_ms()
    code, _ = call_outcome(lambda: b_future.result(timeout=10))
    result("b_code", code)
    b_done = done_at[0] if done_at else now_ms()
    result("b_done_after_stop_sent_ms", round(b_done - stop_sent, 1))
    result("b_done_after_stop_returned_ms", round(b_done - stop_returned, 1))
    # B owns the session now; its own Stop ends it.
    result("b_stop_code", call_outcome(lambda: stop(b, timeout=10))[0])


def cmd_cancel_waiter(args):
    """Case 4: waiters that give up (deadline, cancel()) must not become ghost sessions."""
    a, b, b2, b3, c = (control_channel(args.control) for _ in range(5))
    start(a, 0, timeout=10)
    t0 = now_ms()
    code, details = call_outcome(lambda: start(b, 0, timeout=1.0))
    result("b_code", code)
    result("b_details", details)
    result("b_elapsed_ms", round(now_ms() - t0))
    fut = method(b2, pb.START).future(pb.reconnect_params(0))
    time.sleep(0.3)
    result("b2_done_before_cancel", fut.done())
    result("b2_cancelled", fut.cancel())
    result("b2_code", call_outcome(lambda: fut.result(timeout=5))[0])
    # A third waiter whose whole channel is closed while it waits.
    fut3 = method(b3, pb.START).future(pb.reconnect_params(0))
    time.sleep(0.3)
    result("b3_done_before_close", fut3.done())
    b3.close()
    result("b3_code", call_outcome(lambda: fut3.result(timeout=5))[0])
    # Let the RST_STREAM reach the server before A's Stop would hand the session on.
    time.sleep(0.3)
    result("a_stop_code", call_outcome(lambda: stop(a, timeout=10))[0])
    t0 = now_ms()
    code, _ = call_outcome(lambda: start(c, 0, timeout=5))
    result("c_code", code)
    result("c_elapsed_ms", round(now_ms() - t0))
    result("c_stop_code", call_outcome(lambda: stop(c, timeout=10))[0])


def cmd_many_calls(args):
    """Case 5: many calls on one connection, repeated custom metadata, keepalive PINGs."""
    options = [
        ("grpc.keepalive_time_ms", args.keepalive_ms),
        ("grpc.keepalive_timeout_ms", 1000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    ch = control_channel(args.control, options)
    # Every connectivity change, in order: a PING left unanswered past keepalive_timeout_ms (or
    # any broken connection) would show up as READY -> IDLE/TRANSIENT_FAILURE -> CONNECTING.
    states = []
    ch.subscribe(lambda s: states.append(s.name), try_to_connect=True)
    stop_call = method(ch, pb.STOP)
    # What grpcio 1.68.1 (C-core's HPACK encoder) puts on the wire, as seen in a capture:
    # :path, :authority, content-type, te, user-agent, grpc-accept-encoding and grpc-timeout go
    # into the dynamic table on the first call and are sent as indices afterwards (grpc-timeout
    # differs per call, so new entries keep evicting old ones); custom ASCII metadata is sent as
    # a literal without indexing and without Huffman coding; a `-bin` value is base64 and
    # Huffman-coded. raw_h2.py's many-calls covers Huffman-coded, indexed custom metadata.
    fixed = [
        ("x-backoffd-test", "repeated-metadata-value-for-hpack-indexing"),
        ("x-backoffd-tenant", "tenant-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ("x-backoffd-trace-bin", bytes(range(48))),
    ]
    ok, failures = 0, []
    t0 = time.monotonic()
    for i in range(args.calls):
        metadata = fixed + [("x-call-index", f"call-{i:05d}")]
        try:
            passed, backoff_ms = pb.decode_reconnect_info(
                stop_call(pb.EMPTY, metadata=metadata, timeout=5)
            )
            if passed and not backoff_ms:
                ok += 1
            else:
                failures.append(f"{i}:unexpected-info")
        except grpc.RpcError as e:
            failures.append(f"{i}:{e.code().name}")
        # Pause after every burst, longer than keepalive_time_ms, so keepalive PINGs go out
        # between the calls too (any received frame restarts grpcio's keepalive timer).
        if (i + 1) % args.burst == 0:
            time.sleep(args.pause_ms / 1000.0)
    result("calls_ok", ok)
    result("failures", failures)
    result("calls_seconds", round(time.monotonic() - t0, 2))
    # Idle with no call in flight: only PINGs go over the connection now.
    time.sleep(args.idle_ms / 1000.0)
    code, _ = call_outcome(lambda: stop_call(pb.EMPTY, metadata=fixed, timeout=5))
    result("after_idle_code", code)
    result("states", states)
    ch.close()


def cmd_unknown_method(args):
    """Case 6a: a method the service does not have."""
    ch = control_channel(args.control)
    for path in ("/grpc.testing.ReconnectService/Frobnicate", "/grpc.testing.NoSuchService/Start"):
        code, details = call_outcome(lambda: method(ch, path)(b"", timeout=5))
        name = path.rsplit("/", 2)[1].split(".")[-1] + "_" + path.rsplit("/", 1)[1]
        result(f"{name}_code", code)
        result(f"{name}_code_num", grpc.StatusCode[code].value[0])
        result(f"{name}_details", details)


def cmd_hold_session(args):
    """Case 8: A owns the session, B's Start is parked; the Rust side then sends SIGTERM."""
    a, b = control_channel(args.control), control_channel(args.control)
    start(a, 0, timeout=10)
    fut = method(b, pb.START).future(pb.reconnect_params(0), timeout=30)
    time.sleep(0.5)
    result("b_parked", not fut.done())
    result("ready", True)
    t0 = now_ms()
    code, details = call_outcome(lambda: fut.result(timeout=20))
    result("b_code", code)
    result("b_details", details)
    result("b_waited_ms", round(now_ms() - t0))


def cmd_start_stop(args):
    """Case 7: an ordinary session next to misbehaving connections: Start, probe the retry port
    `probes` times `spacing` seconds apart (each accept must be closed by the server), Stop."""
    ch = control_channel(args.control)
    t0 = now_ms()
    start(ch, 0, timeout=5)
    result("start_ms", round(now_ms() - t0))
    closed = 0
    for i in range(args.probes):
        if i:
            time.sleep(args.spacing)
        with socket.create_connection(("127.0.0.1", args.retry), timeout=5) as s:
            s.settimeout(5)
            if s.recv(1) == b"":
                closed += 1
    result("probes_closed", closed)
    t0 = now_ms()
    passed, backoff_ms = stop(ch, timeout=5)
    result("stop_ms", round(now_ms() - t0))
    result("passed", passed)
    result("backoff_ms", backoff_ms)


def cmd_selftest(_args):
    pb.self_test()
    result("codec", "ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    def add(name, fn):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        p.add_argument("--control", type=int)
        p.add_argument("--retry", type=int)
        return p

    p = add("backoff", cmd_backoff)
    p.add_argument("--max-backoff", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=10.0)
    p = add("raw-retry", cmd_raw_retry)
    p.add_argument("--interval", type=float, default=0.3)
    p.add_argument("--count", type=int, default=6)
    p = add("two-clients", cmd_two_clients)
    p.add_argument("--park", type=float, default=1.5)
    add("cancel-waiter", cmd_cancel_waiter)
    p = add("many-calls", cmd_many_calls)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--keepalive-ms", type=int, default=100)
    p.add_argument("--burst", type=int, default=20)
    p.add_argument("--pause-ms", type=int, default=250)
    p.add_argument("--idle-ms", type=int, default=1500)
    add("unknown-method", cmd_unknown_method)
    add("hold-session", cmd_hold_session)
    p = add("start-stop", cmd_start_stop)
    p.add_argument("--probes", type=int, default=2)
    p.add_argument("--spacing", type=float, default=1.0)
    add("selftest", cmd_selftest)

    args = parser.parse_args()
    args.fn(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
