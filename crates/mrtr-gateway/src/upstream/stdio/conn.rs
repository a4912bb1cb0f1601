//! One running process's side of the conversation ([`Conn`]): requests written under ids of the
//! gateway's own, and each line the process writes routed to the call it answers; and what a
//! call holds while it lasts ([`Place`]): its place among the process's requests in flight and,
//! on a process that principals share, a place of its principal's share of them ([`Shares`]).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tower_mrtr::error::{INTERNAL_ERROR, METHOD_NOT_FOUND};

use super::body::Relayed;
use crate::jsonrpc::{self, RawObject};
use crate::upstream::answer::{Answer, UpstreamError};
use crate::upstream::health::Found;
use crate::upstream::session::hub::Hub;
use crate::upstream::translate::{ClientAsks, Reply, Translation, outgoing};

/// Most requests in flight per process; more wait for one to finish.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// How many of a shared process's [`MAX_IN_FLIGHT`] places one principal may hold (in flight or
/// waiting for one) by default: a quarter, so that one principal's calls, however slow, leave
/// the other three quarters to everyone else.
pub(crate) const DEFAULT_CALLS_PER_PRINCIPAL: NonZeroUsize =
    NonZeroUsize::new(MAX_IN_FLIGHT / 4).expect("MAX_IN_FLIGHT is at least 4");

/// Most notifications queued for one call that its client has not read yet; later progress is
/// dropped (the response always has room).
pub(super) const CALL_QUEUE: usize = 64;
/// The calls of a process waiting for answers, by the request id the gateway gave them (raw
/// JSON); `None` once the process's stdout closed (no answer can come).
type Calls = Option<HashMap<Box<str>, mpsc::Sender<Relayed>>>;

/// One running process: where its messages go and which calls wait for answers.
pub(super) struct Conn {
    pub(super) writer: mpsc::Sender<Bytes>,
    pub(super) calls: Mutex<Calls>,
    pub(super) next_id: AtomicU64,
    /// Whether the process serves one principal alone (run per principal): then a request of the
    /// process's own while exactly one call is in flight is that call's, and goes to its client
    /// the way an HTTP session's request during a call does ([`Conn::dispatch`]).
    pub(super) alone: bool,
    /// What its handshake found (set once, before the process is `Up`).
    pub(super) hello: std::sync::OnceLock<Hello>,
    /// A legacy process's list changes and resource updates, for the listens it serves.
    pub(super) hub: Arc<Hub>,
}

pub(super) struct Hello {
    pub(super) found: Found,
    /// For a legacy process: the `server/discover` result made from its `initialize` result.
    pub(super) discover: Option<Value>,
}

/// A call's place among those in flight: given back when the call ends.
pub(super) struct CallGuard {
    pub(super) conn: Arc<Conn>,
    pub(super) ours: Box<str>,
    pub(super) _place: Option<Place>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(calls) = self.conn.calls().as_mut() {
            calls.remove(&self.ours);
        }
    }
}

/// What a call holds until it ends (its guard, hence its answer's body, is dropped: answered,
/// failed, or its client gone): a place among the process's calls in flight (or among its
/// listens), and its principal's share of them when the process is shared.
pub(super) struct Place {
    _permit: OwnedSemaphorePermit,
    _share: Option<Share>,
}

impl Place {
    pub(super) fn new(permit: OwnedSemaphorePermit, share: Option<Share>) -> Self {
        Self {
            _permit: permit,
            _share: share,
        }
    }
}

/// The places of a process that several principals share, counted per principal, so that one
/// principal's calls (slow ones, or ones that never answer) cannot take all of them: each
/// principal may hold at most [`max`](Self::max), counting the calls in flight and those
/// waiting for a place. A principal is forgotten when it holds none.
///
/// Requests without a principal are one group of their own, counted like a principal, and held
/// to the same share once the process has served a request with a principal (then the gateway
/// names principals, and a request without one is the gateway's own). Until then every request
/// is the same nobody, on a gateway without a principal header: there is no one to share with,
/// and a share would only take three quarters of the places from every client at once.
#[derive(Debug)]
pub(super) struct Shares {
    max: usize,
    held: Arc<Mutex<Held>>,
}

