//! [`RequestMetricsLayer`]: counts and times every MCP request at the front of the stack, by MCP
//! method, HTTP status and who answered it (a backend, the gateway itself, or the MRTR layer
//! refusing it before any backend saw it). The names and the kept handles are
//! [`crate::observe::metrics`]'s.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use metrics::{Counter, Histogram};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_mrtr::Route;
use tower_service::Service;

use crate::observe::metrics::{
    MethodLabel, PerMethod, REQUEST_DURATION_SECONDS, REQUESTS_TOTAL, status_label,
};
use crate::route::GATEWAY_ROUTE;

/// Who answered a request: the `answered_by` label.
#[derive(Clone, Copy, Debug)]
enum AnsweredBy {
    Backend,
    Gateway,
    MrtrLayer,
}

impl AnsweredBy {
    /// The proxy reports a route with everything it answers; a response without one was
    /// written by the MRTR layer itself (a refused envelope, an oversized body).
    fn of<B>(response: &Response<B>) -> Self {
        match response.extensions().get::<Route>() {
            Some(route) if route.as_str() == GATEWAY_ROUTE => Self::Gateway,
            Some(_) => Self::Backend,
            None => Self::MrtrLayer,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Backend => "backend",
            Self::Gateway => "gateway",
            Self::MrtrLayer => "mrtr_layer",
        }
    }
}

/// The handles of the request metrics. Only answers with status 200 (nearly all of them) have
/// kept counters; other statuses are registered each time.
#[derive(Debug)]
struct RequestHandles {
    /// `requests_total{status="200"}`, by who answered, then by method.
    ok: [PerMethod<Counter>; 3],
    durations: PerMethod<Histogram>,
}

impl RequestHandles {
    fn record(&self, method: MethodLabel, status: StatusCode, answered_by: AnsweredBy, elapsed: Duration) {
        let who = answered_by.as_str();
        if status == StatusCode::OK {
            self.ok[answered_by as usize]
                .get(method, |method| {
                    metrics::counter!(REQUESTS_TOTAL, "method" => method, "status" => "200", "answered_by" => who)
                })
                .increment(1);
        } else {
            let status = status_label(status);
            metrics::counter!(REQUESTS_TOTAL, "method" => method.as_str(), "status" => status, "answered_by" => who)
                .increment(1);
        }
        self.durations
            .get(
                method,
                |method| metrics::histogram!(REQUEST_DURATION_SECONDS, "method" => method),
            )
            .record(elapsed.as_secs_f64());
    }
}

/// Counts and times every request through the wrapped MCP service (see the module docs for when
/// to install the recorder).
#[derive(Clone, Debug)]
pub(crate) struct RequestMetricsLayer {
    handles: Arc<RequestHandles>,
}

impl RequestMetricsLayer {
    /// A layer with no handle registered yet.
    pub(crate) fn new() -> Self {
        Self {
            handles: Arc::new(RequestHandles {
                ok: std::array::from_fn(|_| PerMethod::new()),
                durations: PerMethod::new(),
            }),
        }
    }
}

impl Default for RequestMetricsLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            handles: self.handles.clone(),
        }
    }
}

/// The service of [`RequestMetricsLayer`].
#[derive(Clone, Debug)]
pub struct RequestMetrics<S> {
    inner: S,
    handles: Arc<RequestHandles>,
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
            method: MethodLabel::of_headers(request.headers()),
            started: Instant::now(),
            handles: self.handles.clone(),
            future: self.inner.call(request),
        }
    }
}

pin_project! {
    /// Response future of [`RequestMetrics`].
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        method: MethodLabel,
        started: Instant,
        handles: Arc<RequestHandles>,
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
            this.handles.record(
                *this.method,
                response.status(),
                AnsweredBy::of(response),
                this.started.elapsed(),
            );
        }
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::FutureExt;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tower::service_fn;
    use tower_mrtr::mcp_headers::MCP_METHOD;

    use super::*;

    /// Answers with the status in the request's `x-status` and, unless `x-no-route` is set, the
    /// route of a backend.
    async fn answer(request: Request<()>) -> Result<Response<()>, Infallible> {
        let status = request
            .headers()
            .get("x-status")
            .map_or(200, |v| v.to_str().unwrap().parse().unwrap());
        let mut response = Response::builder().status(status).body(()).unwrap();
        if !request.headers().contains_key("x-no-route") {
            response.extensions_mut().insert(Route::new("alpha"));
        }
        Ok(response)
    }

    fn request(method: &str, extra: Option<(&'static str, &'static str)>) -> Request<()> {
        let mut builder = Request::builder().header(MCP_METHOD, method);
        if let Some((name, value)) = extra {
            builder = builder.header(name, value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn kept_handles_count_every_request_under_its_labels() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let mut service = RequestMetricsLayer::new().layer(service_fn(answer));
            // `service_fn` is always ready and `answer` never waits.
            let mut send = |request| service.call(request).now_or_never().unwrap().unwrap();
            for _ in 0..3 {
                send(request("tools/call", None));
            }
            send(request("tools/call", Some(("x-status", "502"))));
            send(request("tools/call", Some(("x-no-route", "1"))));
            send(request("x/made-up", None));
        });

        let mut counts = Vec::new();
        let mut timed = 0;
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            match value {
                DebugValue::Counter(n) if key.key().name() == REQUESTS_TOTAL => {
                    counts.push((labels.join(","), n))
                }
                DebugValue::Histogram(samples) if key.key().name() == REQUEST_DURATION_SECONDS => {
                    timed += samples.len();
                }
                _ => {}
            }
        }
        counts.sort();
        assert_eq!(
            counts,
            [
                ("method=other,status=200,answered_by=backend".to_owned(), 1),
                ("method=tools/call,status=200,answered_by=backend".to_owned(), 3),
                (
                    "method=tools/call,status=200,answered_by=mrtr_layer".to_owned(),
                    1
                ),
                ("method=tools/call,status=502,answered_by=backend".to_owned(), 1),
            ]
        );
        assert_eq!(timed, 6);
    }
}
