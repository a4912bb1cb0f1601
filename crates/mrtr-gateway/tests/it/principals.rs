//! `--principal-header` read one way everywhere (review 3, finding 2): a request to `/mcp` whose
//! header is missing, repeated, empty or unreadable is refused at the front, whatever its method
//! and era, and never reaches a backend; the raw UTF-8 bytes of a name and its `=?base64?…?=`
//! form are one principal, for envelopes, legacy backend sessions and per-principal stdio
//! processes alike; two names are never one.

use mrtr_backends::{LegacyBackend, ServedLegacy, serve_legacy};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway, StdioCommand};
use mrtr_test_support::backends::{Stack, delete_branch, delete_branch_retry};
use mrtr_test_support::gateway::{gateway, keyring, workspace_binary};
use mrtr_test_support::mcp::{Call, HEADERS, call_tool_raw, message, meta, send};
use mrtr_test_support::wait::{TIMEOUT, eventually};
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Value, json};

const USER: &str = "x-user";
/// `zoë` in the header form the specification gives values that are not plain ASCII.
const ZOE_ENCODED: &str = "=?base64?em/Dqw==?=";

/// A gateway over a legacy backend (found legacy by its probe), principals in `x-user`.
async fn over_legacy() -> (ServedLegacy, RunningGateway) {
    let legacy = serve_legacy(LegacyBackend::new("old")).await.unwrap();
    let mut config = GatewayConfig::new(vec![Backend::new("old", legacy.url()).unwrap()]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    config.settings.principal_header = Some(USER.parse().unwrap());
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the backend found legacy", || async {
        readiness.check().1["backends"]["old"]["era"] == "legacy"
    })
    .await;
    (legacy, gateway)
}

/// A POST of `body` with the 2026-07-28 headers, `mcp-method` and these `x-user` values (raw
/// bytes, any number): status and JSON-RPC message.
async fn post(url: &str, method: &str, body: &Value, users: &[&[u8]]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .timeout(TIMEOUT)
        .body(body.to_string());
    for (name, value) in HEADERS {
        request = request.header(name, value);
    }
    request = request.header("mcp-method", method);
    if let Some(name) = body["params"]["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    for user in users {
        let value = HeaderValue::from_bytes(user).unwrap();
        request = request.header(HeaderName::from_static(USER), value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    if method == "subscriptions/listen" && status == 200 {
        // A listen's stream stays open: its head is the answer here.
        return (status, Value::Null);
    }
    let text = response.text().await.unwrap();
    (status, message(&text).unwrap_or(Value::Null))
}

fn request(method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = meta();
    json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params })
}

