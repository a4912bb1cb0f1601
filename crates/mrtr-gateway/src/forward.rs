//! Forwarding one request to one backend over HTTP/1.1 or HTTP/2 (negotiated over TLS), as a
//! well-mannered MCP client would.
//!
//! Toward the backend the gateway:
//!
//! * sets `Host` to the backend's own authority (rmcp servers refuse a foreign `Host` with 403);
//! * drops the client's `Origin` (it names the client's page, not the gateway), hop-by-hop headers
//!   (`Connection` and the headers it lists, `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`,
//!   `Upgrade`, `Proxy-*`), `Accept-Encoding` (the MRTR layer must read answers in clear),
//!   `Mcp-Session-Id` and `Last-Event-ID` (not part of 2026-07-28), and the client's credentials
//!   (`Authorization`, `Cookie`): MCP forbids passing a client's token through to another server;
//! * keeps everything else, notably `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
//!   `Mcp-Param-*`, `Accept`, `Content-Type` and trace context;
//! * adds the backend's own static headers ([`Backend::with_header`], its credentials).
//!
//! Each backend has its own connection pool, because each may have its own TLS settings.
//!
//! Answers stream back untouched except for hop-by-hop headers and `Mcp-Session-Id`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::backend::Backend;
use crate::telemetry;

/// Headers never forwarded toward a backend (besides those `Connection` lists).
const REQUEST_DROP: &[&str] = &[
    "host",
    "origin",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "accept-encoding",
    "content-length",
    "mcp-session-id",
    "last-event-id",
    "authorization",
    "cookie",
];

/// Headers never passed back to the client (besides those `Connection` lists).
const RESPONSE_DROP: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authenticate",
    "mcp-session-id",
];

/// Largest backend answer the gateway buffers when it has to merge answers (lists, discover).
pub(crate) const MAX_MERGED_ANSWER: usize = 8 * 1024 * 1024;

type BackendClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP clients toward backends, one per backend name.
#[derive(Clone, Debug)]
pub(crate) struct Forwarder {
    clients: Arc<HashMap<String, BackendClient>>,
    response_timeout: Duration,
}

/// Why a backend could not be reached or gave no usable answer.
#[derive(Debug)]
pub(crate) enum ForwardError {
    /// Connection refused, reset, or an invalid response.
    Unreachable(String),
    /// No response head within the timeout.
    Timeout,
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(e) => write!(f, "unreachable: {e}"),
            Self::Timeout => f.write_str("no answer within the timeout"),
        }
    }
}

impl Forwarder {
    pub(crate) fn new(backends: &[Backend], response_timeout: Duration) -> Self {
        let clients = backends
            .iter()
            .map(|backend| (backend.name().to_owned(), client_for(backend)))
            .collect();
        Self {
            clients: Arc::new(clients),
            response_timeout,
        }
    }

    /// POSTs `body` to `backend` with the client's headers (filtered, see the module docs).
    /// The answer's body streams; the caller decides whether to buffer it.
    pub(crate) async fn post(
        &self,
        backend: &Backend,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response<Body>, ForwardError> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = backend.url().clone();
        let headers = request.headers_mut();
        copy_headers(client_headers, headers, REQUEST_DROP);
        headers.insert(header::HOST, backend.host().clone());
        for name in backend.headers().keys() {
            headers.remove(name);
        }
        for (name, value) in backend.headers() {
            headers.append(name, value.clone());
        }

        let client = self
            .clients
            .get(backend.name())
            .cloned()
            .unwrap_or_else(|| client_for(backend));
        let timeout = backend.timeout().unwrap_or(self.response_timeout);
        let started = Instant::now();
        let outcome = match tokio::time::timeout(timeout, client.request(request)).await {
            Err(_) => Err(ForwardError::Timeout),
            Ok(result) => result.map_err(|e| ForwardError::Unreachable(error_chain(&e))),
        };
        telemetry::backend_request(backend.name(), client_headers, &outcome, started.elapsed());
        let response = outcome?;
        let (mut parts, body) = response.into_parts();
        let mut headers = HeaderMap::with_capacity(parts.headers.len());
        copy_headers(&parts.headers, &mut headers, RESPONSE_DROP);
        parts.headers = headers;
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// POSTs and reads the JSON-RPC response message, from a JSON or an SSE answer.
    pub(crate) async fn exchange(
        &self,
        backend: &Backend,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Answer, ForwardError> {
        let response = self.post(backend, client_headers, body).await?;
        let status = response.status();
        let is_sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let mut body = response.into_body();
        let read = async {
            let mut buffer = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| ForwardError::Unreachable(format!("reading the answer: {e}")))?;
                let Ok(data) = frame.into_data() else { continue };
                let scanned = buffer.len().saturating_sub(3);
                buffer.extend_from_slice(&data);
                if buffer.len() > MAX_MERGED_ANSWER {
                    return Err(ForwardError::Unreachable("answer too large to merge".to_owned()));
                }
                // A stream that stays open after its response (keep-alives) must not hold the
                // merge: look for the response whenever a chunk completes an event.
                let completed = complete_events(&buffer[scanned..]);
                if is_sse
                    && completed > 0
                    && let Some(message) = last_sse_response(&buffer[..scanned + completed])
                {
                    return Ok(Some(message));
                }
            }
            Ok(if is_sse {
                last_sse_response(&buffer)
            } else {
                Some(Bytes::from(buffer))
            })
        };
        let timeout = backend.timeout().unwrap_or(self.response_timeout);
        let message = tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| ForwardError::Timeout)??;
        Ok(Answer { status, message })
    }

    /// [`Self::exchange`] for a catalog or discovery request: the outcome is also the backend's
    /// health (see [`crate::health`]).
    pub(crate) async fn exchange_recorded(
        &self,
        backend: &Backend,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Answer, ForwardError> {
        let outcome = self.exchange(backend, client_headers, body).await;
        let health = match &outcome {
            Ok(answer) if answer.result().is_some() || answer.is_error() => Ok(()),
            Ok(answer) => Err(format!("no JSON-RPC response (HTTP {})", answer.status)),
            Err(error) => Err(error.to_string()),
        };
        backend.health().record(backend.name(), health);
        outcome
    }
}

