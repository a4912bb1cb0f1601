#!/usr/bin/env bash
# Servers and clients nobody here wrote, through mrtr-gateway (issue 23's proof):
#
#   * the official reference servers behind one gateway, configured in one config file:
#     @modelcontextprotocol/server-everything (npm, an initialize-era server with Mcp-Session-Id
#     sessions over Streamable HTTP), server-memory and server-filesystem (initialize-era stdio
#     servers the gateway starts; filesystem serves a temporary directory), and the project's
#     modern suite fixture (fixture-server --suite);
#   * the official Python SDK as a 2026-07-28 client (mcp 2.x) and as an initialize-era client
#     (mcp 1.x), both from PyPI, each running scripts/reference_servers_client.py (and mcp 2.x on
#     the gateway's legacy-era path, /mcp-legacy, where it falls back to initialize and gets
#     everything's elicitation request in its call): the merged
#     lists, everything's tools, prompts, resources, completion and progress, a subscription to
#     one of its resources and the update it then sends, memory's create_entities then
#     read_graph, filesystem's write_file then read_text_file;
#   * faults: server-everything restarted on its port (every session it had is gone), then the
#     modern client once more, which must see no error; and server-memory's process killed
#     (kill -9) under load from the modern client: no call hangs, and calls succeed again once
#     the gateway has started it again.
#
#   bash scripts/reference-servers.sh
#
# Installs into the git-ignored .tools/ (reference-servers/ with npm, python-mcp2/ and
# python-mcp1/ venvs) and reuses the conformance scripts' debug build. Prints what passed and its
# duration; exits non-zero if any check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
PROG=reference-servers
TOOLS=${TOOLS:-$ROOT/.tools}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# shellcheck source=scripts/conformance-lib.sh
source scripts/conformance-lib.sh

install_reference_servers

mcp_venv "$TOOLS/python-mcp2" "mcp==$MCP2_VERSION"
mcp_venv "$TOOLS/python-mcp1" "mcp>=1.20,<2"

build_binaries
MRTR_KEYS=$("$GATEWAY" --generate-key reference)
export MRTR_KEYS

start_everything
start fixture "$FIXTURE" --listen 127.0.0.1:0 --suite --sse
FIXTURE_URL=$URL
# The stdio servers get a temporary directory (filesystem) and a temporary graph file (memory).
DATA=$LOGS/data
mkdir -p "$DATA"
cat >"$LOGS/gateway.toml" <<TOML
# For SDKs that negotiate the era by themselves (the 2.x client below): initialize-era there.
legacy-era-path = "/mcp-legacy"

[[backend]]
name = "everything"
url = "http://127.0.0.1:$EVERYTHING_PORT/mcp"

[[backend]]
name = "suite"
url = "$FIXTURE_URL"

[[backend]]
name = "memory"
command = ["$REFERENCE/node_modules/.bin/mcp-server-memory"]
env.MEMORY_FILE_PATH = "$LOGS/memory.jsonl"

[[backend]]
name = "filesystem"
command = ["$REFERENCE/node_modules/.bin/mcp-server-filesystem", "$DATA"]
TOML
start gateway "$GATEWAY" --listen 127.0.0.1:0 --config "$LOGS/gateway.toml"
GATEWAY_URL=$URL
GATEWAY_PID=${PIDS[-1]}

FAILED=()
run_client() { # run_client ERA PYTHON: the client script of ERA, its lines indented
    echo "==> $1 client (mcp $("$2" -c 'import importlib.metadata as m; print(m.version("mcp"))')) through the gateway"
    if ! timeout 120 "$2" scripts/reference_servers_client.py "$1" "$GATEWAY_URL" "$DATA" | sed 's/^/    /'; then
        FAILED+=("$1${3:+ $3}")
    fi
}
run_client modern "$TOOLS/python-mcp2/bin/python"
run_client legacy "$TOOLS/python-mcp1/bin/python"
run_client legacy-era "$TOOLS/python-mcp2/bin/python"

echo "==> server-everything restarted on port $EVERYTHING_PORT: its sessions are gone"
kill "$EVERYTHING_PID"
wait "$EVERYTHING_PID" 2>/dev/null || true
start_everything
run_client modern "$TOOLS/python-mcp2/bin/python" "(after the restart)"

echo "==> server-memory's process killed (kill -9) under load from the modern client"
MEMORY_PID=$(pgrep -P "$GATEWAY_PID" -f mcp-server-memory | head -1 || true)
if [ -z "$MEMORY_PID" ]; then
    echo "$PROG: no server-memory process under the gateway" >&2
    FAILED+=("kill -9: no process")
else
    "$TOOLS/python-mcp2/bin/python" scripts/reference_servers_client.py fault "$GATEWAY_URL" "$DATA" >"$LOGS/fault.out" 2>&1 &
    FAULT=$!
    sleep 2
    kill -9 "$MEMORY_PID"
    echo "    killed server-memory (pid $MEMORY_PID)"
    if ! wait "$FAULT"; then FAILED+=("kill -9 under load"); fi
    sed 's/^/    /' "$LOGS/fault.out"
    AGAIN=$(pgrep -P "$GATEWAY_PID" -f mcp-server-memory | head -1 || true)
    if [ -z "$AGAIN" ] || [ "$AGAIN" = "$MEMORY_PID" ]; then
        echo "$PROG: server-memory was not started again" >&2
        FAILED+=("kill -9: no restart")
    fi
fi

for backend in everything memory filesystem; do
    if ! grep -q "backend up backend=\"$backend\" era=\"legacy\"" "$LOGS/gateway.err"; then
        echo "$PROG: the gateway's log does not report $backend as a legacy backend" >&2
        FAILED+=("log: $backend")
    fi
done
for f in "${FAILED[@]+"${FAILED[@]}"}"; do
    echo "failed: $f (gateway log below)"
done
[ "${#FAILED[@]}" -eq 0 ] || tail -40 "$LOGS/gateway.err"
echo "reference servers: ${#FAILED[@]} failed runs, $((SECONDS - START)) s"
[ "${#FAILED[@]}" -eq 0 ]
