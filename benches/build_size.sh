#!/usr/bin/env bash
# The core against the full build: lines of Rust each build compiles and its stripped binary.
# "Lines" are those of the files in the build's dep-info that live under src/ (the library and
# the application), each counted up to its unit-test module (`#[cfg(test)] mod ...`), which the
# build leaves out. Usage: benches/build_size.sh   (two release builds; the minimal one in target/minimal)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

measure() { # name target-dir cargo-flags...
    local name=$1 dir=$2
    shift 2
    CARGO_TARGET_DIR=$dir cargo build --release --bin backoffd --quiet "$@"
    local lines
    lines=$(sed -n 's/^[^:]*: //p' "$dir/release/backoffd.d" | tr ' ' '\n' \
        | grep "^$root/src/.*\.rs$" | sort -u \
        | xargs awk 'FNR == 1 { prev = "" }
            !skip[FILENAME] {
                if ($0 ~ /^mod / && prev ~ /^#\[cfg\(test\)\]/) { skip[FILENAME] = 1; n-- } else n++
            }
            { prev = $0 }
            END { print n }')
    local stripped
    stripped=$(mktemp)
    strip -o "$stripped" "$dir/release/backoffd"
    printf '%-8s %7s lines  %9s bytes stripped  (cargo build --release %s)\n' \
        "$name" "$lines" "$(stat -c %s "$stripped")" "$*"
    rm -f "$stripped"
}

measure full "${CARGO_TARGET_DIR:-target}"
measure minimal target/minimal --no-default-features
