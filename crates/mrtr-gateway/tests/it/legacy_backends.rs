//! A 2026-07-28 client served by an `initialize`-era backend (rmcp limited to 2025-11-25, with
//! sessions) through the gateway: calls and lists come back in modern form under the client's
//! id, two principals never share a backend session, progress reaches the client's stream, the
//! backend's own requests are answered with an error instead of reaching the client, and a
//! backend that restarts (forgetting its sessions) is initialised again with no error for the
//! client, and a gateway that stops ends its sessions with `DELETE`.

use std::time::Duration;

use mrtr_backends::legacy::WATCHED;
use mrtr_backends::{LegacyBackend, serve_legacy, serve_legacy_at};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{HEADERS, call_tool_raw, listen, message, meta, raw};
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// A gateway over the legacy backend at `url` (probed once), sessions keyed by `x-user`.
async fn gateway_over(url: &str) -> RunningGateway {
    let mut config = GatewayConfig::new(vec![Backend::new("old", url).unwrap()]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    config.settings.principal_header = Some("x-user".parse().unwrap());
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the backend found legacy", || async {
        readiness.check().1["backends"]["old"]["era"] == "legacy"
    })
    .await;
    gateway
}

/// `tools/call` of `tool` (with the text `hello`) as `user`, with `_meta` extended by `extra`:
/// the raw answer's status, text and JSON-RPC response.
async fn call(
    gateway: &RunningGateway,
    user: &str,
    id: u64,
    tool: &str,
    extra: Value,
) -> (u16, String, Value) {
    let arguments = json!({ "text": "hello" });
    let (status, text, response) =
        call_tool_raw(&gateway.url(), id, tool, arguments, extra, &[("x-user", user)])
            .await
            .unwrap();
    assert!(!response.is_null(), "no JSON-RPC response: {text}");
    (status, text, response)
}

