//! The request path: read the buffered body, open any envelope, restore the backend's state.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, header};
use serde_json::value::RawValue;

use crate::envelope::{Binding, OpenError, Purpose};
use crate::error::Rejection;
use crate::jsonrpc::{self, Message};
use crate::layer::Config;
use crate::mcp_headers::decode_header_value;
use crate::mcp_headers::{MCP_METHOD, MCP_NAME};
use crate::route::{McpRequestHead, PinnedRoute, Route};

/// What the response path must do with the answer to a request.
#[derive(Debug)]
pub(crate) enum ResponsePlan {
    /// Nothing the layer must seal can come back: pass it through untouched.
    Passthrough,
    /// The answer may be `input_required`: seal it with this context.
    Seal(SealContext),
    /// A batch holding requests that may answer `input_required`: such answers cannot be sealed
    /// (no binding per element) and fail closed.
    Batch,
}

/// What the response path needs to seal an answer: the request's binding and id.
#[derive(Debug)]
pub(crate) struct SealContext {
    pub(crate) id: Option<String>,
    pub(crate) method: &'static str,
    pub(crate) target: Option<String>,
    pub(crate) principal: Option<String>,
    pub(crate) pinned: Option<Route>,
}

impl SealContext {
    pub(crate) fn binding(&self) -> Binding<'_> {
        Binding::new(self.method, self.target.as_deref(), self.principal.as_deref())
    }
}

/// Inspects a buffered POST body. On success returns the body to forward (the same bytes unless
/// an envelope was opened) and the response plan; `parts` gains the extensions and, after a
/// rewrite, a correct `Content-Length`.
pub(crate) fn process(
    config: &Config,
    parts: &mut Parts,
    body: Bytes,
) -> Result<(Bytes, ResponsePlan), Rejection> {
    match jsonrpc::first_significant(&body) {
        Some(b'{') => {}
        Some(b'[') => return process_batch(&body).map(|plan| (body, plan)),
        // Not a JSON object or array: no backend can read it as a JSON-RPC request.
        _ => return Ok((body, ResponsePlan::Passthrough)),
    }
    let Some(message) = jsonrpc::parse_message(&body) else {
        return if serde_json::from_slice::<&RawValue>(&body).is_ok() {
            // Valid JSON the layer cannot read as one request (duplicate members, a method that is
            // not a string): a backend might read it differently, so it is refused, not guessed at.
            Err(Rejection::Unreadable { id: None })
        } else {
            Ok((body, ResponsePlan::Passthrough))
        };
    };
    let id = message.id.map(|raw| raw.get().to_owned());
    let Some(method) = message.method.as_deref() else {
        // A response or a malformed message: nothing to open, nothing to seal.
        return Ok((body, ResponsePlan::Passthrough));
    };

    let Some(method) = jsonrpc::INPUT_REQUIRED_METHODS
        .iter()
        .copied()
        .find(|m| *m == method)
    else {
        let params = message.params.and_then(jsonrpc::parse_params);
        let target = params
            .as_ref()
            .and_then(|p| p.name.as_deref().or(p.uri.as_deref()));
        parts
            .extensions
            .insert(McpRequestHead::new(method, id.as_deref(), target, false));
        return Ok((body, ResponsePlan::Passthrough));
    };
    relay(config, parts, &body, &message, method, id)
}

