//! The access log of the real binary (issue 14, item 10): one JSON line per request with
//! `--log-format json`, with method, target, backend, status and duration, and nothing of the
//! body or the client's credentials.

use mrtr_test_support::backends::{Answer, start_backend};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::mcp_post;
use mrtr_test_support::metrics::sample;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

#[tokio::test]
async fn every_request_gets_one_json_access_line_without_secrets() {
    let (url, _) = start_backend(Answer::Json, None).await;
    let keys = tower_mrtr::Keyring::generate("k1").unwrap().to_config_string();
    let gateway = Process::spawn(
        BIN,
        &["--backend", &format!("alpha={url}"), "--log-format", "json"],
        &[("MRTR_KEYS", keys.as_str())],
    );
    let response = mcp_post(
        &reqwest::Client::new(),
        &gateway.url,
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "body-secret"}}),
    )
    .header("authorization", "Bearer client-secret")
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let lines = || -> Vec<Value> {
        let stderr = gateway.stderr.lock().unwrap().clone();
        stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["target"] == "mrtr_gateway::access")
            .collect()
    };
    eventually(TIMEOUT, "the access line", || async { !lines().is_empty() }).await;
    let lines = lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let fields = &lines[0]["fields"];
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(fields["http"], "POST");
    assert_eq!(fields["method"], "tools/call");
    assert_eq!(fields["target"], "echo");
    assert_eq!(fields["backend"], "alpha");
    assert_eq!(fields["status"], 200);
    assert!(fields["duration_ms"].as_f64().unwrap() > 0.0, "{fields}");
    let stderr = gateway.stderr.lock().unwrap().clone();
    assert!(
        !stderr.contains("client-secret") && !stderr.contains("body-secret"),
        "{stderr}"
    );
}

/// POSTs a legacy (`initialize`-era) client's message: no `Mcp-Method`, `Mcp-Name` or 2026-07-28
/// version, in `session` when given. The status, the session id it names, and the body.
async fn legacy_post(url: &str, session: Option<&str>, message: Value) -> (u16, Option<String>, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .timeout(TIMEOUT)
        .body(message.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, session, response.text().await.unwrap())
}

/// Issue 38, finding 1: a legacy client's requests are named in the access log (a routed
/// `tools/call` as one, the front's own answers as `@gateway`), and an `initialize`-era HTTP
/// backend's requests are counted by what they carry rather than all as `none`; the counts in
/// `/metrics` after a mix of modern and legacy traffic are the ones `docs/operations.md` gives.
#[tokio::test]
async fn legacy_clients_and_backends_are_named_in_the_access_log_and_metrics() {
    let old = mrtr_backends::serve_legacy(mrtr_backends::LegacyBackend::new("old"))
        .await
        .unwrap();
    let keys = tower_mrtr::Keyring::generate("k1").unwrap().to_config_string();
    let gateway = Process::spawn(
        BIN,
        &["--backend", &format!("old={}", old.url()), "--log-format", "json"],
        &[("MRTR_KEYS", keys.as_str())],
    );
    eventually(TIMEOUT, "the backend found legacy", || async {
        gateway.readyz().await.1["backends"]["old"]["era"] == "legacy"
    })
    .await;

    // A modern client's call.
    let modern = mcp_post(
        &reqwest::Client::new(),
        &gateway.url,
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "modern"}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(modern.status(), 200);
    // A legacy client: initialize, initialized, a call and a ping.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "legacy-test", "version": "1"}}});
    let (status, session, body) = legacy_post(&gateway.url, None, initialize).await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        legacy_post(&gateway.url, Some(&session), initialized).await.0,
        202
    );
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "legacy"}}});
    let (status, _, body) = legacy_post(&gateway.url, Some(&session), call).await;
    assert!(status == 200 && body.contains("legacy"), "{status} {body}");
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(legacy_post(&gateway.url, Some(&session), ping).await.0, 200);

    let lines = || -> Vec<Value> {
        let stderr = gateway.stderr.lock().unwrap().clone();
        stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["target"] == "mrtr_gateway::access")
            .map(|line| line["fields"].clone())
            .collect()
    };
    eventually(TIMEOUT, "five access lines", || async { lines().len() >= 5 }).await;
    let named = |method: &str| -> Vec<(String, String, u64)> {
        lines()
            .iter()
            .filter(|f| f["method"] == method)
            .map(|f| {
                let text = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
                (text("target"), text("backend"), f["status"].as_u64().unwrap())
            })
            .collect()
    };
    let echo = || ("echo".to_owned(), "old".to_owned(), 200);
    assert_eq!(named("tools/call"), [echo(), echo()], "{:#?}", lines());
    let own = |status| ("-".to_owned(), "@gateway".to_owned(), status);
    assert_eq!(named("initialize"), [own(200)]);
    assert_eq!(named("notifications/initialized"), [own(202)]);
    assert_eq!(named("ping"), [own(200)]);
    assert!(lines().iter().all(|f| f["method"] != "-"), "{:#?}", lines());
    // The session's end, answered by the front: `@gateway`, like its `initialize`.
    let ended = reqwest::Client::new()
        .delete(&gateway.url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    eventually(TIMEOUT, "the DELETE's access line", || async {
        lines().iter().any(|f| f["http"] == "DELETE")
    })
    .await;
    let deleted: Vec<Value> = lines().into_iter().filter(|f| f["http"] == "DELETE").collect();
    assert_eq!(deleted[0]["backend"], "@gateway", "{deleted:#?}");

    let metrics = gateway.metrics().await;
    let count = |metric: &str, labels: &[(&str, &str)]| sample(&metrics, metric, labels);
    let backend = |method| {
        count(
            "mrtr_gateway_backend_requests_total",
            &[("backend", "old"), ("method", method)],
        )
    };
    assert_eq!(backend("tools/call"), Some(2.0), "{metrics}");
    // The probe's sessions and the legacy client's: each opened with both.
    assert!(backend("initialize").is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(backend("notifications/*").is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(
        backend("none"),
        None,
        "no request of the legacy backend is unlabelled: {metrics}"
    );
    // The modern call, and the legacy one as the modern request the front made of it.
    let requests = |method| count("mrtr_gateway_requests_total", &[("method", method)]);
    assert_eq!(requests("tools/call"), Some(2.0), "{metrics}");
    // The legacy initialize, as the front's server/discover; the front's own answers are not
    // counted.
    assert_eq!(requests("server/discover"), Some(1.0), "{metrics}");
    assert_eq!(requests("ping"), None, "{metrics}");
    assert_eq!(requests("initialize"), None, "{metrics}");
    // What is open: the legacy client's one session opened, no call of it waiting, and the
    // sessions with the legacy HTTP backend (the probe's, the clients').
    assert_eq!(
        count("mrtr_gateway_legacy_sessions_total", &[]),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(count("mrtr_gateway_legacy_waiting_calls", &[]), None, "{metrics}");
    let sessions = count("mrtr_gateway_backend_sessions", &[("backend", "old")]);
    assert!(sessions.is_some_and(|n| n >= 1.0), "{metrics}");
}
