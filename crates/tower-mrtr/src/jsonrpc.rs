//! Reading JSON-RPC messages and rewriting single members in place.
//!
//! The layer never re-serialises a message: it parses with borrowed [`RawValue`]s to find the
//! byte span of the one member it must change, and splices new bytes into that span. Everything
//! else, key order, whitespace, number spellings and escapes included, stays as it was.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use memchr::memmem::Finder;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Methods whose results may be `input_required` (SEP-2322: the list is closed).
pub(crate) const INPUT_REQUIRED_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// Whether `method` may answer `input_required`.
pub(crate) fn may_require_input(method: &str) -> bool {
    INPUT_REQUIRED_METHODS.contains(&method)
}

/// Task follow-up methods of the Tasks extension: `params.taskId` is a task handle.
pub(crate) const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// The method whose `params.notifications.taskIds` may hold task handles.
pub(crate) const LISTEN_METHOD: &str = "subscriptions/listen";

/// Byte strings that make an answer to `tools/call`, `prompts/get` or `resources/read` worth
/// parsing: the `input_required` result type, and `taskId`, which every task result carries
/// (searching for `"task"` would make the quote, the commonest byte of JSON, the search's
/// anchor). `\u` is there because any key or value may be written with escapes
/// (`"input\u005frequired"` means `input_required` to every client), so a message using escapes
/// is parsed rather than trusted to the plain-text filter.
pub(crate) const RESPONSE_NEEDLES: [&[u8]; 3] = [b"input_required", b"taskId", b"\\u"];

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

/// A JSON-RPC message with only the members the layer reads.
#[derive(Deserialize)]
pub(crate) struct Message<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) result: Option<&'a RawValue>,
}

/// The request parameters the layer reads.
#[derive(Deserialize)]
pub(crate) struct Params<'a> {
    #[serde(borrow, default)]
    pub(crate) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) uri: Option<Cow<'a, str>>,
    /// Present-but-`null` is kept as `Some("null")`: only a string can be an envelope.
    #[serde(borrow, default, rename = "requestState", deserialize_with = "present")]
    pub(crate) request_state: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "taskId", deserialize_with = "present")]
    pub(crate) task_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) notifications: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    pub(crate) meta: Option<&'a RawValue>,
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

/// `params.notifications` of a `subscriptions/listen`: only the task filter is read.
#[derive(Deserialize)]
pub(crate) struct ListenFilter<'a> {
    #[serde(borrow, default, rename = "taskIds", deserialize_with = "present")]
    pub(crate) task_ids: Option<&'a RawValue>,
}

/// The members of a result the layer reads.
#[derive(Deserialize)]
pub(crate) struct ResultHead<'a> {
    #[serde(borrow, default, rename = "resultType")]
    pub(crate) result_type: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "requestState", deserialize_with = "present")]
    pub(crate) request_state: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "taskId", deserialize_with = "present")]
    pub(crate) task_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "ttlMs", deserialize_with = "present")]
    pub(crate) ttl_ms: Option<&'a RawValue>,
}

/// Deserialises a member that is present (even as `null`) to `Some`; `#[serde(default)]` gives
/// `None` when it is absent.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The first byte that is not JSON whitespace.
pub(crate) fn first_significant(bytes: &[u8]) -> Option<u8> {
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// Whether a raw value is a JSON object. Serde would also accept an array for a struct (by
/// position), which must not happen here.
pub(crate) fn is_object(raw: &str) -> bool {
    first_significant(raw.as_bytes()) == Some(b'{')
}

/// Parses a body as one JSON-RPC message, refusing arrays and anything not an object.
pub(crate) fn parse_message(body: &[u8]) -> Option<Message<'_>> {
    if first_significant(body) != Some(b'{') {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// Parses the params of a message, which must be an object.
pub(crate) fn parse_params<'a>(params: &'a RawValue) -> Option<Params<'a>> {
    if !is_object(params.get()) {
        return None;
    }
    serde_json::from_str(params.get()).ok()
}

/// Parses the head of a result object.
pub(crate) fn parse_result<'a>(result: &'a RawValue) -> Option<ResultHead<'a>> {
    if !is_object(result.get()) {
        return None;
    }
    serde_json::from_str(result.get()).ok()
}

