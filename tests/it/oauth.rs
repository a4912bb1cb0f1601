//! The gateway as an OAuth resource server, with per-tool policy and rate limits, against real
//! backends and an issuer of the test's own (ES256 keys made here, the JWKS served over HTTP on
//! loopback so that key rotation is a fetch). `scripts/oauth.sh` does the same end to end with a
//! real authorization server (oidc-provider) and the official Python SDK as the client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mrtr_backends::ResponseMode;
use mrtr_gateway::GatewayConfig;
use mrtr_test_support::backends::Stack;
use mrtr_test_support::mcp::{Call, Reply, raw, send};
use serde_json::{Value, json};

const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "https://mcp.test/mcp";
const METADATA: &str = "https://mcp.test/.well-known/oauth-protected-resource/mcp";

/// One signing key of the test issuer.
struct SigningKey {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
    /// The public key as PEM: what an HMAC-confusion attack signs with.
    public_pem: String,
}

impl SigningKey {
    fn generate(kid: &str) -> Self {
        let pair = rcgen::KeyPair::generate().expect("a P-256 key");
        let point = pair.public_key_raw();
        assert_eq!((point.len(), point[0]), (65, 4), "an uncompressed P-256 point");
        Self {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_der(pair.serialized_der()),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
            public_pem: pair.public_key_pem(),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("signed")
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Claims the gateway accepts, for `sub` in `groups`.
fn claims(sub: &str, groups: &[&str]) -> Value {
    json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": now() + 300,
        "scope": "mcp:tools other", "groups": groups,
    })
}

/// The issuer's JWKS endpoint: the keys it publishes (changeable) and how often it was read.
#[derive(Clone)]
struct Jwks {
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    addr: SocketAddr,
}

impl Jwks {
    async fn serve(keys: Vec<Value>) -> anyhow::Result<Self> {
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (keys.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (keys, fetches) = (served.clone(), counted.clone());
                async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    let document = json!({ "keys": *keys.lock().unwrap() }).to_string();
                    ([("content-type", "application/json")], document)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { keys, fetches, addr })
    }
}

/// A gateway over the demo backends with `[oauth]` reading `jwks`, and `extra` config (policy,
/// limits) in TOML.
async fn stack(jwks: &Jwks, extra: &str) -> anyhow::Result<Stack> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await?;
    let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    let file: toml::Table = toml::from_str(&format!(
        r#"
[oauth]
issuer = "{ISSUER}"
jwks-uri = "http://{}/jwks"
audience = "{AUDIENCE}"
scopes = ["mcp:tools"]
leeway = 0
{extra}"#,
        jwks.addr
    ))?;
    config.settings.oauth = Some(file["oauth"].clone().try_into()?);
    if let Some(policy) = file.get("policy") {
        config.settings.policy = policy.clone().try_into()?;
    }
    if let Some(limits) = file.get("rate-limit") {
        config.settings.rate_limit = limits.clone().try_into()?;
    }
    let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
    Stack::with_gateway(alpha, beta, config).await
}

/// A signing key `k1`, its JWKS served, and [`stack`] reading it with `extra` config.
async fn issued_stack(extra: &str) -> anyhow::Result<(SigningKey, Stack)> {
    let key = SigningKey::generate("k1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await?;
    Ok((key, stack(&jwks, extra).await?))
}

fn bearer(call: Call, token: &str) -> Call {
    call.header("authorization", &format!("Bearer {token}"))
}

fn whoami() -> Call {
    Call::tool("alpha__whoami", json!({}))
}

fn delete_branch() -> Call {
    Call::tool(
        "beta__delete_branch",
        json!({"repo": "acme/api", "branch": "old"}),
    )
}

/// The `WWW-Authenticate` of a raw POST to the gateway with `authorization`.
async fn challenge(url: &str, authorization: Option<&str>) -> anyhow::Result<(u16, String, Value)> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": mrtr_test_support::mcp::meta()}});
    let mut headers: Vec<(&str, &str)> = mrtr_test_support::mcp::mcp_headers("tools/list");
    if let Some(value) = authorization {
        headers.push(("authorization", value));
    }
    let (status, headers, text) = raw(reqwest::Method::POST, url, &headers, &body.to_string()).await?;
    let header = headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    Ok((status, header, serde_json::from_str(&text)?))
}

