#!/usr/bin/env bash
# Installs the independent gRPC implementation the end-to-end tests drive (tests/reconnect_grpcio.rs):
# Python grpcio, pinned, plus the pure-Python h2 package for hand-made HTTP/2 requests, into a
# virtualenv under the cargo target directory. Idempotent: a venv that already has the pinned
# versions is left alone. Fails loudly (non-zero exit, message on stderr) if anything is missing;
# the tests treat that as a failure, never as a reason to skip.
#
# Prints the venv's python path on stdout (tests/reconnect_client.rs uses it).
#
# Usage: tests/interop/setup_grpc.sh [VENV_DIR]
#   VENV_DIR defaults to ${CARGO_TARGET_DIR:-<repo>/target}/grpc-venv.
set -euo pipefail

GRPCIO_VERSION=1.68.1
H2_VERSION=4.1.0

repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${1:-${CARGO_TARGET_DIR:-$repo/target}/grpc-venv}"
python="${PYTHON:-python3}"

fail() {
    echo "setup_grpc.sh: $*" >&2
    exit 1
}

check() {
    "$venv/bin/python" - "$GRPCIO_VERSION" "$H2_VERSION" <<'PY' 2>/dev/null
import sys
import grpc, h2
sys.exit(0 if (grpc.__version__, h2.__version__) == (sys.argv[1], sys.argv[2]) else 1)
PY
}

mkdir -p "$(dirname "$venv")"
# Tests may call this concurrently with .ci/run or each other: one installer at a time.
exec 9>"$venv.lock"
flock 9 || fail "cannot lock $venv.lock"

if [ -x "$venv/bin/python" ] && check; then
    echo "$venv/bin/python"
    exit 0
fi

command -v "$python" >/dev/null || fail "no $python to create the venv with"
echo "setup_grpc.sh: creating $venv (grpcio==$GRPCIO_VERSION, h2==$H2_VERSION)" >&2
"$python" -m venv --clear "$venv" || fail "python3 -m venv $venv failed"
# Binary wheels only: building grpcio from source would take far longer than the tests.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: "grpcio==$GRPCIO_VERSION" "h2==$H2_VERSION" ||
    fail "pip install grpcio==$GRPCIO_VERSION h2==$H2_VERSION failed"
check || fail "$venv does not import grpcio $GRPCIO_VERSION and h2 $H2_VERSION after install"
echo "setup_grpc.sh: ready: $venv" >&2
echo "$venv/bin/python"
