#!/usr/bin/env bash
# Bridged tasks with real parts (issue 39's proof): a legacy backend's own requests reach a
# 2026-07-28 client that declares the Tasks extension, through two mrtr-gateway replicas behind
# nginx round-robin (no stickiness), each advertising its own URL (--advertise-url).
#
#   * backends: @modelcontextprotocol/server-everything (npm; its elicitation and sampling tools)
#     and a Python SDK 1.x FastMCP server whose tools use ctx.elicit and a sampling request
#     (scripts/fastmcp1_elicit_server.py), both initialize-era over Streamable HTTP; and the same
#     FastMCP server over stdio, run by each replica per principal (process-per-principal);
#   * the client: scripts/bridged_tasks_client.py, raw JSON-RPC (no SDK ships Tasks for Python);
#     each task is polled through nginx, so polls land on the replica that does not own it;
#   * checks: each tool's task through input_required (the backend's request in inputRequests),
#     tasks/update, completed with the backend's result; polls answered by both replicas; cancel;
#     a client without Tasks told about the extension; the Python SDK 2.x (no Tasks) on the
#     legacy-era path, where FastMCP's ctx.elicit reaches it in its call;
#   * faults: the client never answers (failed after bridged-task-answer-timeout); the backend
#     killed mid-task (failed), over HTTP and over stdio; the owner replica killed with SIGKILL (failed, naming it, through
#     the survivor); each replica's forward counter.
#
#   bash scripts/bridged-tasks.sh
#
# Installs into the git-ignored .tools/ (reference-servers/ with npm, python-mcp1/ and
# python-mcp2/ venvs) and reuses the debug build of the conformance scripts; nginx and jq from apt
# when missing. Prints a PASS or FAIL line per check; exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
PROG=bridged-tasks
TOOLS=${TOOLS:-$ROOT/.tools}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# shellcheck source=scripts/conformance-lib.sh
source scripts/conformance-lib.sh
# shellcheck source=scripts/nginx-lib.sh
source scripts/nginx-lib.sh

missing=()
for tool in nginx jq; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> ${missing[*]} from apt-get (RUNLEVEL=1: no system service starts)"
    { apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } \
        || { echo "$PROG: ${missing[*]} needed" >&2; exit 1; }
fi
install_reference_servers
mcp_venv "$TOOLS/python-mcp1" "mcp>=1.20,<2"
mcp_venv "$TOOLS/python-mcp2" "mcp==$MCP2_VERSION"
PY1=$TOOLS/python-mcp1/bin/python
build_binaries
MRTR_KEYS=$("$GATEWAY" --generate-key bridged)
export MRTR_KEYS

FAILED=()
pass() { echo "PASS: $*"; }
failed() { echo "FAIL: $*"; FAILED+=("$*"); }

start_everything
FASTMCP_PORT=$(free_port)
start_fastmcp() {
    start fastmcp "$PY1" scripts/fastmcp1_elicit_server.py "$FASTMCP_PORT"
    FASTMCP_PID=${PIDS[-1]}
    FASTMCP_URL=$URL
}
start_fastmcp

cat >"$LOGS/gateway.toml" <<TOML
# The fault of a client that never answers takes this long.
bridged-task-answer-timeout = 3
# The client names its principal here: a stdio server's requests reach a client only from the
# principal's own process.
principal-header = "x-principal"
# For clients without Tasks: initialize-era there.
legacy-era-path = "/mcp-legacy"

[[backend]]
name = "everything"
url = "http://127.0.0.1:$EVERYTHING_PORT/mcp"

[[backend]]
name = "fastmcp"
url = "$FASTMCP_URL"

[[backend]]
name = "fastmcp-stdio"
command = ["$PY1", "$ROOT/scripts/fastmcp1_elicit_server.py", "stdio"]
era = "legacy"
process-per-principal = true
TOML
# Each replica's port is chosen before it starts: it advertises its own URL.
REPLICA_PORTS=("$(free_port)" "$(free_port)")
ADMIN_PORTS=("$(free_port)" "$(free_port)")
REPLICA_PIDS=()
for i in 0 1; do
    port=${REPLICA_PORTS[$i]}
    start "replica-$i" "$GATEWAY" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:${ADMIN_PORTS[$i]}" \
        --config "$LOGS/gateway.toml" --advertise-url "http://127.0.0.1:$port/mcp"
    REPLICA_PIDS+=("${PIDS[-1]}")
done
admin_url() { echo "http://127.0.0.1:${ADMIN_PORTS[$1]}"; }

# X-Upstream tells the client which replica answered, to see the polls spread.
start_round_robin "$LOGS" "${REPLICA_PORTS[@]}"
for _ in $(seq 1 100); do curl -s --max-time 1 -o /dev/null "$LB" && break; sleep 0.1; done
# Both replicas must have found both backends legacy before the first call.
for i in 0 1; do
    for _ in $(seq 1 200); do
        curl -s "$(admin_url "$i")/readyz" | grep -q '"fastmcp":{[^}]*"era":"legacy"' && break
        sleep 0.1
    done
