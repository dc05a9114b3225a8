"""An aiocoap OSCORE (RFC 8613) server for the interop tests (tests/oscore_interop.rs).

A resource site wrapped in aiocoap.oscore_sitewrapper.OscoreSiteWrapper, which unprotects
each OSCORE request and protects its answers. The security context is RFC 8613 Appendix C.1.1's
test vector (static test keys, nothing secret): master secret 0102..10, master salt
9e7ca92223786340, no ID context; this server's Sender ID is 0x01 and the client's is empty. It
is written as settings.json into --context-dir (which must be fresh or this server's own:
aiocoap keeps its sequence numbers and replay window there), loaded as an
aiocoap.oscore.FilesystemSecurityContext.

Binds UDP on --host, port 0 (the kernel picks a free one), prints `BIG <len> <sha256 hex>` (what
/big holds) and `READY <port>` on stdout, then serves until killed or until stdin closes.

Every resource answers only requests that arrived OSCORE-protected (the request's remote is
an OSCOREAddress, which only the site wrapper sets after a successful unprotect); a plain
request gets 4.01. Each served request prints `SERVED <METHOD> <path> <payload length>`.

  /hello   GET: "hello over OSCORE"
  /echo    POST: the request body back, byte for byte, 2.04 (block-wise both ways, inner
           Block1/Block2, when it is longer than 1024 bytes)
  /big     GET: --big-size deterministic bytes (inner Block2)
  /clock   observable: an integer incremented every --tick seconds; each change notifies;
           prints `OBSERVERS <n>` whenever the number of observers changes

Every stdout line is flushed at once: the Rust test reads them as they come.
"""

import argparse
import asyncio
import hashlib
import json
import os
import sys

import aiocoap
import aiocoap.credentials
import aiocoap.error
import aiocoap.oscore
import aiocoap.resource as resource
from aiocoap.numbers.codes import Code
from aiocoap.oscore_sitewrapper import OscoreSiteWrapper
from aiocoap.transports.oscore import OSCOREAddress

# RFC 8613 Appendix C.1.1 (test keys), server side.
CONTEXT = {
    "secret_hex": "0102030405060708090a0b0c0d0e0f10",
    "salt_hex": "9e7ca92223786340",
    "sender-id_hex": "01",
    "recipient-id_hex": "",
}


def say(*words):
    print(*words, flush=True)


def big_body(size):
    """The same pattern tests/peers/mod.rs's big_body builds: byte i is (i*31 + i//256) % 251."""
    return bytes((i * 31 + i // 256) % 251 for i in range(size))


def load_context(directory):
    """Writes the static context into `directory` (kept if already there) and loads it."""
    os.makedirs(directory, exist_ok=True)
    settings = os.path.join(directory, "settings.json")
    if not os.path.exists(settings):
        with open(settings, "w") as f:
            json.dump(CONTEXT, f)
    return aiocoap.oscore.FilesystemSecurityContext(directory)


def served(request, name):
    """Refuses a request that did not come through OSCORE; logs one that did."""
    if not isinstance(request.remote, OSCOREAddress):
        raise aiocoap.error.Unauthorized("OSCORE required")
    say("SERVED", request.code, name, len(request.payload))


class Hello(resource.Resource):
    async def render_get(self, request):
        served(request, "/hello")
        return aiocoap.Message(payload=b"hello over OSCORE")


class Echo(resource.Resource):
    async def render_post(self, request):
        served(request, "/echo")
        return aiocoap.Message(code=Code.CHANGED, payload=request.payload)


class Big(resource.Resource):
    def __init__(self, body):
        super().__init__()
        self.body = body

    async def render_get(self, request):
        served(request, "/big")
        return aiocoap.Message(payload=self.body)


class Clock(resource.ObservableResource):
    def __init__(self, tick):
        super().__init__()
        self.value = 0
        self.tick = tick

    async def run(self):
        while True:
            await asyncio.sleep(self.tick)
            self.value += 1
            self.updated_state()

    def update_observation_count(self, count):
        say("OBSERVERS", count)

    async def render_get(self, request):
        served(request, "/clock")
        return aiocoap.Message(payload=str(self.value).encode())


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--context-dir", required=True)
    parser.add_argument("--tick", type=float, default=0.2)
    parser.add_argument("--big-size", type=int, default=4096)
    args = parser.parse_args()

    body = big_body(args.big_size)
    clock = Clock(args.tick)
    site = resource.Site()
    site.add_resource(["hello"], Hello())
    site.add_resource(["echo"], Echo())
    site.add_resource(["big"], Big(body))
    site.add_resource(["clock"], clock)

    credentials = aiocoap.credentials.CredentialsMap()
    credentials[":client"] = load_context(args.context_dir)
    wrapped = OscoreSiteWrapper(site, credentials)

    ctx = await aiocoap.Context.create_server_context(
        wrapped, bind=(args.host, 0), transports=["udp6"]
    )
    sock = ctx.request_interfaces[0].token_interface.message_interface.transport
    port = sock.get_extra_info("socket").getsockname()[1]
    clock_task = asyncio.create_task(clock.run())  # noqa: F841 - kept alive until exit
    say("BIG", len(body), hashlib.sha256(body).hexdigest())
    say("READY", port)
    # Serve until killed, or until the test process goes away (stdin closes).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