#[derive(Debug, Default)]
struct Held {
    /// Places held, by principal (`None`: requests without one).
    by: HashMap<Option<Arc<str>>, usize>,
    /// Whether a request with a principal came.
    principals: bool,
}

/// One place of a principal's share: given back when dropped.
#[derive(Debug)]
pub(super) struct Share {
    held: Arc<Mutex<Held>>,
    principal: Option<Arc<str>>,
}

impl Shares {
    /// Shares of `max` places each (at most [`MAX_IN_FLIGHT`], what a process has).
    pub(super) fn new(max: NonZeroUsize) -> Self {
        Self {
            max: max.get().min(MAX_IN_FLIGHT),
            held: Arc::default(),
        }
    }

    /// The most places one principal may hold.
    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// A place of `principal`'s share, or `None` when it holds all of its share already (the
    /// request is then refused at once, not queued).
    pub(super) fn take(&self, principal: Option<&str>) -> Option<Share> {
        let principal: Option<Arc<str>> = principal.map(Arc::from);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.principals |= principal.is_some();
        let bounded = held.principals;
        let count = held.by.entry(principal.clone()).or_default();
        if bounded && *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Share {
            held: self.held.clone(),
            principal,
        })
    }

    /// How many places `principal` holds.
    #[cfg(test)]
    pub(super) fn held(&self, principal: Option<&str>) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.by
            .iter()
            .find(|(p, _)| p.as_deref() == principal)
            .map_or(0, |(_, count)| *count)
    }

    /// How many principals (and the group without one) hold places.
    #[cfg(test)]
    pub(super) fn holders(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).by.len()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.by.get_mut(&self.principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.by.remove(&self.principal);
            }
        }
    }
}

/// The `_meta` of a notification's params, as far as it names a listen.
#[derive(serde::Deserialize)]
struct ListenMeta<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<ListenId<'a>>,
}

#[derive(serde::Deserialize)]
struct ListenId<'a> {
    #[serde(rename = "io.modelcontextprotocol/subscriptionId", borrow)]
    subscription_id: Option<&'a RawValue>,
}

/// Why a request was not sent.
pub(super) enum Unsent {
    /// Not a JSON-RPC request object with object `params`.
    NotJsonRpc,
    /// The process's pipes are closed.
    Gone,
    /// The process does not read its stdin: requests are queued up to the bound.
    Stuck,
}

/// A request sent, its answer to come.
pub(super) struct Call {
    pub(super) messages: mpsc::Receiver<Relayed>,
    pub(super) translation: Translation,
    pub(super) guard: CallGuard,
}

impl Conn {
    pub(super) fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No answer can come any more: every call waiting gets its error now, and no new one is
    /// taken.
    pub(super) fn close(&self) {
        *self.calls() = None;
        self.hub.close("The backend's process exited");
    }

    /// The call waiting for the id `ours` (raw JSON); with `remove`, taken out (its response came).
    pub(super) fn call(&self, ours: &str, remove: bool) -> Option<mpsc::Sender<Relayed>> {
        let mut calls = self.calls();
        let calls = calls.as_mut()?;
        if remove {
            calls.remove(ours)
        } else {
            calls.get(ours).cloned()
        }
    }

    /// The call a request of the process's own (`method`) is for: the one call in flight of a
    /// process that serves one principal alone. A shared process's request names no call (on
    /// stdio a request carries no link to the call it serves), and neither does one made while
    /// several calls are in flight; an answer to it must not go to another client.
    fn call_asked(&self, method: &str) -> Result<mpsc::Sender<Relayed>, Unasked> {
        if method == "ping" {
            return Err(Unasked::Ping);
        }
        if !self.alone {
            return Err(Unasked::Shared);
        }
        let calls = self.calls();
        match calls.as_ref().map(|calls| (calls.len(), calls.values().next())) {
            // The queue keeps a place for the response.
            Some((1, Some(call))) if call.capacity() > 1 => Ok(call.clone()),
            Some((1, Some(_))) => Err(Unasked::Behind),
            calls => Err(Unasked::Calls(calls.map_or(0, |(count, _)| count))),
        }
    }

