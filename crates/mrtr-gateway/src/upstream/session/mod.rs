//! `initialize`-era backends (Streamable HTTP, 2025-03-26 to 2025-11-25) spoken to in their own
//! era on behalf of 2026-07-28 clients ([`LegacyBackends`]).
//!
//! Such a backend needs a session (`initialize`, `notifications/initialized`, then
//! `Mcp-Session-Id` on every request), and keeps per-session state (log level, roots,
//! subscriptions, data of its own). So each replica keeps, per backend, a pool of sessions
//! **keyed by the principal** (the `--principal-header` value) **and the capabilities declared**
//! (none, for a 2026-07-28 client's requests; a legacy client's own, for its requests through the
//! legacy front, whose backend requests then reach it: `upstream/translate.rs`): no session, and
//! nothing a server keeps in one, is ever shared by two principals. A session is a
//! connection-like resource, not client state: any replica opens its own, and losing one costs a
//! new `initialize`, never a client's request.
//!
//! * **Opening**: on the first request of a key; concurrent requests wait for the same
//!   `initialize`. The revision is the newest the backend accepts of 2025-11-25, 2025-06-18 and
//!   2025-03-26.
//! * **Requests** go in legacy form: an id of the gateway's own, unique in the session (clients
//!   sharing it choose their ids freely), the `io.modelcontextprotocol/*` members of
//!   `params._meta` removed, `Mcp-Session-Id` and the negotiated `MCP-Protocol-Version` set, the
//!   2026-07-28 headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) removed. Answers come back in
//!   modern form (`upstream/translate.rs`). `server/discover` is answered from the session's
//!   `initialize` result.
//! * **`subscriptions/listen`** is served from the session's `GET` stream, one per session
//!   however many listen, through a hub that fans its notifications out and counts
//!   `resources/subscribe` (`upstream/hub.rs`); the session is kept open while a listen uses it.
//! * **A session the backend forgot** (it answers `404`, as the transport specification says it
//!   must for an unknown session, or a `400` whose error names the session, as the TypeScript
//!   SDK 1.x does; either without processing the request) is opened again and the request sent
//!   once more.
//! * **Bounds**: at most [`MAX_SESSIONS`] per backend, and [`MAX_SESSIONS_PER_PRINCIPAL`] per
//!   principal and backend; when full, the session idle longest (of the principal's, for its
//!   bound) is closed for a new key, and a request finding every such session busy is refused. A session idle
//!   for [`IDLE_TIMEOUT`] is closed (`DELETE`) by the health probe's round.
//!
//! With no principal configured every client has the same key, so all clients share each
//! backend's session (`docs/gateway.md` says so).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::Either;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tower_mrtr::Route;

use super::body::{BackendBody, ProxyBody, accepted, json};
use super::era::{LEGACY_VERSIONS, MODERN_VERSION};
use super::forward::{Answer, ForwardError, Forwarder, mcp_method};
use super::hub::{self, Hub, Offers, Subscriber};
use super::sse::{EventReader, is_sse};
use super::translate::{ClientAsks, Reply, Translation, answer_backend_request, outgoing};
use super::{Backend, DEFAULT_STALL_TIMEOUT};
use crate::jsonrpc::{self, INTERNAL_ERROR, METHOD_NOT_FOUND};

/// Most sessions kept per backend (one per principal and set of capabilities).
pub(crate) const MAX_SESSIONS: usize = 1024;

/// Most sessions one principal has with one backend (one per set of capabilities its legacy
/// clients declare, and its 2026-07-28 clients' one).
pub(crate) const MAX_SESSIONS_PER_PRINCIPAL: usize = 16;

/// How long a session may go unused before the gateway closes it.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The sessions the gateway keeps with `initialize`-era backends; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct LegacyBackends {
    pools: Vec<(Route, Pool)>,
}

/// One backend's sessions.
#[derive(Debug, Default)]
struct Pool {
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
}

