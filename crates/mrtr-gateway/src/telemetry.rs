//! The gateway's own metrics, emitted through the [`metrics`] facade (the admin listener renders
//! them as Prometheus text; see `docs/operations.md` for every name).
//!
//! * [`RequestMetricsLayer`] counts and times every MCP request at the front of the stack, by
//!   MCP method, HTTP status and who answered it (a backend, the gateway itself, or the MRTR
//!   layer refusing it before any backend saw it).
//! * the forwarder counts and times every request the gateway sends to a backend.
//! * Key and certificate reloads, backend health and draining report through the helpers below.
//!
//! Labels are bounded: methods outside the MCP method set are counted as `other`, backends are
//! the configured names.
//!
//! ```
//! use mrtr_gateway::telemetry::method_label;
//!
//! assert_eq!(method_label(Some("tools/call")), "tools/call");
//! assert_eq!(method_label(Some("x/made-up")), "other");
//! assert_eq!(method_label(None), "none");
//! assert_eq!(mrtr_gateway::telemetry::status_label(http::StatusCode::BAD_GATEWAY), "502");
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_mrtr::Route;
use tower_mrtr::mcp_headers::MCP_METHOD;
use tower_service::Service;

use crate::forward::ForwardError;
use crate::proxy::GATEWAY_ROUTE;

/// Counter: MCP requests answered, by `method`, `status` and `answered_by`.
pub const REQUESTS_TOTAL: &str = "mrtr_gateway_requests_total";
/// Histogram: seconds from a request's arrival to its response head, by `method`.
pub const REQUEST_DURATION_SECONDS: &str = "mrtr_gateway_request_duration_seconds";
/// Counter: requests sent to a backend, by `backend` and `method`.
pub const BACKEND_REQUESTS_TOTAL: &str = "mrtr_gateway_backend_requests_total";
/// Counter: backend requests that failed, by `backend`, `method` and `reason`.
pub const BACKEND_ERRORS_TOTAL: &str = "mrtr_gateway_backend_errors_total";
/// Histogram: seconds until a backend's response head, by `backend` and `method`.
pub const BACKEND_REQUEST_DURATION_SECONDS: &str = "mrtr_gateway_backend_request_duration_seconds";
/// Gauge: 1 when the backend answered its last catalog or discovery request, else 0.
pub const BACKEND_UP: &str = "mrtr_gateway_backend_up";
/// Counter: keyring reloads, by `result` (`ok`, `failed`).
pub const KEYRING_RELOADS_TOTAL: &str = "mrtr_gateway_keyring_reloads_total";
/// Gauge: 1 for the key id that seals (label `kid`), 0 for ids that sealed before.
pub const KEYRING_ACTIVE_KEY: &str = "mrtr_gateway_keyring_active_key";
/// Gauge: keys in the keyring.
pub const KEYRING_KEYS: &str = "mrtr_gateway_keyring_keys";
/// Counter: listener certificate reloads, by `result` (`ok`, `failed`).
pub const TLS_RELOADS_TOTAL: &str = "mrtr_gateway_tls_reloads_total";
/// Gauge: 1 from SIGTERM until exit.
pub const DRAINING: &str = "mrtr_gateway_draining";
/// Counter: requests answered 503 because `--max-in-flight` requests were in flight.
pub const SHED_TOTAL: &str = "mrtr_gateway_shed_total";
/// Gauge: client connections open on the MCP listener.
pub const OPEN_CONNECTIONS: &str = "mrtr_gateway_open_connections";

/// Histogram buckets for the `_seconds` histograms: 1 ms to 60 s.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Histogram buckets for the `_bytes` histograms (the library's envelope sizes): 64 B to 64 KiB.
pub const BYTES_BUCKETS: &[f64] = &[
    64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 65536.0,
];

/// The `method` label for an `Mcp-Method` header value: the method if it is an MCP method,
/// `other` if not, `none` without the header. A `match` rather than a table search: it runs for
/// every request, and compiles to a comparison by length first.
pub fn method_label(method: Option<&str>) -> &'static str {
    let Some(method) = method else { return "none" };
    match method {
        "tools/call" => "tools/call",
        "tools/list" => "tools/list",
        "prompts/get" => "prompts/get",
        "prompts/list" => "prompts/list",
        "resources/read" => "resources/read",
        "resources/list" => "resources/list",
        "resources/templates/list" => "resources/templates/list",
        "server/discover" => "server/discover",
        "completion/complete" => "completion/complete",
        "subscriptions/listen" => "subscriptions/listen",
        "tasks/get" => "tasks/get",
        "tasks/update" => "tasks/update",
        "tasks/cancel" => "tasks/cancel",
        "tasks/list" => "tasks/list",
        "ping" => "ping",
        "logging/setLevel" => "logging/setLevel",
        _ => "other",
    }
}

/// The `status` label: the three digits of `status`, without allocating.
pub fn status_label(status: http::StatusCode) -> &'static str {
    // Every code from 100 to 999, three digits each; `StatusCode` guarantees the range.
    static DIGITS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| (100..1000).map(|code: u16| code.to_string()).collect());
    let at = usize::from(status.as_u16() - 100) * 3;
    &DIGITS[at..at + 3]
}

pub(crate) fn header_method(headers: &HeaderMap) -> &'static str {
    method_label(headers.get(MCP_METHOD).and_then(|v| v.to_str().ok()))
}

