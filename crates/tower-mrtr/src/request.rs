//! The request path: read the buffered body, open any envelope, restore the backend's state.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, header};
use serde_json::value::RawValue;

use crate::config::Config;
use crate::envelope::{Binding, OpenError, Purpose, Sealer};
use crate::error::Rejection;
use crate::jsonrpc::{self, Message};
use crate::mcp_headers::decode_header_value;
use crate::mcp_headers::{MCP_METHOD, MCP_NAME, encode_header_value};
use crate::route::{McpRequestHead, PinnedRoute, Route};

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
}

/// What the response path needs to present a backend's task ids as the client's handles.
#[derive(Debug)]
pub(crate) struct TaskContext {
    pub(crate) id: Option<String>,
    pub(crate) pinned: Route,
    /// (backend task id, the handle the client sent for it)
    pub(crate) ids: Vec<(String, String)>,
}

impl TaskContext {
    pub(crate) fn handle_for(&self, backend_id: &str) -> Option<String> {
        self.ids
            .iter()
            .find(|(b, _)| b == backend_id)
            .map(|(_, h)| h.clone())
    }
}

/// The binding of every task handle: the handle outlives the `tools/call` that minted it and is
/// used on other methods, so only the purpose (in the label) and the principal bind it.
pub(crate) fn task_binding(principal: Option<&str>) -> Binding<'_> {
    Binding::new("tasks", None, principal)
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
    sealer: &Sealer,
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

    if let Some(method) = jsonrpc::INPUT_REQUIRED_METHODS
        .iter()
        .copied()
        .find(|m| *m == method)
    {
        return relay(config, sealer, parts, &body, &message, method, id);
    }
    if let Some(method) = jsonrpc::TASK_METHODS.iter().copied().find(|m| *m == method) {
        return task_follow_up(config, sealer, parts, &body, &message, method, id);
    }
    if method == jsonrpc::LISTEN_METHOD {
        return listen(config, sealer, parts, &body, &message, id);
    }
    let params = message.params.and_then(jsonrpc::parse_params);
    let target = params
        .as_ref()
        .and_then(|p| p.name.as_deref().or(p.uri.as_deref()));
    parts
        .extensions
        .insert(McpRequestHead::parsed(method, id.as_deref(), target, false));
    Ok((body, ResponsePlan::Passthrough))
}

/// `tasks/get`, `tasks/update`, `tasks/cancel`: open the handle in `params.taskId`, put the
/// backend's task id back in the body and in `Mcp-Name`, and pin the route.
fn task_follow_up(
    config: &Config,
    sealer: &Sealer,
    parts: &mut Parts,
    body: &Bytes,
    message: &Message<'_>,
    method: &'static str,
    id: Option<String>,
) -> Result<(Bytes, ResponsePlan), Rejection> {
    let invalid = || Rejection::InvalidEnvelope {
        id: id.clone(),
        purpose: Purpose::TaskHandle.name(),
    };
    let params = message.params.map(jsonrpc::parse_params).ok_or_else(invalid)?;
    let params = params.ok_or_else(|| Rejection::InvalidParams { id: id.clone() })?;
    let raw = params.task_id.ok_or_else(invalid)?;
    let handle = jsonrpc::as_string(raw).ok_or_else(invalid)?;
    // The layer rewrites Mcp-Name here, so it checks what the backend no longer can: the header
    // the client sent must be present and name the handle.
    verify_mirrored_headers(parts, method, Some(&handle), true, &id)?;
    // SEP-2663: a client that did not declare the extension gets -32021, whatever it sent.
    if !jsonrpc::declares_tasks_extension(params.meta) {
        return Err(Rejection::MissingTasksCapability { id });
    }
    let principal = config.principal.as_ref().and_then(|f| f(parts));
    let opened = open(
        config,
        sealer,
        Purpose::TaskHandle,
        &task_binding(principal.as_deref()),
        raw,
    )
    .map_err(|reason| {
        tracing::debug!(method, reason = reason.reason(), "task handle rejected");
        invalid()
    })?;
    let backend_raw = opened.state.as_deref().ok_or_else(invalid)?;
    let backend_id = decode_contents(backend_raw).ok_or_else(invalid)?;

    let span = jsonrpc::span_of(body, raw.get()).ok_or(Rejection::Unreadable { id: id.clone() })?;
    let rewritten = jsonrpc::splice(body, span, &[b"\"", backend_raw.as_bytes(), b"\""]);
    // The extension requires Mcp-Name to equal params.taskId.
    let name = encode_header_value(&backend_id).ok_or_else(invalid)?;
    parts.headers.insert(MCP_NAME, name);
    set_body_length(&mut parts.headers, rewritten.len());
    parts.extensions.insert(PinnedRoute(opened.route.clone()));
    parts.extensions.insert(McpRequestHead::parsed(
        method,
        id.as_deref(),
        Some(&backend_id),
        false,
    ));
    tracing::debug!(method, route = %opened.route, "task handle opened");
    let ids = vec![(backend_id, handle.into_owned())];
    Ok((
        rewritten,
        ResponsePlan::Tasks(TaskContext {
            id,
            pinned: opened.route,
            ids,
        }),
    ))
}