/// What a session is for: no two principals, and no two sets of declared capabilities, share one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    principal: Option<Box<str>>,
    /// The capabilities `initialize` declares (raw JSON); `{}` for a 2026-07-28 client.
    capabilities: Box<str>,
}

#[derive(Debug)]
struct Slot {
    session: OnceCell<Session>,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The session's `GET` stream, while a listen uses it.
    notifications: tokio::sync::Mutex<Weak<Notifications>>,
}

/// A session's `GET` stream, read into the hub of its listens (`upstream/hub.rs`): one per
/// session however many listen, since the backend sends each message on one stream only. Every
/// listen's stream holds it; the last one to end closes the `GET` stream, and the session goes
/// back to being idle (its lease is held until then, so it is not closed under a listen).
#[derive(Debug)]
struct Notifications {
    hub: Arc<Hub>,
    reader: tokio::task::JoinHandle<()>,
    _lease: Lease,
}

impl Drop for Notifications {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// An open session.
#[derive(Debug)]
struct Session {
    /// `None` for a backend that gave no `Mcp-Session-Id` (a stateless legacy server).
    id: Option<HeaderValue>,
    version: String,
    /// A `server/discover` result made from the `initialize` result.
    discover: Value,
    next_id: AtomicU64,
}

impl Session {
    /// A fresh request id of the gateway's own in this session, as raw JSON.
    fn next_id(&self) -> String {
        format!("\"mrtr-{}\"", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a backend answered a request sent in a session.
enum Answered {
    /// The answer, as it streams.
    Streaming(Response<Incoming>),
    /// A refusal, read whole to tell a forgotten session from other errors.
    Read(Answer),
    /// Nothing: the request could not be put in legacy form (not a JSON-RPC object with
    /// object `params`).
    NotLegacy,
}

fn no_session() -> ForwardError {
    ForwardError::Unreachable("no session".to_owned())
}

/// A session in use by one request: counted as busy until dropped.
#[derive(Debug)]
struct Lease {
    slot: Arc<Slot>,
}

impl Lease {
    fn new(slot: Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::SeqCst);
        Self { slot }
    }

    fn session(&self) -> Option<&Session> {
        self.slot.session.get()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.slot.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.slot.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LegacyBackends {
    /// Empty pools for `backends`: sessions keyed by the principal each request is relayed for.
    pub(crate) fn new(backends: &[Backend]) -> Self {
        Self {
            pools: backends
                .iter()
                .map(|b| (b.route().clone(), Pool::default()))
                .collect(),
        }
    }

    /// Whether `backend` is spoken to in the `initialize` era: configured so, or found so by the
    /// last probe.
    pub(crate) fn speaks_legacy(backend: &Backend) -> bool {
        backend.era() == super::era::Era::Legacy || backend.health().is_legacy()
    }

    fn pool(&self, backend: &Backend) -> Option<&Pool> {
        self.pools
            .iter()
            .find(|(route, _)| route == backend.route())
            .map(|(_, pool)| pool)
    }

    /// The session key of a request: its principal (as the route read it, the one way every
    /// principal is read), and the capabilities of its client when it takes the backend's
    /// requests (a legacy client's, `asks`), else none.
    fn key(principal: Option<&str>, asks: Option<&ClientAsks>) -> Key {
        Key {
            principal: principal.map(Box::from),
            capabilities: asks.map_or_else(|| "{}".into(), |a| a.capabilities.as_ref().into()),
        }
    }

    /// A request of a 2026-07-28 client (its `headers` and `body`, the request's `id` as raw
    /// JSON) relayed to `backend` in the session of its `principal` (and `asks`); the answer
    /// streams back translated.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn relay(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        headers: HeaderMap,
        id: Option<&str>,
        body: Bytes,
        principal: Option<&str>,
        asks: Option<&ClientAsks>,
    ) -> Result<Response<ProxyBody>, ForwardError> {
        let method = mcp_method(&headers);
        let Some(id) = id else {
            // 2026-07-28 has no client notification over HTTP that a legacy backend should get.
            return Ok(accepted());
        };
        if method == "subscriptions/listen" {
            let key = Self::key(principal, asks);
            return self.listen(forwarder, backend, &headers, id, &body, &key).await;
        }
        if method == "server/discover" {
            let result = self
                .discover(forwarder, backend, &headers, &Self::key(principal, asks))
                .await?;
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
            return Ok(json(StatusCode::OK, Bytes::from(body)));
        }
        let (lease, ours, answered) = self
            .send_in_session(forwarder, backend, &headers, &body, &Self::key(principal, asks))
            .await?;
        let answer = match answered {
            Answered::Streaming(response) => Ok(response),
            Answered::Read(answer) => Err(answer),
            // Nothing went out: nothing to translate, nothing to cancel.
            Answered::NotLegacy => {
                return Ok(json(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::error_body(
                        Some(id),
                        INTERNAL_ERROR,
                        "The request could not be put in legacy form",
                        None,
                    ),
                ));
            }
        };
        let reply = reply_sink(forwarder.clone(), backend.clone(), lease);
        let mut translation = Translation::new(&ours, id, reply)
            .for_method(method)
            .with_asks(asks.cloned());
        match answer {
            Err(answer) => {
                let message = answer.message.unwrap_or_default();
                Ok(json(answer.status, translation.one(message)))
            }
            Ok(response) => {
                let sse = is_sse(response.headers());
                let (mut parts, body) = response.into_parts();
                // The translated body has another length.
                parts.headers.remove(header::CONTENT_LENGTH);
                let body = BackendBody::new(
                    body,
                    backend.stall_timeout().unwrap_or(DEFAULT_STALL_TIMEOUT),
                    sse,
                    Some(id),
                    backend.route(),
                )
                .translated(translation);
                Ok(Response::from_parts(parts, Either::Left(body)))
            }
        }
    }

    /// A `subscriptions/listen`, served in the key's session from its `GET` stream, with
    /// `resources/subscribe` for the resources it asks for (`upstream/hub.rs`).
    async fn listen(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        headers: &HeaderMap,
        id: &str,
        body: &Bytes,
        key: &Key,
    ) -> Result<Response<ProxyBody>, ForwardError> {
        let lease = self.lease(forwarder, backend, key, headers).await?;
        let session = lease.session().ok_or_else(no_session)?;
        let (Some(session_id), version) = (session.id.clone(), session.version.clone()) else {
            // A backend without sessions has no stream to send notifications on.
            return Ok(no_stream(backend, id));
        };
        let offers = Offers::of_discover(&session.discover);
        let identity = identity_headers(headers);
        let notifications = {
            let mut held = lease.slot.notifications.lock().await;
            match held.upgrade().filter(|n| !n.hub.is_closed()) {
                Some(notifications) => notifications,
                None => {
                    let stream = forwarder
                        .legacy_stream(backend, identity.clone(), &version, &session_id)
                        .await?;
                    if stream.status() != StatusCode::OK || !is_sse(stream.headers()) {
                        tracing::debug!(backend = backend.name(), status = %stream.status(), "no GET stream for a listen");
                        return Ok(no_stream(backend, id));
                    }
                    let hub = Arc::new(Hub::default());
                    let reply =
                        reply_sink(forwarder.clone(), backend.clone(), Lease::new(lease.slot.clone()));
                    let reader = tokio::spawn(read_stream(stream.into_body(), hub.clone(), reply));
                    let notifications = Arc::new(Notifications {
                        hub,
                        reader,
                        _lease: Lease::new(lease.slot.clone()),
                    });
                    *held = Arc::downgrade(&notifications);
                    notifications
                }
            }
        };
        let subscriber: Subscriber = {
            let (forwarder, backend, slot) = (forwarder.clone(), backend.clone(), lease.slot.clone());
            Arc::new(move |method, uri| {
                let (forwarder, backend) = (forwarder.clone(), backend.clone());
                let (identity, version, session_id) = (identity.clone(), version.clone(), session_id.clone());
                // Under an id of the session's, as every request in it.
                let id = slot.session.get().map(Session::next_id);
                Box::pin(async move {
                    let Some(id) = id else { return false };
                    let uri = Value::String(uri);
                    let request = format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"uri":{uri}}}}}"#
                    );
                    let answer = forwarder
                        .legacy_exchange(
                            &backend,
                            identity,
                            Some(&version),
                            Some(&session_id),
                            Bytes::from(request),
                        )
                        .await;
                    answer.is_ok_and(|(a, _)| a.result().is_some())
                })
            })
        };
        let hub = notifications.hub.clone();
        Ok(hub::listen(&hub, offers, id, body, subscriber, Box::new(notifications)).await)
    }

    /// A read-only request of the gateway's own or a client's list (as
    /// [`Forwarder::exchange`]), in the session of its `principal` (and `asks`).
    pub(crate) async fn exchange(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        headers: &HeaderMap,
        body: Bytes,
        principal: Option<&str>,
        asks: Option<&ClientAsks>,
    ) -> Result<Answer, ForwardError> {
        let key = Self::key(principal, asks);
        if mcp_method(headers) == "server/discover" {
            let result = self.discover(forwarder, backend, headers, &key).await?;
            let message = format!(r#"{{"jsonrpc":"2.0","id":"mrtr-gateway","result":{result}}}"#);
            return Ok(Answer {
                status: StatusCode::OK,
                message: Some(Bytes::from(message)),
            });
        }
        match self
            .send_in_session(forwarder, backend, headers, &body, &key)
            .await?
            .2
        {
            Answered::Streaming(response) => forwarder.read_answer(backend, response).await,
            Answered::Read(answer) => Ok(answer),
            Answered::NotLegacy => Err(ForwardError::Unreachable(
                "a request not in legacy form".to_owned(),
            )),
        }
    }

    /// The `server/discover` result made from the key's session's `initialize` result.
    async fn discover(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        headers: &HeaderMap,
        key: &Key,
    ) -> Result<String, ForwardError> {
        let lease = self.lease(forwarder, backend, key, headers).await?;
        let session = lease.session().ok_or_else(no_session)?;
        Ok(session.discover.to_string())
    }

    /// `body`, a 2026-07-28 request, sent in legacy form in the key's session with `backend`
    /// (opened if needed), and once more in a new session when the backend forgot the first.
    /// Returns the session's lease, the request's id in it and the answer.
    async fn send_in_session(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        headers: &HeaderMap,
        body: &Bytes,
        key: &Key,
    ) -> Result<(Lease, String, Answered), ForwardError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let lease = self.lease(forwarder, backend, key, headers).await?;
            let session = lease.session().ok_or_else(no_session)?;
            let ours = session.next_id();
            let Some(legacy) = outgoing(body, &ours, true, false) else {
                return Ok((lease, ours, Answered::NotLegacy));
            };
            let (response, _) = forwarder
                .send(
                    backend,
                    Method::POST,
                    legacy_headers(headers.clone(), &session.version),
                    legacy.body,
                    session.id.as_ref(),
                )
                .await?;
            if session.id.is_none() || !may_be_forgotten(response.status()) {
                return Ok((lease, ours, Answered::Streaming(response)));
            }
            // Read the (small) refusal to tell a forgotten session from any other error.
            let answer = forwarder.read_answer(backend, response).await?;
            if attempt == 1 && forgotten(&answer, &ours) {
                tracing::info!(
                    backend = backend.name(),
                    "the backend forgot its session; opening another"
                );
                self.forget(backend, &lease);
                continue;
            }
            return Ok((lease, ours, Answered::Read(answer)));
        }
    }

    /// The key's session with `backend`, opened if there is none yet.
    async fn lease(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        key: &Key,
        headers: &HeaderMap,
    ) -> Result<Lease, ForwardError> {
        let pool = self
            .pool(backend)
            .ok_or_else(|| ForwardError::Unreachable("not a configured backend".to_owned()))?;
        let (lease, evicted) = {
            let mut slots = pool.slots.lock().unwrap_or_else(|e| e.into_inner());
            let mut evicted = None;
            if !slots.contains_key(key) {
                // A principal's sessions (one per set of capabilities its clients declare) are
                // bounded apart, so that one principal cannot take the backend's whole pool.
                let principal = key.principal.as_ref();
                let theirs = principal.map_or(0, |_| {
                    slots.keys().filter(|k| k.principal.as_ref() == principal).count()
                });
                let principal_full = theirs >= MAX_SESSIONS_PER_PRINCIPAL;
                if principal_full || slots.len() >= MAX_SESSIONS {
                    let idle = slots
                        .iter()
                        .filter(|(k, s)| {
                            s.in_flight.load(Ordering::SeqCst) == 0
                                && (!principal_full || k.principal.as_ref() == principal)
                        })
                        .min_by_key(|(_, s)| *s.last_used.lock().unwrap_or_else(|e| e.into_inner()))
                        .map(|(k, _)| k.clone());
                    let Some(idle) = idle else {
                        let message = if principal_full {
                            format!(
                                "all {MAX_SESSIONS_PER_PRINCIPAL} of this principal's sessions with this backend are busy"
                            )
                        } else {
                            format!("all {MAX_SESSIONS} sessions with this backend are busy")
                        };
                        return Err(ForwardError::Unreachable(message));
                    };
                    evicted = slots.remove(&idle);
                }
            }
            let slot = slots
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Slot {
                        session: OnceCell::new(),
                        in_flight: AtomicUsize::new(0),
                        last_used: Mutex::new(Instant::now()),
                        notifications: tokio::sync::Mutex::new(Weak::new()),
                    })
                })
                .clone();
            (Lease::new(slot), evicted)
        };
        if let Some(slot) = evicted {
            close(forwarder, backend, &slot).await;
        }
        lease
            .slot
            .session
            .get_or_try_init(|| open(forwarder, backend, key, headers))
            .await?;
        Ok(lease)
    }

    /// Drops `lease`'s session from the pool (the backend forgot it), unless another request
    /// already replaced it.
    fn forget(&self, backend: &Backend, lease: &Lease) {
        if let Some(pool) = self.pool(backend) {
            let mut slots = pool.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.retain(|_, slot| !Arc::ptr_eq(slot, &lease.slot));
        }
    }

    /// Closes every session idle for `idle` or longer: each round of the health probe, and
    /// every idle one (`Duration::ZERO`) when the gateway stops.
    pub(crate) async fn sweep(&self, forwarder: &Forwarder, backends: &[Backend], idle: Duration) {
        for backend in backends {
            let Some(pool) = self.pool(backend) else { continue };
            let expired: Vec<Arc<Slot>> = {
                let mut slots = pool.slots.lock().unwrap_or_else(|e| e.into_inner());
                let keys: Vec<Key> = slots
                    .iter()
                    .filter(|(_, s)| {
                        s.in_flight.load(Ordering::SeqCst) == 0
                            && s.last_used.lock().unwrap_or_else(|e| e.into_inner()).elapsed() >= idle
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                keys.iter().filter_map(|k| slots.remove(k)).collect()
            };
            for slot in expired {
                close(forwarder, backend, &slot).await;
            }
        }
    }
}

/// Whether an answer with `status` may be a backend's refusal of a session it does not know.
fn may_be_forgotten(status: StatusCode) -> bool {
    matches!(status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST)
}

/// Whether `answer` refuses the request `ours` (its id, raw JSON) for its session, unprocessed:
/// `404` (what the transport specification prescribes for an unknown session), or a `400` whose
/// JSON-RPC error names the session (the TypeScript SDK 1.x's servers, server-everything among
/// them, answer "Bad Request: No valid session ID provided" after a restart). An answer to the
/// request itself, under its own id, is never such a refusal whatever its status: the backend
/// read the request, and may have run it, so it must not be sent again.
fn forgotten(answer: &Answer, ours: &str) -> bool {
    let message = answer
        .message
        .as_ref()
        .and_then(|m| serde_json::from_slice::<Value>(m).ok());
    let answered = message
        .as_ref()
        .and_then(|m| m.get("id"))
        .is_some_and(|id| serde_json::from_str::<Value>(ours).is_ok_and(|ours| *id == ours));
    if answered {
        return false;
    }
    match answer.status {
        StatusCode::NOT_FOUND => true,
        StatusCode::BAD_REQUEST => message
            .as_ref()
            .and_then(|m| m.pointer("/error/message").and_then(Value::as_str))
            .is_some_and(|message| message.to_ascii_lowercase().contains("session")),
        _ => false,
    }
}

/// Ends `slot`'s session, if it was opened and named.
async fn close(forwarder: &Forwarder, backend: &Backend, slot: &Slot) {
    if let Some(Session {
        id: Some(id),
        version,
        ..
    }) = slot.session.get()
    {
        forwarder.legacy_close(backend, version, id.clone()).await;
    }
}

/// What identifies the client to the backend (the principal header, trace context), for the
/// gateway's own requests in its session (the handshake, the `GET` stream, subscriptions); the
/// forwarder drops credentials and hop-by-hop headers.
fn identity_headers(client_headers: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in client_headers {
        if !name.as_str().starts_with("mcp-") && !matches!(*name, header::CONTENT_TYPE | header::ACCEPT) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// The refusal of a listen by a backend that has no stream for its notifications.
fn no_stream(backend: &Backend, id: &str) -> Response<ProxyBody> {
    let message = format!(
        "The initialize-era backend {:?} offers no stream for its notifications",
        backend.name()
    );
    json(
        StatusCode::NOT_FOUND,
        jsonrpc::error_body(Some(id), METHOD_NOT_FOUND, &message, None),
    )
}

/// Reads a session's `GET` stream into `hub` until it ends; the backend's requests on it are
/// answered through `reply` (`ping`; the others refused, as no one client owns the stream).
async fn read_stream(mut body: Incoming, hub: Arc<Hub>, reply: Reply) {
    use http_body_util::BodyExt;
    let mut events = EventReader::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else { continue };
        events.push(&data);
        while let Some(event) = events.next_event() {
            if hub.deliver(&event) {
                continue;
            }
            if let Ok(request) = serde_json::from_slice::<Value>(&event)
                && let (Some(method), Some(id)) = (request["method"].as_str(), request.get("id"))
            {
                reply(answer_backend_request(&id.to_string(), method));
            }
        }
        if events.held() > super::forward::MAX_MERGED_ANSWER {
            break;
        }
    }
    hub.close("The backend's notification stream ended");
}

/// `initialize` and `notifications/initialized` for `key`, with the client's principal header.
async fn open(
    forwarder: &Forwarder,
    backend: &Backend,
    key: &Key,
    client_headers: &HeaderMap,
) -> Result<Session, ForwardError> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"mrtr-init","method":"initialize","params":{{"protocolVersion":"{}","capabilities":{},"clientInfo":{{"name":"mrtr-gateway","version":"{}"}}}}}}"#,
        LEGACY_VERSIONS[0],
        key.capabilities,
        env!("CARGO_PKG_VERSION")
    );
    let headers = identity_headers(client_headers);
    let (answer, id) = forwarder
        .legacy_exchange(backend, headers.clone(), None, None, Bytes::from(body))
        .await?;
    let result: Option<Value> = answer.result().and_then(|r| serde_json::from_str(r.get()).ok());
    let Some(result) = result else {
        return Err(ForwardError::Unreachable(format!(
            "initialize got no result (HTTP {})",
            answer.status
        )));
    };
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !LEGACY_VERSIONS.contains(&version) {
        return Err(ForwardError::Unreachable(format!(
            "initialize answered protocol version {version:?}, which the gateway does not speak"
        )));
    }
    let initialized = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let (done, _) = forwarder
        .legacy_exchange(backend, headers, Some(version), id.as_ref(), initialized)
        .await?;
    if !done.status.is_success() {
        return Err(ForwardError::Unreachable(format!(
            "notifications/initialized got HTTP {}",
            done.status
        )));
    }
    tracing::debug!(
        backend = backend.name(),
        version,
        session = id.is_some(),
        "legacy session opened"
    );
    Ok(Session {
        id,
        version: version.to_owned(),
        discover: discover_result(&result),
        next_id: AtomicU64::new(1),
    })
}

