//! One legacy request relayed to the modern stack, with MRTR bridged inside it.
//!
//! The request goes to the wrapped modern service (the `MrtrLayer` and the proxy) as a modern
//! request. Its answer comes back to the client in legacy form: as one JSON message when the
//! modern answer is one complete result, else as an SSE stream that relays progress and log
//! notifications while the backend works and ends with the response.
//!
//! When the answer is `input_required`, the call stays open:
//!
//! 1. every input request becomes a legacy server-to-client request on the stream, with a fresh
//!    id registered in the replica's [`Registry`] (only request types the client declared at
//!    `initialize`; anything else ends the call with `-32021`);
//! 2. the client POSTs its answers separately; the front delivers them to this call;
//! 3. the request goes to the modern service again, with a new id, the same arguments,
//!    `inputResponses` and the `requestState` the layer sealed (it never leaves the gateway on
//!    this path), and the next answer is handled the same way, up to
//!    [`LegacyConfig::max_rounds`] rounds.
//!
//! An `initialize`-era backend's own requests during the call (`elicitation/create`,
//! `sampling/createMessage`, `roots/list` on its answer's stream, which `upstream/translate.rs`
//! hands over through the [`ClientAsks`] in the modern request's extensions) go to the client the
//! same way, in-request: a fresh id, the client's answer POSTed back into the backend's session.
//! They count against the same limits as input requests.
//!
//! A round the client does not answer within [`LegacyConfig::answer_timeout`] ends the call
//! with an error (and `notifications/cancelled` for the requests left open). A client that goes
//! away drops the response body, which drops this call: the backend's stream is closed (MCP's
//! cancellation signal) and the registry forgets the call's ids. Nothing outlives the call.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::{Either, Full};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tower::ServiceExt;
use tower_mrtr::error::{
    HEADER_MISMATCH, INTERNAL_ERROR, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, REQUEST_TIMEOUT,
};
use tower_mrtr::{BoxError, Route};

use super::answer::{InputRequired, Modern, ModernResponse, error_message, legacy_response};
use super::config::LegacyConfig;
use super::modern::{ModernAnswer, ModernStack};
use super::registry::{LimitReached, Pending, Registry, WaitingCall, WaitingCalls};
use super::reply::{LegacyBody, json_answer, sse_answer};
use super::request::{LegacyRequest, ToolHeaders};
use super::session::OpenedSession;
use super::stream::{CallBody, Events, KEEP_ALIVE, Messages, sse_event};
use crate::auth::Caller;
use crate::jsonrpc::RawObject;
use crate::upstream::sse::is_sse;
use crate::upstream::translate::{Asked, ClientAsks};

/// One legacy request on its way through the modern service.
pub(super) struct Bridge<S, B> {
    /// The modern service (a clone the bridge may call many times).
    pub inner: S,
    /// The request.
    pub request: LegacyRequest,
    /// The principal the session is bound to, if the gateway binds one.
    pub principal: Option<String>,
    /// The caller the resource server verified for this request (`[oauth]`), carried to every
    /// modern request of the call so that the policy sees its groups and scopes.
    pub caller: Option<Caller>,
    /// The client's headers.
    pub client_headers: HeaderMap,
    /// The request's URI.
    pub uri: Uri,
    /// The session it belongs to.
    pub session: OpenedSession,
    /// The log level to ask the backend for.
    pub log_level: Option<&'static str>,
    /// Where answers to server-to-client requests arrive.
    pub registry: Registry,
    /// The calls waiting for their client, which this call joins when it asks.
    pub calls: WaitingCalls,
    /// Known `x-mcp-header` annotations.
    pub tools: Arc<ToolHeaders>,
    /// Limits.
    pub config: Arc<LegacyConfig>,
    /// What every modern request of the call carries, so that a legacy backend's own requests
    /// reach this client ([`asks_for`]).
    pub asks: ClientAsks,
    /// Where those requests arrive (taken by the call's stream).
    pub asked: Option<tokio::sync::mpsc::Receiver<Asked>>,
    /// The client body type of the modern service.
    pub body: PhantomData<fn() -> B>,
}

