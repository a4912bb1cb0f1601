//! The health probe finds each backend's era: a 2026-07-28 server (rmcp's demo backend) is up as
//! `modern`; an `initialize`-era server with sessions (rmcp limited to 2025-11-25, as every
//! official reference server still is) is up as `legacy`, with its version and server, in
//! `/readyz`, the metrics and the log. A backend configured `modern` that answers as a legacy
//! one, and one that speaks no MCP, are down with the reason; an unusable backend is never
//! reported up. (`legacy_backends.rs` has what requests to a legacy backend become.)

use std::time::Duration;

use mrtr_backends::{DemoBackend, LegacyBackend, ResponseMode, serve, serve_legacy};
use mrtr_gateway::{Backend, Era, GatewayConfig, PositiveSeconds};
use mrtr_test_support::gateway::{Process, gateway, keyring};
use mrtr_test_support::mcp::{body, mcp_headers, message, raw};
use mrtr_test_support::metrics::sample;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

/// A gateway over `backends`, probed once (the next probe is an hour away), and its readiness
/// once every backend has been probed.
async fn probed(backends: Vec<Backend>) -> (mrtr_gateway::RunningGateway, Value) {
    let names: Vec<String> = backends.iter().map(|b| b.name().to_owned()).collect();
    let mut config = GatewayConfig::new(backends);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "every backend probed", || async {
        let shown = readiness.check().1;
        names.iter().all(|n| shown["backends"][n]["state"] != "unknown")
    })
    .await;
    let shown = readiness.check().1;
    (gateway, shown)
}

async fn post(url: &str, method: &'static str, params: Value) -> (u16, Value) {
    let (status, _, answer) = raw(
        reqwest::Method::POST,
        url,
        &mcp_headers(method),
        &body(1, method, params),
    )
    .await
    .unwrap();
    (status, message(&answer).unwrap())
}

#[tokio::test]
async fn a_modern_backend_and_an_initialize_era_one_are_up_with_their_eras() {
    let modern = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let (gateway, shown) = probed(vec![
        Backend::new("alpha", &modern.url()).unwrap(),
        Backend::new("old", legacy.url()).unwrap(),
    ])
    .await;

    let alpha = &shown["backends"]["alpha"];
    assert_eq!(
        (
            alpha["state"].as_str(),
            alpha["era"].as_str(),
            alpha["protocol_version"].as_str()
        ),
        (Some("up"), Some("modern"), Some("2026-07-28")),
        "{shown}"
    );
    let old = &shown["backends"]["old"];
    assert_eq!(
        (
            old["state"].as_str(),
            old["era"].as_str(),
            old["protocol_version"].as_str(),
            old["server"]["name"].as_str()
        ),
        (Some("up"), Some("legacy"), Some("2025-11-25"), Some("old-echo")),
        "{shown}"
    );
    assert!(old.get("reason").is_none(), "{shown}");

    // The merged list has both backends' tools.
    let (status, tools) = post(&gateway.url(), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{tools}");
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"whoami") && names.contains(&"echo"), "{names:?}");
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_backend_configured_modern_that_answers_as_legacy_is_down_as_not_modern() {
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let backend = Backend::new("old", legacy.url()).unwrap().with_era(Era::Modern);
    let (gateway, shown) = probed(vec![backend]).await;
    let old = &shown["backends"]["old"];
    assert_eq!(
        (old["state"].as_str(), old["reason"].as_str(), old.get("era")),
        (Some("down"), Some("not_modern"), None),
        "{shown}"
    );
    gateway.shutdown().await.unwrap();

    // Configured legacy, it is probed with initialize alone, and found.
    let backend = Backend::new("old", legacy.url()).unwrap().with_era(Era::Legacy);
    let (gateway, shown) = probed(vec![backend]).await;
    assert_eq!(shown["backends"]["old"]["era"], "legacy", "{shown}");
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_backend_that_speaks_no_mcp_at_all_is_down_as_not_mcp() {
    // A plain HTTP server: 404 to every POST, to server/discover and to initialize alike.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
    let (gateway, shown) = probed(vec![Backend::new("web", &url).unwrap()]).await;
    let web = &shown["backends"]["web"];
    assert_eq!(
        (web["state"].as_str(), web["reason"].as_str()),
        (Some("down"), Some("not_mcp")),
        "{shown}"
    );
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_era_found_is_in_the_metrics_and_the_log() {
    let modern = serve(DemoBackend::beta("beta").unwrap(), ResponseMode::Sse)
        .await
        .unwrap();
    let legacy = serve_legacy(LegacyBackend::new("old-echo")).await.unwrap();
    let keys = tower_mrtr::keyring::generate_entry("k1").unwrap().to_string();
    let beta = format!("beta={}", modern.url());
    let old = format!("old={}", legacy.url());
    let gateway = Process::spawn(
        BIN,
        &["--backend", &beta, "--backend", &old],
        &[("MRTR_KEYS", &keys)],
    );
    eventually(Duration::from_secs(15), "both backends probed", || async {
        let (_, ready) = gateway.readyz().await;
        ready["backends"]["beta"]["state"] == "up" && ready["backends"]["old"]["state"] == "up"
    })
    .await;
    let metrics = gateway.metrics().await;
    let era = |backend, era, version| {
        sample(
            &metrics,
            "mrtr_gateway_backend_era",
            &[("backend", backend), ("era", era), ("protocol_version", version)],
        )
    };
    assert_eq!(era("beta", "modern", "2026-07-28"), Some(1.0), "{metrics}");
    assert_eq!(era("old", "legacy", "2025-11-25"), Some(1.0), "{metrics}");
    assert_eq!(
        sample(&metrics, "mrtr_gateway_backend_up", &[("backend", "old")]),
        Some(1.0),
        "{metrics}"
    );
    let logged = |needle: &'static str| {
        let stderr = gateway.stderr.clone();
        move || {
            let stderr = stderr.clone();
            async move { stderr.lock().unwrap().contains(needle) }
        }
    };
    eventually(TIMEOUT, "the legacy backend's line", logged("era=\"legacy\"")).await;
    let stderr = gateway.stderr.lock().unwrap().clone();
    let line = stderr
        .lines()
        .find(|l| l.contains("backend up") && l.contains("backend=\"old\""))
        .unwrap_or_default();
    assert!(
        line.contains("2025-11-25") && line.contains("old-echo 1.0.0"),
        "{stderr}"
    );
    eventually(TIMEOUT, "the modern backend's line", logged("era=\"modern\"")).await;
}