#[tokio::test]
async fn tokens_that_are_not_for_this_gateway_are_refused_with_the_right_challenge() -> anyhow::Result<()> {
    let (key, stack) = issued_stack("").await?;
    let url = stack.url();
    let before = stack.backend_requests();

    // No token: the challenge names the metadata and the scope, and no error (RFC 6750 §3.1).
    let (status, header, body) = challenge(&url, None).await?;
    assert_eq!(status, 401);
    assert_eq!(
        header,
        format!(r#"Bearer resource_metadata="{METADATA}", scope="mcp:tools""#)
    );
    assert_eq!(body["error"]["code"], -32600, "{body}");

    let other = SigningKey::generate("k1");
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("alice", &[]).to_string())
    );
    let hmac_with_public_key = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        let secret = EncodingKey::from_secret(key.public_pem.as_bytes())?;
        jsonwebtoken::encode(&header, &claims("alice", &[]), &secret)?
    };
    let with = |edit: fn(&mut Value)| {
        let mut c = claims("alice", &[]);
        edit(&mut c);
        key.sign(&c)
    };
    let invalid = [
        (
            "another audience",
            with(|c| c["aud"] = json!("https://other.test/mcp")),
        ),
        ("another issuer", with(|c| c["iss"] = json!("https://evil.test"))),
        ("expired", with(|c| c["exp"] = json!(now() - 5))),
        ("not yet valid", with(|c| c["nbf"] = json!(now() + 300))),
        (
            "no principal",
            with(|c| {
                c.as_object_mut().unwrap().remove("sub");
            }),
        ),
        (
            "signed by another key under the same kid",
            other.sign(&claims("alice", &[])),
        ),
        ("alg none", unsigned),
        ("HMAC keyed with the public key", hmac_with_public_key),
        ("not a JWT", "opaque-token".to_owned()),
    ];
    for (case, token) in &invalid {
        let (status, header, body) = challenge(&url, Some(&format!("Bearer {token}"))).await?;
        assert_eq!(status, 401, "{case}");
        assert_eq!(
            header,
            format!(r#"Bearer error="invalid_token", resource_metadata="{METADATA}""#),
            "{case}"
        );
        assert_eq!(body["error"]["code"], -32600, "{case}");
    }
    // A scope missing: 403 and a step-up challenge naming the scope.
    let narrow = with(|c| c["scope"] = json!("other"));
    let (status, header, _) = challenge(&url, Some(&format!("Bearer {narrow}"))).await?;
    assert_eq!(status, 403);
    assert_eq!(
        header,
        format!(r#"Bearer error="insufficient_scope", resource_metadata="{METADATA}", scope="mcp:tools""#)
    );
    assert_eq!(
        stack.backend_requests(),
        before,
        "a refused request reached a backend"
    );

    // An answer given before the body is read closes an HTTP/1 connection: hyper closes it
    // anyway when the body has not arrived yet, and says so here, so that the client does not
    // send its next request onto it.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let (_, headers, _) = raw(
        reqwest::Method::POST,
        &url,
        &mrtr_test_support::mcp::mcp_headers("tools/list"),
        &body,
    )
    .await?;
    assert_eq!(headers["connection"], "close");

    // The metadata, unauthenticated, where the challenge says.
    let metadata_url = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let (status, _, text) = raw(reqwest::Method::GET, &metadata_url, &[], "").await?;
    assert_eq!(status, 200);
    let document: Value = serde_json::from_str(&text)?;
    assert_eq!(document["resource"], AUDIENCE);
    assert_eq!(document["authorization_servers"], json!([ISSUER]));

    // A good token works, and binds the envelope to its subject.
    let alice = key.sign(&claims("alice", &[]));
    let bob = key.sign(&claims("bob", &[]));
    let reply = send(&url, &bearer(whoami(), &alice)).await?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let first = send(&url, &bearer(delete_branch(), &alice)).await?;
    let state = first.state()?;
    let stolen = send(
        &url,
        &bearer(delete_branch().retry(first.answers(), &state), &bob),
    )
    .await?;
    assert_eq!(stolen.error_code(), Some(-32602), "{}", stolen.body);
    // A principal the client names itself is replaced by the token's.
    let forged = send(
        &url,
        &bearer(delete_branch().retry(first.answers(), &state), &bob).header("x-mrtr-principal", "alice"),
    )
    .await?;
    assert_eq!(forged.error_code(), Some(-32602), "{}", forged.body);
    let done = send(
        &url,
        &bearer(delete_branch().retry(first.answers(), &state), &alice),
    )
    .await?;
    assert!(done.text().starts_with("[beta] delete_branch"), "{}", done.body);
    stack.stop().await
}

