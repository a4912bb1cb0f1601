#!/usr/bin/env bash
# Servers and clients nobody here wrote, through mrtr-gateway (issue 23's proof, for the parts
# built so far):
#
#   * the official reference server @modelcontextprotocol/server-everything (npm, an
#     initialize-era server with Mcp-Session-Id sessions over Streamable HTTP) and the project's
#     modern suite fixture (fixture-server --suite), behind one gateway;
#   * the official Python SDK as a 2026-07-28 client (mcp 2.x) and as an initialize-era client
#     (mcp 1.x), both from PyPI, each running scripts/reference_servers_client.py: the merged
#     lists, everything's tools, prompts, resources, completion and progress;
#   * a fault: server-everything restarted on its port (every session it had is gone), then the
#     modern client once more, which must see no error.
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
EVERYTHING_VERSION=2026.8.31
MCP2_VERSION=2.3.0
# shellcheck source=scripts/conformance-lib.sh
source scripts/conformance-lib.sh

echo "==> @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $TOOLS/reference-servers"
REFERENCE=$TOOLS/reference-servers
EVERYTHING=$REFERENCE/node_modules/.bin/mcp-server-everything
installed=$(node -p "require('$REFERENCE/node_modules/@modelcontextprotocol/server-everything/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$EVERYTHING_VERSION" ]; then
    mkdir -p "$REFERENCE"
    npm install --prefix "$REFERENCE" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
fi

venv() { # venv DIR REQUIREMENT: a venv in DIR with REQUIREMENT installed
    [ -x "$1/bin/python" ] || python3 -m venv "$1"
    "$1/bin/python" -c "import mcp" 2>/dev/null \
        || "$1/bin/pip" install --quiet --disable-pip-version-check "$2"
    echo "==> $1: mcp $("$1/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
}
venv "$TOOLS/python-mcp2" "mcp==$MCP2_VERSION"
venv "$TOOLS/python-mcp1" "mcp>=1.20,<2"

build_binaries
MRTR_KEYS=$("$GATEWAY" --generate-key reference)
export MRTR_KEYS

# A free port for server-everything, which takes its port from PORT and prints no URL.
EVERYTHING_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_everything() {
    PORT=$EVERYTHING_PORT "$EVERYTHING" streamableHttp >"$LOGS/everything.out" 2>"$LOGS/everything.err" &
    PIDS+=($!)
    EVERYTHING_PID=$!
    for _ in $(seq 1 600); do
        if cat "$LOGS/everything.out" "$LOGS/everything.err" 2>/dev/null | grep -q "listening on port $EVERYTHING_PORT"; then return 0; fi
        kill -0 "$EVERYTHING_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "$PROG: server-everything did not start" >&2
    cat "$LOGS/everything.out" "$LOGS/everything.err" >&2
    exit 1
}
start_everything
start fixture "$FIXTURE" --listen 127.0.0.1:0 --suite --sse
FIXTURE_URL=$URL
start gateway "$GATEWAY" --listen 127.0.0.1:0 \
    --backend "everything=http://127.0.0.1:$EVERYTHING_PORT/mcp" --backend "suite=$FIXTURE_URL"
GATEWAY_URL=$URL

FAILED=()
run_client() { # run_client ERA PYTHON: the client script of ERA, its lines indented
    echo "==> $1 client (mcp $("$2" -c 'import importlib.metadata as m; print(m.version("mcp"))')) through the gateway"
    if ! timeout 120 "$2" scripts/reference_servers_client.py "$1" "$GATEWAY_URL" | sed 's/^/    /'; then
        FAILED+=("$1${3:+ $3}")
    fi
}
run_client modern "$TOOLS/python-mcp2/bin/python"
run_client legacy "$TOOLS/python-mcp1/bin/python"

echo "==> server-everything restarted on port $EVERYTHING_PORT: its sessions are gone"
kill "$EVERYTHING_PID"
wait "$EVERYTHING_PID" 2>/dev/null || true
start_everything
run_client modern "$TOOLS/python-mcp2/bin/python" "(after the restart)"

if ! grep -q 'backend up backend="everything" era="legacy"' "$LOGS/gateway.err"; then
    echo "$PROG: the gateway's log does not report everything as a legacy backend" >&2
    FAILED+=("log")
fi
for f in "${FAILED[@]+"${FAILED[@]}"}"; do
    echo "failed: $f (gateway log below)"
done
[ "${#FAILED[@]}" -eq 0 ] || tail -40 "$LOGS/gateway.err"
echo "reference servers: ${#FAILED[@]} failed runs, $((SECONDS - START)) s"
[ "${#FAILED[@]}" -eq 0 ]
