//! Listens shared ([`Listens`]): clients that send a backend the same `subscriptions/listen`
//! share one listen of the gateway's with it, each getting every event with its own id.
//!
//! A listen is one open stream per client. Passed through, each also holds a backend stream,
//! with its connection, buffers and the backend's work per notification: at thousands of
//! listens most of a replica's memory and CPU (`docs/benchmarks.md`, "Listens by the
//! thousand"). Yet most listens of one backend ask it the same thing: the list changes of the
//! tools a client shows.
//!
//! * **The same request.** Two listens share when the backend would have seen the same request
//!   from both: the same backend, principal and headers, the same body except the JSON-RPC `id`
//!   and the `_meta` trace context ([`Key`]; the headers the gateway never forwards, and those
//!   that differ per request, aside). Anything else, however small, is a listen of its own.
//! * **List changes only.** A listen that asks for resource subscriptions or tasks is never
//!   shared: a server may greet each resource subscription with an update of its own (the
//!   conformance fixture does), which a listen joining later would miss; a task's notifications
//!   are its owner's alone. Both go to the backend as they came.
//! * **The first** sends its request as it came and, when the backend answers with a stream,
//!   the stream is read by the gateway ([`read`]). A refusal (an error, JSON, no stream) goes to
//!   that client alone as the backend wrote it, and each listen that waited for it is sent as a
//!   listen of its own.
//! * **Every event** goes to every listen with the listen's own id: as
//!   `_meta["io.modelcontextprotocol/subscriptionId"]` in the acknowledgement and the
//!   notifications, as `id` in the stream's last response. A listen that joins later gets the
//!   acknowledgement first, then what comes after it, as a listen of its own would.
//! * **Bounds**: [`QUEUE`] events queued for a client that does not read; one that falls that
//!   far behind is ended (its stream closes; a client listens again and reads the lists afresh)
//!   rather than holding the others up or silently missing a change.
//! * **The end**: when the backend's stream ends, every listen's does, after the backend's last
//!   response. When the last client goes away, the gateway's listen is dropped, which closes the
//!   backend's stream (MCP's cancellation).
//! * **Seen**: the gauges `mrtr_gateway_shared_listens` (backend streams read for clients) and
//!   `mrtr_gateway_shared_listen_clients` (client streams served from them), by backend.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_channel::mpsc;
use http::header::{HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::{oneshot, watch};

use crate::jsonrpc::{self, Members};
use crate::observe::metrics::{Held, SHARED_LISTEN_CLIENTS, SHARED_LISTENS};
use crate::upstream::http::body::{ProxyBody, boxed};
use crate::upstream::http::forward::{MAX_MERGED_ANSWER, request_drops};
use crate::upstream::sse::{EventReader, EventsBody, KEEP_ALIVE_COMMENT, is_sse};

/// Most events queued for one listen whose client has not read them.
pub(crate) const QUEUE: usize = 64;

/// The `_meta` key naming the listen a notification belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// `_meta` members that differ per request and that a backend does not answer by (W3C trace
/// context, which MCP exempts from its reserved prefixes).
const PER_REQUEST_META: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// Headers left out of a listen's [`Key`]: those the gateway never forwards (the forwarder's
/// own list: credentials, hop-by-hop), those it writes itself, those that differ per request, and those a proxy in
/// front adds to say where a request came from (else no two clients behind it would share).
fn header_ignored(name: &str) -> bool {
    request_drops(name)
        || name.starts_with("proxy-")
        || matches!(
            name,
            "host"
                | "content-length"
                | "traceparent"
                | "tracestate"
                | "baggage"
                | "x-request-id"
                | "forwarded"
                | "via"
                | "x-forwarded-for"
                | "x-forwarded-host"
                | "x-forwarded-port"
                | "x-forwarded-proto"
                | "x-real-ip"
        )
}

/// What two listens must have alike to share: see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// The backend's name (also the start of `bytes`), the gauges' label.
    backend: Box<str>,
    bytes: Box<[u8]>,
}