/// Every one-bit change of a token's signature is refused with a 401, never a dropped
/// connection: the verifier must not panic on any signature bytes.
#[tokio::test]
async fn every_altered_signature_is_refused() -> anyhow::Result<()> {
    let (key, stack) = issued_stack("").await?;
    let url = stack.url();
    let token = key.sign(&claims("alice", &[]));
    let (head, signature) = token.rsplit_once('.').unwrap();
    let raw_signature = URL_SAFE_NO_PAD.decode(signature)?;
    for bit in 0..raw_signature.len() * 8 {
        let mut altered = raw_signature.clone();
        altered[bit / 8] ^= 1 << (bit % 8);
        let token = format!("{head}.{}", URL_SAFE_NO_PAD.encode(&altered));
        let (status, header, _) = challenge(&url, Some(&format!("Bearer {token}"))).await?;
        assert_eq!(status, 401, "bit {bit}");
        assert!(
            header.starts_with(r#"Bearer error="invalid_token""#),
            "bit {bit}: {header}"
        );
    }
    stack.stop().await
}

#[tokio::test]
async fn a_token_signed_by_a_new_key_is_accepted_once_the_issuer_publishes_it() -> anyhow::Result<()> {
    let old = SigningKey::generate("old");
    let jwks = Jwks::serve(vec![old.jwk.clone()]).await?;
    let stack = stack(&jwks, "").await?;
    let url = stack.url();
    assert_eq!(
        send(&url, &bearer(whoami(), &old.sign(&claims("a", &[]))))
            .await?
            .status,
        200
    );
    let read_at_start = jwks.fetches.load(Ordering::SeqCst);
    assert_eq!(read_at_start, 1, "the keys are read once at start, and kept");

    let new = SigningKey::generate("new");
    jwks.keys.lock().unwrap().push(new.jwk.clone());
    let reply = send(&url, &bearer(whoami(), &new.sign(&claims("a", &[])))).await?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), read_at_start + 1);
    // A kid nobody publishes is refused, and does not make the gateway read the keys again
    // (at most one read per interval).
    let stranger = SigningKey::generate("stranger");
    for _ in 0..3 {
        let (status, _, _) = challenge(
            &url,
            Some(&format!("Bearer {}", stranger.sign(&claims("a", &[])))),
        )
        .await?;
        assert_eq!(status, 401);
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), read_at_start + 1);
    stack.stop().await
}

const POLICY: &str = r#"
[[policy]]
groups = ["ops"]
tools = ["*"]

[[policy]]
principals = ["*"]
tools = ["*__whoami"]

[[policy]]
principals = ["*"]
tools = ["*migrate_database"]
effect = "deny"
"#;

