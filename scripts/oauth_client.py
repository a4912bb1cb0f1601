"""An OAuth 2.1 client nobody here wrote, through mrtr-gateway's resource server.

Run by scripts/oauth.sh with the mcp 2.x venv, after it has started oidc-provider
(scripts/oauth_provider.mjs) as the authorization server and the gateway in front of the suite
fixture with an [oauth] section, [[policy]] rules and a [[rate-limit]]. Usage:

    python oauth_client.py GATEWAY_URL ISSUER

What it checks, all through GATEWAY_URL:

  1. discovery: a request without a token gets 401 and a `WWW-Authenticate: Bearer` naming the
     protected resource metadata (RFC 9728), which names ISSUER;
  2. alice (groups ops) with the SDK's ClientCredentialsOAuthProvider discovers everything from
     that 401, gets a token for the gateway's resource, lists and calls tools, and completes the
     fixture's two-round MRTR elicitation through its elicitation callback;
  3. bob (groups readers) sees and may call only the tools his group's policy allows;
  4. bad tokens (another audience, expired, altered signature, alg none, a foreign signer) get
     401 invalid_token, and a token without the required scope 403 insufficient_scope;
  5. the rate limit: the 4th quick call of test_simple_text gets 429 and a Retry-After, after
     which calls succeed again.

Each check prints one line, `PASS name` or `FAIL name: why`; the exit status is the number of
failures (0: all passed).
"""

import asyncio
import base64
import json
import sys
import time
import traceback
from urllib.parse import parse_qsl, urlsplit

import httpx2

import checks
from checks import check, text

PROTOCOL_VERSION = "2026-07-28"
OTHER_RESOURCE = "http://127.0.0.1:1/other"
REQUIRED_SCOPE = "mcp:tools"
SIMPLE_TEXT = "This is a simple text response for testing."
# A few of the suite fixture's tools (crates/mrtr-backends/src/suite_fixture.rs); ops sees all.
FIXTURE_TOOLS = {"test_simple_text", "test_image_content", "test_elicitation", "test_error_handling", "test_sampling"}
READER_TOOLS = {"test_simple_text", "test_elicitation"}



# --- tokens -----------------------------------------------------------------------------------
def b64decode(segment):
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def b64encode(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(token):
    """The payload of a JWT, unverified."""
    return json.loads(b64decode(token.split(".")[1]))


def altered_signature(token):
    """The token with one bit of its signature flipped (in the middle: the last base64url
    character of an ES256 signature carries padding bits, so changing it may change nothing)."""
    header, payload, signature = token.split(".")
    raw = bytearray(b64decode(signature))
    raw[len(raw) // 2] ^= 0x01
    return f"{header}.{payload}.{b64encode(bytes(raw))}"


def unsigned(token):
    """An `alg: none` token with the claims of `token` and no signature."""
    header = b64encode(json.dumps({"alg": "none", "typ": "at+jwt"}).encode())
    return f"{header}.{token.split('.')[1]}."


def foreign(token, issuer):
    """The claims of `token`, `iss` set to `issuer`, signed ES256 by a key nobody published (with
    the kid of the real one)."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    kid = json.loads(b64decode(token.split(".")[0])).get("kid")
    payload = claims(token) | {"iss": issuer}
    key = ec.generate_private_key(ec.SECP256R1())
    return jwt.encode(payload, key, algorithm="ES256", headers={"kid": kid, "typ": "at+jwt"})


class MemoryStorage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


# --- raw requests -----------------------------------------------------------------------------
def auth_params(response):
    """The scheme and the auth-params of a response's WWW-Authenticate (one challenge)."""
    header = response.headers.get("www-authenticate", "")
    scheme, _, rest = header.partition(" ")
    params = {}
    for part in split_params(rest):
        key, _, value = part.partition("=")
        value = value.strip()
        if value.startswith('"') and value.endswith('"'):
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        params[key.strip().lower()] = value
    return scheme, params


def split_params(text):
    """Comma-separated auth-params, commas inside quoted strings kept."""
    parts, current, quoted, escaped = [], "", False, False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def rpc_body(response):
    """The JSON-RPC message of a response: its JSON, or the last response event of an SSE body."""
    try:
        return response.json()
    except ValueError:
        pass
    for line in reversed(response.text.splitlines()):
        if line.startswith("data:"):
            try:
                message = json.loads(line[5:])
            except ValueError:
                continue
            if "result" in message or "error" in message:
                return message
    return None


class Raw:
    """2026-07-28 requests by hand, each a single POST with an optional bearer token."""

    def __init__(self, http, url):
        self.http = http
        self.url = url
        self.next_id = 0

    async def post(self, method, params=None, token=None, name=None):
        self.next_id += 1
        params = dict(params or {})
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "oauth_client.py", "version": "0"},
        }
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": PROTOCOL_VERSION,
            "mcp-method": method,
        }
        if name is not None:
            headers["mcp-name"] = name
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        return await self.http.post(self.url, json=body, headers=headers)

    async def tools_list(self, token=None):
        return await self.post("tools/list", token=token)

    async def call(self, tool, arguments=None, token=None):
        return await self.post("tools/call", {"name": tool, "arguments": arguments or {}}, token, name=tool)