fn text_of(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_modern_client_calls_a_legacy_backend_and_gets_modern_answers() {
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let gateway = gateway_over(legacy.url()).await;

    let (status, _, response) = call(&gateway, "alice", 41, "echo", json!({})).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["id"], 41,
        "the client's id, not the gateway's: {response}"
    );
    assert_eq!(response["result"]["resultType"], "complete", "{response}");
    assert_eq!(text_of(&response), "hello", "{response}");

    let (status, _, list) = raw(
        reqwest::Method::POST,
        &gateway.url(),
        &[&HEADERS[..], &[("mcp-method", "tools/list"), ("x-user", "alice")]].concat(),
        &json!({ "jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": { "_meta": meta() } })
            .to_string(),
    )
    .await
    .unwrap();
    let list = message(&list).unwrap();
    assert_eq!((status, &list["id"]), (200, &json!("l")), "{list}");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "echo",
            "session",
            "progress",
            "ask",
            "roots",
            "environment",
            "pid",
            "sleep",
            "stderr",
            "notify",
            "subscriptions"
        ],
        "{list}"
    );

    let (_, _, discover) = raw(
        reqwest::Method::POST,
        &gateway.url(),
        &[
            &HEADERS[..],
            &[("mcp-method", "server/discover"), ("x-user", "alice")],
        ]
        .concat(),
        &json!({ "jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": { "_meta": meta() } })
            .to_string(),
    )
    .await
    .unwrap();
    let discover = message(&discover).unwrap();
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{discover}"
    );
    assert_eq!(discover["result"]["serverInfo"]["name"], "old-echo", "{discover}");
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn two_principals_never_share_a_legacy_backend_session() {
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let gateway = gateway_over(legacy.url()).await;
    let session = |user: &'static str, id| {
        let gateway = &gateway;
        async move { text_of(&call(gateway, user, id, "session", json!({})).await.2).to_owned() }
    };
    let alice = session("alice", 1).await;
    let bob = session("bob", 2).await;
    assert!(
        alice != "none" && bob != "none",
        "the backend keeps sessions: {alice} {bob}"
    );
    assert_ne!(alice, bob, "alice and bob got one session");
    assert_eq!(session("alice", 3).await, alice, "alice's session is reused");
    assert_eq!(session("bob", 4).await, bob, "bob's session is reused");
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn progress_reaches_the_client_and_the_backends_requests_do_not() {
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let gateway = gateway_over(legacy.url()).await;

    let (_, stream, response) = call(
        &gateway,
        "alice",
        5,
        "progress",
        json!({ "progressToken": "p-1" }),
    )
    .await;
    let events: Vec<Value> = stream
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress: Vec<&Value> = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{stream}");
    assert_eq!(progress[0]["params"]["progressToken"], "p-1", "{stream}");
    assert_eq!(
        (response["id"].clone(), text_of(&response)),
        (json!(5), "done"),
        "{stream}"
    );

    // `roots` asks the client for its roots: the gateway answers for the modern client, with an
    // error naming why, and the client's stream carries no server-to-client request.
    let (_, stream, response) = call(&gateway, "alice", 6, "roots", json!({})).await;
    assert!(!stream.contains(r#""method":"roots/list""#), "{stream}");
    assert!(
        !stream.contains("retry:"),
        "the legacy priming event is not passed on: {stream}"
    );
    let text = text_of(&response);
    assert!(
        text.starts_with("no roots:")
            && text.contains("takes no roots/list")
            && text.contains("io.modelcontextprotocol/tasks"),
        "{response}"
    );
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_backend_that_restarts_gets_a_new_session_and_the_client_no_error() {
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let addr = legacy.addr();
    let gateway = gateway_over(legacy.url()).await;
    let before = text_of(&call(&gateway, "alice", 1, "session", json!({})).await.2).to_owned();

    drop(legacy);
    let mut restarted = None;
    for _ in 0..100 {
        match serve_legacy_at(LegacyBackend::new("old-echo"), addr).await {
            Ok(served) => {
                restarted = Some(served);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let _restarted = restarted.expect("the port is free again");

    let (status, _, response) = call(&gateway, "alice", 2, "session", json!({})).await;
    assert_eq!(status, 200, "{response}");
    let after = text_of(&response);
    assert!(
        after != "none" && after != before,
        "a new session: {before} then {response}"
    );
    let (_, _, echo) = call(&gateway, "alice", 3, "echo", json!({})).await;
    assert_eq!(text_of(&echo), "hello", "{echo}");
    gateway.shutdown().await.unwrap();
}

/// A raw `tools/list` to the backend itself in `session`: its HTTP status.
async fn status_in_session(url: &str, session: &str) -> u16 {
    let body = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {} });
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
        ("mcp-session-id", session),
    ];
    raw(reqwest::Method::POST, url, &headers, &body.to_string())
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn the_gateway_ends_its_backend_sessions_when_it_stops() {
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let gateway = gateway_over(legacy.url()).await;
    let session = text_of(&call(&gateway, "alice", 1, "session", json!({})).await.2).to_owned();
    assert_eq!(
        status_in_session(legacy.url(), &session).await,
        200,
        "the session is open while the gateway runs"
    );
    gateway.shutdown().await.unwrap();
    assert_eq!(
        status_in_session(legacy.url(), &session).await,
        404,
        "the gateway DELETEd its session as it stopped"
    );
}

/// `tools/call` of `tool` with the argument `text`, as `user`: the JSON-RPC response.
async fn tool(gateway: &RunningGateway, user: &str, id: u64, tool: &str, text: &str) -> Value {
    let arguments = json!({ "text": text });
    let (_, text, response) = call_tool_raw(
        &gateway.url(),
        id,
        tool,
        arguments,
        json!({}),
        &[("x-user", user)],
    )
    .await
    .unwrap();
    assert!(!response.is_null(), "no JSON-RPC response: {text}");
    response
}

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

#[tokio::test]
async fn listens_share_their_sessions_stream_and_subscriptions_are_counted() {
    let legacy = serve_legacy(LegacyBackend::new("old-notes")).await.unwrap();
    let gateway = gateway_over(legacy.url()).await;
    let alice = [("x-user", "alice")];

    let filter = json!({ "toolsListChanged": true, "resourceSubscriptions": [WATCHED] });
    let (status, mut first) = listen(&gateway.url(), 61, filter, &alice).await.unwrap();
    assert_eq!(status, 200);
    let ack = first.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "toolsListChanged": true, "resourceSubscriptions": [WATCHED] }),
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], 61, "{ack}");
    // A second listen in the same session. The backend sends its notifications on one GET
    // stream per session (rmcp keeps a second one open but sends it nothing), so the updates
    // below reach both only if the two listens share the one stream.
    let filter = json!({ "resourceSubscriptions": [WATCHED] });
    let (status, mut second) = listen(&gateway.url(), 62, filter, &alice).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        second.next().await.unwrap()["params"]["_meta"][SUBSCRIPTION_ID],
        62
    );
    assert_eq!(
        text_of(&tool(&gateway, "alice", 63, "subscriptions", "").await),
        WATCHED
    );
    assert_eq!(
        text_of(&tool(&gateway, "bob", 64, "subscriptions", "").await),
        "",
        "bob's session is not alice's"
    );

    // The backend sends an update once, on its GET stream; each listen gets it, under its id.
    assert_eq!(
        text_of(&tool(&gateway, "alice", 65, "notify", WATCHED).await),
        WATCHED
    );
    for (listen, id) in [(&mut first, 61), (&mut second, 62)] {
        let update = listen.next().await.unwrap();
        assert_eq!(update["method"], "notifications/resources/updated", "{update}");
        assert_eq!(update["params"]["uri"], WATCHED, "{update}");
        assert_eq!(update["params"]["_meta"][SUBSCRIPTION_ID], id, "{update}");
    }
    tool(&gateway, "alice", 66, "notify", "tools").await;
    let change = first.next().await.unwrap();
    assert_eq!(change["method"], "notifications/tools/list_changed", "{change}");

    // The last listen of the resource to go unsubscribes it; the first going does not.
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        text_of(&tool(&gateway, "alice", 67, "subscriptions", "").await),
        WATCHED
    );
    drop(second);
    eventually(TIMEOUT, "the backend unsubscribed", || async {
        text_of(&tool(&gateway, "alice", 68, "subscriptions", "").await).is_empty()
    })
    .await;
    gateway.shutdown().await.unwrap();
}
