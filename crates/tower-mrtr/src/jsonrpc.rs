//! Reading JSON-RPC messages: only the members the layer needs, strictly.
//!
//! The layer and the backend must read a request the same way, or a client could show the layer
//! one thing and the backend another. So every object the layer reads (the message, its `params`,
//! a subscription filter, a result) is refused when it is ambiguous:
//!
//! * a member name that appears twice (parsers disagree on which one wins);
//! * a member name that differs from one the layer reads only in case, such as `RequestState`,
//!   `REQUESTSTATE` or `requeſtState` (U+017F): Go's `encoding/json` (v1) matches all of them to
//!   `requestState`, and the MCP Go SDK had to fix exactly that. The folding refused is ASCII
//!   case plus the two non-ASCII letters that fold to ASCII ones, `ſ` (to `s`) and the Kelvin sign
//!   `K` (to `k`).
//!
//! Reading never re-serialises anything: values stay [`RawValue`]s borrowed from the body.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::LazyLock;

use bytes::Bytes;
use memchr::memmem::Finder;
use serde_json::value::RawValue;

use crate::json::{self, Members, Position};

/// Methods whose results may be `input_required` (SEP-2322: the list is closed).
pub(crate) const INPUT_REQUIRED_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// Whether `method` may answer `input_required`.
pub(crate) fn may_require_input(method: &str) -> bool {
    INPUT_REQUIRED_METHODS.contains(&method)
}

/// Whether `method`'s `params.arguments` is bound into its envelopes (tools and prompts take
/// arguments; a resource is named by its URI alone).
pub(crate) fn takes_arguments(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get")
}

/// Task follow-up methods of the Tasks extension: `params.taskId` is a task handle.
pub(crate) const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// The method whose `params.notifications.taskIds` may hold task handles.
pub(crate) const LISTEN_METHOD: &str = "subscriptions/listen";

/// Member names the layer reads in a request, its `params` or a subscription filter. A member
/// named like one of these but for case is refused (see the module docs).
pub(crate) const REQUEST_MEMBERS: &[&str] = &[
    "method",
    "params",
    "name",
    "uri",
    "arguments",
    "requestState",
    "inputResponses",
    "taskId",
    "taskIds",
    "notifications",
    "_meta",
];

/// Member names the layer reads in a response or its result.
pub(crate) const RESULT_MEMBERS: &[&str] = &[
    "result",
    "resultType",
    "requestState",
    "inputRequests",
    "taskId",
    "taskIds",
    "ttlMs",
];

/// Byte strings that make an answer to `tools/call`, `prompts/get` or `resources/read` worth
/// parsing: the `input_required` result type, and `taskId`, which every task result carries
/// (searching for `"task"` would make the quote, the commonest byte of JSON, the search's
/// anchor). `\u` is there because any key or value may be written with escapes
/// (`"input\u005frequired"` means `input_required` to every client), so a message using escapes
/// is parsed rather than trusted to the plain-text filter.
pub(crate) const RESPONSE_NEEDLES: [&[u8]; 3] = [b"input_required", b"taskId", b"\\u"];

/// Byte strings without which an answer to a task follow-up holds no task id to map: ids sit in
/// `taskId` members and `taskIds` arrays (the first needle finds both), and a message with a
/// backslash may spell those names with escapes. The needles do not depend on the ids, so the
/// search costs the same for one id as for a hundred.
pub(crate) const TASK_NEEDLES: [&[u8]; 2] = [b"taskId", b"\\"];

/// Searchers for [`RESPONSE_NEEDLES`], built once: building one costs more than a search of a
/// typical message.
static RESPONSE_FINDERS: LazyLock<Vec<Finder<'static>>> = LazyLock::new(|| {
    RESPONSE_NEEDLES
        .iter()
        .map(|n| Finder::new(n).into_owned())
        .collect()
});

/// Whether a response body may hold something the layer must seal.
pub(crate) fn response_is_candidate(body: &[u8]) -> bool {
    RESPONSE_FINDERS.iter().any(|f| f.find(body).is_some())
}

/// Whether an answer to a task follow-up may hold a task id.
pub(crate) fn may_hold_task_ids(body: &[u8]) -> bool {
    static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(TASK_NEEDLES[0]));
    memchr::memchr(b'\\', body).is_some() || FINDER.find(body).is_some()
}

/// Why an object could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// Not JSON at all (syntax, encoding, trailing bytes).
    NotJson,
    /// JSON, but not an object where one is required.
    NotAnObject,
    /// The member named so appears twice.
    Duplicate(String),
    /// The member named so differs from one the layer reads only in case.
    CaseVariant(String),
    /// The member named so does not have the type the layer requires (e.g. a `method` that is
    /// not a string).
    WrongType(&'static str),
}

