//! OpenTelemetry traces: one server span per request to `/mcp`, exported over OTLP/HTTP
//! (protobuf) when `otlp-endpoint` is set ([`Traces`]); with none, nothing is made and a
//! request pays one `None` check.
//!
//! A span's parent is the client's W3C trace context: the `traceparent` (and `tracestate`)
//! header, else the `traceparent` of the request's `params._meta`, which MCP lets clients send
//! there. The backend gets the gateway's span as its parent in `traceparent`, replacing the
//! client's. Attributes follow the MCP semantic conventions where they name something:
//!
//! | attribute | value |
//! |---|---|
//! | `mcp.method.name` | the JSON-RPC method |
//! | `gen_ai.tool.name`, `gen_ai.prompt.name`, `mcp.resource.uri` | what a `tools/call`, `prompts/get` or `resources/read` names |
//! | `jsonrpc.request.id` | the request's id |
//! | `mcp.protocol.version` | `MCP-Protocol-Version` |
//! | `http.response.status_code` | the HTTP status |
//! | `error.type` | the refusal's label, else the HTTP status of a 4xx or 5xx answer |
//! | `mrtr.outcome` | `sealed` (a JSON answer's state sealed), `opened` (a retry whose state opened), `refused`, or `relayed` |
//! | `mrtr.refusal` | the label of the MRTR layer's refusal (`invalid_envelope`, `denied`, …) |
//! | `mrtr.backend` | the backend that answered (`@gateway` for the gateway's own answers) |
//!
//! How: the front notes the start time and the header's context ([`RequestTrace::start`]) and
//! leaves a [`TraceSlot`] in the request's extensions. The proxy, which has read the body,
//! starts the span there ([`TraceSlot::begin`]) and puts its context into the backend's
//! request; the front ends it when the answer's head is ready ([`RequestTrace::finish`]),
//! starting it then for a request refused before it reached the proxy. The span ends at the
//! answer's head, like the access line: an SSE answer's stream is not timed.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use tower_mrtr::{McpRequestHead, Outcome, Route};

/// The span's attribute names (the MCP semantic conventions, and the gateway's own `mrtr.*`).
mod names {
    pub(super) const METHOD: &str = "mcp.method.name";
    pub(super) const TOOL: &str = "gen_ai.tool.name";
    pub(super) const PROMPT: &str = "gen_ai.prompt.name";
    pub(super) const RESOURCE: &str = "mcp.resource.uri";
    pub(super) const REQUEST_ID: &str = "jsonrpc.request.id";
    pub(super) const PROTOCOL_VERSION: &str = "mcp.protocol.version";
    pub(super) const STATUS: &str = "http.response.status_code";
    pub(super) const ERROR: &str = "error.type";
    pub(super) const OUTCOME: &str = "mrtr.outcome";
    pub(super) const REFUSAL: &str = "mrtr.refusal";
    pub(super) const BACKEND: &str = "mrtr.backend";
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The span exporter: one server span per request to `/mcp`, with the MCP semantic
/// conventions' attributes and the MRTR outcome, sent in batches over OTLP/HTTP
/// (`docs/operations.md`, "Traces").
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

impl Traces {
    /// Spans exported in batches to the OTLP/HTTP collector at `endpoint` (`/v1/traces` is
    /// appended to a URL without a path).
    pub fn otlp(endpoint: &str) -> Result<Arc<Self>, String> {
        let endpoint = signal_endpoint(endpoint, "traces")?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| format!("otlp-endpoint: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Arc::new(Self {
            tracer: provider.tracer("mrtr-gateway"),
            provider,
            propagator: TraceContextPropagator::new(),
        }))
    }

    /// Exports what is still queued (at shutdown).
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!(%error, "spans could not be exported");
        }
    }

    fn start(&self, name: String, parent: &Context, at: SystemTime) -> Span {
        self.tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(at)
            .start_with_context(&self.tracer, parent)
    }
}

/// What every exported signal (spans, the audit trail's log records) says it comes from.
pub(crate) fn resource() -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder()
        .with_service_name("mrtr-gateway")
        .build()
}

