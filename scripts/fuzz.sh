#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (cargo-fuzz, libFuzzer) for SECONDS each, one after another.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     # default: 60 seconds, every target
#
# Installs cargo-fuzz if it is missing. Targets run without a sanitizer (`-s none`): the crates
# forbid unsafe code, and the exec rate is several times higher; this works on the stable
# toolchain. Each target starts from its committed seeds (fuzz/seeds/TARGET, read only) and grows
# fuzz/corpus/TARGET (git-ignored; kept between runs). A crash leaves its input in
# fuzz/artifacts/TARGET/ and makes the script exit non-zero after the remaining targets ran;
# reproduce one with `cargo fuzz run -s none TARGET fuzz/artifacts/TARGET/crash-...` in fuzz/.
#
# Per target it prints one summary line: executions, executions per second, libFuzzer's coverage
# (`cov`: code edges reached, `ft`: features), corpus size, crashes. Full logs: fuzz/logs/.
#
# FUZZ_CODEGEN_UNITS=16 builds faster (cargo-fuzz's default is 1, for the fastest runs): CI sets
# it, since its runs are short.
#
# FUZZ_RUNS=N (CI) makes the run bounded instead of timed: each target executes N inputs from
# libFuzzer seed FUZZ_SEED (default 1), starting from the committed seeds alone (a fresh,
# discarded corpus). It is repeatable only up to a point: the mutations follow the seed, but the
# coverage that steers them also depends on the envelopes' random nonces (and hash seeds), so two
# machines drift apart after some hundreds of inputs. A failure is always a real finding,
# though: the script prints the failing input in base64 (`base64 -d > crash` reproduces it).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

# SECONDS is optional: a first argument that is not a number is the first target, not a time
# (read as a time, a target name would be dropped without a word).
seconds=60
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
    seconds=$1
    shift
fi

started=$SECONDS
if ! command -v cargo-fuzz >/dev/null; then
    echo "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
    echo "cargo-fuzz installed in $((SECONDS - started)) s"
fi

# The instrumented build lives in fuzz/target, apart from the workspace's builds (other flags).
export CARGO_TARGET_DIR="$PWD/target"
# The same options for build and run, or `cargo fuzz run` would build again.
options=(-s none)
if [ -n "${FUZZ_CODEGEN_UNITS:-}" ]; then
    options+=(--codegen-units "$FUZZ_CODEGEN_UNITS")
fi
built=$SECONDS
cargo fuzz build "${options[@]}"
echo "fuzz targets built in $((SECONDS - built)) s"

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

mkdir -p logs
failed=()
printf '%-16s %12s %8s %7s %7s %7s %8s\n' target execs exec/s cov ft corpus crashes
for target in "${targets[@]}"; do
    log="logs/$target.log"
    if [ -n "${FUZZ_RUNS:-}" ]; then
        corpus=$(mktemp -d)
        budget=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
    else
        corpus="corpus/$target"
        mkdir -p "$corpus"
        budget=(-max_total_time="$seconds")
    fi
    status=0
    cargo fuzz run "${options[@]}" "$target" "$corpus" "seeds/$target" -- \
        "${budget[@]}" -dict=dicts/mcp.dict -max_len=16384 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corpus_size=$(find "$corpus" -type f | wc -l)
    if [ -n "${FUZZ_RUNS:-}" ]; then
        rm -rf "$corpus"
    fi
    crashes=0
    if [ "$status" -ne 0 ]; then
        crashes=$(find "artifacts/$target" -type f 2>/dev/null | wc -l)
        failed+=("$target")
    fi
    printf '%-16s %12s %8s %7s %7s %7s %8s\n' "$target" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
        "$corpus_size" "$crashes"
done
echo "fuzzing took $((SECONDS - started)) s in all"

if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]} (crash inputs in fuzz/artifacts/; logs in fuzz/logs/)" >&2
    for target in "${failed[@]}"; do
        grep -m 5 -A 2 -E 'panicked at|ERROR: libFuzzer|^Error' "logs/$target.log" >&2 || true
        for crash in "artifacts/$target"/*; do
            [ -f "$crash" ] && echo "input $crash, base64: $(base64 -w0 "$crash")" >&2
        done
    done
    exit 1
fi
