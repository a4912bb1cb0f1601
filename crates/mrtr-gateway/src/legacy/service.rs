//! [`DualEra`]: the tower service in front of the modern MCP stack that also serves legacy
//! clients.
//!
//! A POST carrying `MCP-Protocol-Version: 2026-07-28` goes straight to the wrapped service with
//! its body untouched: that one header comparison is all a modern request pays. Everything else
//! is the legacy front's:
//!
//! | request | answer |
//! |---|---|
//! | a modern POST on the legacy-era path (`legacy-era-path`) | 400, `-32600` naming `/mcp`: SDKs negotiating the era fall back to `initialize` |
//! | POST `initialize` (2025-03-26, 2025-06-18, 2025-11-25; no or a legacy version header) | legacy `InitializeResult` from the modern `server/discover`, with a sealed `Mcp-Session-Id` |
//! | POST without `Mcp-Session-Id`, not `initialize` | the modern service, with the same bytes (so it gets the modern answers: `-32020`, `-32022`, …) |
//! | POST with a session id that does not open, or that was deleted here | 404, `Session not found` |
//! | POST with a session and a version header other than the session's | 400 |
//! | `notifications/*` | 202 |
//! | the client's answer to a server-to-client request | 202 if a call on this replica waits for it; else 400 with a JSON-RPC error naming the cause |
//! | `ping`, `logging/setLevel` | `{}` (the level is noted on this replica) |
//! | `tools/*`, `prompts/*`, `resources/list`, `resources/templates/list`, `resources/read`, `completion/complete` | relayed by the [bridge](super::bridge) |
//! | `resources/subscribe`, `resources/unsubscribe` | `{}`; served on the session's `GET` stream ([`subscriptions`](super::subscriptions)) |
//! | any other method | `-32601` |
//! | DELETE with a session id | 200, the session is ended on this replica (and its subscriptions) |
//! | GET with a session id | the session's standalone SSE stream: keep-alives and resource updates |
//! | GET without one, or any other HTTP method | 405 |

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use pin_project_lite::pin_project;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tower::ServiceExt;
use tower_mrtr::error::{
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, SESSION_NOT_FOUND,
};
use tower_mrtr::{BoxError, McpRequestHead, Route};
use tower_service::Service;

use super::answer::Modern;
use super::bridge::{Bridge, asks_for};
use super::config::LEGACY_VERSIONS;
use super::layer::DualEraLayer;
use super::lifecycle::{initialize_result, negotiate};
use super::modern::{ModernAnswer, ModernBody, ModernStack};
use super::notes::LogLevel;
use super::registry::Delivery;
use super::reply::{LegacyBody, error, full, json_answer, method_not_allowed, result, status};
use super::request::{LegacyMessage, LegacyRequest, MODERN_VERSION};
use super::session::{MCP_SESSION_ID, OpenedSession, Session};
use super::standalone::resource_uri;
use super::stream::Messages;
use crate::auth::Caller;
use crate::route::GATEWAY_ROUTE;
use crate::route::headers::MCP_PROTOCOL_VERSION;

/// Methods relayed to the modern backends.
const RELAYED: &[&str] = &[
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
];

/// Serves legacy MCP clients in front of a modern MCP service `S`, which it calls once per
/// modern round. See the [module docs](crate::legacy).
#[derive(Clone, Debug)]
pub struct DualEra<S> {
    inner: S,
    front: DualEraLayer,
}

/// [`DualEraLayer`] as a layer: the legacy front before the modern stack.
impl<S> tower_layer::Layer<S> for DualEraLayer {
    type Service = DualEra<S>;

    fn layer(&self, inner: S) -> DualEra<S> {
        DualEra::new(inner, self.clone())
    }
}

impl<S> DualEra<S> {
    /// `inner` (the modern stack) behind the legacy `front`.
    pub fn new(inner: S, front: DualEraLayer) -> Self {
        Self { inner, front }
    }
}

fn is_modern(method: &Method, headers: &http::HeaderMap) -> bool {
    method == Method::POST
        && headers
            .get(MCP_PROTOCOL_VERSION)
            .is_some_and(|v| v.as_bytes() == MODERN_VERSION.as_bytes())
}

