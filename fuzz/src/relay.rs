//! One exchange through the whole [`Mrtr`](tower_mrtr::Mrtr) service: a client request in, a
//! scripted inner service (the "proxy" and its backend) answering, the client's view out.
//!
//! ```
//! use http::{Request, Response};
//! use tower_mrtr_fuzz::relay::{exchange, relay_layer, Step, StepBody};
//!
//! let request = Request::post("/mcp").body(StepBody::full(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)).unwrap();
//! let out = exchange(&relay_layer(), request, |_seen| Response::new(StepBody::full(b"{}")));
//! assert_eq!(out.received.bytes(), b"{}");
//! assert_eq!(out.seen.len(), 1);
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tower::{Layer, ServiceExt};
use tower_mrtr::{McpRequestHead, MrtrLayer, PinnedRoute, RequestBody, Route};

use crate::exec::{Received, block_on, collect};
use crate::mint::{FixedClock, PRINCIPAL_HEADER, relay_keyring};

/// One step of a scripted body.
#[derive(Debug, Clone)]
pub enum Step {
    /// A data frame.
    Data(Bytes),
    /// Not ready this time (wakes itself): what a slow peer looks like.
    Stall,
    /// The peer fails (a reset connection); the body ends.
    Error,
    /// Trailers; the body ends.
    Trailers(HeaderMap),
}

/// A body that plays its [`Step`]s.
#[derive(Debug, Clone, Default)]
pub struct StepBody {
    steps: VecDeque<Step>,
    exact_len: Option<u64>,
}

impl StepBody {
    /// A body of these steps, of unknown length (as a chunked body).
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
            exact_len: None,
        }
    }

    /// One data frame, of known length.
    pub fn full(bytes: &[u8]) -> Self {
        Self {
            steps: VecDeque::from([Step::Data(Bytes::copy_from_slice(bytes))]),
            exact_len: Some(bytes.len() as u64),
        }
    }
}

impl Body for StepBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.steps.pop_front() {
            None => Poll::Ready(None),
            Some(Step::Data(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Some(Step::Stall) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(Step::Error) => {
                self.steps.clear();
                Poll::Ready(Some(Err(std::io::Error::other("connection reset (scripted)"))))
            }
            Some(Step::Trailers(trailers)) => {
                self.steps.clear();
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.steps.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        self.exact_len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// What the inner service saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The HTTP method.
    pub method: Method,
    /// The headers.
    pub headers: HeaderMap,
    /// The body as far as it could be read.
    pub body: Bytes,
    /// Whether reading the body failed.
    pub body_error: bool,
    /// The route the layer pinned the request to.
    pub pinned: Option<Route>,
    /// The head the layer parsed.
    pub head: Option<McpRequestHead>,
}

/// The client's view of one exchange, and what the inner service saw.
#[derive(Debug)]
pub struct Exchange {
    /// Status of the answer.
    pub status: StatusCode,
    /// Headers of the answer.
    pub headers: HeaderMap,
    /// The answer's body as the client received it.
    pub received: Received,
    /// Every request that reached the inner service (at most one).
    pub seen: Vec<Seen>,
}

/// The layer as the targets configure it by default: the fixed keyring (mid-rotation) and clock.
pub fn relay_layer() -> MrtrLayer {
    MrtrLayer::with_shared_keyring(relay_keyring()).clock(Arc::new(FixedClock))
}

/// Binds envelopes to the `x-user` header, as an authentication layer outside would.
pub fn with_principal(layer: MrtrLayer, required: bool) -> MrtrLayer {
    layer
        .bind_principal(|parts| {
            parts
                .headers
                .get(PRINCIPAL_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .require_principal(required)
}

/// Sends `request` through `layer` over an inner service that records what it sees and answers
/// with `answer(seen)`.
pub fn exchange<F>(layer: &MrtrLayer, request: Request<StepBody>, answer: F) -> Exchange
where
    F: Fn(&Seen) -> Response<StepBody> + Clone + Send + Sync + 'static,
{
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let inner = tower::service_fn(move |req: Request<RequestBody<StepBody>>| {
        let record = record.clone();
        let answer = answer.clone();
        async move {
            let (parts, body) = req.into_parts();
            let mut bytes = Vec::new();
            let mut body_error = false;
            let mut body = std::pin::pin!(body);
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => {
                        if let Some(data) = frame.data_ref() {
                            bytes.extend_from_slice(data);
                        }
                    }
                    Err(_) => {
                        body_error = true;
                        break;
                    }
                }
            }
            let seen = Seen {
                method: parts.method.clone(),
                headers: parts.headers.clone(),
                body: Bytes::from(bytes),
                body_error,
                pinned: parts.extensions.get::<PinnedRoute>().map(|p| p.0.clone()),
                head: parts.extensions.get::<McpRequestHead>().cloned(),
            };
            let response = answer(&seen);
            record.lock().expect("not poisoned").push(seen);
            Ok::<_, Infallible>(response)
        }
    });
    let service = layer.layer(inner);
    let response = match block_on(service.oneshot(request)) {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    let received = collect(body);
    let seen = seen.lock().expect("not poisoned").clone();
    Exchange {
        status: parts.status,
        headers: parts.headers,
        received,
        seen,
    }
}
