//! What every transport's exchange with a backend gives: the answer ([`Answer`]) or why there is
//! none ([`UpstreamError`]), and the method of a request as its `Mcp-Method` header names it
//! ([`mcp_method`]).

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use tower_mrtr::mcp_headers::MCP_METHOD;

use super::sse::ResponseMessage;

/// The `Mcp-Method` header of a request (empty when absent): which method it is, without
/// reading its body.
pub(crate) fn mcp_method(headers: &HeaderMap) -> &str {
    headers
        .get(&MCP_METHOD)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// Why a backend could not be reached or gave no usable answer.
#[derive(Debug)]
pub(crate) enum UpstreamError {
    /// Connection refused, reset, or an invalid response.
    Unreachable(String),
    /// No response head within the timeout.
    Timeout,
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(e) => write!(f, "unreachable: {e}"),
            Self::Timeout => f.write_str("no answer within the timeout"),
        }
    }
}

/// A backend's answer to an exchange: HTTP status and the JSON-RPC response message, if any.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) message: Option<Bytes>,
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
