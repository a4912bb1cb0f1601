//! Routing: the [`Proxy`] the MRTR layer wraps, the merged catalog of what the backends offer
//! ([`catalog`]) and the checks of the mirrored MCP headers ([`headers`]). Imports `upstream`
//! (to forward), `policy` (lists filtered, rate limits), `observe` (a request's trace span, begun
//! here where the body has been read) and the ground floor.
//!
//! The proxy picks a backend for each request (or fans out to all), forwards, and reports the
//! backend as a [`Route`].
//!
//! Routing reads the [`McpRequestHead`] the layer parsed; the body is parsed again only where
//! the gateway must change or inspect something the head does not carry (a prefixed name to
//! restore, a `cursor`, a completion reference, the `_meta` to reuse for catalog refreshes).
//!
//! | request | with one backend | with several backends |
//! |---|---|---|
//! | carrying a [`PinnedRoute`] (an MRTR retry) | that backend | that backend, original name restored; a backend no longer configured gets `-32602` |
//! | `tools/call`, `prompts/get` | straight through | the backend that offers the (exposed) name, original name restored |
//! | `resources/read` | straight through | the backend listing the URI, else the first with a matching template |
//! | `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list` | straight through | all backends (every page), merged |
//! | `server/discover` | straight through | all backends, merged |
//! | `completion/complete` | straight through | by `params.ref` (prompt name or resource URI) |
//! | a notification | straight through | `202 Accepted`, not forwarded |
//! | anything else | straight through | HTTP 404, `-32601` |
//!
//! With a `[[policy]]`, lists are merged by the gateway even with one backend, so that they hold
//! only what the caller may use (and are marked `cacheScope: "private"`). With
//! `[[rate-limit]]`s, a request over a limit is answered 429 before it is routed, a verified
//! retry or task follow-up included (keyed as the call it continues: `policy/rate.rs`).

pub(crate) mod catalog;
mod govern;
pub(crate) mod headers;
mod listen;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME, encode_header_value};
use tower_mrtr::{Continuation, McpRequestHead, PinnedRoute, RequestBody, Route};
use tower_service::Service;

use self::catalog::{Catalog, Kind, Listing};
pub(crate) use self::govern::KnownOrigin;
use self::headers::SUPPORTED_VERSIONS;
use crate::jsonrpc::{
    self, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RawObject,
    error_body,
};
use crate::observe::trace::TraceSlot;
use crate::policy::{self, Charge, Policy, RateLimits, Subject};
use crate::upstream::Backend;
use crate::upstream::body::{self, ProxyBody};
use crate::upstream::forward::{Answer, ForwardError, Forwarder};
use crate::upstream::health::{Down, Found};
use crate::upstream::session::LegacyBackends;
use crate::upstream::stdio::StdioBackends;
use crate::upstream::translate::ClientAsks;

/// Route reported for answers the gateway writes itself (merged lists, its own errors). Not a
/// valid backend name, so it can never be confused with one.
pub(crate) const GATEWAY_ROUTE: &str = "@gateway";

/// Most pages fetched from one backend for one list call.
const MAX_PAGES: usize = 64;

/// Shortest interval between two on-demand catalog refreshes of one kind, so that calls naming
/// unknown things cannot make the gateway hammer its backends.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// The routing and forwarding service. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backends: Vec<Backend>,
    forwarder: Forwarder,
    /// Sessions with `initialize`-era backends.
    legacy: LegacyBackends,
    /// The processes of stdio backends.
    stdio: StdioBackends,
    catalog: Catalog,
    server_info: Value,
    /// The header naming each request's principal, for the policy and the limits.
    principal_header: Option<HeaderName>,
    policy: Option<Arc<Policy>>,
    limits: Option<Arc<RateLimits>>,
    /// Whether requests carry a trace span to begin (`otlp-endpoint`); without, the request's
    /// extensions are not searched for one.
    traced: bool,
}

impl Proxy {
    /// A proxy over `backends` (at least one), re-listing catalogs older than `catalog_ttl`, and
    /// waiting at most `response_timeout` for a backend's response head.
    pub fn new(backends: Vec<Backend>, catalog_ttl: Duration, response_timeout: Duration) -> Self {
        Self::with_principal_header(backends, catalog_ttl, response_timeout, None)
    }