/// A `server/discover` result for a 2026-07-28 client from an `initialize` result: the features
/// the backend offers, with the list changes and resource subscriptions it announces (which a
/// `subscriptions/listen` gets through `upstream/hub.rs`), without `logging` (per request in
/// 2026-07-28).
pub(crate) fn discover_result(initialize: &Value) -> Value {
    let mut capabilities = serde_json::Map::new();
    for feature in ["tools", "prompts", "resources", "completions"] {
        let offered = &initialize["capabilities"][feature];
        if offered.is_object() {
            let mut kept = serde_json::Map::new();
            for flag in ["listChanged", "subscribe"] {
                if offered[flag] == true && (flag == "listChanged" || feature == "resources") {
                    kept.insert(flag.to_owned(), Value::Bool(true));
                }
            }
            capabilities.insert(feature.to_owned(), Value::Object(kept));
        }
    }
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [MODERN_VERSION],
        "capabilities": capabilities,
        "serverInfo": initialize["serverInfo"],
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(instructions) = initialize["instructions"].as_str() {
        result["instructions"] = json!(instructions);
    }
    result
}

/// The client's headers for a legacy backend: the 2026-07-28 ones removed, the negotiated
/// version set (the forwarder adds the session and filters the rest).
fn legacy_headers(mut headers: HeaderMap, version: &str) -> HeaderMap {
    let modern: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name == "mcp-method" || name == "mcp-name" || name.starts_with("mcp-param-")
        })
        .cloned()
        .collect();
    for name in modern {
        headers.remove(name);
    }
    if let Ok(version) = HeaderValue::from_str(version) {
        headers.insert("mcp-protocol-version", version);
    }
    headers
}