/// A `tools/call`, `prompts/get` or `resources/read`.
fn relay(
    config: &Config,
    parts: &mut Parts,
    body: &Bytes,
    message: &Message<'_>,
    method: &'static str,
    id: Option<String>,
) -> Result<(Bytes, ResponsePlan), Rejection> {
    let params = match message.params {
        None => None,
        Some(raw) => {
            Some(jsonrpc::parse_params(raw).ok_or_else(|| Rejection::InvalidParams { id: id.clone() })?)
        }
    };
    let target = params.as_ref().and_then(|p| match method {
        "resources/read" => p.uri.as_deref(),
        _ => p.name.as_deref(),
    });
    let principal = config.principal.as_ref().and_then(|f| f(parts));
    let state = params.as_ref().and_then(|p| p.request_state);

    let Some(state) = state else {
        parts
            .extensions
            .insert(McpRequestHead::new(method, id.as_deref(), target, false));
        let target = target.map(str::to_owned);
        let plan = ResponsePlan::Seal(SealContext {
            id,
            method,
            target,
            principal,
            pinned: None,
        });
        return Ok((body.clone(), plan));
    };

    let binding = Binding::new(method, target, principal.as_deref());
    let opened = open(config, Purpose::RequestState, &binding, state).map_err(|reason| {
        tracing::debug!(method, reason = reason.reason(), "requestState rejected");
        Rejection::InvalidEnvelope {
            id: id.clone(),
            purpose: Purpose::RequestState.name(),
        }
    })?;
    check_mirrored_headers(&parts.headers, method, target).map_err(|header| {
        tracing::debug!(method, header, "mirrored header disagrees with the body");
        Rejection::HeaderMismatch {
            id: id.clone(),
            header,
        }
    })?;

    // Put the backend's own state back exactly as it sent it, or remove the member if it sent none.
    let span = jsonrpc::span_of(body, state.get()).ok_or(Rejection::Unreadable { id: id.clone() })?;
    let rewritten = match &opened.state {
        Some(inner) => jsonrpc::splice(body, span, &[b"\"", inner.as_bytes(), b"\""]),
        None => {
            let cut =
                jsonrpc::member_removal_range(body, span).ok_or(Rejection::Unreadable { id: id.clone() })?;
            jsonrpc::splice(body, cut, &[])
        }
    };
    tracing::debug!(method, route = %opened.route, "requestState opened");

    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(rewritten.len()));
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.extensions.insert(PinnedRoute(opened.route.clone()));
    parts
        .extensions
        .insert(McpRequestHead::new(method, id.as_deref(), target, true));
    let target = target.map(str::to_owned);
    let plan = ResponsePlan::Seal(SealContext {
        id,
        method,
        target,
        principal,
        pinned: Some(opened.route),
    });
    Ok((rewritten, plan))
}

/// Opens the envelope held by a raw JSON member (which must be a string).
pub(crate) fn open(
    config: &Config,
    purpose: Purpose,
    binding: &Binding<'_>,
    raw: &RawValue,
) -> Result<crate::envelope::Sealed, OpenError> {
    // Checked on the raw token first so an oversized value is never decoded.
    if raw.get().len() > config.max_envelope_len.saturating_add(2) {
        return Err(OpenError::TooLong);
    }
    let text = jsonrpc::as_string(raw).ok_or(OpenError::NotAnEnvelope)?;
    if text.len() > config.max_envelope_len {
        return Err(OpenError::TooLong);
    }
    config.sealer.open(purpose, binding, &text, config.clock.now())
}

/// A batch is forwarded untouched unless an element carries a `requestState`; if an element may
/// answer `input_required`, the answer is checked (and fails closed).
fn process_batch(body: &[u8]) -> Result<ResponsePlan, Rejection> {
    let Ok(elements) = serde_json::from_slice::<Vec<&RawValue>>(body) else {
        return Ok(ResponsePlan::Passthrough);
    };
    let mut plan = ResponsePlan::Passthrough;
    for element in elements {
        if !jsonrpc::is_object(element.get()) {
            continue;
        }
        let message = jsonrpc::parse_message(element.get().as_bytes()).ok_or(Rejection::Batch)?;
        let Some(method) = message.method.as_deref() else {
            continue;
        };
        if jsonrpc::may_require_input(method) {
            let params = message
                .params
                .map(|p| jsonrpc::parse_params(p).ok_or(Rejection::Batch))
                .transpose()?;
            if params.is_some_and(|p| p.request_state.is_some()) {
                return Err(Rejection::Batch);
            }
            plan = ResponsePlan::Batch;
        }
    }
    Ok(plan)
}

/// Checks `Mcp-Method` and `Mcp-Name` against the body, when present. Returns the name of the
/// first header that disagrees.
pub(crate) fn check_mirrored_headers(
    headers: &HeaderMap,
    method: &str,
    target: Option<&str>,
) -> Result<(), &'static str> {
    for value in headers.get_all(MCP_METHOD) {
        if value.as_bytes() != method.as_bytes() {
            return Err("Mcp-Method");
        }
    }
    for value in headers.get_all(MCP_NAME) {
        if decode_header_value(value).as_deref() != target {
            return Err("Mcp-Name");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrored_headers_must_match_when_present() {
        let mut headers = HeaderMap::new();
        assert_eq!(check_mirrored_headers(&headers, "tools/call", Some("a")), Ok(()));
        headers.insert(MCP_METHOD, HeaderValue::from_static("tools/call"));
        headers.insert(MCP_NAME, HeaderValue::from_static("a"));
        assert_eq!(check_mirrored_headers(&headers, "tools/call", Some("a")), Ok(()));
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("b")),
            Err("Mcp-Name")
        );
        assert_eq!(
            check_mirrored_headers(&headers, "prompts/get", Some("a")),
            Err("Mcp-Method")
        );
        headers.append(MCP_NAME, HeaderValue::from_static("b"));
        assert_eq!(
            check_mirrored_headers(&headers, "tools/call", Some("a")),
            Err("Mcp-Name")
        );
    }
}