impl Key {
    /// The key of a listen to `backend` (its name) by `principal`; `None` when its body is not
    /// a JSON-RPC request this can read (it is then sent on its own).
    pub(crate) fn of(
        backend: &str,
        principal: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<Self> {
        let mut key = Vec::with_capacity(body.len() + 256);
        key.extend_from_slice(backend.as_bytes());
        key.push(0);
        if let Some(principal) = principal {
            key.push(1);
            key.extend_from_slice(principal.as_bytes());
        }
        key.push(0);
        let mut kept: Vec<(&str, &HeaderValue)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value))
            .filter(|(name, _)| !header_ignored(name))
            .collect();
        kept.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.as_bytes().cmp(b.1.as_bytes())));
        for (name, value) in kept {
            key.extend_from_slice(name.as_bytes());
            key.push(b':');
            key.extend_from_slice(value.as_bytes());
            key.push(0);
        }
        key.extend_from_slice(request_without_id(body)?.as_bytes());
        Some(Self {
            backend: backend.into(),
            bytes: key.into_boxed_slice(),
        })
    }
}

/// A request's text without its `id` and its `params._meta` trace context, members in their
/// order (each followed by a comma, objects kept in braces): what a backend answers by.
fn request_without_id(body: &[u8]) -> Option<String> {
    let message = Members::parse(body)?;
    message.get("method")?;
    let mut out = String::with_capacity(body.len());
    for (key, value) in &message.0 {
        match &**key {
            "id" => continue,
            "params" => {
                let mut params = String::with_capacity(value.len() + 2);
                params.push('{');
                for (key, value) in &Members::of(value)?.0 {
                    if key == "notifications" && !list_changes_alone(value) {
                        return None;
                    }
                    if key == "_meta" {
                        let meta = Members::of(value)?;
                        let kept = meta.0.iter().filter(|(k, _)| !PER_REQUEST_META.contains(&&**k));
                        let meta = jsonrpc::object_text(kept.map(|(k, v)| (&**k, *v)));
                        jsonrpc::push_member(&mut params, key, &meta);
                    } else {
                        jsonrpc::push_member(&mut params, key, value);
                    }
                    params.push(',');
                }
                params.push('}');
                jsonrpc::push_member(&mut out, key, &params);
            }
            _ => jsonrpc::push_member(&mut out, key, value),
        }
        out.push(',');
    }
    Some(out)
}

/// Whether a listen's filter (`params.notifications`) asks for list changes and nothing else:
/// no resource subscription, whose start a server may mark with an update for that listen
/// alone, and no task, whose notifications are its owner's.
fn list_changes_alone(filter: &str) -> bool {
    Members::of(filter).is_some_and(|filter| {
        filter.0.iter().all(|(key, _)| {
            matches!(
                &**key,
                "toolsListChanged" | "promptsListChanged" | "resourcesListChanged"
            )
        })
    })
}

/// The gateway's listens open, by what they were asked.
type Open = Arc<Mutex<HashMap<Key, Weak<Shared>>>>;

/// The listens a gateway's backends share; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Listens {
    open: Open,
}

/// How a listen is served.
pub(crate) enum Joined {
    /// Its stream, from a listen of the gateway's.
    Stream(Response<ProxyBody>),
    /// It is the first: its request is to be sent ([`Lead::opened`] takes the answer).
    Lead(Lead),
    /// It is to be sent on its own (the first's was refused, or it waited too long).
    Alone,
}

impl Listens {
    /// Joins the listen `key` names as listen `id` (raw JSON), waiting at most `wait` for the
    /// backend's answer to the first of them.
    pub(crate) async fn join(&self, key: Key, id: &str, wait: Duration) -> Joined {
        let shared = {
            let mut open = lock(&self.open);
            match open
                .get(&key)
                .and_then(Weak::upgrade)
                .filter(|s| !lock(&s.state).closed)
            {
                Some(shared) => shared,
                None => {
                    let (gone, watcher) = oneshot::channel();
                    let shared = Arc::new(Shared {
                        backend: key.backend.clone(),
                        state: Mutex::new(State::default()),
                        phase: watch::channel(Phase::Opening).0,
                        _gone: gone,
                    });
                    open.insert(key.clone(), Arc::downgrade(&shared));
                    let events = shared.add(id);
                    return Joined::Lead(Lead {
                        events,
                        watcher,
                        waiting: Waiting {
                            shared,
                            key,
                            open: self.open.clone(),
                        },
                    });
                }
            }
        };
        let events = shared.add(id);
        let mut phase = shared.phase.subscribe();
        let opened = tokio::time::timeout(wait, phase.wait_for(|p| *p != Phase::Opening)).await;
        let headers = match opened {
            Ok(Ok(phase)) if *phase == Phase::Open => lock(&shared.state).headers.clone(),
            _ => return Joined::Alone,
        };
        Joined::Stream(stream(headers, events, shared))
    }

    /// How many keys name a listen of the gateway's, open or not (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.open).len()
    }
}