/// Answers into `lease`'s session in the background, holding the lease until the translation
/// that uses it is dropped.
fn reply_sink(forwarder: Forwarder, backend: Backend, lease: Lease) -> Reply {
    let lease = Arc::new(lease);
    Arc::new(move |message: Bytes| {
        let (forwarder, backend, lease) = (forwarder.clone(), backend.clone(), lease.clone());
        let Some(session) = lease.session() else { return };
        let (version, id) = (session.version.clone(), session.id.clone());
        // A translation dropped as the runtime shuts down has no one to send with.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let sent = forwarder
                .legacy_exchange(&backend, HeaderMap::new(), Some(&version), id.as_ref(), message)
                .await;
            if let Err(error) = sent {
                tracing::debug!(backend = backend.name(), %error, "answering a legacy backend's message failed");
            }
            drop(lease);
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_headers_go_and_the_negotiated_version_is_set() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
            ("mcp-param-region", "eu"),
            ("mcp-protocol-version", "2026-07-28"),
            ("x-user", "alice"),
        ] {
            headers.insert(k, v.parse().unwrap());
        }
        let headers = legacy_headers(headers, "2025-06-18");
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["mcp-protocol-version", "x-user"]);
        assert_eq!(headers["mcp-protocol-version"], "2025-06-18");
    }

    #[test]
    fn discovery_offers_the_features_and_their_notifications_without_logging() {
        let initialize = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": { "listChanged": true }, "resources": { "subscribe": true, "x": 1 },
                "prompts": { "subscribe": true }, "logging": {} },
            "serverInfo": { "name": "everything", "version": "2.0.0" },
            "instructions": "be kind"
        });
        let result = discover_result(&initialize);
        assert_eq!(
            result["capabilities"],
            json!({ "tools": { "listChanged": true }, "resources": { "subscribe": true }, "prompts": {} })
        );
        assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(result["serverInfo"]["name"], "everything");
        assert_eq!(result["instructions"], "be kind");
    }

    #[test]
    fn a_forgotten_session_is_told_from_other_refusals() {
        let answer = |status: u16, message: &str| Answer {
            status: StatusCode::from_u16(status).unwrap(),
            message: Some(Bytes::copy_from_slice(message.as_bytes())),
        };
        let ours = r#""mrtr-1""#;
        let no_session = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
        assert!(forgotten(&answer(400, no_session), ours));
        let not_found =
            r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}"#;
        assert!(forgotten(&answer(404, not_found), ours));
        assert!(forgotten(&answer(404, ""), ours));
        let invalid =
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid arguments"},"id":"mrtr-1"}"#;
        assert!(!forgotten(&answer(400, invalid), ours));
        assert!(!forgotten(&answer(200, no_session), ours));
        // The request's own answer, whatever it says: the backend read it, and may have run it.
        let answered =
            r#"{"jsonrpc":"2.0","error":{"code":-32002,"message":"Resource not found"},"id":"mrtr-1"}"#;
        assert!(!forgotten(&answer(404, answered), ours));
        let named =
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"no session named prod"},"id":"mrtr-1"}"#;
        assert!(!forgotten(&answer(400, named), ours));
    }

    #[tokio::test]
    async fn one_principal_has_at_most_its_share_of_a_backends_sessions() {
        // Nothing listens there: each session fails to open, but its place is taken (and given
        // up by eviction) as for one that opened.
        let backend = Backend::new("old", "http://127.0.0.1:1/mcp").unwrap();
        let forwarder = Forwarder::new(std::slice::from_ref(&backend), Duration::from_secs(5));
        let legacy = LegacyBackends::new(std::slice::from_ref(&backend));
        let key = |user: &str, n: usize| Key {
            principal: Some(user.into()),
            capabilities: format!(r#"{{"n":{n}}}"#).into(),
        };
        let count = |user: &str| {
            let slots = legacy.pool(&backend).unwrap().slots.lock().unwrap();
            slots
                .keys()
                .filter(|k| k.principal.as_deref() == Some(user))
                .count()
        };
        for n in 0..MAX_SESSIONS_PER_PRINCIPAL + 4 {
            let _ = legacy
                .lease(&forwarder, &backend, &key("alice", n), &HeaderMap::new())
                .await;
        }
        assert_eq!(
            count("alice"),
            MAX_SESSIONS_PER_PRINCIPAL,
            "her idlest made room for her newest"
        );
        let _ = legacy
            .lease(&forwarder, &backend, &key("bob", 0), &HeaderMap::new())
            .await;
        assert_eq!(
            (count("alice"), count("bob")),
            (MAX_SESSIONS_PER_PRINCIPAL, 1),
            "bob's is not hers to take"
        );
    }

    #[test]
    fn sessions_are_keyed_by_principal() {
        let key = LegacyBackends::key;
        assert_ne!(key(Some("alice"), None), key(Some("bob"), None));
        assert_eq!(key(Some("alice"), None), key(Some("alice"), None));
        assert_ne!(
            key(Some("alice"), None),
            key(None, None),
            "a principal never shares the key of requests without one"
        );
        let (asks, _) = tokio::sync::mpsc::channel(1);
        let legacy_client = ClientAsks {
            capabilities: r#"{"elicitation":{}}"#.into(),
            asks,
        };
        assert_ne!(
            key(Some("alice"), Some(&legacy_client)),
            key(Some("alice"), None),
            "a legacy client's capabilities get a session of their own"
        );
    }
}
