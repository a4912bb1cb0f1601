//! The request path: read the buffered body, open any envelope, restore the backend's state.
//!
//! Every POST body is read in full before anything is forwarded. A body the layer cannot read
//! unambiguously is refused, never forwarded: a backend whose parser is more lenient (a UTF-8 BOM,
//! UTF-16, invalid UTF-8, trailing bytes after the value, a member name in another letter case)
//! could otherwise read an unverified `requestState` the layer never saw.

use std::collections::HashMap;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, header};
use serde_json::value::RawValue;

use crate::config::Config;
use crate::envelope::{ArgumentsDigest, Binding, OpenError, Opened, Purpose, Sealed, Sealer, V2_PREFIX};
use crate::error::Rejection;
use crate::json::{self, Elements, Raw};
use crate::jsonrpc::{self, Params, ParamsField, ReadError};
use crate::mcp_headers::{MCP_METHOD, MCP_NAME, decode_header_value, encode_header_value, header_value_is};
use crate::metrics;
use crate::route::{Continuation, EnvelopeId, McpRequestHead, PinnedRoute, Route, TaskHandle};
use crate::shared_str::SharedStr;

/// Most task handles one `subscriptions/listen` may name: each is opened (a decryption) on the
/// request path, so the count is bounded.
pub(crate) const MAX_LISTEN_TASK_IDS: usize = 100;

/// What the response path must do with the answer to a request.
#[derive(Debug)]
pub(crate) enum ResponsePlan {
    /// Nothing the layer must seal can come back: pass it through untouched.
    Passthrough,
    /// The answer may be `input_required`: seal it with this context.
    Seal(SealContext),
    /// A task follow-up (`tasks/get|update|cancel`, or `subscriptions/listen` on task handles):
    /// the backend's task ids in the answer are shown to the client as the handles it holds.
    Tasks(TaskContext),
    /// A batch holding requests that may answer `input_required`: such answers cannot be sealed
    /// (no binding per element) and fail closed.
    Batch,
    /// The layer did not read the request (not a POST), so it cannot know what the answer may
    /// carry: an answer holding anything that would need sealing fails closed.
    Inspect,
}

/// What the response path needs to present a backend's task ids as the client's handles.
#[derive(Debug)]
pub(crate) struct TaskContext {
    pub(crate) id: Option<String>,
    pub(crate) pinned: Route,
    /// Backend task id → raw contents of the handle the client sent for it.
    pub(crate) handles: HashMap<String, String>,
}

/// The binding of every task handle: the handle outlives the `tools/call` that minted it and is
/// used on other methods, so only the purpose (in the label), the audience and the principal
/// bind it.
pub(crate) fn task_binding<'a>(audience: Option<&'a str>, principal: Option<&'a str>) -> Binding<'a> {
    Binding::new("tasks", None, principal).with_audience(audience)
}

/// How an answer's envelope is bound to the call's arguments.
#[derive(Debug)]
pub(crate) enum ArgumentsBinding {
    /// Not bound: the method takes no arguments, or the layer is configured not to bind them.
    Unbound,
    /// Bound; the digest is computed only if the answer needs sealing (most do not), from the
    /// arguments' text, which the request reader has checked.
    Raw(Option<Bytes>),
    /// Bound; computed already (on a retry, to open the envelope).
    Digest(ArgumentsDigest),
}

/// What the response path needs to seal an answer: the request's binding and id.
#[derive(Debug)]
pub(crate) struct SealContext {
    pub(crate) id: Option<SharedStr>,
    pub(crate) method: &'static str,
    pub(crate) target: Option<SharedStr>,
    pub(crate) principal: Option<String>,
    pub(crate) arguments: ArgumentsBinding,
    pub(crate) pinned: Option<Route>,
    /// The round an `input_required` answer is sealed as: 1, or one more than the retry's.
    pub(crate) round: u16,
}

