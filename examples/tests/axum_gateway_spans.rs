//! The MCP fields of `examples/axum_gateway.rs`'s `mcp_request` spans, seen by a collector
//! installed as the process's global subscriber.
//!
//! A test binary of its own, and one test in it, because tracing caches each callsite's interest
//! process-wide: with a thread-local subscriber (`set_default`) and other tests running on other
//! threads, the first thread to reach the `mcp_request` callsite decides for every thread, and a
//! thread with no subscriber decides "never" (tracing-core asks only the registering thread's
//! default when one dispatcher exists). That made this test fail about one run in four.

// The helpers of the `it` binary's tests, shared with this one.
#[path = "it/common/mod.rs"]
mod common;
#[allow(dead_code, unreachable_pub)]
#[path = "../axum_gateway.rs"]
mod example;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Backends, as_subject};
use mrtr_test_support::mcp::{Call, send};
use serde_json::json;
use tokio::net::TcpListener;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};

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
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans.clone()))
        .expect("the only subscriber of this test binary");
    let backends = Backends::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = example::app(
        backends.settings(),
        example::rate_limit(100, Duration::from_secs(1)),
    )
    .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

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
