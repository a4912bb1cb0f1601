//! The access log of the real binary (issue 14, item 10): one JSON line per request with
//! `--log-format json`, with method, target, backend, status and duration, and nothing of the
//! body or the client's credentials.

use mrtr_test_support::backends::{Answer, start_backend};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::mcp_post;
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
