//! The answers the layer gives in place of the inner service, and how they map to HTTP.
//!
//! Every one of them is a JSON-RPC error response with `Content-Type: application/json`. HTTP
//! statuses follow the 2026-07-28 Streamable HTTP rules and the official SDKs: `400` for header
//! mismatches and requests the layer cannot read, `413` for bodies over the limit, `415` for
//! compressed bodies, `403` for a request without the principal the layer requires (`403`, not
//! `401`: the layer is not the authenticating party and has no challenge to offer), and `200` for
//! errors that are about the request's *content* (an invalid `requestState`, a backend answer that
//! could not be relayed), which MCP reports in band. A `5xx` is deliberately avoided for the
//! latter: clients treat `5xx` as retryable, and retrying a `tools/call` may repeat side effects.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};

use crate::jsonrpc::{error_body, error_body_with_data};

/// JSON-RPC: the request is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: invalid method parameters; MCP's code for a rejected `requestState` and for an
/// unknown task.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: internal error; the layer's code when it fails closed on a backend answer.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: a mirrored `Mcp-*` header is missing, malformed or differs from the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: the request needs a client capability it did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;

/// JSON-RPC: the body is not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the method does not exist (with HTTP 404 under 2026-07-28).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// MCP 2026-07-28: the requested protocol version is not supported (HTTP 400, with
/// `data.supported` and `data.requested`).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

// The codes below are not the layer's own answers. They are here so that a proxy built on the
// layer takes every JSON-RPC code from one place, as `mrtr-gateway` does.

/// A proxy's answer when it sheds load: a server error in JSON-RPC's implementation-defined
/// range (MCP 2026-07-28 calls -32000..-32019 the legacy range; no other range is left to
/// implementations).
pub const OVERLOADED: i64 = -32000;
/// MCP before 2026-07-28 (and the official SDKs): the session named by `Mcp-Session-Id` is
/// unknown (HTTP 404).
pub const SESSION_NOT_FOUND: i64 = -32001;
/// The official SDKs before 2026-07-28: a request timed out.
pub const REQUEST_TIMEOUT: i64 = -32001;
/// MCP 2025-11-25: the resource does not exist. 2026-07-28 forbids emitting it, so a proxy
/// sends it to `initialize`-era clients only.
pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;

/// A call refused by the check given to [`MrtrLayer::authorize`](crate::MrtrLayer::authorize):
/// the client gets HTTP 403 and a JSON-RPC error carrying this message.
///
/// ```
/// let denied = tower_mrtr::Denied::new("The tool deploy is not permitted for this caller");
/// assert_eq!(denied.message(), "The tool deploy is not permitted for this caller");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    message: std::borrow::Cow<'static, str>,
}