impl ReadError {
    /// A short description for logs and for the client's error message (it names only what the
    /// client itself sent).
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::NotJson => "not valid JSON".to_owned(),
            Self::NotAnObject => "not a JSON object".to_owned(),
            Self::Duplicate(name) => format!("member {} appears more than once", quoted(name)),
            Self::CaseVariant(name) => format!(
                "member {} differs from a member the relay reads only in letter case",
                quoted(name)
            ),
            Self::WrongType(name) => format!("member {name:?} has the wrong type"),
        }
    }
}

/// A name as JSON text, shortened: it goes into an error message.
fn quoted(name: &str) -> String {
    let short: String = name.chars().take(64).collect();
    serde_json::to_string(&short).unwrap_or_default()
}

/// The members of one object, checked against the names the layer reads.
pub(crate) struct Object<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Object<'a> {
    /// Reads a JSON text that must be exactly one object.
    pub(crate) fn from_slice(bytes: &'a [u8], reads: &[&str]) -> Result<Self, ReadError> {
        match serde_json::from_slice::<Members<'a>>(bytes) {
            Ok(Members(members)) => Self::checked(members, reads),
            Err(e) if e.is_data() => Err(ReadError::NotAnObject),
            Err(_) => Err(ReadError::NotJson),
        }
    }

    /// Reads a raw value (already known to be JSON) that must be an object.
    pub(crate) fn from_raw(raw: &'a RawValue, reads: &[&str]) -> Result<Self, ReadError> {
        if !json::is_object(raw.get()) {
            return Err(ReadError::NotAnObject);
        }
        Self::from_slice(raw.get().as_bytes(), reads)
    }

    fn checked(members: Vec<(Cow<'a, str>, &'a RawValue)>, reads: &[&str]) -> Result<Self, ReadError> {
        if let Some(name) = first_duplicate(&members) {
            return Err(ReadError::Duplicate(name.to_owned()));
        }
        for (name, _) in &members {
            if !reads.contains(&&**name) && reads.iter().any(|read| folds_to(name, read)) {
                return Err(ReadError::CaseVariant(name.to_string()));
            }
        }
        Ok(Self { members })
    }

    /// The raw value of member `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.members.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// The string value of member `name`; an error if it is present but not a string.
    fn string(&self, name: &'static str) -> Result<Option<Cow<'a, str>>, ReadError> {
        match self.get(name) {
            None => Ok(None),
            Some(raw) => json::as_string(raw).map(Some).ok_or(ReadError::WrongType(name)),
        }
    }
}

fn first_duplicate<'m>(members: &'m [(Cow<'_, str>, &RawValue)]) -> Option<&'m str> {
    if members.len() <= 16 {
        return members
            .iter()
            .enumerate()
            .find(|(i, (name, _))| members[..*i].iter().any(|(other, _)| other == name))
            .map(|(_, (name, _))| &**name);
    }
    // Bodies can hold many thousands of members; keep this linear.
    let mut seen = HashSet::with_capacity(members.len());
    members
        .iter()
        .map(|(name, _)| &**name)
        .find(|name| !seen.insert(*name))
}

/// Whether `name` equals `read` under Go's case folding (ASCII letters, `ſ`→`s`, `K`→`k`).
fn folds_to(name: &str, read: &str) -> bool {
    let fold = |c: char| match c {
        '\u{17F}' => 's',
        '\u{212A}' => 'k',
        c => c.to_ascii_lowercase(),
    };
    let mut expected = read.chars().map(|c| c.to_ascii_lowercase());
    name.chars().all(|c| expected.next() == Some(fold(c))) && expected.next().is_none()
}

/// A JSON-RPC message with only the members the layer reads.
pub(crate) struct Message<'a> {
    pub(crate) id: Option<&'a RawValue>,
    pub(crate) method: Option<Cow<'a, str>>,
    pub(crate) params: Option<&'a RawValue>,
    pub(crate) result: Option<&'a RawValue>,
}

impl<'a> Message<'a> {
    fn from_object(object: &Object<'a>) -> Result<Self, ReadError> {
        Ok(Self {
            id: object.get("id"),
            method: object.string("method")?,
            params: object.get("params"),
            result: object.get("result"),
        })
    }
}

/// Reads a body (or a batch element) as one request message.
pub(crate) fn parse_request(body: &[u8]) -> Result<Message<'_>, ReadError> {
    Message::from_object(&Object::from_slice(body, REQUEST_MEMBERS)?)
}

/// Reads a backend's answer (or one element of it) as one response message.
pub(crate) fn parse_response(body: &[u8]) -> Result<Message<'_>, ReadError> {
    Message::from_object(&Object::from_slice(body, RESULT_MEMBERS)?)
}

