//! `initialize`-era backends (Streamable HTTP, 2025-03-26 to 2025-11-25) spoken to in their own
//! era on behalf of 2026-07-28 clients ([`Sessions`]).
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
//!   `resources/subscribe` (`upstream/session/hub.rs`); the session is kept open while a listen uses it.
//! * **A session the backend forgot** (it answers `404`, as the transport specification says it
//!   must for an unknown session, or a `400` whose error names the session, as the TypeScript
//!   SDK 1.x does; either without processing the request) is opened again and the request sent
//!   once more.
//! * **Bounds**: at most [`MAX_SESSIONS`](pool::MAX_SESSIONS) per backend, and [`MAX_SESSIONS_PER_PRINCIPAL`](pool::MAX_SESSIONS_PER_PRINCIPAL) per
//!   principal and backend; when full, the session idle longest (of the principal's, for its
//!   bound) is closed for a new key, and a request finding every such session busy is refused. A session idle
//!   for [`IDLE_TIMEOUT`] is closed (`DELETE`) by the health probe's round.
//!
//! With no principal configured every client has the same key, so all clients share each
//! backend's session (`docs/gateway.md` says so).
//!
//! The room, lowest first, each file importing only below it: `wire.rs` (a session's messages
//! on the wire, and a forgotten session told from an answer), `pool.rs` (one backend's sessions:
//! keys, leases, the handshake, bounds), `notify.rs` (listens served from a session's `GET`
//! stream), `probe.rs` (the health probe of an HTTP backend: its era); this file, what the seam
//! (`upstream/mod.rs`) calls.

pub(crate) mod hub;
mod notify;
mod pool;
pub(crate) mod probe;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, Response, StatusCode};
use http_body_util::Either;
use hyper::body::Incoming;
use tower_mrtr::Route;
use tower_mrtr::error::INTERNAL_ERROR;
use tower_mrtr::mcp_headers::MCP_METHOD;

use self::pool::{Key, Lease, Pool, reply_sink};
use super::answer::{Answer, UpstreamError, mcp_method};
use super::backend::{Backend, DEFAULT_STALL_TIMEOUT};
use super::http::body::{BackendBody, ProxyBody, accepted, json};
use super::http::forward::Forwarder;
use super::sse::is_sse;
use super::translate::{ClientAsks, Translation, outgoing};
use crate::jsonrpc;
use crate::observe::metrics::MethodLabel;

/// Whom a request is relayed for, as far as a backend's session or process depends on it: the
/// principal (read once, by the router, the way every principal is read) and, for a legacy
/// client's request through the legacy front, the capabilities that client declared (so that
/// the backend's own requests reach it).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Client<'a> {
    pub(crate) principal: Option<&'a str>,
    pub(crate) asks: Option<&'a ClientAsks>,
}

/// How long a session may go unused before the gateway closes it.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The sessions the gateway keeps with `initialize`-era backends, over its forwarder's
/// connections; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Sessions {
    forwarder: Forwarder,
    /// Shared with the sessions of the next configuration for a backend a reload kept.
    pools: Vec<(Route, Arc<Pool>)>,
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

fn no_session() -> UpstreamError {
    UpstreamError::Unreachable("no session".to_owned())
}

impl Sessions {
    /// Pools for `backends`, over `forwarder`'s connections: sessions keyed by the principal
    /// each request is relayed for; `previous`'s sessions are kept for the backends `kept` names
    /// (a config reload), the others start empty.
    pub(crate) fn carrying(
        previous: Option<&Self>,
        backends: &[Backend],
        kept: &dyn Fn(&Backend) -> bool,
        forwarder: Forwarder,
    ) -> Self {
        let old = |backend: &Backend| {
            let previous = previous.filter(|_| kept(backend))?;
            previous
                .pools
                .iter()
                .find(|(route, _)| route == backend.route())
                .map(|(_, pool)| pool.clone())
        };
        Self {
            forwarder,
            pools: backends
                .iter()
                .map(|b| (b.route().clone(), old(b).unwrap_or_default()))
                .collect(),
        }
    }

    fn pool(&self, backend: &Backend) -> Option<&Pool> {
        self.pools
            .iter()
            .find(|(route, _)| route == backend.route())
            .map(|(_, pool)| &**pool)
    }

