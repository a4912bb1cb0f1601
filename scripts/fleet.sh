#!/usr/bin/env bash
# A fleet with a shared store (issue 36), with real parts only: Debian's redis-server, the demo
# backend alpha (fixture-server), three mrtr-gateway replicas sharing a keys file, a config file
# and the store, and nginx round-robin (no stickiness) in front. Checks, in order:
#   1. a limit of N per principal and tool holds for the fleet: N admitted of N + K calls spread
#      over the replicas by nginx, and the replicas' rate-limited counters add up to K;
#   2. single use: a request state opened at one replica is refused -32602 at every replica
#      (and through nginx), without reaching the backend;
#   3. the store killed (kill -9): a limited call gets 503 within the store's timeout (curl is
#      bounded at 5 s, so nothing may hang), /readyz says "down" and why, the errors counter
#      moves, and calls no limit applies to are still served; the store back: limits hold again,
#      no restart;
#   4. the store's operations per MRTR round trip (INFO commandstats), printed;
#   5. the replicas' shared config file edited: a backend (beta) and a deny rule added are in
#      force on all three within the reload interval (1 s); a broken edit is logged and counted
#      on each, and their running config stays.
# Exits non-zero on the first check that fails.
#
#   bash scripts/fleet.sh                 # release build (the README's)
#   PROFILE=debug bash scripts/fleet.sh   # CI: the debug build the earlier steps made
#
# Not covered here (unfinished, see docs/operations.md "Running a fleet"): the soak with a store
# restart.
set -euo pipefail
cd "$(dirname "$0")/.."
PROG=fleet.sh
# shellcheck source=scripts/nginx-lib.sh
source scripts/nginx-lib.sh
started=$SECONDS
fail() { echo "$PROG: FAIL: $*" >&2; exit 1; }
ok() { echo "$PROG: ok: $*"; }

need() {
    local missing=()
    for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    [ ${#missing[@]} -eq 0 ] && return
    echo "$PROG: installing ${missing[*]} with apt-get (RUNLEVEL=1: no system service starts)"
    RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
        || { apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } \
        || fail "apt-get install ${missing[*]}"
}
# Package names: redis-server, nginx, curl, jq (the commands have the same names).
need redis-server nginx curl jq

profile=${PROFILE:-release}
build=(cargo build --quiet --workspace --bins)
[ "$profile" = release ] && build+=(--release)
"${build[@]}"
target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
BIN="$target_dir/$profile"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Polls a command for up to 20 s.
until_ok() {
    local what=$1; shift
    for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    fail "timed out waiting for $what"
}

REDIS_PORT=$(free_port)
start_redis() {
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    until_ok "redis-server" redis-cli -p "$REDIS_PORT" ping
}
start_redis

BACKEND_PORT=$(free_port)
"$BIN/fixture-server" --demo alpha --listen "127.0.0.1:$BACKEND_PORT" >"$WORK/alpha.log" 2>&1 &
PIDS+=($!)

LIMIT=5
EXTRA=4
"$BIN/mrtr-gateway" --generate-key k1 >"$WORK/keys"
cat >"$WORK/gateway.toml" <<EOF
principal-header = "x-user"
health-interval = 1
reload-interval = 1

[[rate-limit]]
name = "whoami"
per = "principal-and-tool"
tools = ["whoami"]
requests = $LIMIT
period = 3600

[shared-store]
url = "redis://127.0.0.1:$REDIS_PORT"
single-use = true
timeout = 0.25

[[backend]]
name = "alpha"
url = "http://127.0.0.1:$BACKEND_PORT/mcp"
EOF

PORTS=() ADMINS=()
for n in 0 1 2; do
    PORTS+=("$(free_port)") ADMINS+=("$(free_port)")
    "$BIN/mrtr-gateway" --config "$WORK/gateway.toml" --keys-file "$WORK/keys" \
        --listen "127.0.0.1:${PORTS[n]}" --admin-listen "127.0.0.1:${ADMINS[n]}" \
        >"$WORK/gateway-$n.log" 2>&1 &
    PIDS+=($!)
done
for n in 0 1 2; do
    until_ok "replica $n ready" curl -sf --max-time 2 "http://127.0.0.1:${ADMINS[n]}/readyz"
done

start_round_robin "$WORK" "${PORTS[@]}"
until_ok "nginx" curl -s --max-time 2 -o /dev/null "$LB"

META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}'
# call URL USER NAME ARGUMENTS [EXTRA-PARAMS]: one tools/call; prints "STATUS BODY" (the body's
# JSON-RPC message on one line).
call() {
    local url=$1 user=$2 name=$3 arguments=$4 extra=${5:-}
    curl -s --max-time 5 -o "$WORK/answer" -w '%{http_code} ' "$url" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H "Mcp-Name: $name" \
        -H "x-user: $user" \
        -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"'"$name"'","arguments":'"$arguments""$extra"','"$META"'}}' \
        || echo -n "curl-failed "
    sed -n 's/^data: //; /^{/p' "$WORK/answer" | tail -n 1 | jq -c . 2>/dev/null || echo
}
metric() { # ADMIN-PORT NAME: the sum of a metric's samples on one replica
    curl -s --max-time 5 "http://127.0.0.1:$1/metrics" | awk -v name="$2" '$1 ~ "^"name"({|$)" { sum += $2 } END { print sum + 0 }'
}