/// Most backend requests queued for one call before the front reads them; later ones are
/// answered with an error by the backend's translation.
const ASKED_QUEUE: usize = 8;

/// The channel through which legacy backends' requests reach the call of a client of `session`.
pub(super) fn asks_for(session: &OpenedSession) -> (ClientAsks, tokio::sync::mpsc::Receiver<Asked>) {
    let (asks, asked) = tokio::sync::mpsc::channel(ASKED_QUEUE);
    let capabilities = session.capabilities().get().into();
    (ClientAsks { capabilities, asks }, asked)
}

impl<S, B> std::fmt::Debug for Bridge<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("method", &self.request.method())
            .finish_non_exhaustive()
    }
}

/// How a bridged call ended badly: the JSON-RPC error the legacy client gets.
struct CallError {
    code: i64,
    message: String,
    data: Option<serde_json::Value>,
}

impl CallError {
    fn internal(message: impl Into<String>) -> Self {
        Self {
            code: INTERNAL_ERROR,
            message: message.into(),
            data: None,
        }
    }
}

/// The client's stream is gone.
struct Gone;

impl<S, B, RB> Bridge<S, B>
where
    S: ModernStack<B, Answer = RB>,
    B: Send + 'static,
    RB: ModernAnswer,
{
    /// Relays the request and answers the client: JSON when the modern answer is one complete
    /// result, an SSE stream otherwise.
    ///
    /// The answer carries the [`Route`] of the backend that answered the first round (a retry
    /// goes to the same one), for the access line and the span.
    pub(super) async fn respond(self) -> Response<LegacyBody> {
        let (first, route) = match self.send_first().await {
            Ok(First::Answer(response)) => {
                let route = response.extensions().get::<Route>().cloned();
                (response, route)
            }
            Ok(First::Read(response, route)) => return answered_by(self.answer(response), route),
            Err(error) => return json_answer(StatusCode::OK, self.error_answer(error)),
        };
        let (parts, body) = first.into_parts();
        if is_sse(&parts.headers) {
            let messages = Messages::new(true, Box::pin(body), self.config.max_message);
            let answer = sse_answer(CallBody::new(move |events| {
                self.drive(events, Next::Stream(messages))
            }));
            return answered_by(answer, route);
        }
        let mut messages = Messages::new(false, Box::pin(body), self.config.max_message);
        let answer = match read_response(&mut messages).await {
            Ok(response) => self.answer(response),
            Err(error) => json_answer(StatusCode::OK, self.error_answer(error)),
        };
        answered_by(answer, route)
    }

    /// The answer to a complete modern JSON answer: legacy JSON, or the bridge's stream.
    fn answer(self, response: ModernResponse) -> Response<LegacyBody> {
        match response.input_required() {
            None => json_answer(
                StatusCode::OK,
                legacy_response(self.request.id(), self.request.method(), &response),
            ),
            Some(input) => sse_answer(CallBody::new(move |events| {
                self.drive(events, Next::Input(input))
            })),
        }
    }

    fn error_answer(&self, error: CallError) -> Bytes {
        error_message(self.request.id(), error.code, &error.message, error.data)
    }

    /// Round one. A `tools/call` refused with `-32020` because the gateway did not know the
    /// tool's `x-mcp-header` annotations yet is sent again once after listing the tools.
    async fn send_first(&self) -> Result<First<RB>, CallError> {
        let response = self.send(0, None).await?;
        let might_need_params = self.request.method() == "tools/call"
            && response.status() == StatusCode::BAD_REQUEST
            && self
                .request
                .target()
                .is_some_and(|tool| self.tools.get(tool).is_empty());
        if !might_need_params {
            return Ok(First::Answer(response));
        }
        let (parts, body) = response.into_parts();
        let route = parts.extensions.get::<Route>().cloned();
        let mut messages = Messages::new(is_sse(&parts.headers), Box::pin(body), self.config.max_message);
        let response = read_response(&mut messages).await?;
        let mismatch = response
            .error
            .as_ref()
            .and_then(|e| serde_json::from_str::<serde_json::Value>(e.get()).ok())
            .is_some_and(|e| e["code"] == HEADER_MISMATCH);
        if mismatch && self.learn_tool_headers().await {
            return self.send(0, None).await.map(First::Answer);
        }
        Ok(First::Read(response, route))
    }

    /// Lists the tools (as this client) to learn their `x-mcp-header` annotations.
    async fn learn_tool_headers(&self) -> bool {
        let Some(list) = LegacyRequest::parse(br#"{"jsonrpc":"2.0","id":0,"method":"tools/list"}"#) else {
            return false;
        };
        let body = list.modern_body(r#""legacy-tools""#, &self.session, None, None);
        let headers = list.modern_headers(&self.client_headers, &[]);
        let Ok(response) = self.call(body, headers).await else {
            return false;
        };
        let (parts, body) = response.into_parts();
        let mut messages = Messages::new(is_sse(&parts.headers), Box::pin(body), self.config.max_message);
        match read_response(&mut messages).await {
            Ok(ModernResponse {
                result: Some(result), ..
            }) => self.tools.record(&result),
            _ => false,
        }
    }

    /// Sends round `round` (a retry when `retry` holds the answers and the sealed state).
    async fn send(
        &self,
        round: usize,
        retry: Option<(&RawValue, &RawValue)>,
    ) -> Result<Response<RB>, CallError> {
        let id = format!(r#""legacy-{round}""#);
        let body = self
            .request
            .modern_body(&id, &self.session, self.log_level, retry);
        let params = self
            .request
            .target()
            .map(|tool| self.tools.get(tool))
            .unwrap_or_default();
        let headers = self.request.modern_headers(&self.client_headers, &params);
        self.call(body, headers).await
    }

    async fn call(&self, body: Bytes, headers: HeaderMap) -> Result<Response<RB>, CallError> {
        let mut request = Request::new(Either::Right(Full::new(body)));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = headers;
        request.extensions_mut().insert(self.asks.clone());
        if let Some(caller) = &self.caller {
            request.extensions_mut().insert(caller.clone());
        }
        self.inner.clone().oneshot(request).await.map_err(|error| {
            tracing::warn!(%error, "modern service failed");
            CallError::internal("The gateway could not relay the request")
        })
    }

    /// Runs the call on the SSE stream until its final answer, for at most the call timeout.
    async fn drive(mut self, events: Events, first: Next<RB>) {
        let limit = self.config.call_timeout;
        let mut asked = self.asked.take();
        let outcome = match tokio::time::timeout(limit, self.rounds(&events, first, &mut asked)).await {
            Ok(outcome) => outcome,
            // The rounds are dropped, and the ids they wait on forgotten with them.
            Err(_) => Err(Ok(CallError {
                code: REQUEST_TIMEOUT,
                message: format!(
                    "The call took longer than {} s in all; the gateway ended it",
                    limit.as_secs()
                ),
                data: None,
            })),
        };
        let message = match outcome {
            Ok(response) => legacy_response(self.request.id(), self.request.method(), &response),
            Err(Ok(error)) => self.error_answer(error),
            Err(Err(Gone)) => return,
        };
        let _ = events.send(sse_event(&message)).await;
    }

    async fn rounds(
        &self,
        events: &Events,
        mut next: Next<RB>,
        asked: &mut Option<tokio::sync::mpsc::Receiver<Asked>>,
    ) -> Result<ModernResponse, Result<CallError, Gone>> {
        let mut round = 0;
        // Taken when the call first waits for its client, held until it ends.
        let mut waiting: Option<WaitingCall> = None;
        loop {
            let input = match next {
                Next::Input(input) => input,
                Next::Stream(mut messages) => {
                    let response = self.relay(events, &mut messages, asked, &mut waiting).await?;
                    match response.input_required() {
                        Some(input) => input,
                        None => return Ok(response),
                    }
                }
            };
            round += 1;
            if round > self.config.max_rounds {
                return Err(Ok(CallError::internal(format!(
                    "The backend asked for input more than {} times; the gateway ended the call",
                    self.config.max_rounds
                ))));
            }
            let Some(state) = input.state.as_deref() else {
                return Err(Ok(CallError::internal(
                    "The backend asked for input without a requestState",
                )));
            };
            self.wait_for_client(&mut waiting)?;
            let answers = self.ask(events, &input.requests).await?;
            let answers = RawValue::from_string(
                serde_json::to_string(&answers)
                    .map_err(|_| Ok(CallError::internal("The client's answers could not be relayed")))?,
            )
            .map_err(|_| Ok(CallError::internal("The client's answers could not be relayed")))?;
            let response = self.send(round, Some((&answers, state))).await.map_err(Ok)?;
            let (parts, body) = response.into_parts();
            next = Next::Stream(Messages::new(
                is_sse(&parts.headers),
                Box::pin(body),
                self.config.max_message,
            ));
        }
    }

    /// Counts the call among those waiting for their clients, from the first time it waits.
    fn wait_for_client(&self, waiting: &mut Option<WaitingCall>) -> Result<(), Result<CallError, Gone>> {
        if waiting.is_none() {
            *waiting = Some(
                self.calls
                    .enter(self.session.digest(), self.principal.as_deref())
                    .map_err(|crowded| Ok(crowded_out(crowded)))?,
            );
        }
        Ok(())
    }

    /// Relays notifications until the response, which it returns, and a legacy backend's own
    /// requests to the client as they come (`asked`).
    async fn relay(
        &self,
        events: &Events,
        messages: &mut Messages<std::pin::Pin<Box<RB>>>,
        asked: &mut Option<tokio::sync::mpsc::Receiver<Asked>>,
        waiting: &mut Option<WaitingCall>,
    ) -> Result<ModernResponse, Result<CallError, Gone>> {
        loop {
            let next = tokio::select! {
                next = messages.next() => next,
                Some(request) = next_asked(asked) => {
                    self.answer_asked(events, request, waiting).await?;
                    continue;
                }
            };
            let message = match next {
                Ok(Some(message)) => message,
                Ok(None) => {
                    return Err(Ok(CallError::internal(
                        "The backend's answer ended without a response",
                    )));
                }
                Err(error) => {
                    tracing::warn!(%error, "modern answer unreadable");
                    return Err(Ok(CallError::internal("The backend's answer could not be read")));
                }
            };
            match Modern::parse(&message) {
                Some(Modern::Response(response)) => return Ok(response),
                Some(Modern::Notification { method, message })
                    if method == "notifications/progress" || method == "notifications/message" =>
                {
                    events.send(sse_event(&message)).await.map_err(|_| Err(Gone))?;
                }
                _ => tracing::debug!("dropped a message a legacy client has no use for"),
            }
        }
    }

    /// A legacy backend's own request: to the client when it declared what the request needs,
    /// its answer (or error) back to the backend; else an error for the backend at once.
    async fn answer_asked(
        &self,
        events: &Events,
        request: Asked,
        waiting: &mut Option<WaitingCall>,
    ) -> Result<(), Result<CallError, Gone>> {
        let mode = serde_json::from_str::<serde_json::Value>(request.params.get())
            .ok()
            .and_then(|p| p["mode"].as_str().map(str::to_owned));
        if !self.session.declares(&request.method, mode.as_deref()) {
            let error = json!({ "code": METHOD_NOT_FOUND, "message": format!(
                "The client did not declare the capability {} needs", request.method) });
            if let Ok(error) = serde_json::value::to_raw_value(&error) {
                let _ = request.answer.send(Err(error));
            }
            return Ok(());
        }
        self.wait_for_client(waiting)?;
        let mut requests = RawObject::default();
        let one = json!({ "method": request.method, "params": request.params });
        let one = serde_json::value::to_raw_value(&one)
            .map_err(|_| Ok(CallError::internal("The backend's request could not be relayed")))?;
        requests.0.push(("backend".to_owned(), one));
        let mut answers = self.ask_all(events, &requests).await?;
        if let Some((_, _, Some(answer))) = answers.pop() {
            let _ = request.answer.send(answer);
        }
        Ok(())
    }

    /// Sends one round's input requests to the client and collects its answers, keyed as the
    /// backend asked; an error answer ends the call.
    async fn ask(&self, events: &Events, requests: &RawObject) -> Result<RawObject, Result<CallError, Gone>> {
        let mut responses = RawObject::default();
        for (key, method, answer) in self.ask_all(events, requests).await? {
            match answer {
                Some(Ok(result)) => responses.0.push((key, result)),
                Some(Err(error)) => return Err(Ok(client_error(&method, &error))),
                None => return Err(Ok(CallError::internal("The client's answer was lost"))),
            }
        }
        Ok(responses)
    }

    /// Sends `requests` (key to `{method, params}`) to the client as server-to-client requests
    /// and waits for every answer (at most the answer timeout): each key's method and answer.
    async fn ask_all(
        &self,
        events: &Events,
        requests: &RawObject,
    ) -> Result<Vec<(String, String, Option<super::registry::Answer>)>, Result<CallError, Gone>> {
        #[derive(Deserialize)]
        struct InputRequest {
            method: String,
            params: Option<Box<RawValue>>,
        }
        let mut waiting: Vec<(String, String, Pending)> = Vec::new();
        let mut sends = Vec::new();
        for (key, raw) in &requests.0 {
            let Ok(request) = serde_json::from_str::<InputRequest>(raw.get()) else {
                return Err(Ok(CallError::internal(
                    "The backend sent an unreadable input request",
                )));
            };
            let params = request.params.as_deref().map(RawValue::get).unwrap_or("{}");
            let mode = serde_json::from_str::<serde_json::Value>(params)
                .ok()
                .and_then(|p| p["mode"].as_str().map(str::to_owned));
            if !self.session.declares(&request.method, mode.as_deref()) {
                return Err(Ok(missing_capability(&request.method, mode.as_deref())));
            }
            let pending = self
                .registry
                .register(self.session.digest(), self.principal.as_deref())
                .map_err(|full| Ok(too_many_answers(full)))?;
            let params = self.legacy_params(&request.method, params, pending.id());
            let id = serde_json::Value::from(pending.id()).to_string();
            let method = serde_json::Value::from(request.method.as_str()).to_string();
            sends.push(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{params}}}"#
            ));
            waiting.push((key.clone(), request.method, pending));
        }
        for message in sends {
            events
                .send(sse_event(message.as_bytes()))
                .await
                .map_err(|_| Err(Gone))?;
        }
        let ids: Vec<String> = waiting.iter().map(|(_, _, p)| p.id().to_owned()).collect();
        let all = futures_util::future::join_all(
            waiting
                .into_iter()
                .map(|(key, method, pending)| async move { (key, method, pending.answer().await) }),
        );
        let deadline = tokio::time::sleep(self.config.answer_timeout);
        let mut ticks = keep_alive_ticks(self.config.keep_alive);
        tokio::pin!(all, deadline);
        let answers = loop {
            tokio::select! {
                answers = &mut all => break answers,
                () = &mut deadline => {
                    for id in &ids {
                        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": id, "reason": "timed out"}});
                        events.send(sse_event(cancel.to_string().as_bytes())).await.map_err(|_| Err(Gone))?;
                    }
                    return Err(Ok(CallError {
                        code: REQUEST_TIMEOUT,
                        message: format!(
                            "The client did not answer the server's requests within {} s",
                            self.config.answer_timeout.as_secs()
                        ),
                        data: None,
                    }));
                }
                _ = ticks.tick() => {
                    events.send(Bytes::from_static(KEEP_ALIVE)).await.map_err(|_| Err(Gone))?;
                }
            }
        };
        Ok(answers)
    }

    /// An input request's params as the session's protocol version has them: 2025-06-18 knows
    /// only form elicitation (no `mode`); 2025-11-25's URL mode needs an `elicitationId`.
    fn legacy_params(&self, method: &str, params: &str, id: &str) -> String {
        if method != "elicitation/create" {
            return params.to_owned();
        }
        let Ok(mut object) = serde_json::from_str::<RawObject>(params) else {
            return params.to_owned();
        };
        let url_mode = object.get("mode").is_some_and(|m| m.get() == r#""url""#);
        if self.session.protocol_version() == "2025-06-18" {
            object.0.retain(|(k, _)| k != "mode");
        } else if url_mode
            && object.get("elicitationId").is_none()
            && let Ok(raw) = serde_json::value::to_raw_value(id)
        {
            object.0.push(("elicitationId".to_owned(), raw));
        }
        serde_json::to_string(&object).unwrap_or_else(|_| params.to_owned())
    }
}

