#!/usr/bin/env bash
# Installs grpcio 1.68.1 into target/grpc-venv for the interop tests against grpc's Python
# implementation. Idempotent: creates the venv only if missing and installs only if grpcio is
# not importable. Fails loudly (non-zero exit, message on stderr); tests never skip on it.
# Prints the venv's python path on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/target/grpc-venv"
python="$venv/bin/python"
mkdir -p "$root/target"
# One setup at a time (parallel test processes); flock is util-linux, present on Debian.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$root/target/.grpc-venv.lock"
    flock 9
fi
if [ ! -x "$python" ]; then
    python3 -m venv "$venv" >&2 || { echo "setup_grpc.sh: cannot create $venv (python3 -m venv)" >&2; exit 1; }
fi
if ! "$python" -c 'import grpc, sys; sys.exit(grpc.__version__ != "1.68.1")' 2>/dev/null; then
    "$python" -m pip install --quiet --disable-pip-version-check 'grpcio==1.68.1' >&2 \
        || { echo "setup_grpc.sh: pip install grpcio==1.68.1 failed" >&2; exit 1; }
    "$python" -c 'import grpc' || { echo "setup_grpc.sh: grpcio still not importable" >&2; exit 1; }
fi
echo "$python"
