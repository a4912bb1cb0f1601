//! The response path: seal `input_required` states and task ids, show a backend's task ids to the
//! client as the handles it holds, and fail closed on anything that would need sealing but cannot
//! be sealed.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::value::RawValue;

use crate::clock::expiry;
use crate::config::Config;
use crate::envelope::{Contents, Purpose, Sealer, Wire};
use crate::json::{self, Elements, Raw};
use crate::jsonrpc::{self, ReadError, ResultField};
use crate::metrics;
use crate::request::{ResponsePlan, SealContext, TaskContext, task_binding};
use crate::route::Route;
use crate::shared_str::SharedStr;

/// Rewrites the messages of one answer (a JSON body, or each candidate event of a stream)
/// according to the request's [`ResponsePlan`].
pub(crate) struct Rewriter {
    config: Arc<Config>,
    /// The keyring the request arrived under: a request in flight finishes with it.
    sealer: Sealer,
    plan: ResponsePlan,
    route: Result<Route, Unrelayable>,
    /// Set once a `requestState` is sealed (an [`Outcome::Sealed`](crate::Outcome) answer).
    sealed: AtomicBool,
}

impl Rewriter {
    /// `reported` is the route the proxy put into the response's extensions.
    pub(crate) fn new(
        config: Arc<Config>,
        sealer: Sealer,
        plan: ResponsePlan,
        reported: Option<&Route>,
    ) -> Self {
        let route = match &plan {
            ResponsePlan::Seal(ctx) => resolve_route(&config, ctx.pinned.as_ref(), reported),
            ResponsePlan::Tasks(ctx) => resolve_route(&config, Some(&ctx.pinned), reported),
            ResponsePlan::Batch => Err(Unrelayable::Batch),
            ResponsePlan::Passthrough | ResponsePlan::Inspect => Err(Unrelayable::NotRead),
        };
        Self {
            config,
            sealer,
            plan,
            route,
            sealed: AtomicBool::new(false),
        }
    }