impl SealContext {
    /// The binding to seal under; fails if the arguments have no canonical form.
    pub(crate) fn binding<'a>(
        &'a self,
        audience: Option<&'a str>,
    ) -> Result<Binding<'a>, crate::canonical::CanonicalError> {
        let target = self.target.as_ref().map(SharedStr::as_str);
        let binding = Binding::new(self.method, target, self.principal.as_deref()).with_audience(audience);
        Ok(match &self.arguments {
            ArgumentsBinding::Unbound => binding,
            ArgumentsBinding::Digest(digest) => binding.with_arguments(*digest),
            ArgumentsBinding::Raw(raw) => {
                let text = raw.as_deref().map(simdutf8::basic::from_utf8).transpose();
                let text = text.map_err(|_| crate::canonical::CanonicalError::Syntax)?;
                // Checked JSON already: the request reader read it.
                binding.with_arguments(ArgumentsDigest::exact_of_value(text)?)
            }
        })
    }
}

/// A refusal, with the head of the refused request when its body names a method (for observers).
pub(crate) type Refusal = (Rejection, Option<Box<McpRequestHead>>);

/// Inspects a buffered POST body. On success returns the body to forward (the same bytes unless
/// an envelope was opened) and the response plan; `parts` gains the extensions and, after a
/// rewrite, a correct `Content-Length`.
pub(crate) fn process(
    config: &Config,
    sealer: &Sealer,
    parts: &mut Parts,
    body: Bytes,
) -> Result<(Bytes, ResponsePlan), Refusal> {
    match inspect(config, sealer, parts, &body) {
        Ok((Some(rewritten), plan)) => Ok((rewritten, plan)),
        Ok((None, plan)) => Ok((body, plan)),
        // Read again only on a refusal (rare), so the accepted path keeps its single read.
        Err(rejection) => Err((rejection, head_of(&body).map(Box::new))),
    }
}

/// The head of a single request `body` whose method can be read, for a refusal's answer.
fn head_of(body: &Bytes) -> Option<McpRequestHead> {
    let message = jsonrpc::parse_request(body).ok()?;
    let target = match &message.params {
        ParamsField::Object(Ok(params)) => params.name.as_deref().or(params.uri.as_deref()),
        _ => None,
    };
    let (method, id) = (message.method.as_deref()?, message.id.map(Raw::get));
    Some(McpRequestHead::parsed(body, method, id, target, false))
}

/// [`process`] over a borrowed body: the body to forward (`None`: the same bytes) and the plan.
fn inspect(
    config: &Config,
    sealer: &Sealer,
    parts: &mut Parts,
    body: &Bytes,
) -> Result<(Option<Bytes>, ResponsePlan), Rejection> {
    match json::first_significant(body) {
        Some(b'{') => {}
        Some(b'[') => return process_batch(config, parts, body).map(|plan| (None, plan)),
        _ => return Err(not_a_request(body)),
    }
    let message = jsonrpc::parse_request(body).map_err(|e| unreadable(e, None))?;
    let id = message.id.map(Raw::get);
    let Some(method) = message.method.as_deref() else {
        // A response (a legacy client answering a server's request) or a malformed message: it
        // carries nothing to open, and its answer nothing to seal.
        return Ok((None, ResponsePlan::Passthrough));
    };
    let params = match message.params {
        ParamsField::Absent => None,
        ParamsField::Object(Ok(params)) => Some(params),
        ParamsField::NotAnObject | ParamsField::Object(Err(ReadError::WrongType(_)))
            if !may_carry_envelopes(method) =>
        {
            None
        }
        ParamsField::NotAnObject | ParamsField::Object(Err(ReadError::WrongType(_))) => {
            return Err(Rejection::InvalidParams { id: owned(id) });
        }
        // A state must not pass unread, whatever the method.
        ParamsField::MistypedWithState if !may_carry_envelopes(method) => {
            tracing::debug!(method, "requestState beside a mistyped member");
            return Err(Rejection::StateNotAccepted { id: owned(id) });
        }
        ParamsField::MistypedWithState => return Err(Rejection::InvalidParams { id: owned(id) }),
        ParamsField::Object(Err(e)) => return Err(unreadable(e, owned(id))),
    };

    let request = Request {
        config,
        sealer,
        body,
        params: params.as_ref(),
        id,
    };
    if let Some(method) = jsonrpc::INPUT_REQUIRED_METHODS
        .iter()
        .copied()
        .find(|m| *m == method)
    {
        return request
            .relay(parts, method)
            .map(|(body, plan)| (Some(body), plan));
    }
    if let Some(method) = jsonrpc::TASK_METHODS.iter().copied().find(|m| *m == method) {
        return request
            .task_follow_up(parts, method)
            .map(|(body, plan)| (Some(body), plan));
    }
    if params.as_ref().is_some_and(|p| p.request_state.is_some()) {
        tracing::debug!(method, "requestState on a method that takes none");
        return Err(Rejection::StateNotAccepted {
            id: request.owned_id(),
        });
    }
    if method == jsonrpc::LISTEN_METHOD {
        return request.listen(parts).map(|(body, plan)| (Some(body), plan));
    }
    let target = params
        .as_ref()
        .and_then(|p| p.name.as_deref().or(p.uri.as_deref()));
    parts
        .extensions
        .insert(McpRequestHead::parsed(body, method, request.id, target, false));
    Ok((None, ResponsePlan::Passthrough))
}

