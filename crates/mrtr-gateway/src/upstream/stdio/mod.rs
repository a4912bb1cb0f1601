//! stdio backends: MCP servers the gateway starts as processes and speaks to over their stdin
//! and stdout, one JSON-RPC message per line ([`StdioBackends`]).
//!
//! * **One process per backend per replica**, started when the health probe or a request first
//!   needs it, without a shell, in a clean environment ([`child`]). A stdio server is one session
//!   by nature, so every client of the replica shares it (`docs/gateway.md` says which servers are
//!   safe to share), unless the backend is run **per principal**: then each principal gets a
//!   process of its own, within a bound ([`pool`]).
//! * **Its era**, as for an HTTP backend: `auto` sends `server/discover` first and falls back to
//!   `initialize` on any answer that is not a modern one, or none within [`DISCOVER_TIMEOUT`](process::DISCOVER_TIMEOUT)
//!   (the stdio transport's rule: the fallback must not depend on one error code); `modern` and
//!   `legacy` send only theirs. A legacy process is spoken to as `upstream/session/` speaks to a
//!   legacy HTTP backend (its requests lose the 2026-07-28 `_meta` keys, its answers come back in
//!   modern form through `upstream/translate.rs`, `server/discover` is answered from its
//!   `initialize` result).
//! * **Ids**: every request goes out under an id of the gateway's own, and its `progressToken`
//!   with it, so that concurrent clients' ids and tokens never collide; answers get the client's
//!   back. At most [`MAX_IN_FLIGHT`] requests are in flight per process; more wait for a place, up
//!   to the response timeout.
//! * **Each principal's share** of a shared process's places: one principal may hold at most
//!   [`StdioCommand::max_calls_per_principal`] of them (default
//!   [`DEFAULT_CALLS_PER_PRINCIPAL`](conn::DEFAULT_CALLS_PER_PRINCIPAL), a quarter), in flight
//!   or waiting, so that one client's slow calls, or calls that never answer, cannot take every
//!   place and leave every other principal waiting for the stall timeout. A request beyond its
//!   principal's share is refused at once with a JSON-RPC error naming the limit (counted as a
//!   backend error, reason `principal_share`); requests without a principal are one group with
//!   the same share once the process has served a principal (on a gateway without a principal
//!   header, where every request is the same nobody, they have every place, as before). A
//!   principal's own process (per principal) has no share.
//! * **Answers**: one that comes within the response timeout is the HTTP answer (JSON); one that
//!   streams progress first, or takes longer, is an SSE stream ([`ChannelBody`]) that ends with
//!   it, or with an error once the process sends nothing for it for the stall timeout (the
//!   backend's own, else the gateway's `stdio-stall-timeout`, [`DEFAULT_STDIO_STALL_TIMEOUT`] by
//!   default). A client that goes away gets `notifications/cancelled` sent for its request, and
//!   its call's place and share are given back.
//! * **`subscriptions/listen`**: a modern process's is relayed as a call, its notifications
//!   routed by the `subscriptionId` they carry, its stream kept alive with comments, and it takes
//!   no place among the calls in flight (a bound of its own,
//!   [`MAX_LISTENS`](super::session::hub::MAX_LISTENS)); a legacy process's is served from the
//!   notifications it sends of its own, through its hub (`upstream/session/hub.rs`), which sends
//!   `resources/subscribe` and `resources/unsubscribe` as listens come and go. When the process
//!   exits, every listen ends with an error.
//! * **The process's own requests** (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`) carry nothing that names their call on stdio. A principal's own process
//!   hands one to the client of that principal's one call in flight (its translation relays it as
//!   an HTTP session's: to a legacy client, or a bridged task); any other is answered with an
//!   error that names the reason (a shared process has no one client; several calls, no one
//!   call). `ping` is answered. Its log notifications go to the gateway's debug log.
//! * **Exit**: requests in flight get a JSON-RPC error at once; the process is started again
//!   after a backoff ([`BACKOFF_FIRST`](process::BACKOFF_FIRST) doubling to [`BACKOFF_MAX`](process::BACKOFF_MAX); reset once it has run for
//!   [`STABLE_AFTER`](process::STABLE_AFTER)); requests arriving meanwhile wait for it, up to the response timeout.
//! * **Stop** (drain, shutdown): stdin closed, then `SIGTERM` and `SIGKILL`, [`STOP_GRACE`](process::STOP_GRACE)
//!   apart.
//!
//! The room, lowest first, each importing only below it: [`child`] (the operating-system
//! process: spawn, environment, stderr, signals; what it is started with is the backend's
//! [`StdioCommand`]), [`conn`] (one running process's conversation: ids, calls, routing its
//! lines), [`body`] (a call's answer as it streams); [`process`] (one process over its restarts: handshake, supervision, stop); [`pool`] (which of a
//! backend's processes serves a request); this file, what the rest of the gateway calls (relay,
//! exchange, probe, sweep, stop).