/// The URL a signal (`traces`, `logs`) is exported to from `otlp-endpoint`: `/v1/{signal}` is
/// appended to a URL without a path; a URL with one is used as it is (then it names one signal's
/// path, and only that signal can use it).
pub(crate) fn signal_endpoint(endpoint: &str, signal: &str) -> Result<String, String> {
    let url: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("otlp-endpoint: not a URL: {e}"))?;
    if url.scheme_str() != Some("http") || url.authority().is_none() {
        return Err(
            "otlp-endpoint: expected http://HOST:PORT (OTLP/HTTP, protobuf), such as http://127.0.0.1:4318"
                .into(),
        );
    }
    Ok(match url.path() {
        "" | "/" => format!("{}/v1/{signal}", endpoint.trim_end_matches('/')),
        _ => endpoint.to_owned(),
    })
}

/// The headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// `params._meta`'s trace context as the propagator reads it.
struct Meta<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Where the propagator writes the backend's trace headers.
struct Outgoing<'a>(&'a mut HeaderMap);

impl Injector for Outgoing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

/// The client's context, if it sent a valid one.
fn remote(propagator: &TraceContextPropagator, extractor: &dyn Extractor) -> Option<Context> {
    let cx = propagator.extract(extractor);
    cx.span().span_context().is_valid().then_some(cx)
}

/// One request's span in the making, shared by the front and the proxy.
#[derive(Debug)]
pub(crate) struct TraceSlot {
    traces: Arc<Traces>,
    at: SystemTime,
    /// The client's context from the header, if any.
    parent: Option<Context>,
    /// `Mcp-Method`, to name the span of a request refused before the proxy.
    method: Option<HeaderValue>,
    /// The span once the proxy began it, and whether the request was a retry whose state opened.
    span: Mutex<Option<(Span, bool)>>,
}

impl TraceSlot {
    /// Starts the span of a request the proxy routes, with what it read of it, and writes its
    /// context into `headers` (the backend's request). `meta` reads the request's `params._meta`,
    /// whose trace context is the parent when the header gave none.
    pub(crate) fn begin(
        &self,
        head: &McpRequestHead,
        opened: bool,
        meta: impl FnOnce() -> Option<serde_json::Map<String, serde_json::Value>>,
        headers: &mut HeaderMap,
    ) {
        let parent = self
            .parent
            .clone()
            .or_else(|| meta().and_then(|meta| remote(&self.traces.propagator, &Meta(&meta))))
            .unwrap_or_default();
        let mut span = self.traces.start(span_name(head), &parent, self.at);
        set_head(&mut span, head);
        if let Some(version) = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()) {
            span.set_attribute(KeyValue::new(names::PROTOCOL_VERSION, version.to_owned()));
        }
        headers.remove(TRACEPARENT);
        headers.remove(TRACESTATE);
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        self.traces.propagator.inject_context(&cx, &mut Outgoing(headers));
        if let Ok(mut slot) = self.span.lock() {
            *slot = Some((span, opened));
        }
    }
}

/// A span's name: the method, and the target when the request names one.
fn span_name(head: &McpRequestHead) -> String {
    match head.target() {
        Some(target) => format!("{} {target}", head.method()),
        None => head.method().to_owned(),
    }
}

/// The attributes of what `head` names: the method, the target (by its kind) and the id.
fn set_head(span: &mut Span, head: &McpRequestHead) {
    let method = head.method();
    span.set_attribute(KeyValue::new(names::METHOD, method.to_owned()));
    if let Some(target) = head.target() {
        let key = match method {
            "tools/call" => Some(names::TOOL),
            "prompts/get" => Some(names::PROMPT),
            "resources/read" => Some(names::RESOURCE),
            _ => None,
        };
        if let Some(key) = key {
            span.set_attribute(KeyValue::new(key, target.to_owned()));
        }
    }
    if let Some(id) = head.id_json() {
        // A string id without its quotes; a number as written.
        let id = id
            .strip_prefix('"')
            .and_then(|i| i.strip_suffix('"'))
            .unwrap_or(id);
        span.set_attribute(KeyValue::new(names::REQUEST_ID, id.to_owned()));
    }
}

