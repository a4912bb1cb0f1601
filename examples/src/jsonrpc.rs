//! JSON-RPC error answers for layers that refuse a request (401, 429, an unknown backend).
//!
//! A layer outside `MrtrLayer` has not parsed the body, so it answers with `"id": null`, as
//! JSON-RPC allows when the id cannot be known; one inside it can echo the id from
//! `McpRequestHead::id_json`.
//!
//! ```
//! use http::StatusCode;
//! use mrtr_examples::jsonrpc::error_response;
//! use tower_mrtr::error::INVALID_REQUEST;
//!
//! let response: http::Response<bytes::Bytes> =
//!     error_response(StatusCode::TOO_MANY_REQUESTS, None, INVALID_REQUEST, "Rate limit exceeded");
//! assert_eq!(response.status(), 429);
//! assert_eq!(
//!     response.body(),
//!     r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Rate limit exceeded"}}"#
//! );
//! ```
//!
//! Which code: MCP reserves `-32020..-32099` for the specification and asks implementations not
//! to use the legacy `-32000..-32019`, so refusals that are about the HTTP request rather than
//! the JSON-RPC call (no credentials, too many requests) use `-32600` (Invalid Request), as
//! `MrtrLayer` does for a missing principal; the HTTP status says which refusal it is.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

/// The body of a JSON-RPC error response. `id_json` is the request's id as raw JSON text
/// (from `McpRequestHead::id_json`); `None` writes `null`.
pub fn error_body(id_json: Option<&str>, code: i64, message: &str) -> Bytes {
    let message = serde_json::Value::from(message);
    let id = id_json.unwrap_or("null");
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#
    ))
}

/// An HTTP response with `status` and a JSON-RPC error body, of any body type that can be
/// built from bytes (axum's body, `tower_mrtr::ResponseBody`, `Full<Bytes>`, ...).
pub fn error_response<B: From<Bytes>>(
    status: StatusCode,
    id_json: Option<&str>,
    code: i64,
    message: &str,
) -> Response<B> {
    let mut response = Response::new(B::from(error_body(id_json, code, message)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