/// The answer to a modern request `id` on the legacy-era path `path` (modern clients use
/// `main`): `400` with a JSON-RPC error for the request's id (clients match it to their probe)
/// that is none of the codes by which a client knows a modern server (`-32020` to `-32022`), so
/// that an SDK negotiating the era falls back to `initialize` (2026-07-28, HTTP transport,
/// backward compatibility).
fn declined(id: Option<&RawValue>, path: &str, main: &str) -> Response<LegacyBody> {
    error(
        StatusCode::BAD_REQUEST,
        id,
        INVALID_REQUEST,
        &format!(
            "{path} serves clients of the initialize era only: send initialize here, or 2026-07-28 requests to {main}"
        ),
    )
}

impl<S, B, RB> Service<Request<B>> for DualEra<S>
where
    S: ModernStack<B, Answer = RB>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: ModernAnswer,
{
    type Response = Response<Either<RB, LegacyBody>>;
    type Error = S::Error;
    type Future = DualEraFuture<S::Future, RB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // On the legacy-era path a modern request is the front's too: it is declined there.
        if is_modern(request.method(), request.headers()) && self.front.era_path(request.uri()).is_none() {
            return DualEraFuture::modern(self.inner.call(request.map(Either::Left)));
        }
        // `poll_ready` readied `self.inner`: hand that one to the front and keep a fresh clone.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let front = self.front.clone();
        DualEraFuture::legacy(Box::pin(async move { Ok(front.handle(inner, request).await) }))
    }
}

type LegacyFuture<RB, E> = Pin<Box<dyn Future<Output = Result<Response<Either<RB, LegacyBody>>, E>> + Send>>;

pin_project! {
    /// The future of [`DualEra`]: the modern service's own, or the legacy front's.
    pub struct DualEraFuture<F, RB, E> {
        #[pin]
        kind: Kind<F, RB, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, RB, E> {
        Modern { #[pin] future: F },
        Legacy { future: LegacyFuture<RB, E> },
    }
}

impl<F, RB, E> DualEraFuture<F, RB, E> {
    fn modern(future: F) -> Self {
        Self {
            kind: Kind::Modern { future },
        }
    }

    fn legacy(future: LegacyFuture<RB, E>) -> Self {
        Self {
            kind: Kind::Legacy { future },
        }
    }
}

impl<F, RB, E> std::fmt::Debug for DualEraFuture<F, RB, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            Kind::Modern { .. } => "DualEraFuture::Modern",
            Kind::Legacy { .. } => "DualEraFuture::Legacy",
        })
    }
}

impl<F, RB, E> Future for DualEraFuture<F, RB, E>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = Result<Response<Either<RB, LegacyBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Modern { future } => Poll::Ready(ready!(future.poll(cx)).map(|r| r.map(Either::Left))),
            KindProj::Legacy { future } => future.as_mut().poll(cx),
        }
    }
}

fn legacy<RB>(response: Response<LegacyBody>) -> Response<Either<RB, LegacyBody>> {
    response.map(Either::Right)
}

/// What a legacy message names (its method, id and `params.name` or `params.uri`), as the
/// MRTR layer's head of a modern request: the access line and the span read no body and a
/// legacy request has no `Mcp-Method` or `Mcp-Name`.
fn head_of(message: &LegacyMessage) -> Option<McpRequestHead> {
    #[derive(Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uri: Option<Cow<'a, str>>,
    }
    let mut head = McpRequestHead::new(message.method.as_deref()?);
    if let Some(id) = &message.id {
        head = head.with_id_json(id.get());
    }
    let named = message
        .params
        .as_deref()
        .and_then(|params| serde_json::from_str::<Named<'_>>(params.get()).ok());
    if let Some(target) = named.and_then(|named| named.name.or(named.uri)) {
        head = head.with_target(&*target);
    }
    Some(head)
}

/// `answer` with what its request named (`head`) in its extensions and, when `answered` and no
/// backend's route is on it already, the gateway's route: the front answered it itself.
fn named(
    mut answer: Response<LegacyBody>,
    head: Option<McpRequestHead>,
    answered: bool,
) -> Response<LegacyBody> {
    let extensions = answer.extensions_mut();
    if let Some(head) = head {
        extensions.insert(head);
    }
    if answered && extensions.get::<Route>().is_none() {
        extensions.insert(Route::new(GATEWAY_ROUTE));
    }
    answer
}

