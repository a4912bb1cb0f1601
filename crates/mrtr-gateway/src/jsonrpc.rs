//! The gateway's own JSON-RPC: the error bodies it answers with, and the one body rewrite it
//! performs (a tool or prompt name). The codes are the library's ([`tower_mrtr::error`]), every
//! one of them, so the layer and the gateway cannot drift apart. The ground floor: it imports no
//! other module of the gateway.
//!
//! Bodies are never re-serialised through [`serde_json::Value`]: that would reorder members and
//! could change numbers. [`RawObject`] keeps every member's raw text and its position, so a
//! rewrite changes exactly one string; [`Members`] reads an object's members borrowed from its
//! text and [`Splice`] rewrites the text around them, where a hot path (a legacy backend's
//! request and answer, `upstream/translate.rs`) must not copy every member.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

/// A JSON object whose members keep their order and their raw text.
#[derive(Debug, Default)]
pub struct RawObject(pub Vec<(String, Box<RawValue>)>);

impl RawObject {
    /// The raw value of member `key`, if present.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Box<RawValue>> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut members: Vec<(String, Box<RawValue>)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    // A duplicate member could be read differently by the backend: refuse it.
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!("duplicate member {key:?}")));
                    }
                    members.push((key, value));
                }
                Ok(RawObject(members))
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Replaces the string `params.<member>` of a request body by `value`, keeping every other byte's
/// meaning, member order and raw number text. `None` if the body is not a request with such params.
pub fn rename_target(body: &[u8], member: &str, value: &str) -> Option<Bytes> {
    rename_path(body, &["params", member], value)
}

/// Replaces the string at `path` (object members from the top) by `value`, as [`rename_target`].
pub fn rename_path(body: &[u8], path: &[&str], value: &str) -> Option<Bytes> {
    fn rewrite(raw: &RawValue, path: &[&str], value: &str) -> Option<Box<RawValue>> {
        let Some((first, rest)) = path.split_first() else {
            return raw
                .get()
                .starts_with('"')
                .then(|| serde_json::value::to_raw_value(value).ok())?;
        };
        let mut object: RawObject = serde_json::from_str(raw.get()).ok()?;
        let slot = object.get_mut(first)?;
        *slot = rewrite(slot, rest, value)?;
        serde_json::value::to_raw_value(&object).ok()
    }
    let raw: &RawValue = serde_json::from_slice(body).ok()?;
    rewrite(raw, path, value).map(|out| Bytes::from(out.get().to_owned()))
}

/// Replaces (or inserts) `params.<member>` of a request body by raw JSON `value`, as
/// [`rename_target`] does; used to page through list results with a `cursor`.
pub fn set_param(body: &[u8], member: &str, value: Box<RawValue>) -> Option<Bytes> {
    let mut message: RawObject = serde_json::from_slice(body).ok()?;
    let mut inner: RawObject = match message.get("params") {
        Some(raw) => serde_json::from_str(raw.get()).ok()?,
        None => RawObject::default(),
    };
    match inner.get_mut(member) {
        Some(slot) => *slot = value,
        None => inner.0.push((member.to_owned(), value)),
    }
    let params = serde_json::value::to_raw_value(&inner).ok()?;
    match message.get_mut("params") {
        Some(slot) => *slot = params,
        None => message.0.push(("params".to_owned(), params)),
    }
    serde_json::to_vec(&message).ok().map(Bytes::from)
}

/// A JSON object's members as they stand in its text: each key decoded (borrowed when it has no
/// escape), each value's raw text borrowed. Reading one allocates the list of members only,
/// where [`RawObject`] copies every member; with [`Splice`], a rewrite copies the text around
/// what it changes, so every other byte stays as it came. A duplicate member is refused, as
/// [`RawObject`] refuses it.
#[derive(Debug, Default)]
pub(crate) struct Members<'a>(pub(crate) Vec<(Cow<'a, str>, &'a str)>);

impl<'a> Members<'a> {
    /// The members of the JSON object `text`, which serde_json reads (and so checks) whole;
    /// `None` when it is not one.
    pub(crate) fn parse(text: &'a [u8]) -> Option<Self> {
        let members: Vec<(Cow<'a, str>, &'a RawValue)> = serde_json::from_slice::<Borrowed<'a>>(text).ok()?.0;
        Some(Self(
            members
                .into_iter()
                .map(|(key, value)| (key, value.get()))
                .collect(),
        ))
    }

