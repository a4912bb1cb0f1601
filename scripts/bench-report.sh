#!/usr/bin/env bash
# The figures in the shape users compare (issue 40; the first section of docs/benchmarks.md): a
# modern call, both rounds of an MRTR round trip, a call to an initialize-era HTTP backend and a
# call to a stdio backend, each at 64 clients through the gateway beside the backend reached
# directly (and the bare hyper hop or the stdio process's own pipes): clients, req/s,
# p50/p95/p99, errors, the cores the hop and the backend kept busy, the hop's peak RSS. Every
# answer is checked; a wrong one fails the run.
#
#   bash scripts/bench-report.sh                    # 3 interleaved rounds of 5 s per cell (~3 min)
#   AGENTGATEWAY_BIN=/path/to/agentgateway bash scripts/bench-report.sh
#                                                   # agentgateway beside, on the cells it serves
#                                                   # (the modern call and the rounds)
#   bash scripts/bench-report.sh --rounds 5 --secs 10
#                                                   # more arguments go to gateway-bench
set -euo pipefail
cd "$(dirname "$0")/.."

args=(--cells call-256,r1-256,r2-256,legacy-http-256,stdio-256 --connections 64)
if [ -n "${AGENTGATEWAY_BIN:-}" ]; then
    args+=(--peer 'agentgateway=scripts/peers/agentgateway.sh {port} {backend} {dir}')
fi
exec bash scripts/bench-gateway.sh "${args[@]}" "$@"
