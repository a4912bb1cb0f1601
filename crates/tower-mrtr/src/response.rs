//! The response path: seal `input_required` states and task ids, and show a backend's task ids
//! to the client as the handles it holds.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::value::RawValue;

use crate::config::Config;
use crate::envelope::{Purpose, Sealed, Sealer};
use crate::jsonrpc;
use crate::request::{ResponsePlan, SealContext, TaskContext, task_binding};
use crate::route::Route;

/// Rewrites the messages of one answer (a JSON body, or each candidate event of a stream)
/// according to the request's [`ResponsePlan`].
pub(crate) struct Rewriter {
    config: Arc<Config>,
    /// The keyring the request arrived under: a request in flight finishes with it.
    sealer: Sealer,
    plan: ResponsePlan,
    route: Result<Route, Unrelayable>,
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
            ResponsePlan::Batch | ResponsePlan::Passthrough => Err(Unrelayable::Batch),
        };
        Self {
            config,
            sealer,
            plan,
            route,
        }
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
            ResponsePlan::Tasks(ctx) => {
                // A backend id could be written with any escapes; `\` makes such messages parse.
                let mut needles: Vec<Vec<u8>> = ctx.ids.iter().map(|(b, _)| b.as_bytes().to_vec()).collect();
                needles.push(b"\\".to_vec());
                needles
            }
            _ => jsonrpc::RESPONSE_NEEDLES.iter().map(|n| n.to_vec()).collect(),
        }
    }

    /// The JSON-RPC id of the request, raw, for error answers.
    pub(crate) fn id(&self) -> Option<&str> {
        match &self.plan {
            ResponsePlan::Seal(ctx) => ctx.id.as_deref(),
            ResponsePlan::Tasks(ctx) => ctx.id.as_deref(),
            ResponsePlan::Batch | ResponsePlan::Passthrough => None,
        }
    }

    /// The message with what must change changed; the same bytes when nothing must.
    pub(crate) fn rewrite(&self, message: Bytes) -> Result<Bytes, Unrelayable> {
        let candidate = match &self.plan {
            // Searchers for the fixed needles are built once (`jsonrpc::RESPONSE_FINDERS`);
            // building one per message costs more than the search.
            ResponsePlan::Seal(_) | ResponsePlan::Batch | ResponsePlan::Passthrough => {
                jsonrpc::response_is_candidate(&message)
            }
            ResponsePlan::Tasks(ctx) => {
                memchr::memchr(b'\\', &message).is_some()
                    || ctx
                        .ids
                        .iter()
                        .any(|(b, _)| memchr::memmem::find(&message, b.as_bytes()).is_some())
            }
        };
        if !candidate {
            return Ok(message);
        }
        match &self.plan {
            ResponsePlan::Seal(ctx) => seal_message(&self.config, &self.sealer, ctx, &self.route, message),
            ResponsePlan::Tasks(ctx) => present_handles(ctx, &self.route, message),
            ResponsePlan::Batch | ResponsePlan::Passthrough => check_batch(message),
        }
    }
}

/// Why an answer could not be relayed. Logged at debug level; the client sees one error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unrelayable {
    NoRoute,
    RouteMismatch,
    Unreadable,
    StateNotAString,
    Seal,
    EnvelopeTooLong,
    TooLarge,
    ContentEncoding,
    BodyError,
    EventTooLarge,
    Batch,
    TaskIdNotAString,
}

impl Unrelayable {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::NoRoute => "no route reported and no default route",
            Self::RouteMismatch => "reported route differs from the pinned route",
            Self::Unreadable => "response mentions input_required but cannot be read",
            Self::StateNotAString => "requestState is not a string",
            Self::Seal => "sealing failed",
            Self::EnvelopeTooLong => "sealed state exceeds max_envelope_len",
            Self::TooLarge => "response exceeds max_response_body",
            Self::ContentEncoding => "response has a Content-Encoding the layer does not decode",
            Self::BodyError => "backend body failed",
            Self::EventTooLarge => "SSE event exceeds max_sse_event",
            Self::Batch => "input_required inside a batch response",
            Self::TaskIdNotAString => "task result without a string taskId",
        }
    }
}

/// The route to seal: the one the proxy reported, else the default. A retry must be answered by
/// the backend it was pinned to.
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

/// Seals the `requestState` of one JSON-RPC response if its result is `input_required`, and the
/// `taskId` if it is a `tools/call` answered with a task; returns the body unchanged otherwise.
fn seal_message(
    config: &Config,
    sealer: &Sealer,
    ctx: &SealContext,
    route: &Result<Route, Unrelayable>,
    body: Bytes,
) -> Result<Bytes, Unrelayable> {
    let message = jsonrpc::parse_message(&body).ok_or(Unrelayable::Unreadable)?;
    let Some(result) = message.result else {
        return Ok(body);
    };
    if !jsonrpc::is_object(result.get()) {
        return Ok(body);
    }
    let head = jsonrpc::parse_result(result).ok_or(Unrelayable::Unreadable)?;
    match head.result_type.as_deref() {
        Some("input_required") => {}
        // The Tasks extension allows task results on tools/call only; a client must reject them
        // elsewhere, so they are left alone.
        Some("task") if ctx.method == "tools/call" => {
            return seal_task(config, sealer, ctx, route, &body, &head);
        }
        _ => return Ok(body),
    }
    let route = route.clone()?;
    let envelope = seal_state(config, sealer, ctx, route, head.request_state)?;
    let rewritten = match head.request_state {
        Some(state) => {
            let span = jsonrpc::span_of(&body, state.get()).ok_or(Unrelayable::Unreadable)?;
            jsonrpc::splice(&body, span, &[b"\"", envelope.as_bytes(), b"\""])
        }
        None => {
            // The backend sent no state (legal when it sent inputRequests); the client still needs
            // an envelope to carry the route, so one is added as the result's first member.
            let span = jsonrpc::span_of(&body, result.get()).ok_or(Unrelayable::Unreadable)?;
            let brace = body[span.clone()]
                .iter()
                .position(|&b| b == b'{')
                .ok_or(Unrelayable::Unreadable)?;
            let at = span.start + brace + 1;
            jsonrpc::splice(
                &body,
                at..at,
                &[b"\"requestState\":\"", envelope.as_bytes(), b"\","],
            )
        }
    };
    tracing::debug!(method = ctx.method, "requestState sealed");
    Ok(rewritten)
}

