//! SSE answers stream through the gateway event by event (nothing waits for the end of the
//! stream), and a client that hangs up cancels the backend's stream.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{body, mcp_headers};
use mrtr_test_support::wait::TIMEOUT;
use serde_json::json;
use tokio::sync::mpsc;

type Slot = Arc<Mutex<Option<mpsc::Sender<Result<Bytes, Infallible>>>>>;

/// A backend that answers every POST with an SSE stream whose first event is a progress
/// notification; the test writes the rest through the sender left in `slot`.
async fn held_stream(State(slot): State<Slot>) -> Response {
    let (tx, rx) = mpsc::channel(8);
    let progress = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";
    tx.try_send(Ok(Bytes::from_static(progress.as_bytes()))).unwrap();
    *slot.lock().unwrap() = Some(tx);
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn start_backend() -> anyhow::Result<(String, Slot)> {
    let slot: Slot = Arc::default();
    let app = Router::new()
        .route("/mcp", post(held_stream))
        .with_state(slot.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, slot))
}

fn sender(slot: &Slot) -> mpsc::Sender<Result<Bytes, Infallible>> {
    slot.lock().unwrap().clone().expect("the backend was called")
}

async fn call(url: &str) -> anyhow::Result<reqwest::Response> {
    let mut request = reqwest::Client::new().post(url);
    for (name, value) in mcp_headers("tools/call") {
        request = request.header(name, value);
    }
    let body = body(9, "tools/call", json!({"name": "slow", "arguments": {}}));
    Ok(tokio::time::timeout(TIMEOUT, request.header("mcp-name", "slow").body(body).send()).await??)
}

#[tokio::test]
async fn sse_events_stream_through_before_the_result_exists() -> anyhow::Result<()> {
    let (backend_url, slot) = start_backend().await?;
    let config = GatewayConfig::new(vec![Backend::new("slow", &backend_url)?]);
    let gw = gateway(config, keyring()).await?;

    let response = call(&gw.url()).await?;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    // The progress event arrives while the backend has not produced a result yet.
    let first = tokio::time::timeout(TIMEOUT, stream.next())
        .await?
        .expect("an event")?;
    assert!(
        std::str::from_utf8(&first)?.contains("notifications/progress"),
        "{first:?}"
    );

    let result = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{\"ok\":{\"method\":\"elicitation/create\",\"params\":{\"mode\":\"form\",\"message\":\"Sure?\",\"requestedSchema\":{\"type\":\"object\",\"properties\":{}}}}},\"requestState\":\"backend-secret\"}}\n\n";
    let tx = sender(&slot);
    tx.send(Ok(Bytes::from_static(result.as_bytes()))).await?;
    drop(tx);
    slot.lock().unwrap().take();
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(TIMEOUT, stream.next()).await? {
        rest.extend_from_slice(&chunk?);
    }
    let rest = String::from_utf8(rest)?;
    assert!(rest.contains("\"requestState\":\"mrtr3."), "not sealed: {rest}");
    assert!(!rest.contains("backend-secret"), "backend state leaked: {rest}");
    gw.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_client_hanging_up_cancels_the_backend_stream() -> anyhow::Result<()> {
    let (backend_url, slot) = start_backend().await?;
    let config = GatewayConfig::new(vec![Backend::new("slow", &backend_url)?]);
    let gw = gateway(config, keyring()).await?;

    let response = call(&gw.url()).await?;
    let mut stream = response.bytes_stream();
    tokio::time::timeout(TIMEOUT, stream.next())
        .await?
        .expect("an event")?;
    let tx = sender(&slot);
    slot.lock().unwrap().take();
    drop(stream);
    // The gateway drops its backend request, so the backend's stream loses its reader.
    tokio::time::timeout(Duration::from_secs(5), tx.closed()).await?;
    gw.shutdown().await?;
    Ok(())
}