/// The request parameters the layer reads.
pub(crate) struct Params<'a> {
    pub(crate) name: Option<Cow<'a, str>>,
    pub(crate) uri: Option<Cow<'a, str>>,
    /// Present-but-`null` is kept as `Some("null")`: only a string can be an envelope.
    pub(crate) request_state: Option<&'a RawValue>,
    pub(crate) task_id: Option<&'a RawValue>,
    pub(crate) notifications: Option<&'a RawValue>,
    pub(crate) meta: Option<&'a RawValue>,
    pub(crate) arguments: Option<&'a RawValue>,
}

/// Reads the `params` of a request, which must be an object.
pub(crate) fn parse_params(raw: &RawValue) -> Result<Params<'_>, ReadError> {
    let object = Object::from_raw(raw, REQUEST_MEMBERS)?;
    Ok(Params {
        name: object.string("name")?,
        uri: object.string("uri")?,
        request_state: object.get("requestState"),
        task_id: object.get("taskId"),
        notifications: object.get("notifications"),
        meta: object.get("_meta"),
        arguments: object.get("arguments"),
    })
}

/// Reads `params.notifications` of a `subscriptions/listen`: the task filter, if any.
pub(crate) fn parse_listen_task_ids(raw: &RawValue) -> Result<Option<&RawValue>, ReadError> {
    Ok(Object::from_raw(raw, REQUEST_MEMBERS)?.get("taskIds"))
}

/// The members of a result the layer reads.
pub(crate) struct ResultHead<'a> {
    pub(crate) result_type: Option<Cow<'a, str>>,
    pub(crate) request_state: Option<&'a RawValue>,
    pub(crate) task_id: Option<&'a RawValue>,
    pub(crate) ttl_ms: Option<&'a RawValue>,
}

/// Reads the head of a result object.
pub(crate) fn parse_result(raw: &RawValue) -> Result<ResultHead<'_>, ReadError> {
    let object = Object::from_raw(raw, RESULT_MEMBERS)?;
    Ok(ResultHead {
        result_type: object.string("resultType")?,
        request_state: object.get("requestState"),
        task_id: object.get("taskId"),
        ttl_ms: object.get("ttlMs"),
    })
}

/// Whether one response message holds something the layer would have to seal (an
/// `input_required` or task result), or cannot be read well enough to tell.
pub(crate) fn needs_sealing(message: &[u8]) -> bool {
    let Ok(message) = parse_response(message) else {
        // Not a readable object: only an object can carry a result.
        return json::first_significant(message) == Some(b'{');
    };
    match message.result {
        Some(result) if json::is_object(result.get()) => match parse_result(result) {
            Ok(head) => matches!(head.result_type.as_deref(), Some("input_required" | "task")),
            Err(_) => true,
        },
        _ => false,
    }
}

/// Whether a request's `_meta` declares the Tasks extension (`io.modelcontextprotocol/tasks`) among
/// the client's capabilities, as an object under `clientCapabilities.extensions`.
pub(crate) fn declares_tasks_extension(meta: Option<&RawValue>) -> bool {
    let Some(meta) = meta.and_then(|m| serde_json::from_str::<serde_json::Value>(m.get()).ok()) else {
        return false;
    };
    meta.pointer("/io.modelcontextprotocol~1clientCapabilities/extensions/io.modelcontextprotocol~1tasks")
        .is_some_and(serde_json::Value::is_object)
}

/// Replaces the task ids `handles` knows (backend id → raw contents of the client's handle) where
/// task ids sit: string values of `taskId` members and elements of `taskIds` arrays, at any
/// depth. Every other string, a tool's output that happens to equal an id included, is kept.
/// `None` when nothing changed.
pub(crate) fn map_task_ids(json: &[u8], handles: &HashMap<String, String>) -> Option<Bytes> {
    json::map_member_strings(json, |name, position, value| match (name, position) {
        ("taskId", Position::Member) | ("taskIds", Position::Element) => handles.get(value).cloned(),
        _ => None,
    })
}

/// Writes a JSON-RPC error response. `id` is the raw JSON id of the request (`null` if none).
pub(crate) fn error_body(id: Option<&str>, code: i64, message: &str) -> Bytes {
    error_body_with_data(id, code, message, None)
}