# 1. One budget for the fleet.
admitted=0 limited=0
for _ in $(seq $((LIMIT + EXTRA))); do
    answer=$(call "$LB" alice whoami '{}')
    case "$answer" in
        "200 "*'"[alpha]'*) admitted=$((admitted + 1)) ;;
        "429 "*) limited=$((limited + 1)) ;;
        *) fail "unexpected answer: $answer" ;;
    esac
done
if [ "$admitted" -ne "$LIMIT" ] || [ "$limited" -ne "$EXTRA" ]; then
    fail "limit $LIMIT for the fleet: $admitted admitted, $limited limited of $((LIMIT + EXTRA))"
fi
counted=0 refusing=0
for n in 0 1 2; do
    c=$(metric "${ADMINS[n]}" mrtr_gateway_rate_limited_total)
    counted=$((counted + c)); [ "$c" -gt 0 ] && refusing=$((refusing + 1))
done
[ "$counted" -eq "$EXTRA" ] || fail "the replicas counted $counted rate-limited requests, not $EXTRA"
ok "limit of $LIMIT for the fleet: $admitted of $((LIMIT + EXTRA)) admitted through nginx; $refusing of 3 replicas refused some"

# 2. Single use, at every replica.
args='{"repo":"acme/api","branch":"old"}'
round1=$(call "http://127.0.0.1:${PORTS[0]}/mcp" alice delete_branch "$args")
state=$(jq -r '.result.requestState' <<<"${round1#* }")
if [ -z "$state" ] || [ "$state" = null ]; then fail "no requestState: $round1"; fi
retry=',"inputResponses":{"confirm_delete":{"action":"accept","content":{"confirm":true}}},"requestState":"'"$state"'"'
first=$(call "http://127.0.0.1:${PORTS[1]}/mcp" alice delete_branch "$args" "$retry")
[[ "$first" == "200 "*"Deleted"* || "$first" == "200 "*'"[alpha]'* ]] || fail "round 2: $first"
for url in "http://127.0.0.1:${PORTS[0]}/mcp" "http://127.0.0.1:${PORTS[1]}/mcp" "http://127.0.0.1:${PORTS[2]}/mcp" "$LB"; do
    again=$(call "$url" alice delete_branch "$args" "$retry")
    [[ "$again" == *'"code":-32602'*"used already"* ]] || fail "replay at $url: $again"
done
refused=0
for n in 0 1 2; do refused=$((refused + $(metric "${ADMINS[n]}" mrtr_gateway_replays_refused_total))); done
[ "$refused" -eq 4 ] || fail "replays counted: $refused, not 4"
ok "single use: a state opened at replica 1 is refused -32602 at each replica and through nginx"

# 4 (before the outage, on a clean count). Store operations per MRTR round trip.
redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
round1=$(call "$LB" carol delete_branch "$args")
state=$(jq -r '.result.requestState' <<<"${round1#* }")
retry=',"inputResponses":{"confirm_delete":{"action":"accept","content":{"confirm":true}}},"requestState":"'"$state"'"'
call "$LB" carol delete_branch "$args" "$retry" >/dev/null
stats=$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\).*/\1=\2/p' | grep -v -E '^(config|info)' | tr '\n' ' ')
# The round trip's own: one EVALSHA for the retry (single use), none for round 1 (no limit on
# the tool); PINGs are the replicas' health pings (one a second each), not the requests'.
[[ " $stats" == *" evalsha=1 "* ]] || fail "store commands for one round trip: $stats"
echo "$PROG: store commands during one delete_branch round trip (round 1 + its retry, single use on): $stats"