    /// The members of `value`, a member's text from [`parse`](Self::parse) or from this
    /// function, and so JSON already checked: its members are found without reading it again
    /// (a nested value was checked with the text it came in). `None` when it is not an object,
    /// holds a member twice, or (not from those) is not the JSON it should be. Found by hand:
    /// serde_json lists an object's members only by checking its text again, a second time
    /// for `params` and a third for `params._meta` (`docs/benchmarks.md`, issue 40's fixes).
    pub(crate) fn of(value: &'a str) -> Option<Self> {
        let bytes = value.as_bytes();
        let mut at = skip_whitespace(bytes, 0);
        if bytes.get(at) != Some(&b'{') {
            return None;
        }
        at += 1;
        let mut members: Vec<(Cow<'a, str>, &'a str)> = Vec::new();
        loop {
            at = skip_whitespace(bytes, at);
            match bytes.get(at)? {
                b'}' => return Some(Self(members)),
                b',' if !members.is_empty() => at = skip_whitespace(bytes, at + 1),
                _ => {}
            }
            let key_end = string_end(bytes, at)?;
            let quoted = value.get(at..key_end)?;
            // An escaped key is decoded as serde_json decodes it, so that duplicates compare alike.
            let key = match memchr::memchr(b'\\', quoted.as_bytes()).is_some() {
                true => Cow::Owned(serde_json::from_str::<String>(quoted).ok()?),
                false => Cow::Borrowed(quoted.get(1..quoted.len() - 1)?),
            };
            at = skip_whitespace(bytes, key_end);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            let start = skip_whitespace(bytes, at + 1);
            at = value_end(bytes, start)?;
            if members.iter().any(|(k, _)| *k == key) {
                return None;
            }
            members.push((key, value.get(start..at)?));
        }
    }

    /// The raw value of member `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// The first byte at or after `at` that is not JSON whitespace.
fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The bytes a skipped object or array is read by: strings' quotes and brackets (JSON already
/// checked nests them properly, so `{` and `[` count alike).
const NESTING: [bool; 256] = byte_set(b"\"{}[]");

/// The bytes that end a number or a literal.
const SCALAR_END: [bool; 256] = byte_set(b",}] \t\n\r");

const fn byte_set(bytes: &[u8]) -> [bool; 256] {
    let mut set = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        set[bytes[i] as usize] = true;
        i += 1;
    }
    set
}

/// Where the string starting at `at` (its opening quote) ends: just after its closing quote.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', bytes.get(i..)?)?;
        match bytes.get(i)? {
            b'"' => return Some(i + 1),
            _ => i += 2,
        }
    }
}

/// Where the value starting at `at` ends: after a string's quote, an object's or array's closing
/// bracket (strings inside skipped), or a number's or literal's last byte.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                i += bytes.get(i..)?.iter().position(|&b| NESTING[usize::from(b)])?;
                match bytes.get(i)? {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    _ => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                }
                i += 1;
            }
        }
        _ => {
            let rest = bytes.get(at..)?;
            let len = rest
                .iter()
                .position(|&b| SCALAR_END[usize::from(b)])
                .unwrap_or(rest.len());
            (len > 0).then_some(at + len)
        }
    }
}

/// [`Members`] as serde_json reads them, each value borrowed from the text it checked.
struct Borrowed<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

