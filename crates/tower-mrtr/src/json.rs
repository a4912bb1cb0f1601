//! Borrowed, order-preserving views of raw JSON, and in-place edits of it.
//!
//! The layer never re-serialises a message. It reads an object as its members in document order,
//! each value left as an unparsed [`RawValue`] borrowed from the body, so it parses only what it
//! needs, sees duplicates (which parsers resolve differently), and knows the byte span of the one
//! value it must change. Edits splice new bytes into that span; every other byte stays as it was.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A member name, borrowed from the input when it holds no escapes.
pub(crate) struct Name<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// An object's members in document order, duplicates kept.
pub(crate) struct Members<'a>(pub(crate) Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(Name(name)) = map.next_key()? {
                    members.push((name, map.next_value()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// An array's elements, unparsed.
pub(crate) struct Elements<'a>(pub(crate) Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for Elements<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ElementsVisitor;
        impl<'de> Visitor<'de> for ElementsVisitor {
            type Value = Elements<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elements<'de>, A::Error> {
                let mut elements = Vec::new();
                while let Some(element) = seq.next_element()? {
                    elements.push(element);
                }
                Ok(Elements(elements))
            }
        }
        deserializer.deserialize_seq(ElementsVisitor)
    }
}

/// The text of one JSON value, borrowed from a message the layer has read (and so checked).
///
/// `serde_json`'s `RawValue` says the same, but only serde_json can make one; the fast request
/// reader (`jsonrpc/scan.rs`) checks the text itself and hands out these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// `text` must be one JSON value that has been checked (by serde_json or the fast reader).
    pub(crate) fn checked(text: &'a str) -> Self {
        Self(text)
    }

    /// The JSON text.
    pub(crate) fn get(self) -> &'a str {
        self.0
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Self(raw.get())
    }
}

impl<'de> Deserialize<'de> for Raw<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(deserializer).map(Raw::from)
    }
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

/// Decodes a raw JSON string token (checked JSON text); `None` if it is not a string.
pub(crate) fn as_string(raw: &str) -> Option<Cow<'_, str>> {
    let contents = string_contents(raw)?;
    // A string without escapes is its own contents (the value is valid JSON already).
    if memchr::memchr(b'\\', contents.as_bytes()).is_none() {
        return Some(Cow::Borrowed(contents));
    }
    serde_json::from_str(raw).ok()
}

/// The characters between the quotes of a raw JSON string token, escapes untouched.
pub(crate) fn string_contents(raw: &str) -> Option<&str> {
    raw.strip_prefix('"')?.strip_suffix('"')
}

