#!/usr/bin/env bash
# Installs the independently written CoAP peers that tests/coap_interop.rs runs against:
#   - aiocoap (PyPI, pinned) with its `oscore` extra (cbor2, cryptography, filelock, ge25519,
#     lakers-python, cbor-diag: tests/oscore_interop.rs's OSCORE client and server) and its
#     `tinydtls` extra (DTLSSocket, built from source: tests/coaps_interop.rs's aiocoap
#     client over DTLS) and its `ws` extra (websockets: tests/coap_tcp_interop.rs's coap+ws
#     client) in a virtualenv under the repo's target/ directory;
#   - autoconf, automake and libtool, which DTLSSocket's build runs on tinydtls;
#   - Debian's libcoap3-bin (coap-client-notls, coap-server-notls, and the DTLS builds on
#     OpenSSL and GnuTLS that tests/coaps_interop.rs runs: coap-client-openssl,
#     coap-client-gnutls, coap-server-openssl, coap-server-gnutls);
#   - curl, the HTTP cross-proxy tests' client (tests/http_cross_proxy.rs).
# Idempotent and quick when both are already there. Never skips: if a peer cannot be
# installed, it says why and exits non-zero, and the interop tests fail.
#
# Usage: tests/interop/setup.sh [VENV_DIR]   (default: <repo>/target/interop-venv)
set -euo pipefail

AIOCOAP_VERSION=0.4.17
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-$ROOT/target/interop-venv}"

die() {
    echo "interop setup FAILED: $*" >&2
    exit 1
}

# Serialise concurrent runs (two test processes, or a developer and CI on one machine).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock -w 600 9 || die "could not lock $VENV.lock within 600 s"

# --- curl (the HTTP cross-proxy tests' client) ----------------------------------------------
if ! command -v curl >/dev/null; then
    [ "$(id -u)" = 0 ] || die "curl missing and not root: run 'apt-get install curl' as root"
    echo "interop setup: installing curl" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2 || die "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends curl >&2 \
        || die "apt-get install curl failed"
fi

# --- DTLSSocket's build tools (it runs tinydtls's autoreconf) ---------------------------------
if ! command -v autoreconf >/dev/null || ! command -v libtoolize >/dev/null \
    || ! command -v automake >/dev/null; then
    [ "$(id -u)" = 0 ] || die "autoconf/automake/libtool missing and not root: run 'apt-get install autoconf automake libtool' as root"
    echo "interop setup: installing autoconf automake libtool" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2 || die "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
        autoconf automake libtool >&2 || die "apt-get install autoconf automake libtool failed"
fi

# --- libcoap3-bin --------------------------------------------------------------------------
LIBCOAP_TOOLS="coap-client-notls coap-server-notls coap-client-openssl coap-client-gnutls coap-server-openssl coap-server-gnutls"
libcoap_ok() {
    for tool in $LIBCOAP_TOOLS; do command -v "$tool" >/dev/null || return 1; done
}
if ! libcoap_ok; then
    if [ "$(id -u)" != 0 ]; then
        die "libcoap's tools ($LIBCOAP_TOOLS) missing and not root: run 'apt-get install libcoap3-bin' as root"
    fi
    echo "interop setup: installing libcoap3-bin" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Wait for a dpkg/apt lock held by another install instead of failing at once.
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2 || die "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends libcoap3-bin >&2 \
        || die "apt-get install libcoap3-bin failed"
    libcoap_ok || die "libcoap3-bin installed but one of $LIBCOAP_TOOLS is not on PATH"
fi

# --- aiocoap in a venv ---------------------------------------------------------------------
# The pinned aiocoap, and what its `oscore` and `tinydtls` extras bring: a venv made before an
# extra was asked for fails here and gets it below.
venv_ok() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$AIOCOAP_VERSION" <<'PY' 2>/dev/null
import sys, aiocoap.meta
import cbor2, cryptography, filelock, lakers
import aiocoap.oscore, aiocoap.oscore_sitewrapper, aiocoap.transports.oscore
import DTLSSocket, aiocoap.transports.tinydtls
import websockets, aiocoap.transports.ws
sys.exit(0 if aiocoap.meta.version == sys.argv[1] else 1)
PY
}

pip_install() {
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "aiocoap[oscore,tinydtls,ws]==$AIOCOAP_VERSION" >&2
}

# A venv whose interpreter runs but lacks the pin or the extra: install into it.
if ! venv_ok && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "interop setup: installing aiocoap[oscore,tinydtls,ws]==$AIOCOAP_VERSION into $VENV" >&2
    pip_install || echo "interop setup: pip install into $VENV failed; rebuilding it" >&2
fi

if ! venv_ok; then
    # The first interpreter that runs, is >= 3.10 and can make a venv (ensurepip present).
    usable() {
        "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
            >/dev/null 2>&1
    }
    PYTHON="${INTEROP_PYTHON:-}"
    if [ -n "$PYTHON" ]; then
        usable "$PYTHON" || die "INTEROP_PYTHON=$PYTHON does not run, is older than 3.10 or lacks venv/ensurepip"
    else
        for candidate in python3.11 python3 /usr/bin/python3; do
            if usable "$candidate"; then PYTHON="$candidate"; break; fi
        done
        [ -n "$PYTHON" ] || die "no Python >= 3.10 with venv/ensurepip found (tried python3.11, python3, /usr/bin/python3; on Debian: apt-get install python3-venv)"
    fi
    echo "interop setup: creating $VENV with $("$PYTHON" --version 2>&1), aiocoap[oscore,tinydtls,ws]==$AIOCOAP_VERSION" >&2
    # --clear: a half-made or stale venv (e.g. its interpreter was removed) is rebuilt.
    "$PYTHON" -m venv --clear "$VENV" >&2 || die "$PYTHON -m venv $VENV failed (python3-venv missing?)"
    pip_install || die "pip install aiocoap[oscore,tinydtls,ws]==$AIOCOAP_VERSION failed"
    venv_ok || die "aiocoap $AIOCOAP_VERSION with its oscore and tinydtls extras still not importable from $VENV/bin/python"
fi

echo "interop setup: ok (libcoap $(dpkg-query -W -f='${Version}' libcoap3-bin 2>/dev/null || echo '?'), aiocoap[oscore,tinydtls,ws] $AIOCOAP_VERSION in $VENV)" >&2