    /// Whether a `requestState` was sealed into a message this rewriter rewrote.
    pub(crate) fn sealed(&self) -> bool {
        self.sealed.load(Ordering::Relaxed)
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the proxy answered a pinned request from another backend than the pinned one: a
    /// proxy bug, refused whatever the answer holds.
    pub(crate) fn route_mismatch(&self) -> Option<Unrelayable> {
        matches!(self.route, Err(Unrelayable::RouteMismatch)).then_some(Unrelayable::RouteMismatch)
    }

    /// Byte strings without which a message needs no change (for the SSE framer's pre-filter).
    pub(crate) fn needles(&self) -> Vec<Vec<u8>> {
        match &self.plan {
            ResponsePlan::Tasks(_) => jsonrpc::TASK_NEEDLES.iter().map(|n| n.to_vec()).collect(),
            _ => jsonrpc::RESPONSE_NEEDLES.iter().map(|n| n.to_vec()).collect(),
        }
    }

    /// The JSON-RPC id of the request, raw, for error answers.
    pub(crate) fn id(&self) -> Option<&str> {
        match &self.plan {
            ResponsePlan::Seal(ctx) => ctx.id.as_ref().map(SharedStr::as_str),
            ResponsePlan::Tasks(ctx) => ctx.id.as_deref(),
            ResponsePlan::Batch | ResponsePlan::Passthrough | ResponsePlan::Inspect => None,
        }
    }

    /// The message with what must change changed; the same bytes when nothing must.
    pub(crate) fn rewrite(&self, message: Bytes) -> Result<Bytes, Unrelayable> {
        let candidate = match &self.plan {
            ResponsePlan::Tasks(_) => jsonrpc::may_hold_task_ids(&message),
            // Searchers for the fixed needles are built once; building one per message costs
            // more than the search.
            _ => jsonrpc::response_is_candidate(&message),
        };
        if !candidate {
            return Ok(message);
        }
        match &self.plan {
            ResponsePlan::Seal(ctx) => self.seal_message(ctx, message),
            ResponsePlan::Tasks(ctx) => present_handles(ctx, &self.route, message),
            ResponsePlan::Batch => check_batch(message),
            ResponsePlan::Passthrough | ResponsePlan::Inspect => check_unread(message),
        }
    }

    /// Seals the `requestState` of one JSON-RPC response if its result is `input_required`, and
    /// the `taskId` if it is a `tools/call` answered with a task; returns the body unchanged
    /// otherwise.
    fn seal_message(&self, ctx: &SealContext, body: Bytes) -> Result<Bytes, Unrelayable> {
        let answer = jsonrpc::parse_answer(&body).map_err(Unrelayable::from)?;
        let head = match answer.result {
            ResultField::Absent | ResultField::NotAnObject => return Ok(body),
            ResultField::Object(head) => head.map_err(Unrelayable::from)?,
        };
        match head.result_type.as_deref() {
            Some("input_required") => {}
            // The Tasks extension allows task results on tools/call only; a client must reject
            // them elsewhere, so they are left alone.
            Some("task") if ctx.method == "tools/call" => return self.seal_task(ctx, &body, &head),
            _ => return Ok(body),
        }
        let route = self.route.clone()?;
        let envelope = self.seal_state(ctx, &route, head.request_state)?;
        let (span, before) = match (head.request_state, head.result_type_raw) {
            (Some(state), _) => (json::span_of(&body, state.get()), &b"\""[..]),
            // The backend sent no state (legal when it sent inputRequests); the client still
            // needs an envelope to carry the route, so one is added after `resultType`.
            (None, Some(result_type)) => (
                json::span_of(&body, result_type.get()).map(|span| span.end..span.end),
                &b",\"requestState\":\""[..],
            ),
            (None, None) => return Err(Unrelayable::Unreadable),
        };
        let span = span.ok_or(Unrelayable::Unreadable)?;
        let rewritten = splice_envelope(&body, span, before, &envelope)?;
        tracing::debug!(method = ctx.method, "requestState sealed");
        self.sealed.store(true, Ordering::Relaxed);
        Ok(rewritten)
    }

    /// Replaces the `taskId` of a task result by a sealed task handle, valid as long as the
    /// task's announced TTL (capped by the configured maximum; a `null` TTL gets the maximum).
    fn seal_task(
        &self,
        ctx: &SealContext,
        body: &Bytes,
        head: &jsonrpc::ResultHead<'_>,
    ) -> Result<Bytes, Unrelayable> {
        let config = &self.config;
        let route = self.route.clone()?;
        let task_id = head.task_id.ok_or(Unrelayable::TaskIdNotAString)?;
        let contents = json::string_contents(task_id.get()).ok_or(Unrelayable::TaskIdNotAString)?;
        let ttl = head
            .ttl_ms
            .and_then(|raw| raw.get().parse::<u64>().ok())
            .map_or(config.max_task_ttl, |ms| {
                Duration::from_millis(ms).min(config.max_task_ttl)
            });
        // Task handles belong to no round; they carry the tool of the call that created the task,
        // which a follow-up does not name, so that it can be checked and counted as that call.
        let sealed = Contents {
            route: &route,
            state: Some(contents),
            expires_at: expiry(config.clock.now(), ttl),
            round: 0,
            call_target: ctx.target.as_ref().map(SharedStr::as_str),
        };
        let handle = self
            .sealer
            .seal_wire(
                Purpose::TASK_HANDLE,
                &task_binding(config.audience.as_deref(), ctx.principal.as_deref()),
                sealed,
            )
            .map_err(|_| Unrelayable::Seal)?;
        if handle.len() > config.max_envelope_len {
            return Err(Unrelayable::EnvelopeTooLong);
        }
        let span = json::span_of(body, task_id.get()).ok_or(Unrelayable::Unreadable)?;
        let rewritten = splice_envelope(body, span, b"\"", &handle)?;
        metrics::sealed(Purpose::TASK_HANDLE, handle.len());
        tracing::debug!("task handle sealed");
        Ok(rewritten)
    }

    fn seal_state(
        &self,
        ctx: &SealContext,
        route: &Route,
        state: Option<Raw<'_>>,
    ) -> Result<Wire, Unrelayable> {
        let config = &self.config;
        let state = match state {
            None => None,
            Some(raw) => Some(json::string_contents(raw.get()).ok_or(Unrelayable::StateNotAString)?),
        };
        let contents = Contents {
            route,
            state,
            expires_at: expiry(config.clock.now(), config.ttl),
            round: ctx.round,
            call_target: None,
        };
        let binding = ctx.binding(config.audience.as_deref()).map_err(|e| {
            tracing::debug!(error = %e, "arguments of the call have no canonical form");
            Unrelayable::ArgumentsUnbindable
        })?;
        let envelope = self
            .sealer
            .seal_wire(Purpose::REQUEST_STATE, &binding, contents)
            .map_err(|_| Unrelayable::Seal)?;
        if envelope.len() > config.max_envelope_len {
            return Err(Unrelayable::EnvelopeTooLong);
        }
        metrics::sealed(Purpose::REQUEST_STATE, envelope.len());
        Ok(envelope)
    }
}

/// `body` with `span` replaced by `before`, the envelope's wire form written in place, and the
/// closing quote.
fn splice_envelope(
    body: &[u8],
    span: Range<usize>,
    before: &[u8],
    envelope: &Wire,
) -> Result<Bytes, Unrelayable> {
    let write = |out: &mut [u8]| envelope.write_to(out);
    json::splice_with(body, span, before, envelope.len(), write, b"\"").ok_or(Unrelayable::Seal)
}

/// Why an answer could not be relayed. Logged at debug level; the client sees one error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unrelayable {
    NoRoute,
    RouteMismatch,
    Unreadable,
    CaseVariant,
    StateNotAString,
    Seal,
    EnvelopeTooLong,
    ArgumentsUnbindable,
    TooLarge,
    ContentEncoding,
    ContentTypeConflict,
    BodyError,
    EventTooLarge,
    Batch,
    NotRead,
    TaskIdNotAString,
}

