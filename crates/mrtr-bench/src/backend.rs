//! The mock MCP backend: a plain hyper 1.x server that answers the [`mcp`] tools as
//! fast as it can, so that the hop in front of it is what a run measures.
//!
//! It keeps nothing between requests: round 2 of `confirm` recomputes the state from the
//! arguments and compares. SSE answers go out one frame per event, each flushed on its own, as
//! an MCP server that writes each notification when it happens does.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("backend at http://{}/mcp", listener.local_addr()?);
//! mrtr_bench::backend::serve(listener).await
//! # }
//! ```

use std::borrow::Cow;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpListener;

use crate::mcp;

/// Serves the mock backend on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|request| async move { Ok::<_, Infallible>(answer(request).await) });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    arguments: Arguments,
    #[serde(rename = "requestState", borrow)]
    request_state: Option<Cow<'a, str>>,
    #[serde(rename = "inputResponses", borrow)]
    input_responses: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Arguments {
    size: Option<usize>,
    seed: Option<u64>,
    #[serde(rename = "stateSize")]
    state_size: Option<usize>,
    events: Option<usize>,
}

async fn answer(request: Request<Incoming>) -> Response<Answer> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable body"),
    };
    let Ok(message) = serde_json::from_slice::<Message<'_>>(&body) else {
        return json(
            StatusCode::BAD_REQUEST,
            mcp::error_answer("null", -32700, "Parse error"),
        );
    };
    let Some(id) = message.id.map(RawValue::get) else {
        return plain(StatusCode::ACCEPTED, "");
    };
    match (message.method.as_deref(), message.params) {
        (Some("tools/list"), _) => json(StatusCode::OK, mcp::list_answer(id)),
        // The gateway's health probe: answered as a 2026-07-28 server does, so that the backend
        // is up and the probe's connection stays in the gateway's pool, as with a real backend.
        (Some("server/discover"), _) => json(StatusCode::OK, mcp::discover_answer(id)),
        (Some("tools/call"), Some(params)) => call(id, params),
        (Some("tools/call"), None) => json(StatusCode::OK, mcp::error_answer(id, -32602, "Missing params")),
        _ => json(StatusCode::OK, mcp::error_answer(id, -32601, "Method not found")),
    }
}

fn call(id: &str, params: Params<'_>) -> Response<Answer> {
    let invalid = |message| json(StatusCode::OK, mcp::error_answer(id, -32602, message));
    let arguments = params.arguments;
    match params.name.as_deref() {
        Some(mcp::ECHO) => match arguments.size.filter(|&s| s <= mcp::MAX_SIZE) {
            Some(size) => json(StatusCode::OK, mcp::echo_answer(id, size)),
            None => invalid("size missing or too large"),
        },
        Some(mcp::CONFIRM) => {
            let (Some(seed), Some(size)) = (
                arguments.seed,
                arguments.state_size.filter(|&s| s <= mcp::MAX_SIZE),
            ) else {
                return invalid("seed or stateSize missing");
            };
            match params.request_state {
                None => json(
                    StatusCode::OK,
                    mcp::input_required_answer(id, &mcp::state(seed, size)),
                ),
                Some(state) if params.input_responses.is_some() && state == mcp::state(seed, size) => {
                    json(StatusCode::OK, mcp::confirmed_answer(id, seed))
                }
                Some(_) => invalid("requestState does not match"),
            }
        }
        Some(mcp::PROGRESS) => match arguments.events.filter(|&e| e <= mcp::MAX_EVENTS) {
            Some(events) => {
                let frames = mcp::progress_events(id, events)
                    .into_iter()
                    .map(Bytes::from)
                    .collect();
                let mut response = Response::new(Answer::Events {
                    frames,
                    flushed: false,
                });
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                response
            }
            None => invalid("events missing or too many"),
        },
        _ => invalid("Unknown tool"),
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Answer> {
    let mut response = Response::new(Answer::Full(Some(Bytes::from(body))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Answer> {
    let mut response = Response::new(Answer::Full(Some(Bytes::from_static(text.as_bytes()))));
    *response.status_mut() = status;
    response
}

/// The backend's response body: one buffer, or SSE events yielded one per poll.
enum Answer {
    Full(Option<Bytes>),
    Events { frames: VecDeque<Bytes>, flushed: bool },
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Self::Events { frames, flushed } => {
                // Pending between events makes hyper write (flush) each event on its own.
                if !*flushed && !frames.is_empty() {
                    *flushed = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                *flushed = false;
                Poll::Ready(frames.pop_front().map(|f| Ok(Frame::data(f))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Full(data) => data.is_none(),
            Self::Events { frames, .. } => frames.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Self::Events { .. } => SizeHint::default(),
        }
    }
}
