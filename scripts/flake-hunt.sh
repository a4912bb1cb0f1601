#!/usr/bin/env bash
# Flake hunt (issue 26): runs the workspace's test suite, the README's `cargo test --workspace`,
# many times over, some of the runs with cores kept busy, and reports every test that ever
# failed, with how often and under which load. Exits non-zero if any test failed in any run.
#
#   bash scripts/flake-hunt.sh                        # 20 runs, every second one with 1 core busy
#   bash scripts/flake-hunt.sh --runs 40 --loaded 20 --load-cores 2
#   bash scripts/flake-hunt.sh --runs 100 --loaded 50 -- --test it -- operations::   # one file's tests
#
# Arguments after `--` go to `cargo test --workspace --no-fail-fast` (`--test it -- MODULE::`
# there picks one test file's tests, `--test NAME` one binary; neither changes the package
# selection, so nothing is recompiled with other features). Each run's output and a summary
# (summary.txt, failures.tsv) are kept in target/flake-hunt/<timestamp>/.
#
# Test binaries run their tests on parallel threads, as `cargo test` does (not a process per
# test, as nextest would): races between tests of one binary are what this looks for.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=20
loaded=""
load_cores=1
cargo_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --loaded) loaded=$2; shift 2 ;;
        --load-cores) load_cores=$2; shift 2 ;;
        --) shift; cargo_args=("$@"); break ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "flake-hunt.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$loaded" ] || loaded=$((runs / 2))
if [ "$loaded" -gt "$runs" ]; then
    echo "flake-hunt.sh: --loaded $loaded is more than --runs $runs" >&2
    exit 2
fi

target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
out="$target_dir/flake-hunt/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
command=(cargo test --workspace --no-fail-fast "${cargo_args[@]}")
# `--no-run` before the arguments: after a `--` of theirs it would go to the test binaries.
build=(cargo test --workspace --no-fail-fast --no-run "${cargo_args[@]}")
echo "==> building once: ${build[*]}"
"${build[@]}" >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }

# Busy loops, one per core to load; killed when the run ends (or the script does).
load_pids=()
start_load() {
    local i
    for ((i = 0; i < load_cores; i++)); do
        bash -c 'while :; do :; done' &
        load_pids+=($!)
    done
}
stop_load() {
    if [ ${#load_pids[@]} -gt 0 ]; then
        kill "${load_pids[@]}" 2>/dev/null || true
        wait "${load_pids[@]}" 2>/dev/null || true
    fi
    load_pids=()
}
trap stop_load EXIT

# Loaded runs are spread over the hunt (every k-th), not bunched at its end.
is_loaded() {
    local run=$1
    [ "$loaded" -gt 0 ] || return 1
    local every=$(((runs + loaded - 1) / loaded))
    [ $((run % every)) -eq 0 ] && [ $((run / every)) -le "$loaded" ]
}

started=$SECONDS
: >"$out/runs.tsv"
for ((run = 1; run <= runs; run++)); do
    mode=idle
    if is_loaded "$run"; then
        mode="loaded-$load_cores"
        start_load
    fi
    run_started=$SECONDS
    status=0
    "${command[@]}" >"$out/run-$run.log" 2>&1 || status=$?
    stop_load
    printf '%d\t%s\t%d\t%d\n' "$run" "$mode" "$status" $((SECONDS - run_started)) >>"$out/runs.tsv"
    printf 'run %d/%d (%s): exit %d in %d s\n' "$run" "$runs" "$mode" "$status" $((SECONDS - run_started))
done

status=0
python3 - "$out" <<'PY' || status=$?
import collections, pathlib, re, sys

out = pathlib.Path(sys.argv[1])
runs = [line.split("\t") for line in (out / "runs.tsv").read_text().splitlines()]
failed = collections.defaultdict(list)  # test -> [(run, mode)]
binaries = collections.defaultdict(list)  # a binary that ended without naming a failed test
suites = 0
for run, mode, status, _ in runs:
    text = (out / f"run-{run}.log").read_text(errors="replace")
    # `Running tests/it/main.rs (target/debug/deps/it-hash)` and `Doc-tests crate`; a test's name
    # in an `it` binary starts with its file's module (`attacks::...`)
    current = None
    named = set()
    for line in text.splitlines():
        m = re.match(r"\s+Running (\S+) \((\S+)\)", line) or re.match(r"\s+Doc-tests (\S+)", line)
        if m:
            current = m.group(1)
            suites += 1
            continue
        # `test name ... FAILED` (the default output), `name --- FAILED` (with -q)
        m = re.match(r"test (.+?) \.\.\. FAILED$", line) or re.match(r"(\S+) --- FAILED$", line)
        if m and (current, m.group(1)) not in named:
            failed[f"{current}: {m.group(1)}"].append((run, mode))
            named.add((current, m.group(1)))
    if status != "0" and not named:
        binaries[f"run {run}"].append(mode)

lines = []
idle = sum(1 for r in runs if r[1] == "idle")
lines.append(f"{len(runs)} runs ({idle} idle, {len(runs) - idle} loaded), {suites} test suites run in all")
lines.append(f"runs with a non-zero exit: {sum(1 for r in runs if r[2] != '0')}")
if failed:
    lines.append("tests that failed (test: runs, mode):")
    for test, where in sorted(failed.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(where)}/{len(runs)}  {test}: " + ", ".join(f"{r} ({m})" for r, m in where))
else:
    lines.append("no test failed")
for run, modes in binaries.items():
    lines.append(f"  {run} ({modes[0]}) failed without naming a failed test: see run-{run.split()[1]}.log")
summary = "\n".join(lines)
(out / "summary.txt").write_text(summary + "\n")
with open(out / "failures.tsv", "w") as tsv:
    for test, where in failed.items():
        for run, mode in where:
            tsv.write(f"{test}\t{run}\t{mode}\n")
print(summary)
sys.exit(1 if failed or binaries else 0)
PY
echo "flake-hunt.sh: $runs runs in $((SECONDS - started)) s; logs and summary in $out"
exit $status