mod body;
mod child;
mod conn;
mod pool;
mod process;

pub use crate::upstream::backend::StdioCommand;
pub(crate) use conn::MAX_IN_FLIGHT;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Response, StatusCode};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tower_mrtr::Route;
use tower_mrtr::error::INTERNAL_ERROR;

use self::body::ChannelBody;
use self::conn::{Call, Conn, Place, Share, Unsent, exited, stuck};
use self::pool::Processes;
use self::process::{Process, START_TIMEOUT, State, Waited};
use super::answer::{Answer, UpstreamError, mcp_method};
use super::backend::Backend;
use super::health::{Down, Found};
use super::http::body::{ProxyBody, accepted, json};
use crate::jsonrpc::{self, RawObject};
use crate::observe::metrics::MethodLabel;
use crate::upstream::era;
use crate::upstream::session::Client;
use crate::upstream::session::hub::{self, Offers, Subscriber};
use crate::upstream::sse::set_stream_headers;
use crate::upstream::translate::ClientAsks;

/// How long a stdio backend's answer may send nothing before it is ended, by default (the
/// gateway's `stdio-stall-timeout`; a backend's own `stall-timeout` wins). Shorter than an HTTP
/// backend's 300 s: a silent call holds one of its process's 64 places, and one of its
/// principal's 16, for as long as it lasts, and the process is shared, whereas a silent HTTP
/// answer holds only its own connection. A minute still lets a tool work a while between
/// progress notifications; a server whose tools work longer in silence gets its own
/// `stall-timeout`.
pub(crate) const DEFAULT_STDIO_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The processes of the stdio backends; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct StdioBackends {
    /// Shared with the next configuration's for a backend a reload kept.
    processes: Vec<(Route, Arc<Processes>)>,
    response_timeout: Duration,
}

impl Drop for StdioBackends {
    fn drop(&mut self) {
        // A proxy dropped without a stop does not leave its processes running; those a reload
        // kept run on under the next configuration.
        for (_, processes) in &self.processes {
            if Arc::strong_count(processes) > 1 {
                continue;
            }
            for process in processes.all() {
                process.stop.cancel();
            }
        }
    }
}

impl StdioBackends {
    /// The (not yet started) processes of the stdio backends among `backends`, except that
    /// those `kept` names (a config reload) share `previous`'s, which keep running with their
    /// calls in flight; requests wait at most `response_timeout` (unless a backend has its own)
    /// for a process and an answer.
    pub(crate) fn carrying(
        previous: Option<&Self>,
        backends: &[Backend],
        kept: &dyn Fn(&Backend) -> bool,
        response_timeout: Duration,
    ) -> Self {
        let old = |backend: &Backend| {
            let previous = previous.filter(|_| kept(backend))?;
            previous
                .processes
                .iter()
                .find(|(route, _)| route == backend.route())
                .map(|(_, p)| p.clone())
        };
        let processes = backends
            .iter()
            .filter_map(|backend| {
                let processes = old(backend).or_else(|| Processes::new(backend).map(Arc::new))?;
                Some((backend.route().clone(), processes))
            })
            .collect();
        Self {
            processes,
            response_timeout,
        }
    }

