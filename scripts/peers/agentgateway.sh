#!/usr/bin/env bash
# Starts agentgateway as a peer for gateway-bench (issue 25): one gateway on PORT with one route
# whose MCP backend has one Streamable HTTP target, BACKEND_URL, and log level warn. The project
# builds and ships no agentgateway: AGENTGATEWAY_BIN names one built locally (see
# docs/benchmarks.md, "A peer gateway in the same run").
#
#   AGENTGATEWAY_BIN=/path/to/agentgateway scripts/peers/agentgateway.sh PORT BACKEND_URL [DIR]
#
# As a gateway-bench peer:
#   --peer 'agentgateway=scripts/peers/agentgateway.sh {port} {backend} {dir}'
#
# The config goes to DIR (a fresh temporary directory if none is given); the script then execs
# agentgateway, so that the process the driver measures and kills is agentgateway itself.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: AGENTGATEWAY_BIN=... $0 PORT BACKEND_URL [DIR]" >&2
    exit 2
fi
port="$1"
backend="$2"
dir="${3:-$(mktemp -d -t agentgateway-peer.XXXXXX)}"
bin="${AGENTGATEWAY_BIN:?set AGENTGATEWAY_BIN to a locally built agentgateway binary}"
[ -x "$bin" ] || { echo "agentgateway.sh: $bin is not an executable" >&2; exit 2; }
case "$port" in
    '' | *[!0-9]*) echo "agentgateway.sh: PORT must be a number, not $port" >&2; exit 2 ;;
esac

config="$dir/agentgateway-$port.yaml"
# Admin, stats and readiness listeners are off: their default ports are fixed (15000, 15020,
# 15021) and would collide between runs; the proxy still counts its metrics in process.
cat > "$config" <<YAML
config:
  adminAddr: "off"
  statsAddr: "off"
  readinessAddr: "off"
  logging:
    level: warn
gateways:
  bench:
    port: $port
routes:
- name: mcp
  gateways: bench
  backends:
  - mcp:
      targets:
      - name: mock
        mcp:
          host: $backend
YAML
exec "$bin" -f "$config"
