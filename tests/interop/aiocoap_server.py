"""An aiocoap CoAP server for the interop tests (tests/coap_interop.rs).

Binds UDP on --host, port 0 (the kernel picks a free one), prints `READY <port>` on stdout,
then serves until killed. Resources:

  /hello      GET: "hello from aiocoap" (piggybacked answer)
  /slow       GET: sleeps --slow seconds first, so aiocoap sends an empty ACK after 0.1 s and
              the answer as a separate response
  /big        GET: --big-size deterministic bytes (block-wise, Block2)
  /upload     PUT/POST: stores the body (block-wise, Block1), answers 2.04 "stored <len>";
              GET: returns the stored body
  /counter    POST: increments the counter, answers 2.04 with the new value as text and prints
              `EXEC <request payload> <value>` on stdout (with `?delay=S`, after sleeping S s,
              so the answer is separate); GET: the current value
  /clock      observable: an integer incremented every --tick seconds; each change notifies;
              prints `OBSERVERS <n>` on stdout whenever the number of observers changes
  /tagged     GET: the stored value with ETag `tag<version>` and Max-Age --tagged-max-age; a
              request naming the current ETag gets 2.03 Valid (RFC 7252 §5.10.6.2). Prints
              `TAGGED GET <request ETags in hex, comma-separated, or ->` and, for a 2.03,
              `TAGGED VALID`. PUT: a new value and version, 2.04, prints `TAGGED PUT`
  /echo       every method (GET, POST, PUT, DELETE, FETCH, PATCH): answers with
              `<METHOD> <payload length> cf=<Content-Format or ->` as text/plain;charset=utf-8
              (Content-Format 0), with the code the method's success has (2.05 for GET and
              FETCH, 2.01 for POST with Location-Path /echo/new, 2.04 for PUT and PATCH,
              2.02 for DELETE), and prints `ECHO <METHOD>`
  /json       GET: {"t": 21.5} as application/json (Content-Format 50)
  /crclock    observable like /clock, but each payload tries to inject Server-Sent Events
              fields with bare CRs (issue 25): `<n>\rid: 999\rretry: 86400000\revent: admin`
              `\r\rdata: forged-event`, as text/plain;charset=utf-8

Every stdout line is flushed at once: the Rust test reads them as they come.
"""

import argparse
import asyncio
import sys

import aiocoap
import aiocoap.resource as resource
from aiocoap.numbers.codes import Code


def say(*words):
    print(*words, flush=True)