/// The value of a JSON string from its raw contents (between the quotes, escapes kept).
pub(crate) fn decode_contents(raw: &str) -> Option<String> {
    serde_json::from_str(&format!("\"{raw}\"")).ok()
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

/// `base` with `range` replaced by `before`, then `len` bytes that `write` fills in place, then
/// `after`: a string written straight into the message, with no buffer of its own. `None` if
/// `write` fails.
pub(crate) fn splice_with(
    base: &[u8],
    range: Range<usize>,
    before: &[u8],
    len: usize,
    write: impl FnOnce(&mut [u8]) -> Option<()>,
    after: &[u8],
) -> Option<Bytes> {
    let added = before.len().checked_add(len)?.checked_add(after.len())?;
    let mut out = BytesMut::with_capacity((base.len() - range.len()).checked_add(added)?);
    out.extend_from_slice(&base[..range.start]);
    out.extend_from_slice(before);
    let at = out.len();
    out.resize(at + len, 0);
    write(&mut out[at..])?;
    out.extend_from_slice(after);
    out.extend_from_slice(&base[range.end..]);
    Some(out.freeze())
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

/// Where a string value sits, as [`map_member_strings`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Position {
    /// The value of a member with this name.
    Member,
    /// An element of an array that is the value of a member with this name.
    Element,
}

/// Replaces string values by position in one pass over valid JSON: `map(name, position, value)`
/// sees every string that is the value of an object member (or an element of an array that is
/// one), with the member's decoded name and the string's decoded value, and returns the raw
/// contents to write between new quotes, or `None` to keep it. Keys are never mapped. Returns
/// `None` when nothing changed, so the caller keeps the original bytes.
pub(crate) fn map_member_strings(
    json: &[u8],
    mut map: impl FnMut(&str, Position, &str) -> Option<String>,
) -> Option<Bytes> {
    /// What the scanner is inside of: an object (with the last member name seen, and whether
    /// the next string is a name) or an array (with the name of the member holding it).
    enum Frame {
        Object {
            name: Option<String>,
            expecting_name: bool,
        },
        Array {
            holder: Option<String>,
        },
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut out: Option<BytesMut> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'{' => {
                stack.push(Frame::Object {
                    name: None,
                    expecting_name: true,
                });
                i += 1;
            }
            b'[' => {
                let holder = match stack.last() {
                    Some(Frame::Object { name, .. }) => name.clone(),
                    _ => None,
                };
                stack.push(Frame::Array { holder });
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                i += 1;
            }
            b',' => {
                if let Some(Frame::Object { expecting_name, .. }) = stack.last_mut() {
                    *expecting_name = true;
                }
                i += 1;
            }
            b'"' => {
                let start = i;
                let end = string_end(json, start)?;
                i = end + 1;
                let token = &json[start..=end];
                let decode = || serde_json::from_slice::<Cow<'_, str>>(token).ok();
                let replacement = match stack.last_mut() {
                    Some(Frame::Object {
                        name,
                        expecting_name: expecting @ true,
                    }) => {
                        *name = decode().map(Cow::into_owned);
                        *expecting = false;
                        None
                    }
                    Some(Frame::Object { name: Some(name), .. }) => {
                        decode().and_then(|value| map(name, Position::Member, &value))
                    }
                    Some(Frame::Array { holder: Some(holder) }) => {
                        decode().and_then(|value| map(holder, Position::Element, &value))
                    }
                    _ => None,
                };
                if let Some(replacement) = replacement {
                    let buf = out.get_or_insert_with(|| BytesMut::with_capacity(json.len() + 64));
                    buf.extend_from_slice(&json[copied..start]);
                    buf.extend_from_slice(b"\"");
                    buf.extend_from_slice(replacement.as_bytes());
                    buf.extend_from_slice(b"\"");
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    let mut buf = out?;
    buf.extend_from_slice(&json[copied..]);
    Some(buf.freeze())
}

/// The index of the quote closing the string that opens at `start`.
fn string_end(json: &[u8], start: usize) -> Option<usize> {
    let mut end = start + 1;
    loop {
        end += memchr::memchr2(b'"', b'\\', json.get(end..)?)?;
        if json[end] == b'\\' {
            end += 2;
        } else {
            return Some(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remove_member(json: &str) -> String {
        let Members(members) = serde_json::from_str(json).unwrap();
        let state = members.iter().find(|(k, _)| k == "requestState").unwrap().1;
        let range = span_of(json.as_bytes(), state.get()).unwrap();
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
            let out = remove_member(input);
            assert_eq!(out, expected, "input {input}");
            serde_json::from_str::<serde_json::Value>(&out).unwrap();
        }
    }

    #[test]
    fn splice_with_writes_in_place_between_its_delimiters() {
        let base = br#"{"requestState":"backend","x":1}"#;
        let span = 16..25;
        assert_eq!(&base[span.clone()], br#""backend""#);
        let write = |out: &mut [u8]| {
            out.copy_from_slice(b"sealed");
            Some(())
        };
        let out = splice_with(base, span.clone(), b"\"", 6, write, b"\"").unwrap();
        assert_eq!(&out[..], br#"{"requestState":"sealed","x":1}"#);
        // An insertion (an empty range), as when a member is added.
        let write = |out: &mut [u8]| {
            out.fill(b'z');
            Some(())
        };
        let out = splice_with(base, 1..1, b"\"a\":\"", 2, write, b"\",").unwrap();
        assert_eq!(&out[..], br#"{"a":"zz","requestState":"backend","x":1}"#);
        // A writer that fails leaves no message.
        assert!(splice_with(base, span, b"\"", 6, |_| None, b"\"").is_none());
    }

    #[test]
    fn members_keep_order_and_duplicates() {
        let Members(members) = serde_json::from_str(r#"{"b":1,"a\u0062":[2],"b":{"c":3}}"#).unwrap();
        let names: Vec<&str> = members.iter().map(|(k, _)| &**k).collect();
        assert_eq!(names, ["b", "ab", "b"]);
        assert_eq!(members[2].1.get(), r#"{"c":3}"#);
        assert!(serde_json::from_str::<Members<'_>>("[1]").is_err());
    }

    #[test]
    fn strings_are_mapped_by_position_only() {
        let json =
            br#"{"taskId":"t1","text":"t1","a":["t1",{"taskId":"t\u0031","taskIds":["t1","t2"]}],"t1":"x"}"#;
        let out = map_member_strings(json, |name, position, value| {
            let id_position = matches!(
                (name, position),
                ("taskId", Position::Member) | ("taskIds", Position::Element)
            );
            (id_position && value == "t1").then(|| "H".to_owned())
        })
        .unwrap();
        assert_eq!(
            &out[..],
            br#"{"taskId":"H","text":"t1","a":["t1",{"taskId":"H","taskIds":["H","t2"]}],"t1":"x"}"#
        );
        assert!(map_member_strings(br#"{"a":"x"}"#, |_, _, _| None).is_none());
        let escaped = br#"{"k":"q\"taskId\\","taskId":"t1"}"#;
        let out = map_member_strings(escaped, |n, _, v| {
            (n == "taskId" && v == "t1").then(|| "H".into())
        });
        assert_eq!(&out.unwrap()[..], br#"{"k":"q\"taskId\\","taskId":"H"}"#);
    }
}
