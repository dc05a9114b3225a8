# Shared by fuzz/ci.sh and fuzz/campaign.sh (sourced, not run). Expects to be in fuzz/.

# cargo-fuzz version known to work with the pinned stable toolchain (rustc 1.95).
CARGO_FUZZ_VERSION=0.13.2
# Lets stable rustc accept the sanitizer flags cargo-fuzz passes.
export RUSTC_BOOTSTRAP=1

fuzz_dir="$PWD"
target_dir="${CARGO_TARGET_DIR:-$fuzz_dir/target}"
case "$target_dir" in /*) ;; *) target_dir="$fuzz_dir/$target_dir" ;; esac
export CARGO_TARGET_DIR="$target_dir"

# Installs cargo-fuzz (and a C++ compiler for libFuzzer, on a fresh Debian/Ubuntu CI machine).
ensure_tools() {
    if ! command -v c++ >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq && apt-get install -y -qq g++ >/dev/null
        else
            echo "fuzz: libFuzzer needs a C++ compiler (c++); install g++" >&2
            return 1
        fi
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
        cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
    fi
}

# Builds every target once (release, debug assertions on) and sets fuzz_bin to their directory.
build_all() {
    cargo fuzz build -O
    fuzz_bin="$target_dir/$(rustc -vV | sed -n 's/^host: //p')/release"
}

# All targets named in fuzz/Cargo.toml.
all_targets() {
    cargo fuzz list
}

# run_target NAME SCRATCH_DIR LIBFUZZER_ARGS...
# Runs one target from a scratch copy of seeds/NAME (the repo's seeds are never written to).
# Sets: r_secs r_execs r_eps r_cov r_ft r_corp r_crashes r_rc r_log
run_target() {
    local name=$1 scratch=$2
    shift 2
    rm -rf "$scratch"
    mkdir -p "$scratch/corpus" "$scratch/artifacts"
    cp -R "seeds/$name/." "$scratch/corpus/"
    r_log="$scratch/libfuzzer.log"
    local t0 t1
    t0=$(date +%s.%N)
    r_rc=0
    "$fuzz_bin/$name" "$@" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$scratch/artifacts/" "$scratch/corpus" >"$r_log" 2>&1 || r_rc=$?
    t1=$(date +%s.%N)
    r_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    r_execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$r_log" | tail -1)
    r_eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$r_log" | tail -1)
    local last
    last=$(grep -E '^#[0-9]+.*cov: ' "$r_log" | tail -1 || true)
    r_cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    r_ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    r_corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[A-Za-z]*\).*/\1/p' <<<"$last")
    r_crashes=$(find "$scratch/artifacts" -type f | wc -l)
    : "${r_execs:=?}" "${r_eps:=?}" "${r_cov:=?}" "${r_ft:=?}" "${r_corp:=?}"
}
