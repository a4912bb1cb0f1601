//! The front's own HTTP answers to legacy clients: their body type ([`LegacyBody`]), JSON and
//! SSE answers, and the small ones (an empty status, `405`, a JSON-RPC error or result).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::value::RawValue;
use tower_mrtr::BoxError;

use super::stream::CallBody;
use crate::jsonrpc::error_body;
use crate::upstream::sse::set_stream_headers;

/// The body of the gateway's own legacy answers.
pub type LegacyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A legacy JSON answer.
pub(super) fn json_answer(status: StatusCode, body: Bytes) -> Response<LegacyBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A body of fixed bytes.
pub(super) fn full(bytes: Bytes) -> LegacyBody {
    Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
}

/// A legacy SSE answer made of `body`'s events.
pub(super) fn sse_answer(body: CallBody) -> Response<LegacyBody> {
    let mut response = Response::new(body.map_err(|never| match never {}).boxed_unsync());
    set_stream_headers(response.headers_mut());
    response
}

/// An empty answer with `code`.
pub(super) fn status(code: StatusCode) -> Response<LegacyBody> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = code;
    response
}

/// `405`, with the methods a request with or without a session may use.
pub(super) fn method_not_allowed(with_session: bool) -> Response<LegacyBody> {
    let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
    let allow = if with_session { "POST, DELETE" } else { "POST" };
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// A JSON-RPC error answer for `id` with HTTP `code`.
pub(super) fn error(
    code: StatusCode,
    id: Option<&RawValue>,
    rpc: i64,
    message: &str,
) -> Response<LegacyBody> {
    json_answer(code, error_body(id.map(RawValue::get), rpc, message, None))
}

/// A JSON-RPC result answer for `id`.
pub(super) fn result(id: &RawValue, result: &serde_json::Value) -> Response<LegacyBody> {
    json_answer(
        StatusCode::OK,
        Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#,
            id.get()
        )),
    )
}
