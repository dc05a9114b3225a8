#!/usr/bin/env bash
# Installs the browser that tests/http_browser.rs drives: Debian's `chromium`, run headless.
# Idempotent and quick when it is already there. Never skips: if it cannot be installed or
# does not run, it says why and exits non-zero, and the browser test fails.
#
# Usage: tests/interop/setup_browser.sh [LOCK_FILE]
#   (default: <repo>/target/interop-venv.lock, the lock setup.sh takes for its default venv)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOCK="${1:-$ROOT/target/interop-venv.lock}"

die() {
    echo "browser setup FAILED: $*" >&2
    exit 1
}

# Serialise concurrent runs, and with setup.sh (same lock): their apt-get runs never overlap.
mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock -w 900 9 || die "could not lock $LOCK within 900 s"

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

# The binary must load, not just be on PATH (a missing shared library shows here). Debian's
# launcher script may print a warning of its own first: the version is the last line.
out="$(timeout 60 chromium --version 2>&1)" || die "chromium --version failed: $out"

echo "browser setup: ok ($(printf '%s\n' "$out" | tail -n 1))" >&2
