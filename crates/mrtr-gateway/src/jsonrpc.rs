//! The gateway's own JSON-RPC: the error bodies it answers with, and the one body rewrite it
//! performs (a tool or prompt name). The codes are the library's ([`tower_mrtr::error`]), every
//! one of them, so the layer and the gateway cannot drift apart. The ground floor: it imports no
//! other module of the gateway.
//!
//! Bodies are never re-serialised through [`serde_json::Value`]: that would reorder members and
//! could change numbers. [`RawObject`] keeps every member's raw text and its position, so a
//! rewrite changes exactly one string.

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