/// The error for a call that may not wait for its client now.
fn crowded_out(full: LimitReached) -> CallError {
    CallError::internal(match full {
        LimitReached::Replica(n) => {
            format!("The gateway has {n} calls waiting for their clients' answers; try again later")
        }
        LimitReached::Session(n) => {
            format!("This session already has {n} calls waiting for its answers; answer or cancel them first")
        }
        LimitReached::Principal(n) => {
            format!(
                "This principal already has {n} calls waiting for its answers; answer or cancel them first"
            )
        }
    })
}

/// The error for a call whose input requests may not all wait for answers now.
fn too_many_answers(full: LimitReached) -> CallError {
    CallError::internal(match full {
        LimitReached::Replica(n) => {
            format!("The gateway is waiting for {n} answers already; try again later")
        }
        LimitReached::Session(n) => format!(
            "This session has too many requests waiting for its answers ({n}); answer or cancel them first"
        ),
        LimitReached::Principal(n) => format!(
            "This principal has too many requests waiting for its answers ({n}); answer or cancel them first"
        ),
    })
}

/// Round one's outcome: an answer still to read, or one read already.
enum First<RB> {
    Answer(Response<RB>),
    /// Read already, with the route that answered it.
    Read(ModernResponse, Option<Route>),
}

/// `answer`, marked as answered by `route` (when a backend answered).
fn answered_by(mut answer: Response<LegacyBody>, route: Option<Route>) -> Response<LegacyBody> {
    if let Some(route) = route {
        answer.extensions_mut().insert(route);
    }
    answer
}

