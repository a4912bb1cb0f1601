//! Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) and the argument digest that binds
//! an envelope to the arguments of the call that minted it.
//!
//! An MRTR retry must repeat the original request's `params.arguments` (SEP-2322). Clients may
//! re-serialise them between rounds, so the binding must not depend on key order, whitespace or
//! escapes: it hashes (SHA-256) the canonical form instead of the bytes the client sent.
//!
//! The canonical form is RFC 8785 with **one stricter rule: integers above 2^53 are exact.**
//! RFC 8785 reads every number as an IEEE 754 double, so `9007199254740993` and
//! `9007199254740992` canonicalise alike there, and a confirmation given for one 64-bit id could
//! be replayed on a neighbouring one. Here:
//!
//! * an integer literal (no fraction, no exponent) above 2^53 in magnitude is written with its
//!   own digits;
//! * any other literal denotes a double; a double that is an integer above 2^53 and below 10^21
//!   is written with its exact digits (where RFC 8785 would write the shortest digits that round
//!   trip, which read back as a *different* integer);
//! * every other number is written as RFC 8785 requires: the ECMAScript form of the double
//!   ([`ryu_js`]).
//!
//! So two numbers share a canonical form only if they have the same exact value. (The converse
//! fails only at 10^21 and above, where an integer literal keeps its digits and a double gets an
//! exponent: such a retry is refused, never wrongly accepted.)
//!
//! Input that has no single meaning is refused rather than guessed at: duplicate member names
//! (parsers disagree on which one wins), strings with unpaired surrogate escapes, numbers beyond
//! the range of a double, and nesting deeper than [`MAX_DEPTH`].
//!
//! Absent `arguments`, `null` and `{}` digest alike: all three mean "no arguments".
//!
//! Why not a canonical-JSON crate: the maintained RFC 8785 crates (`serde_json_canonicalizer`,
//! `canon-json`, `serde_jcs`) canonicalise a `serde_json::Value` or any `Serialize`, and a
//! `Value` has already lost what the binding must see: it keeps the last of two members with one
//! name (so duplicates cannot be refused) and rounds integers beyond `u64` to doubles. This
//! module reads the JSON text itself, in one pass, after `serde_json` has validated it.
//!
//! # Example
//!
//! ```
//! use tower_mrtr::envelope::ArgumentsDigest;
//!
//! let a = ArgumentsDigest::of(Some(r#"{"branch":"old","repo":"acme/api"}"#)).unwrap();
//! let b = ArgumentsDigest::of(Some("{ \"repo\" : \"acme/api\",\n \"br\\u0061nch\": \"old\" }")).unwrap();
//! let c = ArgumentsDigest::of(Some(r#"{"branch":"main","repo":"acme/api"}"#)).unwrap();
//! assert_eq!(a, b); // order, spacing and escapes do not matter
//! assert_ne!(a, c); // values do
//! assert_eq!(ArgumentsDigest::of(None).unwrap(), ArgumentsDigest::of(Some("{}")).unwrap());
//! ```

use std::borrow::Cow;
use std::fmt;

use serde_json::value::RawValue;

/// Deepest nesting of objects and arrays the canonicaliser accepts.
pub const MAX_DEPTH: usize = 128;

/// Why a JSON value has no canonical form.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CanonicalError {
    /// Not valid JSON (or not valid UTF-8).
    Syntax,
    /// An object has two members of this name.
    DuplicateMember(String),
    /// A string holds an unpaired surrogate escape (`"\ud800"`), which no Unicode text can hold.
    InvalidString,
    /// A number outside the range of an IEEE 754 double.
    NumberOutOfRange,
    /// Objects and arrays nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax => f.write_str("not valid JSON"),
            Self::DuplicateMember(name) => write!(f, "duplicate member {name:?}"),
            Self::InvalidString => f.write_str("string with an unpaired surrogate"),
            Self::NumberOutOfRange => f.write_str("number out of the range of a double"),
            Self::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
        }
    }
}

