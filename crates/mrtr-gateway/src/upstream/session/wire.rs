//! A session's messages on the wire: the gateway's own requests in it ([`exchange`]: the
//! handshake, answers to the backend's requests, subscriptions), its `GET` stream ([`stream`]),
//! its end ([`close`]), the headers a client's request goes with ([`request_headers`],
//! [`identity_headers`]), and how a refusal for a session the backend forgot is told from an
//! answer ([`forgotten`]). Over the forwarder's connections to the backend.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use crate::upstream::answer::{Answer, UpstreamError};
use crate::upstream::backend::Backend;
use crate::upstream::http::forward::Forwarder;

const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// A message of the gateway's own to an `initialize`-era backend: `body` POSTed with
/// `headers` (the client's, or none) at the negotiated `version` (none for `initialize`),
/// in `session` (none for `initialize`, which opens one, and for a server that keeps none).
/// Returns the answer and the session id the backend gave, if any.
pub(super) async fn exchange(
    forwarder: &Forwarder,
    backend: &Backend,
    mut headers: HeaderMap,
    version: Option<&str>,
    session: Option<&HeaderValue>,
    body: Bytes,
) -> Result<(Answer, Option<HeaderValue>), UpstreamError> {
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    if let Some(version) = version.and_then(|v| HeaderValue::from_str(v).ok()) {
        headers.insert(MCP_PROTOCOL_VERSION, version);
    }
    let (response, opened) = forwarder
        .send(backend, Method::POST, headers, body, session, None)
        .await?;
    Ok((forwarder.read_answer(backend, response).await?, opened))
}

/// Opens a legacy backend's `GET` stream for `session`, on which the backend sends what it
/// sends of its own (list changes, resource updates); `headers` identify the client as the
/// session's requests do.
pub(super) async fn stream(
    forwarder: &Forwarder,
    backend: &Backend,
    mut headers: HeaderMap,
    version: &str,
    session: &HeaderValue,
) -> Result<Response<Incoming>, UpstreamError> {
    headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
    if let Ok(version) = HeaderValue::from_str(version) {
        headers.insert(MCP_PROTOCOL_VERSION, version);
    }
    let (response, _) = forwarder
        .send(backend, Method::GET, headers, Bytes::new(), Some(session), None)
        .await?;
    Ok(response)
}

/// Ends a legacy backend's `session` with `DELETE`, as a client that is done with it should.
/// What the backend answers does not matter (a server may refuse with 405): it is logged.
pub(super) async fn close(forwarder: &Forwarder, backend: &Backend, version: &str, session: HeaderValue) {
    let mut headers = HeaderMap::new();
    if let Ok(version) = HeaderValue::from_str(version) {
        headers.insert(MCP_PROTOCOL_VERSION, version);
    }
    let outcome = forwarder
        .send(
            backend,
            Method::DELETE,
            headers,
            Bytes::new(),
            Some(&session),
            None,
        )
        .await;
    match outcome {
        Ok((response, _)) => {
            let status = response.status();
            // The body is not read: dropping it lets the connection go.
            tracing::debug!(backend = backend.name(), %status, "legacy session closed");
        }
        Err(error) => {
            tracing::debug!(backend = backend.name(), %error, "closing a legacy session failed")
        }
    }
}

/// The client's headers for a legacy backend: the 2026-07-28 ones removed, the negotiated
/// version set (the forwarder adds the session and filters the rest).
pub(super) fn request_headers(mut headers: HeaderMap, version: &str) -> HeaderMap {
    let modern: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name == "mcp-method" || name == "mcp-name" || name.starts_with("mcp-param-")
        })
        .cloned()
        .collect();
    for name in modern {
        headers.remove(name);
    }
    if let Ok(version) = HeaderValue::from_str(version) {
        headers.insert(MCP_PROTOCOL_VERSION, version);
    }
    headers
}

/// What identifies the client to the backend (the principal header, trace context), for the
/// gateway's own requests in its session (the handshake, the `GET` stream, subscriptions); the
/// forwarder drops credentials and hop-by-hop headers.
pub(super) fn identity_headers(client_headers: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in client_headers {
        if !name.as_str().starts_with("mcp-") && !matches!(*name, header::CONTENT_TYPE | header::ACCEPT) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// Whether an answer with `status` may be a backend's refusal of a session it does not know.
pub(super) fn may_be_forgotten(status: StatusCode) -> bool {
    matches!(status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST)
}

/// Whether `answer` refuses the request `ours` (its id, raw JSON) for its session, unprocessed:
/// `404` (what the transport specification prescribes for an unknown session), or a `400` whose
/// JSON-RPC error names the session (the TypeScript SDK 1.x's servers, server-everything among
/// them, answer "Bad Request: No valid session ID provided" after a restart). An answer to the
/// request itself, under its own id, is never such a refusal whatever its status: the backend
/// read the request, and may have run it, so it must not be sent again.
pub(super) fn forgotten(answer: &Answer, ours: &str) -> bool {
    let message = answer
        .message
        .as_ref()
        .and_then(|m| serde_json::from_slice::<Value>(m).ok());
    let answered = message
        .as_ref()
        .and_then(|m| m.get("id"))
        .is_some_and(|id| serde_json::from_str::<Value>(ours).is_ok_and(|ours| *id == ours));
    if answered {
        return false;
    }
    match answer.status {
        StatusCode::NOT_FOUND => true,
        StatusCode::BAD_REQUEST => message
            .as_ref()
            .and_then(|m| m.pointer("/error/message").and_then(Value::as_str))
            .is_some_and(|message| message.to_ascii_lowercase().contains("session")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_headers_go_and_the_negotiated_version_is_set() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
            ("mcp-param-region", "eu"),
            ("mcp-protocol-version", "2026-07-28"),
            ("x-user", "alice"),
        ] {
            headers.insert(k, v.parse().unwrap());
        }
        let headers = request_headers(headers, "2025-06-18");
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["mcp-protocol-version", "x-user"]);
        assert_eq!(headers["mcp-protocol-version"], "2025-06-18");
    }

    #[test]
    fn a_forgotten_session_is_told_from_other_refusals() {
        let answer = |status: u16, message: &str| Answer {
            status: StatusCode::from_u16(status).unwrap(),
            message: Some(Bytes::copy_from_slice(message.as_bytes())),
        };
        let ours = r#""mrtr-1""#;
        let no_session = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
        assert!(forgotten(&answer(400, no_session), ours));
        let not_found =
            r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}"#;
        assert!(forgotten(&answer(404, not_found), ours));
        assert!(forgotten(&answer(404, ""), ours));
        let invalid =
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid arguments"},"id":"mrtr-1"}"#;
        assert!(!forgotten(&answer(400, invalid), ours));
        assert!(!forgotten(&answer(200, no_session), ours));
        // The request's own answer, whatever it says: the backend read it, and may have run it.
        let answered =
            r#"{"jsonrpc":"2.0","error":{"code":-32002,"message":"Resource not found"},"id":"mrtr-1"}"#;
        assert!(!forgotten(&answer(404, answered), ours));
        let named =
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"no session named prod"},"id":"mrtr-1"}"#;
        assert!(!forgotten(&answer(400, named), ours));
    }
}