#[tokio::test]
async fn the_policy_filters_lists_and_refuses_calls_before_their_state_is_opened() -> anyhow::Result<()> {
    let (key, stack) = issued_stack(POLICY).await?;
    let url = stack.url();
    let carol = key.sign(&claims("carol", &["ops"]));
    let dave = key.sign(&claims("dave", &["readers"]));

    let tools = |reply: &Reply| -> Vec<String> {
        let mut names: Vec<String> = reply.body["result"]["tools"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let list = Call::new("tools/list", json!({}));
    let listed = send(&url, &bearer(list.clone(), &carol)).await?;
    assert_eq!(listed.body["result"]["cacheScope"], "private");
    let carols = tools(&listed);
    assert!(carols.contains(&"beta__delete_branch".to_owned()), "{carols:?}");
    assert!(
        !carols.iter().any(|t| t.contains("migrate_database")),
        "denied for everyone: {carols:?}"
    );
    assert_eq!(
        tools(&send(&url, &bearer(list, &dave)).await?),
        ["alpha__whoami", "beta__whoami"]
    );

    // carol starts a call; dave's retry of it, even with a state that would not open, gets the
    // policy's refusal: the state is never opened, and no backend is asked.
    let first = send(&url, &bearer(delete_branch(), &carol)).await?;
    let state = first.state()?;
    let before = stack.backend_requests();
    for state in [state.clone(), format!("{state}x")] {
        let denied = send(
            &url,
            &bearer(delete_branch().retry(first.answers(), &state), &dave),
        )
        .await?;
        assert_eq!(
            (denied.status, denied.error_code()),
            (403, Some(-32600)),
            "{}",
            denied.body
        );
        assert_eq!(
            denied.body["error"]["message"],
            "The tool beta__delete_branch is not permitted for this caller"
        );
    }
    let denied = send(
        &url,
        &bearer(Call::tool("migrate_database", json!({"database": "x"})), &carol),
    )
    .await?;
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert_eq!(
        stack.backend_requests(),
        before,
        "a denied call reached a backend"
    );
    assert_eq!(send(&url, &bearer(whoami(), &dave)).await?.status, 200);
    let done = send(
        &url,
        &bearer(delete_branch().retry(first.answers(), &state), &carol),
    )
    .await?;
    assert!(done.text().starts_with("[beta] delete_branch"), "{}", done.body);
    stack.stop().await
}

#[tokio::test]
async fn rate_limits_count_calls_not_rounds_and_recover() -> anyhow::Result<()> {
    let limits = r#"
[[rate-limit]]
per = "principal-and-tool"
tools = ["beta__delete_branch"]
requests = 2
period = 3600

[[rate-limit]]
per = "principal-and-tool"
tools = ["alpha__whoami"]
requests = 1
period = 1
"#;
    let (key, stack) = issued_stack(limits).await?;
    let url = stack.url();
    let (alice, bob) = (key.sign(&claims("alice", &[])), key.sign(&claims("bob", &[])));

    // Two whole round trips (four requests): the retries are part of their calls.
    for _ in 0..2 {
        let first = send(&url, &bearer(delete_branch(), &alice)).await?;
        let retry = delete_branch().retry(first.answers(), &first.state()?);
        let done = send(&url, &bearer(retry, &alice)).await?;
        assert!(done.text().starts_with("[beta] delete_branch"), "{}", done.body);
    }
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "beta__delete_branch", "arguments": {"repo": "a", "branch": "b"}, "_meta": mrtr_test_support::mcp::meta()}});
    let mut headers: Vec<(&str, &str)> = mrtr_test_support::mcp::mcp_headers("tools/call");
    headers.push(("mcp-name", "beta__delete_branch"));
    let authorization = format!("Bearer {alice}");
    headers.push(("authorization", &authorization));
    let (status, answer, text) = raw(reqwest::Method::POST, &url, &headers, &body.to_string()).await?;
    assert_eq!(status, 429, "{text}");
    let retry_after: u64 = answer["retry-after"].to_str()?.parse()?;
    assert!((1..=1800).contains(&retry_after), "{retry_after}");
    assert_eq!(serde_json::from_str::<Value>(&text)?["error"]["code"], -32600);
    // Bob has buckets of his own.
    assert_eq!(send(&url, &bearer(delete_branch(), &bob)).await?.status, 200);

    // The one-per-second limit: hit, then recovered after the Retry-After it gave.
    assert_eq!(send(&url, &bearer(whoami(), &alice)).await?.status, 200);
    let limited = send(&url, &bearer(whoami(), &alice)).await?;
    assert_eq!(limited.status, 429, "{}", limited.body);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(send(&url, &bearer(whoami(), &alice)).await?.status, 200);
    stack.stop().await
}