/// Whether requests of `method` can carry or produce envelopes: their params must be readable.
fn may_carry_envelopes(method: &str) -> bool {
    jsonrpc::may_require_input(method)
        || jsonrpc::TASK_METHODS.contains(&method)
        || method == jsonrpc::LISTEN_METHOD
}

/// The refusal of a body that is not a JSON-RPC object or batch: `-32700` if it is not JSON at
/// all, `-32600` if it is some other JSON value.
fn not_a_request(body: &[u8]) -> Rejection {
    match serde_json::from_slice::<&RawValue>(body) {
        Ok(_) => Rejection::Unreadable {
            id: None,
            detail: "the body is JSON but not a JSON-RPC request object".to_owned(),
        },
        Err(_) => Rejection::ParseError,
    }
}

fn unreadable(error: ReadError, id: Option<String>) -> Rejection {
    tracing::debug!(error = %error.describe(), "request refused: cannot be read unambiguously");
    match error {
        ReadError::NotJson => Rejection::ParseError,
        other => Rejection::Unreadable {
            id,
            detail: other.describe(),
        },
    }
}

/// The refusal of a call the `authorize` check denied; its target goes to the debug log only.
fn denial(method: &str, target: Option<&str>, denied: crate::Denied, id: Option<&str>) -> Rejection {
    tracing::debug!(method, target, "request refused by the authorize check");
    Rejection::Denied {
        id: owned(id),
        message: denied.message().to_owned(),
    }
}

/// A raw JSON-RPC id as owned text, for an error answer.
fn owned(id: Option<&str>) -> Option<String> {
    id.map(str::to_owned)
}

/// One request being processed: what every step reads.
struct Request<'a> {
    config: &'a Config,
    sealer: &'a Sealer,
    body: &'a Bytes,
    params: Option<&'a Params<'a>>,
    /// The raw JSON-RPC id, borrowed from the body.
    id: Option<&'a str>,
}

