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
//! retry or task follow-up included (keyed as the call it continues: `policy/rate.rs`). With a
//! shared store, the limits are counted for the fleet, and with its `single-use` a request state
//! presented a second time is refused `-32602` there too (`policy/fleet.rs`).

pub(crate) mod catalog;
mod fanout;
mod govern;
pub(crate) mod headers;
mod listen;
mod merged;
mod named;
pub(crate) mod pins;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use serde_json::value::RawValue;
use tower_mrtr::error::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
use tower_mrtr::mcp_headers::{MCP_NAME, encode_header_value};
use tower_mrtr::{Continuation, McpRequestHead, PinnedRoute, RequestBody, Route};
use tower_service::Service;

use self::catalog::{Catalog, Kind};
pub(crate) use self::govern::KnownOrigin;
use self::merged::MergedLists;
use self::pins::Pins;
use crate::audit::{self, CallNote};
use crate::jsonrpc::{self, RawObject, error_body};
use crate::observe::trace::TraceSlot;
use crate::policy::{self, Charge, Policy, RateLimits, Refusal};
use crate::upstream::answer::{Answer, UpstreamError};
use crate::upstream::body::{self, ProxyBody};
use crate::upstream::translate::ClientAsks;
use crate::upstream::{Backend, Client, Upstreams};

/// Route reported for answers the gateway writes itself (merged lists, its own errors). Not a
/// valid backend name, so it can never be confused with one.
pub(crate) const GATEWAY_ROUTE: &str = "@gateway";

