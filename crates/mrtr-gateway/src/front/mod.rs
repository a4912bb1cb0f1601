//! The client side: what every request meets before the MCP stack (the accept loop that
//! serves it is `serve/`). The HTTP layers ([`http_layers`]), the `Origin`, `Host` and
//! media-type checks ([`origin`]), load shedding ([`shed`]), request-body deadlines
//! ([`deadline`]) and request metrics ([`metrics`]).
//! Imports `auth`, `observe` and the ground floor; the MCP stack behind it is a type parameter, so the
//! only names it takes from the stages below are `route`'s [`GATEWAY_ROUTE`](crate::route::GATEWAY_ROUTE).
//!
//! [`Front`] ([`FrontLayer`]) applies them to a request, in order: the headers its
//! `Connection` lists removed (they were for this hop; removed later, a header the layer had
//! bound would not reach the backend), [load shedding](shed) (503 over the in-flight limit), the [`Guard`](origin) (`Origin`, `Host`, POST media types; 403,
//! 415, 406), then the path: every request to [`MCP_PATH`] (and to the legacy-era path, when one
//! is served) goes to the MCP stack, with a body
//! [deadline], after the bearer token when the gateway is an OAuth resource server
//! ([`crate::auth`], whose metadata is served at its well-known path here too); any other path
//! gets 404; every answer gets an [access log](crate::observe::access) line.
//!
//! Written by hand rather than with a router because it is the hot path of every request: the
//! checks read headers in place, and the MCP stack's future and body are used as they are (no
//! boxing). A new front door (another path) is one more arm in [`Front::call`].

pub(crate) mod deadline;
pub(crate) mod http_layers;
pub(crate) mod metrics;
pub(crate) mod origin;
pub(crate) mod shed;

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures_util::TryFutureExt;
use futures_util::future::{Either as EitherFuture, MapOk};
use http::{HeaderMap, HeaderName, Request, Response, StatusCode, header};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use self::deadline::BodyDeadline;
use self::origin::Guard;
use self::shed::{Admission, LoadShed};
use crate::audit::Audit;
use crate::auth::resource::Check;
use crate::auth::{Authenticator, Caller, principal};
use crate::observe::access;
use crate::observe::trace::{RequestTrace, Traces};

/// The path the gateway serves MCP at.
pub const MCP_PATH: &str = "/mcp";

/// The body of every answer of [`Front`]: the MCP stack's `R`, or the front's own refusal.
pub type FrontBody<R> = Either<R, Full<Bytes>>;

/// Puts the front before an MCP stack: load shedding, the `Origin`, `Host` and media-type
/// checks, the path (`/mcp`, else 404), the request-body deadline and the access log line.
#[derive(Clone, Debug)]
pub struct FrontLayer {
    guard: Arc<Guard>,
    shed: LoadShed,
    body_timeout: Duration,
    /// The resource server in use (a config reload replaces it).
    auth: Option<Arc<ArcSwap<Authenticator>>>,
    principal: Option<HeaderName>,
    traces: Option<Arc<Traces>>,
    audit: Option<Arc<Audit>>,
    legacy_era_path: Option<Arc<str>>,
}

impl FrontLayer {
    /// Checks requests with `guard`, sheds over `shed`'s limit, and gives request bodies
    /// `body_timeout` once they have to be waited for.
    pub(crate) fn new(guard: Guard, shed: LoadShed, body_timeout: Duration) -> Self {
        Self {
            guard: Arc::new(guard),
            shed,
            body_timeout,
            auth: None,
            principal: None,
            traces: None,
            audit: None,
            legacy_era_path: None,
        }
    }

    /// Checks every request to `/mcp` with the OAuth resource server `auth` (after the guard),
    /// and serves its metadata at the well-known path.
    pub(crate) fn authenticate(mut self, auth: Option<Arc<ArcSwap<Authenticator>>>) -> Self {
        self.auth = auth;
        self
    }