    /// Stops the processes of `backends` (those a reload removed) once none has a call in
    /// flight, or after `limit`.
    pub(crate) async fn retire(&self, backends: &[Backend], limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        let routes: Vec<&Route> = backends.iter().map(Backend::route).collect();
        let all: Vec<Arc<Process>> = self
            .processes
            .iter()
            .filter(|(route, _)| routes.contains(&route))
            .flat_map(|(_, p)| p.all())
            .collect();
        while all.iter().any(|p| p.busy()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for process in all {
            process.stop_and_wait().await;
        }
    }

    fn processes(&self, backend: &Backend) -> Result<&Processes, UpstreamError> {
        self.processes
            .iter()
            .find(|(route, _)| route == backend.route())
            .map(|(_, processes)| &**processes)
            .ok_or_else(|| UpstreamError::Unreachable("not a configured stdio backend".to_owned()))
    }

    /// The process that serves a request of `principal` (its own, for a backend run per
    /// principal).
    fn process(&self, backend: &Backend, principal: Option<&str>) -> Result<Arc<Process>, UpstreamError> {
        self.processes(backend)?.for_principal(backend, principal)
    }

    fn timeout(&self, backend: &Backend) -> Duration {
        backend.timeout().unwrap_or(self.response_timeout)
    }

    /// The health probe: starts the process if it is not running, and says what it is once its
    /// handshake is done (waiting at most the response timeout), or why it is down.
    pub(crate) async fn detect(&self, backend: &Backend) -> Result<Found, Down> {
        let process = self.processes(backend).map_err(era::unavailable)?.shared();
        // A process between runs is reported as it is: the probe round does not wait for its
        // next start (the other backends' probes wait for the round).
        if let State::Down(down, _) = &*process.state.borrow() {
            return Err(down.clone());
        }
        match process.up(self.timeout(backend).max(START_TIMEOUT)).await {
            // A process is up only once its handshake is done.
            Ok(conn) => conn
                .hello
                .get()
                .map(|h| h.found.clone())
                .ok_or_else(|| era::unavailable(UpstreamError::Unreachable("no handshake".to_owned()))),
            Err(Waited::Down(down)) => Err(down),
            Err(waited) => Err(era::unavailable(waited.into())),
        }
    }

    /// A client's request (its `headers`, `id` as raw JSON, and `body`) sent to `backend`'s
    /// process for `client` (its principal, and whether it takes the process's own requests);
    /// the answer is JSON, or an SSE stream when it streams (see the module docs).
    pub(crate) async fn relay(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        id: Option<&str>,
        body: Bytes,
        client: Client<'_>,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let Client { principal, asks } = client;
        let Some(id) = id else {
            // 2026-07-28 has no client notification over HTTP to pass on.
            return Ok(accepted());
        };
        let process = self.process(backend, principal)?;
        let started = Instant::now();
        let label = MethodLabel::of_headers(headers);
        // A listen takes a place of its own, and none of the calls' nor of their shares.
        let share = if mcp_method(headers) == "subscriptions/listen" {
            None
        } else {
            match process.share(principal) {
                Ok(share) => share,
                Err(max) => {
                    let refusal = beyond_share(&process, backend, label, Some(id), max, started);
                    return Ok(json(StatusCode::OK, refusal));
                }
            }
        };
        let caller = Caller {
            share,
            asks: asks.cloned(),
        };
        let result = self.relay_to(&process, backend, headers, id, body, caller).await;
        let failure = match &result {
            Ok(_) => None,
            Err(UpstreamError::Timeout) => Some("timeout"),
            Err(UpstreamError::Unreachable(_)) => Some("unreachable"),
        };
        process.metrics.request(label, failure, started.elapsed());
        result
    }

    /// [`relay`](Self::relay), for a call of `caller`.
    async fn relay_to(
        &self,
        process: &Arc<Process>,
        backend: &Backend,
        headers: &HeaderMap,
        id: &str,
        body: Bytes,
        caller: Caller,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let Caller { share, asks } = caller;
        let timeout = self.timeout(backend);
        let deadline = tokio::time::Instant::now() + timeout;
        let method = mcp_method(headers);
        let listen = method == "subscriptions/listen";
        let (conn, place) = if listen {
            // A listen stays open: it takes a place of its own, not one of the calls'.
            let conn = process.up(timeout).await?;
            let Ok(permit) = process.listens.clone().try_acquire_owned() else {
                let message = "Too many subscriptions to this backend";
                return Ok(json(
                    StatusCode::OK,
                    jsonrpc::error_body(Some(id), INTERNAL_ERROR, message, None),
                ));
            };
            if !conn.modern() {
                return Ok(legacy_listen(&conn, id, &body, timeout, permit).await);
            }
            (conn, Place::new(permit, None))
        } else {
            process.place(timeout, share).await?
        };
        if !conn.modern()
            && method == "server/discover"
            && let Some(discover) = conn.hello.get().and_then(|h| h.discover.as_ref())
        {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{discover}}}"#);
            return Ok(json(StatusCode::OK, Bytes::from(body)));
        }
        let mut call = match conn.send(&body, method, Some(place), asks) {
            Ok(call) => call,
            Err(Unsent::Gone) => return Err(exited()),
            Err(Unsent::Stuck) => return Err(stuck()),
            Err(Unsent::NotJsonRpc) => {
                return Ok(json(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::error_body(
                        Some(id),
                        INTERNAL_ERROR,
                        "The request could not be put in JSON-RPC form",
                        None,
                    ),
                ));
            }
        };
        let first = match tokio::time::timeout_at(deadline, call.messages.recv()).await {
            Ok(None) => return Err(exited()),
            Ok(Some(relayed)) if relayed.response => {
                let answer = call.translation.one(relayed.message);
                return Ok(json(StatusCode::OK, answer));
            }
            Ok(Some(relayed)) => Some(relayed),
            // Slow to answer: the answer streams, so the client need not wait for a head.
            Err(_) => None,
        };
        let Call {
            messages,
            translation,
            guard,
        } = call;
        let stall = backend.stall_timeout().unwrap_or(DEFAULT_STDIO_STALL_TIMEOUT);
        let body = ChannelBody::new(
            messages,
            first,
            translation,
            id,
            backend.route(),
            stall,
            Box::new(guard),
        );
        let body = if listen { body.listening() } else { body };
        let mut response = Response::new(super::http::body::boxed(body));
        set_stream_headers(response.headers_mut());
        Ok(response)
    }

    /// A read-only request of the gateway's own or a client's list (as
    /// [`Forwarder::exchange`](super::http::forward::Forwarder::exchange)), to `backend`'s process.
    pub(crate) async fn exchange(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        body: Bytes,
        principal: Option<&str>,
    ) -> Result<Answer, UpstreamError> {
        let process = self.process(backend, principal)?;
        let timeout = self.timeout(backend);
        let share = match process.share(principal) {
            Ok(share) => share,
            Err(max) => {
                let label = MethodLabel::of_headers(headers);
                let id = serde_json::from_slice::<RawObject>(&body)
                    .ok()
                    .and_then(|request| request.get("id").map(|id| id.get().to_owned()));
                let refusal = beyond_share(&process, backend, label, id.as_deref(), max, Instant::now());
                return Ok(Answer {
                    status: StatusCode::OK,
                    message: Some(refusal),
                });
            }
        };
        let (conn, place) = process.place(timeout, share).await?;
        let method = mcp_method(headers);
        if method == "server/discover"
            && let Some(discover) = conn.hello.get().and_then(|h| h.discover.as_ref())
        {
            let message = format!(r#"{{"jsonrpc":"2.0","id":"mrtr-gateway","result":{discover}}}"#);
            return Ok(Answer {
                status: StatusCode::OK,
                message: Some(Bytes::from(message)),
            });
        }
        conn.request(&body, method, Some(place), timeout).await
    }

    /// Stops every process (stdin closed, then signals; see the module docs) and waits for them.
    pub(crate) async fn stop(&self) {
        let all: Vec<Arc<Process>> = self.processes.iter().flat_map(|(_, p)| p.all()).collect();
        for process in &all {
            process.stop.cancel();
        }
        for process in all {
            process.stop_and_wait().await;
        }
    }

    /// Stops the principals' processes unused for `idle` (the health probe's round calls it).
    pub(crate) async fn sweep(&self, idle: Duration) {
        for (_, processes) in &self.processes {
            for process in processes.take_idle(idle) {
                tracing::debug!(backend = %process.name, "stopping an idle principal's process");
                process.stop_and_wait().await;
            }
        }
    }
}