/// The routing and forwarding service. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backends: Vec<Backend>,
    /// Every backend's door (`upstream/`).
    upstreams: Upstreams,
    /// Shared with the next configuration's when a reload keeps every backend.
    catalog: Arc<Catalog>,
    /// The last merged list of each kind (`merged.rs`).
    merged: MergedLists,
    server_info: Value,
    /// `server_info` as JSON text, as merged lists carry it.
    server_info_json: Box<str>,
    /// The header naming each request's principal, for the policy and the limits.
    principal_header: Option<HeaderName>,
    policy: Option<Arc<Policy>>,
    limits: Option<Arc<RateLimits>>,
    /// Whether requests carry a trace span to begin (`otlp-endpoint`); without, the request's
    /// extensions are not searched for one.
    traced: bool,
    /// Whether a legacy HTTP backend's requests during a call become bridged tasks (`tasks/`):
    /// its `server/discover` result then offers the Tasks extension.
    bridging: bool,
    /// Tool definitions pinned (`[pinning]`, `pins.rs`); lists are then merged by the gateway.
    pins: Option<Arc<Pins>>,
    /// Whether answers carry a [`CallNote`] for the audit trail (`[audit]`).
    audited: bool,
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
        let upstreams = Upstreams::new(&backends, response_timeout);
        Self::over(
            backends,
            upstreams,
            Arc::new(Catalog::new(names, catalog_ttl)),
            principal_header,
        )
    }

    /// The proxy of a reloaded configuration, over `backends` (at least one): the backends
    /// `kept` names keep this proxy's doors (connection pools, sessions, processes), and with
    /// `same_catalog` (the same backends, the same TTL) its catalog too; a new catalog is listed
    /// afresh, as exposed names depend on every backend. Spans, pins and the audit notes are
    /// this proxy's; give the policy and limits with [`with_access`](Self::with_access).
    pub(crate) fn reconfigured(
        &self,
        backends: Vec<Backend>,
        kept: &dyn Fn(&Backend) -> bool,
        (catalog_ttl, same_catalog): (Duration, bool),
        response_timeout: Duration,
        principal_header: Option<HeaderName>,
    ) -> Self {
        assert!(!backends.is_empty(), "a proxy needs at least one backend");
        let previous = &self.inner;
        let upstreams = Upstreams::carrying(Some(&previous.upstreams), &backends, kept, response_timeout);
        let catalog = if same_catalog {
            previous.catalog.clone()
        } else {
            let names = backends.iter().map(|b| b.name().to_owned()).collect();
            Arc::new(Catalog::new(names, catalog_ttl))
        };
        let mut next = Self::over(backends, upstreams, catalog, principal_header);
        // What needs a restart to change stays as it was.
        let inner = Arc::get_mut(&mut next.inner).expect("a new proxy");
        inner.traced = previous.traced;
        inner.bridging = previous.bridging;
        inner.pins = previous.pins.clone();
        inner.audited = previous.audited;
        next
    }

    fn over(
        backends: Vec<Backend>,
        upstreams: Upstreams,
        catalog: Arc<Catalog>,
        principal_header: Option<HeaderName>,
    ) -> Self {
        let server_info = serde_json::json!({ "name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION") });
        Self {
            inner: Arc::new(Inner {
                backends,
                upstreams,
                catalog,
                merged: MergedLists::new(),
                server_info_json: server_info.to_string().into(),
                server_info,
                principal_header,
                policy: None,
                limits: None,
                traced: false,
                bridging: false,
                pins: None,
                audited: false,
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

    /// This proxy offering the Tasks extension in a legacy HTTP backend's `server/discover`
    /// result, for the bridge in front of it (`tasks/`) when it is on.
    ///
    /// # Panics
    ///
    /// If the proxy was cloned already: call it on a new proxy.
    pub(crate) fn bridging(mut self, bridging: bool) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("bridging is called on a new proxy")
            .bridging = bridging;
        self
    }

    /// This proxy with definitions pinned (`pins.rs`) and, when `audited`, what only it knows
    /// of a call left in the answer for the audit trail ([`CallNote`]).
    ///
    /// # Panics
    ///
    /// If the proxy was cloned already: call it on a new proxy.
    pub(crate) fn accountable(mut self, pins: Option<Arc<Pins>>, audited: bool) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("accountable is called on a new proxy");
        inner.pins = pins;
        inner.audited = audited;
        self
    }

    /// The configured backends.
    pub fn backends(&self) -> &[Backend] {
        &self.inner.backends
    }

    /// The policy lists are filtered by (and the MRTR layer's check reads).
    pub(crate) fn policy(&self) -> Option<&Arc<Policy>> {
        self.inner.policy.as_ref()
    }

    /// The rate limits requests are counted against.
    pub(crate) fn limits(&self) -> Option<&Arc<RateLimits>> {
        self.inner.limits.as_ref()
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

    /// The doors to the backends (the health probe and the gateway's stop reach them).
    pub(crate) fn upstreams(&self) -> &Upstreams {
        &self.inner.upstreams
    }

    /// Counts a request the gateway answers without a backend (a bridged task's follow-up,
    /// `tasks/`) against the rate limits, as every request that reaches a backend is counted;
    /// `Err` is the refusal, to answer instead.
    pub(crate) async fn admit_answered_here(
        &self,
        parts: &Parts,
        head: &McpRequestHead,
    ) -> Result<(), Response<ProxyBody>> {
        let Some(limits) = &self.inner.limits else {
            return Ok(());
        };
        let pinned = parts.extensions.get::<PinnedRoute>().map(|p| &p.0);
        self.inner
            .admit(limits, parts, head, pinned)
            .await
            .map_err(|refusal| refused(head.id_json(), refusal))
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
            let note = inner.audited.then(|| CallNote {
                backend_target: head.as_ref().and_then(McpRequestHead::target).map(Arc::from),
                continued: parts
                    .extensions
                    .get::<Continuation>()
                    .map(|c| (c.round(), c.call_target().map(Arc::from))),
            });
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
            if let Some(mut note) = note {
                // A name restored on the way to the backend was noted by `forward`.
                if let Some(forwarded) = response.extensions_mut().remove::<CallNote>() {
                    note.backend_target = forwarded.backend_target;
                }
                response.extensions_mut().insert(note);
            }
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

type Routed = (Route, Response<ProxyBody>);

/// The kinds a resource URI is resolved against: resources, then templates.
const URIS: [Kind; 2] = [Kind::Resources, Kind::Templates];

impl Inner {
    /// A read-only request to `backend`, in its era.
    async fn exchange(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        extensions: &Extensions,
        body: Bytes,
    ) -> Result<Answer, UpstreamError> {
        let principal = self.principal(headers, extensions);
        let client = Client {
            principal: principal.as_deref(),
            asks: extensions.get::<ClientAsks>(),
        };
        self.upstreams.exchange(backend, headers, body, client).await
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

    /// What `look` finds in the catalog; when it finds nothing, or when `fresh` asks for tables
    /// of `kinds` younger than the TTL and one is not, what it finds once `kinds` are listed again
    /// (as the client of `parts`, reusing `body`'s `_meta`).
    async fn catalog<T>(
        &self,
        kinds: &[Kind],
        fresh: bool,
        parts: &Parts,
        body: &Bytes,
        look: impl Fn(&Self) -> Option<T>,
    ) -> Option<T> {
        let fresh_enough = !fresh || kinds.iter().all(|&k| self.catalog.fresh_since(k).is_some());
        if fresh_enough && let Some(found) = look(self) {
            return Some(found);
        }
        self.refresh(kinds, parts, body).await;
        look(self)
    }

    /// The answer to a body the layer found no JSON-RPC request in (it inserts a head for every
    /// request object it reads).
    fn not_a_request(&self, body: &Bytes) -> Routed {
        let (code, message) = match serde_json::from_slice::<&RawValue>(body) {
            Err(_) => (PARSE_ERROR, "Parse error: the body is not JSON"),
            Ok(raw) if raw.get().starts_with('[') => (INVALID_REQUEST, "JSON-RPC batches are not supported"),
            Ok(_) => (INVALID_REQUEST, "The body is not a JSON-RPC request"),
        };
        self.own(error_response(StatusCode::BAD_REQUEST, None, code, message, None))
    }

    /// Counts the request against `limits`, in the process or in the fleet's shared store.
    async fn admit(
        &self,
        limits: &RateLimits,
        parts: &Parts,
        head: &McpRequestHead,
        pinned: Option<&Route>,
    ) -> Result<(), Refusal> {
        let caller = self.caller(parts);
        // A retry is counted as the call it continues (its first use is part of it); a task
        // follow-up, which runs no tool again, as a request of the principal.
        let charge = match parts.extensions.get::<Continuation>() {
            Some(c) if pinned.is_some() && c.round() > 0 => {
                Charge::retry(c.call_method(), c.call_target(), c.envelope(), c.expires_at())
            }
            _ => Charge::call(head.method(), head.target()),
        };
        match limits.store() {
            None => limits.check(caller.as_ref(), charge).map_err(Refusal::Limited),
            Some(store) => limits.check_shared(store, caller.as_ref(), charge).await,
        }
    }

    /// What the policy lets through of a completion or a listen (the body, with denied resources
    /// left out of a listen); other requests are checked by the MRTR layer's `authorize`.
    fn permit(&self, parts: &Parts, head: &McpRequestHead, body: Bytes) -> Result<Bytes, tower_mrtr::Denied> {
        let Some(policy) = &self.policy else {
            return Ok(body);
        };
        match head.method() {
            "completion/complete" => self.permit_completion(policy, parts, &body).map(|()| body),
            "subscriptions/listen" => self.permit_listen(policy, parts, body),
            _ => Ok(body),
        }
    }

    async fn dispatch(
        &self,
        mut parts: Parts,
        head: Option<McpRequestHead>,
        pinned: Option<&Route>,
        body: Bytes,
    ) -> Routed {
        let Some(head) = &head else {
            return self.not_a_request(&body);
        };
        let id = head.id_json();
        if let Err(e) = headers::validate(&parts.headers, head) {
            tracing::debug!(method = head.method(), error = %e.message, "header validation failed");
            let mut refusal = error_response(StatusCode::BAD_REQUEST, id, e.code, &e.message, e.data);
            // Refused before its span began: the front names the span from it.
            refusal.extensions_mut().insert(head.clone());
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
        if let Some(limits) = &self.limits
            && let Err(refusal) = self.admit(limits, &parts, head, pinned).await
        {
            return (Self::answering(pinned), refused(id, refusal));
        }
        let body = match self.permit(&parts, head, body) {
            Ok(body) => body,
            Err(denied) => return (Self::answering(pinned), govern::refusal(id, &denied)),
        };
        if let Some(route) = pinned {
            return self.pinned(parts, head, route, body).await;
        }
        if (self.policy.is_some() || self.pins.is_some())
            && let Some(kind) = Kind::from_list_method(head.method())
        {
            return self.list(kind, &parts, head, body).await;
        }
        if self.backends.len() == 1 {
            if head.method() == "server/discover" && self.offers_bridged_tasks(0) {
                return self.discover(&parts, head, body).await;
            }
            if let (Some(kind), Some(name)) = (Kind::called(head.method()), head.target())
                && let Some(refusal) = self.withheld(kind, (0, name), (name, id), &parts, &body).await
            {
                return self.own(refusal);
            }
            if head.method() == "subscriptions/listen" {
                return self
                    .forward_listen(0, (parts.headers, parts.extensions), id, body)
                    .await;
            }
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
        let principal = self.principal(&headers, &extensions);
        let client = Client {
            principal: principal.as_deref(),
            asks: extensions.get::<ClientAsks>(),
        };
        let relayed = self.upstreams.relay(backend, headers, id, body, client).await;
        match relayed {
            Ok(mut response) => {
                if self.audited
                    && let Some((["params", "name"], original)) = rename
                {
                    response.extensions_mut().insert(CallNote {
                        backend_target: Some(Arc::from(original)),
                        continued: None,
                    });
                }
                (backend.route().clone(), response)
            }
            Err(error) => unavailable(backend, id, &error),
        }
    }
}

/// The answer to request `id` when `backend` could not be reached.
fn unavailable(backend: &Backend, id: Option<&str>, error: &UpstreamError) -> Routed {
    tracing::warn!(backend = backend.name(), %error, "backend unavailable");
    let message = format!("Backend {:?} is unavailable", backend.name());
    (
        backend.route().clone(),
        error_response(StatusCode::BAD_GATEWAY, id, INTERNAL_ERROR, &message, None),
    )
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

/// The answer to a request the limits or the shared store did not admit (`policy/fleet.rs`).
fn refused(id: Option<&str>, refusal: Refusal) -> Response<ProxyBody> {
    match refusal {
        Refusal::Limited(wait) => rate_limited(id, wait),
        // As the layer refuses a state that does not open: -32602, before any backend.
        Refusal::Replayed => {
            let mut response = invalid_params(
                id,
                "This requestState was used already (each opens once); start the call again without it",
            );
            response.extensions_mut().insert(audit::Refusal("replayed"));
            response
        }
        Refusal::StoreUnavailable => {
            let mut response = error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                INTERNAL_ERROR,
                "The gateway's shared store did not answer; retry shortly",
                None,
            );
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(1));
            response
                .extensions_mut()
                .insert(audit::Refusal("store_unavailable"));
            response
        }
    }
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
    response.extensions_mut().insert(audit::Refusal("rate_limited"));
    response
}

fn invalid_params(id: Option<&str>, message: &str) -> Response<ProxyBody> {
    error_response(StatusCode::OK, id, INVALID_PARAMS, message, None)
}

fn success(id: Option<&str>, result: &Value) -> Response<ProxyBody> {
    success_raw(id, &result.to_string())
}

/// A JSON-RPC success carrying `result`, raw JSON.
fn success_raw(id: Option<&str>, result: &str) -> Response<ProxyBody> {
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

fn request_cursor(body: &[u8]) -> Option<Box<RawValue>> {
    request_params(body)?
        .get("cursor")
        .filter(|c| c.get() != "null")
        .map(ToOwned::to_owned)
}

fn request_meta(body: &[u8]) -> Option<Box<RawValue>> {
    request_params(body)?.get("_meta").map(ToOwned::to_owned)
}