impl Request<'_> {
    fn owned_id(&self) -> Option<String> {
        owned(self.id)
    }

    /// Text read from the body, sharing its buffer.
    fn shared(&self, part: &str) -> SharedStr {
        SharedStr::from_body(self.body, part)
    }

    /// The principal to bind, or a refusal when the layer requires one and there is none.
    fn principal(&self, parts: &Parts, method: &str) -> Result<Option<String>, Rejection> {
        let Some(principal_fn) = &self.config.principal else {
            return Ok(None);
        };
        match principal_fn(parts) {
            Some(principal) => Ok(Some(principal)),
            None if self.config.principal_required => {
                tracing::debug!(
                    method,
                    "request refused: no principal (is the authentication layer outside MrtrLayer?)"
                );
                Err(Rejection::PrincipalRequired { id: self.owned_id() })
            }
            None => {
                tracing::debug!(
                    method,
                    "no principal for this request: its envelopes are not bound to one"
                );
                Ok(None)
            }
        }
    }

    /// Opens the envelope held by a raw JSON member (which must be a string).
    fn open(&self, purpose: Purpose, binding: &Binding<'_>, raw: Raw<'_>) -> Result<Sealed, OpenError> {
        self.open_with(purpose, binding, raw, |opened| opened.into_sealed())
    }

    /// [`open`](Self::open), handing what opened to `f` while its state is still in the
    /// decrypted buffer.
    fn open_with<R>(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        raw: Raw<'_>,
        f: impl FnOnce(Opened<'_>) -> R,
    ) -> Result<R, OpenError> {
        // Checked on the raw token first so an oversized value is never decoded.
        if raw.get().len() > self.config.max_envelope_len.saturating_add(2) {
            return Err(OpenError::TooLong);
        }
        let text = json::as_string(raw.get()).ok_or(OpenError::NotAnEnvelope)?;
        if text.len() > self.config.max_envelope_len {
            return Err(OpenError::TooLong);
        }
        let opened = self
            .sealer
            .open_with(purpose, binding, &text, self.config.clock.now(), f)?;
        metrics::opened(purpose);
        Ok(opened)
    }

    /// The uniform refusal of an envelope that did not open; the reason goes to the log only.
    fn refuse(&self, method: &str, purpose: Purpose, reason: &OpenError) -> Rejection {
        metrics::envelope_refused(purpose, reason.reason());
        tracing::debug!(
            method,
            purpose = purpose.name(),
            reason = reason.reason(),
            detail = %reason,
            "envelope refused"
        );
        Rejection::InvalidEnvelope {
            id: self.owned_id(),
            purpose: purpose.name(),
        }
    }

    /// A `tools/call`, `prompts/get` or `resources/read`.
    fn relay(self, parts: &mut Parts, method: &'static str) -> Result<(Bytes, ResponsePlan), Rejection> {
        let params = self.params;
        let target = params.and_then(|p| match method {
            "resources/read" => p.uri.as_deref(),
            _ => p.name.as_deref(),
        });
        if let Some(authorize) = &self.config.authorize {
            authorize(parts, method, target).map_err(|denied| denial(method, target, denied, self.id))?;
        }
        let principal = self.principal(parts, method)?;
        let raw_arguments = params.and_then(|p| p.arguments);
        let bind_arguments = self.config.bind_arguments && jsonrpc::takes_arguments(method);

        let Some(state) = params.and_then(|p| p.request_state) else {
            parts
                .extensions
                .insert(McpRequestHead::parsed(self.body, method, self.id, target, false));
            let arguments = match (bind_arguments, raw_arguments) {
                (false, _) => ArgumentsBinding::Unbound,
                (true, None) => ArgumentsBinding::Raw(None),
                (true, Some(raw)) => {
                    let span = json::span_of(self.body, raw.get()).ok_or_else(|| self.internal())?;
                    ArgumentsBinding::Raw(Some(self.body.slice(span)))
                }
            };
            let plan = ResponsePlan::Seal(SealContext {
                id: self.id.map(|id| self.shared(id)),
                method,
                target: target.map(|target| self.shared(target)),
                principal,
                arguments,
                pinned: None,
                round: 1,
            });
            return Ok((self.body.clone(), plan));
        };

        let audience = self.config.audience.as_deref();
        let mut binding = Binding::new(method, target, principal.as_deref()).with_audience(audience);
        let mut arguments = ArgumentsBinding::Unbound;
        if bind_arguments {
            // A v2 envelope is bound to the digest of v2's form; the next round is sealed as v4.
            let v2 = json::as_string(state.get()).is_some_and(|text| text.starts_with(V2_PREFIX));
            let digest = if v2 {
                ArgumentsDigest::both_of_value(raw_arguments.map(Raw::get))
            } else {
                ArgumentsDigest::exact_of_value(raw_arguments.map(Raw::get))
            };
            let digest = digest.map_err(|e| {
                tracing::debug!(method, error = %e, "arguments have no canonical form");
                Rejection::ArgumentsUnbindable {
                    id: self.owned_id(),
                    detail: e.to_string(),
                }
            })?;
            binding = binding.with_arguments(digest);
            arguments = ArgumentsBinding::Digest(digest);
        }
        let span = json::span_of(self.body, state.get()).ok_or_else(|| self.internal())?;
        // Put the backend's own state back exactly as it sent it, or remove the member if it sent
        // none; from the decrypted buffer, before it is wiped.
        let restore = |opened: Opened<'_>| {
            let rewritten = match opened.state {
                Some(inner) => Some(json::splice(self.body, span, &[b"\"", inner.as_bytes(), b"\""])),
                None => {
                    json::member_removal_range(self.body, span).map(|cut| json::splice(self.body, cut, &[]))
                }
            };
            let continuation = Continuation::new(
                method,
                target.map(|target| self.shared(target)),
                opened.round,
                opened.expires_at,
                EnvelopeId::from_nonce(opened.nonce),
            );
            (opened.route, continuation, rewritten)
        };
        let (route, continuation, rewritten) = self
            .open_with(Purpose::REQUEST_STATE, &binding, state, restore)
            .map_err(|reason| self.refuse(method, Purpose::REQUEST_STATE, &reason))?;
        // A retry of round r is answered, if again input_required, by round r + 1: refused once
        // r reaches the limit, before the backend is asked once more.
        let round = continuation.round();
        let limit = self.config.max_rounds;
        let next_round = round.checked_add(1).filter(|_| round < limit);
        let Some(next_round) = next_round else {
            tracing::debug!(method, round, limit, "request refused: too many rounds");
            return Err(Rejection::TooManyRounds {
                id: self.owned_id(),
                limit,
            });
        };
        verify_mirrored_headers(parts, method, target, false, self.id)?;
        let rewritten = rewritten.ok_or_else(|| self.internal())?;
        tracing::debug!(method, route = %route, "requestState opened");

        set_body_length(&mut parts.headers, rewritten.len());
        parts.extensions.insert(PinnedRoute(route.clone()));
        parts.extensions.insert(continuation);
        parts
            .extensions
            .insert(McpRequestHead::parsed(self.body, method, self.id, target, true));
        let plan = ResponsePlan::Seal(SealContext {
            id: self.id.map(|id| self.shared(id)),
            method,
            target: target.map(|target| self.shared(target)),
            principal,
            arguments,
            pinned: Some(route),
            round: next_round,
        });
        Ok((rewritten, plan))
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: open the handle in `params.taskId`, put the
    /// backend's task id back in the body and in `Mcp-Name`, and pin the route.
    fn task_follow_up(
        self,
        parts: &mut Parts,
        method: &'static str,
    ) -> Result<(Bytes, ResponsePlan), Rejection> {
        let invalid = || Rejection::InvalidEnvelope {
            id: self.owned_id(),
            purpose: Purpose::TASK_HANDLE.name(),
        };
        let params = self.params.ok_or_else(invalid)?;
        if params.request_state.is_some() {
            tracing::debug!(method, "requestState on a task request");
            return Err(Rejection::StateNotAccepted { id: self.owned_id() });
        }
        let raw = params.task_id.ok_or_else(invalid)?;
        let handle = json::as_string(raw.get()).ok_or_else(invalid)?;
        // The layer rewrites Mcp-Name here, so it checks what the backend no longer can: the header
        // the client sent must be present and name the handle.
        verify_mirrored_headers(parts, method, Some(&handle), true, self.id)?;
        // SEP-2663: a client that did not declare the extension gets -32021, whatever it sent.
        if !jsonrpc::declares_tasks_extension(params.meta) {
            return Err(Rejection::MissingTasksCapability { id: self.owned_id() });
        }
        let principal = self.principal(parts, method)?;
        let mut nonce = [0; 24];
        let opened = self
            .open_with(
                Purpose::TASK_HANDLE,
                &task_binding(self.config.audience.as_deref(), principal.as_deref()),
                raw,
                |opened| {
                    nonce = opened.nonce;
                    opened.into_sealed()
                },
            )
            .map_err(|reason| self.refuse(method, Purpose::TASK_HANDLE, &reason))?;
        // A follow-up continues the call that created the task: it is checked as that call, so
        // that a caller no longer permitted the tool cannot drive its task on (a handle sealed
        // before format v4 names no tool, and is checked as a call naming none).
        let call_target = opened.call_target.as_deref();
        if let Some(authorize) = &self.config.authorize {
            authorize(parts, "tools/call", call_target)
                .map_err(|denied| denial(method, call_target, denied, self.id))?;
        }
        let backend_raw = opened.state.as_deref().ok_or_else(invalid)?;
        let backend_id = json::decode_contents(backend_raw).ok_or_else(invalid)?;

        let span = json::span_of(self.body, raw.get()).ok_or_else(|| self.internal())?;
        let rewritten = json::splice(self.body, span, &[b"\"", backend_raw.as_bytes(), b"\""]);
        // The extension requires Mcp-Name to equal params.taskId.
        let name = encode_header_value(&backend_id).ok_or_else(invalid)?;
        parts.headers.insert(MCP_NAME, name);
        set_body_length(&mut parts.headers, rewritten.len());
        parts.extensions.insert(PinnedRoute(opened.route.clone()));
        parts.extensions.insert(Continuation::new(
            "tools/call",
            opened.call_target.as_deref().map(SharedStr::from),
            // A task handle belongs to no round (one sealed as v2 opens as round 1).
            0,
            opened.expires_at,
            EnvelopeId::from_nonce(nonce),
        ));
        parts.extensions.insert(McpRequestHead::parsed(
            self.body,
            method,
            self.id,
            Some(&backend_id),
            false,
        ));
        tracing::debug!(method, route = %opened.route, "task handle opened");
        let handle = string_contents_of(raw);
        parts.extensions.insert(TaskHandle::new(&handle));
        let handles = HashMap::from([(backend_id, handle)]);
        Ok((
            rewritten,
            ResponsePlan::Tasks(TaskContext {
                id: self.owned_id(),
                pinned: opened.route,
                handles,
            }),
        ))
    }

    /// `subscriptions/listen` whose `notifications.taskIds` holds task handles: open them all
    /// (at most [`MAX_LISTEN_TASK_IDS`]; they must lead to one backend), write the backend's ids
    /// in their place (each once) and pin the route.
    fn listen(self, parts: &mut Parts) -> Result<(Bytes, ResponsePlan), Rejection> {
        let method = jsonrpc::LISTEN_METHOD;
        let invalid_params = || Rejection::InvalidParams { id: self.owned_id() };
        let task_ids = match self.params.and_then(|p| p.notifications) {
            None => None,
            Some(filter) => jsonrpc::parse_listen_task_ids(filter).map_err(|e| match e {
                ReadError::NotAnObject => invalid_params(),
                other => unreadable(other, self.owned_id()),
            })?,
        };
        let handles: Vec<Raw<'_>> = match task_ids {
            None => Vec::new(),
            Some(raw) => {
                let Elements(elements) = serde_json::from_str(raw.get()).map_err(|_| invalid_params())?;
                elements.into_iter().map(Raw::from).collect()
            }
        };
        parts
            .extensions
            .insert(McpRequestHead::parsed(self.body, method, self.id, None, false));
        let Some(task_ids) = task_ids.filter(|_| !handles.is_empty()) else {
            return Ok((self.body.clone(), ResponsePlan::Passthrough));
        };
        if handles.len() > MAX_LISTEN_TASK_IDS {
            return Err(Rejection::TooManyTaskIds {
                id: self.owned_id(),
                limit: MAX_LISTEN_TASK_IDS,
            });
        }
        if !jsonrpc::declares_tasks_extension(self.params.and_then(|p| p.meta)) {
            return Err(Rejection::MissingTasksCapability { id: self.owned_id() });
        }
        let principal = self.principal(parts, method)?;
        let binding = task_binding(self.config.audience.as_deref(), principal.as_deref());
        let invalid = || Rejection::InvalidEnvelope {
            id: self.owned_id(),
            purpose: Purpose::TASK_HANDLE.name(),
        };
        let mut route: Option<Route> = None;
        // Backend id → the first handle the client sent for it; backend ids in request order.
        let mut presented: HashMap<String, String> = HashMap::new();
        let mut backend_ids: Vec<String> = Vec::new();
        for raw in handles {
            let contents = string_contents_of(raw);
            if presented.values().any(|h| *h == contents) {
                continue; // the same handle twice: opened once, forwarded once
            }
            let opened = self
                .open(Purpose::TASK_HANDLE, &binding, raw)
                .map_err(|reason| self.refuse(method, Purpose::TASK_HANDLE, &reason))?;
            if route.as_ref().is_some_and(|r| *r != opened.route) {
                return Err(Rejection::MixedTaskRoutes { id: self.owned_id() });
            }
            route = Some(opened.route);
            let backend_raw = opened.state.ok_or_else(invalid)?;
            let backend_id = json::decode_contents(&backend_raw).ok_or_else(invalid)?;
            if let std::collections::hash_map::Entry::Vacant(slot) = presented.entry(backend_id) {
                slot.insert(contents);
                backend_ids.push(backend_raw);
            }
        }
        let pinned = route.ok_or_else(invalid)?;
        // The filter is rewritten whole: the backend's ids, each once, in the client's order.
        let mut array = Vec::with_capacity(2 + backend_ids.iter().map(|id| id.len() + 3).sum::<usize>());
        array.push(b'[');
        for (i, backend_raw) in backend_ids.iter().enumerate() {
            if i > 0 {
                array.push(b',');
            }
            array.push(b'"');
            array.extend_from_slice(backend_raw.as_bytes());
            array.push(b'"');
        }
        array.push(b']');
        let span = json::span_of(self.body, task_ids.get()).ok_or_else(|| self.internal())?;
        let rewritten = json::splice(self.body, span, &[&array]);
        set_body_length(&mut parts.headers, rewritten.len());
        parts.extensions.insert(PinnedRoute(pinned.clone()));
        tracing::debug!(method, route = %pinned, tasks = backend_ids.len(), "task handles opened");
        Ok((
            rewritten,
            ResponsePlan::Tasks(TaskContext {
                id: self.owned_id(),
                pinned,
                handles: presented,
            }),
        ))
    }

    /// A value the layer parsed from the body is not where the parser said: cannot happen with
    /// borrowed values, and is refused rather than trusted if it ever does.
    fn internal(&self) -> Rejection {
        Rejection::Unreadable {
            id: self.owned_id(),
            detail: "the relay could not locate a member it parsed".to_owned(),
        }
    }
}

