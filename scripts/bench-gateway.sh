#!/usr/bin/env bash
# Side-by-side load benchmark of mrtr-gateway (issue 9): the gateway, a bare hyper reverse proxy
# and the backend called directly, against one mock MCP backend on 127.0.0.1. Backends and hops
# run pinned to CPU 0, the load driver to CPU 1; every answer is checked.
#
#   bash scripts/bench-gateway.sh                  # 3 interleaved rounds of 5 s per cell (~7 min)
#   bash scripts/bench-gateway.sh --callgrind      # instructions per request, bare vs gateway
#   bash scripts/bench-gateway.sh --smoke          # CI: 1 s per cell, checks answers only
#   bash scripts/bench-gateway.sh --callgrind 300 --cells call-256,legacy-http-256,legacy-client-256,stdio-256
#                                                   # legacy and stdio backends, legacy clients, merges
#                                                   # (issue 40), each beside its reference cell
#   bash scripts/bench-gateway.sh --cells stdio-256,legacy-stdio-256 --connections 64 \
#       --stdio-work-us 100 --hop-cpus 1 --stdio-cpus 0
#                                                   # a stdio backend against the same process
#                                                   # driven over its pipes (issue 40)
#   bash scripts/bench-gateway.sh --peer 'agentgateway=scripts/peers/agentgateway.sh {port} {backend} {dir}'
#                                                   # another gateway in the same rounds (issue 25)
#   bash scripts/bench-gateway.sh --help           # every option (cells, rounds, seconds, ...)
#
# PROFILE=debug uses a debug build (what CI's smoke run does, reusing the conformance steps'
# build); the default is the README's release build (scripts/bench-lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
build_bench_binaries

driver_cpus=1
if [ "$(nproc)" -lt 2 ]; then
    echo "bench-gateway: fewer than 2 CPUs; the driver shares CPU 0 with the hops" >&2
    driver_cpus=0
fi
echo "bench-gateway: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), load average $(cut -d' ' -f1-3 /proc/loadavg)"
exec taskset -c "$driver_cpus" "$BIN_DIR/gateway-bench" "$@"