    /// As [`new`](Self::new), keeping the sessions of `initialize`-era backends apart per value
    /// of `principal_header` (the header the MRTR layer binds envelopes to), so that no two
    /// principals ever share one (see `upstream/session/`).
    pub fn with_principal_header(
        backends: Vec<Backend>,
        catalog_ttl: Duration,
        response_timeout: Duration,
        principal_header: Option<HeaderName>,
    ) -> Self {
        assert!(!backends.is_empty(), "a proxy needs at least one backend");
        let names = backends.iter().map(|b| b.name().to_owned()).collect();
        let forwarder = Forwarder::new(&backends, response_timeout);
        let legacy = LegacyBackends::new(&backends);
        let stdio = StdioBackends::new(&backends, response_timeout);
        Self {
            inner: Arc::new(Inner {
                backends,
                forwarder,
                legacy,
                stdio,
                catalog: Catalog::new(names, catalog_ttl),
                server_info: serde_json::json!({ "name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION") }),
                principal_header,
                policy: None,
                limits: None,
                traced: false,
            }),
        }
    }

    /// This proxy with lists filtered by `policy` and requests counted against `limits` (see
    /// the [module docs](self)).
    ///
    /// # Panics
    ///
    /// If the proxy was cloned already: call it on a new proxy.
    pub(crate) fn with_access(
        mut self,
        policy: Option<Arc<Policy>>,
        limits: Option<Arc<RateLimits>>,
    ) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("with_access is called on a new proxy");
        inner.policy = policy;
        inner.limits = limits;
        self
    }

    /// This proxy beginning the trace span each request carries (`observe/trace.rs`).
    ///
    /// # Panics
    ///
    /// If the proxy was cloned already: call it on a new proxy.
    pub(crate) fn traced(mut self, traced: bool) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("traced is called on a new proxy")
            .traced = traced;
        self
    }

    /// The configured backends.
    pub fn backends(&self) -> &[Backend] {
        &self.inner.backends
    }

    /// Where the tool or prompt a `tools/call` or `prompts/get` of `target` names comes from, as
    /// far as this replica's catalog knows without asking (for the MRTR layer's `authorize`
    /// hook; `route/govern.rs`).
    pub(crate) fn origin_of(&self, method: &str, target: &str) -> Option<KnownOrigin> {
        let kind = match method {
            "tools/call" => Kind::Tools,
            "prompts/get" => Kind::Prompts,
            _ => return None,
        };
        self.inner.known_origin(kind, target)
    }

    /// Finds what `backend` is (the health probe): its era, or why it is down. A stdio
    /// backend's process is started if it is not running.
    pub(crate) async fn detect(&self, backend: &Backend) -> Result<Found, Down> {
        if StdioBackends::serves(backend) {
            return self.inner.stdio.detect(backend).await;
        }
        crate::upstream::era::detect(&self.inner.forwarder, backend).await
    }

    /// Stops the processes of stdio backends (stdin closed, then signals) and waits for them.
    pub(crate) async fn stop_processes(&self) {
        self.inner.stdio.stop().await;
    }

    /// Closes the sessions with `initialize`-era backends, and stops the principals' stdio
    /// processes, unused for `idle` (the health probe's round calls it).
    pub(crate) async fn close_idle_sessions(&self, idle: Duration) {
        let inner = &self.inner;
        inner.legacy.sweep(&inner.forwarder, &inner.backends, idle).await;
        inner.stdio.sweep(idle).await;
    }
}

impl<B> Service<Request<RequestBody<B>>> for Proxy
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display + Send,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody<B>>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            // Taken out so that the headers can move on to the backend without a copy.
            let head = parts.extensions.remove::<McpRequestHead>();
            let pinned = parts.extensions.remove::<PinnedRoute>().map(|p| p.0);
            // The layer has already buffered (and size-limited) every POST body.
            let (route, mut response) = match read_buffered(body).await {
                Ok(body) => inner.dispatch(parts, head, pinned.as_ref(), body).await,
                Err(e) => {
                    tracing::debug!(error = %e, "request body failed");
                    let route = pinned.clone().unwrap_or_else(|| Route::new(GATEWAY_ROUTE));
                    (
                        route,
                        error_response(
                            StatusCode::BAD_REQUEST,
                            None,
                            INVALID_REQUEST,
                            "Unreadable body",
                            None,
                        ),
                    )
                }
            };
            response.extensions_mut().insert(route);
            Ok(response)
        })
    }
}

/// The body as one `Bytes`. The layer hands over a body it buffered, as one frame, which is
/// taken as it is; only a body in several frames is copied together.
async fn read_buffered<B: http_body::Body<Data = Bytes>>(body: B) -> Result<Bytes, B::Error> {
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            earlier => {
                joined.extend_from_slice(&earlier.unwrap_or_default());
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| joined.freeze()))
}

/// Why a fan-out to one backend gave nothing to merge.
#[derive(Debug)]
enum Failure {
    /// A JSON-RPC error, or a non-JSON-RPC HTTP answer.
    Answer(Answer),
    Unavailable(ForwardError),
    Malformed,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answer(answer) if answer.is_error() => write!(f, "JSON-RPC error (HTTP {})", answer.status),
            Self::Answer(answer) => write!(f, "no JSON-RPC result (HTTP {})", answer.status),
            Self::Unavailable(error) => error.fmt(f),
            Self::Malformed => f.write_str("malformed list result"),
        }
    }
}

