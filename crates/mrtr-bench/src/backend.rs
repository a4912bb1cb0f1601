//! The mock MCP backend: a plain hyper 1.x server that answers the [`mcp`] tools as
//! fast as it can, so that the hop in front of it is what a run measures.
//!
//! It keeps nothing between requests: round 2 of `confirm` recomputes the state from the
//! arguments and compares. It speaks 2026-07-28 or, for the cells of legacy backends, the
//! `initialize` era ([`Era`]), over HTTP or over stdio ([`serve_stdio`]). SSE answers go out one frame per event, each flushed on its own, as
//! an MCP server that writes each notification when it happens does.
//!
//! Over HTTP it also serves `subscriptions/listen` (for `scale-bench --listens`): a filter with
//! `toolsListChanged: true` is acknowledged ([`listen_ack`]) and its stream held open; a
//! `tools/call` of [`BROADCAST`] (a tool it does not list) then sends one
//! `notifications/tools/list_changed` to every open listen ([`list_changed`]), stamped with
//! the wall-clock times of the call and of the write, so that a receiver on the same machine
//! knows how late it arrived. That is the only state it keeps: the open listens.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

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
use tokio::sync::mpsc;

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

/// The tool whose call makes the backend send one notification to every open listen; its
/// answer's `structuredContent` says how many it reached (`listens`) and the broadcast's `seq`.
pub const BROADCAST: &str = "broadcast";