    /// The key's session with `backend`, opened if there is none yet.
    async fn lease(&self, backend: &Backend, key: &Key, headers: &HeaderMap) -> Result<Lease, UpstreamError> {
        let pool = self
            .pool(backend)
            .ok_or_else(|| UpstreamError::Unreachable("not a configured backend".to_owned()))?;
        pool.lease(&self.forwarder, backend, key, headers).await
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
    pub(crate) async fn relay(
        &self,
        backend: &Backend,
        headers: HeaderMap,
        id: Option<&str>,
        body: Bytes,
        client: Client<'_>,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let forwarder = &self.forwarder;
        let Client { principal, asks } = client;
        let method = mcp_method(&headers);
        let Some(id) = id else {
            // 2026-07-28 has no client notification over HTTP that a legacy backend should get.
            return Ok(accepted());
        };
        if method == "subscriptions/listen" {
            let lease = self.lease(backend, &Self::key(principal, asks), &headers).await?;
            return notify::listen(forwarder, backend, lease, &headers, id, &body).await;
        }
        if method == "server/discover" {
            let result = self
                .discover(backend, &headers, &Self::key(principal, asks))
                .await?;
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
            return Ok(json(StatusCode::OK, Bytes::from(body)));
        }
        let (lease, ours, answered) = self
            .send_in_session(backend, &headers, &body, &Self::key(principal, asks))
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

    /// A read-only request of the gateway's own or a client's list (as
    /// [`Forwarder::exchange`]), in the session of its `principal` (and `asks`).
    pub(crate) async fn exchange(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        body: Bytes,
        client: Client<'_>,
    ) -> Result<Answer, UpstreamError> {
        let key = Self::key(client.principal, client.asks);
        if mcp_method(headers) == "server/discover" {
            let result = self.discover(backend, headers, &key).await?;
            let message = format!(r#"{{"jsonrpc":"2.0","id":"mrtr-gateway","result":{result}}}"#);
            return Ok(Answer {
                status: StatusCode::OK,
                message: Some(Bytes::from(message)),
            });
        }
        match self.send_in_session(backend, headers, &body, &key).await?.2 {
            Answered::Streaming(response) => self.forwarder.read_answer(backend, response).await,
            Answered::Read(answer) => Ok(answer),
            Answered::NotLegacy => Err(UpstreamError::Unreachable(
                "a request not in legacy form".to_owned(),
            )),
        }
    }

    /// The `server/discover` result made from the key's session's `initialize` result.
    async fn discover(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        key: &Key,
    ) -> Result<String, UpstreamError> {
        let lease = self.lease(backend, key, headers).await?;
        let session = lease.session().ok_or_else(no_session)?;
        Ok(session.discover.to_string())
    }

    /// `body`, a 2026-07-28 request, sent in legacy form in the key's session with `backend`
    /// (opened if needed), and once more in a new session when the backend forgot the first.
    /// Returns the session's lease, the request's id in it and the answer.
    async fn send_in_session(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        body: &Bytes,
        key: &Key,
    ) -> Result<(Lease, String, Answered), UpstreamError> {
        let forwarder = &self.forwarder;
        // The legacy headers leave the client's `Mcp-Method` out: the metrics read it here.
        let label = headers
            .contains_key(MCP_METHOD)
            .then(|| MethodLabel::of_headers(headers));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let lease = self.lease(backend, key, headers).await?;
            let session = lease.session().ok_or_else(no_session)?;
            let ours = session.next_id();
            let Some(legacy) = outgoing(body, &ours, true, false) else {
                return Ok((lease, ours, Answered::NotLegacy));
            };
            let (response, _) = forwarder
                .send(
                    backend,
                    Method::POST,
                    wire::request_headers(headers.clone(), &session.version),
                    legacy.body,
                    session.id.as_ref(),
                    label,
                )
                .await?;
            if session.id.is_none() || !wire::may_be_forgotten(response.status()) {
                return Ok((lease, ours, Answered::Streaming(response)));
            }
            // Read the (small) refusal to tell a forgotten session from any other error.
            let answer = forwarder.read_answer(backend, response).await?;
            if attempt == 1 && wire::forgotten(&answer, &ours) {
                tracing::info!(
                    backend = backend.name(),
                    "the backend forgot its session; opening another"
                );
                if let Some(pool) = self.pool(backend) {
                    pool.forget(&lease);
                }
                continue;
            }
            return Ok((lease, ours, Answered::Read(answer)));
        }
    }

    /// Closes every session idle for `idle` or longer: each round of the health probe, and
    /// every idle one (`Duration::ZERO`) when the gateway stops.
    pub(crate) async fn sweep(&self, backends: &[Backend], idle: Duration) {
        for backend in backends {
            let Some(pool) = self.pool(backend) else { continue };
            for slot in pool.take_idle(idle) {
                pool::close(&self.forwarder, backend, &slot).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_keyed_by_principal() {
        let key = Sessions::key;
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