/// The raw contents (between the quotes) of a JSON string token, or the whole token.
fn string_contents_of(raw: Raw<'_>) -> String {
    json::string_contents(raw.get()).unwrap_or(raw.get()).to_owned()
}

/// Declares the length of a rewritten body: the old `Content-Length` (or chunked framing) no
/// longer matches it.
fn set_body_length(headers: &mut HeaderMap, len: usize) {
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    headers.remove(header::TRANSFER_ENCODING);
}

/// A batch is forwarded untouched unless an element carries something the layer would have to
/// open (a `requestState`, a task handle in a follow-up or a subscription filter): no element can
/// be opened and rewritten on its own. If an element may answer `input_required`, the answer is
/// checked (and such an answer fails closed).
fn process_batch(config: &Config, parts: &Parts, body: &[u8]) -> Result<ResponsePlan, Rejection> {
    let Elements(elements) = serde_json::from_slice(body).map_err(|_| Rejection::ParseError)?;
    let mut plan = ResponsePlan::Passthrough;
    for element in elements {
        if !json::is_object(element.get()) {
            continue;
        }
        let refuse = |detail: &'static str| {
            tracing::debug!(detail, "batch refused");
            Rejection::Batch { detail }
        };
        let unreadable = "A JSON-RPC batch element cannot be read unambiguously";
        let message = jsonrpc::parse_request(element.get().as_bytes()).map_err(|_| refuse(unreadable))?;
        let Some(method) = message.method.as_deref() else {
            continue;
        };
        let params = match message.params {
            ParamsField::Absent | ParamsField::NotAnObject => None,
            ParamsField::Object(Ok(params)) => Some(params),
            ParamsField::Object(Err(_)) | ParamsField::MistypedWithState => return Err(refuse(unreadable)),
        };
        let carries = "JSON-RPC batches cannot carry requestState or task handles";
        if params.as_ref().is_some_and(|p| p.request_state.is_some())
            || jsonrpc::TASK_METHODS.contains(&method)
        {
            return Err(refuse(carries));
        }
        if method == jsonrpc::LISTEN_METHOD {
            let filter = params.as_ref().and_then(|p| p.notifications);
            let task_ids = filter.map(jsonrpc::parse_listen_task_ids).transpose();
            match task_ids.map_err(|_| refuse(unreadable))? {
                Some(Some(ids)) if ids.get() != "null" && ids.get().trim() != "[]" => {
                    return Err(refuse(carries));
                }
                _ => {}
            }
        }
        if jsonrpc::may_require_input(method) {
            plan = ResponsePlan::Batch;
        }
        if let Some(authorize) = &config.authorize
            && jsonrpc::INPUT_REQUIRED_METHODS.contains(&method)
        {
            let target = params.as_ref().and_then(|p| match method {
                "resources/read" => p.uri.as_deref(),
                _ => p.name.as_deref(),
            });
            authorize(parts, method, target).map_err(|denied| denial(method, target, denied, None))?;
        }
    }
    Ok(plan)
}

