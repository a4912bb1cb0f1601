//! How a lenient peer could read bytes: the oracles judge the relay by what *any* plausible
//! client or backend would see, not by what the relay itself parsed.
//!
//! A peer may accept a UTF-8 byte-order mark, invalid UTF-8, trailing bytes after the value,
//! member names in another letter case (Go's `encoding/json` folds ASCII case, `ſ` and the Kelvin
//! sign), and either of two duplicate members. [`json_readings`] returns one tree per such reading,
//! and [`Node`] keeps duplicate members. SSE is read per the WHATWG rules, plus the unterminated
//! last event, which some clients dispatch at the end of the stream ([`sse_events`]).
//!
//! ```
//! use tower_mrtr_fuzz::lenient::{fold, json_readings, Node};
//!
//! let readings = json_readings(b"\xEF\xBB\xBF{\"RequestState\":\"x\"} trailing");
//! let Some(Node::Object(members)) = readings.first() else { panic!() };
//! assert_eq!(fold(&members[0].0), "requeststate");
//! ```

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON value as a lenient reader keeps it: objects keep every member, duplicates included.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// An object's members in order.
    Object(Vec<(String, Node)>),
    /// An array.
    Array(Vec<Node>),
    /// A string, decoded.
    Str(String),
    /// A number, boolean or null, as text (numbers as serde_json reads them).
    Scalar(String),
}

