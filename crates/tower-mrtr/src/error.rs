//! The answers the layer gives in place of the inner service, and how they map to HTTP.
//!
//! Every one of them is a JSON-RPC error response with `Content-Type: application/json`. HTTP
//! statuses follow the 2026-07-28 Streamable HTTP rules and the official SDKs: `400` for header
//! mismatches and requests the layer cannot read, `413` for bodies over the limit, and `200` for
//! errors that are about the request's *content* (an invalid `requestState`, a backend answer that
//! could not be relayed), which MCP reports in band. A `5xx` is deliberately avoided for the
//! latter: clients treat `5xx` as retryable, and retrying a `tools/call` may repeat side effects.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};

use crate::jsonrpc::error_body;

/// JSON-RPC: the request is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: invalid method parameters; MCP's code for a rejected `requestState` and for an
/// unknown task.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: internal error; the layer's code when it fails closed on a backend answer.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: a mirrored `Mcp-*` header is missing, malformed or differs from the body.
pub const HEADER_MISMATCH: i64 = -32020;

/// Why the layer answered instead of the inner service (or instead of the inner response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The request body is larger than the configured limit.
    TooLarge { limit: usize },
    /// The request body could not be read from the client.
    BodyUnreadable,
    /// A body the layer cannot read as one JSON-RPC request carries something it must open.
    Unreadable { id: Option<String> },
    /// A JSON-RPC batch carries something the layer must open.
    Batch,
    /// `params` of a method the layer relays could not be read.
    InvalidParams { id: Option<String> },
    /// An envelope did not open (any reason; the reason goes to logs only).
    InvalidEnvelope {
        id: Option<String>,
        purpose: &'static str,
    },
    /// A `subscriptions/listen` names task handles of different backends.
    MixedTaskRoutes { id: Option<String> },
    /// `Mcp-Method` or `Mcp-Name` disagrees with the body of a request the layer rewrites.
    HeaderMismatch {
        id: Option<String>,
        header: &'static str,
    },
    /// The backend's answer may carry state the layer could not seal: fail closed.
    Unrelayable { id: Option<String> },
}

impl Rejection {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyUnreadable | Self::Unreadable { .. } | Self::Batch | Self::HeaderMismatch { .. } => {
                StatusCode::BAD_REQUEST
            }
            Self::InvalidParams { .. }
            | Self::InvalidEnvelope { .. }
            | Self::MixedTaskRoutes { .. }
            | Self::Unrelayable { .. } => StatusCode::OK,
        }
    }

    pub(crate) fn body(&self) -> Bytes {
        match self {
            Self::TooLarge { limit } => error_body(
                None,
                INVALID_REQUEST,
                &format!("Request body exceeds the relay's limit of {limit} bytes"),
            ),
            Self::BodyUnreadable => error_body(None, INVALID_REQUEST, "Request body could not be read"),
            Self::Unreadable { id } => error_body(
                id.as_deref(),
                INVALID_REQUEST,
                "Request carries relay state but is not a single JSON-RPC request object this relay can read",
            ),
            Self::Batch => error_body(
                None,
                INVALID_REQUEST,
                "JSON-RPC batches cannot carry requestState or task handles",
            ),
            Self::InvalidParams { id } => error_body(id.as_deref(), INVALID_PARAMS, "Invalid params"),
            Self::InvalidEnvelope { id, purpose } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                &format!("Invalid or expired {purpose}"),
            ),
            Self::MixedTaskRoutes { id } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                "taskIds of tasks held by different backends cannot share one subscription; listen to each separately",
            ),
            Self::HeaderMismatch { id, header } => error_body(
                id.as_deref(),
                HEADER_MISMATCH,
                &format!("{header} header does not match the request body"),
            ),
            Self::Unrelayable { id } => error_body(
                id.as_deref(),
                INTERNAL_ERROR,
                "The backend's response could not be relayed safely",
            ),
        }
    }

    /// The HTTP response parts of this rejection: status and JSON content type.
    pub(crate) fn into_response(self) -> http::Response<Bytes> {
        let body = self.body();
        let len = body.len();
        let mut response = http::Response::new(body);
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        response
    }
}