    /// Takes every request's principal from the `header` an authenticating proxy sets
    /// (`--principal-header`; not with `[oauth]`, which sets its own): a request to `/mcp` whose
    /// header is missing, repeated, empty or unreadable is refused with `403` (`auth/principal.rs`),
    /// the others carry a [`Caller`] of that principal.
    pub(crate) fn require_principal(mut self, header: Option<HeaderName>) -> Self {
        self.principal = header;
        self
    }

    /// Gives every request to `/mcp` a span exported by `traces` (`observe/trace.rs`).
    pub(crate) fn traced(mut self, traces: Option<Arc<Traces>>) -> Self {
        self.traces = traces;
        self
    }

    /// Reports the requests refused for their caller (a bearer token, the principal header) to
    /// the audit trail.
    pub(crate) fn audited(mut self, audit: Option<Arc<Audit>>) -> Self {
        self.audit = audit;
        self
    }

    /// Serves `path` (`legacy-era-path`) as it serves `/mcp`: the stack behind, whose legacy
    /// front declines modern requests there.
    pub(crate) fn legacy_era_path(mut self, path: Option<Arc<str>>) -> Self {
        self.legacy_era_path = path;
        self
    }
}

impl<S> Layer<S> for FrontLayer {
    type Service = Front<S>;

    fn layer(&self, mcp: S) -> Front<S> {
        Front {
            guard: self.guard.clone(),
            shed: self.shed.clone(),
            body_timeout: self.body_timeout,
            auth: self.auth.clone(),
            principal: self.principal.clone(),
            traces: self.traces.clone(),
            audit: self.audit.clone(),
            legacy_era_path: self.legacy_era_path.clone(),
            mcp,
        }
    }
}

/// The front before the MCP stack `S` ([`FrontLayer`] says what it does). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Front<S> {
    guard: Arc<Guard>,
    shed: LoadShed,
    body_timeout: Duration,
    /// The resource server in use (a config reload replaces it).
    auth: Option<Arc<ArcSwap<Authenticator>>>,
    principal: Option<HeaderName>,
    traces: Option<Arc<Traces>>,
    audit: Option<Arc<Audit>>,
    /// The legacy-era path, served as `/mcp` is.
    legacy_era_path: Option<Arc<str>>,
    mcp: S,
}

type ToFront<R> = fn(Response<R>) -> Response<FrontBody<R>>;

/// An answer that is ready, or (rarely: a token naming a key the gateway must read first) one
/// that waits for the issuer's keys before the MCP stack is called.
type OwnFuture<R> = EitherFuture<
    Ready<Result<Response<FrontBody<R>>, Infallible>>,
    Pin<Box<dyn Future<Output = Result<Response<FrontBody<R>>, Infallible>> + Send>>,
>;

pin_project! {
    /// The future of [`Front`]: an answer of the front's own, or the MCP stack's (`F`); it
    /// writes the access log line and frees the request's place ([`shed`]) when it is ready.
    pub struct FrontFuture<F, R> {
        #[pin]
        answer: EitherFuture<OwnFuture<R>, MapOk<F, ToFront<R>>>,
        admission: Option<Admission>,
        entry: access::Entry,
        trace: RequestTrace,
    }
}

impl<F, R> Future for FrontFuture<F, R>
where
    F: Future<Output = Result<Response<R>, Infallible>>,
{
    type Output = Result<Response<FrontBody<R>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.answer.poll(cx));
        if let Ok(response) = &output {
            this.entry.finish(response, this.trace.trace_id().as_deref());
            this.trace.finish(response);
        }
        this.admission.take();
        Poll::Ready(output)
    }
}

impl<S> Front<S> {
    /// Leaves the principal header's principal on `request` as its [`Caller`]; the refusal when
    /// the header does not read to one principal (audited here; answered by [`no_principal`]).
    fn read_principal<B>(&self, request: &mut Request<B>) -> Result<(), principal::Unreadable> {
        let Some(name) = &self.principal else {
            return Ok(());
        };
        match principal::read(request.headers(), name) {
            Ok(principal) => {
                request
                    .extensions_mut()
                    .insert(Caller::from_principal(&principal));
                Ok(())
            }
            Err(unreadable) => {
                if let Some(audit) = &self.audit {
                    audit.refused_at_front(request, principal_label(&unreadable), StatusCode::FORBIDDEN);
                }
                Err(unreadable)
            }
        }
    }
}

