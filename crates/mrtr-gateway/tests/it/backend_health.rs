//! Readiness comes from the gateway's own probe alone: what a client's request gets from the
//! backends (here a 415 to every list call, as for a request with a wrong media type) never
//! takes a replica out of a load balancer's rotation, and `/readyz` names a down backend's reason
//! as a class, never its detail.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{body, mcp_headers, raw};
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// A backend that answers the gateway's `server/discover` probe and refuses everything else
/// with 415 and no JSON-RPC body.
async fn picky_backend() -> String {
    async fn answer(body: String) -> Response {
        let message: Value = serde_json::from_str(&body).unwrap_or_default();
        if message["method"] == "server/discover" {
            let result = json!({
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": { "supportedVersions": ["2026-07-28"], "capabilities": {}, "serverInfo": { "name": "picky", "version": "1" } }
            });
            return ([("content-type", "application/json")], result.to_string()).into_response();
        }
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported media type").into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = Router::new().route("/mcp", post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_clients_failed_request_never_takes_the_replica_out_of_rotation() {
    let url = picky_backend().await;
    let mut config = GatewayConfig::new(vec![
        Backend::new("alpha", &url).unwrap(),
        Backend::new("beta", &url).unwrap(),
    ]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "ready after the first probe", || async {
        readiness.check().0
    })
    .await;

    // A list call fans out; every backend answers it 415. The client learns it failed...
    let (status, _, answer) = raw(
        reqwest::Method::POST,
        &gateway.url(),
        &mcp_headers("tools/list"),
        &body(1, "tools/list", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(status, 502, "{answer}");
    // ... and the replica stays ready, its backends up: only the probe judges them.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (ready, shown) = readiness.check();
    assert!(ready, "{shown}");
    assert_eq!(shown["backends"]["alpha"]["state"], "up", "{shown}");
    assert_eq!(shown["backends"]["beta"]["state"], "up", "{shown}");
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_down_backend_shows_a_reason_class_and_no_detail() {
    // A port held by a socket that never listens: connections to it are refused, and no other
    // test's server can be given it (a listener bound and dropped freed its port, which the
    // other test's backend, bound at the same moment, once got: this probe then found it up).
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    let mut config = GatewayConfig::new(vec![Backend::new("alpha", &url).unwrap()]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the first probe", || async {
        readiness.check().1["backends"]["alpha"]["state"] == "down"
    })
    .await;
    let (ready, shown) = readiness.check();
    assert!(!ready);
    assert_eq!(shown["backends"]["alpha"]["reason"], "unreachable", "{shown}");
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    assert!(!shown.to_string().contains(port), "no address in {shown}");
    gateway.shutdown().await.unwrap();
    drop(closed);
}
