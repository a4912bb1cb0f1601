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

PROG=conformance
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

# shellcheck source=scripts/conformance-lib.sh
source "$ROOT/scripts/conformance-lib.sh"
install_tools .tools/
build_binaries

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
PASSED=0
FAILED=0
FAILURES=()
MRTR_KEYS=$("$GATEWAY" --generate-key conformance)
export MRTR_KEYS

for mode in $MODES; do
    start_behind_gateway "$mode" fixture "$FIXTURE" --listen 127.0.0.1:0
    FIXTURE_URL=$BACKEND_URL
    echo "==> fixture ($mode answers) at $FIXTURE_URL and demo beta at $BETA_URL, behind the gateway at $GATEWAY_URL"

    for scenario in "${SCENARIOS[@]}"; do
        out=$RESULTS/$mode/$scenario
        if run_suite "$GATEWAY_URL" "$scenario" "$out"; then
            verdict=PASS
            PASSED=$((PASSED + 1))
        else
            verdict=FAIL
            FAILED=$((FAILED + 1))
            FAILURES+=("$mode/$scenario")
        fi
        summary=$(summarize_checks "$out" '
            const c = require(process.argv[1]);
            const n = s => c.filter(x => x.status === s).length;
            console.log(`${n("SUCCESS")}/${c.length} checks passed` + (n("WARNING") ? `, ${n("WARNING")} warnings` : ""));
        ' "no checks.json")
        printf '%-4s %-4s %-48s %s\n' "$verdict" "$mode" "$scenario" "$summary"
    done
    cp "$LOGS"/*-"$mode".err "$RESULTS/$mode/" 2>/dev/null || true
done

for failure in "${FAILURES[@]+"${FAILURES[@]}"}"; do
    echo "failed: $failure (see conformance-results/$failure/run.log)"
done
echo "conformance through mrtr-gateway: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