/// Checks `Mcp-Method` and `Mcp-Name` against the body, when present; with `require_name`, a
/// missing `Mcp-Name` is a mismatch too. Returns the name of the first header that disagrees.
pub(crate) fn check_mirrored_headers(
    headers: &HeaderMap,
    method: &str,
    target: Option<&str>,
    require_name: bool,
) -> Result<(), &'static str> {
    for value in headers.get_all(MCP_METHOD) {
        if value.as_bytes() != method.as_bytes() {
            return Err("Mcp-Method");
        }
    }
    if require_name && !headers.contains_key(MCP_NAME) {
        return Err("Mcp-Name");
    }
    for value in headers.get_all(MCP_NAME) {
        let names_target = match target {
            Some(target) => header_value_is(value, target),
            None => decode_header_value(value).is_none(),
        };
        if !names_target {
            return Err("Mcp-Name");
        }
    }
    Ok(())
}

/// [`check_mirrored_headers`] on a request the layer is about to rewrite, as the client's answer.
fn verify_mirrored_headers(
    parts: &Parts,
    method: &str,
    target: Option<&str>,
    require_name: bool,
    id: Option<&str>,
) -> Result<(), Rejection> {
    check_mirrored_headers(&parts.headers, method, target, require_name).map_err(|header| {
        tracing::debug!(method, header, "mirrored header disagrees with the body");
        Rejection::HeaderMismatch {
            id: owned(id),
            header,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrored_headers_must_match_when_present() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("a"), false),
            Ok(())
        );
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("a"), true),
            Err("Mcp-Name")
        );
        headers.insert(MCP_METHOD, HeaderValue::from_static("tools/call"));
        headers.insert(MCP_NAME, HeaderValue::from_static("a"));
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("a"), false),
            Ok(())
        );
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("b"), false),
            Err("Mcp-Name")
        );
        assert_eq!(
            check_mirrored_headers(&headers, "prompts/get", Some("a"), false),
            Err("Mcp-Method")
        );
        headers.append(MCP_NAME, HeaderValue::from_static("b"));
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("a"), false),
            Err("Mcp-Name")
        );
    }
}
