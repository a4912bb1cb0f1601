# shellcheck shell=bash
# Shared by bench-gateway.sh and bench-connections.sh; not meant to be run itself.
#
# build_bench_binaries builds the binaries the benchmarks run and sets BIN_DIR to where they are.
# PROFILE=release (the default) is the README's one build, `--workspace --bins`: the binaries an
# operator runs and docs/benchmarks.md measures, and nothing to compile after that build (a `-p`
# selection resolves dependency features differently and recompiled the gateway, about a minute).
# PROFILE=debug (CI's smoke runs) is `-p mrtr-gateway -p mrtr-bench`, which resolves as the
# conformance steps' build (see scripts/conformance-lib.sh), so CI compiles nothing for it.
build_bench_binaries() {
    local profile="${PROFILE:-release}"
    case "$profile" in
        release) cargo build --quiet --release --workspace --bins ;;
        debug) cargo build --quiet -p mrtr-gateway -p mrtr-bench --bins ;;
        *) echo "PROFILE must be release or debug, not $profile" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2034 # read by the scripts that source this one
    BIN_DIR="${CARGO_TARGET_DIR:-target}/$profile"
}