/// A key, borrowed from the text when it has no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Borrowed<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Borrowed<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Borrowed<'de>, A::Error> {
                let mut members: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
                while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    // A duplicate member could be read differently by the backend: refuse it.
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!("duplicate member {key:?}")));
                    }
                    members.push((key, value));
                }
                Ok(Borrowed(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// A JSON text rewritten by replacing values borrowed from it ([`Members`]) and inserting text
/// before their last byte; everything else is copied as it is.
#[derive(Debug)]
pub(crate) struct Splice<'a> {
    text: &'a [u8],
    edits: Vec<(usize, usize, Cow<'a, [u8]>)>,
}

impl<'a> Splice<'a> {
    /// A rewrite of `text`.
    pub(crate) fn new(text: &'a [u8]) -> Self {
        Self {
            text,
            edits: Vec::new(),
        }
    }

    /// Where `value` lies in the text; `None` when it was not borrowed from it.
    fn span(&self, value: &str) -> Option<(usize, usize)> {
        let start = (value.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        let end = start.checked_add(value.len())?;
        (end <= self.text.len()).then_some((start, end))
    }

    /// Puts `with` in place of `value`; `None` when `value` is not part of the text.
    pub(crate) fn replace(&mut self, value: &str, with: impl Into<Cow<'a, [u8]>>) -> Option<()> {
        let (start, end) = self.span(value)?;
        self.edits.push((start, end, with.into()));
        Some(())
    }

    /// Inserts `with` at byte `at` of the text.
    pub(crate) fn insert(&mut self, at: usize, with: impl Into<Cow<'a, [u8]>>) {
        self.edits.push((at, at, with.into()));
    }

    /// Inserts `with` before the last byte of `value` (the `}` of an object); `None` when
    /// `value` is not part of the text.
    pub(crate) fn insert_before_end(&mut self, value: &str, with: impl Into<Cow<'a, [u8]>>) -> Option<()> {
        let (_, end) = self.span(value)?;
        let at = end.checked_sub(1)?;
        self.edits.push((at, at, with.into()));
        Some(())
    }

    /// The rewritten text; `None` when two edits overlap.
    pub(crate) fn finish(mut self) -> Option<Vec<u8>> {
        self.edits.sort_by_key(|&(start, end, _)| (start, end));
        let added: usize = self.edits.iter().map(|(_, _, with)| with.len()).sum();
        let mut out = Vec::with_capacity(self.text.len() + added);
        let mut copied = 0;
        for (start, end, with) in &self.edits {
            out.extend_from_slice(self.text.get(copied..*start)?);
            out.extend_from_slice(with);
            copied = *end;
        }
        out.extend_from_slice(self.text.get(copied..)?);
        Some(out)
    }
}

/// `members` (decoded keys, raw values) written as one JSON object.
pub(crate) fn object_text<'k>(members: impl IntoIterator<Item = (&'k str, &'k str)>) -> String {
    let mut out = String::from("{");
    for (key, value) in members {
        if out.len() > 1 {
            out.push(',');
        }
        push_member(&mut out, key, value);
    }
    out.push('}');
    out
}

/// Writes the member `"key":value` (a decoded key, escaped where JSON needs it; a raw value).
pub(crate) fn push_member(out: &mut String, key: &str, value: &str) {
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(key);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(key).unwrap_or_default());
    }
    out.push(':');
    out.push_str(value);
}

/// A JSON-RPC error response body. `id` is raw JSON text (`7`, `"a"`), `None` for `null`.
pub fn error_body(id: Option<&str>, code: i64, message: &str, data: Option<serde_json::Value>) -> Bytes {
    let id = id
        .and_then(|raw| serde_json::from_str::<&RawValue>(raw).ok())
        .map_or_else(|| "null".to_owned(), |raw| raw.get().to_owned());
    let mut error = serde_json::json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#))
}