/// Where a listen stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Its first request is on its way.
    Opening,
    /// The backend answered with its stream.
    Open,
    /// The backend refused, or the first client went away before it answered.
    Refused,
}

/// One listen of the gateway's, held by the streams of the clients that share it.
#[derive(Debug)]
struct Shared {
    /// The backend's name.
    backend: Box<str>,
    state: Mutex<State>,
    phase: watch::Sender<Phase>,
    /// Dropped with the last client's stream: tells [`read`] to drop the backend's.
    _gone: oneshot::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    /// The backend's answer's headers, each client's stream's.
    headers: HeaderMap,
    listeners: Vec<Listener>,
    /// The backend's acknowledgement, for listens that join after it.
    ack: Option<Event>,
    /// The backend's stream ended: no listen joins any more.
    closed: bool,
}

#[derive(Debug)]
struct Listener {
    /// The client's listen's id (raw JSON).
    id: Box<str>,
    /// futures' channel, not tokio's: a bounded tokio channel takes about 1.4 KiB up front (a
    /// block of 32 places), this one a node per event waiting.
    events: mpsc::Sender<Bytes>,
}

impl Shared {
    /// A place for the listen `id`: its channel, with the acknowledgement in it when the
    /// backend has sent one (so that it comes first).
    fn add(&self, id: &str) -> mpsc::Receiver<Bytes> {
        // Its bound is the buffer plus one place per sender.
        let (mut sender, receiver) = mpsc::channel(QUEUE - 1);
        let mut state = lock(&self.state);
        if let Some(ack) = &state.ack {
            let _ = sender.try_send(ack.for_listen(id));
        }
        state.listeners.push(Listener {
            id: id.into(),
            events: sender,
        });
        receiver
    }

    /// Sends one event of the backend's stream to every listen; `false` once the stream is
    /// over (its last response was sent).
    fn deliver(&self, data: &[u8]) -> bool {
        let (event, kind) = Event::of(data);
        let mut state = lock(&self.state);
        state
            .listeners
            .retain_mut(|l| l.events.try_send(event.for_listen(&l.id)).is_ok());
        match kind {
            Kind::Ack => state.ack = Some(event),
            Kind::Response => return false,
            Kind::Other => {}
        }
        true
    }

    /// Sends a keep-alive comment to every listen (and forgets those whose client went away).
    fn keep_alive(&self) {
        let comment = Bytes::from_static(KEEP_ALIVE_COMMENT);
        lock(&self.state)
            .listeners
            .retain_mut(|l| l.events.try_send(comment.clone()).is_ok());
    }

    /// Ends every listen's stream, and lets none join.
    fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        state.listeners.clear();
    }
}

/// The first listen of a [`Shared`], until the backend answers its request.
pub(crate) struct Lead {
    events: mpsc::Receiver<Bytes>,
    watcher: oneshot::Receiver<()>,
    waiting: Waiting,
}

/// Those that wait for a lead's answer: told it was refused when the lead is dropped without
/// having opened (refused, or its client went away first), so that each is sent alone and the
/// next listen opens afresh.
struct Waiting {
    shared: Arc<Shared>,
    key: Key,
    open: Open,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if *self.shared.phase.borrow() == Phase::Opening {
            self.shared.close();
            self.shared.phase.send_replace(Phase::Refused);
            forget(&self.open, &self.key, &Arc::downgrade(&self.shared));
        }
    }
}

impl Lead {
    /// The backend's `answer` to the first listen: a stream is read for every listen that
    /// shares it, and this one's is given back; anything else is this client's answer alone.
    pub(crate) fn opened(self, answer: Response<ProxyBody>) -> Response<ProxyBody> {
        if answer.status() != StatusCode::OK || !is_sse(answer.headers()) {
            return answer; // Dropping `waiting` tells those waiting.
        }
        let (parts, body) = answer.into_parts();
        let mut headers = parts.headers;
        // The first request's id, if the backend answered with it, is no other client's: each
        // gets its own from the front.
        headers.remove("x-request-id");
        let Waiting { shared, key, open } = &self.waiting;
        lock(&shared.state).headers = headers.clone();
        let held = Held::new(SHARED_LISTENS, Some(&shared.backend));
        tokio::spawn(read(
            body,
            Arc::downgrade(shared),
            self.watcher,
            (open.clone(), key.clone(), held),
        ));
        shared.phase.send_replace(Phase::Open);
        stream(headers, self.events, shared.clone())
    }
}

