#!/usr/bin/env bash
# A longer fuzzing campaign: every target (or the ones named) for SECONDS each, starting from
# fuzz/seeds/<target> copied to a scratch dir under the target dir (the grown corpora and any
# crash inputs stay there: $CARGO_TARGET_DIR/campaign/<target>/). Prints a markdown table.
#
# Usage: fuzz/campaign.sh SECONDS [TARGET...]
set -euo pipefail
secs="${1:?usage: fuzz/campaign.sh SECONDS [TARGET...]}"
shift
cd "$(dirname "$0")"
. ./common.sh

ensure_tools
build_all >&2
if [ $# -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(all_targets); fi

echo "| target | seconds | execs | execs/s | cov (edges) | ft (features) | corpus (files/size) | crashes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
crashed=0
for t in "${targets[@]}"; do
    run_target "$t" "$target_dir/campaign/$t" -max_total_time="$secs"
    echo "| $t | $r_secs | $r_execs | $r_eps | $r_cov | $r_ft | $r_corp | $r_crashes |"
    if [ "$r_rc" != 0 ] || [ "$r_crashes" != 0 ]; then
        crashed=1
        echo "campaign: $t exited $r_rc; log $r_log" >&2
    fi
done
exit "$crashed"