/// `sha256:` and the hex SHA-256 of the canonical form of a JSON text
/// ([`tower_mrtr::canonical::canonicalize`]: member order, whitespace and escapes do not matter,
/// numbers by their exact value); `None` for text that has none (not JSON, a duplicate member).
pub(crate) fn canonical_digest(json: &str) -> Option<String> {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let canonical = tower_mrtr::canonical::canonicalize(json).ok()?;
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in Sha256::digest(&canonical) {
        let _ = write!(out, "{byte:02x}");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_mrtr::error::{INTERNAL_ERROR, INVALID_PARAMS};

    /// What serde_json reads as `text`'s members, for comparing [`Members::of`] with.
    fn read_by_serde(text: &str) -> Option<Vec<(String, String)>> {
        let members = serde_json::from_str::<Borrowed<'_>>(text).ok()?.0;
        Some(
            members
                .into_iter()
                .map(|(k, v)| (k.into_owned(), v.get().to_owned()))
                .collect(),
        )
    }

    fn members_of(text: &str) -> Option<Vec<(String, String)>> {
        let members = Members::of(text)?.0;
        Some(
            members
                .into_iter()
                .map(|(k, v)| (k.into_owned(), v.to_owned()))
                .collect(),
        )
    }

    #[test]
    fn members_of_checked_text_are_what_serde_json_reads() {
        let objects = [
            r#"{}"#,
            " { } ",
            r#"{"a":1}"#,
            "{ \"a\" :\t-1.5e+3 ,\n\"b\" : [ ] , \"c\":{ } }",
            r#"{"name":"echo","arguments":{"text":"a } ] { [ \" \\ ,"},"_meta":{"progressToken":7}}"#,
            r#"{"x":[{"y":"]"},[["}"]],null,true,false,"\u0041"],"z":"\\"}"#,
            r#"{"\u0061b":1,"c\"d":"e","":0}"#,
            r#"{"deep":{"a":{"b":{"c":[1,{"d":"{"}]}}},"after":"x"}"#,
        ];
        for text in objects {
            assert_eq!(members_of(text), read_by_serde(text), "{text}");
            assert!(members_of(text).is_some(), "{text}");
        }
    }

    #[test]
    fn members_of_refuse_duplicates_and_what_is_no_object() {
        // A duplicate, also when one of the two is written with an escape.
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"a":{},"b":[],"a":"x"}"#,
        ] {
            assert_eq!(members_of(text), None, "{text}");
            assert_eq!(read_by_serde(text), None, "{text}");
        }
        for text in [
            "[1]",
            "\"a\"",
            "1",
            "null",
            "",
            "{",
            r#"{"a""#,
            r#"{"a":"#,
            r#"{"a":1"#,
            r#"{"a" 1}"#,
            "{,}",
        ] {
            assert_eq!(members_of(text), None, "{text}");
        }
    }

    #[test]
    fn rename_keeps_order_and_raw_values() {
        let body = br#"{"params":{"arguments":{"z":1e3,"a":"x"},"name":"a__b","_meta":{"k":[1,2]}},"id":"q","method":"prompts/get","jsonrpc":"2.0"}"#;
        let out = rename_target(body, "name", "b").unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"params":{"arguments":{"z":1e3,"a":"x"},"name":"b","_meta":{"k":[1,2]}},"id":"q","method":"prompts/get","jsonrpc":"2.0"}"#
        );
    }

    #[test]
    fn rename_refuses_duplicates_and_non_strings() {
        assert!(rename_target(br#"{"params":{"name":"a","name":"b"}}"#, "name", "c").is_none());
        assert!(rename_target(br#"{"params":{"name":3}}"#, "name", "c").is_none());
        assert!(rename_target(br#"{"params":{}}"#, "name", "c").is_none());
        assert!(rename_target(b"[1]", "name", "c").is_none());
    }

    #[test]
    fn set_param_inserts_or_replaces() {
        let cursor = serde_json::value::to_raw_value("c2").unwrap();
        let out = set_param(br#"{"id":1,"method":"tools/list"}"#, "cursor", cursor.clone()).unwrap();
        assert_eq!(
            &out[..],
            br#"{"id":1,"method":"tools/list","params":{"cursor":"c2"}}"#
        );
        let out = set_param(br#"{"params":{"cursor":"c1","_meta":{}}}"#, "cursor", cursor).unwrap();
        assert_eq!(&out[..], br#"{"params":{"cursor":"c2","_meta":{}}}"#);
    }

    #[test]
    fn error_bodies_carry_the_raw_id() {
        let body = error_body(Some(r#""abc""#), INVALID_PARAMS, "nope", None);
        assert_eq!(
            &body[..],
            br#"{"jsonrpc":"2.0","id":"abc","error":{"code":-32602,"message":"nope"}}"#
        );
        let body = error_body(
            Some("not json"),
            INTERNAL_ERROR,
            "x",
            Some(serde_json::json!({"a":1})),
        );
        assert!(body.starts_with(br#"{"jsonrpc":"2.0","id":null,"error":{"#));
    }

    #[test]
    fn a_rename_changes_one_string_and_keeps_raw_numbers() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"beta__deploy","arguments":{"b":1.50,"a":2}}}"#;
        let out = rename_target(body, "name", "deploy").unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"deploy","arguments":{"b":1.50,"a":2}}}"#
        );
    }
}