impl TraceSlot {
    /// The trace id of the request's span once the proxy began it, else of the client's context
    /// (for the audit trail, which reads it when the answer has ended).
    pub(crate) fn trace_id(&self) -> Option<String> {
        let span = self.span.lock().ok()?;
        span.as_ref()
            .map(|(s, _)| s.span_context().trace_id().to_string())
            .or_else(|| {
                self.parent
                    .as_ref()
                    .map(|p| p.span().span_context().trace_id().to_string())
            })
    }
}

/// The span of one request, from the front's side: `None` without [`Traces`].
#[derive(Debug)]
pub(crate) struct RequestTrace(Option<Arc<TraceSlot>>);

impl RequestTrace {
    /// No span (traces are off, or the request is not one to `/mcp`).
    pub(crate) fn none() -> Self {
        Self(None)
    }

    /// Notes `request`'s start and its header's trace context, and leaves the slot in its
    /// extensions for the proxy.
    pub(crate) fn start<B>(traces: Option<&Arc<Traces>>, request: &mut Request<B>) -> Self {
        let Some(traces) = traces else {
            return Self(None);
        };
        let slot = Arc::new(TraceSlot {
            traces: traces.clone(),
            at: SystemTime::now(),
            parent: remote(&traces.propagator, &Headers(request.headers())),
            method: request.headers().get("mcp-method").cloned(),
            span: Mutex::new(None),
        });
        request.extensions_mut().insert(slot.clone());
        Self(Some(slot))
    }

    /// Ends the span with what `response` says (see the [module docs](self)); a request the
    /// proxy never saw gets its span now, named by the request head the answer carries (the
    /// MRTR layer's refusals, the legacy front's answers) or else by `Mcp-Method`.
    pub(crate) fn finish<B>(&mut self, response: &Response<B>) {
        let Some(slot) = self.0.take() else { return };
        let started = slot.span.lock().ok().and_then(|mut span| span.take());
        let opened = started.as_ref().is_some_and(|(_, opened)| *opened);
        let mut span = started.map(|(span, _)| span).unwrap_or_else(|| {
            let parent = slot.parent.clone().unwrap_or_default();
            if let Some(head) = response.extensions().get::<McpRequestHead>() {
                let mut span = slot.traces.start(span_name(head), &parent, slot.at);
                set_head(&mut span, head);
                return span;
            }
            let request_method = slot.method.as_ref();
            let method = request_method.and_then(|m| m.to_str().ok()).unwrap_or("mcp");
            let mut span = slot.traces.start(method.to_owned(), &parent, slot.at);
            if request_method.is_some() {
                span.set_attribute(KeyValue::new(names::METHOD, method.to_owned()));
            }
            span
        });
        let status = response.status();
        span.set_attribute(KeyValue::new(names::STATUS, i64::from(status.as_u16())));
        let route = response.extensions().get::<Route>();
        if let Some(route) = route {
            span.set_attribute(KeyValue::new(names::BACKEND, route.as_str().to_owned()));
        }
        let outcome = response.extensions().get::<Outcome>();
        let label = match outcome {
            Some(Outcome::Refused { .. }) => Some("refused"),
            Some(Outcome::Sealed) => Some("sealed"),
            _ if opened => Some("opened"),
            _ if route.is_some() => Some("relayed"),
            _ => None,
        };
        if let Some(label) = label {
            span.set_attribute(KeyValue::new(names::OUTCOME, label));
        }
        if let Some(Outcome::Refused { reason }) = outcome {
            span.set_attribute(KeyValue::new(names::REFUSAL, *reason));
            span.set_attribute(KeyValue::new(names::ERROR, *reason));
        } else if status.is_client_error() || status.is_server_error() {
            span.set_attribute(KeyValue::new(names::ERROR, status.as_u16().to_string()));
        }
        if status.is_server_error() {
            span.set_status(Status::error(status.to_string()));
        }
        span.end();
    }

    /// The trace id of the span, for the access line (`None` without [`Traces`]).
    pub(crate) fn trace_id(&self) -> Option<String> {
        self.0.as_ref()?.trace_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_without_a_path_gets_the_traces_path_and_https_is_refused() {
        assert!(
            Traces::otlp("https://collector:4318")
                .unwrap_err()
                .contains("http://")
        );
        assert!(Traces::otlp("not a url").is_err());
    }
}