impl<S, B, R> Service<Request<B>> for Front<S>
where
    S: Service<Request<BodyDeadline<B>>, Response = Response<R>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    R: 'static,
{
    type Response = Response<FrontBody<R>>;
    type Error = Infallible;
    type Future = FrontFuture<S::Future, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Always ready today (the proxy applies no backpressure; overload is shed in `call`),
        // but the layer's contract is that `call` follows a ready `poll_ready`.
        self.mcp.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // Before anything reads them: what the layer binds must be what the backend gets.
        remove_connection_options(request.headers_mut());
        let entry = access::Entry::start(&request);
        let own = |mut response: Response<Full<Bytes>>, entry, close: bool| {
            if close {
                close_connection(&mut response);
            }
            FrontFuture {
                answer: EitherFuture::Left(EitherFuture::Left(ready(Ok(response.map(Either::Right))))),
                admission: None,
                entry,
                trace: RequestTrace::none(),
            }
        };
        let Some(admission) = self.shed.admit() else {
            crate::observe::metrics::shed();
            return own(shed::overloaded(), entry, unread_body(&request));
        };
        if let Err(refusal) = self.guard.check(&request) {
            return own(refusal.into_response(), entry, unread_body(&request));
        }
        // Read once: the request is checked by the resource server in use when it came.
        let auth = self.auth.as_ref().map(|cell| cell.load_full());
        let path = request.uri().path();
        if path != MCP_PATH && self.legacy_era_path.as_deref() != Some(path) {
            if let Some(auth) = &auth
                && auth.is_metadata_path(request.uri().path())
            {
                return own(auth.metadata(request.method()), entry, unread_body(&request));
            }
            let mut not_found = Response::new(Full::new(Bytes::new()));
            *not_found.status_mut() = StatusCode::NOT_FOUND;
            return own(not_found, entry, unread_body(&request));
        }
        let to_front: ToFront<R> = |response| response.map(Either::Left);
        let timeout = self.body_timeout;
        let trace = RequestTrace::start(self.traces.as_ref(), &mut request);
        if let Err(unreadable) = self.read_principal(&mut request) {
            let close = unread_body(&request);
            return FrontFuture {
                trace,
                ..own(no_principal(unreadable), entry, close)
            };
        }
        if let Some(auth) = &auth {
            match auth.check(&mut request, false) {
                Check::Passed => {}
                Check::Refused(refusal) => {
                    if let Some(audit) = &self.audit {
                        audit.refused_at_front(&request, auth_label(refusal.status()), refusal.status());
                    }
                    let close = unread_body(&request);
                    return FrontFuture {
                        trace,
                        ..own(refusal, entry, close)
                    };
                }
                Check::UnknownKey(asked) => {
                    // The MCP stack that was made ready goes with the request; a clone stays.
                    let clone = self.mcp.clone();
                    let mut mcp = std::mem::replace(&mut self.mcp, clone);
                    let auth = auth.clone();
                    let audit = self.audit.clone();
                    let later = async move {
                        auth.refresh(asked).await;
                        if let Check::Refused(mut refusal) = auth.check(&mut request, true) {
                            if let Some(audit) = &audit {
                                audit.refused_at_front(
                                    &request,
                                    auth_label(refusal.status()),
                                    refusal.status(),
                                );
                            }
                            if unread_body(&request) {
                                close_connection(&mut refusal);
                            }
                            return Ok(refusal.map(Either::Right));
                        }
                        let request = request.map(|body| BodyDeadline::new(body, timeout));
                        mcp.call(request).await.map(to_front)
                    };
                    return FrontFuture {
                        answer: EitherFuture::Left(EitherFuture::Right(Box::pin(later))),
                        admission: Some(admission),
                        entry,
                        trace,
                    };
                }
            }
        }
        let request = request.map(|body| BodyDeadline::new(body, timeout));
        FrontFuture {
            answer: EitherFuture::Right(self.mcp.call(request).map_ok(to_front)),
            admission: Some(admission),
            entry,
            trace,
        }
    }
}

