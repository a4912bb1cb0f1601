//! The backend side, behind one seam ([`Upstreams`]): a request reaches a backend through one of
//! three doors, chosen in one place ([`Upstreams::door`]) by the backend's transport and the
//! era it speaks:
//!
//! | transport | era | door |
//! |---|---|---|
//! | Streamable HTTP | 2026-07-28 | [`http`]: relayed as it came, the answer streamed back |
//! | Streamable HTTP | `initialize` era | [`session`]: in a session of the gateway's own per principal, translated both ways |
//! | stdio | either | [`stdio`]: a process the gateway runs, ids rewritten, each era spoken in its own way |
//!
//! Imports `observe` and the ground floor only. A new transport (WebSocket, an in-process
//! backend) is one more folder and one more arm of [`Upstreams::door`].
//!
//! The room, lowest first, each file importing only below it:
//!
//! * the ground of the room, what every door shares: [`backend`] (what a backend is: name,
//!   transport, address or command, era expected, settings), [`answer`] (an exchange's answer
//!   and error types), [`health`] (the last probe's findings), [`era`] (what the probes' answers
//!   mean), [`sse`] (the one reader and writer of SSE streams, which the legacy front reads with
//!   too), [`translate`] (an `initialize`-era answer's messages rewritten on their way back:
//!   ids, legacy forms; applied by HTTP bodies and stdio alike, so it sits below both);
//! * the doors: [`http`] (connections to backends and every answer's body), [`session`] (over
//!   the HTTP door's connections, with the hub that fans a session's notifications out to
//!   listens), [`stdio`] (which shares that hub);
//! * above the doors, [`listens`]: the listens clients share, one backend listen for each
//!   request sent alike, whichever door it goes through;
//! * this file: the seam the router calls ([`Upstreams`]), and the few names the router takes
//!   from below it ([`body`], [`MAX_MERGED_ANSWER`]), so that `route/` names no door.

pub(crate) mod answer;
pub(crate) mod backend;
pub(crate) mod era;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod listens;
pub(crate) mod session;
pub(crate) mod sse;
pub(crate) mod stdio;
pub(crate) mod translate;

use std::time::Duration;

use ::http::{HeaderMap, Response};
use bytes::Bytes;

use self::answer::{Answer, UpstreamError};
use self::backend::Transport;
pub use self::backend::{Backend, BackendSpecError, SEPARATOR};
use self::era::Era;
use self::health::{Down, Found};
pub(crate) use self::http::body;
use self::http::body::ProxyBody;
use self::http::forward::Forwarder;
pub(crate) use self::http::forward::MAX_MERGED_ANSWER;
use self::listens::{Joined, Key, Listens};
pub(crate) use self::session::Client;
use self::session::Sessions;
use self::stdio::StdioBackends;

/// The door a backend is reached through; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Door {
    Forward,
    Session,
    Stdio,
}

/// Every backend's door: the forwarder, the sessions with `initialize`-era backends and the
/// processes of stdio backends; the one place the router reaches backends through.
#[derive(Debug)]
pub(crate) struct Upstreams {
    forwarder: Forwarder,
    sessions: Sessions,
    stdio: StdioBackends,
    /// The listens clients share (`listens.rs`).
    listens: Listens,
}

impl Upstreams {
    /// The doors to `backends`; answers are waited for at most `response_timeout`, unless a
    /// backend has its own.
    pub(crate) fn new(backends: &[Backend], response_timeout: Duration) -> Self {
        Self::carrying(None, backends, &|_| false, response_timeout)
    }

    /// The doors to `backends` after a config reload: those `kept` names (unchanged backends)
    /// keep `previous`'s connection pools, sessions and processes; the others get new ones.
    pub(crate) fn carrying(
        previous: Option<&Self>,
        backends: &[Backend],
        kept: &dyn Fn(&Backend) -> bool,
        response_timeout: Duration,
    ) -> Self {
        let forwarder = Forwarder::carrying(previous.map(|p| &p.forwarder), backends, kept, response_timeout);
        Self {
            sessions: Sessions::carrying(previous.map(|p| &p.sessions), backends, kept, forwarder.clone()),
            stdio: StdioBackends::carrying(previous.map(|p| &p.stdio), backends, kept, response_timeout),
            forwarder,
            listens: Listens::default(),
        }
    }

    /// Shuts the doors of `removed` backends (a config reload dropped them): their sessions
    /// closed, their processes stopped once their calls in flight ended (or after `limit`).
    pub(crate) async fn retire(&self, removed: &[Backend], limit: Duration) {
        self.stdio.retire(removed, limit).await;
        self.sessions.sweep(removed, Duration::ZERO).await;
    }

