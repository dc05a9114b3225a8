#!/usr/bin/env bash
# CI fuzz smoke test: builds every cargo-fuzz target once, then runs each from its seed corpus
# (fuzz/seeds/<target>, copied to a scratch dir under the target dir) for a fixed number of
# executions. Fails on any crash, leak, timeout or OOM; prints one line per target.
#
# Usage: fuzz/ci.sh [RUNS]   (default 400000 executions per target; about 3.5 min in all with the build on 2 vCPUs)
set -euo pipefail
cd "$(dirname "$0")"
. ./common.sh

runs="${1:-${FUZZ_CI_RUNS:-400000}}"
ensure_tools
start=$(date +%s)
build_all
echo "fuzz: built all targets in $(($(date +%s) - start)) s"

failed=()
for t in $(all_targets); do
    run_target "$t" "$target_dir/ci-fuzz/$t" -runs="$runs"
    printf 'fuzz %-15s runs %-8s %6s s  cov %-6s ft %-6s corp %-10s %s\n' \
        "$t" "$r_execs" "$r_secs" "$r_cov" "$r_ft" "$r_corp" \
        "$([ "$r_rc" = 0 ] && [ "$r_crashes" = 0 ] && echo ok || echo "FAILED (exit $r_rc)")"
    if [ "$r_rc" != 0 ] || [ "$r_crashes" != 0 ]; then
        failed+=("$t")
        grep -E -A30 '^==[0-9]+==|panicked|SUMMARY' "$r_log" | head -60 >&2 || true
        ls "$target_dir/ci-fuzz/$t/artifacts" >&2
    fi
done
echo "fuzz: total $(($(date +%s) - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (logs and inputs under $target_dir/ci-fuzz/)" >&2
    exit 1
fi