def big_body(size):
    """The same pattern the Rust test builds: byte i is (i * 31 + i // 256) % 251."""
    return bytes((i * 31 + i // 256) % 251 for i in range(size))


class Hello(resource.Resource):
    async def render_get(self, request):
        return aiocoap.Message(payload=b"hello from aiocoap")


class Slow(resource.Resource):
    def __init__(self, delay):
        super().__init__()
        self.delay = delay

    async def render_get(self, request):
        await asyncio.sleep(self.delay)
        return aiocoap.Message(payload=b"slow hello after %.1f s" % self.delay)


class Big(resource.Resource):
    def __init__(self, size):
        super().__init__()
        self.body = big_body(size)

    async def render_get(self, request):
        return aiocoap.Message(payload=self.body)


class Upload(resource.Resource):
    def __init__(self):
        super().__init__()
        self.body = b""

    async def render_get(self, request):
        return aiocoap.Message(payload=self.body)

    async def render_put(self, request):
        self.body = request.payload
        say("UPLOAD", len(self.body))
        return aiocoap.Message(code=Code.CHANGED, payload=b"stored %d" % len(self.body))

    render_post = render_put


class Counter(resource.Resource):
    def __init__(self):
        super().__init__()
        self.value = 0

    async def render_get(self, request):
        return aiocoap.Message(payload=str(self.value).encode())

    async def render_post(self, request):
        # `?delay=S`: think first, so aiocoap acknowledges after 0.1 s and answers separately.
        for query in request.opt.uri_query:
            if query.startswith("delay="):
                await asyncio.sleep(float(query[len("delay=") :]))
        self.value += 1
        tag = request.payload.decode("ascii", "replace").replace(" ", "_") or "-"
        say("EXEC", tag, self.value)
        return aiocoap.Message(code=Code.CHANGED, payload=str(self.value).encode())


class Tagged(resource.Resource):
    def __init__(self, max_age):
        super().__init__()
        self.value = b"v1"
        self.version = 1
        self.max_age = max_age

    def etag(self):
        return b"tag%d" % self.version

    async def render_get(self, request):
        etags = list(request.opt.etags)
        say("TAGGED", "GET", ",".join(e.hex() for e in etags) or "-")
        if self.etag() in etags:
            say("TAGGED", "VALID")
            return aiocoap.Message(code=Code.VALID, etag=self.etag(), max_age=self.max_age)
        return aiocoap.Message(payload=self.value, etag=self.etag(), max_age=self.max_age)

    async def render_put(self, request):
        self.value = request.payload
        self.version += 1
        say("TAGGED", "PUT")
        return aiocoap.Message(code=Code.CHANGED)


class Echo(resource.Resource):
    async def answer(self, request, code, method, **extra):
        say("ECHO", method)
        cf = request.opt.content_format
        text = "%s %d cf=%s" % (method, len(request.payload), "-" if cf is None else int(cf))
        return aiocoap.Message(code=code, payload=text.encode(), content_format=0, **extra)

    async def render_get(self, request):
        return await self.answer(request, Code.CONTENT, "GET")

    async def render_fetch(self, request):
        return await self.answer(request, Code.CONTENT, "FETCH")

    async def render_post(self, request):
        return await self.answer(request, Code.CREATED, "POST", location_path=("echo", "new"))

    async def render_put(self, request):
        return await self.answer(request, Code.CHANGED, "PUT")

    async def render_patch(self, request):
        return await self.answer(request, Code.CHANGED, "PATCH")

    async def render_delete(self, request):
        return await self.answer(request, Code.DELETED, "DELETE")


class Json(resource.Resource):
    async def render_get(self, request):
        return aiocoap.Message(payload=b'{"t": 21.5}', content_format=50)


class Clock(resource.ObservableResource):
    def __init__(self, tick):
        super().__init__()
        self.value = 0
        self.tick = tick
        self.task = None

    async def run(self):
        while True:
            await asyncio.sleep(self.tick)
            self.value += 1
            self.updated_state()

    def update_observation_count(self, count):
        say("OBSERVERS", count)

    async def render_get(self, request):
        return aiocoap.Message(payload=str(self.value).encode())


class InjectingClock(Clock):
    """A clock whose notifications end lines with bare CRs, as a hostile origin might."""

    INJECTION = "\rid: 999\rretry: 86400000\revent: admin\r\rdata: forged-event"

    def update_observation_count(self, count):
        say("CROBSERVERS", count)

    async def render_get(self, request):
        payload = (str(self.value) + self.INJECTION).encode()
        return aiocoap.Message(payload=payload, content_format=0)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--slow", type=float, default=1.5)
    parser.add_argument("--tick", type=float, default=0.2)
    parser.add_argument("--big-size", type=int, default=4096)
    parser.add_argument("--tagged-max-age", type=int, default=60)
    args = parser.parse_args()

    clock = Clock(args.tick)
    crclock = InjectingClock(args.tick)
    site = resource.Site()
    site.add_resource(["hello"], Hello())
    site.add_resource(["slow"], Slow(args.slow))
    site.add_resource(["big"], Big(args.big_size))
    site.add_resource(["upload"], Upload())
    site.add_resource(["counter"], Counter())
    site.add_resource(["clock"], clock)
    site.add_resource(["tagged"], Tagged(args.tagged_max_age))
    site.add_resource(["echo"], Echo())
    site.add_resource(["json"], Json())
    site.add_resource(["crclock"], crclock)

    ctx = await aiocoap.Context.create_server_context(
        site, bind=(args.host, 0), transports=["udp6"]
    )
    sock = ctx.request_interfaces[0].token_interface.message_interface.transport
    port = sock.get_extra_info("socket").getsockname()[1]
    clock.task = asyncio.create_task(clock.run())
    crclock.task = asyncio.create_task(crclock.run())
    say("READY", port)
    # Serve until killed, or until the test process goes away (stdin closes).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
