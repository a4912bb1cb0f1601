#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios against mrtr-gateway's dual-era front, in
# front of one *modern* (2026-07-28) backend, the suite fixture (`fixture-server --suite`, rmcp):
#
#   1. legacy table: every 2025-11-25 server scenario (the suite's SDK client does `initialize`,
#      holds an Mcp-Session-Id and answers server-to-client requests) through the gateway;
#   2. modern table: every 2026-07-28 server scenario against the fixture directly and through
#      the gateway, side by side;
#   3. the official Python SDK 1.x (PyPI, installed into .tools/python-mcp1) as a legacy client
#      completing two rounds of elicitation and a sampling call (scripts/legacy_python_client.py).
#
#   bash scripts/conformance-legacy.sh                 # run, compare with the expectations below
#   UPDATE_DOCS=1 bash scripts/conformance-legacy.sh   # also rewrite both tables in docs/conformance.md
#
# The fixture answers in SSE (progress and log notifications need a stream). Exits non-zero if a
# scenario listed as passing below fails, or if one that passes directly fails through the gateway
# without being listed in GATEWAY_ONLY_FAILS (with its reason in docs/conformance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS

PROG=conformance-legacy
TOOLS=${TOOLS:-$ROOT/.tools}
RESULTS=$ROOT/conformance-results/legacy
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
DOC=$ROOT/docs/conformance.md
UPDATE_DOCS=${UPDATE_DOCS:-0}

LEGACY=(
    server-initialize server-session-lifecycle ping logging-set-level
    tools-list tools-call-simple-text tools-call-image tools-call-audio tools-call-embedded-resource
    tools-call-mixed-content tools-call-error tools-call-with-progress tools-call-with-logging
    tools-call-sampling tools-call-elicitation elicitation-sep1034-defaults elicitation-sep1330-enums
    json-schema-2020-12 completion-complete
    resources-list resources-read-text resources-read-binary resources-templates-read
    resources-subscribe resources-unsubscribe
    prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource prompts-get-with-image
    server-sse-polling server-sse-multiple-streams dns-rebinding-protection
)
# Legacy scenarios that do not pass through the gateway; each has its reason in docs/conformance.md.
LEGACY_FAILS=()

MODERN=(
    server-stateless caching
    tools-list tools-call-simple-text tools-call-image tools-call-audio tools-call-embedded-resource
    tools-call-mixed-content tools-call-error tools-call-with-progress json-schema-2020-12 completion-complete
    resources-list resources-read-text resources-read-binary resources-templates-read sep-2164-resource-not-found
    prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource prompts-get-with-image
    server-sse-multiple-streams dns-rebinding-protection http-header-validation http-custom-header-server-validation
    input-required-result-basic-elicitation input-required-result-basic-sampling input-required-result-basic-list-roots
    input-required-result-request-state input-required-result-multiple-input-requests input-required-result-multi-round
    input-required-result-missing-input-response input-required-result-non-tool-request input-required-result-result-type
    input-required-result-unsupported-methods input-required-result-tampered-state input-required-result-capability-check
    input-required-result-ignore-extra-params input-required-result-validate-input
)
# Passing directly but not through the gateway; each has its reason in docs/conformance.md.
GATEWAY_ONLY_FAILS=()

# shellcheck source=scripts/conformance-lib.sh
source "$ROOT/scripts/conformance-lib.sh"
install_tools "$TOOLS"
build_binaries

listed() {
    local item=$1; shift
    local s
    for s in "$@"; do [ "$s" = "$item" ] && return 0; done
    return 1
}