# 3. The store killed.
kill -9 "$REDIS_PID"
wait "$REDIS_PID" 2>/dev/null || true
t0=$(date +%s%N)
down=$(call "$LB" bob whoami '{}')
elapsed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[[ "$down" == "503 "*'"code":-32603'* ]] || fail "limited call with the store down: $down"
unlimited=$(call "$LB" bob delete_branch "$args")
[[ "$unlimited" == "200 "*input_required* ]] || fail "round 1 of a call no limit applies to, store down: $unlimited"
for n in 0 1 2; do
    until_ok "replica $n's /readyz showing the store down" \
        sh -c "curl -s --max-time 2 http://127.0.0.1:${ADMINS[n]}/readyz | jq -e '.shared_store.state == \"down\" and (.shared_store.reason | type == \"string\") and .ready'"
done
errors=0
for n in 0 1 2; do errors=$((errors + $(metric "${ADMINS[n]}" mrtr_gateway_shared_store_errors_total))); done
[ "$errors" -gt 0 ] || fail "no shared-store error counted"
reason=$(curl -s "http://127.0.0.1:${ADMINS[0]}/readyz" | jq -c .shared_store)
ok "store killed: 503 -32603 in $elapsed_ms ms (a debug build's whole request), replicas ready with $reason, $errors errors counted"

start_redis
for n in 0 1 2; do
    until_ok "replica $n's /readyz showing the store up" \
        sh -c "curl -s --max-time 2 http://127.0.0.1:${ADMINS[n]}/readyz | jq -e '.shared_store.state == \"up\"'"
done
admitted=0
for _ in $(seq $((LIMIT + EXTRA))); do
    case "$(call "$LB" bob whoami '{}')" in
        "200 "*) admitted=$((admitted + 1)) ;;
    esac
done
[ "$admitted" -eq "$LIMIT" ] || fail "after the store came back: $admitted admitted, not $LIMIT"
ok "store back: the limit holds again ($admitted of $((LIMIT + EXTRA))), no restart"

# 5. A config edit on every replica (they share one file, re-read every second): a backend and
#    a deny rule added, then a broken edit that keeps them.
BETA_PORT=$(free_port)
"$BIN/fixture-server" --demo beta --listen "127.0.0.1:$BETA_PORT" >"$WORK/beta.log" 2>&1 &
PIDS+=($!)
until_ok "beta" curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$BETA_PORT/mcp"
# Written beside the file and renamed over it, as an editor or a ConfigMap update does.
cp "$WORK/gateway.toml" "$WORK/gateway.toml.v1"
cat "$WORK/gateway.toml.v1" - >"$WORK/gateway.toml.new" <<EOF

[[backend]]
name = "beta"
url = "http://127.0.0.1:$BETA_PORT/mcp"

[[policy]]
principals = ["*"]
tools = ["*"]

[[policy]]
principals = ["*"]
tools = ["alpha__deploy"]
effect = "deny"
EOF
t0=$(date +%s%N)
mv "$WORK/gateway.toml.new" "$WORK/gateway.toml"
applied() { # PORT: beta served and alpha's deploy denied at that replica
    [[ "$(call "http://127.0.0.1:$1/mcp" dave beta__whoami '{}')" == "200 "*'"[beta]'* ]] \
        && [[ "$(call "http://127.0.0.1:$1/mcp" dave alpha__deploy '{}')" == "403 "* ]]
}
for n in 0 1 2; do until_ok "replica $n serving beta and denying alpha__deploy" applied "${PORTS[n]}"; done
elapsed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
reloads() { # ADMIN-PORT RESULT: mrtr_gateway_config_reloads_total{result=RESULT} at one replica
    curl -s --max-time 5 "http://127.0.0.1:$1/metrics" \
        | awk -v s="mrtr_gateway_config_reloads_total{result=\"$2\"}" '$1 == s { n = $2 } END { print n + 0 }'
}
for n in 0 1 2; do
    [ "$(reloads "${ADMINS[n]}" ok)" -eq 1 ] || fail "replica $n: $(reloads "${ADMINS[n]}" ok) reloads counted ok, not 1"
done
ok "config edit: a backend and a deny rule in force on all 3 replicas ${elapsed_ms} ms after the edit (reload-interval 1 s)"

failed_once() { [ "$(reloads "$1" failed)" -eq 1 ]; }
printf '\n[[backend]]\nname = "gamma"\nurl = 7\n' >>"$WORK/gateway.toml"
for n in 0 1 2; do
    until_ok "replica $n counting the broken edit" failed_once "${ADMINS[n]}"
    applied "${PORTS[n]}" || fail "replica $n lost the running config after a broken edit"
    grep -q "config reload failed" "$WORK/gateway-$n.log" || fail "replica $n did not log the broken edit"
done
ok "broken edit: logged and counted on all 3 replicas, the running config kept"

echo "$PROG: passed in $((SECONDS - started)) s"
