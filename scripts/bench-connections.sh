#!/usr/bin/env bash
# The cost per client connection of mrtr-gateway, and the gateway with many of them (issue 25):
# a fresh gateway per measurement in front of one mock backend on 127.0.0.1 (both pinned to
# CPU 0), client connections held by loader processes on CPU 1; every answer is checked.
#
#   bash scripts/bench-connections.sh                      # 20,000 connections asked for (~2 min)
#   bash scripts/bench-connections.sh --smoke              # CI: 500 connections, 5 s of load
#   bash scripts/bench-connections.sh --connections 5000   # any size; --help for every option
#   bash scripts/bench-connections.sh --listens 10000      # N subscriptions/listen streams at once, and a
#                                                          # notification reaching all (issue 40)
#   bash scripts/bench-connections.sh --listens 200 --smoke  # CI: 200 listens, 3 broadcasts, nothing timed
#
# Each connection is a descriptor in the gateway, which holds a few of its own and its backend
# connections too: the soft `ulimit -n` is raised here to the hard limit, and the run says how
# many connections fit under it when fewer than asked for.
#
# PROFILE=debug uses a debug build (what CI's smoke run does, reusing the conformance steps'
# build); the default is the README's release build (scripts/bench-lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh
build_bench_binaries

hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=$(cat /proc/sys/fs/nr_open)
if [ "$(ulimit -Sn)" != "$hard" ]; then
    ulimit -Sn "$hard" || echo "bench-connections: cannot raise ulimit -n to $hard" >&2
fi
echo "bench-connections: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), ulimit -n $(ulimit -Sn) (hard $hard), somaxconn $(cat /proc/sys/net/core/somaxconn 2>/dev/null || echo ?), ports $(tr '\t' '-' < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo ?), load average $(cut -d' ' -f1-3 /proc/loadavg)"

args=()
if [ "$(nproc)" -lt 2 ]; then
    echo "bench-connections: fewer than 2 CPUs; the loaders share CPU 0 with the gateway" >&2
    args+=(--load-cpus 0)
fi
exec "$BIN_DIR/scale-bench" --bin-dir "$BIN_DIR" "${args[@]}" "$@"
