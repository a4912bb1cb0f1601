#!/usr/bin/env bash
# Checks the shell code blocks of README.md and docs/*.md (issue 14: every command in them runs as
# written under sh and bash).
#
#   bash scripts/check-docs.sh                   # with target/release binaries (the README's build)
#   PROFILE=debug bash scripts/check-docs.sh     # with debug binaries (what CI does)
#
# 1. Every fenced code block names its language, so no shell block escapes the checks below.
# 2. A block marked `sh` must parse under dash (`dash -n`) and use nothing that POSIX sh lacks
#    (ShellCheck's portability checks, SC3xxx: arrays, `[[`, `$'..'`, `<<<`, `local`, ...), which
#    `dash -n` alone does not see. A block marked `bash` must parse under `bash -n`.
# 3. The README's walkthrough runs for real, once under dash and once under bash: the script
#    starts the demo gateway from the built binary (the walkthrough's first block, which must be
#    `target/release/mrtr-gateway --demo`) on a free port instead of 8080, runs the walkthrough's
#    other blocks in order in one shell with `set -e`, with `http://127.0.0.1:8080/mcp` replaced
#    by the gateway's real URL, in a scratch directory, and compares each block's output with the
#    `json` block right after it (same JSON; a string ending in `…` there matches any string
#    starting with what precedes the `…`). Then it runs the commands the gateway printed on start
#    (its `--demo` banner) the same way and compares their answers with the same README blocks.
# 4. The key-file blocks of docs/operations.md ("Keys and rotation": make the file, then the three
#    rotation edits) run in a scratch directory under dash and bash, and the file must then hold
#    exactly the new key.
#
# Only syntax-checked (step 2), not run: blocks that need Kubernetes (`kubectl`), a container
# engine (`docker`), TLS files, the npm conformance suite or minutes of benchmarking, and blocks
# that start long-running servers on fixed ports (the fixture backends in the README, the
# examples, the gateway's start commands in docs/gateway.md and docs/operations.md).
#
# Needs: bash, dash, curl, jq, shellcheck (installed with apt-get when missing and possible).
set -euo pipefail
cd "$(dirname "$0")/.."

PROG=check-docs
profile="${PROFILE:-release}"
target_dir="${CARGO_TARGET_DIR:-target}"
started=$SECONDS

fail() { echo "$PROG: FAILED: $*" >&2; exit 1; }