    pub(super) fn modern(&self) -> bool {
        self.hello.get().is_some_and(|h| h.found.modern)
    }

    /// Sends `body`, a `method` request, under an id of the gateway's own; the call holds
    /// `place` until it ends. A client that takes the process's own requests during its call
    /// (`asks`) gets them when the process serves it alone (see [`Conn::dispatch`]).
    pub(super) fn send(
        self: &Arc<Self>,
        body: &[u8],
        method: &str,
        place: Option<Place>,
        asks: Option<ClientAsks>,
    ) -> Result<Call, Unsent> {
        let ours = format!("\"mrtr-{}\"", self.next_id.fetch_add(1, Ordering::Relaxed));
        // The handshake's own requests go as they are; after it, a legacy process's in legacy form.
        let legacy = !self.modern() && self.hello.get().is_some();
        let request = outgoing(body, &ours, legacy, true).ok_or(Unsent::NotJsonRpc)?;
        let (sender, messages) = mpsc::channel(CALL_QUEUE + 1);
        self.calls()
            .as_mut()
            .ok_or(Unsent::Gone)?
            .insert(ours.as_str().into(), sender);
        let guard = CallGuard {
            conn: self.clone(),
            ours: ours.as_str().into(),
            _place: place,
        };
        self.writer.try_send(request.body).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unsent::Stuck,
            mpsc::error::TrySendError::Closed(_) => Unsent::Gone,
        })?;
        let writer = self.writer.clone();
        let reply: Reply = Arc::new(move |message| {
            // A full or closed pipe: the process is stuck or gone, and learns nothing more.
            let _ = writer.try_send(message);
        });
        let theirs = request.id.as_deref().unwrap_or("null");
        let mut translation = Translation::new(&ours, theirs, reply)
            .for_method(method)
            .with_progress(request.progress)
            .with_asks(asks.filter(|_| self.alone));
        if self.modern() {
            translation = translation.modern();
        }
        Ok(Call {
            messages,
            translation,
            guard,
        })
    }

    /// Routes one line of the process's stdout.
    pub(super) fn dispatch(&self, backend: &str, line: String) {
        let Ok(message) = serde_json::from_str::<RawObject>(&line) else {
            if !line.trim().is_empty() {
                tracing::warn!(
                    backend,
                    "stdio backend wrote a line that is not a JSON-RPC message; dropped"
                );
            }
            return;
        };
        let id = message.get("id").map(RawValue::get).filter(|id| *id != "null");
        match (message.get("method"), id) {
            (None, Some(id)) => {
                match self.call(id, true) {
                    // The queue keeps a place for the response.
                    Some(call) => {
                        let _ = call.try_send(Relayed {
                            message: Bytes::from(line),
                            response: true,
                        });
                    }
                    None => tracing::debug!(backend, id, "stdio backend answered a call no one waits for"),
                }
            }
            (Some(method), Some(id)) => {
                let method: String = serde_json::from_str(method.get()).unwrap_or_default();
                // The call's translation answers it: with its client's answer, or with the error
                // an HTTP session's request gets when the client takes none.
                let answer = match self.call_asked(&method) {
                    Ok(call) => match call.try_send(Relayed {
                        message: Bytes::from(line),
                        response: false,
                    }) {
                        Ok(()) => return,
                        Err(_) => Unasked::Behind,
                    },
                    Err(unasked) => unasked,
                };
                let _ = self.writer.try_send(answer_process_request(id, &method, answer));
            }
            (Some(method), None) if method.get() == r#""notifications/progress""# => {
                let token = message
                    .get("params")
                    .and_then(|p| serde_json::from_str::<RawObject>(p.get()).ok())
                    .and_then(|p| p.get("progressToken").map(|t| t.get().to_owned()));
                let call = token.and_then(|t| self.call(&t, false));
                if let Some(call) = call
                    && call.capacity() > 1
                {
                    let _ = call.try_send(Relayed {
                        message: Bytes::from(line),
                        response: false,
                    });
                }
            }
            (Some(method), None) => {
                // A modern process names the listen a notification is for; a legacy one's
                // notifications of its own are the hub's to fan out.
                let listen = message
                    .get("params")
                    .and_then(|p| serde_json::from_str::<ListenMeta<'_>>(p.get()).ok())
                    .and_then(|p| p.meta?.subscription_id)
                    .and_then(|id| self.call(id.get(), false).map(|call| (id.get().to_owned(), call)));
                if let Some((ours, call)) = listen {
                    if call.capacity() > 1 {
                        let _ = call.try_send(Relayed {
                            message: Bytes::from(line),
                            response: false,
                        });
                    } else {
                        // A client that fell this far behind has its listen ended, with an error
                        // in the place kept for the response, rather than miss a change unaware
                        // (as for a legacy session's listens, `upstream/session/hub.rs`).
                        tracing::debug!(
                            backend,
                            "a listen's client fell behind its notifications; ending its stream"
                        );
                        self.call(&ours, true);
                        let message = "The client fell behind the listen's notifications";
                        let _ = call.try_send(Relayed {
                            message: jsonrpc::error_body(Some(&ours), INTERNAL_ERROR, message, None),
                            response: true,
                        });
                        // The process's side of the listen ends too (the translation, answered
                        // by this error, sends no cancellation of its own).
                        let cancelled = format!(
                            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{ours},"reason":"the client fell behind"}}}}"#
                        );
                        let _ = self.writer.try_send(Bytes::from(cancelled));
                    }
                } else if self.modern() || !self.hub.deliver(line.as_bytes()) {
                    tracing::debug!(backend, method = method.get(), message = %line, "stdio backend notification (not relayed)");
                }
            }
            (None, None) => {
                tracing::warn!(backend, message = %line, "stdio backend sent an error about no request");
            }
        }
    }

    /// Sends `body` (a `method` request), holding `place`, and waits up to `timeout` for the
    /// response, translated.
    pub(super) async fn request(
        self: &Arc<Self>,
        body: &[u8],
        method: &str,
        place: Option<Place>,
        timeout: Duration,
    ) -> Result<Answer, UpstreamError> {
        let mut call = self
            .send(body, method, place, None)
            .map_err(|unsent| match unsent {
                Unsent::NotJsonRpc => UpstreamError::Unreachable("not a JSON-RPC request".to_owned()),
                Unsent::Gone => exited(),
                Unsent::Stuck => stuck(),
            })?;
        let message = response(&mut call, timeout).await?;
        Ok(Answer {
            status: StatusCode::OK,
            message: Some(call.translation.one(message)),
        })
    }
}