/// The refusal of a request (`id`, raw JSON) to `backend`'s `process` whose principal holds its
/// whole share (`max`) of the process's places already: a JSON-RPC error naming the limit,
/// worded as the legacy front words its per-principal limits, counted as a failed backend
/// request (reason `principal_share`) and logged at debug.
/// What a call carries of its caller: its principal's share of a shared process's places (none
/// for a listen, or on a principal's own process), and where the process's own requests go when
/// its client takes them.
struct Caller {
    share: Option<Share>,
    asks: Option<ClientAsks>,
}

fn beyond_share(
    process: &Process,
    backend: &Backend,
    label: MethodLabel,
    id: Option<&str>,
    max: usize,
    started: Instant,
) -> Bytes {
    process
        .metrics
        .request(label, Some("principal_share"), started.elapsed());
    tracing::debug!(
        backend = backend.name(),
        method = label.as_str(),
        max,
        "a principal's request beyond its share of the stdio process's places refused"
    );
    let message = format!(
        "This principal already has {max} requests in flight to backend {:?}, its share of a process other principals share too (max-calls-per-principal); wait for one to end",
        backend.name()
    );
    jsonrpc::error_body(id, INTERNAL_ERROR, &message, None)
}

/// A `subscriptions/listen` of a legacy process's: served from its own notifications by its
/// hub, subscribing to resources with `resources/subscribe` (see `upstream/session/hub.rs`).
async fn legacy_listen(
    conn: &Arc<Conn>,
    id: &str,
    body: &[u8],
    timeout: Duration,
    place: OwnedSemaphorePermit,
) -> Response<ProxyBody> {
    let offers = conn
        .hello
        .get()
        .and_then(|h| h.discover.as_ref())
        .map(Offers::of_discover)
        .unwrap_or_default();
    let subscriber: Subscriber = {
        let conn = conn.clone();
        Arc::new(move |method, uri| {
            let conn = conn.clone();
            Box::pin(async move {
                let request =
                    json!({ "jsonrpc": "2.0", "id": 0, "method": method, "params": { "uri": uri } });
                let answer = conn
                    .request(request.to_string().as_bytes(), method, None, timeout)
                    .await;
                answer.is_ok_and(|a| a.result().is_some())
            })
        })
    };
    hub::listen(&conn.hub, offers, id, body, subscriber, Box::new(place)).await
}
