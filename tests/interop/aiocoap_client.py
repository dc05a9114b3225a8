"""An aiocoap CoAP client for the interop tests (tests/coap_interop.rs).

Subcommands (every stdout line is flushed at once; the exit code is 0 only on success):

  request METHOD URI [--in FILE] [--out FILE] [--proxy coap://HOST:PORT]
      One request (block-wise is automatic in aiocoap); with --proxy, through that forward
      proxy. Prints `CODE <d.dd> <payload length>`, then the payload: into --out if given,
      else as `TEXT <payload>`.
  observe URI --count N [--linger S]
      Registers, prints `NOTIFY <payload>` for each of the first N answers (the registration
      answer counts as the first), then cancels the observation, prints `CANCELLED`, keeps the
      context open for --linger seconds (so aiocoap can answer further notifications with RST)
      and exits.
  post-many URI --n N --tag PREFIX [--clients C] [--separate-every K] [--ack-timeout S]
            [--max-retransmit K] [--request-timeout S]
      N POSTs with payloads PREFIX-0 .. PREFIX-(N-1), spread over C client contexts (C source
      ports) that run concurrently; every K-th POST goes to URI?delay=0.3 (the server answers
      it separately); for each prints `ANSWER <tag> <d.dd> <payload>` or
      `FAIL <tag> <reason>` (`TimeoutError` after --request-timeout, queueing included), then
      `DONE`.

URIs may be coap+tcp://, coap+ws:// and coaps+ws:// (RFC 8323): the client then adds
aiocoap's TCP or WebSocket client transport (for coaps+ws, SSL_CERT_FILE names the CA to
trust).

--timeout bounds the whole run (exit 3 when it is exceeded). --dtls-psk IDENTITY:KEY adds
aiocoap's tinydtls transport (the DTLSSocket package) for coaps:// URIs, with that PSK.
"""

import argparse
import asyncio
import sys

import aiocoap
import aiocoap.proxy.client
from aiocoap.numbers.constants import TransportTuning


# The aiocoap transport that speaks each RFC 8323 scheme (coap+ws needs the `websockets`
# package, aiocoap's `ws` extra).
RELIABLE_TRANSPORTS = {
    "coap+tcp": "tcpclient",
    "coaps+tcp": "tlsclient",
    "coap+ws": "ws",
    "coaps+ws": "ws",
}


def say(*words):
    print(*words, flush=True)


def one_line(payload):
    return payload.decode("utf-8", "replace").replace("\n", "\\n")


async def request(ctx, args):
    method = aiocoap.numbers.codes.Code[args.method.upper()]
    payload = b""
    if args.infile:
        with open(args.infile, "rb") as f:
            payload = f.read()
    msg = aiocoap.Message(code=method, uri=args.uri, payload=payload)
    if args.proxy:
        # aiocoap's forward-proxy client: Proxy-Scheme + Uri-Host + Uri-Port, sent to --proxy.
        ctx = aiocoap.proxy.client.ProxyForwarder(args.proxy, ctx)
    response = await ctx.request(msg).response
    say("CODE", response.code.dotted, len(response.payload))
    if args.out:
        with open(args.out, "wb") as f:
            f.write(response.payload)
    else:
        say("TEXT", one_line(response.payload))
    return 0


async def observe(ctx, args):
    msg = aiocoap.Message(code=aiocoap.GET, uri=args.uri, observe=0)
    req = ctx.request(msg)
    first = await req.response
    say("CODE", first.code.dotted, len(first.payload))
    say("NOTIFY", one_line(first.payload))
    if first.opt.observe is None:
        say("NOT-OBSERVING")
        return 1
    seen = 1
    async for notification in req.observation:
        say("NOTIFY", one_line(notification.payload))
        seen += 1
        if seen >= args.count:
            break
    req.observation.cancel()
    say("CANCELLED")
    await asyncio.sleep(args.linger)
    return 0


class Tuning(TransportTuning):
    pass


async def post_many(ctx, args):
    tuning = Tuning()
    tuning.ACK_TIMEOUT = args.ack_timeout
    tuning.MAX_RETRANSMIT = args.max_retransmit
    # aiocoap keeps NSTART = 1 per remote endpoint (one outstanding CON at a time, the rest
    # queued), so concurrency comes from several contexts: several clients, each its own socket.
    contexts = [ctx] + [
        await aiocoap.Context.create_client_context(transports=["udp6"])
        for _ in range(args.clients - 1)
    ]

    async def one(i):
        tag = "%s-%d" % (args.tag, i)
        # Every --separate-every'th POST asks the server to think (?delay=0.3): separate answer.
        uri = args.uri
        if args.separate_every and i % args.separate_every == 0:
            uri += "?delay=0.3"
        msg = aiocoap.Message(
            code=aiocoap.POST,
            uri=uri,
            payload=tag.encode(),
            transport_tuning=tuning,
        )
        try:
            response = await asyncio.wait_for(
                contexts[i % len(contexts)].request(msg).response, args.request_timeout
            )
        except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
            say("FAIL", tag, type(e).__name__)
            return
        say("ANSWER", tag, response.code.dotted, one_line(response.payload))

    try:
        await asyncio.gather(*(one(i) for i in range(args.n)))
    finally:
        for c in contexts[1:]:
            await c.shutdown()
    say("DONE")
    return 0


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--dtls-psk", metavar="IDENTITY:KEY", help="PSK for coaps:// URIs")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("request")
    p.add_argument("method")
    p.add_argument("uri")
    p.add_argument("--in", dest="infile")
    p.add_argument("--out")
    p.add_argument("--proxy", help="coap://HOST:PORT of a forward proxy")
    p = sub.add_parser("observe")
    p.add_argument("uri")
    p.add_argument("--count", type=int, default=3)
    p.add_argument("--linger", type=float, default=1.0)
    p = sub.add_parser("post-many")
    p.add_argument("uri")
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--tag", default="req")
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--separate-every", type=int, default=0)
    p.add_argument("--request-timeout", type=float, default=30.0)
    p.add_argument("--ack-timeout", type=float, default=2.0)
    p.add_argument("--max-retransmit", type=int, default=4)
    args = parser.parse_args()

    transports = ["udp6"] + (["tinydtls"] if args.dtls_psk else [])
    # RFC 8323's schemes need aiocoap's client transports for them.
    for scheme, transport in RELIABLE_TRANSPORTS.items():
        if args.uri.startswith(scheme + "://") and transport not in transports:
            transports.append(transport)
    ctx = await aiocoap.Context.create_client_context(transports=transports)
    if args.dtls_psk:
        identity, key = args.dtls_psk.split(":", 1)
        psk = {"psk": {"ascii": key}, "client-identity": {"ascii": identity}}
        ctx.client_credentials.load_from_dict({"coaps://*": {"dtls": psk}})
    run = {"request": request, "observe": observe, "post-many": post_many}[args.cmd]
    try:
        return await asyncio.wait_for(run(ctx, args), args.timeout)
    except asyncio.TimeoutError:
        say("TIMEOUT after", args.timeout, "s")
        return 3
    finally:
        try:
            await asyncio.wait_for(ctx.shutdown(), 2.0)
        except asyncio.TimeoutError:
            pass


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