/// Waits up to `timeout` for `call`'s response (its notifications skipped, the process's own
/// requests answered by its translation), as it came.
pub(super) async fn response(call: &mut Call, timeout: Duration) -> Result<Bytes, UpstreamError> {
    let wait = async {
        while let Some(relayed) = call.messages.recv().await {
            if relayed.response {
                return Ok(relayed.message);
            }
            call.translation.event(relayed.message);
        }
        Err(exited())
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| UpstreamError::Timeout)?
}

pub(super) fn exited() -> UpstreamError {
    UpstreamError::Unreachable("the process exited before answering".to_owned())
}

pub(super) fn stuck() -> UpstreamError {
    UpstreamError::Unreachable("the process does not read its input".to_owned())
}

/// Why a request of the process's own goes to no call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unasked {
    /// `ping`, which the gateway answers itself.
    Ping,
    /// The process serves every client.
    Shared,
    /// Its principal has this many calls in flight, not one.
    Calls(usize),
    /// The call's client has not read the messages queued for it.
    Behind,
}

/// The gateway's answer to a request the process sent that no call takes (`why`).
fn answer_process_request(id: &str, method: &str, why: Unasked) -> Bytes {
    let message = match why {
        Unasked::Ping => return Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)),
        Unasked::Shared => format!(
            "mrtr-gateway shares this stdio server among all its clients, so no one client can answer {method} (run it per principal; see docs/gateway.md, stdio backends)"
        ),
        Unasked::Calls(count) => format!(
            "mrtr-gateway cannot tell which call {method} is for: this stdio server's process has {count} calls in flight, not one (see docs/gateway.md, stdio backends)"
        ),
        Unasked::Behind => format!(
            "mrtr-gateway cannot pass {method} on: the call's client has not read what the server sent before"
        ),
    };
    jsonrpc::error_body(Some(id), METHOD_NOT_FOUND, &message, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's side with one listen waiting under `"mrtr-1"`, whose client reads nothing.
    fn listening() -> (Conn, mpsc::Receiver<Bytes>, mpsc::Receiver<Relayed>) {
        let (writer, written) = mpsc::channel(8);
        let (call, messages) = mpsc::channel(CALL_QUEUE + 1);
        let conn = Conn {
            writer,
            calls: Mutex::new(Some(HashMap::from([(Box::from(r#""mrtr-1""#), call)]))),
            next_id: AtomicU64::new(2),
            alone: false,
            hello: std::sync::OnceLock::new(),
            hub: Arc::default(),
        };
        (conn, written, messages)
    }

    /// The error message the process got for the request it wrote last.
    fn refusal(written: &mut mpsc::Receiver<Bytes>) -> String {
        let answer: Value = serde_json::from_slice(&written.try_recv().expect("an answer")).unwrap();
        assert_eq!(answer["id"], 9, "{answer}");
        answer["error"]["message"].as_str().unwrap_or_default().to_owned()
    }

    #[test]
    fn a_process_request_goes_to_the_one_call_of_a_principals_own_process_and_nowhere_else() {
        let asks = r#"{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{"message":"Name?"}}"#;
        // Shared by every client: no call is the request's.
        let (conn, mut written, mut messages) = listening();
        conn.dispatch("local", asks.to_owned());
        assert!(messages.try_recv().is_err());
        assert!(refusal(&mut written).contains("shares this stdio server"));

        // A principal's own process with its one call: the call's translation gets the request.
        let (mut conn, mut written, mut messages) = listening();
        conn.alone = true;
        conn.dispatch("local", asks.to_owned());
        let relayed = messages.try_recv().expect("the call's");
        assert!(!relayed.response && relayed.message == asks.as_bytes());
        assert!(written.try_recv().is_err(), "not answered by the gateway");
        // `ping` is the gateway's to answer, whoever is in flight.
        conn.dispatch("local", r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#.to_owned());
        let pong: Value = serde_json::from_slice(&written.try_recv().unwrap()).unwrap();
        assert_eq!(pong["result"], serde_json::json!({}));
        assert!(messages.try_recv().is_err());

        // A second call in flight: the request could be either's.
        let (other, _other_messages) = mpsc::channel(CALL_QUEUE + 1);
        conn.calls().as_mut().unwrap().insert(r#""mrtr-2""#.into(), other);
        conn.dispatch("local", asks.to_owned());
        assert!(messages.try_recv().is_err());
        assert!(refusal(&mut written).contains("2 calls in flight, not one"));

        // One call, whose client has not read its queue: the place kept for the response stays.
        conn.calls().as_mut().unwrap().remove(r#""mrtr-2""#);
        let call = conn.call(r#""mrtr-1""#, false).unwrap();
        while call.capacity() > 1 {
            call.try_send(Relayed {
                message: Bytes::from_static(b"{}"),
                response: false,
            })
            .unwrap();
        }
        conn.dispatch("local", asks.to_owned());
        assert!(refusal(&mut written).contains("has not read"));
        assert_eq!(call.capacity(), 1, "the response's place is left");
    }

    #[test]
    fn a_stdio_principal_holds_at_most_its_share_of_the_places_and_gives_them_back_on_drop() {
        let shares = Shares::new(NonZeroUsize::new(3).unwrap());
        // No principal yet (a gateway without a principal header): everyone is the same nobody,
        // with every place.
        let everyone: Vec<Share> = (0..MAX_IN_FLIGHT).map(|_| shares.take(None).unwrap()).collect();
        assert_eq!(shares.held(None), MAX_IN_FLIGHT);
        drop(everyone);
        let places = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let place = |share: Share| Place::new(places.clone().try_acquire_owned().unwrap(), Some(share));
        let mut alice: Vec<Place> = (0..3)
            .map(|_| place(shares.take(Some("alice")).expect("within alice's share")))
            .collect();
        assert_eq!(shares.held(Some("alice")), 3);
        assert!(
            shares.take(Some("alice")).is_none(),
            "a fourth is beyond her share"
        );
        assert_eq!(shares.held(Some("alice")), 3, "a refusal takes nothing");
        // Another principal, and (now that principals come) the requests without one, have
        // shares of their own.
        let bob = place(shares.take(Some("bob")).unwrap());
        let nobody: Vec<Share> = (0..3).map(|_| shares.take(None).unwrap()).collect();
        assert!(
            shares.take(None).is_none(),
            "no principal: one group, the same share"
        );
        assert_eq!((shares.held(Some("bob")), shares.held(None)), (1, 3));
        assert_eq!(places.available_permits(), MAX_IN_FLIGHT - 4);
        // A call that ends (answered, failed or its client gone) gives its place and its share
        // back: alice may call again.
        alice.pop();
        assert_eq!(shares.held(Some("alice")), 2);
        assert_eq!(places.available_permits(), MAX_IN_FLIGHT - 3);
        alice.push(place(shares.take(Some("alice")).unwrap()));
        drop((alice, bob, nobody));
        assert_eq!(places.available_permits(), MAX_IN_FLIGHT);
        assert_eq!(shares.holders(), 0, "principals holding nothing are forgotten");
        // A share is never more than the process's places.
        assert_eq!(Shares::new(NonZeroUsize::new(1000).unwrap()).max(), MAX_IN_FLIGHT);
        assert_eq!(DEFAULT_CALLS_PER_PRINCIPAL.get(), 16);
    }

    #[test]
    fn a_call_gives_its_place_and_share_back_when_its_guard_goes() {
        let (conn, mut written, _) = listening();
        let conn = Arc::new(conn);
        let shares = Shares::new(NonZeroUsize::new(1).unwrap());
        let places = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let place = Place::new(
            places.clone().try_acquire_owned().unwrap(),
            shares.take(Some("alice")),
        );
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}"#;
        let call = conn.send(body, "tools/call", Some(place), None).ok().unwrap();
        assert!(written.try_recv().is_ok(), "sent");
        assert!(shares.take(Some("alice")).is_none());
        assert_eq!(conn.calls().as_ref().map(HashMap::len), Some(2), "waited for");
        // The client goes away: the call's body, and with it its guard, is dropped.
        drop(call);
        assert_eq!(
            conn.calls().as_ref().map(HashMap::len),
            Some(1),
            "no longer waited for"
        );
        assert_eq!(places.available_permits(), MAX_IN_FLIGHT);
        assert!(shares.take(Some("alice")).is_some());
    }

    #[test]
    fn a_listen_whose_client_falls_behind_is_ended_with_an_error_and_cancelled() {
        let (conn, mut written, mut messages) = listening();
        let change = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"mrtr-1"}}}"#;
        for _ in 0..CALL_QUEUE + 1 {
            conn.dispatch("local", change.to_owned());
        }
        let relayed: Vec<Relayed> = std::iter::from_fn(|| messages.try_recv().ok()).collect();
        assert_eq!(
            relayed.len(),
            CALL_QUEUE + 1,
            "the queue, then the response's place"
        );
        assert!(relayed[..CALL_QUEUE].iter().all(|r| !r.response));
        let last = relayed.last().unwrap();
        let error: Value = serde_json::from_slice(&last.message).unwrap();
        assert!(
            last.response
                && error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("fell behind")
        );
        assert!(conn.call(r#""mrtr-1""#, false).is_none(), "no longer waited for");
        let cancelled: Value = serde_json::from_slice(&written.try_recv().unwrap()).unwrap();
        assert_eq!(
            (cancelled["method"].as_str(), &cancelled["params"]["requestId"]),
            (Some("notifications/cancelled"), &Value::from("mrtr-1"))
        );
        // Later notifications of the ended listen go nowhere.
        conn.dispatch("local", change.to_owned());
        assert!(messages.try_recv().is_err());
    }
}