/// Describes every gateway metric to the installed recorder (the `# HELP` lines).
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS_TOTAL,
        "MCP requests answered, by method, HTTP status and who answered"
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time to the response head, by MCP method"
    );
    describe_counter!(
        BACKEND_REQUESTS_TOTAL,
        "Requests sent to a backend, by backend and MCP method"
    );
    describe_counter!(
        BACKEND_ERRORS_TOTAL,
        "Backend requests that failed, by backend, MCP method and reason"
    );
    describe_histogram!(
        BACKEND_REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time to a backend's response head, by backend and MCP method"
    );
    describe_gauge!(
        BACKEND_UP,
        "1 when the backend answered its last catalog or discovery request"
    );
    describe_counter!(
        KEYRING_RELOADS_TOTAL,
        "Keyring reloads from the keys file, by result"
    );
    describe_gauge!(KEYRING_ACTIVE_KEY, "1 for the key id that seals new envelopes");
    describe_gauge!(KEYRING_KEYS, "Keys in the keyring (every one opens envelopes)");
    describe_counter!(TLS_RELOADS_TOTAL, "Listener certificate reloads, by result");
    describe_gauge!(DRAINING, "1 while the gateway drains before exiting");
    describe_gauge!(OPEN_CONNECTIONS, "Client connections open on the MCP listener");
    describe_counter!(
        SHED_TOTAL,
        "Requests answered 503 at once because the in-flight limit was reached"
    );
}

/// Records one request to `backend`: its count, its time to the response head, and a failure.
pub(crate) fn backend_request(
    backend: &metrics::SharedString,
    method: &'static str,
    outcome: &Result<Response<hyper::body::Incoming>, ForwardError>,
    elapsed: Duration,
) {
    metrics::counter!(BACKEND_REQUESTS_TOTAL, "backend" => backend.clone(), "method" => method).increment(1);
    metrics::histogram!(BACKEND_REQUEST_DURATION_SECONDS, "backend" => backend.clone(), "method" => method)
        .record(elapsed.as_secs_f64());
    let reason = match outcome {
        Ok(response) if response.status().is_server_error() => "http_5xx",
        Ok(response) if response.status().is_client_error() => "http_4xx",
        Ok(_) => return,
        Err(ForwardError::Timeout) => "timeout",
        Err(ForwardError::Unreachable(_)) => "unreachable",
    };
    metrics::counter!(BACKEND_ERRORS_TOTAL, "backend" => backend.clone(), "method" => method, "reason" => reason)
        .increment(1);
}

/// Records the keyring the gateway starts with (call after installing the recorder).
pub fn keyring_in_use(keyring: &tower_mrtr::Keyring) {
    keyring_loaded(keyring.active_key_id().as_str(), keyring.len(), None);
}

/// Records the outcome of a keyring reload and, on success, the active key id.
pub(crate) fn keyring_reloaded(result: Result<(&str, usize), ()>, previous_kid: Option<&str>) {
    match result {
        Ok((active, keys)) => {
            metrics::counter!(KEYRING_RELOADS_TOTAL, "result" => "ok").increment(1);
            keyring_loaded(active, keys, previous_kid);
        }
        Err(()) => metrics::counter!(KEYRING_RELOADS_TOTAL, "result" => "failed").increment(1),
    }
}

/// Records the keyring in use: its active key id and its size.
pub(crate) fn keyring_loaded(active: &str, keys: usize, previous_kid: Option<&str>) {
    if let Some(previous) = previous_kid.filter(|p| *p != active) {
        metrics::gauge!(KEYRING_ACTIVE_KEY, "kid" => previous.to_owned()).set(0.0);
    }
    metrics::gauge!(KEYRING_ACTIVE_KEY, "kid" => active.to_owned()).set(1.0);
    metrics::gauge!(KEYRING_KEYS).set(keys as f64);
}

/// Records the outcome of a listener certificate reload.
pub(crate) fn tls_reloaded(ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    metrics::counter!(TLS_RELOADS_TOTAL, "result" => result).increment(1);
}

/// Records whether `backend` answered its last catalog or discovery request.
pub(crate) fn backend_up(backend: &str, up: bool) {
    metrics::gauge!(BACKEND_UP, "backend" => backend.to_owned()).set(if up { 1.0 } else { 0.0 });
}

/// Records a request shed over the in-flight limit.
pub(crate) fn shed() {
    metrics::counter!(SHED_TOTAL).increment(1);
}

/// Records that draining started.
pub(crate) fn draining() {
    metrics::gauge!(DRAINING).set(1.0);
}

/// Records a client connection opening (`+1`) or closing (`-1`).
pub(crate) fn connection(delta: f64) {
    metrics::gauge!(OPEN_CONNECTIONS).increment(delta);
}

/// Counts and times every request through the wrapped MCP service (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestMetricsLayer;

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics { inner }
    }
}

/// The service of [`RequestMetricsLayer`].
#[derive(Clone, Debug)]
pub struct RequestMetrics<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequestMetrics<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        ResponseFuture {
            method: header_method(request.headers()),
            started: Instant::now(),
            future: self.inner.call(request),
        }
    }
}

pin_project! {
    /// Response future of [`RequestMetrics`].
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        method: &'static str,
        started: Instant,
        #[pin]
        future: F,
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.future.poll(cx));
        if let Ok(response) = &output {
            // The proxy reports a route with everything it answers; a response without one was
            // written by the MRTR layer itself (a refused envelope, an oversized body).
            let answered_by = match response.extensions().get::<Route>() {
                Some(route) if route.as_str() == GATEWAY_ROUTE => "gateway",
                Some(_) => "backend",
                None => "mrtr_layer",
            };
            let status = status_label(response.status());
            metrics::counter!(REQUESTS_TOTAL, "method" => *this.method, "status" => status, "answered_by" => answered_by)
                .increment(1);
            metrics::histogram!(REQUEST_DURATION_SECONDS, "method" => *this.method)
                .record(this.started.elapsed().as_secs_f64());
        }
        Poll::Ready(output)
    }
}