impl Node {
    /// The values of every member whose folded name is `folded`.
    pub fn members<'a>(&'a self, folded: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        let members = match self {
            Node::Object(members) => members.as_slice(),
            _ => &[],
        };
        members
            .iter()
            .filter(move |(name, _)| fold(name) == folded)
            .map(|(_, value)| value)
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Every string in the tree, member names included.
    pub fn strings<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Node::Object(members) => {
                for (name, value) in members {
                    out.push(name);
                    value.strings(out);
                }
            }
            Node::Array(items) => items.iter().for_each(|item| item.strings(out)),
            Node::Str(s) => out.push(s),
            Node::Scalar(_) => {}
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
                Ok(Node::Scalar(b.to_string()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Node, E> {
                Ok(Node::Scalar(n.to_string()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Node, E> {
                Ok(Node::Scalar(n.to_string()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Node, E> {
                Ok(Node::Scalar(format!("{n:?}")))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar("null".to_owned()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Node, E> {
                Ok(Node::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Node, E> {
                Ok(Node::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut members = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, Node>()? {
                    members.push((name, value));
                }
                Ok(Node::Object(members))
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}

/// A member name as Go's `encoding/json` (v1) compares it: ASCII case folded, `ſ` as `s`, the
/// Kelvin sign as `k`.
pub fn fold(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'ſ' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Every tree a lenient reader could make of `bytes`: strict JSON, without a UTF-8 BOM, with
/// invalid UTF-8 replaced, with unpaired surrogate escapes (`\ud800`, which JSON's grammar
/// allows and many parsers accept) replaced, and in each case only the first value (trailing
/// bytes ignored), and, for a text serde_json cannot build a tree of, with the numbers and deep
/// nesting it refuses made plain ([`with_plain_scalars`]).
pub fn json_readings(bytes: &[u8]) -> Vec<Node> {
    let mut texts: Vec<Vec<u8>> = vec![bytes.to_vec()];
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        texts.push(rest.to_vec());
    }
    for i in 0..texts.len() {
        if std::str::from_utf8(&texts[i]).is_err() {
            let lossy = String::from_utf8_lossy(&texts[i]).into_owned().into_bytes();
            texts.push(lossy);
        }
    }
    for i in 0..texts.len() {
        if let Some(replaced) = without_lone_surrogates(&texts[i]) {
            texts.push(replaced);
        }
    }
    let mut readings: Vec<Node> = Vec::new();
    for text in &texts {
        // The plain-scalars text only where serde_json cannot build a tree of this one: where it
        // can, the plain tree holds the same strings or fewer, so it would add nothing.
        let reading =
            first_value(text).or_else(|| with_plain_scalars(text).and_then(|plain| first_value(&plain)));
        if let Some(node) = reading
            && !readings.contains(&node)
        {
            readings.push(node);
        }
    }
    readings
}

/// The tree of `text`, or of its first value when bytes follow it.
fn first_value(text: &[u8]) -> Option<Node> {
    serde_json::from_slice::<Node>(text).ok().or_else(|| {
        serde_json::Deserializer::from_slice(text)
            .into_iter::<Node>()
            .next()
            .and_then(Result::ok)
    })
}

/// One SSE event as a client assembles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `data:` lines joined with LF (`None` if there was no `data` field).
    pub data: Option<Vec<u8>>,
    /// Whether a blank line ended it (the last event of a stream may be unterminated).
    pub terminated: bool,
}

/// The events of an SSE stream, read per the WHATWG rules (CRLF, LF or CR line ends; a `data`
/// field's value loses one leading space), the unterminated tail included.
pub fn sse_events(stream: &[u8]) -> Vec<SseEvent> {
    let stream = stream.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(stream);
    let mut events = Vec::new();
    let mut data: Option<Vec<u8>> = None;
    let mut pending = false;
    let mut rest = stream;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r');
        let (line, next) = match end {
            Some(at) => {
                let skip = if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (&rest[..at], &rest[at + skip..])
            }
            // An unterminated last line is never processed by a conforming client, but a lenient
            // one may: it counts.
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        if line.is_empty() && end.is_some() {
            if pending {
                events.push(SseEvent {
                    data: data.take(),
                    terminated: true,
                });
            }
            data = None;
            pending = false;
            continue;
        }
        pending = true;
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &line[line.len()..]),
        };
        if field == b"data" {
            match &mut data {
                Some(joined) => {
                    joined.push(b'\n');
                    joined.extend_from_slice(value);
                }
                None => data = Some(value.to_vec()),
            }
        }
    }
    if pending {
        events.push(SseEvent {
            data,
            terminated: false,
        });
    }
    events
}

/// Every JSON string token found by a lexical scan of `bytes`, decoded: what any reader, however
/// it frames the bytes, could take for a string. Tokens that do not decode are skipped.
pub fn string_tokens(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(open) = bytes[at..].iter().position(|&b| b == b'"') {
        let start = at + open;
        let mut end = start + 1;
        let mut closed = false;
        while end < bytes.len() {
            match bytes[end] {
                b'\\' => end += 2,
                b'"' => {
                    closed = true;
                    break;
                }
                _ => end += 1,
            }
        }
        if !closed {
            break;
        }
        let token = String::from_utf8_lossy(&bytes[start..=end]);
        let decoded = serde_json::from_str::<String>(&token).ok().or_else(|| {
            let replaced = without_lone_surrogates(token.as_bytes())?;
            serde_json::from_slice::<String>(&replaced).ok()
        });
        out.extend(decoded);
        at = end + 1;
    }
    out
}

/// The members of a JSON object text, in order, duplicates kept, values raw; `None` if `text`
/// is not one object.
pub fn raw_members(text: &str) -> Option<Vec<(String, &RawValue)>> {
    struct MembersVisitor;
    impl<'de> Visitor<'de> for MembersVisitor {
        type Value = Vec<(String, &'de RawValue)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut members = Vec::new();
            while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                members.push(entry);
            }
            Ok(members)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let members = deserializer.deserialize_map(MembersVisitor).ok()?;
    deserializer.end().ok()?;
    Some(members)
}

/// `text` with every unpaired surrogate escape replaced by `\ufffd`, as a lenient parser reads
/// it; `None` if it has none.
pub fn without_lone_surrogates(text: &[u8]) -> Option<Vec<u8>> {
    let unit_at = |at: usize| -> Option<u16> {
        let hex = text.get(at..at + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut out = Vec::with_capacity(text.len());
    let mut replaced = false;
    let mut at = 0;
    while at < text.len() {
        if text[at] != b'\\' {
            out.push(text[at]);
            at += 1;
            continue;
        }
        match unit_at(at) {
            Some(0xD800..=0xDBFF) if matches!(unit_at(at + 6), Some(0xDC00..=0xDFFF)) => {
                out.extend_from_slice(&text[at..at + 12]);
                at += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(b"\\ufffd");
                replaced = true;
                at += 6;
            }
            _ => {
                // Any other escape: copied with the byte it escapes.
                out.extend_from_slice(&text[at..(at + 2).min(text.len())]);
                at += 2;
            }
        }
    }
    replaced.then_some(out)
}

/// How deep [`with_plain_scalars`] keeps containers: well below serde_json's limit of 128 that
/// [`Node`] is read under, and far deeper than any state or task id the relay seals (an
/// `input_required`'s `requestState` sits at depth 3 in a batch).
const PLAIN_DEPTH: usize = 64;

/// `text` with what serde_json refuses to build a tree of, but a lenient peer (and the relay,
/// which skips what it does not read without building it) accepts, made plain: every number
/// outside strings becomes `0` (`1e999` overflows a float: JavaScript reads `Infinity`, Python
/// `inf`), and every container nested deeper than [`PLAIN_DEPTH`] becomes `0`. `None` when
/// nothing changed.
///
/// ```
/// use tower_mrtr_fuzz::lenient::with_plain_scalars;
///
/// let tamed = with_plain_scalars(br#"{"x":-1e999,"s":"1e999","r":{}}"#).unwrap();
/// assert_eq!(tamed, br#"{"x":0,"s":"1e999","r":{}}"#);
/// ```
pub fn with_plain_scalars(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut depth = 0usize;
    let mut at = 0;
    while at < text.len() {
        let byte = text[at];
        match byte {
            b'"' => {
                let end = string_end(text, at);
                out.extend_from_slice(&text[at..end]);
                at = end;
            }
            b'-' | b'0'..=b'9' => {
                let len = text[at..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .unwrap_or(text.len() - at);
                if skips_as_json(&text[at..at + len]) {
                    out.push(b'0');
                } else {
                    out.extend_from_slice(&text[at..at + len]);
                }
                at += len;
            }
            b'[' | b'{' if depth >= PLAIN_DEPTH => {
                let end = container_end(text, at);
                if skips_as_json(&text[at..end]) {
                    out.push(b'0');
                } else {
                    out.extend_from_slice(&text[at..end]);
                }
                at = end;
            }
            b'[' | b'{' => {
                depth += 1;
                out.push(byte);
                at += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                out.push(byte);
                at += 1;
            }
            _ => {
                out.push(byte);
                at += 1;
            }
        }
    }
    (out != text).then_some(out)
}

/// Whether `value` is one JSON value as serde_json skips it without building it (as the relay
/// skips what it does not read): no float range, no depth limit. Only such values are made
/// plain, so no text the relay refuses becomes readable.
fn skips_as_json(value: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok()
}

/// The index just past the string that opens at `start` (or the end of `text`).
fn string_end(text: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while at < text.len() {
        match text[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    text.len()
}

/// The index just past the container that opens at `start` (or the end of `text`).
fn container_end(text: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut at = start;
    while at < text.len() {
        match text[at] {
            b'"' => {
                at = string_end(text, at);
                continue;
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
        at += 1;
    }
    text.len()
}
