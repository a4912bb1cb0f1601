#!/usr/bin/env bash
# mrtr-gateway as an OAuth 2.1 resource server (MCP authorization; RFC 9728 protected resource
# metadata, RFC 8707 audiences), between parts nobody here wrote:
#
#   * the authorization server: oidc-provider (npm), run by scripts/oauth_provider.mjs, issuing
#     client_credentials access tokens as ES256 JWTs with a `groups` claim, to the clients alice
#     (ops), bob (readers), noscope (no mcp:tools) and shortlived (1 s tokens);
#   * the client: the official Python SDK (mcp 2.x, PyPI) with its ClientCredentialsOAuthProvider,
#     running scripts/oauth_client.py: discovery from the gateway's 401 alone, tools and a
#     two-round MRTR elicitation as alice, bob's [[policy]] (tools/list and tools/call), tokens the
#     gateway must refuse (401 invalid_token, 403 insufficient_scope) and a [[rate-limit]] (429 and
#     Retry-After);
#   * the gateway in front of the project's suite fixture (fixture-server --suite), configured
#     with [oauth], two [[policy]] rules and a [[rate-limit]] in one config file.
#
#   bash scripts/oauth.sh
#
# Installs into the git-ignored .tools/ (oauth-provider/ with npm, the python-mcp2/ venv that
# reference-servers.sh also uses) and reuses the conformance scripts' debug build. Prints what
# passed and its duration; exits non-zero if any check failed, after the gateway's log tail.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
PROG=oauth
TOOLS=${TOOLS:-$ROOT/.tools}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OIDC_PROVIDER_VERSION=9.13.3
MCP2_VERSION=2.3.0
# shellcheck source=scripts/conformance-lib.sh
source scripts/conformance-lib.sh

echo "==> oidc-provider@$OIDC_PROVIDER_VERSION into $TOOLS/oauth-provider"
PROVIDER_MODULES=$TOOLS/oauth-provider/node_modules
installed=$(node -p "require('$PROVIDER_MODULES/oidc-provider/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$OIDC_PROVIDER_VERSION" ]; then
    mkdir -p "$TOOLS/oauth-provider"
    npm install --prefix "$TOOLS/oauth-provider" --no-audit --no-fund --loglevel=error \
        "oidc-provider@$OIDC_PROVIDER_VERSION"
fi
# oidc-provider 9 supports Node 22 LTS and later (it warns on 20): the conformance scripts' Node 22
# when installed, else the system's.
PROVIDER_NODE=node
[ -x "$NODE" ] && PROVIDER_NODE=$NODE

mcp_venv "$TOOLS/python-mcp2" "mcp==$MCP2_VERSION"

build_binaries
MRTR_KEYS=$("$GATEWAY" --generate-key oauth)
export MRTR_KEYS

# The gateway's port is chosen first: its resource URI, the tokens' audience, names it.
GATEWAY_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
AUDIENCE=http://127.0.0.1:$GATEWAY_PORT/mcp

start oauth-provider "$PROVIDER_NODE" scripts/oauth_provider.mjs "$PROVIDER_MODULES" 0 "$AUDIENCE"
ISSUER=$URL
echo "==> authorization server $ISSUER (node $("$PROVIDER_NODE" --version))"
start fixture "$FIXTURE" --listen 127.0.0.1:0 --suite --sse
FIXTURE_URL=$URL
cat >"$LOGS/gateway.toml" <<TOML
[[backend]]
name = "suite"
url = "$FIXTURE_URL"

[oauth]
issuer = "$ISSUER"
jwks-uri = "$ISSUER/jwks"
audience = "$AUDIENCE"
principal-claim = "sub"
groups-claim = "groups"
scopes = ["mcp:tools"]
leeway = 0

[[policy]]
groups = ["ops"]
tools = ["*"]
prompts = ["*"]
resources = ["*"]

[[policy]]
groups = ["readers"]
tools = ["test_simple_text", "test_elicitation"]

[[rate-limit]]
per = "principal-and-tool"
tools = ["test_simple_text"]
requests = 3
period = 2
TOML
start gateway "$GATEWAY" --listen "127.0.0.1:$GATEWAY_PORT" --config "$LOGS/gateway.toml"
GATEWAY_URL=$URL
if [ "$GATEWAY_URL" != "$AUDIENCE" ]; then
    echo "$PROG: the gateway serves $GATEWAY_URL, not its configured audience $AUDIENCE" >&2
    exit 1
fi

PYTHON=$TOOLS/python-mcp2/bin/python
echo "==> the Python SDK (mcp $("$PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))')) through the gateway at $GATEWAY_URL"
set +e
timeout 180 "$PYTHON" scripts/oauth_client.py "$GATEWAY_URL" "$ISSUER" 2>&1 | sed 's/^/    /'
FAILED=${PIPESTATUS[0]}
set -e

if [ "$FAILED" -eq 124 ]; then
    echo "failed: the client did not finish within 180 s"
fi
if [ "$FAILED" -ne 0 ]; then
    echo "failed: the client's checks (exit status $FAILED); the gateway's log:"
    tail -40 "$LOGS/gateway.err"
    echo "the authorization server's log:"
    tail -20 "$LOGS/oauth-provider.err"
fi
echo "oauth: $FAILED failed checks, $((SECONDS - START)) s"
[ "$FAILED" -eq 0 ]