need() {
    local missing=()
    for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    [ ${#missing[@]} -eq 0 ] && return
    if command -v apt-get >/dev/null; then
        echo "$PROG: installing ${missing[*]} with apt-get"
        apt-get install -y -qq "${missing[@]}" >/dev/null \
            || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; } \
            || fail "apt-get install ${missing[*]}"
    else
        fail "needs ${missing[*]}"
    fi
}
need dash curl jq shellcheck

WORK=$(mktemp -d)
GATEWAY_PID=
stop_gateway() {
    if [ -n "$GATEWAY_PID" ]; then kill "$GATEWAY_PID" 2>/dev/null || true; wait "$GATEWAY_PID" 2>/dev/null || true; fi
    GATEWAY_PID=
}
cleanup() { stop_gateway; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

# --- 1 and 2: every block, by its declared language --------------------------------------------
# extract FILE...: writes each fenced block to $WORK/blocks/N and a line "N FILE LINE END LANG
# SECTION" to $WORK/blocks/index (LINE: the opening fence, END: the closing one, SECTION: the
# last "## " heading before it, spaces as '_').
mkdir -p "$WORK/blocks"
awk -v dir="$WORK/blocks" '
    FNR == 1 { inblock = 0; section = "-" }
    !inblock && /^## / { section = substr($0, 4); gsub(/ /, "_", section) }
    /^```/ {
        if (!inblock) {
            inblock = 1; n++; lang = substr($0, 4); start = FNR
            if (lang == "") lang = "-"
            out = dir "/" n; printf "" > out
            next
        }
        inblock = 0; close(out)
        print n, FILENAME, start, FNR, lang, section >> (dir "/index")
        next
    }
    inblock { print >> out }
' README.md docs/*.md

# parses SHELL FILE WHERE: FILE parses under SHELL (`-n`; bash reports some errors with status 0,
# so any message counts), and ShellCheck finds no error in it, nor with sh anything POSIX lacks.
parses() {
    "$1" -n "$2" >"$WORK/err" 2>&1 || true
    [ -s "$WORK/err" ] && fail "$3: does not parse under $1: $(cat "$WORK/err")"
    shellcheck -s "${1/dash/sh}" -f gcc "$2" >"$WORK/sc" || true
    if grep -E ': error:|\[SC3[0-9]{3}\]' "$WORK/sc" >"$WORK/err"; then
        fail "$3: marked ${1/dash/sh}, but ShellCheck finds (for sh: what POSIX sh lacks; mark it bash, or rewrite):
$(sed "s|^$2:|  block line |" "$WORK/err")"
    fi
}

checked=0
while read -r n file line _ lang _; do
    case "$lang" in
        -) fail "$file:$line: a code block without a language (mark it sh, bash, text, json, ...)" ;;
        sh) parses dash "$WORK/blocks/$n" "$file:$line"; checked=$((checked + 1)) ;;
        bash) parses bash "$WORK/blocks/$n" "$file:$line"; checked=$((checked + 1)) ;;
    esac
done <"$WORK/blocks/index"
echo "$PROG: $checked shell blocks parse under their declared shell"

# --- 3: the README walkthrough and the demo banner, under dash and under bash ------------------
bin_dir="$target_dir/$profile"
if [ "$profile" = release ]; then
    cargo build --quiet --release --workspace --bins
else
    # The feature set scripts/conformance-lib.sh builds, so CI compiles nothing here.
    cargo build --quiet -p mrtr-gateway -p mrtr-backends --bins
fi
bin_dir=$(cd "$bin_dir" && pwd)

# The walkthrough: README blocks in the "Walkthrough..." section, in order.
mapfile -t walk < <(awk '$2 == "README.md" && $6 ~ /^Walkthrough/' "$WORK/blocks/index")
[ ${#walk[@]} -ge 2 ] || fail "README.md: no walkthrough section with code blocks"
read -r first _ first_line _ first_lang _ <<<"${walk[0]}"
if [ "$first_lang" != sh ] || [ "$(cat "$WORK/blocks/$first")" != "target/release/mrtr-gateway --demo" ]; then
    fail "README.md:$first_line: the walkthrough must start with the block 'target/release/mrtr-gateway --demo'"
fi

# --drain-delay 0: SIGTERM at the end need not wait for a load balancer.
"$bin_dir/mrtr-gateway" --demo --listen 127.0.0.1:0 --drain-delay 0 >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
GATEWAY_PID=$!
url=
for _ in $(seq 1 200); do
    url=$(grep -o 'listening on http://[^ ]*' "$WORK/gateway.out" | head -1 | cut -d' ' -f3 || true)
    [ -n "$url" ] && grep -q 'Stop with Ctrl-C' "$WORK/gateway.out" && break
    kill -0 "$GATEWAY_PID" 2>/dev/null || break
    sleep 0.1
done
[ -n "$url" ] || fail "the demo gateway did not start: $(cat "$WORK/gateway.err")"
echo "$PROG: demo gateway from $bin_dir/mrtr-gateway listening on $url"

# script_for: the walkthrough's blocks 2.. as one script; block I's output goes to out.I. Sets
# EXPECTED (block indexes with a json block right after them) and the files expected.I.
expected=()
{
    echo 'set -e'
    for i in $(seq 1 $((${#walk[@]} - 1))); do
        read -r n _ line end lang _ <<<"${walk[$i]}"
        [ "$lang" = json ] && continue
        [ "$lang" = sh ] || fail "README.md:$line: a walkthrough block marked $lang (sh only, so it runs under both shells)"
        echo "echo $line >current; exec >out.$line 2>err.$line"
        sed "s|http://127.0.0.1:8080/mcp|$url|g" "$WORK/blocks/$n"
        next=$((i + 1))
        if [ "$next" -lt ${#walk[@]} ]; then
            read -r nn _ nline _ nlang _ <<<"${walk[$next]}"
            if [ "$nlang" = json ] && [ "$nline" -eq $((end + 1)) ]; then
                cp "$WORK/blocks/$nn" "$WORK/expected.$line"
                expected+=("$line")
            fi
        fi
    done
    echo 'echo done >current'
} >"$WORK/walkthrough.sh"
[ ${#expected[@]} -ge 3 ] || fail "README.md: fewer than 3 walkthrough answers to compare"

# same ACTUAL EXPECTED: equal JSON documents (a stream each), '…' as described in the header.
same() {
    jq -n --slurpfile a "$1" --slurpfile e "$2" '
        def like($e; $a):
            if ($e | type) == "string" and ($e | endswith("…")) then
                ($a | type) == "string" and ($a | startswith($e | rtrimstr("…")))
            elif ($e | type) == "object" then
                ($a | type) == "object" and ($e | keys) == ($a | keys)
                and all($e | keys[]; . as $k | like($e[$k]; $a[$k]))
            elif ($e | type) == "array" then
                ($a | type) == "array" and ($e | length) == ($a | length)
                and all(range($e | length); . as $i | like($e[$i]; $a[$i]))
            else $e == $a end;
        like($e; $a)' 2>/dev/null | grep -qx true
}

# run_in SHELL NAME SCRIPT: runs SCRIPT with SHELL in a scratch directory $WORK/NAME.
run_in() {
    local dir="$WORK/$2"
    mkdir -p "$dir"
    if ! (cd "$dir" && "$1" "$3"); then
        local at
        at=$(cat "$dir/current" 2>/dev/null || echo '?')
        fail "$2: the block at $at failed under $1: $(cat "$dir/err.$at" 2>/dev/null)"
    fi
}

for shell in dash bash; do
    run_in "$shell" "walk-$shell" "$WORK/walkthrough.sh"
    for line in "${expected[@]}"; do
        same "$WORK/walk-$shell/out.$line" "$WORK/expected.$line" \
            || fail "README.md:$line under $shell: the answer differs from the json block after it:
$(cat "$WORK/walk-$shell/out.$line")"
    done
    echo "$PROG: README walkthrough under $shell: ${#expected[@]} answers as shown"
done

# The banner: the indented lines after "Try it", up to the next unindented one, run as a script.
{
    echo 'set -e'
    awk '/^Try it/ { on = 1; next } on && /^[^ ]/ { on = 0 } on' "$WORK/gateway.out" \
        | sed 's/^  //' | awk '/^$/ { next } /^#/ { k++; print "exec >out." k " 2>err." k; print "echo " k " >current"; next } { print }'
} >"$WORK/banner.sh"
for shell in dash bash; do
    run_in "$shell" "banner-$shell" "$WORK/banner.sh"
    k=0
    for line in "${expected[@]:0:3}"; do
        k=$((k + 1))
        same "$WORK/banner-$shell/out.$k" "$WORK/expected.$line" \
            || fail "the --demo banner's command $k under $shell: its answer differs from README.md:$line's:
$(cat "$WORK/banner-$shell/out.$k")"
    done
    echo "$PROG: --demo banner under $shell: $k answers as in the README"
done

# --- 4: the keys file and its rotation, from docs/operations.md --------------------------------
mapfile -t keys < <(awk '$2 == "docs/operations.md" && $5 == "sh" && $6 == "Keys_and_rotation"' "$WORK/blocks/index")
[ ${#keys[@]} -eq 2 ] || fail "docs/operations.md: expected 2 sh blocks in 'Keys and rotation', found ${#keys[@]}"
{
    echo 'set -e'
    read -r n _ line _ <<<"${keys[0]}"
    # The first block: make the file (its start command is not run: it serves until stopped).
    grep -e '--generate-key' "$WORK/blocks/$n" || fail "docs/operations.md:$line: no --generate-key"
    read -r n _ _ <<<"${keys[1]}"
    cat "$WORK/blocks/$n"
} | sed "s|target/release/|$bin_dir/|g" >"$WORK/keys.sh"
for shell in dash bash; do
    run_in "$shell" "keys-$shell" "$WORK/keys.sh"
    [ "$(cut -d: -f1 "$WORK/keys-$shell/keys")" = k2 ] \
        || fail "docs/operations.md rotation under $shell: the keys file does not hold exactly k2 at the end"
    [ "$(stat -c %a "$WORK/keys-$shell/keys")" = 600 ] \
        || fail "docs/operations.md rotation under $shell: the keys file is readable by others"
done
echo "$PROG: docs/operations.md keys file and three-step rotation under dash and bash"

stop_gateway
echo "$PROG: all checks passed in $((SECONDS - started)) s"
