//! OpenTelemetry through the gateway: an OTLP/HTTP receiver of the test's own decodes what the
//! gateway exports (with `opentelemetry-proto`), and a backend records the trace context it is
//! sent. One MRTR round trip is one trace: the client's context reaches the gateway in the
//! `traceparent` header (round 1) and in `params._meta` (round 2), each round's span is the
//! backend's parent, and the spans say what the MRTR layer did, a refused request's span what
//! was refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mrtr_gateway::{Backend, GatewayConfig, Traces};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, meta, send};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;
use serde_json::{Value, json};

/// One exported span, as the test reads it.
#[derive(Debug, Clone)]
struct Exported {
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    attributes: HashMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP receiver on 127.0.0.1: the spans it was sent.
async fn receiver() -> anyhow::Result<(String, Arc<Mutex<Vec<Exported>>>)> {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                let mut kept = kept.lock().unwrap();
                for span in request
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                {
                    let attributes = span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                                Some(Any::StringValue(s)) => s.clone(),
                                Some(Any::IntValue(i)) => i.to_string(),
                                Some(Any::BoolValue(b)) => b.to_string(),
                                other => format!("{other:?}"),
                            };
                            (kv.key.clone(), value)
                        })
                        .collect();
                    kept.push(Exported {
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        name: span.name.clone(),
                        attributes,
                    });
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, spans))
}

/// A 2026-07-28 backend whose one tool asks for a confirmation once, recording the
/// `traceparent` of every request it gets.
async fn backend() -> anyhow::Result<(String, Arc<Mutex<Vec<String>>>)> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: http::HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap();
                if request["method"] == "tools/call" {
                    let parent = headers.get("traceparent").map(|v| v.to_str().unwrap().to_owned());
                    kept.lock().unwrap().push(parent.unwrap_or_default());
                }
                let result = if request["method"] != "tools/call" {
                    json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {}}, "serverInfo": {"name": "traced", "version": "0"}})
                } else if request["params"]["requestState"].is_string() {
                    json!({"resultType": "complete", "content": [{"type": "text", "text": "done"}]})
                } else {
                    json!({"resultType": "input_required", "requestState": "s1", "inputRequests": {
                        "confirm": {"method": "elicitation/create", "params": {"mode": "form", "message": "Sure?",
                            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}})
                };
                let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
                ([("content-type", "application/json")], answer.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, seen))
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_ROUND_1: &str = "00f067aa0ba902b7";
const CLIENT_ROUND_2: &str = "b7ad6b7169203331";

#[tokio::test]
async fn an_mrtr_round_trip_is_one_trace_across_client_gateway_and_backend() -> anyhow::Result<()> {
    let (collector, spans) = receiver().await?;
    let (backend_url, seen) = backend().await?;
    let mut config = GatewayConfig::new(vec![Backend::new("alpha", &backend_url)?]);
    config.traces = Some(Traces::otlp(&collector).map_err(anyhow::Error::msg)?);
    let gateway = gateway(config, keyring()).await?;
    let url = gateway.url();

    let call = Call::tool("confirm", json!({}));
    let first = send(
        &url,
        &call
            .clone()
            .header("traceparent", &format!("00-{TRACE}-{CLIENT_ROUND_1}-01")),
    )
    .await?;
    let state = first.state()?;
    // Round 2 carries its context in `_meta` only, as MCP allows.
    let mut with_context = meta();
    with_context["traceparent"] = json!(format!("00-{TRACE}-{CLIENT_ROUND_2}-01"));
    let retry = call.retry(
        json!({"confirm": {"action": "accept", "content": {"ok": true}}}),
        &state,
    );
    let done = send(&url, &retry.clone().with_meta(with_context)).await?;
    assert_eq!(done.text(), "done", "{}", done.body);
    // A tampered state is refused by the layer, and its span says why.
    let refused = send(&url, &call.retry(json!({}), &format!("{state}x"))).await?;
    assert_eq!(refused.error_code(), Some(-32602));
    gateway.shutdown().await?; // flushes the exporter

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while spans.lock().unwrap().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let by_parent = |parent: &str| spans.iter().find(|s| s.parent == parent).cloned();
    let round_1 = by_parent(CLIENT_ROUND_1).expect("round 1's span is the client's child");
    let round_2 = by_parent(CLIENT_ROUND_2).expect("round 2's span is the child of its _meta context");
    for (span, outcome, reply) in [(&round_1, "sealed", &first), (&round_2, "opened", &done)] {
        assert_eq!(span.trace_id, TRACE, "{span:?}");
        assert_eq!(span.name, "tools/call confirm");
        let a = &span.attributes;
        assert_eq!(a["mcp.method.name"], "tools/call");
        assert_eq!(a["gen_ai.tool.name"], "confirm");
        assert_eq!(a["mcp.protocol.version"], "2026-07-28");
        assert_eq!(a["mrtr.backend"], "alpha");
        assert_eq!(a["mrtr.outcome"], outcome, "{span:?}");
        assert_eq!(a["http.response.status_code"], "200");
        assert_eq!(
            a["jsonrpc.request.id"],
            reply.body["id"].to_string(),
            "the round's own id"
        );
    }
    // The backend was sent each round's gateway span as its parent, in the client's trace.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [&round_1, &round_2].map(|s| format!("00-{TRACE}-{}-01", s.span_id)),
        "the backend's traceparent"
    );
    let refusal = spans
        .iter()
        .find(|s| s.attributes.get("mrtr.outcome").map(String::as_str) == Some("refused"))
        .expect("the refused retry's span");
    assert_eq!(refusal.attributes["mrtr.refusal"], "invalid_envelope");
    assert_eq!(refusal.attributes["error.type"], "invalid_envelope");
    // What was refused, read from its body though it never reached the proxy (issue 38).
    assert_eq!(refusal.name, "tools/call confirm", "{refusal:?}");
    assert_eq!(refusal.attributes["mcp.method.name"], "tools/call");
    assert_eq!(refusal.attributes["gen_ai.tool.name"], "confirm");
    assert_eq!(
        refusal.attributes["jsonrpc.request.id"],
        refused.body["id"].to_string(),
        "{refusal:?}"
    );
    assert_ne!(
        refusal.trace_id, TRACE,
        "a request without context starts a trace of its own"
    );
    Ok(())
}
