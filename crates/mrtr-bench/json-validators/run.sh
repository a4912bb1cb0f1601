#!/usr/bin/env bash
# Instructions per check of each JSON validator on three bodies (callgrind: N = 1001 minus N = 1).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --quiet
bin=target/release/json-validators
count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*Collected : //p'; }
printf '%-6s %-9s %12s\n' body mode instructions
for body in call dense text; do
    for mode in std simdutf8 serde simdjson sonic; do
        one=$(count "$bin" "$mode" "$body" 1)
        many=$(count "$bin" "$mode" "$body" 1001)
        printf '%-6s %-9s %12d\n' "$body" "$mode" $(( (many - one) / 1000 ))
    done
done
"$bin" none call 1