type Routed = (Route, Response<ProxyBody>);

impl Inner {
    /// A read-only request to `backend`, in its era.
    async fn exchange(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        extensions: &Extensions,
        body: Bytes,
    ) -> Result<Answer, ForwardError> {
        if StdioBackends::serves(backend) {
            let principal = self.principal(headers, extensions);
            return self
                .stdio
                .exchange(backend, headers, body, principal.as_deref())
                .await;
        }
        if LegacyBackends::speaks_legacy(backend) {
            let principal = self.principal(headers, extensions);
            return self
                .legacy
                .exchange(
                    &self.forwarder,
                    backend,
                    headers,
                    body,
                    principal.as_deref(),
                    extensions.get::<ClientAsks>(),
                )
                .await;
        }
        self.forwarder.exchange(backend, headers, body).await
    }

    /// The principal a request is relayed for: its caller's (`policy::caller_of`), so that
    /// backend sessions and processes are keyed by the one reading of the principal header.
    fn principal(&self, headers: &HeaderMap, extensions: &Extensions) -> Option<Arc<str>> {
        policy::caller_of(extensions, headers, self.principal_header.as_ref()).map(|c| c.principal)
    }

    fn own(&self, response: Response<ProxyBody>) -> Routed {
        (Route::new(GATEWAY_ROUTE), response)
    }

    /// The route a refusal of the gateway's own is reported under: a pinned request's answer
    /// must come from its route (the layer refuses another), anything else is the gateway's.
    fn answering(pinned: Option<&Route>) -> Route {
        pinned.cloned().unwrap_or_else(|| Route::new(GATEWAY_ROUTE))
    }

    async fn dispatch(
        &self,
        mut parts: Parts,
        head: Option<McpRequestHead>,
        pinned: Option<&Route>,
        body: Bytes,
    ) -> Routed {
        let Some(head) = &head else {
            // The layer inserts a head for every JSON-RPC request object it reads.
            let (code, message) = match serde_json::from_slice::<&RawValue>(&body) {
                Err(_) => (PARSE_ERROR, "Parse error: the body is not JSON"),
                Ok(raw) if raw.get().starts_with('[') => {
                    (INVALID_REQUEST, "JSON-RPC batches are not supported")
                }
                Ok(_) => (INVALID_REQUEST, "The body is not a JSON-RPC request"),
            };
            return self.own(error_response(StatusCode::BAD_REQUEST, None, code, message, None));
        };
        let id = head.id_json();
        if let Err(e) = headers::validate(&parts.headers, head) {
            tracing::debug!(method = head.method(), error = %e.message, "header validation failed");
            let refusal = error_response(StatusCode::BAD_REQUEST, id, e.code, &e.message, e.data);
            // On a retry the layer accepts an answer from the pinned route only. This refusal
            // carries nothing to seal, and the client must learn what to fix (not the layer's
            // generic "could not be relayed"), so it is reported under that route.
            return match pinned {
                Some(route) => (route.clone(), refusal),
                None => self.own(refusal),
            };
        }

        if self.traced
            && let Some(slot) = parts.extensions.remove::<Arc<TraceSlot>>()
        {
            let meta = || request_meta(&body).and_then(|raw| serde_json::from_str(raw.get()).ok());
            slot.begin(head, pinned.is_some(), meta, &mut parts.headers);
        }
        if let Some(limits) = &self.limits {
            let caller = self.caller(&parts);
            // A retry is counted as the call it continues (its first use is part of it); a task
            // follow-up, which runs no tool again, as a request of the principal.
            let charge = match parts.extensions.get::<Continuation>() {
                Some(c) if pinned.is_some() && c.round() > 0 => {
                    Charge::retry(c.call_method(), c.call_target(), c.envelope(), c.expires_at())
                }
                _ => Charge::call(head.method(), head.target()),
            };
            if let Err(wait) = limits.check(caller.as_ref(), charge) {
                return (Self::answering(pinned), rate_limited(id, wait));
            }
        }
        let mut body = body;
        if let Some(policy) = &self.policy {
            let permitted = match head.method() {
                "completion/complete" => self.permit_completion(policy, &parts, &body).map(|()| body),
                "subscriptions/listen" => self.permit_listen(policy, &parts, body),
                _ => Ok(body),
            };
            body = match permitted {
                Ok(body) => body,
                Err(denied) => return (Self::answering(pinned), govern::refusal(id, &denied)),
            };
        }
        if let Some(route) = pinned {
            return self.pinned(parts, head, route, body).await;
        }
        if self.policy.is_some()
            && let Some(kind) = Kind::from_list_method(head.method())
        {
            return self.list(kind, &parts, head, body).await;
        }
        if self.backends.len() == 1 {
            return self
                .forward(0, (parts.headers, parts.extensions), id, body, None)
                .await;
        }
        if id.is_none() {
            // 2026-07-28 defines no client notification over HTTP; there is no one backend to
            // give one to.
            return self.own(body::accepted());
        }
        match head.method() {
            "tools/call" => self.named(Kind::Tools, parts, head, body).await,
            "prompts/get" => self.named(Kind::Prompts, parts, head, body).await,
            "resources/read" => self.resource(parts, head, body).await,
            "server/discover" => self.discover(&parts, head, body).await,
            "completion/complete" => self.completion(parts, head, body).await,
            "subscriptions/listen" => self.listen(parts, head, body).await,
            method => match Kind::from_list_method(method) {
                Some(kind) => self.list(kind, &parts, head, body).await,
                None => self.own(error_response(
                    StatusCode::NOT_FOUND,
                    id,
                    METHOD_NOT_FOUND,
                    &format!("Method not found: {method}"),
                    None,
                )),
            },
        }
    }

