#!/usr/bin/env bash
# Installs the browser that tests/http_browser.rs drives: Debian's `chromium`, run headless.
# Idempotent and quick when it is already there. Never skips: if it cannot be installed or
# does not run, it says why and exits non-zero, and the browser test fails.
#
# Usage: tests/interop/setup_browser.sh [LOCK_DIR]   (default: <repo>/target)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOCK_DIR="${1:-$ROOT/target}"

die() {
    echo "browser setup FAILED: $*" >&2
    exit 1
}

# Serialise concurrent runs, and with setup.sh's apt-get through dpkg's own lock timeout.
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/browser-setup.lock"
flock -w 900 9 || die "could not lock $LOCK_DIR/browser-setup.lock within 900 s"

if ! command -v chromium >/dev/null; then
    [ "$(id -u)" = 0 ] || die "chromium missing and not root: run 'apt-get install chromium' as root"
    echo "browser setup: installing chromium (Debian's package; a first install takes a while)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2 || die "apt-get update failed"
    # Recommends left out: fonts-liberation etc. are not needed to read the DOM.
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium >&2 \
        || die "apt-get install chromium failed"
    command -v chromium >/dev/null || die "chromium installed but not on PATH"
fi

# It must start, not just be on PATH (a missing shared library shows here).
version="$(timeout 60 chromium --headless=new --no-sandbox --version 2>&1)" \
    || die "chromium --version failed: $version"

echo "browser setup: ok ($version)" >&2
