//! Spans for tower-http's `TraceLayer` that say which MCP call a request was and which backend
//! served it.
//!
//! `TraceLayer` goes outermost, so that it sees every request and every answer, refusals
//! included; but there the body has not been read, and the MCP method and target are not known.
//! So the span is made with those fields empty ([`McpSpan`], in [`trace_layer`]) and filled in from inside the
//! stack by [`RecordMcpHeadLayer`], stacked between `MrtrLayer` and the proxy: it reads the
//! [`McpRequestHead`] the layer parsed (on a retry, after the envelope opened) and, when the
//! answer comes back, the [`Route`] the proxy reported. Both run inside the span, which
//! `TraceLayer` enters around every call and poll of the services it wraps.
//!
//! Field names follow OpenTelemetry's MCP and GenAI conventions: `mcp.method.name`,
//! `jsonrpc.request.id`, `gen_ai.tool.name`, `gen_ai.prompt.name`, `mcp.resource.uri`; the
//! backend is `mcp.route`. A request the layer refused before it reached the proxy has none
//! of them: its span says only the HTTP method, path and status.
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use mrtr_examples::observe::{RecordMcpHeadLayer, trace_layer};
//! use tower::{ServiceBuilder, ServiceExt};
//! use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let proxy = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
//!     let mut answer = Response::new(Full::new(Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#)));
//!     answer.extensions_mut().insert(Route::new("alpha"));
//!     Ok::<_, std::convert::Infallible>(answer)
//! });
//! let stack = ServiceBuilder::new()
//!     .layer(trace_layer())
//!     .layer(MrtrLayer::new(Keyring::generate("k1").unwrap()))
//!     .layer(RecordMcpHeadLayer)
//!     .service(proxy);
//!
//! // This request's span gets mcp.method.name "tools/list", jsonrpc.request.id "1" and
//! // mcp.route "alpha" (tests/axum_gateway_spans.rs checks the fields with a subscriber).
//! let request = Request::post("/mcp")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)))
//!     .unwrap();
//! assert_eq!(stack.oneshot(request).await.unwrap().status(), 200);
//! # }
//! ```

use std::task::{Context, Poll};

use futures_util::TryFutureExt;
use futures_util::future::MapOk;
use http::{Request, Response};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{DefaultOnRequest, DefaultOnResponse, MakeSpan, TraceLayer};
use tower_layer::Layer;
use tower_mrtr::{McpRequestHead, Route};
use tower_service::Service;
use tracing::field::Empty;
use tracing::{Level, Span};

/// tower-http's `TraceLayer` with [`McpSpan`] spans, and one info-level event per answer
/// (status and latency, written in the span, so with its MCP fields).
pub type McpTraceLayer =
    TraceLayer<SharedClassifier<ServerErrorsAsFailures>, McpSpan, DefaultOnRequest, DefaultOnResponse>;

/// The `TraceLayer` of the examples; see [`McpTraceLayer`].
pub fn trace_layer() -> McpTraceLayer {
    TraceLayer::new_for_http()
        .make_span_with(McpSpan)
        .on_response(DefaultOnResponse::new().level(Level::INFO))
}

/// Makes the span of one HTTP request, `mcp_request`, with the MCP fields declared and empty.
#[derive(Clone, Copy, Debug, Default)]
pub struct McpSpan;

impl<B> MakeSpan<B> for McpSpan {
    fn make_span(&mut self, request: &Request<B>) -> Span {
        mcp_span(request)
    }
}

fn mcp_span<B>(request: &Request<B>) -> Span {
    tracing::info_span!(
        "mcp_request",
        http.request.method = %request.method(),
        url.path = request.uri().path(),
        mcp.method.name = Empty,
        jsonrpc.request.id = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        mcp.resource.uri = Empty,
        mcp.route = Empty,
    )
}

/// Records the request's MCP head and the answering backend into the current span; see the
/// [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordMcpHeadLayer;

impl<S> Layer<S> for RecordMcpHeadLayer {
    type Service = RecordMcpHead<S>;

    fn layer(&self, inner: S) -> RecordMcpHead<S> {
        RecordMcpHead { inner }
    }
}

/// The service of [`RecordMcpHeadLayer`].
#[derive(Clone, Debug)]
pub struct RecordMcpHead<S> {
    inner: S,
}

impl<S, B, ResBody> Service<Request<B>> for RecordMcpHead<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = MapOk<S::Future, fn(Response<ResBody>) -> Response<ResBody>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if let Some(head) = request.extensions().get::<McpRequestHead>() {
            record_head(&Span::current(), head);
        }
        self.inner.call(request).map_ok(record_route as fn(_) -> _)
    }
}

fn record_head(span: &Span, head: &McpRequestHead) {
    span.record("mcp.method.name", head.method());
    if let Some(id) = head.id_json() {
        span.record("jsonrpc.request.id", id);
    }
    let target_field = match head.method() {
        "tools/call" => "gen_ai.tool.name",
        "prompts/get" => "gen_ai.prompt.name",
        "resources/read" => "mcp.resource.uri",
        _ => return,
    };
    if let Some(target) = head.target() {
        span.record(target_field, target);
    }
}

fn record_route<B>(response: Response<B>) -> Response<B> {
    if let Some(route) = response.extensions().get::<Route>() {
        Span::current().record("mcp.route", route.as_str());
    }
    response
}
