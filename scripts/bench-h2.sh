#!/usr/bin/env bash
# HTTP/2 request-response load against the gateway (h2load, from nghttp2), one mock backend's
# `echo` tool with a 256 B answer (ANSWER_SIZE); the backend and the gateway on CPU 0, h2load on
# CPU 1. Each binary directory given is run in turn, the list twice, so that builds compare side
# by side in one run (docs/benchmarks.md, "HTTP/2 clients"); none given: the README's release
# build.
#
#   bash scripts/bench-h2.sh                                   # the release build, lone and 4 x 32 streams
#   bash scripts/bench-h2.sh /tmp/before target/release        # two builds alternated
#   H2LOAD_ARGS='-n 50000 -c 8 -m 16' bash scripts/bench-h2.sh # other load shapes
#   ANSWER_SIZE=262144 H2LOAD_ARGS='-n 6000 -c 4 -m 8' bash scripts/bench-h2.sh /tmp/before target/release
#                                                              # large answers (bytes; default 256)
#
# Needs h2load (Debian: apt-get install nghttp2-client). Every answer must be a 2xx.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v h2load >/dev/null; then
    echo "bench-h2: h2load not found (apt-get install nghttp2-client)" >&2
    exit 2
fi
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
    # shellcheck source=scripts/bench-lib.sh
    source scripts/bench-lib.sh
    build_bench_binaries
    dirs=("$BIN_DIR")
fi
if [ -n "${H2LOAD_ARGS:-}" ]; then
    shapes=("$H2LOAD_ARGS")
else
    shapes=("-n 30000 -c 1 -m 1" "-n 100000 -c 4 -m 32")
fi

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
answer_size=${ANSWER_SIZE:-256}
printf '%s' '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"size":'"$answer_size"'},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}' >"$work/body.json"

# One run of `shape` against the gateway of directory `dir`: h2load's summary lines.
run() {
    local dir=$1 shape=$2
    local backend_port=18801 gateway_port=18802
    taskset -c 0 "$dir/mock-backend" --listen "127.0.0.1:$backend_port" >"$work/backend.log" 2>&1 &
    local backend=$!
    MRTR_KEYS=$("$dir/mrtr-gateway" --generate-key bench) taskset -c 0 "$dir/mrtr-gateway" \
        --listen "127.0.0.1:$gateway_port" --backend "m=http://127.0.0.1:$backend_port/mcp" \
        >"$work/gateway.log" 2>&1 &
    local gateway=$!
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$gateway_port") 2>/dev/null && break
        sleep 0.1
    done
    # shellcheck disable=SC2086 # the shape is h2load's words
    taskset -c 1 h2load -d "$work/body.json" -H 'content-type: application/json' \
        -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' \
        -H 'mcp-method: tools/call' -H 'mcp-name: echo' $shape "http://127.0.0.1:$gateway_port/mcp" \
        >"$work/h2load.txt"
    kill "$gateway" "$backend"
    wait "$gateway" "$backend" 2>/dev/null || true
    if ! grep -qE 'status codes: [0-9]+ 2xx, 0 3xx, 0 4xx, 0 5xx' "$work/h2load.txt" ||
        ! grep -qE 'requests: .* 0 failed, 0 errored' "$work/h2load.txt"; then
        cat "$work/h2load.txt" >&2
        echo "bench-h2: $dir ($shape): not every answer was a 2xx" >&2
        exit 1
    fi
    echo "$dir | $shape | $(grep -oE '[0-9.]+ req/s' "$work/h2load.txt") | request min/max/mean/sd: $(grep 'time for request' "$work/h2load.txt" | awk '{print $4" / "$5" / "$6" / "$7}')"
}

echo "bench-h2: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for shape in "${shapes[@]}"; do
    for _ in 1 2; do
        for dir in "${dirs[@]}"; do
            run "$dir" "$shape"
        done
    done
done