fn text_of(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_request_without_one_readable_principal_is_refused_whatever_it_asks() {
    let (_legacy, gateway) = over_legacy().await;
    let url = gateway.url();
    let requests = [
        (
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "x" } }),
        ),
        ("tools/list", json!({})),
        ("server/discover", json!({})),
        (
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "p" }, "argument": { "name": "a", "value": "" } }),
        ),
        (
            "subscriptions/listen",
            json!({ "notifications": { "toolsListChanged": true } }),
        ),
    ];
    let unreadable: [(&str, &[&[u8]]); 5] = [
        ("missing", &[]),
        ("repeated", &[b"alice", b"bob"]),
        ("empty", &[b""]),
        ("not UTF-8", &[b"zo\xeb"]),
        ("bad base64", &[b"=?base64?not base64?="]),
    ];
    for (method, params) in &requests {
        let body = request(method, params.clone());
        for (why, users) in unreadable {
            let (status, refusal) = post(&url, method, &body, users).await;
            assert_eq!(status, 403, "{method}, principal {why}: {refusal}");
            assert_eq!(refusal["error"]["code"], -32600, "{method}, {why}: {refusal}");
        }
        // The same request with one readable principal reaches past the front.
        let (status, answer) = post(&url, method, &body, &[b"alice"]).await;
        assert_ne!(status, 403, "{method} as alice: {answer}");
    }

    // A legacy client's `initialize` meets the same front.
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "legacy", "version": "1" } } });
    let legacy_post = |user: Option<&'static str>| {
        let mut request = reqwest::Client::new()
            .post(&url)
            .timeout(TIMEOUT)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string());
        if let Some(user) = user {
            request = request.header(USER, user);
        }
        request.send()
    };
    assert_eq!(legacy_post(None).await.unwrap().status(), 403);
    assert_eq!(legacy_post(Some("alice")).await.unwrap().status(), 200);
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn two_principals_never_share_a_legacy_backend_session_and_both_forms_of_one_name_do() {
    let (_legacy, gateway) = over_legacy().await;
    let session = async |user: &str| {
        let arguments = json!({ "text": "" });
        let (status, text, response) = call_tool_raw(
            &gateway.url(),
            1,
            "session",
            arguments,
            json!({}),
            &[(USER, user)],
        )
        .await
        .unwrap();
        assert_eq!(status, 200, "{user}: {text}");
        text_of(&response).to_owned()
    };
    let zoe = session("zoë").await;
    let jose = session("josé").await;
    let alice = session("alice").await;
    assert!(zoe != "none" && jose != "none", "sessions: {zoe} {jose}");
    assert_ne!(zoe, jose, "zoë and josé are two principals");
    assert_ne!(zoe, alice);
    assert_eq!(
        session(ZOE_ENCODED).await,
        zoe,
        "zoë's two header forms are one principal"
    );
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_principal_that_is_not_ascii_completes_a_round_trip_bound_to_it() {
    let json = mrtr_backends::ResponseMode::Json;
    let (alpha, beta) = Stack::start(json, json).await.unwrap();
    let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    config.settings.principal_header = Some(USER.parse().unwrap());
    let stack = Stack::with_gateway(alpha, beta, config).await.unwrap();
    let url = stack.url();
    let call = |params: Value, user: &str| Call::new("tools/call", params).header(USER, user);
    let first = send(&url, &call(delete_branch("beta__delete_branch"), "zoë"))
        .await
        .unwrap();
    assert_eq!(
        first.body["result"]["resultType"], "input_required",
        "{}",
        first.body
    );
    let state = first.state().unwrap();
    let retry = delete_branch_retry("beta__delete_branch", &state);
    // Bound to zoë: refused for josé, opened for zoë under either header form.
    let other = send(&url, &call(retry.clone(), "josé")).await.unwrap();
    assert_eq!(other.error_code(), Some(-32602), "{}", other.body);
    let done = send(&url, &call(retry, ZOE_ENCODED)).await.unwrap();
    assert!(done.text().starts_with("[beta] delete_branch"), "{}", done.body);
    stack.stop().await.unwrap();
}

#[tokio::test]
async fn principals_that_are_not_ascii_get_processes_of_their_own() {
    let binary = workspace_binary("legacy-stdio-server");
    let command = StdioCommand::new([binary.to_string_lossy().into_owned(), "legacy-stdio".to_owned()])
        .unwrap()
        .per_principal(std::num::NonZeroUsize::new(4).unwrap());
    let mut config = GatewayConfig::new(vec![Backend::stdio("local", command).unwrap()]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    config.settings.principal_header = Some(USER.parse().unwrap());
    let gateway = gateway(config, keyring()).await.unwrap();
    let pid = async |user: &str| {
        let (status, text, response) =
            call_tool_raw(&gateway.url(), 1, "pid", json!({}), json!({}), &[(USER, user)])
                .await
                .unwrap();
        assert_eq!(status, 200, "{user}: {text}");
        text_of(&response).to_owned()
    };
    let (zoe, jose) = (pid("zoë").await, pid("josé").await);
    assert_ne!(zoe, jose, "zoë and josé share no process");
    assert_eq!(pid(ZOE_ENCODED).await, zoe);
    gateway.shutdown().await.unwrap();
}