/// Parses the filter of a `subscriptions/listen`, which must be an object.
pub(crate) fn parse_listen_filter<'a>(filter: &'a RawValue) -> Option<ListenFilter<'a>> {
    if !is_object(filter.get()) {
        return None;
    }
    serde_json::from_str(filter.get()).ok()
}

/// Replaces every JSON string token of `json` (keys excepted) whose decoded value `map` knows by
/// `"` + the mapped raw contents + `"`. `json` must be valid JSON. Returns `None` when nothing
/// matched, so the caller can keep the original bytes.
pub(crate) fn replace_string_values(json: &[u8], map: impl Fn(&str) -> Option<String>) -> Option<Bytes> {
    let mut out: Option<BytesMut> = None;
    let mut copied = 0; // bytes of `json` already in `out`
    let mut i = 0;
    while let Some(offset) = memchr::memchr(b'"', &json[i..]) {
        let start = i + offset;
        // Find the closing quote: the first one not escaped.
        let mut end = start + 1;
        loop {
            let rel = memchr::memchr2(b'"', b'\\', json.get(end..)?)?;
            end += rel;
            if json[end] == b'\\' {
                end += 2;
            } else {
                break;
            }
        }
        let token = &json[start..=end];
        i = end + 1;
        // A key is followed by ':' (after optional whitespace).
        if first_significant(&json[i..]) == Some(b':') {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Cow<'_, str>>(token) else {
            continue;
        };
        if let Some(replacement) = map(&value) {
            let buf = out.get_or_insert_with(|| BytesMut::with_capacity(json.len() + 64));
            buf.extend_from_slice(&json[copied..start]);
            buf.extend_from_slice(b"\"");
            buf.extend_from_slice(replacement.as_bytes());
            buf.extend_from_slice(b"\"");
            copied = i;
        }
    }
    let mut buf = out?;
    buf.extend_from_slice(&json[copied..]);
    Some(buf.freeze())
}

/// Decodes a raw JSON string token; `None` if it is not a string.
pub(crate) fn as_string<'a>(raw: &'a RawValue) -> Option<Cow<'a, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// The characters between the quotes of a raw JSON string token, escapes untouched.
pub(crate) fn string_contents(raw: &RawValue) -> Option<&str> {
    raw.get().strip_prefix('"')?.strip_suffix('"')
}

/// Where `part` (a slice borrowed from `base`) sits inside `base`.
pub(crate) fn span_of(base: &[u8], part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= base.len()).then_some(start..end)
}

/// `base` with `range` replaced by the concatenation of `parts`.
pub(crate) fn splice(base: &[u8], range: Range<usize>, parts: &[&[u8]]) -> Bytes {
    let added: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = BytesMut::with_capacity(base.len() - range.len() + added);
    out.extend_from_slice(&base[..range.start]);
    for part in parts {
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&base[range.end..]);
    out.freeze()
}

