#!/usr/bin/env bash
# The Grafana dashboard and the Prometheus alert rules of deploy/, proven (issue 38):
#
# 1. `promtool check rules` and `promtool test rules`: every alert fires on series shaped as the
#    gateway exports them, and clears after its fault (deploy/prometheus/alerts_test.yaml);
# 2. scripts/observability.py: a real Prometheus scrapes a real gateway under scripted traffic;
#    every metric the dashboard and the rules name must be in its /metrics (a renamed metric
#    fails here), every panel's query must return data, and the backend-down and
#    refused-envelope alerts must be active during their faults (the first clearing after).
#
#   bash scripts/observability.sh             # debug build (CI reuses the tests' build)
#   PROFILE=release bash scripts/observability.sh
#
# Prometheus is Debian's package (prometheus, with promtool), installed when missing; it runs as a
# child of the check on 127.0.0.1 with its own config, never as the system service.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    echo "==> installing prometheus (Debian's package; RUNLEVEL=1 keeps the system service from starting)"
    apt-get update -qq
    RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi

echo "==> promtool check rules, promtool test rules"
(cd deploy/prometheus && promtool check rules alerts.yaml && promtool test rules alerts_test.yaml)

profile=${PROFILE:-debug}
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
build=(cargo build --quiet --workspace --bins)
[ "$profile" = release ] && build+=(--release)
echo "==> ${build[*]}"
"${build[@]}"

echo "==> a real Prometheus scraping a real gateway: the dashboard's queries and the alerts"
python3 scripts/observability.py --bin-dir "$target_dir/$profile"
echo "observability.sh took $((SECONDS - started)) s"