impl std::error::Error for CanonicalError {}

/// The canonical form of a JSON text (see the [module docs](self)).
pub fn canonicalize(json: &str) -> Result<Vec<u8>, CanonicalError> {
    // Validated once by serde_json; the scanner below then walks text known to be one JSON value,
    // in a single pass (it still refuses, never panics, if that ever were not so).
    let raw: &RawValue = serde_json::from_str(json).map_err(|_| CanonicalError::Syntax)?;
    canonicalize_value(raw)
}

/// [`canonicalize`] of a value serde_json has validated already.
pub(crate) fn canonicalize_value(raw: &RawValue) -> Result<Vec<u8>, CanonicalError> {
    let json = raw.get();
    let mut out = Vec::with_capacity(json.len());
    let mut scanner = Scanner { text: json, pos: 0 };
    scanner.value(0, &mut out)?;
    Ok(out)
}

/// A single-pass reader of validated JSON that writes its canonical form.
struct Scanner<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.bytes().get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// The next significant byte, consumed.
    fn next(&mut self) -> Result<u8, CanonicalError> {
        self.skip_whitespace();
        let byte = *self.bytes().get(self.pos).ok_or(CanonicalError::Syntax)?;
        self.pos += 1;
        Ok(byte)
    }

    fn value(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
        self.skip_whitespace();
        match self.bytes().get(self.pos) {
            Some(b'{') => self.object(depth + 1, out),
            Some(b'[') => self.array(depth + 1, out),
            Some(b'"') => {
                let value = self.string()?;
                write_string(&value, out);
                Ok(())
            }
            Some(b't' | b'f' | b'n') => {
                // `true`, `false` and `null` have one spelling each.
                let end = self.run_end(|b| b.is_ascii_lowercase());
                out.extend_from_slice(&self.bytes()[self.pos..end]);
                self.pos = end;
                Ok(())
            }
            Some(_) => {
                let end = self.run_end(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'));
                let number = self.text.get(self.pos..end).ok_or(CanonicalError::Syntax)?;
                self.pos = end;
                write_number(number, out)
            }
            None => Err(CanonicalError::Syntax),
        }
    }

    /// Where the run of bytes matching `is_part` that starts at the current position ends.
    fn run_end(&self, is_part: impl Fn(u8) -> bool) -> usize {
        let rest = &self.bytes()[self.pos..];
        self.pos + rest.iter().position(|&b| !is_part(b)).unwrap_or(rest.len())
    }

    fn object(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(CanonicalError::TooDeep);
        }
        self.pos += 1; // '{'
        // Each member's canonical value goes into `values`; members are then written sorted.
        let mut members: Vec<Member<'a>> = Vec::new();
        let mut values = Vec::new();
        self.skip_whitespace();
        if self.bytes().get(self.pos) == Some(&b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_whitespace();
                let name = self.string()?;
                if self.next()? != b':' {
                    return Err(CanonicalError::Syntax);
                }
                let start = values.len();
                self.value(depth, &mut values)?;
                members.push(Member::new(name, start..values.len()));
                match self.next()? {
                    b',' => continue,
                    b'}' => break,
                    _ => return Err(CanonicalError::Syntax),
                }
            }
        }
        // RFC 8785 §3.2.3: members sorted by their names as arrays of UTF-16 code units.
        members.sort_by(Member::utf16_order);
        if let Some(pair) = members.windows(2).find(|pair| pair[0].name == pair[1].name) {
            return Err(CanonicalError::DuplicateMember(pair[0].name.to_string()));
        }
        out.push(b'{');
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(&member.name, out);
            out.push(b':');
            out.extend_from_slice(&values[member.value.clone()]);
        }
        out.push(b'}');
        Ok(())
    }

    fn array(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(CanonicalError::TooDeep);
        }
        self.pos += 1; // '['
        out.push(b'[');
        self.skip_whitespace();
        if self.bytes().get(self.pos) == Some(&b']') {
            self.pos += 1;
        } else {
            loop {
                self.value(depth, out)?;
                match self.next()? {
                    b',' => out.push(b','),
                    b']' => break,
                    _ => return Err(CanonicalError::Syntax),
                }
            }
        }
        out.push(b']');
        Ok(())
    }

    /// A string token at the current position, decoded (borrowed when it holds no escapes).
    fn string(&mut self) -> Result<Cow<'a, str>, CanonicalError> {
        if self.bytes().get(self.pos) != Some(&b'"') {
            return Err(CanonicalError::Syntax);
        }
        let start = self.pos + 1;
        let mut end = start;
        let mut escaped = false;
        loop {
            end += memchr::memchr2(
                b'"',
                b'\\',
                self.bytes().get(end..).ok_or(CanonicalError::Syntax)?,
            )
            .ok_or(CanonicalError::Syntax)?;
            if self.bytes()[end] == b'"' {
                break;
            }
            escaped = true;
            end += 2; // the backslash and the byte it escapes
        }
        self.pos = end + 1;
        let raw = self.text.get(start..end).ok_or(CanonicalError::Syntax)?;
        if escaped {
            unescape(raw).map(Cow::Owned)
        } else {
            Ok(Cow::Borrowed(raw))
        }
    }
}

