//! Turning the modern stack's messages back into what a legacy client expects.
//!
//! * A result loses the members legacy has no place for (`resultType`, `ttlMs`, `cacheScope`);
//!   every other member keeps its raw text.
//! * An error keeps its code, except where the eras differ: a resource that does not exist is
//!   `-32002` in 2025-11-25 (`-32602` since SEP-2164).
//! * The client's own id replaces the id of the modern request.
//! * `notifications/progress` and `notifications/message` pass through as they are.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use tower_mrtr::error::LEGACY_RESOURCE_NOT_FOUND;

use crate::jsonrpc::RawObject;

/// Result members of the modern era that legacy results do not have.
const MODERN_ONLY_RESULT_MEMBERS: &[&str] = &["resultType", "ttlMs", "cacheScope"];

/// A message on the modern answer stream.
#[derive(Debug)]
pub(super) enum Modern {
    /// A notification to relay (or drop).
    Notification {
        /// Its method.
        method: String,
        /// The whole message.
        message: Bytes,
    },
    /// The response.
    Response(ModernResponse),
    /// Something else (a request, which a modern server must not send on a response stream).
    Other,
}

/// A modern JSON-RPC response.
#[derive(Debug, Deserialize)]
pub(super) struct ModernResponse {
    /// The result, raw.
    pub result: Option<Box<RawValue>>,
    /// The error, raw.
    pub error: Option<Box<RawValue>>,
}

/// What an `input_required` result asks for.
#[derive(Debug)]
pub(super) struct InputRequired {
    /// `inputRequests`, member by member (may be empty: a load-shedding round).
    pub requests: RawObject,
    /// `requestState` as a raw JSON string, if any.
    pub state: Option<Box<RawValue>>,
}

impl Modern {
    /// Classifies one message; `None` if it is not a JSON-RPC message at all.
    pub(super) fn parse(message: &[u8]) -> Option<Self> {
        #[derive(Deserialize)]
        struct Head {
            method: Option<String>,
            id: Option<Box<RawValue>>,
            result: Option<Box<RawValue>>,
            error: Option<Box<RawValue>>,
        }
        let head: Head = serde_json::from_slice(message).ok()?;
        Some(match (head.method, head.id) {
            (Some(method), None) => Self::Notification {
                method,
                message: Bytes::copy_from_slice(message),
            },
            (None, Some(_)) if head.result.is_some() != head.error.is_some() => {
                Self::Response(ModernResponse {
                    result: head.result,
                    error: head.error,
                })
            }
            _ => Self::Other,
        })
    }
}

impl ModernResponse {
    /// The `inputRequests` and `requestState` of an `input_required` result.
    pub(super) fn input_required(&self) -> Option<InputRequired> {
        let result: RawObject = serde_json::from_str(self.result.as_ref()?.get()).ok()?;
        if result.get("resultType")?.get() != r#""input_required""# {
            return None;
        }
        let requests = match result.get("inputRequests") {
            Some(raw) => serde_json::from_str(raw.get()).ok()?,
            None => RawObject::default(),
        };
        let state = result
            .get("requestState")
            .filter(|s| s.get().starts_with('"'))
            .map(ToOwned::to_owned);
        Some(InputRequired { requests, state })
    }
}

/// The legacy response to the client's request `id` (raw JSON) of `method`.
pub(super) fn legacy_response(id: &RawValue, method: &str, response: &ModernResponse) -> Bytes {
    if let Some(result) = &response.result {
        let result = match serde_json::from_str::<RawObject>(result.get()) {
            Ok(mut object) => {
                object
                    .0
                    .retain(|(k, _)| !MODERN_ONLY_RESULT_MEMBERS.contains(&k.as_str()));
                serde_json::to_string(&object).unwrap_or_else(|_| result.get().to_owned())
            }
            Err(_) => result.get().to_owned(),
        };
        return Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#,
            id.get()
        ));
    }
    let error = response.error.as_deref().map_or("{}", RawValue::get);
    let error = legacy_error(method, error);
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#,
        id.get()
    ))
}

/// Maps an error object to its legacy code where the eras differ.
fn legacy_error(method: &str, error: &str) -> String {
    let Ok(mut object) = serde_json::from_str::<serde_json::Value>(error) else {
        return error.to_owned();
    };
    let not_found = method == "resources/read"
        && object["code"] == tower_mrtr::error::INVALID_PARAMS
        && object["data"]["uri"].is_string();
    if not_found {
        object["code"] = LEGACY_RESOURCE_NOT_FOUND.into();
        return object.to_string();
    }
    error.to_owned()
}

/// A JSON-RPC error response to the client's request `id`.
pub(super) fn error_message(
    id: &RawValue,
    code: i64,
    message: &str,
    data: Option<serde_json::Value>,
) -> Bytes {
    crate::jsonrpc::error_body(Some(id.get()), code, message, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(text: &str) -> ModernResponse {
        match Modern::parse(text.as_bytes()) {
            Some(Modern::Response(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn input_required_results_are_recognised() {
        let r = response(
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}},"requestState":"mrtr1.x"}}"#,
        );
        let input = r.input_required().unwrap();
        assert_eq!(input.requests.0[0].0, "a");
        assert_eq!(input.state.unwrap().get(), r#""mrtr1.x""#);
        assert!(
            response(r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#)
                .input_required()
                .is_none()
        );
        assert!(
            response(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
                .input_required()
                .is_none()
        );
    }

    #[test]
    fn errors_keep_their_code_unless_the_eras_differ() {
        let id = RawValue::from_string(r#""c""#.into()).unwrap();
        let missing = response(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Resource not found","data":{"uri":"test://x"}}}"#,
        );
        let legacy = legacy_response(&id, "resources/read", &missing);
        assert!(std::str::from_utf8(&legacy).unwrap().contains(r#""code":-32002"#));
        let legacy = legacy_response(&id, "tools/call", &missing);
        assert!(std::str::from_utf8(&legacy).unwrap().contains(r#""code":-32602"#));
    }

    #[test]
    fn messages_are_classified() {
        assert!(matches!(
            Modern::parse(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#),
            Some(Modern::Notification { method, .. }) if method == "notifications/progress"
        ));
        assert!(matches!(
            Modern::parse(br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}"#),
            Some(Modern::Other)
        ));
        assert!(Modern::parse(b"nope").is_none());
    }

    #[test]
    fn a_modern_result_goes_back_in_legacy_form() {
        let id = RawValue::from_string("42".into()).unwrap();
        let modern = br#"{"jsonrpc":"2.0","id":"gw-1","result":{"resultType":"complete","content":[],"ttlMs":0,"isError":false}}"#;
        let Some(Modern::Response(response)) = Modern::parse(modern) else {
            panic!()
        };
        assert_eq!(
            &legacy_response(&id, "tools/call", &response)[..],
            br#"{"jsonrpc":"2.0","id":42,"result":{"content":[],"isError":false}}"#
        );
    }
}