impl From<ReadError> for Unrelayable {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::CaseVariant(_) => Self::CaseVariant,
            _ => Self::Unreadable,
        }
    }
}

impl Unrelayable {
    /// A short, stable label for logs and metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::NoRoute => "no_route",
            Self::RouteMismatch => "route_mismatch",
            Self::Unreadable => "unreadable",
            Self::CaseVariant => "case_variant",
            Self::StateNotAString => "state_not_a_string",
            Self::Seal => "seal_failed",
            Self::EnvelopeTooLong => "envelope_too_long",
            Self::ArgumentsUnbindable => "arguments_unbindable",
            Self::TooLarge => "too_large",
            Self::ContentEncoding => "content_encoding",
            Self::ContentTypeConflict => "content_type_conflict",
            Self::BodyError => "body_error",
            Self::EventTooLarge => "event_too_large",
            Self::Batch => "batch",
            Self::NotRead => "request_not_read",
            Self::TaskIdNotAString => "task_id_not_a_string",
        }
    }

    /// What went wrong, for the debug log.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::NoRoute => "no route reported and no default route",
            Self::RouteMismatch => "reported route differs from the pinned route",
            Self::Unreadable => "response mentions input_required or a task but cannot be read",
            Self::CaseVariant => {
                "result has a member named like resultType, requestState or taskId but for case"
            }
            Self::StateNotAString => "requestState is not a string",
            Self::Seal => "sealing failed",
            Self::EnvelopeTooLong => "sealed state exceeds max_envelope_len",
            Self::ArgumentsUnbindable => "the call's arguments have no canonical form",
            Self::TooLarge => "response exceeds max_response_body",
            Self::ContentEncoding => "response has a Content-Encoding the layer does not decode",
            Self::ContentTypeConflict => "response has Content-Type headers naming different media types",
            Self::BodyError => "backend body failed",
            Self::EventTooLarge => "SSE event exceeds max_sse_event",
            Self::Batch => "input_required or task result inside a batch response",
            Self::NotRead => "input_required or task result answering a request the layer did not read",
            Self::TaskIdNotAString => "task result without a string taskId",
        }
    }
}

