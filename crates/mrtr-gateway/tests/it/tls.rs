//! TLS both ways, on 127.0.0.1 with certificates made by the test (rcgen):
//!
//! * an MRTR round through the gateway to an HTTPS backend behind a private CA, over HTTP/2
//!   (negotiated with ALPN), and the same backend refused when the gateway trusts only the
//!   system's roots;
//! * an MRTR round to a backend that requires a client certificate (mTLS), and refused without
//!   one;
//! * the gateway's own listener over TLS, with its certificate replaced while it runs.
//!
//! A parked TLS connection is tested where the parking counter is, in `front/server.rs`.

use std::sync::Arc;

use http::Version;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mrtr_backends::{DemoBackend, ResponseMode, ServeOptions};
use mrtr_gateway::reload::{CertFiles, Reloaded};
use mrtr_gateway::tls::{BackendTls, ListenerTls};
use mrtr_gateway::{Backend, GatewayConfig, RunningGateway};
use mrtr_test_support::backends::{delete_branch, delete_branch_retry};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{body, call_tool, mcp_request, message, response_text};
use mrtr_test_support::tls::{Ca, HttpsServer, TempDir, server_config};
use mrtr_test_support::wait::TIMEOUT;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The demo backend `alpha` (JSON answers) as an axum router.
fn alpha_router() -> axum::Router {
    mrtr_backends::serve::router(
        DemoBackend::alpha("alpha").unwrap(),
        &ServeOptions::new(ResponseMode::Json),
        CancellationToken::new(),
    )
}

/// A gateway in front of `backend` alone, probing it rarely.
async fn gateway_to(backend: Backend) -> RunningGateway {
    let mut config = GatewayConfig::new(vec![backend]);
    // The probe is one more request that must fail without the right certificates.
    config.settings.health_interval = mrtr_gateway::PositiveSeconds::from_secs(60);
    gateway(config, keyring()).await.unwrap()
}