# run_scenario LABEL URL SCENARIO SPEC: runs one scenario at spec version SPEC; sets VERDICT
# (PASS: no check failed and one succeeded; SKIP: none failed, none succeeded; FAIL) and CELL.
run_scenario() {
    local label=$1 url=$2 scenario=$3 spec=$4
    local out=$RESULTS/$label/$scenario
    mkdir -p "$out"
    "$NODE" "$SUITE" server --url "$url" --scenario "$scenario" --spec-version "$spec" -o "$out" \
        >"$out/run.log" 2>&1 || true
    local line
    line=$(summarize_checks "$out" '
        const c = require(process.argv[1]);
        const n = s => c.filter(x => x.status === s).length;
        const failed = c.filter(x => x.status === "FAILURE").map(x => x.id);
        const verdict = failed.length > 0 || c.length === 0 ? "FAIL" : n("SUCCESS") > 0 ? "PASS" : "SKIP";
        let text = `${n("SUCCESS")}/${c.length}`;
        const notes = [];
        for (const s of ["WARNING", "SKIPPED"]) if (n(s)) notes.push(`${n(s)} ${s.toLowerCase()}`);
        if (failed.length) notes.push(`failed: ${[...new Set(failed)].join(", ")}`);
        if (notes.length) text += ` (${notes.join("; ")})`;
        console.log(`${verdict} ${text}`);
    ' "FAIL no checks.json")
    VERDICT=${line%% *}
    CELL="$VERDICT ${line#* }"
    printf '%-4s %-8s %-46s %s\n' "$VERDICT" "$label" "$scenario" "${line#* }"
}

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
MRTR_KEYS=$("$GATEWAY" --generate-key conformance-legacy)
export MRTR_KEYS
start fixture "$FIXTURE" --listen 127.0.0.1:0 --suite --sse
FIXTURE_URL=$URL
start gateway "$GATEWAY" --listen 127.0.0.1:0 --backend "suite=$FIXTURE_URL"
GATEWAY_URL=$URL
echo "==> suite fixture (SSE) at $FIXTURE_URL, behind the gateway at $GATEWAY_URL"

PROBLEMS=()
LEGACY_ROWS="| scenario | 2025-11-25 client through the gateway |
|---|---|"
for scenario in "${LEGACY[@]}"; do
    run_scenario legacy "$GATEWAY_URL" "$scenario" 2025-11-25
    LEGACY_ROWS+=$'\n'"| $scenario | $CELL |"
    if listed "$scenario" "${LEGACY_FAILS[@]}"; then
        [ "$VERDICT" = FAIL ] || echo "note: $scenario now passes; remove it from LEGACY_FAILS and update the docs"
    elif [ "$VERDICT" = FAIL ]; then
        PROBLEMS+=("legacy/$scenario")
    fi
done

MODERN_ROWS="| scenario | directly | through the gateway |
|---|---|---|"
for scenario in "${MODERN[@]}"; do
    run_scenario direct "$FIXTURE_URL" "$scenario" 2026-07-28
    direct=$VERDICT direct_cell=$CELL
    run_scenario gateway "$GATEWAY_URL" "$scenario" 2026-07-28
    MODERN_ROWS+=$'\n'"| $scenario | $direct_cell | $CELL |"
    if [ "$direct" = PASS ] && [ "$VERDICT" != PASS ] && ! listed "$scenario" "${GATEWAY_ONLY_FAILS[@]+"${GATEWAY_ONLY_FAILS[@]}"}"; then
        PROBLEMS+=("gateway/$scenario")
    fi
done

echo "==> the Python SDK 1.x (PyPI) as a legacy client through the gateway"
PYENV=$TOOLS/python-mcp1
[ -x "$PYENV/bin/python" ] || python3 -m venv "$PYENV"
"$PYENV/bin/python" -c "import mcp" 2>/dev/null \
    || "$PYENV/bin/pip" install --quiet --disable-pip-version-check "mcp>=1.20,<2"
if ! timeout 120 "$PYENV/bin/python" scripts/legacy_python_client.py "$GATEWAY_URL"; then
    PROBLEMS+=("python-sdk-client")
fi
cp "$LOGS"/*.err "$RESULTS/" 2>/dev/null || true

if [ "$UPDATE_DOCS" = 1 ]; then
    python3 - "$DOC" "$LEGACY_ROWS" "$MODERN_ROWS" <<'EOF'
import re, sys
path, legacy, modern = sys.argv[1:4]
text = open(path).read()
for name, table in (("legacy", legacy), ("modern", modern)):
    pattern = re.compile(r"(<!-- %s-table:start -->\n).*?(<!-- %s-table:end -->)" % (name, name), re.S)
    text, n = pattern.subn(lambda m: m.group(1) + table + "\n" + m.group(2), text)
    if n != 1:
        sys.exit(f"{path}: markers for the {name} table not found")
open(path, "w").write(text)
EOF
    echo "==> tables written to docs/conformance.md"
fi

for p in "${PROBLEMS[@]+"${PROBLEMS[@]}"}"; do
    echo "regression: $p (see conformance-results/legacy/${p/\//\/}/run.log)"
done
echo "dual-era conformance: ${#LEGACY[@]} legacy and ${#MODERN[@]} modern scenarios, ${#PROBLEMS[@]} regressions, $((SECONDS - START)) s"
[ "${#PROBLEMS[@]}" -eq 0 ]