done

CLIENT=(python3 scripts/bridged_tasks_client.py)
# checks NAME CMD...: runs a client that prints PASS and FAIL lines, indented; each FAIL is a
# failure, and so is the client's own exit status (an exception) or a run without a PASS.
checks() {
    local name=$1 status=0; shift
    "$@" >"$LOGS/$name.out" 2>&1 || status=$?
    sed 's/^/    /' "$LOGS/$name.out"
    while read -r line; do FAILED+=("${line#FAIL: }"); done < <(grep '^FAIL' "$LOGS/$name.out" || true)
    grep -q '^PASS' "$LOGS/$name.out" || failed "$name printed no check"
    [ "$status" -eq 0 ] || failed "$name exited with $status"
}

echo "==> the tasks of both backends through nginx ($LB)"
checks flows "${CLIENT[@]}" flows "$LB"

# Straight to one replica: a legacy client's answers must reach the replica its call waits on,
# which needs affinity on Mcp-Session-Id (docs/gateway.md), not this round-robin.
echo "==> the Python SDK $MCP2_VERSION (no Tasks) on the legacy-era path of one replica"
checks legacy-era timeout 60 "$TOOLS/python-mcp2/bin/python" scripts/bridged_tasks_client.py legacy-era \
    "http://127.0.0.1:${REPLICA_PORTS[0]}/mcp"

echo "==> the client never answers: the task fails after bridged-task-answer-timeout (3 s)"
read -r handle _ < <("${CLIENT[@]}" create "$LB" book_table '{"date":"2027-02-02"}')
if "${CLIENT[@]}" until "$LB" "$handle" failed 15 "did not answer" >"$LOGS/timeout.out"; then
    pass "a task nobody answers is failed, saying so"
else
    failed "a task nobody answers: $(cat "$LOGS/timeout.out")"
fi

echo "==> the backend killed (SIGKILL) while its task waits"
read -r handle _ < <("${CLIENT[@]}" create "$LB" book_table '{"date":"2027-03-03"}')
kill -9 "$FASTMCP_PID"
if "${CLIENT[@]}" until "$LB" "$handle" failed 15 >"$LOGS/backend.out"; then
    pass "a task whose backend died is failed: $(head -1 "$LOGS/backend.out" | jq -r .statusMessage)"
else
    failed "a task whose backend died: $(cat "$LOGS/backend.out")"
fi
start_fastmcp

echo "==> the stdio server's process killed (SIGKILL) while its task waits"
read -r handle _ < <("${CLIENT[@]}" create "$LB" book_table_stdio '{"date":"2027-03-04"}')
pkill -9 -f "fastmcp1_elicit_server.py stdio" || true
if "${CLIENT[@]}" until "$LB" "$handle" failed 15 "exited" >"$LOGS/stdio.out"; then
    pass "a task whose stdio process died is failed: $(head -1 "$LOGS/stdio.out" | jq -r .statusMessage)"
else
    failed "a task whose stdio process died: $(cat "$LOGS/stdio.out")"
fi

echo "==> the owner replica killed (SIGKILL): the survivor answers its task failed"
read -r handle owner < <("${CLIENT[@]}" create "$LB" trigger-elicitation-request '{}')
owner_port=${owner##*:}
for i in 0 1; do
    if [ "${REPLICA_PORTS[$i]}" = "$owner_port" ]; then victim=$i; else survivor=$i; fi
done
if [ -z "${victim:-}" ] || [ -z "${survivor:-}" ]; then
    failed "no replica owns the task (nginx said '$owner')"
else
    kill -9 "${REPLICA_PIDS[$victim]}"
    if "${CLIENT[@]}" until "$LB" "$handle" failed 20 "127.0.0.1:$owner_port" >"$LOGS/owner.out"; then
        pass "the owner gone, the task is failed naming it: $(head -1 "$LOGS/owner.out" | jq -r .statusMessage)"
    else
        failed "the owner gone: $(cat "$LOGS/owner.out")"
    fi
    metrics=$(curl -s "$(admin_url "$survivor")/metrics")
    for outcome in forwarded unreachable; do
        count=$(echo "$metrics" | grep "^mrtr_gateway_bridged_task_forwards_total{outcome=\"$outcome\"}" | awk '{print $2}')
        if [ -n "$count" ] && [ "${count%.*}" -gt 0 ]; then
            pass "the survivor counted $count forwards $outcome"
        else
            failed "the survivor's forwards $outcome: '${count:-none}'"
        fi
    done
fi

for f in "${FAILED[@]+"${FAILED[@]}"}"; do echo "failed: $f"; done
if [ "${#FAILED[@]}" -gt 0 ]; then
    for i in 0 1; do echo "--- replica-$i log"; tail -20 "$LOGS/replica-$i.err"; done
fi
echo "bridged tasks: ${#FAILED[@]} failed, $((SECONDS - START)) s"
[ "${#FAILED[@]}" -eq 0 ]