/// Decodes the escapes of a string's contents; an unpaired surrogate has no Unicode meaning.
fn unescape(raw: &str) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next().ok_or(CanonicalError::Syntax)? {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let unit = hex4(&mut chars)?;
                match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by an escaped low one.
                        if chars.next() != Some('\\') || chars.next() != Some('u') {
                            return Err(CanonicalError::InvalidString);
                        }
                        let low = hex4(&mut chars)?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(CanonicalError::InvalidString);
                        }
                        let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        char::from_u32(code).ok_or(CanonicalError::InvalidString)?
                    }
                    0xDC00..=0xDFFF => return Err(CanonicalError::InvalidString),
                    _ => char::from_u32(unit).ok_or(CanonicalError::InvalidString)?,
                }
            }
            _ => return Err(CanonicalError::Syntax),
        };
        out.push(decoded);
    }
    Ok(out)
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Result<u32, CanonicalError> {
    let mut unit = 0;
    for _ in 0..4 {
        let digit = chars
            .next()
            .and_then(|c| c.to_digit(16))
            .ok_or(CanonicalError::Syntax)?;
        unit = unit * 16 + digit;
    }
    Ok(unit)
}

/// An object member being canonicalised: its decoded name and where its canonical value sits.
struct Member<'a> {
    name: Cow<'a, str>,
    /// The name has characters outside the Basic Multilingual Plane (4-byte UTF-8 sequences).
    astral: bool,
    value: std::ops::Range<usize>,
}

impl<'a> Member<'a> {
    fn new(name: Cow<'a, str>, value: std::ops::Range<usize>) -> Self {
        let astral = name.bytes().any(|byte| byte >= 0xF0);
        Self { name, astral, value }
    }

    /// Compares names as arrays of UTF-16 code units. Without characters outside the Basic
    /// Multilingual Plane that is the order of their UTF-8 bytes, which is cheaper to compare.
    fn utf16_order(a: &Self, b: &Self) -> std::cmp::Ordering {
        if a.astral || b.astral {
            a.name.encode_utf16().cmp(b.name.encode_utf16())
        } else {
            a.name.as_bytes().cmp(b.name.as_bytes())
        }
    }
}

