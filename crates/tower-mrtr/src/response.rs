//! The response path: find an `input_required` result and seal its `requestState`.

use bytes::{Bytes, BytesMut};
use serde_json::value::RawValue;

use crate::envelope::{Purpose, Sealed};
use crate::jsonrpc;
use crate::layer::Config;
use crate::request::SealContext;
use crate::route::Route;

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

/// Seals the `requestState` of one JSON-RPC response if its result is `input_required`;
/// returns the body unchanged (same bytes) otherwise.
pub(crate) fn seal_message(
    config: &Config,
    ctx: &SealContext,
    route: &Result<Route, Unrelayable>,
    body: Bytes,
) -> Result<Bytes, Unrelayable> {
    if !jsonrpc::response_is_candidate(&body) {
        return Ok(body);
    }
    let message = jsonrpc::parse_message(&body).ok_or(Unrelayable::Unreadable)?;
    let Some(result) = message.result else {
        return Ok(body);
    };
    if !jsonrpc::is_object(result.get()) {
        return Ok(body);
    }
    let head = jsonrpc::parse_result(result).ok_or(Unrelayable::Unreadable)?;
    if head.result_type.as_deref() != Some("input_required") {
        return Ok(body);
    }
    let route = route.clone()?;
    let envelope = seal_state(config, ctx, route, head.request_state)?;
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

fn seal_state(
    config: &Config,
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
    let envelope = config
        .sealer
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
pub(crate) fn check_batch(body: Bytes) -> Result<Bytes, Unrelayable> {
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