/// Writes a JSON-RPC error response with an optional raw JSON `data` member.
pub(crate) fn error_body_with_data(id: Option<&str>, code: i64, message: &str, data: Option<&str>) -> Bytes {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"error\"".to_owned());
    let data = data.map(|d| format!(r#","data":{d}"#)).unwrap_or_default();
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":{code},"message":{message}{data}}}}}"#,
        id.unwrap_or("null")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_not_read_as_messages_or_params() {
        assert_eq!(
            parse_request(br#"[1,"tools/call",{}]"#).err(),
            Some(ReadError::NotAnObject)
        );
        let raw: &RawValue = serde_json::from_str(r#"["n","u","mrtr2.x"]"#).unwrap();
        assert!(matches!(parse_params(raw), Err(ReadError::NotAnObject)));
    }

    #[test]
    fn syntax_errors_are_not_json() {
        for body in [
            &b"\xEF\xBB\xBF{}"[..],
            b"{} x",
            b"{\"a\":\"\xFF\"}",
            b"{\x00\"\x00}\x00",
        ] {
            assert_eq!(parse_request(body).err(), Some(ReadError::NotJson), "{body:?}");
        }
    }

    #[test]
    fn duplicate_members_make_a_message_unreadable() {
        assert_eq!(
            parse_request(br#"{"method":"a","method":"b"}"#).err(),
            Some(ReadError::Duplicate("method".into()))
        );
        let raw: &RawValue = serde_json::from_str(r#"{"requestState":"a","request\u0053tate":"b"}"#).unwrap();
        assert!(matches!(parse_params(raw), Err(ReadError::Duplicate(_))));
        let many: String = format!(
            "{{{}\"k0\":1}}",
            (0..100).map(|i| format!("\"k{i}\":1,")).collect::<String>()
        );
        assert_eq!(
            parse_request(many.as_bytes()).err(),
            Some(ReadError::Duplicate("k0".into()))
        );
    }

    #[test]
    fn case_variants_of_read_members_are_refused() {
        for name in [
            "RequestState",
            "REQUESTSTATE",
            "requeſtState",
            "taskIDS",
            "\u{212A}",
        ] {
            let params = format!(r#"{{"{name}":"x"}}"#);
            let raw: &RawValue = serde_json::from_str(&params).unwrap();
            let expected = name != "\u{212A}";
            assert_eq!(
                matches!(parse_params(raw), Err(ReadError::CaseVariant(_))),
                expected,
                "{name}"
            );
        }
        assert!(matches!(
            parse_request(br#"{"Method":"tools/call"}"#),
            Err(ReadError::CaseVariant(_))
        ));
        assert!(matches!(
            parse_response(br#"{"result":{"ResultType":"input_required"}}"#)
                .map(|m| parse_result(m.result.unwrap())),
            Ok(Err(ReadError::CaseVariant(_)))
        ));
        // Names the layer does not read may be spelled any way.
        assert!(parse_request(br#"{"method":"x","params":{"Cursor":1,"ARGS":2}}"#).is_ok());
        assert!(folds_to("TAS\u{212A}ID", "taskId"));
        assert!(!folds_to("taskI", "taskId"));
        assert!(!folds_to("taskIdd", "taskId"));
    }

    #[test]
    fn null_state_is_present() {
        let raw: &RawValue = serde_json::from_str(r#"{"requestState":null}"#).unwrap();
        assert_eq!(parse_params(raw).unwrap().request_state.unwrap().get(), "null");
        let raw: &RawValue = serde_json::from_str(r#"{}"#).unwrap();
        assert!(parse_params(raw).unwrap().request_state.is_none());
    }

    #[test]
    fn escaped_keys_are_decoded() {
        let msg = parse_request(br#"{"m\u0065thod":"tools/call","id":1}"#).unwrap();
        assert_eq!(msg.method.as_deref(), Some("tools/call"));
        assert!(response_is_candidate(
            br#"{"result":{"resultType":"input\u005frequired"}}"#
        ));
    }

    #[test]
    fn results_that_need_sealing() {
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"input_required"}}"#
        ));
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"task","taskId":"t"}}"#
        ));
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"complete","RequestState":"s"}}"#
        ));
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"x","resultType":"y"}}"#
        ));
        assert!(!needs_sealing(br#"{"id":1,"result":{"resultType":"complete"}}"#));
        assert!(!needs_sealing(
            br#"{"id":1,"error":{"code":1,"message":"input_required"}}"#
        ));
        assert!(!needs_sealing(b"not json input_required"));
    }

    #[test]
    fn tasks_extension_declaration() {
        let yes: &RawValue = serde_json::from_str(
            r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#,
        )
        .unwrap();
        assert!(declares_tasks_extension(Some(yes)));
        for no in [
            r#"{}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"tasks":{}}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}"#,
        ] {
            let raw: &RawValue = serde_json::from_str(no).unwrap();
            assert!(!declares_tasks_extension(Some(raw)), "{no}");
        }
        assert!(!declares_tasks_extension(None));
    }

    #[test]
    fn error_bodies_are_valid_json_rpc() {
        let body = error_body(Some(r#""c-1""#), -32602, "Invalid \"requestState\"");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "c-1");
        assert_eq!(v["error"]["code"], -32602);
        let v: serde_json::Value = serde_json::from_slice(&error_body(None, -32600, "x")).unwrap();
        assert!(v["id"].is_null());
    }
}