/// RFC 8785 §3.2.2.2: only `"`, `\` and control characters are escaped, with the short forms
/// where JSON has them and lowercase `\u00xx` otherwise; everything else is written as UTF-8.
fn write_string(value: &str, out: &mut Vec<u8>) {
    let bytes = value.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut plain_from = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&bytes[plain_from..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
                plain_from = i + 1;
                continue;
            }
            _ => continue,
        };
        // Runs of bytes that need no escape are copied whole.
        out.extend_from_slice(&bytes[plain_from..i]);
        out.extend_from_slice(escape);
        plain_from = i + 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// 2^53: above it, not every integer is a double.
const EXACT_INTEGER_LIMIT: u64 = 1 << 53;

/// Where ECMAScript switches to exponent notation.
const EXPONENT_FROM: f64 = 1e21;

fn write_number(text: &str, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    let integer_literal = !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
    if integer_literal {
        let digits = text.strip_prefix('-').unwrap_or(text);
        // JSON integers have no leading zeros, so up to 15 digits is below 2^53 and written as
        // ECMAScript would (only -0 differs); more than 16 digits is above 2^53 (16 digits).
        if digits.len() <= 15 {
            out.extend_from_slice(if digits == "0" { b"0" } else { text.as_bytes() });
            return Ok(());
        }
        if digits.len() > 16 || digits.parse::<u64>().map_or(true, |v| v > EXACT_INTEGER_LIMIT) {
            out.extend_from_slice(text.as_bytes());
            return Ok(());
        }
    }
    let value: f64 = text.parse().map_err(|_| CanonicalError::Syntax)?;
    if !value.is_finite() {
        return Err(CanonicalError::NumberOutOfRange);
    }
    let magnitude = value.abs();
    if magnitude > EXACT_INTEGER_LIMIT as f64 && magnitude < EXPONENT_FROM {
        // Every double above 2^53 is an integer, and below 10^21 it fits a u128 exactly.
        if value < 0.0 {
            out.push(b'-');
        }
        out.extend_from_slice((magnitude as u128).to_string().as_bytes());
        return Ok(());
    }
    let mut buffer = ryu_js::Buffer::new();
    // ECMAScript writes -0 as "0", as RFC 8785 requires.
    out.extend_from_slice(buffer.format_finite(value).as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    fn canon(json: &str) -> String {
        String::from_utf8(canonicalize(json).unwrap()).unwrap()
    }

    #[test]
    fn numbers_follow_rfc_8785() {
        // RFC 8785 Appendix B and §3.2.2.3, as ECMAScript writes them.
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("1.0", "1"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("1E30", "1e+30"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("0.000001", "0.000001"),
            ("1e-7", "1e-7"),
            ("333333333.33333329", "333333333.3333333"),
            ("9007199254740992", "9007199254740992"),
            ("-9007199254740992", "-9007199254740992"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ];
        for (input, expected) in cases {
            assert_eq!(canon(input), expected, "{input}");
        }
    }

    #[test]
    fn integers_beyond_2_pow_53_keep_their_digits() {
        assert_eq!(canon("9007199254740993"), "9007199254740993");
        assert_eq!(canon("-9007199254740993"), "-9007199254740993");
        assert_eq!(canon("18446744073709551617"), "18446744073709551617");
        assert_ne!(canon("9007199254740993"), canon("9007199254740992"));
        // In float notation the value is a double, written with the double's exact digits: the
        // shortest round-trip digits ("1152921504606847000") would read back as another integer.
        assert_eq!(canon("9007199254740993.0"), "9007199254740992");
        assert_eq!(canon("1152921504606846976.0"), "1152921504606846976");
        assert_eq!(canon("1152921504606846976"), "1152921504606846976");
        assert_ne!(canon("1152921504606847000.0"), canon("1152921504606847000"));
        assert_eq!(canon("-1.5e20"), "-150000000000000000000");
    }

    #[test]
    fn strings_and_names_are_written_once_one_way() {
        assert_eq!(
            canon(r#""\u0041\/\u00e9\u2028\ud83d\ude00\u001f\t\"\\""#),
            "\"A/é\u{2028}😀\\u001f\\t\\\"\\\\\""
        );
        // Names sort by UTF-16 code units: U+FB33 (one unit) after U+1F600 (a surrogate pair).
        assert_eq!(
            canon(r#"{"\ufb33":1,"😀":2,"a":3,"A":4,"":5}"#),
            r#"{"":5,"A":4,"a":3,"😀":2,"דּ":1}"#
        );
        assert_eq!(
            canon(" [ 1 , { \"b\" : null , \"a\" : true } ] "),
            r#"[1,{"a":true,"b":null}]"#
        );
    }

    #[test]
    fn ambiguous_input_is_refused() {
        assert_eq!(
            canonicalize(r#"{"a":1,"b":{"k":1,"k":2}}"#),
            Err(CanonicalError::DuplicateMember("k".into()))
        );
        assert_eq!(
            canonicalize(r#"{"k":1,"\u006b":2}"#),
            Err(CanonicalError::DuplicateMember("k".into()))
        );
        assert_eq!(canonicalize(r#""\ud800""#), Err(CanonicalError::InvalidString));
        assert_eq!(canonicalize("1e400"), Err(CanonicalError::NumberOutOfRange));
        assert_eq!(canonicalize("{"), Err(CanonicalError::Syntax));
        assert_eq!(canonicalize("[] x"), Err(CanonicalError::Syntax));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(canonicalize(&deep), Err(CanonicalError::TooDeep));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(canonicalize(&ok).is_ok());
    }

    /// JSON values without duplicate names, with numbers of every kind.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
            "[\\x00-\\x1f\"\\\\a-z]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any text: a canonical form or an error, never a panic.
        #[test]
        fn any_text_is_canonicalised_or_refused(text in "[\\[\\]{}\",:0-9a-z\\\\ .eE+-]{0,64}") {
            let _ = canonicalize(&text);
        }

        /// Re-serialising a value (compact or pretty, any member order serde_json picks) never
        /// changes its canonical form, and the canonical form is a fixpoint that means the same.
        #[test]
        fn reserialising_keeps_the_canonical_form(value in json_value()) {
            let compact = serde_json::to_string(&value).unwrap();
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            let canonical = canonicalize(&compact).unwrap();
            prop_assert_eq!(&canonicalize(&pretty).unwrap(), &canonical);
            let text = std::str::from_utf8(&canonical).unwrap();
            prop_assert_eq!(&canonicalize(text).unwrap(), &canonical);
            let reparsed: Value = serde_json::from_str(text).unwrap();
            prop_assert!(same_meaning(&reparsed, &value), "{} vs {}", reparsed, value);
        }

        /// Different values (as doubles and strings compare) never share a canonical form.
        #[test]
        fn different_values_differ(a in json_value(), b in json_value()) {
            prop_assume!(!same_meaning(&a, &b));
            let ca = canonicalize(&serde_json::to_string(&a).unwrap()).unwrap();
            let cb = canonicalize(&serde_json::to_string(&b).unwrap()).unwrap();
            prop_assert_ne!(ca, cb);
        }
    }

    /// Equality of exact values: what sharing a canonical form must mean.
    fn same_meaning(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => same_number(x, y),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_meaning(a, b))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| same_meaning(v, w)))
            }
            _ => a == b,
        }
    }

    fn same_number(x: &serde_json::Number, y: &serde_json::Number) -> bool {
        let int = |n: &serde_json::Number| n.as_u64().map(i128::from).or(n.as_i64().map(i128::from));
        let int_is_float = |i: i128, f: f64| f.fract() == 0.0 && f.abs() < 1e38 && f as i128 == i;
        match (int(x), int(y)) {
            (Some(i), Some(j)) => i == j,
            (Some(i), None) => int_is_float(i, y.as_f64().unwrap()),
            (None, Some(j)) => int_is_float(j, x.as_f64().unwrap()),
            (None, None) => x.as_f64() == y.as_f64(),
        }
    }
}