    /// Forwards to backend `index` with the client's `headers` (filtered by the forwarder) and
    /// the request's `extensions` (a legacy client's [`ClientAsks`]),
    /// replacing the string at `rename.0` by `rename.1` (and `Mcp-Name` with it when the path is
    /// `params.name`). `id` is the request's, for errors.
    async fn forward(
        &self,
        index: usize,
        (mut headers, extensions): (HeaderMap, Extensions),
        id: Option<&str>,
        body: Bytes,
        rename: Option<(&[&str], &str)>,
    ) -> Routed {
        let backend = &self.backends[index];
        let body = match rename {
            None => body,
            Some((path, original)) => {
                let Some(body) = jsonrpc::rename_path(&body, path, original) else {
                    return self.own(invalid_params(id, "Invalid params"));
                };
                if path == ["params", "name"] {
                    match encode_header_value(original) {
                        Some(value) => headers.insert(MCP_NAME, value),
                        None => return self.own(invalid_params(id, "Invalid name")),
                    };
                }
                body
            }
        };
        let relayed = if StdioBackends::serves(backend) {
            let principal = self.principal(&headers, &extensions);
            self.stdio
                .relay(backend, &headers, id, body, principal.as_deref())
                .await
        } else if LegacyBackends::speaks_legacy(backend) {
            let principal = self.principal(&headers, &extensions);
            let asks = extensions.get::<ClientAsks>();
            self.legacy
                .relay(
                    &self.forwarder,
                    backend,
                    headers,
                    id,
                    body,
                    principal.as_deref(),
                    asks,
                )
                .await
        } else {
            self.forwarder.relay(backend, headers, id, body).await
        };
        match relayed {
            Ok(response) => (backend.route().clone(), response),
            Err(error) => {
                tracing::warn!(backend = backend.name(), %error, "backend unavailable");
                let message = format!("Backend {:?} is unavailable", backend.name());
                (
                    backend.route().clone(),
                    error_response(StatusCode::BAD_GATEWAY, id, INTERNAL_ERROR, &message, None),
                )
            }
        }
    }

    /// An MRTR retry: it must reach the backend that minted the state.
    async fn pinned(&self, parts: Parts, head: &McpRequestHead, route: &Route, body: Bytes) -> Routed {
        let Some(index) = self.backends.iter().position(|b| b.route() == route) else {
            tracing::info!(backend = %route, "retry pinned to a backend that is no longer configured");
            let message = format!(
                "The backend {:?} that started this request is no longer configured; start the request again without requestState",
                route.as_str()
            );
            return (route.clone(), invalid_params(head.id_json(), &message));
        };
        if let Err(denied) = self.permit_follow_up(&parts, head, index, &body).await {
            return (route.clone(), govern::refusal(head.id_json(), &denied));
        }
        let kind = match head.method() {
            "tools/call" => Some(Kind::Tools),
            "prompts/get" => Some(Kind::Prompts),
            _ => None,
        };
        // With one backend nothing is exposed prefixed, so a name without this backend's prefix
        // is its own; one with it may have been exposed so by a replica with more backends.
        let prefix = |name: &str| {
            name.strip_prefix(self.backends[index].name())
                .is_some_and(|rest| rest.starts_with(catalog::SEPARATOR))
        };
        let exposed = head
            .target()
            .filter(|name| self.backends.len() > 1 || prefix(name));
        let (Some(kind), Some(exposed)) = (kind, exposed) else {
            return self
                .forward(
                    index,
                    (parts.headers, parts.extensions),
                    head.id_json(),
                    body,
                    None,
                )
                .await;
        };
        // The envelope pins the backend; the name is the one the client used in the first round,
        // which may have gained or lost its `<backend>__` prefix since (a backend added or
        // removed in between). Only the pinned backend's own listing says which of its names it
        // is: a replica that has not listed it lists it first, and a name still unknown there is
        // refused, never guessed.
        let mut original = self.pinned_name(kind, index, exposed);
        if original.is_none() {
            self.refresh(&[kind], &parts, &body).await;
            original = self.pinned_name(kind, index, exposed);
        }
        let Some(original) = original else {
            let what = if kind == Kind::Tools { "tool" } else { "prompt" };
            let message = format!(
                "Unknown {what} {exposed:?} on the backend {:?} that started this request; start the request again without requestState",
                route.as_str()
            );
            return (route.clone(), invalid_params(head.id_json(), &message));
        };
        if let Err(denied) = self.permit_named(&parts, head, exposed, (index, &original)) {
            return (route.clone(), govern::refusal(head.id_json(), &denied));
        }
        let rename = (original != exposed).then_some((&["params", "name"][..], original.as_str()));
        self.forward(
            index,
            (parts.headers, parts.extensions),
            head.id_json(),
            body,
            rename,
        )
        .await
    }