/// A session's own answer (its end, its `GET` stream): `@gateway` in the access line and the
/// metrics when the front served it, like `initialize`; a refusal stays `-`.
fn own(answer: Response<LegacyBody>) -> Response<LegacyBody> {
    let served = answer.status().is_success();
    named(answer, None, served)
}

impl DualEraLayer {
    async fn handle<S, B, RB>(self, inner: S, request: Request<B>) -> Response<Either<RB, LegacyBody>>
    where
        S: ModernStack<B, Answer = RB>,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
        RB: ModernAnswer,
    {
        let enabled = self.inner.config.enabled;
        let with_session = enabled && request.headers().contains_key(MCP_SESSION_ID);
        match *request.method() {
            Method::POST if !enabled => return forward(inner, request.map(Either::Left)).await,
            Method::POST => {}
            Method::DELETE if with_session => {
                let (parts, _) = request.into_parts();
                return legacy(own(self.delete(&parts)));
            }
            Method::GET if with_session => {
                let (parts, _) = request.into_parts();
                return legacy(own(self.standalone(inner, parts)));
            }
            _ => return legacy(method_not_allowed(with_session)),
        }
        let (parts, body) = request.into_parts();
        let bytes = match Limited::new(body, self.inner.max_request_body).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return legacy(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    None,
                    INVALID_REQUEST,
                    "Request body too large",
                ));
            }
            Err(_) => {
                return legacy(error(
                    StatusCode::BAD_REQUEST,
                    None,
                    INVALID_REQUEST,
                    "Request body could not be read",
                ));
            }
        };
        let message = LegacyMessage::parse(&bytes);
        let head = message.as_ref().and_then(head_of);
        if let Some(path) = self.era_path(&parts.uri)
            && is_modern(&parts.method, &parts.headers)
        {
            let id = message.as_ref().and_then(|m| m.id.as_deref());
            let refusal = declined(id, path, self.inner.config.main_path);
            return legacy(named(refusal, head, false));
        }
        if let Some(message) = message.as_ref()
            && message.method.as_deref() == Some("initialize")
            && message.id.is_some()
        {
            let answer = self.initialize(inner, &parts, message).await;
            return legacy(named(answer, head, true));
        }
        if !with_session {
            // Not ours: the modern service answers exactly as it would have without the front.
            let request = Request::from_parts(parts, Either::Right(Full::new(bytes)));
            return forward(inner, request).await;
        }
        let Some(session) = self.open_session(&parts) else {
            let refusal = error(
                StatusCode::NOT_FOUND,
                None,
                SESSION_NOT_FOUND,
                "Session not found",
            );
            return legacy(named(refusal, head, false));
        };
        // A version the front does not speak is refused; another legacy one than the session's
        // is served in the session's (SDK clients that lost track of the negotiated version
        // send 2025-03-26, the version a missing header stands for).
        if let Some(version) = parts.headers.get(MCP_PROTOCOL_VERSION)
            && !LEGACY_VERSIONS.iter().any(|v| v.as_bytes() == version.as_bytes())
        {
            return legacy(error(
                StatusCode::BAD_REQUEST,
                None,
                INVALID_REQUEST,
                "Unsupported MCP-Protocol-Version: this endpoint serves 2025-03-26, 2025-06-18 and 2025-11-25 in a session",
            ));
        }
        let Some(message) = message else {
            return legacy(error(
                StatusCode::BAD_REQUEST,
                None,
                PARSE_ERROR,
                "Parse error: expected one JSON-RPC message",
            ));
        };
        let answer = match (message.method.is_some(), message.id.is_some()) {
            (false, true) => self.deliver(&session, message),
            (true, false) => status(StatusCode::ACCEPTED),
            (true, true) => self.request(inner, parts, session, message).await,
            (false, false) => error(
                StatusCode::BAD_REQUEST,
                None,
                INVALID_REQUEST,
                "Not a JSON-RPC request, notification or response",
            ),
        };
        legacy(named(answer, head, true))
    }

    fn delete(&self, parts: &Parts) -> Response<LegacyBody> {
        let Some(session) = self.open_session(parts) else {
            return status(StatusCode::NOT_FOUND);
        };
        let now = self.inner.clock.now();
        self.inner.subscriptions.end(session.digest());
        match self.inner.notes.end(session.digest(), session.expires_at(), now) {
            Ok(()) => status(StatusCode::OK),
            // No room to remember the end: say so rather than pretend.
            Err(_) => method_not_allowed(true),
        }
    }

    /// The client's answer to a server-to-client request.
    fn deliver(&self, session: &OpenedSession, message: LegacyMessage) -> Response<LegacyBody> {
        let id = message.id.expect("checked by the caller");
        let answer = match (message.result, message.error) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(error),
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    None,
                    INVALID_REQUEST,
                    "A response carries exactly one of result and error",
                );
            }
        };
        let delivered = serde_json::from_str::<String>(id.get())
            .map(|id| self.inner.registry.deliver(session.digest(), &id, answer))
            .unwrap_or(Delivery::NotWaiting);
        match delivered {
            Delivery::Delivered => status(StatusCode::ACCEPTED),
            Delivery::NotWaiting => json_answer(
                StatusCode::BAD_REQUEST,
                crate::jsonrpc::error_body(
                    None,
                    INVALID_REQUEST,
                    "No call on this gateway replica is waiting for this answer: it was already answered or timed out, or the call is held by another replica (route every request of a session to one replica: hash on Mcp-Session-Id)",
                    Some(json!({ "answerId": serde_json::from_str::<serde_json::Value>(id.get()).ok() })),
                ),
            ),
        }
    }

    async fn request<S, B, RB>(
        &self,
        inner: S,
        parts: Parts,
        session: OpenedSession,
        message: LegacyMessage,
    ) -> Response<LegacyBody>
    where
        S: ModernStack<B, Answer = RB>,
        B: Send + 'static,
        RB: ModernAnswer,
    {
        let Some(request) = LegacyRequest::from_message(message) else {
            return error(StatusCode::OK, None, INVALID_PARAMS, "params must be an object");
        };
        let now = self.inner.clock.now();
        match request.method() {
            "ping" => result(request.id(), &json!({})),
            "logging/setLevel" => {
                let level = request
                    .param("level")
                    .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
                    .and_then(|l| LogLevel::parse(&l));
                let Some(level) = level else {
                    return error(
                        StatusCode::OK,
                        Some(request.id()),
                        INVALID_PARAMS,
                        "Invalid log level",
                    );
                };
                match self
                    .inner
                    .notes
                    .set_log_level(session.digest(), level, session.expires_at(), now)
                {
                    Ok(()) => result(request.id(), &json!({})),
                    Err(_) => error(
                        StatusCode::OK,
                        Some(request.id()),
                        INTERNAL_ERROR,
                        "This gateway replica cannot remember more log levels right now",
                    ),
                }
            }
            method if RELAYED.contains(&method) => {
                // Only a tools/list answer teaches the tools' headers: any other answer goes out
                // as it came, not collected and parsed again.
                let lists_tools = method == "tools/list";
                let log_level = self
                    .inner
                    .notes
                    .log_level(session.digest(), now)
                    .map(LogLevel::as_str);
                let principal = self.principal(&parts).map(|p| p.to_string());
                let (asks, asked) = asks_for(&session);
                let bridge = Bridge {
                    inner,
                    request,
                    principal,
                    caller: parts.extensions.get::<Caller>().cloned(),
                    client_headers: parts.headers,
                    uri: parts.uri,
                    asks,
                    asked: Some(asked),
                    session,
                    log_level,
                    registry: self.inner.registry.clone(),
                    calls: self.inner.calls.clone(),
                    tools: self.inner.tools.clone(),
                    config: self.inner.config.clone(),
                    body: PhantomData,
                };
                let response = bridge.respond().await;
                if lists_tools {
                    self.learn_from_tool_lists(response).await
                } else {
                    response
                }
            }
            "resources/subscribe" => self.subscribe(inner, &parts, &session, &request).await,
            "resources/unsubscribe" => match resource_uri(&request) {
                Some(uri) => {
                    self.inner.subscriptions.unsubscribe(session.digest(), &uri);
                    result(request.id(), &json!({}))
                }
                None => error(
                    StatusCode::OK,
                    Some(request.id()),
                    INVALID_PARAMS,
                    "Missing params.uri",
                ),
            },
            method => error(
                StatusCode::OK,
                Some(request.id()),
                METHOD_NOT_FOUND,
                &format!("Method not found: {method}"),
            ),
        }
    }

    /// Legacy `tools/list` answers (always JSON) teach the front the tools' `x-mcp-header`
    /// annotations; the body is put back as it was.
    async fn learn_from_tool_lists(&self, response: Response<LegacyBody>) -> Response<LegacyBody> {
        let json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == b"application/json");
        if !json {
            return response;
        }
        let (parts, body) = response.into_parts();
        let Ok(bytes) = body.collect().await.map(|c| c.to_bytes()) else {
            return Response::from_parts(parts, full(Bytes::new()));
        };
        #[derive(Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            result: Option<&'a RawValue>,
        }
        if let Ok(Answer { result: Some(result) }) = serde_json::from_slice(&bytes) {
            self.inner.tools.record(result);
        }
        Response::from_parts(parts, full(bytes))
    }

    async fn initialize<S, B, RB>(
        &self,
        inner: S,
        parts: &Parts,
        message: &LegacyMessage,
    ) -> Response<LegacyBody>
    where
        S: ModernStack<B, Answer = RB>,
        RB: ModernAnswer,
    {
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(rename = "protocolVersion")]
            protocol_version: String,
            #[serde(borrow)]
            capabilities: Option<&'a RawValue>,
            #[serde(rename = "clientInfo", borrow)]
            client_info: Option<&'a RawValue>,
        }
        let id = message.id.as_deref().expect("checked by the caller");
        let invalid = |text: &str| error(StatusCode::OK, Some(id), INVALID_PARAMS, text);
        let Some(params) = message
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str::<Params<'_>>(p.get()).ok())
        else {
            return invalid("initialize needs params with protocolVersion, capabilities and clientInfo");
        };
        let version = negotiate(&params.protocol_version);
        let session = match Session::new(
            version,
            params
                .client_info
                .map_or(r#"{"name":"unknown","version":"0"}"#, RawValue::get),
            params.capabilities.map_or("{}", RawValue::get),
        ) {
            Ok(session) => session,
            Err(e) => return invalid(&e.to_string()),
        };
        let Some(discover) = self.discover(inner, parts, &session).await else {
            return error(
                StatusCode::OK,
                Some(id),
                INTERNAL_ERROR,
                "No backend answered server/discover",
            );
        };
        let state = &self.inner;
        let session_id =
            match state
                .sessions
                .seal(&session, self.principal(parts).as_deref(), state.clock.now())
            {
                Ok(session_id) => session_id,
                Err(e) => return invalid(&e.to_string()),
            };
        let mut response = result(id, &initialize_result(version, &discover, &state.server_info));
        match HeaderValue::from_str(&session_id) {
            Ok(value) => {
                response.headers_mut().insert(MCP_SESSION_ID, value);
                crate::observe::metrics::legacy_session_opened();
                response
            }
            Err(_) => error(
                StatusCode::OK,
                Some(id),
                INTERNAL_ERROR,
                "Session id not representable",
            ),
        }
    }

    /// The modern stack's `server/discover` result, asked as this client.
    async fn discover<S, B, RB>(
        &self,
        inner: S,
        parts: &Parts,
        session: &Session,
    ) -> Option<serde_json::Value>
    where
        S: ModernStack<B, Answer = RB>,
        RB: ModernAnswer,
    {
        let discover = LegacyRequest::parse(br#"{"jsonrpc":"2.0","id":0,"method":"server/discover"}"#)?;
        let mut request = Request::new(Either::Right(Full::new(discover.modern_body(
            r#""legacy-discover""#,
            session,
            None,
            None,
        ))));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = parts.uri.clone();
        *request.headers_mut() = discover.modern_headers(&parts.headers, &[]);
        let response = inner.oneshot(request).await.ok()?;
        let sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let mut messages = Messages::new(sse, Box::pin(response.into_body()), self.inner.config.max_message);
        while let Some(message) = messages.next().await.ok()? {
            if let Some(Modern::Response(answer)) = Modern::parse(&message) {
                return serde_json::from_str(answer.result?.get()).ok();
            }
        }
        None
    }
}

async fn forward<S, B, RB>(inner: S, request: Request<ModernBody<B>>) -> Response<Either<RB, LegacyBody>>
where
    S: ModernStack<B, Answer = RB>,
{
    match inner.oneshot(request).await {
        Ok(response) => response.map(Either::Left),
        Err(e) => {
            tracing::warn!(error = %e, "modern service failed");
            legacy(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                INTERNAL_ERROR,
                "Internal error",
            ))
        }
    }
}