class AuthorizationServer:
    """Tokens straight from the authorization server's token endpoint (client_secret_basic)."""

    def __init__(self, http, token_endpoint):
        self.http = http
        self.token_endpoint = token_endpoint

    async def token(self, client, scope=REQUIRED_SCOPE, resource=None):
        data = {"grant_type": "client_credentials", "scope": scope}
        if resource is not None:
            data["resource"] = resource
        response = await self.http.post(self.token_endpoint, data=data, auth=(client, f"{client}-secret"))
        if response.status_code != 200:
            raise RuntimeError(f"token for {client}: {response.status_code} {response.text}")
        return response.json()["access_token"]


# --- the checks -------------------------------------------------------------------------------
async def discovery(http, raw, url, issuer):
    """1: the 401 and the metadata it leads to. Returns the token endpoint."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    metadata_url = f"{origin}/.well-known/oauth-protected-resource{urlsplit(url).path}"
    response = await raw.tools_list()
    scheme, params = auth_params(response)
    check("discovery: a request without a token gets 401", response.status_code == 401, response.status_code)
    check(
        "discovery: its WWW-Authenticate is Bearer with resource_metadata and scope, no error",
        scheme.lower() == "bearer"
        and params.get("resource_metadata") == metadata_url
        and params.get("scope") == REQUIRED_SCOPE
        and "error" not in params,
        response.headers.get("www-authenticate"),
    )
    body = rpc_body(response)
    check(
        "discovery: the 401's body is a JSON-RPC error",
        isinstance(body, dict) and body.get("jsonrpc") == "2.0" and "error" in body,
        response.text,
    )
    for where in (metadata_url, f"{origin}/.well-known/oauth-protected-resource"):
        prm = await http.get(where)
        document = prm.json() if prm.status_code == 200 else {}
        check(
            f"discovery: {urlsplit(where).path} is the resource's metadata naming the issuer",
            prm.status_code == 200
            and document.get("resource") == url
            and document.get("authorization_servers") == [issuer]
            and REQUIRED_SCOPE in (document.get("scopes_supported") or [])
            and document.get("bearer_methods_supported") == ["header"],
            f"{prm.status_code} {prm.text}",
        )
    # oidc-provider serves RFC 8414 and OpenID discovery at the root; the SDK asks the former first.
    server = await http.get(f"{issuer}/.well-known/oauth-authorization-server")
    check("discovery: the issuer's metadata names it", server.status_code == 200 and server.json().get("issuer") == issuer, server.text)
    return server.json()["token_endpoint"]


def provider(url, issuer, client):
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    return ClientCredentialsOAuthProvider(
        server_url=url, storage=MemoryStorage(), client_id=client, client_secret=f"{client}-secret", issuer=issuer
    )


class Recorder:
    """The requests an httpx2 client sends (the SDK's discovery, token and MCP requests)."""

    def __init__(self):
        self.requests = []

    async def __call__(self, request):
        body = request.content.decode(errors="replace") if request.method == "POST" else ""
        self.requests.append((request.method, str(request.url), body, dict(request.headers)))


async def sdk_client(url, issuer, client, on_elicitation=None):
    """An mcp.Client whose httpx2 client authenticates with `client`'s credentials; returns the
    client (to enter), the auth provider and the recorder of its requests."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    auth = provider(url, issuer, client)
    recorder = Recorder()
    http = httpx2.AsyncClient(auth=auth, timeout=30, event_hooks={"request": [recorder]})
    transport = streamable_http_client(url, http_client=http)
    return Client(transport, elicitation_callback=on_elicitation), auth, recorder, http


async def alice(url, issuer):
    """2: the SDK alone, from the 401 to an MRTR round trip."""
    import mcp_types as types

    asked = []

    async def on_elicitation(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "alice", "email": "alice@example.com"})

    client, auth, recorder, http = await sdk_client(url, issuer, "alice", on_elicitation)
    async with http, client:
        check("alice: the session is 2026-07-28", client.protocol_version == PROTOCOL_VERSION, client.protocol_version)
        tools = {t.name for t in (await client.list_tools()).tools}
        check("alice (ops): tools/list has all of the fixture's tools", FIXTURE_TOOLS <= tools, sorted(tools))
        simple = await client.call_tool("test_simple_text", {})
        check("alice: test_simple_text", text(simple) == SIMPLE_TEXT, text(simple))
        elicited = await client.call_tool("test_elicitation", {"message": "Who are you?"})
        check(
            "alice: test_elicitation's two input_required rounds reach the callback",
            asked == ["Who are you?", "Please confirm: alice <alice@example.com>"],
            asked,
        )
        check(
            "alice: test_elicitation completes with both answers",
            text(elicited).count("action=accept") == 2 and "alice@example.com" in text(elicited),
            text(elicited),
        )
    # What the SDK did, in order: first request, discovery, token request, then MCP with a token.
    print("    the SDK's requests:", flush=True)
    for method, where, _, headers in recorder.requests[:6]:
        credentials = headers.get("authorization", "").split(" ")[0]
        print(f"      {method} {where} {headers.get('mcp-method', '')} {credentials}".rstrip(), flush=True)
    tokens = [r for r in recorder.requests if r[1].endswith("/token")]
    check("alice: the SDK made exactly one token request", len(tokens) == 1, [r[1] for r in recorder.requests])
    if tokens:
        form = dict(parse_qsl(tokens[0][2]))
        check(
            "alice: the token request is client_credentials for the gateway's resource and scope",
            form.get("grant_type") == "client_credentials"
            and form.get("resource") == url
            and form.get("scope") == REQUIRED_SCOPE
            and tokens[0][3].get("authorization", "").startswith("Basic "),
            form,
        )
    token = auth.context.current_tokens.access_token if auth.context.current_tokens else None
    got = claims(token) if token else {}
    check(
        "alice: her token is for the gateway from the issuer, sub alice, groups ops",
        got.get("aud") in (url, [url])
        and got.get("iss") == issuer
        and got.get("sub") == "alice"
        and REQUIRED_SCOPE in got.get("scope", "").split()
        and got.get("groups") == ["ops"],
        got,
    )


async def bob(url, issuer, raw, server):
    """3: the readers' policy."""
    client, _, _, http = await sdk_client(url, issuer, "bob")
    async with http, client:
        tools = {t.name for t in (await client.list_tools()).tools}
        check("bob (readers): tools/list is exactly his policy's tools", tools == READER_TOOLS, sorted(tools))
        simple = await client.call_tool("test_simple_text", {})
        check("bob: test_simple_text", text(simple) == SIMPLE_TEXT, text(simple))
        try:
            denied = await client.call_tool("test_image_content", {})
            outcome = f"is_error={denied.is_error} {text(denied)}"
            ok = bool(denied.is_error)
        except Exception as error:
            outcome, ok = repr(error), True
        check("bob: calling test_image_content through the SDK fails", ok, outcome)
    # The same denial by hand, to see what the gateway answers.
    token = await server.token("bob", resource=url)
    response = await raw.call("test_image_content", token=token)
    body = rpc_body(response) or {}
    _, params = auth_params(response)
    check(
        "bob: the gateway denies test_image_content with 403 and a JSON-RPC error",
        response.status_code == 403 and "error" in body and "result" not in body,
        f"{response.status_code} {response.text[:300]}",
    )
    # An insufficient_scope challenge would send the SDK into a step-up authorization.
    check(
        "bob: the policy denial is no insufficient_scope challenge",
        params.get("error") != "insufficient_scope",
        response.headers.get("www-authenticate"),
    )


async def bad_tokens(url, raw, server, shortlived, shortlived_exp):
    """4: every token the gateway must refuse."""
    metadata_url = "{0.scheme}://{0.netloc}/.well-known/oauth-protected-resource{0.path}".format(urlsplit(url))
    alice = await server.token("alice", resource=url)
    good = await raw.tools_list(alice)
    check("tokens: alice's own token lists tools", good.status_code == 200 and "result" in (rpc_body(good) or {}), good.text[:300])
    elicit = await raw.call("test_elicitation", {"message": "raw?"}, token=alice)
    result = (rpc_body(elicit) or {}).get("result", {})
    check(
        "tokens: a raw test_elicitation call answers resultType input_required",
        elicit.status_code == 200 and result.get("resultType") == "input_required",
        elicit.text[:300],
    )

    async def refused(name, token, status=401, error="invalid_token", scope=None):
        response = await raw.tools_list(token)
        scheme, params = auth_params(response)
        check(
            f"tokens: {name} gets {status} {error}",
            response.status_code == status
            and scheme.lower() == "bearer"
            and params.get("error") == error
            and params.get("resource_metadata") == metadata_url
            and (scope is None or params.get("scope") == scope),
            f"{response.status_code} {response.headers.get('www-authenticate')}",
        )

    await refused("a token for another resource", await server.token("alice", resource=OTHER_RESOURCE))
    await asyncio.sleep(max(0.0, shortlived_exp + 1.5 - time.time()))
    await refused("an expired token", shortlived)
    await refused("alice's token with its signature altered", altered_signature(alice))
    await refused("an unsigned (alg none) token with alice's claims", unsigned(alice))
    await refused("alice's claims signed by a key of another issuer", foreign(alice, "http://127.0.0.1:1"))
    await refused("a token that is no JWT", "not-a-jwt")
    noscope = await server.token("noscope", scope="mcp:other", resource=url)
    await refused("a token without mcp:tools", noscope, 403, "insufficient_scope", REQUIRED_SCOPE)


async def rate_limit(url, raw, server):
    """5: 3 calls per 2 s for each principal and tool."""
    token = await server.token("alice", resource=url)
    await asyncio.sleep(2.2)  # whatever alice called before has left the window
    answers = [await raw.call("test_simple_text", token=token) for _ in range(4)]
    check(
        "rate limit: 3 quick calls of test_simple_text succeed",
        all(a.status_code == 200 and "result" in (rpc_body(a) or {}) for a in answers[:3]),
        [a.status_code for a in answers[:3]],
    )
    limited = answers[3]
    retry_after = limited.headers.get("retry-after", "")
    check(
        "rate limit: the 4th gets 429, a Retry-After in seconds and a JSON-RPC error",
        limited.status_code == 429 and retry_after.isdigit() and "error" in (rpc_body(limited) or {}),
        f"{limited.status_code} retry-after={retry_after!r} {limited.text[:200]}",
    )
    other = await raw.call("test_simple_text", token=await server.token("bob", resource=url))
    check("rate limit: bob's own calls are not limited by alice's", other.status_code == 200, other.status_code)
    await asyncio.sleep(int(retry_after) if retry_after.isdigit() else 2)
    again = await raw.call("test_simple_text", token=token)
    check(
        "rate limit: after Retry-After seconds the call succeeds again",
        again.status_code == 200 and "result" in (rpc_body(again) or {}),
        f"{again.status_code} {again.text[:200]}",
    )


async def run(url, issuer):
    async with httpx2.AsyncClient(timeout=30) as http:
        raw = Raw(http, url)
        token_endpoint = await discovery(http, raw, url, issuer)
        server = AuthorizationServer(http, token_endpoint)
        # Got first, used last: by then it has expired.
        shortlived = await server.token("shortlived", resource=url)
        shortlived_exp = claims(shortlived)["exp"]
        await alice(url, issuer)
        await bob(url, issuer, raw, server)
        await bad_tokens(url, raw, server, shortlived, shortlived_exp)
        await rate_limit(url, raw, server)


def main():
    url, issuer = sys.argv[1], sys.argv[2]
    try:
        asyncio.run(run(url, issuer))
    except Exception:
        traceback.print_exc()
        check("the client ran to its end", False, "exception above")
    sys.exit(checks.failures)


if __name__ == "__main__":
    main()
