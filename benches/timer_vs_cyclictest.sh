#!/usr/bin/env bash
# timer-bench beside rt-tests' cyclictest on this host, same day, same settings: a 1 ms period,
# 5,000 loops, memory locked, /dev/cpu_dma_latency held at 0, under SCHED_OTHER and under
# SCHED_FIFO 80. RUNS runs of each (default 3), alternating the tools; prints one markdown table
# with the median of the runs and their range. cyclictest's percentiles come from its -h
# histogram (1 µs buckets, nearest rank), timer-bench's from its --json.
#
# Usage: benches/timer_vs_cyclictest.sh    (root: SCHED_FIFO, mlockall, cpu_dma_latency;
#        Debian's rt-tests is installed when cyclictest is missing)
# Env: RUNS=3 LOOPS=5000 PRIORITY=80
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
LOOPS=${LOOPS:-5000}
PRIORITY=${PRIORITY:-80}

if ! command -v cyclictest >/dev/null; then
    apt-get install -y rt-tests >/dev/null 2>&1 || {
        apt-get update >/dev/null && apt-get install -y rt-tests >/dev/null
    }
fi
cargo build --release --bin backoffd >/dev/null 2>&1
TB=target/release/backoffd
RAW=$(mktemp -d)
trap 'rm -rf "$RAW"' EXIT

for run in $(seq 1 "$RUNS"); do
    for policy in other fifo; do
        prio=(); [ "$policy" = fifo ] && prio=(-p "$PRIORITY")
        cyclictest -m -q -i 1000 -l "$LOOPS" -h 20000 "${prio[@]}" >"$RAW/ct-$policy-$run.txt" 2>/dev/null
        fifo=(); [ "$policy" = fifo ] && fifo=(--fifo-priority "$PRIORITY")
        "$TB" timer-bench --interval 1ms --loops "$LOOPS" --json "${fifo[@]}" >"$RAW/tb-$policy-$run.json"
    done
done

python3 - "$RAW" "$RUNS" "$LOOPS" "$PRIORITY" <<'EOF'
import json, statistics, sys
raw, runs, loops, prio = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def cyclictest(path):
    counts, over, mx = [], 0, 0
    for line in open(path):
        if line[:1].isdigit():
            counts.append(int(line.split()[1]))
        elif line.startswith("# Histogram Overflows:"):
            over = int(line.split(":")[1])
        elif line.startswith("# Max Latencies:"):
            mx = int(line.split(":")[1])
    n = sum(counts) + over
    def rank(q):
        want, seen = -(-q * n // 1000), 0
        for us, c in enumerate(counts):
            seen += c
            if seen >= want:
                return float(us)
        return float(mx)
    return {"p50_us": rank(500), "p99_us": rank(990), "max_us": float(mx)}

def cell(values):
    values = sorted(values)
    med = statistics.median_low(values)
    return f"{med:.1f} ({values[0]:.1f}-{values[-1]:.1f})"

rows = []
for policy, label in (("other", "SCHED_OTHER"), ("fifo", f"SCHED_FIFO {prio}")):
    ct = [cyclictest(f"{raw}/ct-{policy}-{r}.txt") for r in range(1, runs + 1)]
    rows.append((f"cyclictest -m -i 1000 -l {loops}" + (f" -p {prio}" if policy == "fifo" else ""), label,
                 [cell([c[k] for c in ct]) for k in ("p50_us", "p99_us", "max_us")], "", "", ""))
    tb = [[json.loads(l) for l in open(f"{raw}/tb-{policy}-{r}.json")] for r in range(1, runs + 1)]
    for i, first in enumerate(tb[0]):
        per = [run[i] for run in tb]
        figures = [cell([p[k] for p in per]) for k in ("p50_us", "p99_us", "max_us")]
        over = blocks = kernel = ""
        if first.get("overhead_p50_us") is not None:
            over = f"{cell([p['overhead_p50_us'] for p in per])} / {cell([p['overhead_p99_us'] for p in per])}"
            r50 = [p["overhead_p50_blocks_us"]["median"] for p in per]
            r99 = [p["overhead_p99_blocks_us"]["median"] for p in per]
            blocks = f"{cell(r50)} / {cell(r99)}"
            kernel = f"{cell([p['kernel_p50_us'] for p in per])} / {cell([p['dispatch_p50_us'] for p in per])}"
        rows.append((f"timer-bench `{first['source']}`", label, figures, over, blocks, kernel))

print(f"median of {runs} runs (range), µs; 1 ms period, {loops} loops each\n")
print("| tool / source | policy | p50 | p99 | max | over nanosleep, whole run: p50 / p99 | over nanosleep, median of blocks: p50 / p99 | kernel / dispatch p50 |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for name, policy, figures, over, blocks, kernel in rows:
    print(f"| {name} | {policy} | " + " | ".join(figures) + f" | {over} | {blocks} | {kernel} |")
EOF