/// The byte range to delete so that the object member whose value occupies `value` disappears,
/// along with exactly one separating comma. `base` must be valid JSON (it was parsed already).
pub(crate) fn member_removal_range(base: &[u8], value: Range<usize>) -> Option<Range<usize>> {
    let is_ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    // Back from the value: whitespace, ':', whitespace, then the key's closing quote.
    let mut i = value.start;
    while i > 0 && is_ws(base[i - 1]) {
        i -= 1;
    }
    if i == 0 || base[i - 1] != b':' {
        return None;
    }
    i -= 1;
    while i > 0 && is_ws(base[i - 1]) {
        i -= 1;
    }
    if i == 0 || base[i - 1] != b'"' {
        return None;
    }
    i -= 1; // at the closing quote
    // The key's opening quote is the nearest quote before it that is not escaped, i.e. that is
    // preceded by an even number of backslashes (inside a valid string every quote is escaped).
    let key_start = loop {
        if i == 0 {
            return None;
        }
        i -= 1;
        if base[i] == b'"' {
            let backslashes = base[..i].iter().rev().take_while(|&&b| b == b'\\').count();
            if backslashes % 2 == 0 {
                break i;
            }
        }
    };
    // Before the key: whitespace and then ',' (a later member) or '{' (the first member).
    let mut j = key_start;
    while j > 0 && is_ws(base[j - 1]) {
        j -= 1;
    }
    match base.get(j.checked_sub(1)?)? {
        b',' => Some(j - 1..value.end),
        b'{' => {
            // First member: take the comma after it instead, if there is one.
            let mut k = value.end;
            while k < base.len() && is_ws(base[k]) {
                k += 1;
            }
            match base.get(k)? {
                b',' => Some(key_start..k + 1),
                b'}' => Some(key_start..value.end),
                _ => None,
            }
        }
        _ => None,
    }
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

    fn remove_member(json: &str, key: &str) -> String {
        let value: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json).unwrap();
        assert!(value.contains_key(key));
        #[derive(Deserialize)]
        struct Probe<'a> {
            #[serde(borrow, rename = "requestState")]
            state: &'a RawValue,
        }
        let probe: Probe<'_> = serde_json::from_str(json).unwrap();
        let range = span_of(json.as_bytes(), probe.state.get()).unwrap();
        let cut = member_removal_range(json.as_bytes(), range).unwrap();
        let out = splice(json.as_bytes(), cut, &[]);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn removes_members_in_every_position() {
        let cases = [
            (r#"{"requestState":"x"}"#, "{}"),
            (r#"{ "requestState" : "x" }"#, "{  }"),
            (r#"{"requestState":"x","a":1}"#, r#"{"a":1}"#),
            (r#"{"a":1,"requestState":"x"}"#, r#"{"a":1}"#),
            (r#"{"a":1, "requestState":"x", "b":2}"#, r#"{"a":1, "b":2}"#),
            (r#"{"a":"q\"","requestState":"x\\"}"#, r#"{"a":"q\""}"#),
            (
                r#"{"a":{"requestState":1},"request\u0053tate":"x"}"#,
                r#"{"a":{"requestState":1}}"#,
            ),
            (r#"{"k\\":1,"requestState":"x"}"#, r#"{"k\\":1}"#),
        ];
        for (input, expected) in cases {
            let out = remove_member(input, "requestState");
            assert_eq!(out, expected, "input {input}");
            serde_json::from_str::<serde_json::Value>(&out).unwrap();
        }
    }

    #[test]
    fn arrays_are_not_read_as_messages_or_params() {
        assert!(parse_message(br#"[1,"tools/call",{}]"#).is_none());
        let raw: &RawValue = serde_json::from_str(r#"["n","u","mrtr1.x"]"#).unwrap();
        assert!(parse_params(raw).is_none());
    }

    #[test]
    fn duplicate_members_make_a_message_unreadable() {
        assert!(parse_message(br#"{"method":"a","method":"b"}"#).is_none());
        let raw: &RawValue = serde_json::from_str(r#"{"requestState":"a","requestState":"b"}"#).unwrap();
        assert!(parse_params(raw).is_none());
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
        let msg = parse_message(br#"{"m\u0065thod":"tools/call","id":1}"#).unwrap();
        assert_eq!(msg.method.as_deref(), Some("tools/call"));
        assert!(response_is_candidate(
            br#"{"result":{"resultType":"input\u005frequired"}}"#
        ));
    }

    #[test]
    fn string_values_are_replaced_but_keys_and_lookalikes_are_not() {
        let json = br#"{"t1":"t1","a":["t1","t2",{"taskId":"t\u0031"}],"text":"t1 done","n":1}"#;
        let out = replace_string_values(json, |v| (v == "t1").then(|| "H".to_owned())).unwrap();
        assert_eq!(
            &out[..],
            br#"{"t1":"H","a":["H","t2",{"taskId":"H"}],"text":"t1 done","n":1}"#
        );
        assert!(replace_string_values(br#"{"a":"x"}"#, |_| None).is_none());
        let escaped = br#"{"k":"q\"t1\\","v":"t1"}"#;
        let out = replace_string_values(escaped, |v| (v == "t1").then(|| "H".to_owned())).unwrap();
        assert_eq!(&out[..], br#"{"k":"q\"t1\\","v":"H"}"#);
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