/// Both rounds of `delete_branch` through `url` (plain HTTP); the final result's text.
async fn mrtr_round(url: &str) -> Result<String, Value> {
    let client = reqwest::Client::new();
    let round1 = call_tool(&client, url, 1, delete_branch("delete_branch")).await;
    let Some(state) = round1["result"]["requestState"].as_str() else {
        return Err(round1);
    };
    assert!(state.starts_with("mrtr4."), "{round1}");
    let round2 = call_tool(&client, url, 2, delete_branch_retry("delete_branch", state)).await;
    round2["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
        .ok_or(round2)
}

#[tokio::test]
async fn mrtr_round_to_an_https_backend_with_a_private_ca() {
    let dir = TempDir::new("private-ca");
    let ca = Ca::new(&dir.0, "private");
    let (cert, key) = ca.leaf("backend", &["127.0.0.1", "localhost"]);
    let backend = HttpsServer::start(alpha_router(), server_config(&cert, &key, None)).await;

    // Trusting only the system's roots, the private certificate is refused: the call fails.
    let untrusting = gateway_to(Backend::new("alpha", &backend.url()).unwrap()).await;
    let refused = mrtr_round(&untrusting.url()).await.unwrap_err();
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(*backend.failed_handshakes.lock().unwrap() >= 1);
    assert!(
        backend.versions.lock().unwrap().is_empty(),
        "no request (not even the health probe) got through"
    );
    untrusting.shutdown().await.unwrap();

    let tls = BackendTls {
        ca_file: Some(ca.cert_file()),
        ..BackendTls::default()
    };
    let trusting = gateway_to(
        Backend::new("alpha", &backend.url())
            .unwrap()
            .with_tls(tls.client_config().unwrap()),
    )
    .await;
    let text = mrtr_round(&trusting.url()).await.unwrap();
    assert!(
        text.starts_with("[alpha] delete_branch: deleted branch old"),
        "{text}"
    );
    let versions = backend.versions_of("tools/call");
    assert_eq!(versions.len(), 2, "both rounds reached the backend");
    assert!(
        versions.iter().all(|v| *v == Version::HTTP_2),
        "ALPN chose HTTP/2: {versions:?}"
    );
    trusting.shutdown().await.unwrap();
}

#[tokio::test]
async fn mrtr_round_to_a_backend_requiring_a_client_certificate() {
    let dir = TempDir::new("mtls");
    let server_ca = Ca::new(&dir.0, "server");
    let client_ca = Ca::new(&dir.0, "client");
    let (cert, key) = server_ca.leaf("backend", &["127.0.0.1"]);
    let (client_cert, client_key) = client_ca.leaf("gateway-client", &["mrtr-gateway"]);
    let backend = HttpsServer::start(
        alpha_router(),
        server_config(&cert, &key, Some(&client_ca.cert_file())),
    )
    .await;

    let without = BackendTls {
        ca_file: Some(server_ca.cert_file()),
        ..BackendTls::default()
    };
    let anonymous = gateway_to(
        Backend::new("alpha", &backend.url())
            .unwrap()
            .with_tls(without.client_config().unwrap()),
    )
    .await;
    let refused = mrtr_round(&anonymous.url()).await.unwrap_err();
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(
        backend.versions.lock().unwrap().is_empty(),
        "no request (not even the health probe) got through"
    );
    anonymous.shutdown().await.unwrap();

    let with = BackendTls {
        ca_file: Some(server_ca.cert_file()),
        client_cert: Some(client_cert),
        client_key: Some(client_key),
    };
    let authenticated = gateway_to(
        Backend::new("alpha", &backend.url())
            .unwrap()
            .with_tls(with.client_config().unwrap()),
    )
    .await;
    let text = mrtr_round(&authenticated.url()).await.unwrap();
    assert!(
        text.starts_with("[alpha] delete_branch: deleted branch old"),
        "{text}"
    );
    assert_eq!(backend.versions_of("tools/call").len(), 2);
    authenticated.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_listener_serves_tls_and_takes_a_new_certificate_without_a_restart() {
    let dir = TempDir::new("listener");
    let (first_ca, second_ca) = (Ca::new(&dir.0, "first"), Ca::new(&dir.0, "second"));
    let (cert, key) = first_ca.leaf("listener", &["127.0.0.1"]);
    let backend = mrtr_backends::serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let tls = Arc::new(ListenerTls::load(&cert, &key).unwrap());
    let mut config = GatewayConfig::new(vec![Backend::new("alpha", &backend.url()).unwrap()]);
    config.listener_tls = Some(tls.clone());
    let gateway = gateway(config, keyring()).await.unwrap();
    assert!(gateway.url().starts_with("https://127.0.0.1:"));

    // A fresh client (so a fresh connection and handshake) trusting only `ca`.
    let call = |ca: std::path::PathBuf, id: u64| {
        let url = gateway.url();
        async move {
            let tls = BackendTls {
                ca_file: Some(ca),
                ..BackendTls::default()
            }
            .client_config()
            .unwrap();
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(Arc::unwrap_or_clone(tls))
                .https_only()
                .enable_http1()
                .build();
            let client = Client::builder(TokioExecutor::new()).build(connector);
            let request = mcp_request(
                &url,
                "tools/call",
                Some("whoami"),
                body(id, "tools/call", serde_json::json!({"name": "whoami"})),
            );
            match tokio::time::timeout(TIMEOUT, client.request(request))
                .await
                .unwrap()
            {
                Ok(response) => Ok(message(&response_text(response).await).unwrap()),
                Err(error) => Err(error),
            }
        }
    };
    let answer = call(first_ca.cert_file(), 1)
        .await
        .expect("TLS with the first certificate");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("alpha"),
        "{answer}"
    );
    let certs = CertFiles::new(tls);
    assert_eq!(certs.reload(false), Reloaded::Unchanged);

    // A broken key file keeps the old certificate.
    std::fs::write(&key, "not a key").unwrap();
    assert!(matches!(certs.reload(false), Reloaded::Failed(e) if e.contains("listener.key")));
    call(first_ca.cert_file(), 2)
        .await
        .expect("still the first certificate");

    second_ca.leaf("listener", &["127.0.0.1"]); // overwrites listener.crt and listener.key
    assert_eq!(certs.reload(false), Reloaded::Applied);
    call(second_ca.cert_file(), 3)
        .await
        .expect("TLS with the second certificate");
    assert!(
        call(first_ca.cert_file(), 4).await.is_err(),
        "the first CA no longer verifies the listener"
    );

    gateway.shutdown().await.unwrap();
    backend.shutdown().await.unwrap();
}