/// The `_meta` key of a listen stream's messages naming the listen (the request's id).
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` key of a broadcast's number: 1 for the first of the process, then 2, 3…
pub const META_SEQ: &str = "mrtr.bench/seq";
/// The `_meta` key of when the [`BROADCAST`] call was handled, µs since the Unix epoch.
pub const META_TRIGGERED: &str = "mrtr.bench/triggeredUs";
/// The `_meta` key of when this listen's notification was written, µs since the Unix epoch.
pub const META_SENT: &str = "mrtr.bench/sentUs";

/// Notifications one listen may have queued; a listen that far behind misses the next ones
/// (counted as `lagging` in the broadcast's answer).
const LISTEN_QUEUE: usize = 8;

/// Microseconds since the Unix epoch: the clock every process on the machine shares.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// One broadcast, as every listen's stream receives it.
#[derive(Clone, Copy, Debug)]
struct Note {
    seq: u64,
    triggered_us: u64,
}

/// The open listens of one server.
#[derive(Default)]
struct Listeners {
    open: Mutex<Vec<mpsc::Sender<Note>>>,
    seq: AtomicU64,
}

impl Listeners {
    fn add(&self) -> mpsc::Receiver<Note> {
        let (sender, receiver) = mpsc::channel(LISTEN_QUEUE);
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sender);
        receiver
    }

    /// Queues a notification for every open listen (and forgets the closed ones): the
    /// broadcast's number, the listens reached, the listens too far behind to take it.
    fn broadcast(&self) -> (u64, usize, usize) {
        let note = Note {
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            triggered_us: now_us(),
        };
        let (mut reached, mut lagging) = (0, 0);
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        open.retain(|listen| match listen.try_send(note) {
            Ok(()) => {
                reached += 1;
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                lagging += 1;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        (note.seq, reached, lagging)
    }
}

/// The acknowledgement that opens listen `id`'s stream (an SSE frame).
pub fn listen_ack(id: &str) -> Vec<u8> {
    format!(
        "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{{\"notifications\":{{\"toolsListChanged\":true}},\"_meta\":{{\"{SUBSCRIPTION_ID}\":{id}}}}}}}\n\n"
    )
    .into_bytes()
}

/// Broadcast `seq`, triggered at `triggered_us`, as written to listen `id` at `sent_us` (an SSE
/// frame).
pub fn list_changed(id: &str, seq: u64, triggered_us: u64, sent_us: u64) -> Vec<u8> {
    format!(
        "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\",\"params\":{{\"_meta\":{{\"{SUBSCRIPTION_ID}\":{id},\"{META_SEQ}\":{seq},\"{META_TRIGGERED}\":{triggered_us},\"{META_SENT}\":{sent_us}}}}}}}\n\n"
    )
    .into_bytes()
}

/// The answer to a [`BROADCAST`] call: broadcast `seq` reached `listens` (and `lagging` were too
/// far behind).
fn broadcast_answer(id: &str, seq: u64, listens: usize, lagging: usize) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"broadcast {seq} sent to {listens} listens"}}],"structuredContent":{{"seq":{seq},"listens":{listens},"lagging":{lagging}}},"isError":false}}}}"#
    )
    .into_bytes()
}

/// Serves the mock backend on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) -> io::Result<()> {
    serve_era(listener, Era::Modern).await
}

/// Serves the mock backend of `era` on `listener` until the task is dropped.
pub async fn serve_era(listener: TcpListener, era: Era) -> io::Result<()> {
    let listeners = Arc::new(Listeners::default());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let listeners = listeners.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let listeners = listeners.clone();
                async move { Ok::<_, Infallible>(answer(request, era, &listeners).await) }
            });
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
            // Over stdio a listen is acknowledged and nothing more: broadcasts are HTTP's.
            Reply::Listen(id) => {
                stdout.write_all(event_data(&listen_ack(&id)))?;
                stdout.write_all(b"\n")?;
            }
            Reply::Broadcast(id) => {
                stdout.write_all(&broadcast_answer(&id, 0, 0, 0))?;
                stdout.write_all(b"\n")?;
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
    /// A `subscriptions/listen`'s filter.
    #[serde(borrow)]
    notifications: Option<&'a RawValue>,
}

/// The part of a listen filter this backend serves.
#[derive(Deserialize)]
struct Filter {
    #[serde(rename = "toolsListChanged", default)]
    tools_list_changed: bool,
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
    /// A `subscriptions/listen` of this id accepted: its stream.
    Listen(String),
    /// A [`BROADCAST`] call of this id.
    Broadcast(String),
    /// A notification: nothing (`202` over HTTP).
    Accepted,
}

async fn answer(request: Request<Incoming>, era: Era, listeners: &Listeners) -> Response<Answer> {
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
        Reply::Listen(id) => {
            let mut response = Response::new(Answer::Listen {
                ack: Some(Bytes::from(listen_ack(&id))),
                notes: listeners.add(),
                id: id.into_boxed_str(),
            });
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        Reply::Broadcast(id) => {
            let (seq, listens, lagging) = listeners.broadcast();
            json(StatusCode::OK, broadcast_answer(&id, seq, listens, lagging))
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
        (Some("subscriptions/listen"), params, Era::Modern) => listen(id, params),
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
        Some(BROADCAST) => Reply::Broadcast(id.to_owned()),
        _ => invalid("Unknown tool"),
    }
}

/// A `subscriptions/listen`: accepted when its filter asks for `toolsListChanged`, the one
/// category this backend notifies.
fn listen(id: &str, params: Option<Params<'_>>) -> Reply {
    let filter = params
        .and_then(|p| p.notifications)
        .and_then(|n| serde_json::from_str::<Filter>(n.get()).ok());
    match filter {
        Some(filter) if filter.tools_list_changed => Reply::Listen(id.to_owned()),
        Some(_) => Reply::Json(
            StatusCode::OK,
            mcp::error_answer(id, -32602, "This backend notifies toolsListChanged only"),
        ),
        None => Reply::Json(
            StatusCode::OK,
            mcp::error_answer(id, -32602, "Missing params.notifications"),
        ),
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

/// The backend's response body: one buffer, SSE events yielded one per poll, or a listen's
/// stream (its acknowledgement, then a notification per broadcast, never ending).
enum Answer {
    Full(Option<Bytes>),
    Events {
        frames: VecDeque<Bytes>,
        flushed: bool,
    },
    Listen {
        id: Box<str>,
        ack: Option<Bytes>,
        notes: mpsc::Receiver<Note>,
    },
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
            // Nothing queued after a frame is Pending, which makes hyper write it at once.
            Self::Listen { id, ack, notes } => {
                if let Some(ack) = ack.take() {
                    return Poll::Ready(Some(Ok(Frame::data(ack))));
                }
                notes.poll_recv(cx).map(|note| {
                    note.map(|n| {
                        Ok(Frame::data(Bytes::from(list_changed(
                            id,
                            n.seq,
                            n.triggered_us,
                            now_us(),
                        ))))
                    })
                })
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Full(data) => data.is_none(),
            Self::Events { frames, .. } => frames.is_empty(),
            Self::Listen { .. } => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Self::Events { .. } | Self::Listen { .. } => SizeHint::default(),
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
    fn a_listen_is_acknowledged_and_a_broadcast_reaches_every_open_one() {
        let listen = |filter: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":9,"method":"subscriptions/listen","params":{{"notifications":{filter}}}}}"#
            )
        };
        let tools = listen(r#"{"toolsListChanged":true}"#);
        assert!(matches!(reply(tools.as_bytes(), Era::Modern, false), Reply::Listen(id) if id == "9"));
        for refused in [listen(r#"{"promptsListChanged":true}"#), listen("7")] {
            let (status, body) = json_of(reply(refused.as_bytes(), Era::Modern, false));
            assert_eq!(status, StatusCode::OK);
            assert!(String::from_utf8_lossy(&body).contains("-32602"));
        }
        let ack: serde_json::Value = serde_json::from_slice(event_data(&listen_ack("9"))).unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], 9);

        let listeners = Listeners::default();
        let mut open = listeners.add();
        drop(listeners.add());
        assert_eq!(listeners.broadcast(), (1, 1, 0));
        let note = open.try_recv().unwrap();
        let frame = list_changed("9", note.seq, note.triggered_us, now_us());
        let message: serde_json::Value = serde_json::from_slice(event_data(&frame)).unwrap();
        assert_eq!(message["method"], "notifications/tools/list_changed");
        assert_eq!(message["params"]["_meta"][SUBSCRIPTION_ID], 9);
        assert_eq!(message["params"]["_meta"][META_SEQ], 1);
        assert!(
            message["params"]["_meta"][META_SENT].as_u64()
                >= message["params"]["_meta"][META_TRIGGERED].as_u64()
        );
        // A listen that reads nothing is skipped once its queue is full, not waited for.
        for _ in 0..LISTEN_QUEUE {
            listeners.broadcast();
        }
        assert_eq!(listeners.broadcast(), (LISTEN_QUEUE as u64 + 2, 0, 1));
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