    /// How long an answer is waited for, unless a backend has its own timeout.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.forwarder.response_timeout()
    }

    /// The one match of a backend's transport and era: the door its requests go through. An
    /// HTTP backend is spoken to in sessions when configured so, or found so by the last probe.
    fn door(backend: &Backend) -> Door {
        match (backend.transport(), backend.era(), backend.health().is_legacy()) {
            (Transport::Stdio, _, _) => Door::Stdio,
            (Transport::Http, Era::Legacy, _) | (Transport::Http, _, true) => Door::Session,
            (Transport::Http, _, false) => Door::Forward,
        }
    }

    /// A client's request (its `headers` and `body`, its JSON-RPC `id` as raw JSON, `None` for
    /// a notification) relayed to `backend` for `client`: the answer, streamed back.
    pub(crate) async fn relay(
        &self,
        backend: &Backend,
        headers: HeaderMap,
        id: Option<&str>,
        body: Bytes,
        client: Client<'_>,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        match Self::door(backend) {
            Door::Forward => self.forwarder.relay(backend, headers, id, body).await,
            Door::Session => self.sessions.relay(backend, headers, id, body, client).await,
            Door::Stdio => self.stdio.relay(backend, &headers, id, body, client).await,
        }
    }

    /// A `subscriptions/listen` (request `id`) to `backend`, shared with the listens that send it
    /// the same request (`listens.rs`); one the gateway cannot share (a legacy client's, one
    /// without an id or that it cannot read) is relayed on its own.
    pub(crate) async fn listen(
        &self,
        backend: &Backend,
        headers: HeaderMap,
        id: Option<&str>,
        body: Bytes,
        client: Client<'_>,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let key = match (id, client.asks) {
            (Some(_), None) => Key::of(backend.name(), client.principal, &headers, &body),
            _ => None,
        };
        let (Some(key), Some(id)) = (key, id) else {
            return self.relay(backend, headers, id, body, client).await;
        };
        let wait = backend.timeout().unwrap_or(self.response_timeout());
        match self.listens.join(key, id, wait).await {
            Joined::Stream(stream) => Ok(stream),
            Joined::Alone => self.relay(backend, headers, Some(id), body, client).await,
            Joined::Lead(lead) => {
                let answer = self.relay(backend, headers, Some(id), body, client).await?;
                Ok(lead.opened(answer))
            }
        }
    }

    /// Whether `backend`'s own requests during a call can reach the call's client (a legacy
    /// client's, in-request; a 2026-07-28 Tasks client's, as a bridged task, `tasks/`): an
    /// `initialize`-era backend spoken to in sessions (HTTP), or run per principal (stdio: a
    /// principal's own process names the call its request is for while it has one in flight).
    pub(crate) fn relays_requests(backend: &Backend) -> bool {
        match Self::door(backend) {
            Door::Session => true,
            Door::Stdio => {
                backend
                    .command()
                    .is_some_and(|command| command.processes_per_principal().is_some())
                    && (backend.era() == Era::Legacy || backend.health().is_legacy())
            }
            Door::Forward => false,
        }
    }

    /// A request whose answer the gateway reads whole (a list for the catalog, a fan-out, a
    /// `server/discover`), sent to `backend` for `client`.
    pub(crate) async fn exchange(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        body: Bytes,
        client: Client<'_>,
    ) -> Result<Answer, UpstreamError> {
        match Self::door(backend) {
            Door::Forward => self.forwarder.exchange(backend, headers, body).await,
            Door::Session => self.sessions.exchange(backend, headers, body, client).await,
            Door::Stdio => {
                self.stdio
                    .exchange(backend, headers, body, client.principal)
                    .await
            }
        }
    }

    /// The health probe: what `backend` is (its era), or why it is down. A stdio backend's
    /// process is started if it is not running.
    pub(crate) async fn detect(&self, backend: &Backend) -> Result<Found, Down> {
        match backend.transport() {
            Transport::Stdio => self.stdio.detect(backend).await,
            Transport::Http => session::probe::detect(&self.forwarder, backend).await,
        }
    }

    /// Closes the sessions with `initialize`-era backends, and stops the principals' stdio
    /// processes, unused for `idle` (the health probe's round calls it).
    pub(crate) async fn sweep(&self, backends: &[Backend], idle: Duration) {
        self.sessions.sweep(backends, idle).await;
        self.stdio.sweep(idle).await;
    }

    /// Once the gateway has stopped serving: every session closed, every stdio process stopped
    /// (stdin closed, then signals) and waited for.
    pub(crate) async fn shutdown(&self, backends: &[Backend]) {
        self.sessions.sweep(backends, Duration::ZERO).await;
        self.stdio.stop().await;
    }
}
