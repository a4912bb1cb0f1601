//! Envelopes bind the deployment and the backend that minted them, not only the keyring: two
//! gateways sharing a keyring whose `alpha` is a different backend each never serve each other's
//! rounds (and the other `alpha` is not reached), `--audience prod` and `--audience staging`
//! never open each other's envelopes, while a deployment's other replicas, also one whose config
//! adds a backend, serve every round. And a retry's backend-side name comes from the catalog,
//! never from stripping the `<backend>__` prefix (a backend's own tool may be `alpha__x`).

use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use mrtr_backends::{DemoBackend, ResponseMode, ServedBackend, serve};
use mrtr_gateway::{Backend, GatewayConfig, RunningGateway};
use mrtr_test_support::backends::Stack;
use mrtr_test_support::gateway::gateway;
use mrtr_test_support::mcp::{Call, drive, send};
use serde_json::{Value, json};
use tower_mrtr::Keyring;

/// A gateway over `backends`, parsing the shared keyring `keys` itself as a replica would, with
/// `audience` if given.
async fn replica(
    keys: &str,
    backends: Vec<Backend>,
    audience: Option<&str>,
) -> anyhow::Result<RunningGateway> {
    let mut config = GatewayConfig::new(backends);
    config.settings.audience = audience.map(str::to_owned);
    gateway(config, Arc::new(keys.parse()?)).await
}

fn named(name: &str, served: &ServedBackend) -> Backend {
    Backend::new(name, &served.url()).unwrap()
}

/// `provision_cluster` (alpha only, three rounds of input).
fn provision() -> Call {
    Call::tool("provision_cluster", json!({ "name": "c1" }))
}

#[tokio::test]
async fn a_backend_of_the_same_name_elsewhere_never_opens_this_ones_rounds() -> anyhow::Result<()> {
    let keys = Keyring::generate("k1")?.to_config_string();
    let (alpha_x, beta_x) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await?;
    let alpha_y = serve(DemoBackend::alpha("alpha")?, ResponseMode::Json).await?;
    let beta_y = serve(DemoBackend::beta("beta")?, ResponseMode::Json).await?;
    let extra = serve(DemoBackend::beta("gamma")?, ResponseMode::Json).await?;

    let a = replica(
        &keys,
        vec![named("alpha", &alpha_x), named("beta", &beta_x)],
        None,
    )
    .await?;
    let a2 = replica(
        &keys,
        vec![named("alpha", &alpha_x), named("beta", &beta_x)],
        None,
    )
    .await?;
    // A rolling change that adds another backend invalidates nothing in flight.
    let a3 = replica(
        &keys,
        vec![
            named("alpha", &alpha_x),
            named("beta", &beta_x),
            named("gamma", &extra),
        ],
        None,
    )
    .await?;
    let b = replica(
        &keys,
        vec![named("alpha", &alpha_y), named("beta", &beta_y)],
        None,
    )
    .await?;

    let round1 = send(&a.url(), &provision()).await?;
    let retry = provision().retry(round1.answers(), &round1.state()?);
    let before = alpha_y.requests();
    let refused = send(&b.url(), &retry).await?;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.body);
    assert_eq!(alpha_y.requests(), before, "B's alpha is never reached");

    // A's other replicas serve every round, in turn.
    let urls = [a2.url(), a3.url(), a.url()];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let (done, rounds) = drive(&urls, &provision()).await?;
    assert_eq!(rounds, 3, "{}", done.body);
    assert!(
        done.text()
            .starts_with("[alpha] provision_cluster: provisioned c1"),
        "{}",
        done.body
    );

    for gateway in [a, a2, a3, b] {
        gateway.shutdown().await?;
    }
    for backend in [alpha_x, beta_x, alpha_y, beta_y, extra] {
        backend.shutdown().await?;
    }
    Ok(())
}

#[tokio::test]
async fn two_audiences_never_open_each_others_envelopes() -> anyhow::Result<()> {
    let keys = Keyring::generate("k1")?.to_config_string();
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let backends = || Stack::backends(&alpha, &beta);
    let prod = replica(&keys, backends(), Some("prod")).await?;
    let prod2 = replica(&keys, backends(), Some("prod")).await?;
    let staging = replica(&keys, backends(), Some("staging")).await?;
    let unnamed = replica(&keys, backends(), None).await?;

    let round1 = send(&prod.url(), &provision()).await?;
    let retry = provision().retry(round1.answers(), &round1.state()?);
    let before = alpha.requests();
    for other in [&staging, &unnamed] {
        let refused = send(&other.url(), &retry).await?;
        assert_eq!(refused.error_code(), Some(-32602), "{}", refused.body);
    }
    assert_eq!(alpha.requests(), before, "refused before any backend");
    let staged = send(&staging.url(), &provision()).await?;
    let refused = send(
        &prod.url(),
        &provision().retry(staged.answers(), &staged.state()?),
    )
    .await?;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.body);
    // The same deployment's other replica serves it.
    let round2 = send(&prod2.url(), &retry).await?;
    assert_eq!(
        round2.body["result"]["resultType"], "input_required",
        "{}",
        round2.body
    );

    for gateway in [prod, prod2, staging, unnamed] {
        gateway.shutdown().await?;
    }
    alpha.shutdown().await?;
    beta.shutdown().await?;
    Ok(())
}

/// A backend whose own tool is called `alpha__x` (a unique name, so the gateway exposes it as it
/// is): round 1 asks for input, round 2 answers with the name it was called by.
async fn backend_with_a_prefixed_looking_tool() -> String {
    async fn answer(body: String) -> axum::Json<Value> {
        let message: Value = serde_json::from_str(&body).unwrap_or_default();
        let id = message["id"].clone();
        let params = &message["params"];
        let result = match message["method"].as_str() {
            Some("tools/list") => json!({ "tools": [
                { "name": "alpha__x", "inputSchema": { "type": "object" } },
            ] }),
            Some("tools/call") if params["requestState"] == "backend-state" => json!({
                "resultType": "complete",
                "content": [{ "type": "text", "text": format!("called {}", params["name"].as_str().unwrap_or("?")) }],
            }),
            Some("tools/call") => json!({
                "resultType": "input_required",
                "inputRequests": { "ok": { "method": "elicitation/create", "params": {
                    "mode": "form", "message": "Go on?",
                    "requestedSchema": { "type": "object", "properties": { "go": { "type": "boolean" } } },
                } } },
                "requestState": "backend-state",
            }),
            _ => json!({ "supportedVersions": ["2026-07-28"], "capabilities": { "tools": {} } }),
        };
        axum::Json(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, Router::new().route("/mcp", post(answer))).await });
    url
}

#[tokio::test]
async fn a_retry_on_a_replica_that_never_listed_reaches_the_tool_by_its_own_name() -> anyhow::Result<()> {
    let keys = Keyring::generate("k1")?.to_config_string();
    let alpha = backend_with_a_prefixed_looking_tool().await;
    let beta = serve(DemoBackend::beta("beta")?, ResponseMode::Json).await?;
    let backends = || vec![Backend::new("alpha", &alpha).unwrap(), named("beta", &beta)];
    let warm = replica(&keys, backends(), None).await?;
    let cold = replica(&keys, backends(), None).await?;

    let call = Call::tool("alpha__x", json!({}));
    let round1 = send(&warm.url(), &call).await?;
    let round2 = send(&cold.url(), &call.retry(round1.answers(), &round1.state()?)).await?;
    assert_eq!(round2.text(), "called alpha__x", "{}", round2.body);

    warm.shutdown().await?;
    cold.shutdown().await?;
    beta.shutdown().await?;
    Ok(())
}
