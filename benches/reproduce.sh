#!/usr/bin/env bash
# Reproduces every table of docs/benchmarks.md on this host, in one run, and keeps the raw
# output under target/bench-results/<UTC timestamp>/ (one file per benchmark).
#
# Usage: benches/reproduce.sh [NAME...]   NAME: proxy_throughput http_throughput proxy_memory retry_listener
#                                               engine_turns wheel wake_precision timer_vs_cyclictest coaps coap_tcp (default: all)
# Peers (Debian libcoap3-bin, PyPI aiocoap) are installed by tests/interop/setup.sh when
# missing (root needed for apt). Close other work first: the harnesses pin themselves to
# CPU 0 and the system under test to CPU 1, and anything else running skews the numbers.
# FIFO_PRIORITY=50 (as root) runs the wake-up precision benchmark under SCHED_FIFO.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL=(proxy_throughput http_throughput proxy_memory retry_listener engine_turns wheel wake_precision timer_vs_cyclictest coaps coap_tcp)
NAMES=("${@:-${ALL[@]}}")
OUT="target/bench-results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"

{
    echo "date: $(date -u)"
    echo "kernel: $(uname -srm)"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "rustc: $(rustc --version)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

cargo bench --no-run --benches >/dev/null
for name in "${NAMES[@]}"; do
    echo "== $name" >&2
    case "$name" in
        timer_vs_cyclictest) benches/timer_vs_cyclictest.sh 2>"$OUT/$name.log" | tee "$OUT/$name.md" ;;
        *) cargo bench --bench "$name" 2>"$OUT/$name.log" | tee "$OUT/$name.md" ;;
    esac
done
echo "results in $OUT" >&2