/// A backend's answer to an exchange: HTTP status and the JSON-RPC response message, if any.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) message: Option<Bytes>,
}

/// The parts of a JSON-RPC response the merge needs.
#[derive(Deserialize)]
pub(crate) struct ResponseMessage<'a> {
    #[serde(borrow)]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

impl Answer {
    /// The `result` member, if the answer is a JSON-RPC success.
    pub(crate) fn result(&self) -> Option<&RawValue> {
        let message = self.message.as_ref()?;
        let parsed: ResponseMessage<'_> = serde_json::from_slice(message).ok()?;
        parsed.result.filter(|_| parsed.error.is_none())
    }

    /// Whether the answer is a JSON-RPC error response.
    pub(crate) fn is_error(&self) -> bool {
        self.message
            .as_ref()
            .and_then(|m| serde_json::from_slice::<ResponseMessage<'_>>(m).ok())
            .is_some_and(|m| m.error.is_some())
    }
}

/// The data of the last SSE event that holds a JSON-RPC response (not a notification).
fn last_sse_response(stream: &[u8]) -> Option<Bytes> {
    let text = String::from_utf8_lossy(stream);
    let mut found = None;
    let mut data = String::new();
    let mut flush = |data: &mut String| {
        if !data.is_empty() {
            let message = std::mem::take(data);
            if serde_json::from_str::<ResponseMessage<'_>>(&message)
                .is_ok_and(|m| m.result.is_some() || m.error.is_some())
            {
                found = Some(Bytes::from(message));
            }
        }
    };
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            flush(&mut data);
        } else if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    flush(&mut data);
    found
}

/// Length of the prefix of an SSE stream that holds only complete events (ending in a blank line).
fn complete_events(stream: &[u8]) -> usize {
    let end_of = |needle: &[u8]| {
        stream
            .windows(needle.len())
            .rposition(|w| w == needle)
            .map(|at| at + needle.len())
    };
    [end_of(b"\n\n"), end_of(b"\r\n\r\n"), end_of(b"\r\r")]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
}

/// A pooled client for `backend`: plain HTTP, or TLS with the backend's own configuration (else
/// the system's roots).
fn client_for(backend: &Backend) -> BackendClient {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    http.set_nodelay(true);
    http.enforce_http(false);
    let tls = backend.tls().cloned().unwrap_or_else(|| {
        crate::tls::BackendTls::default()
            .client_config()
            .unwrap_or_else(|error| {
                // Checked at start-up for https:// backends; this keeps plain-HTTP backends
                // working on a machine without a trust store.
                if backend.url().scheme_str() == Some("https") {
                    tracing::error!(backend = backend.name(), %error, "no TLS roots: HTTPS to this backend will fail");
                }
                crate::tls::empty_roots_config()
            })
    });
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(crate::tls::connector(tls, http))
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap, drop: &[&str]) {
    // Headers named by `Connection` are hop-by-hop too (RFC 9110 §7.6.1).
    let listed: Vec<HeaderName> = from
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for (name, value) in from {
        let name_str = name.as_str();
        if drop.contains(&name_str) || name_str.starts_with("proxy-") || listed.contains(name) {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_credentials_are_dropped() {
        let mut from = HeaderMap::new();
        for (k, v) in [
            ("host", "gw.example"),
            ("origin", "https://app.example"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("proxy-authorization", "x"),
            ("accept-encoding", "gzip"),
            ("authorization", "Bearer t"),
            ("mcp-session-id", "s"),
            ("mcp-method", "tools/call"),
            ("mcp-param-region", "eu"),
            ("accept", "application/json, text/event-stream"),
            ("traceparent", "00-1-2-01"),
        ] {
            from.append(k, v.parse().unwrap());
        }
        let mut to = HeaderMap::new();
        copy_headers(&from, &mut to, REQUEST_DROP);
        let mut kept: Vec<&str> = to.keys().map(|k| k.as_str()).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["accept", "mcp-method", "mcp-param-region", "traceparent"]);
    }

    #[test]
    fn sse_answers_yield_the_response_event() {
        let stream = b": keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
            event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{}}\r\n\r\n";
        let message = last_sse_response(stream).unwrap();
        assert_eq!(&message[..], b"{\"jsonrpc\":\"2.0\",\"id\":1,\n\"result\":{}}");
        assert!(last_sse_response(b": only a comment\n\n").is_none());
        let partial =
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,";
        assert_eq!(complete_events(partial), 44);
        assert_eq!(complete_events(b"data: x"), 0);
    }
}