    /// The name backend `index` gives the tool or prompt a pinned retry calls `exposed`: what
    /// the catalog exposes under that name today if it is this backend's, else the backend's
    /// own name `exposed` (exposed unprefixed in the first round), else `<backend>__<name>`'s
    /// `name` (exposed prefixed then); each only if the backend listed it.
    fn pinned_name(&self, kind: Kind, index: usize, exposed: &str) -> Option<String> {
        if let Some((backend, original)) = self.catalog.resolve_name(kind, exposed)
            && backend == index
        {
            return Some(original);
        }
        if self.catalog.offers(kind, index, exposed) {
            return Some(exposed.to_owned());
        }
        let own = exposed
            .strip_prefix(self.backends[index].name())
            .and_then(|rest| rest.strip_prefix(catalog::SEPARATOR))?;
        self.catalog.offers(kind, index, own).then(|| own.to_owned())
    }

    /// `tools/call` or `prompts/get` with several backends.
    async fn named(&self, kind: Kind, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let Some(exposed) = head.target() else {
            return self.own(invalid_params(id, "Missing params.name"));
        };
        let mut resolved = self
            .catalog
            .resolve_name(kind, exposed)
            .filter(|_| self.catalog.fresh_since(kind).is_some());
        if resolved.is_none() {
            self.refresh(&[kind], &parts, &body).await;
            resolved = self.catalog.resolve_name(kind, exposed);
        }
        let Some((index, original)) = resolved else {
            let what = if kind == Kind::Tools { "tool" } else { "prompt" };
            return self.own(invalid_params(id, &format!("Unknown {what}: {exposed}")));
        };
        if let Err(denied) = self.permit_named(&parts, head, exposed, (index, &original)) {
            return self.own(govern::refusal(id, &denied));
        }
        let rename = (original != exposed).then_some((&["params", "name"][..], original.as_str()));
        self.forward(index, (parts.headers, parts.extensions), id, body, rename)
            .await
    }

    /// `resources/read` with several backends: by the URI's owner.
    async fn resource(&self, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let Some(uri) = head.target() else {
            return self.own(invalid_params(id, "Missing params.uri"));
        };
        let fresh = self.catalog.fresh_since(Kind::Resources).is_some()
            && self.catalog.fresh_since(Kind::Templates).is_some();
        let mut owner = self.catalog.resolve_uri(uri).filter(|_| fresh);
        if owner.is_none() {
            self.refresh(&[Kind::Resources, Kind::Templates], &parts, &body)
                .await;
            owner = self.catalog.resolve_uri(uri);
        }
        match owner {
            Some(index) => {
                self.forward(index, (parts.headers, parts.extensions), id, body, None)
                    .await
            }
            None => self.own(error_response(
                StatusCode::OK,
                id,
                INVALID_PARAMS,
                "Resource not found",
                Some(serde_json::json!({ "uri": uri })),
            )),
        }
    }

