//! Backend connections under the faults of issue 15, with real hyper backends on 127.0.0.1:
//!
//! * a backend that closes idle connections after 1 s: a request series whose pauses span the
//!   close gets no 502 (the backend's idle timeout is set below the backend's, as documented);
//! * a backend that dies mid-SSE-stream, or stalls: the client's stream ends with a JSON-RPC
//!   error event for its request and a clean end of the body, through the MRTR layer
//!   (`tools/call`) and around it (`ping`).
//!
//! The restart under continuous keep-alive load is `tests/drain.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::backends::{Answer, start_backend};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{mcp_post, message};
use mrtr_test_support::wait::TIMEOUT;
use serde_json::{Value, json};

#[tokio::test]
async fn a_backend_closing_idle_connections_after_1_s_causes_no_502() {
    let (url, connections) = start_backend(Answer::Json, Some(Duration::from_secs(1))).await;
    // The remedy the docs give: the gateway's idle timeout for this backend below its own.
    let backend = Backend::new("alpha", &url)
        .unwrap()
        .with_idle_timeout(Duration::from_millis(500));
    let gateway = gateway(GatewayConfig::new(vec![backend]), keyring())
        .await
        .unwrap();
    let client = reqwest::Client::new();
    // Pauses on both sides of the gateway's 0.5 s and the backend's 1 s, and right at them.
    let pauses_ms = [0, 100, 450, 550, 950, 1000, 1050, 300, 1300, 200, 990, 1010, 700];
    for (id, pause) in pauses_ms.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let response = mcp_post(
            &client,
            &gateway.url(),
            id as u64,
            "tools/call",
            json!({"name": "echo"}),
        )
        .send()
        .await
        .expect("the gateway answers");
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "request {id} after a {pause} ms pause: {text}");
        assert_eq!(message(&text).unwrap()["id"], id, "{text}");
    }
    // Pauses over 0.5 s opened new connections; shorter ones reused the kept one.
    let opened = connections.load(Ordering::SeqCst);
    assert!(
        (6..pauses_ms.len()).contains(&opened),
        "{opened} backend connections"
    );
    gateway.shutdown().await.unwrap();
}

/// Reads a whole answer through reqwest, which fails on a cut chunked body.
async fn whole_answer(url: &str, id: u64, method: &str, params: Value) -> String {
    let response = mcp_post(&reqwest::Client::new(), url, id, method, params)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(TIMEOUT, body.next())
        .await
        .expect("the stream ends in time")
    {
        let chunk = chunk.expect("the body ends cleanly, not with a cut chunk");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text
}

/// The stream has the backend's progress event, then an error for `id` as its last event.
fn assert_ends_with_error(text: &str, id: u64) {
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 2, "{text:?}");
    assert!(events[0].contains("notifications/progress"), "{text:?}");
    let error: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(error["id"], id, "{text:?}");
    assert_eq!(error["error"]["code"], -32603, "{text:?}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("\"alpha\""),
        "{text:?}"
    );
}

#[tokio::test]
async fn a_backend_dying_mid_stream_ends_the_stream_with_an_error_event() {
    let (url, _) = start_backend(Answer::SseThenDie, None).await;
    let gateway = gateway(
        GatewayConfig::new(vec![Backend::new("alpha", &url).unwrap()]),
        keyring(),
    )
    .await
    .unwrap();
    // Through the MRTR layer's SSE rewriting...
    let text = whole_answer(&gateway.url(), 7, "tools/call", json!({"name": "work"})).await;
    assert_ends_with_error(&text, 7);
    assert!(text.contains("the connection failed"), "{text:?}");
    // ...and a method the layer passes through.
    let text = whole_answer(&gateway.url(), 8, "ping", json!({})).await;
    assert_ends_with_error(&text, 8);
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stalled_backend_stream_ends_with_an_error_event() {
    let (url, _) = start_backend(Answer::SseThenStall, None).await;
    let mut config = GatewayConfig::new(vec![Backend::new("alpha", &url).unwrap()]);
    config.settings.backend_stall_timeout = mrtr_gateway::PositiveSeconds(Duration::from_millis(300));
    let gateway = gateway(config, keyring()).await.unwrap();
    let text = whole_answer(&gateway.url(), 9, "tools/call", json!({"name": "work"})).await;
    assert_ends_with_error(&text, 9);
    assert!(text.contains("it stalled"), "{text:?}");
    gateway.shutdown().await.unwrap();
}
