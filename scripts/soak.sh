#!/usr/bin/env bash
# Soak of mrtr-gateway through nginx (issue 11): two backends, two gateway replicas sharing a keys
# file, nginx round-robin without stickiness in front, N users running MRTR, task and plain flows
# for T seconds through a three-step key rotation (hot reload), a backend kill -9 and restart, and
# a rolling restart of one replica. Exits non-zero if any flow was lost.
#
#   bash scripts/soak.sh                                     # 100 users, 60 s, release build
#   bash scripts/soak.sh --debug --clients 100 --duration 60 # CI's version, on the debug build
#   nice -n 10 bash scripts/soak.sh --clients 10000 --duration 660 --warmup 60 --cycle 300 \
#       --think-ms 120000 --pause-ms 1000 --envelope-ttl 170     # the long run of docs/reliability.md
#   bash scripts/soak.sh --debug --shared-store --clients 100 --duration 45   # CI's fleet soak:
#       # the replicas share a redis-server (a limit on every request), killed -9 once a cycle
#
# Every option but --debug goes to the driver (`mrtr-soak --help` lists them). nginx is Debian's
# package, installed when missing; it runs as a child of the driver with its own config on
# 127.0.0.1, never as the system service. Logs, the nginx config and report.json stay in the work
# directory the driver prints.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
args=()
store=no
for arg in "$@"; do
    case "$arg" in
        --debug) profile=debug ;;
        --shared-store) store=yes; args+=("$arg") ;;
        *) args+=("$arg") ;;
    esac
done

if ! command -v nginx >/dev/null; then
    echo "==> installing nginx (Debian's package; RUNLEVEL=1 keeps the system service from starting)"
    apt-get update -qq
    RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi

if [ "$store" = yes ]; then
    if ! command -v redis-server >/dev/null; then
        echo "==> installing redis-server (Debian's package; RUNLEVEL=1 keeps the system service from starting)"
        apt-get update -qq
        RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    fi
    args+=(--redis-server "$(command -v redis-server)")
fi

target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
build=(cargo build --quiet -p mrtr-gateway -p mrtr-backends -p mrtr-soak --bins)
[ "$profile" = release ] && build+=(--release)
echo "==> ${build[*]}"
"${build[@]}"

# Every user holds a connection, and nginx two per request in flight: raise the descriptor limit.
ulimit -n "$(ulimit -Hn)"
exec "$target_dir/$profile/mrtr-soak" --bin-dir "$target_dir/$profile" --nginx "$(command -v nginx)" "${args[@]}"
