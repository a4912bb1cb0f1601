//! `examples/axum_gateway.rs` against real demo backends on 127.0.0.1: authentication, routing,
//! principal-bound envelopes and the per-subject rate limit (its spans: `axum_gateway_spans.rs`).

#[allow(dead_code, unreachable_pub)]
#[path = "../../axum_gateway.rs"]
mod example;

use std::time::Duration;

use mrtr_examples::cli::Settings;
use mrtr_test_support::mcp::{Call, mcp_headers, raw, send};
use serde_json::json;
use tokio::net::TcpListener;

use crate::common::{Backends, as_subject};

/// Serves the example's app on an ephemeral loopback port; returns its MCP URL.
async fn serve(settings: Settings, limit: example::RateLimit) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = example::app(settings, limit).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn relays_principal_bound_rounds_to_the_backend_that_asked() {
    let backends = Backends::start().await;
    let url = serve(
        backends.settings(),
        example::rate_limit(100, Duration::from_secs(1)),
    )
    .await;
    crate::common::relays_principal_bound_rounds(&url, &backends).await;
    backends.stop().await;
}

#[tokio::test]
async fn limits_each_subject_with_a_json_rpc_429() {
    let backends = Backends::start().await;
    // Two requests per subject, then none for an hour.
    let url = serve(
        backends.settings(),
        example::rate_limit(2, Duration::from_secs(3600)),
    )
    .await;
    let whoami = Call::tool("whoami", json!({}));
    for _ in 0..2 {
        assert_eq!(
            send(&url, &as_subject(&whoami, "carol")).await.unwrap().status,
            200
        );
    }
    let limited = send(&url, &as_subject(&whoami, "carol")).await.unwrap();
    assert_eq!((limited.status, limited.error_code()), (429, Some(-32600)));
    assert_eq!(limited.body["id"], serde_json::Value::Null);

    let token = format!("Bearer {}", crate::common::token("carol"));
    let mut headers = mcp_headers("tools/call");
    headers.push(("authorization", &token));
    let (status, answer_headers, _) = raw(reqwest::Method::POST, &url, &headers, "{}").await.unwrap();
    assert_eq!(status, 429);
    let retry_after: u64 = answer_headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "Retry-After: {retry_after}");

    // The limit is per subject: dave still gets through.
    assert_eq!(
        send(&url, &as_subject(&whoami, "dave")).await.unwrap().status,
        200
    );
    assert_eq!(
        backends.requests(),
        (3, 0),
        "carol's refused calls never reached a backend"
    );
    backends.stop().await;
}
