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
pub(crate) struct Members<'a>(pub(crate) Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The members of the JSON object `text`; `None` when it is not one.
    pub(crate) fn parse(text: &'a [u8]) -> Option<Self> {
        serde_json::from_slice(text).ok()
    }

    /// The members of the JSON object `raw`; `None` when it is not one.
    pub(crate) fn of(raw: &'a RawValue) -> Option<Self> {
        serde_json::from_str(raw.get()).ok()
    }

    /// The raw value of member `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

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

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
                while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    // A duplicate member could be read differently by the backend: refuse it.
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!("duplicate member {key:?}")));
                    }
                    members.push((key, value));
                }
                Ok(Members(members))
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
    fn span(&self, value: &RawValue) -> Option<(usize, usize)> {
        let start = (value.get().as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        let end = start.checked_add(value.get().len())?;
        (end <= self.text.len()).then_some((start, end))
    }

    /// Puts `with` in place of `value`; `None` when `value` is not part of the text.
    pub(crate) fn replace(&mut self, value: &RawValue, with: impl Into<Cow<'a, [u8]>>) -> Option<()> {
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
    pub(crate) fn insert_before_end(
        &mut self,
        value: &RawValue,
        with: impl Into<Cow<'a, [u8]>>,
    ) -> Option<()> {
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
    out.push('}');
    out
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
