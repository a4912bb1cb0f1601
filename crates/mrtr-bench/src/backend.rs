//! The mock MCP backend: a plain hyper 1.x server that answers the [`mcp`] tools as
//! fast as it can, so that the hop in front of it is what a run measures.
//!
//! It keeps nothing between requests: round 2 of `confirm` recomputes the state from the
//! arguments and compares. It speaks 2026-07-28 or, for the cells of legacy backends, the
//! `initialize` era ([`Era`]), over HTTP or over stdio ([`serve_stdio`]). SSE answers go out one frame per event, each flushed on its own, as
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

/// The era a mock backend speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: no session, `server/discover` answered.
    Modern,
    /// The `initialize` era (2025-11-25): `initialize` opens a session ([`SESSION`] over HTTP),
    /// every later request must carry it, and `server/discover` is a method it does not know.
    Legacy,
}

/// The `Mcp-Session-Id` a legacy mock backend gives at `initialize` and asks for afterwards
/// (one for every client: the backend keeps nothing per session, but it does refuse a request
/// outside one, as an `initialize`-era server does).
pub const SESSION: &str = "mock-legacy-session";

/// Serves the mock backend on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) -> io::Result<()> {
    serve_era(listener, Era::Modern).await
}

/// Serves the mock backend of `era` on `listener` until the task is dropped.
pub async fn serve_era(listener: TcpListener, era: Era) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service =
                service_fn(move |request| async move { Ok::<_, Infallible>(answer(request, era).await) });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Serves the mock backend of `era` over stdin and stdout, one JSON-RPC message per line (the MCP
/// stdio transport), one message after another, until stdin closes. An SSE answer's events go
/// out as one line each. Each message first costs `work` of CPU time spent spinning, to stand for
/// a server that does something (the mock alone answers in a few microseconds).
pub fn serve_stdio(era: Era, work: std::time::Duration) -> io::Result<()> {
    use std::io::{BufRead, Write};
    let stdin = io::stdin().lock();
    let mut stdout = io::BufWriter::new(io::stdout().lock());
    for line in stdin.split(b'\n') {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let began = std::time::Instant::now();
        while began.elapsed() < work {
            std::hint::spin_loop();
        }
        match reply(&line, era, true) {
            Reply::Json(_, body) | Reply::Session(body) => {
                stdout.write_all(&body)?;
                stdout.write_all(b"\n")?;
            }
            Reply::Events(frames) => {
                for frame in frames {
                    stdout.write_all(event_data(&frame))?;
                    stdout.write_all(b"\n")?;
                }
            }
            Reply::Accepted => continue,
        }
        stdout.flush()?;
    }
    Ok(())
}

/// The JSON of one of [`mcp::progress_events`]' frames (`event: message\ndata: JSON\n\n`).
fn event_data(frame: &[u8]) -> &[u8] {
    let data = frame
        .strip_prefix(b"event: message\ndata: ".as_slice())
        .unwrap_or(frame);
    data.strip_suffix(b"\n\n".as_slice()).unwrap_or(data)
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

/// What the mock backend answers one message, whatever the transport.
enum Reply {
    /// A JSON answer with this status.
    Json(StatusCode, Vec<u8>),
    /// The answer to a legacy `initialize`, which opens the session [`SESSION`].
    Session(Vec<u8>),
    /// SSE frames, one per event (JSON lines over stdio).
    Events(Vec<Vec<u8>>),
    /// A notification: nothing (`202` over HTTP).
    Accepted,
}

async fn answer(request: Request<Incoming>, era: Era) -> Response<Answer> {
    let session = request
        .headers()
        .get("mcp-session-id")
        .is_some_and(|v| v.as_bytes() == SESSION.as_bytes());
    match *request.method() {
        http::Method::POST => {}
        // A legacy client ends its session with DELETE; there is nothing to forget.
        http::Method::DELETE if era == Era::Legacy && session => return plain(StatusCode::OK, ""),
        _ => return plain(StatusCode::METHOD_NOT_ALLOWED, ""),
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable body"),
    };
    match reply(&body, era, session) {
        Reply::Json(status, body) => json(status, body),
        Reply::Session(body) => {
            let mut response = json(StatusCode::OK, body);
            response
                .headers_mut()
                .insert("mcp-session-id", HeaderValue::from_static(SESSION));
            response
        }
        Reply::Events(frames) => {
            let mut response = Response::new(Answer::Events {
                frames: frames.into_iter().map(Bytes::from).collect(),
                flushed: false,
            });
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        Reply::Accepted => plain(StatusCode::ACCEPTED, ""),
    }
}

/// The answer to one message; `session`: whether it came in the legacy session.
fn reply(body: &[u8], era: Era, session: bool) -> Reply {
    let ok = |body| Reply::Json(StatusCode::OK, body);
    let Ok(message) = serde_json::from_slice::<Message<'_>>(body) else {
        return Reply::Json(
            StatusCode::BAD_REQUEST,
            mcp::error_answer("null", -32700, "Parse error"),
        );
    };
    let method = message.method.as_deref();
    if era == Era::Legacy && !session && method != Some("initialize") {
        // What the TypeScript SDK's servers answer a request outside a session.
        return Reply::Json(
            StatusCode::BAD_REQUEST,
            mcp::error_answer("null", -32000, "Bad Request: No valid session ID provided"),
        );
    }
    let Some(id) = message.id.map(RawValue::get) else {
        return Reply::Accepted;
    };
    match (method, message.params, era) {
        (Some("tools/list"), _, _) => ok(mcp::list_answer(id)),
        // The gateway's health probe: answered as a 2026-07-28 server does, so that the backend
        // is up and the probe's connection stays in the gateway's pool, as with a real backend.
        (Some("server/discover"), _, Era::Modern) => ok(mcp::discover_answer(id)),
        (Some("initialize"), _, Era::Legacy) => Reply::Session(mcp::initialize_answer(id)),
        (Some("tools/call"), Some(params), _) => call(id, params),
        (Some("tools/call"), None, _) => ok(mcp::error_answer(id, -32602, "Missing params")),
        _ => ok(mcp::error_answer(id, -32601, "Method not found")),
    }
}

fn call(id: &str, params: Params<'_>) -> Reply {
    let ok = |body| Reply::Json(StatusCode::OK, body);
    let invalid = |message| Reply::Json(StatusCode::OK, mcp::error_answer(id, -32602, message));
    let arguments = params.arguments;
    match params.name.as_deref() {
        Some(mcp::ECHO) => match arguments.size.filter(|&s| s <= mcp::MAX_SIZE) {
            Some(size) => ok(mcp::echo_answer(id, size)),
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
                None => ok(mcp::input_required_answer(id, &mcp::state(seed, size))),
                Some(state) if params.input_responses.is_some() && state == mcp::state(seed, size) => {
                    ok(mcp::confirmed_answer(id, seed))
                }
                Some(_) => invalid("requestState does not match"),
            }
        }
        Some(mcp::PROGRESS) => match arguments.events.filter(|&e| e <= mcp::MAX_EVENTS) {
            Some(events) => Reply::Events(mcp::progress_events(id, events)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(reply: Reply) -> (StatusCode, Vec<u8>) {
        match reply {
            Reply::Json(status, body) => (status, body),
            Reply::Session(body) => (StatusCode::OK, body),
            _ => panic!("not a JSON answer"),
        }
    }

    #[test]
    fn a_legacy_backend_answers_only_inside_its_session() {
        let call = mcp::echo_request(3, 256);
        let (status, _) = json_of(reply(&call, Era::Legacy, false));
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(matches!(
            reply(&mcp::initialize_request(1), Era::Legacy, false),
            Reply::Session(body) if body == mcp::initialize_answer("1")
        ));
        assert_eq!(
            json_of(reply(&call, Era::Legacy, true)).1,
            mcp::echo_answer("3", 256)
        );
        let discover = br#"{"jsonrpc":"2.0","id":4,"method":"server/discover"}"#;
        assert_eq!(
            json_of(reply(discover, Era::Legacy, true)).1,
            mcp::error_answer("4", -32601, "Method not found")
        );
        assert_eq!(
            json_of(reply(discover, Era::Modern, false)).1,
            mcp::discover_answer("4")
        );
        assert!(matches!(
            reply(&mcp::initialized_notification(), Era::Legacy, true),
            Reply::Accepted
        ));
    }

    #[test]
    fn an_sse_answer_goes_over_stdio_as_one_line_per_event() {
        for frame in mcp::progress_events("5", 2) {
            let data = event_data(&frame);
            assert!(!data.contains(&b'\n'));
            serde_json::from_slice::<serde_json::Value>(data).unwrap();
        }
    }
}