    /// `subscriptions/listen` with several backends (one on task handles is pinned before this):
    /// a filter of one backend's resources alone goes to that backend and its stream passes
    /// through; any other is asked of every backend it concerns (each in its kind and era) and
    /// their streams are merged (`route/listen.rs`).
    async fn listen(&self, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let Some(filter) = request_params(&body)
            .and_then(|p| p.get("notifications").map(|n| n.get().to_owned()))
            .and_then(|n| serde_json::from_str::<serde_json::Map<String, Value>>(&n).ok())
        else {
            return self.own(invalid_params(id, "Missing params.notifications"));
        };
        let uris: Vec<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_owned))
            .collect();
        let resolve = |catalog: &Catalog| -> Vec<Option<usize>> {
            uris.iter().map(|uri| catalog.resolve_uri(uri)).collect()
        };
        let mut owners = resolve(&self.catalog);
        if owners.iter().any(Option::is_none) {
            self.refresh(&[Kind::Resources, Kind::Templates], &parts, &body)
                .await;
            owners = resolve(&self.catalog);
        }
        if let Some(unknown) = owners.iter().position(Option::is_none) {
            return self.own(error_response(
                StatusCode::OK,
                id,
                INVALID_PARAMS,
                "Resource not found",
                Some(serde_json::json!({ "uri": uris[unknown] })),
            ));
        }
        let owners: Vec<usize> = owners.into_iter().flatten().collect();
        if let Some(index) = owners.first()
            && resources_alone(&filter)
            && owners.iter().all(|o| o == index)
        {
            return self
                .forward(*index, (parts.headers, parts.extensions), id, body, None)
                .await;
        }
        let mut asked = Vec::new();
        for index in 0..self.backends.len() {
            let mine: Vec<String> = uris
                .iter()
                .zip(&owners)
                .filter(|(_, owner)| **owner == index)
                .map(|(uri, _)| uri.clone())
                .collect();
            let Some(narrowed) = listen::filter_for(&filter, &mine)
                .and_then(|f| serde_json::value::to_raw_value(&f).ok())
                .and_then(|f| jsonrpc::set_param(&body, "notifications", f))
            else {
                continue;
            };
            asked.push((index, narrowed));
        }
        if asked.is_empty() {
            return self.own(invalid_params(
                id,
                "No backend offers what this subscription asks for",
            ));
        }
        // Each backend in its kind and era; one that cannot be reached answers with an error,
        // which the merge leaves out as a refusal.
        let mut answers = join_all(asked.iter().map(|(index, narrowed)| {
            let head = (parts.headers.clone(), parts.extensions.clone());
            self.forward(*index, head, id, narrowed.clone(), None)
        }))
        .await;
        if answers.len() == 1 {
            return answers.remove(0);
        }
        let streams = answers.into_iter().map(|(_, answer)| answer).collect();
        match listen::merge(streams, self.forwarder.response_timeout()).await {
            Ok(merged) => self.own(merged),
            Err(Some(refusal)) => self.own(refusal),
            Err(None) => self.own(error_response(
                StatusCode::BAD_GATEWAY,
                id,
                INTERNAL_ERROR,
                "No backend could answer",
                None,
            )),
        }
    }

    /// `completion/complete` with several backends: by the prompt or resource it completes for.
    async fn completion(&self, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        #[derive(Deserialize)]
        struct Message {
            params: Params,
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "ref")]
            reference: Reference,
        }
        #[derive(Deserialize)]
        struct Reference {
            #[serde(rename = "type")]
            kind: String,
            name: Option<String>,
            uri: Option<String>,
        }
        let id = head.id_json();
        let Ok(message) = serde_json::from_slice::<Message>(&body) else {
            return self.own(invalid_params(id, "Invalid params.ref"));
        };
        let reference = message.params.reference;
        match (reference.kind.as_str(), reference.name, reference.uri) {
            ("ref/prompt", Some(exposed), _) => {
                let mut resolved = self.catalog.resolve_name(Kind::Prompts, &exposed);
                if resolved.is_none() || self.catalog.fresh_since(Kind::Prompts).is_none() {
                    self.refresh(&[Kind::Prompts], &parts, &body).await;
                    resolved = self.catalog.resolve_name(Kind::Prompts, &exposed);
                }
                match resolved {
                    Some((index, original)) => {
                        let rename = (original != exposed)
                            .then_some((&["params", "ref", "name"][..], original.as_str()));
                        self.forward(index, (parts.headers, parts.extensions), id, body, rename)
                            .await
                    }
                    None => self.own(invalid_params(id, &format!("Unknown prompt: {exposed}"))),
                }
            }
            ("ref/resource", _, Some(uri)) => {
                let mut owner = self.catalog.resolve_uri(&uri);
                if owner.is_none() {
                    self.refresh(&[Kind::Resources, Kind::Templates], &parts, &body)
                        .await;
                    owner = self.catalog.resolve_uri(&uri);
                }
                match owner {
                    Some(index) => {
                        self.forward(index, (parts.headers, parts.extensions), id, body, None)
                            .await
                    }
                    None => self.own(invalid_params(id, "Resource not found")),
                }
            }
            _ => self.own(invalid_params(id, "Invalid params.ref")),
        }
    }

    /// A `*/list` call with several backends: every page of every backend, merged.
    async fn list(&self, kind: Kind, parts: &Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        if request_cursor(&body).is_some() {
            // The merged list is always one page, so no cursor the gateway handed out exists.
            return self.own(invalid_params(id, "Invalid cursor"));
        }
        let outcomes = self.list_all(kind, &parts.headers, &parts.extensions, body).await;
        let names = self.record(kind, &outcomes);
        let mut listings = Vec::new();
        let mut failures = Vec::new();
        for (index, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Ok(listing) => listings.push((index, listing)),
                Err(failure) => failures.push((index, failure)),
            }
        }
        if listings.is_empty() {
            return self.own(self.all_failed(id, failures));
        }
        for (index, failure) in &failures {
            tracing::warn!(backend = self.backends[*index].name(), method = kind.list_method(), %failure, "left out of the merged list");
        }
        let result = match &self.policy {
            Some(policy) => {
                let caller =
                    policy::caller_of(&parts.extensions, &parts.headers, self.principal_header.as_ref());
                let keep = |item: catalog::Item<'_>| {
                    let origin = KnownOrigin::new(self.backends[item.backend].name(), item.key);
                    let subject = match kind {
                        Kind::Tools | Kind::Prompts => Subject::Named {
                            thing: kind.thing(),
                            exposed: item.exposed,
                            origin: Some(origin.as_origin()),
                        },
                        Kind::Resources => Subject::Uri(item.key),
                        Kind::Templates => Subject::Template(item.key),
                    };
                    policy.allows(caller.as_ref(), &subject)
                };
                catalog::merge_listings(kind, &names, &listings, &self.server_info, Some(&keep))
            }
            None => catalog::merge_listings(kind, &names, &listings, &self.server_info, None),
        };
        self.own(success(id, &result))
    }

    /// `server/discover` with several backends.
    async fn discover(&self, parts: &Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let answers = join_all(
            self.backends
                .iter()
                .map(|backend| self.exchange(backend, &parts.headers, &parts.extensions, body.clone())),
        )
        .await;
        let mut results = Vec::new();
        let mut failures = Vec::new();
        for (index, answer) in answers.into_iter().enumerate() {
            let backend = self.backends[index].name();
            match answer {
                Ok(answer) => match answer
                    .result()
                    .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                {
                    Some(result) => results.push((backend, result)),
                    None => failures.push((index, Failure::Answer(answer))),
                },
                Err(error) => failures.push((index, Failure::Unavailable(error))),
            }
        }
        if results.is_empty() {
            return self.own(self.all_failed(id, failures));
        }
        for (index, failure) in &failures {
            tracing::warn!(backend = self.backends[*index].name(), %failure, "left out of server/discover");
        }
        let result = catalog::merge_discover(SUPPORTED_VERSIONS, &results, &self.server_info);
        self.own(success(id, &result))
    }

    /// When no backend gave a usable answer: the first backend's own JSON-RPC error (it is about
    /// the client's request), else 502.
    fn all_failed(&self, id: Option<&str>, failures: Vec<(usize, Failure)>) -> Response<ProxyBody> {
        for (_, failure) in &failures {
            if let Failure::Answer(answer) = failure
                && let (true, Some(message)) = (answer.is_error(), answer.message.clone())
            {
                return body::json(answer.status, message);
            }
        }
        for (index, failure) in &failures {
            tracing::warn!(backend = self.backends[*index].name(), %failure, "backend failed");
        }
        error_response(
            StatusCode::BAD_GATEWAY,
            id,
            INTERNAL_ERROR,
            "No backend could answer",
            None,
        )
    }

    /// Every backend's full listing of `kind`, in configuration order.
    async fn list_all(
        &self,
        kind: Kind,
        headers: &HeaderMap,
        extensions: &Extensions,
        body: Bytes,
    ) -> Vec<Result<Listing, Failure>> {
        join_all(
            (0..self.backends.len())
                .map(|index| self.list_backend(index, kind, headers, extensions, body.clone())),
        )
        .await
    }

    async fn list_backend(
        &self,
        index: usize,
        kind: Kind,
        headers: &HeaderMap,
        extensions: &Extensions,
        mut body: Bytes,
    ) -> Result<Listing, Failure> {
        let backend = &self.backends[index];
        let mut listing = Listing::default();
        for _ in 0..MAX_PAGES {
            let answer = self
                .exchange(backend, headers, extensions, body.clone())
                .await
                .map_err(Failure::Unavailable)?;
            let Some(result) = answer.result().map(ToOwned::to_owned) else {
                return Err(Failure::Answer(answer));
            };
            match catalog::read_page(kind, &result, &mut listing).map_err(|()| Failure::Malformed)? {
                None => return Ok(listing),
                Some(cursor) => {
                    body = jsonrpc::set_param(&body, "cursor", cursor).ok_or(Failure::Malformed)?
                }
            }
        }
        tracing::warn!(
            backend = backend.name(),
            "more than {MAX_PAGES} pages; listing truncated"
        );
        Ok(listing)
    }

    fn record(&self, kind: Kind, outcomes: &[Result<Listing, Failure>]) -> catalog::Names {
        let listed = outcomes
            .iter()
            .map(|o| o.as_ref().ok().map(|l| catalog::item_keys(kind, &l.items)))
            .collect();
        self.catalog.record(kind, listed)
    }

    /// Re-lists `kinds` from every backend (on a catalog miss), reusing the client's `_meta` so
    /// each backend sees the same protocol version and capabilities as for the call itself.
    /// Lists `kinds` again for the catalog, as the client of `parts` (its headers, principal and,
    /// for a legacy client, its capabilities).
    async fn refresh(&self, kinds: &[Kind], parts: &Parts, body: &Bytes) {
        let client_headers = &parts.headers;
        let requested = Instant::now();
        let meta = request_meta(body);
        for &kind in kinds {
            let _one_at_a_time = self.catalog.refresh_lock(kind).await;
            if self
                .catalog
                .refreshed_at(kind)
                .is_some_and(|at| at >= requested || at.elapsed() < MIN_REFRESH_INTERVAL)
            {
                continue; // someone refreshed while we waited, or very recently
            }
            let mut list_body = format!(
                r#"{{"jsonrpc":"2.0","id":"mrtr-gateway-catalog","method":"{}","params":{{"#,
                kind.list_method()
            );
            if let Some(meta) = &meta {
                list_body.push_str(r#""_meta":"#);
                list_body.push_str(meta.get());
            }
            list_body.push_str("}}");
            let mut headers = client_headers.clone();
            headers.insert(MCP_METHOD, HeaderValue::from_static(kind.list_method()));
            headers.remove(MCP_NAME);
            let params: Vec<_> = headers
                .keys()
                .filter(|k| k.as_str().starts_with("mcp-param-"))
                .cloned()
                .collect();
            for name in params {
                headers.remove(name);
            }
            let outcomes = self
                .list_all(kind, &headers, &parts.extensions, Bytes::from(list_body))
                .await;
            for (index, outcome) in outcomes.iter().enumerate() {
                if let Err(failure) = outcome {
                    tracing::warn!(backend = self.backends[index].name(), method = kind.list_method(), %failure, "catalog refresh failed");
                }
            }
            self.record(kind, &outcomes);
        }
    }
}

