//! `examples/axum_gateway.rs` against real demo backends on 127.0.0.1: authentication, routing,
//! principal-bound envelopes, the per-subject rate limit, and the MCP fields of its spans.

mod common;
#[allow(dead_code, unreachable_pub)]
#[path = "../axum_gateway.rs"]
mod example;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Backends, as_subject};
use mrtr_examples::cli::Settings;
use mrtr_integration_tests::{Call, mcp_headers, raw, send};
use serde_json::json;
use tokio::net::TcpListener;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};

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
    common::relays_principal_bound_rounds(&url, &backends).await;
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

    let token = format!("Bearer {}", common::token("carol"));
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

/// The fields recorded on every `mcp_request` span, in the order the spans were created.
#[derive(Clone, Default)]
struct SpanFields(Arc<Mutex<Vec<HashMap<String, String>>>>);

struct Visitor<'a>(&'a mut HashMap<String, String>);

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanFields
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "mcp_request" {
            return;
        }
        let mut fields = HashMap::new();
        attrs.record(&mut Visitor(&mut fields));
        let mut spans = self.0.lock().unwrap();
        ctx.span(id).unwrap().extensions_mut().insert(spans.len());
        spans.push(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        if let Some(index) = span.extensions().get::<usize>() {
            values.record(&mut Visitor(&mut self.0.lock().unwrap()[*index]));
        }
    }
}

#[tokio::test]
async fn spans_carry_the_mcp_method_target_and_backend() {
    let spans = SpanFields::default();
    // The test's runtime is single-threaded, so the server's tasks run under this subscriber too.
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let backends = Backends::start().await;
    let url = serve(
        backends.settings(),
        example::rate_limit(100, Duration::from_secs(1)),
    )
    .await;

    let archive = Call::tool("archive_repo", json!({ "repo": "acme/api" }));
    assert_eq!(send(&url, &archive).await.unwrap().status, 401);
    let first = send(&url, &as_subject(&archive, "alice")).await.unwrap();
    assert!(first.state().is_ok());

    let spans = spans.0.lock().unwrap().clone();
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (refused, relayed) = (&spans[0], &spans[1]);
    assert_eq!(refused["http.request.method"], "POST");
    assert!(
        !refused.contains_key("mcp.method.name"),
        "a refused request never reached the layer: {refused:?}"
    );
    assert_eq!(relayed["mcp.method.name"], "tools/call");
    assert_eq!(relayed["gen_ai.tool.name"], "archive_repo");
    assert_eq!(relayed["mcp.route"], "beta");
    assert!(relayed.contains_key("jsonrpc.request.id"));
    backends.stop().await;
}