/// Removes the headers a request's `Connection` lists (they are meant for this hop alone, RFC
/// 9110 §7.6.1) and `Connection` itself, as the request arrives: a header the MRTR layer binds
/// (the principal) or checks against the body (`Mcp-Name`) must then be one the backend gets,
/// where removing it on the way out would let a client be bound to what the backend never sees.
fn remove_connection_options(headers: &mut HeaderMap) {
    if !headers.contains_key(header::CONNECTION) {
        return;
    }
    let mut keep_alive = false;
    let mut listed: Vec<HeaderName> = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        for option in value.to_str().unwrap_or_default().split(',').map(str::trim) {
            // The usual options, `close` and `keep-alive`, need no list (and `close` names no
            // header).
            if option.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            } else if !option.is_empty() && !option.eq_ignore_ascii_case("close") {
                listed.extend(HeaderName::from_bytes(option.as_bytes()).ok());
            }
        }
    }
    headers.remove(header::CONNECTION);
    if keep_alive {
        headers.remove("keep-alive");
    }
    for name in listed {
        headers.remove(name);
    }
}

/// Whether answering `request` now leaves a body of it unread on an HTTP/1 connection. hyper
/// then reads on only if the rest of the body has already arrived, else closes the connection
/// after the answer, and a client that sends its next request on it meanwhile sees the
/// connection drop without an answer (the Python SDK did, after the resource server's 401).
fn unread_body<B>(request: &Request<B>) -> bool {
    let headers = request.headers();
    request.version() < http::Version::HTTP_2
        && (headers.contains_key(http::header::TRANSFER_ENCODING)
            || headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|len| len.as_bytes() != b"0"))
}

/// The refusal of a request without a readable principal: `403` and one JSON-RPC error, the
/// reason in the log and `mrtr_gateway_auth_refused_total{reason="principal_…"}`.
fn no_principal(unreadable: principal::Unreadable) -> Response<Full<Bytes>> {
    tracing::debug!(reason = unreadable.reason(), "request refused: {unreadable}");
    crate::observe::metrics::auth_refused(principal_label(&unreadable));
    let message = format!("Forbidden: {unreadable}");
    let mut response = Response::new(Full::new(crate::jsonrpc::error_body(
        None,
        tower_mrtr::error::INVALID_REQUEST,
        &message,
        None,
    )));
    *response.status_mut() = StatusCode::FORBIDDEN;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The label of a principal header that could not be read (metrics, the audit trail).
fn principal_label(unreadable: &principal::Unreadable) -> &'static str {
    match unreadable {
        principal::Unreadable::Missing => "principal_missing",
        principal::Unreadable::Repeated => "principal_repeated",
        principal::Unreadable::Empty => "principal_empty",
        principal::Unreadable::Undecodable => "principal_undecodable",
    }
}

/// The audit trail's label of the resource server's refusal: 401 (no token, or one that does
/// not verify) or 403 (a scope missing).
fn auth_label(status: StatusCode) -> &'static str {
    if status == StatusCode::FORBIDDEN {
        "insufficient_scope"
    } else {
        "unauthenticated"
    }
}

/// Says `Connection: close` on an answer, so that the client does not reuse the connection.
fn close_connection<B>(response: &mut Response<B>) {
    response
        .headers_mut()
        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;

    #[test]
    fn headers_named_by_connection_are_removed_as_the_request_arrives() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Authenticated-User"),
            ("connection", "mcp-name"),
            ("keep-alive", "timeout=5"),
            ("x-authenticated-user", "alice"),
            ("mcp-name", "deploy"),
            ("mcp-method", "tools/call"),
        ] {
            headers.append(k, v.parse().unwrap());
        }
        remove_connection_options(&mut headers);
        let mut kept: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["mcp-method"]);
        let mut usual = HeaderMap::new();
        usual.insert("connection", "close".parse().unwrap());
        usual.insert("mcp-name", "deploy".parse().unwrap());
        remove_connection_options(&mut usual);
        assert_eq!(usual.len(), 1, "only Connection itself goes");
    }
}