/// The next backend request for the client, or never (no channel).
async fn next_asked(asked: &mut Option<tokio::sync::mpsc::Receiver<Asked>>) -> Option<Asked> {
    match asked {
        Some(asked) => asked.recv().await,
        None => std::future::pending().await,
    }
}

enum Next<RB> {
    Stream(Messages<std::pin::Pin<Box<RB>>>),
    Input(InputRequired),
}

fn keep_alive_ticks(every: Duration) -> tokio::time::Interval {
    let every = every.max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

fn missing_capability(method: &str, mode: Option<&str>) -> CallError {
    let required = match method {
        "elicitation/create" => match mode {
            Some(mode) if mode != "form" => json!({ "elicitation": { mode: {} } }),
            _ => json!({ "elicitation": {} }),
        },
        "sampling/createMessage" => json!({ "sampling": {} }),
        "roots/list" => json!({ "roots": {} }),
        _ => json!({}),
    };
    CallError {
        code: MISSING_REQUIRED_CLIENT_CAPABILITY,
        message: format!("The backend needs {method}, which this client did not declare at initialize"),
        data: Some(json!({ "requiredCapabilities": required })),
    }
}

fn client_error(method: &str, error: &RawValue) -> CallError {
    let error: serde_json::Value = serde_json::from_str(error.get()).unwrap_or_default();
    CallError {
        code: error["code"].as_i64().unwrap_or(INTERNAL_ERROR),
        message: format!(
            "The client answered {method} with an error: {}",
            error["message"].as_str().unwrap_or("(no message)")
        ),
        data: error.get("data").cloned(),
    }
}

async fn read_response<RB>(
    messages: &mut Messages<std::pin::Pin<Box<RB>>>,
) -> Result<ModernResponse, CallError>
where
    RB: Body<Data = Bytes>,
    RB::Error: Into<BoxError>,
{
    loop {
        match messages.next().await {
            Ok(Some(message)) => {
                if let Some(Modern::Response(response)) = Modern::parse(&message) {
                    return Ok(response);
                }
            }
            Ok(None) => return Err(CallError::internal("The backend gave no JSON-RPC answer")),
            Err(error) => {
                tracing::warn!(%error, "modern answer unreadable");
                return Err(CallError::internal("The backend's answer could not be read"));
            }
        }
    }
}