/// `subscriptions/listen` whose `notifications.taskIds` holds task handles: open them all (they
/// must lead to one backend), put the backend's ids in their place and pin the route.
fn listen(
    config: &Config,
    sealer: &Sealer,
    parts: &mut Parts,
    body: &Bytes,
    message: &Message<'_>,
    id: Option<String>,
) -> Result<(Bytes, ResponsePlan), Rejection> {
    let method = jsonrpc::LISTEN_METHOD;
    let invalid = || Rejection::InvalidEnvelope {
        id: id.clone(),
        purpose: Purpose::TaskHandle.name(),
    };
    let (task_ids, meta) = match message.params.map(jsonrpc::parse_params) {
        None => (None, None),
        Some(None) => return Err(Rejection::InvalidParams { id }),
        Some(Some(params)) => match params.notifications.map(jsonrpc::parse_listen_filter) {
            None => (None, params.meta),
            Some(None) => return Err(Rejection::InvalidParams { id }),
            Some(Some(filter)) => (filter.task_ids, params.meta),
        },
    };
    let handles: Vec<&RawValue> = match task_ids {
        None => Vec::new(),
        Some(raw) => {
            serde_json::from_str(raw.get()).map_err(|_| Rejection::InvalidParams { id: id.clone() })?
        }
    };
    parts
        .extensions
        .insert(McpRequestHead::parsed(method, id.as_deref(), None, false));
    if handles.is_empty() {
        return Ok((body.clone(), ResponsePlan::Passthrough));
    }
    if !jsonrpc::declares_tasks_extension(meta) {
        return Err(Rejection::MissingTasksCapability { id });
    }
    let principal = config.principal.as_ref().and_then(|f| f(parts));
    let binding = task_binding(principal.as_deref());
    let mut route: Option<Route> = None;
    let mut ids = Vec::with_capacity(handles.len());
    let mut rewritten = Vec::with_capacity(body.len());
    let mut copied = 0;
    for raw in handles {
        let handle = jsonrpc::as_string(raw).ok_or_else(invalid)?;
        let opened = open(config, sealer, Purpose::TaskHandle, &binding, raw).map_err(|reason| {
            tracing::debug!(method, reason = reason.reason(), "task handle rejected");
            invalid()
        })?;
        if route.as_ref().is_some_and(|r| *r != opened.route) {
            return Err(Rejection::MixedTaskRoutes { id });
        }
        let backend_raw = opened.state.ok_or_else(invalid)?;
        let backend_id = decode_contents(&backend_raw).ok_or_else(invalid)?;
        // Array elements come in document order: copy up to each one, then its replacement.
        let span = jsonrpc::span_of(body, raw.get()).ok_or(Rejection::Unreadable { id: id.clone() })?;
        rewritten.extend_from_slice(&body[copied..span.start]);
        rewritten.push(b'"');
        rewritten.extend_from_slice(backend_raw.as_bytes());
        rewritten.push(b'"');
        copied = span.end;
        route = Some(opened.route);
        ids.push((backend_id, handle.into_owned()));
    }
    rewritten.extend_from_slice(&body[copied..]);
    let rewritten = Bytes::from(rewritten);
    let pinned = route.ok_or_else(invalid)?;
    set_body_length(&mut parts.headers, rewritten.len());
    parts.extensions.insert(PinnedRoute(pinned.clone()));
    Ok((rewritten, ResponsePlan::Tasks(TaskContext { id, pinned, ids })))
}

/// Declares the length of a rewritten body: the old `Content-Length` (or chunked framing) no
/// longer matches it.
fn set_body_length(headers: &mut HeaderMap, len: usize) {
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    headers.remove(header::TRANSFER_ENCODING);
}

/// The value of a JSON string from its raw contents (between the quotes, escapes kept).
pub(crate) fn decode_contents(raw: &str) -> Option<String> {
    serde_json::from_str(&format!("\"{raw}\"")).ok()
}

/// A `tools/call`, `prompts/get` or `resources/read`.
fn relay(
    config: &Config,
    sealer: &Sealer,
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
            .insert(McpRequestHead::parsed(method, id.as_deref(), target, false));
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
    let opened = open(config, sealer, Purpose::RequestState, &binding, state).map_err(|reason| {
        tracing::debug!(method, reason = reason.reason(), "requestState rejected");
        Rejection::InvalidEnvelope {
            id: id.clone(),
            purpose: Purpose::RequestState.name(),
        }
    })?;
    verify_mirrored_headers(parts, method, target, false, &id)?;

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

    set_body_length(&mut parts.headers, rewritten.len());
    parts.extensions.insert(PinnedRoute(opened.route.clone()));
    parts
        .extensions
        .insert(McpRequestHead::parsed(method, id.as_deref(), target, true));
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
    sealer: &Sealer,
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
    sealer.open(purpose, binding, &text, config.clock.now())
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
        if decode_header_value(value).as_deref() != target {
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
    id: &Option<String>,
) -> Result<(), Rejection> {
    check_mirrored_headers(&parts.headers, method, target, require_name).map_err(|header| {
        tracing::debug!(method, header, "mirrored header disagrees with the body");
        Rejection::HeaderMismatch {
            id: id.clone(),
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