/// A JSON-RPC error as an HTTP response with the given status.
fn error_response(
    status: StatusCode,
    id: Option<&str>,
    code: i64,
    message: &str,
    data: Option<serde_json::Value>,
) -> Response<ProxyBody> {
    body::json(status, error_body(id, code, message, data))
}

/// The answer over a rate limit: 429, `Retry-After` in whole seconds (rounded up, at least 1:
/// a client that waits that long finds a token), and a JSON-RPC error.
fn rate_limited(id: Option<&str>, wait: Duration) -> Response<ProxyBody> {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let seconds = seconds.max(1);
    let mut response = error_response(
        StatusCode::TOO_MANY_REQUESTS,
        id,
        INVALID_REQUEST,
        &format!("Rate limit reached; retry in {seconds} s"),
        None,
    );
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

fn invalid_params(id: Option<&str>, message: &str) -> Response<ProxyBody> {
    error_response(StatusCode::OK, id, INVALID_PARAMS, message, None)
}

fn success(id: Option<&str>, result: &Value) -> Response<ProxyBody> {
    let id = id.unwrap_or("null");
    body::json(
        StatusCode::OK,
        Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)),
    )
}

/// `params` of a request body, member by member.
fn request_params(body: &[u8]) -> Option<RawObject> {
    let message: RawObject = serde_json::from_slice(body).ok()?;
    serde_json::from_str(message.get("params")?.get()).ok()
}