impl Denied {
    /// A refusal telling the client `message` (say what is refused, not why in detail: the
    /// client may be anyone).
    pub fn new(message: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// What the client is told.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Why the layer answered instead of the inner service (or instead of the inner response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The request body is larger than the configured limit.
    TooLarge { limit: usize },
    /// The request body has a `Content-Encoding` the layer does not decode.
    Encoded,
    /// The request body could not be read from the client.
    BodyUnreadable,
    /// The request body is not JSON (syntax, encoding, a BOM, trailing bytes): a backend's more
    /// lenient parser might still read it, so it is not forwarded.
    ParseError,
    /// The body is JSON the layer cannot read unambiguously as a request (a value that is not a
    /// request, a duplicate or case-variant member name, a mistyped member).
    Unreadable { id: Option<String>, detail: String },
    /// A JSON-RPC batch carries something the layer must open, or an element it cannot read.
    Batch { detail: &'static str },
    /// `params` of a method the layer relays could not be read.
    InvalidParams { id: Option<String> },
    /// `params.arguments` has no canonical form, so it cannot be bound to an envelope.
    ArgumentsUnbindable { id: Option<String>, detail: String },
    /// An envelope did not open (any reason; the reason goes to logs only).
    InvalidEnvelope {
        id: Option<String>,
        purpose: &'static str,
    },
    /// A retry presenting a request state whose round reached the configured maximum.
    TooManyRounds { id: Option<String>, limit: u16 },
    /// A `requestState` on a method that never takes one.
    StateNotAccepted { id: Option<String> },
    /// The layer requires a principal and the request has none.
    PrincipalRequired { id: Option<String> },
    /// The [`authorize`](crate::MrtrLayer::authorize) check refused the call.
    Denied { id: Option<String>, message: String },
    /// A task request from a client that did not declare the Tasks extension in this request.
    MissingTasksCapability { id: Option<String> },
    /// A `subscriptions/listen` names task handles of different backends.
    MixedTaskRoutes { id: Option<String> },
    /// A `subscriptions/listen` names more task handles than the layer opens for one request.
    TooManyTaskIds { id: Option<String>, limit: usize },
    /// `Mcp-Method` or `Mcp-Name` disagrees with the body of a request the layer rewrites.
    HeaderMismatch {
        id: Option<String>,
        header: &'static str,
    },
    /// The backend's answer may carry state the layer could not seal: fail closed.
    Unrelayable { id: Option<String> },
}

impl Rejection {
    /// A short, stable label for logs and metrics.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Encoded => "content_encoding",
            Self::BodyUnreadable => "body_unreadable",
            Self::ParseError => "parse_error",
            Self::Unreadable { .. } => "unreadable",
            Self::Batch { .. } => "batch",
            Self::InvalidParams { .. } => "invalid_params",
            Self::ArgumentsUnbindable { .. } => "arguments_unbindable",
            Self::InvalidEnvelope { .. } => "invalid_envelope",
            Self::TooManyRounds { .. } => "too_many_rounds",
            Self::StateNotAccepted { .. } => "state_not_accepted",
            Self::PrincipalRequired { .. } => "principal_required",
            Self::Denied { .. } => "denied",
            Self::MissingTasksCapability { .. } => "missing_tasks_capability",
            Self::MixedTaskRoutes { .. } => "mixed_task_routes",
            Self::TooManyTaskIds { .. } => "too_many_task_ids",
            Self::HeaderMismatch { .. } => "header_mismatch",
            Self::Unrelayable { .. } => "unrelayable",
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Encoded => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PrincipalRequired { .. } | Self::Denied { .. } => StatusCode::FORBIDDEN,
            Self::BodyUnreadable
            | Self::ParseError
            | Self::Unreadable { .. }
            | Self::Batch { .. }
            | Self::HeaderMismatch { .. }
            | Self::MissingTasksCapability { .. } => StatusCode::BAD_REQUEST,
            Self::InvalidParams { .. }
            | Self::ArgumentsUnbindable { .. }
            | Self::InvalidEnvelope { .. }
            | Self::TooManyRounds { .. }
            | Self::StateNotAccepted { .. }
            | Self::MixedTaskRoutes { .. }
            | Self::TooManyTaskIds { .. }
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
            Self::Encoded => error_body(
                None,
                INVALID_REQUEST,
                "Compressed request bodies are not supported by this relay; send identity encoding",
            ),
            Self::BodyUnreadable => error_body(None, INVALID_REQUEST, "Request body could not be read"),
            Self::ParseError => error_body(
                None,
                PARSE_ERROR,
                "Parse error: the request body is not valid JSON (UTF-8, no byte order mark, one value)",
            ),
            Self::Unreadable { id, detail } => error_body(
                id.as_deref(),
                INVALID_REQUEST,
                &format!("Invalid request: {detail}"),
            ),
            Self::Batch { detail } => error_body(None, INVALID_REQUEST, detail),
            Self::InvalidParams { id } => error_body(id.as_deref(), INVALID_PARAMS, "Invalid params"),
            Self::ArgumentsUnbindable { id, detail } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                &format!("Invalid params: params.arguments {detail}"),
            ),
            Self::InvalidEnvelope { id, purpose } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                &format!("Invalid or expired {purpose}"),
            ),
            Self::TooManyRounds { id, limit } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                &format!(
                    "The request took too many rounds of input_required (this relay's limit is {limit}); start it again without requestState"
                ),
            ),
            Self::StateNotAccepted { id } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                "requestState is only accepted on tools/call, prompts/get and resources/read",
            ),
            Self::PrincipalRequired { id } => error_body(
                id.as_deref(),
                INVALID_REQUEST,
                "This relay binds requests to an authenticated principal, and this request has none",
            ),
            Self::Denied { id, message } => error_body(id.as_deref(), INVALID_REQUEST, message),
            Self::MissingTasksCapability { id } => error_body_with_data(
                id.as_deref(),
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Task requests need the io.modelcontextprotocol/tasks extension declared in clientCapabilities",
                Some(r#"{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#),
            ),
            Self::MixedTaskRoutes { id } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                "taskIds of tasks held by different backends cannot share one subscription; listen to each separately",
            ),
            Self::TooManyTaskIds { id, limit } => error_body(
                id.as_deref(),
                INVALID_PARAMS,
                &format!("A subscription may name at most {limit} taskIds"),
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
        response.extensions_mut().insert(crate::Outcome::Refused {
            reason: self.reason(),
        });
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        response
    }
}