/// A client's stream of a shared listen (counted while it is open).
fn stream(headers: HeaderMap, events: mpsc::Receiver<Bytes>, shared: Arc<Shared>) -> Response<ProxyBody> {
    let held = Held::new(SHARED_LISTEN_CLIENTS, Some(&shared.backend));
    let mut response = Response::new(boxed(EventsBody::new(events, Box::new((shared, held)))));
    *response.headers_mut() = headers;
    response
}

/// Reads the backend's stream of a listen into every client's, until it ends or the last
/// client went away (`gone`); then no listen joins it any more. `_held` counts it meanwhile.
async fn read(
    mut body: ProxyBody,
    shared: Weak<Shared>,
    mut gone: oneshot::Receiver<()>,
    (open, key, _held): (Open, Key, Held),
) {
    let mut events = EventReader::new();
    'stream: loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = &mut gone => break,
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(data) = frame.into_data() else { continue };
        events.push(&data);
        let Some(listens) = shared.upgrade() else { break };
        let mut any = false;
        while let Some(event) = events.next_event() {
            any = true;
            if !listens.deliver(&event) {
                break 'stream;
            }
        }
        if !any && events.held() == 0 && data.starts_with(b":") {
            listens.keep_alive();
        }
        if events.held() > MAX_MERGED_ANSWER {
            break;
        }
    }
    if let Some(listens) = shared.upgrade() {
        listens.close();
    }
    // Also when every client went away: no key outlives its listen.
    forget(&open, &key, &shared);
}

/// Takes `shared` out of `open`, unless another listen has the key by now.
fn forget(open: &Open, key: &Key, shared: &Weak<Shared>) {
    let mut open = lock(open);
    if open.get(key).is_some_and(|w| w.ptr_eq(shared)) {
        open.remove(key);
    }
}

/// What an event of a listen is, for [`Shared::deliver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ack,
    /// The listen's response, its stream's last message.
    Response,
    Other,
}

/// One event of the backend's stream as SSE text, and where in it the listen's id stands.
#[derive(Debug)]
struct Event {
    text: Bytes,
    id: Option<Range<usize>>,
}

/// The start of an event the gateway writes (`sse::write_message_event`).
const EVENT_START: &[u8] = b"event: message\ndata: ";

impl Event {
    /// The event carrying the JSON `data`, and what it is. JSON holds a line break only as
    /// whitespace, so one made a space puts the message on one `data:` line and changes
    /// nothing it says.
    fn of(data: &[u8]) -> (Self, Kind) {
        let mut text = BytesMut::with_capacity(EVENT_START.len() + data.len() + 2);
        text.extend_from_slice(EVENT_START);
        text.extend(
            data.iter()
                .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
        );
        text.extend_from_slice(b"\n\n");
        let json = &text[EVENT_START.len()..text.len() - 2];
        let (kind, id) = match Members::parse(json) {
            Some(message) => find_id(&message),
            None => (Kind::Other, None),
        };
        let id = id.and_then(|value| {
            let start = (value.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
            Some(start..start + value.len())
        });
        let event = Self {
            text: text.freeze(),
            id,
        };
        (event, kind)
    }

    /// The event for the listen `id` (raw JSON): its id where the backend's stood.
    fn for_listen(&self, id: &str) -> Bytes {
        match &self.id {
            Some(at) if &self.text[at.clone()] != id.as_bytes() => {
                let mut out = BytesMut::with_capacity(self.text.len() - at.len() + id.len());
                out.extend_from_slice(&self.text[..at.start]);
                out.extend_from_slice(id.as_bytes());
                out.extend_from_slice(&self.text[at.end..]);
                out.freeze()
            }
            _ => self.text.clone(),
        }
    }
}

/// What `message` is, and its listen id's text: `_meta`'s subscription id in a notification,
/// `id` in a response.
fn find_id<'a>(message: &Members<'a>) -> (Kind, Option<&'a str>) {
    let Some(method) = message.get("method") else {
        let response = message.get("result").is_some() || message.get("error").is_some();
        return match response {
            true => (Kind::Response, message.get("id")),
            false => (Kind::Other, None),
        };
    };
    let kind = match method == r#""notifications/subscriptions/acknowledged""# {
        true => Kind::Ack,
        false => Kind::Other,
    };
    let id = message
        .get("params")
        .and_then(Members::of)
        .and_then(|params| params.get("_meta"))
        .and_then(Members::of)
        .and_then(|meta| meta.get(SUBSCRIPTION_ID));
    (kind, id)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