/// Whether a `subscriptions/listen` filter (`params.notifications`) asks for resource
/// subscriptions and nothing else (every other category absent or `false`).
fn resources_alone(filter: &serde_json::Map<String, Value>) -> bool {
    filter.iter().all(|(key, value)| match key.as_str() {
        "resourceSubscriptions" => value.as_array().is_some_and(|uris| !uris.is_empty()),
        _ => value == &Value::Bool(false),
    }) && filter.contains_key("resourceSubscriptions")
}

fn request_cursor(body: &[u8]) -> Option<Box<RawValue>> {
    request_params(body)?
        .get("cursor")
        .filter(|c| c.get() != "null")
        .map(ToOwned::to_owned)
}

fn request_meta(body: &[u8]) -> Option<Box<RawValue>> {
    request_params(body)?.get("_meta").map(ToOwned::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_filter_of_resources_alone_is_told_from_any_other() {
        let filter = |text: &str| serde_json::from_str::<serde_json::Map<String, Value>>(text).unwrap();
        assert!(resources_alone(&filter(
            r#"{"resourceSubscriptions":["a://1","b://2"],"toolsListChanged":false}"#
        )));
        for other in [
            r#"{"resourceSubscriptions":["a://1"],"toolsListChanged":true}"#,
            r#"{"resourceSubscriptions":[]}"#,
            r#"{"taskIds":["t"]}"#,
            r#"{"toolsListChanged":false}"#,
            r#"{}"#,
        ] {
            assert!(!resources_alone(&filter(other)), "{other}");
        }
    }
}