/// The route to seal: the one the proxy reported, else the default. A retry must be answered by
/// the backend it was pinned to: the reported route must be `==` the pinned one, name and
/// identity.
pub(crate) fn resolve_route(
    config: &Config,
    pinned: Option<&Route>,
    reported: Option<&Route>,
) -> Result<Route, Unrelayable> {
    let route = reported
        .or(config.default_route.as_ref())
        .ok_or(Unrelayable::NoRoute)?;
    match pinned {
        Some(pinned) if pinned != route => Err(Unrelayable::RouteMismatch),
        _ => Ok(route.clone()),
    }
}

/// Shows every task id of the backend that the request named (by handle) as that handle, where
/// task ids sit (`taskId` members, `taskIds` arrays); every other byte is kept.
fn present_handles(
    ctx: &TaskContext,
    route: &Result<Route, Unrelayable>,
    body: Bytes,
) -> Result<Bytes, Unrelayable> {
    route.clone()?;
    if serde_json::from_slice::<&RawValue>(&body).is_err() {
        return Err(Unrelayable::Unreadable);
    }
    Ok(jsonrpc::map_task_ids(&body, &ctx.handles).unwrap_or(body))
}

/// Checks the answer to a request the layer did not read: anything that would need sealing
/// fails closed, whole.
fn check_unread(body: Bytes) -> Result<Bytes, Unrelayable> {
    let unsafe_message = match json::first_significant(&body) {
        Some(b'[') => match serde_json::from_slice::<Elements<'_>>(&body) {
            Ok(Elements(elements)) => elements
                .iter()
                .any(|e| jsonrpc::needs_sealing(e.get().as_bytes())),
            Err(_) => true,
        },
        _ => jsonrpc::needs_sealing(&body),
    };
    if unsafe_message {
        Err(Unrelayable::NotRead)
    } else {
        Ok(body)
    }
}

/// Checks the answer to a batch: elements that are `input_required` or task results (or that
/// cannot be read while mentioning one) are replaced by JSON-RPC errors, since a batch gives no
/// binding to seal them under.
fn check_batch(body: Bytes) -> Result<Bytes, Unrelayable> {
    if json::first_significant(&body) != Some(b'[') {
        // Not an array: judge it as a single message without a seal context.
        return if jsonrpc::needs_sealing(&body) {
            Err(Unrelayable::Batch)
        } else {
            Ok(body)
        };
    }
    let Elements(elements) = serde_json::from_slice(&body).map_err(|_| Unrelayable::Unreadable)?;
    let mut replaced = false;
    let mut out = BytesMut::with_capacity(body.len());
    out.extend_from_slice(b"[");
    for (i, element) in elements.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        let raw = element.get().as_bytes();
        if jsonrpc::response_is_candidate(raw) && jsonrpc::needs_sealing(raw) {
            replaced = true;
            let id = jsonrpc::parse_answer(raw)
                .ok()
                .and_then(|a| a.id.map(|id| id.get().to_owned()));
            out.extend_from_slice(&crate::error::Rejection::Unrelayable { id }.body());
        } else {
            out.extend_from_slice(raw);
        }
    }
    out.extend_from_slice(b"]");
    if replaced {
        metrics::failed_closed(Unrelayable::Batch.label());
        tracing::debug!(
            reason = Unrelayable::Batch.reason(),
            "batch element failed closed"
        );
        Ok(out.freeze())
    } else {
        Ok(body)
    }
}