/// Review 3, finding 1: one round-1 answer retried again and again ran the confirmed action 20
/// times under a limit of 2. Now the first use of a state is part of its call, and each later
/// one costs a call: the backend runs it as often as the limit allows, no more.
#[tokio::test]
async fn a_replayed_state_reaches_the_backend_at_most_as_often_as_the_limit_allows() -> anyhow::Result<()> {
    let limits = r#"
[[rate-limit]]
per = "principal-and-tool"
tools = ["beta__delete_branch"]
requests = 2
period = 3600
"#;
    let (key, stack) = issued_stack(limits).await?;
    let url = stack.url();
    let (alice, bob) = (key.sign(&claims("alice", &[])), key.sign(&claims("bob", &[])));
    let first = send(&url, &bearer(delete_branch(), &alice)).await?;
    let retry = bearer(delete_branch().retry(first.answers(), &first.state()?), &alice);
    let mut ran = 0;
    let mut limited = 0;
    for _ in 0..20 {
        let reply = send(&url, &retry).await?;
        if reply.text().starts_with("[beta] delete_branch") {
            ran += 1;
        } else {
            assert_eq!(reply.status, 429, "{}", reply.body);
            limited += 1;
        }
    }
    // The round trip itself, then the one call left of alice's two.
    assert_eq!((ran, limited), (2, 18));
    let again = send(&url, &bearer(delete_branch(), &alice)).await?;
    assert_eq!(
        again.status, 429,
        "the replays spent alice's calls: {}",
        again.body
    );
    assert_eq!(
        send(&url, &bearer(delete_branch(), &bob)).await?.status,
        200,
        "not bob's"
    );
    stack.stop().await
}

#[tokio::test]
async fn oauth_and_a_principal_header_are_exclusive() {
    let mut config = GatewayConfig::new(Vec::new());
    config.settings.principal_header = Some("x-user".parse().unwrap());
    config.settings.oauth = Some(
        toml::from_str(&format!(
            "issuer = \"{ISSUER}\"\njwks-file = \"/x\"\naudience = \"{AUDIENCE}\"\n"
        ))
        .unwrap(),
    );
    let error = config.resolve_settings().unwrap_err();
    assert!(error.contains("exclusive"), "{error}");
}

/// A legacy (`initialize`-era) client's message, JSON or the answer event of an SSE body.
async fn legacy_reply(response: reqwest::Response) -> anyhow::Result<Value> {
    let text = response.text().await?;
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        return Ok(value);
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .ok_or_else(|| anyhow::anyhow!("no answer in {text}"))
}

/// A client of the `initialize` era logs in with its token on every request: its session is
/// bound to the token's principal, and the policy holds for it as for a modern client.
#[tokio::test]
async fn legacy_clients_get_the_same_policy_under_their_tokens_principal() -> anyhow::Result<()> {
    let (key, stack) = issued_stack(POLICY).await?;
    let url = stack.url();
    let post = |token: &str, session: Option<&str>, body: Value| {
        let mut request = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {token}"))
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    let dave = key.sign(&claims("dave", &["readers"]));
    let carol = key.sign(&claims("carol", &["ops"]));
    let opened = post(&dave, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "0"}}}))
    .await?;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"].to_str()?.to_owned();

    let listed = legacy_reply(
        post(
            &dave,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await?,
    )
    .await?;
    let mut names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    names.sort();
    assert_eq!(names, ["alpha__whoami", "beta__whoami"], "{listed}");
    let before = stack.backend_requests();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "beta__delete_branch", "arguments": {"repo": "a", "branch": "b"}}});
    let denied = legacy_reply(post(&dave, Some(&session), call).await?).await?;
    assert_eq!(
        denied["error"]["message"], "The tool beta__delete_branch is not permitted for this caller",
        "{denied}"
    );
    assert_eq!(
        stack.backend_requests(),
        before,
        "a denied call reached a backend"
    );
    let allowed = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "alpha__whoami", "arguments": {}}});
    let answer = legacy_reply(post(&dave, Some(&session), allowed.clone()).await?).await?;
    assert!(answer["result"]["content"].is_array(), "{answer}");
    // The session is dave's: carol's token does not open it.
    let theirs = post(&carol, Some(&session), allowed).await?;
    assert_eq!(theirs.status(), 404);
    // carol's groups reach the policy from her legacy requests too: her list has what ops may use.
    let hers = post(&carol, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "0"}}}))
    .await?;
    let session = hers.headers()["mcp-session-id"].to_str()?.to_owned();
    let listed = legacy_reply(
        post(
            &carol,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await?,
    )
    .await?;
    let tools = listed["result"]["tools"].as_array().cloned().unwrap_or_default();
    assert!(
        tools.iter().any(|t| t["name"] == "beta__delete_branch"),
        "{listed}"
    );
    stack.stop().await
}