/// Replaces the `taskId` of a task result by a sealed task handle, valid as long as the task's
/// announced TTL (capped by the configured maximum; a `null` TTL gets the maximum).
fn seal_task(
    config: &Config,
    sealer: &Sealer,
    ctx: &SealContext,
    route: &Result<Route, Unrelayable>,
    body: &Bytes,
    head: &jsonrpc::ResultHead<'_>,
) -> Result<Bytes, Unrelayable> {
    let route = route.clone()?;
    let task_id = head.task_id.ok_or(Unrelayable::TaskIdNotAString)?;
    let contents = jsonrpc::string_contents(task_id).ok_or(Unrelayable::TaskIdNotAString)?;
    let ttl = head
        .ttl_ms
        .and_then(|raw| raw.get().parse::<u64>().ok())
        .map_or(config.max_task_ttl, |ms| {
            Duration::from_millis(ms).min(config.max_task_ttl)
        });
    let sealed = Sealed {
        route,
        state: Some(contents.to_owned()),
        expires_at: config.clock.now() + ttl,
    };
    let handle = sealer
        .seal(
            Purpose::TaskHandle,
            &task_binding(ctx.principal.as_deref()),
            &sealed,
        )
        .map_err(|_| Unrelayable::Seal)?;
    if handle.len() > config.max_envelope_len {
        return Err(Unrelayable::EnvelopeTooLong);
    }
    let span = jsonrpc::span_of(body, task_id.get()).ok_or(Unrelayable::Unreadable)?;
    tracing::debug!("task handle sealed");
    Ok(jsonrpc::splice(body, span, &[b"\"", handle.as_bytes(), b"\""]))
}

/// Shows every task id of the backend that the request named (by handle) as that handle.
fn present_handles(
    ctx: &TaskContext,
    route: &Result<Route, Unrelayable>,
    body: Bytes,
) -> Result<Bytes, Unrelayable> {
    route.clone()?;
    if serde_json::from_slice::<&RawValue>(&body).is_err() {
        return Err(Unrelayable::Unreadable);
    }
    Ok(jsonrpc::replace_string_values(&body, |value| ctx.handle_for(value)).unwrap_or(body))
}

fn seal_state(
    config: &Config,
    sealer: &Sealer,
    ctx: &SealContext,
    route: Route,
    state: Option<&RawValue>,
) -> Result<String, Unrelayable> {
    let state = match state {
        None => None,
        Some(raw) => Some(
            jsonrpc::string_contents(raw)
                .ok_or(Unrelayable::StateNotAString)?
                .to_owned(),
        ),
    };
    let sealed = Sealed {
        route,
        state,
        expires_at: config.clock.now() + config.ttl,
    };
    let envelope = sealer
        .seal(Purpose::RequestState, &ctx.binding(), &sealed)
        .map_err(|_| Unrelayable::Seal)?;
    if envelope.len() > config.max_envelope_len {
        return Err(Unrelayable::EnvelopeTooLong);
    }
    Ok(envelope)
}

/// Checks the answer to a batch: elements that are `input_required` results (or that cannot be
/// read while mentioning it) are replaced by JSON-RPC errors, since a batch gives no binding to
/// seal them under.
fn check_batch(body: Bytes) -> Result<Bytes, Unrelayable> {
    if !jsonrpc::response_is_candidate(&body) {
        return Ok(body);
    }
    if jsonrpc::first_significant(&body) != Some(b'[') {
        // Not an array: judge it as a single message without a seal context.
        return match jsonrpc::parse_message(&body) {
            Some(m) if !is_input_required(&m) => Ok(body),
            _ => Err(Unrelayable::Batch),
        };
    }
    let elements = serde_json::from_slice::<Vec<&RawValue>>(&body).map_err(|_| Unrelayable::Unreadable)?;
    let mut replaced = false;
    let mut out = BytesMut::with_capacity(body.len());
    out.extend_from_slice(b"[");
    for (i, element) in elements.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        let raw = element.get();
        let unsafe_element = jsonrpc::response_is_candidate(raw.as_bytes())
            && match jsonrpc::parse_message(raw.as_bytes()) {
                Some(m) => is_input_required(&m),
                None => jsonrpc::is_object(raw),
            };
        if unsafe_element {
            replaced = true;
            let id = jsonrpc::parse_message(raw.as_bytes()).and_then(|m| m.id.map(|id| id.get().to_owned()));
            let error = crate::error::Rejection::Unrelayable { id };
            out.extend_from_slice(&error.body());
        } else {
            out.extend_from_slice(raw.as_bytes());
        }
    }
    out.extend_from_slice(b"]");
    if replaced {
        tracing::debug!(
            reason = Unrelayable::Batch.reason(),
            "batch element failed closed"
        );
        Ok(out.freeze())
    } else {
        Ok(body)
    }
}

fn is_input_required(message: &jsonrpc::Message<'_>) -> bool {
    match message.result {
        Some(result) if jsonrpc::is_object(result.get()) => match jsonrpc::parse_result(result) {
            Some(head) => head.result_type.as_deref() == Some("input_required"),
            None => true,
        },
        _ => false,
    }
}
