//! Canonical JSON and the argument digest that binds an envelope to the arguments of the call
//! that minted it.
//!
//! An MRTR retry must repeat the original request's `params.arguments` (SEP-2322). Clients may
//! re-serialise them between rounds, so the binding must not depend on key order, whitespace or
//! escapes: it hashes (SHA-256) the canonical form instead of the bytes the client sent.
//!
//! The canonical form ([`canonicalize`], envelope format v3) is RFC 8785, the JSON
//! Canonicalization Scheme, for objects, arrays, strings and literals, with **numbers written by
//! their exact decimal value**: a sign, the significant digits without leading or trailing zeros,
//! and the exponent that remains (`docs/envelope.md` specifies it byte by byte). So `100`, `100.0`,
//! `1e2` and `1.00E+2` are all `1e2`, `-0` is `0`, and `9007199254740993.0` is
//! `9007199254740993`, not `9007199254740992`. RFC 8785 reads every number as an IEEE 754
//! double, which merges different values: a backend that reads exact decimals (Python's
//! `json.loads(parse_float=Decimal)`, Go's `json.Number`, Jackson's `BigDecimal`) would then act
//! on a value the envelope was not minted for. Here two numbers share a canonical form **if and
//! only if their exact decimal values are equal**, and the form of a literal is never more than
//! 21 bytes longer than the literal, whatever its exponent.
//!
//! A number whose exponent (in `± digits × 10^exponent`, trailing zeros removed from the digits)
//! is beyond ±[`MAX_EXPONENT`] is refused ([`CanonicalError::ExponentOutOfRange`]): it has a
//! value, but no backend that reads exact decimals reads it (CPython's `decimal` refuses such
//! literals, Java's `BigDecimal` refuses exponents beyond 32 bits), and the bound keeps every
//! exponent within an `i64`. Zero has no exponent to bound: `0e99999999999999999999` is `0`.
//!
//! Input that has no single meaning is refused rather than guessed at: duplicate member names
//! (parsers disagree on which one wins), strings with unpaired surrogate escapes, and nesting
//! deeper than [`MAX_DEPTH`].
//!
//! Absent `arguments`, `null` and `{}` digest alike: all three mean "no arguments".
//!
//! # The form of envelope format v2
//!
//! [`canonicalize_doubles`] is the canonical form of format v2, kept only so that v2 envelopes
//! still open during an upgrade (it goes with v2 opening): numbers read as doubles, as RFC 8785
//! says, except that an integer literal above 2^53 keeps its own digits and an integral double
//! above 2^53 and below 10^21 is written with its exact digits. It merges different decimal
//! values (`100.000000000000001` and `100`) and refuses numbers beyond the range of a double
//! ([`CanonicalError::NumberOutOfRange`]).
//!
//! Why not a canonical-JSON crate: the maintained RFC 8785 crates (`serde_json_canonicalizer`,
//! `canon-json`, `serde_jcs`) canonicalise a `serde_json::Value` or any `Serialize`, and a
//! `Value` has already lost what the binding must see: it keeps the last of two members with one
//! name (so duplicates cannot be refused) and rounds numbers to doubles. This module reads the
//! JSON text itself, in one pass, after `serde_json` has validated it.
//!
//! # Example
//!
//! ```
//! use tower_mrtr::canonical::canonicalize;
//! use tower_mrtr::envelope::ArgumentsDigest;
//!
//! let a = ArgumentsDigest::of(Some(r#"{"branch":"old","repo":"acme/api"}"#)).unwrap();
//! let b = ArgumentsDigest::of(Some("{ \"repo\" : \"acme/api\",\n \"br\\u0061nch\": \"old\" }")).unwrap();
//! let c = ArgumentsDigest::of(Some(r#"{"branch":"main","repo":"acme/api"}"#)).unwrap();
//! assert_eq!(a, b); // order, spacing and escapes do not matter
//! assert_ne!(a, c); // values do
//! assert_eq!(ArgumentsDigest::of(None).unwrap(), ArgumentsDigest::of(Some("{}")).unwrap());
//!
//! // Numbers by their exact decimal value: equal values, one form; different values, two.
//! let form = |json: &str| String::from_utf8(canonicalize(json).unwrap()).unwrap();
//! assert_eq!(form("[100, 100.0, 1e2, 1.00E+2, -0, 1.50]"), "[1e2,1e2,1e2,1e2,0,15e-1]");
//! assert_ne!(form("9007199254740993.0"), form("9007199254740992"));
//! assert_ne!(form("100.000000000000001"), form("100"));
//! assert_eq!(form("1e999999999999"), "1e999999999999"); // no expansion of the exponent
//! ```

use std::borrow::Cow;
use std::fmt;

use serde_json::value::RawValue;
use smallvec::SmallVec;

/// Deepest nesting of objects and arrays the canonicaliser accepts.
pub const MAX_DEPTH: usize = 128;

/// Largest magnitude of the exponent of a number in the canonical form ([`canonicalize`]):
/// `10^18 − 1`. See the [module docs](self).
pub const MAX_EXPONENT: i64 = 999_999_999_999_999_999;

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
    /// A number outside the range of an IEEE 754 double ([`canonicalize_doubles`] only, the
    /// form of envelope format v2).
    NumberOutOfRange,
    /// A number whose exponent is beyond ±[`MAX_EXPONENT`] ([`canonicalize`]).
    ExponentOutOfRange,
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
            Self::ExponentOutOfRange => write!(f, "number with an exponent beyond ±{MAX_EXPONENT}"),
            Self::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
        }
    }
}

impl std::error::Error for CanonicalError {}

/// The canonical form of a JSON text, numbers by their exact decimal value (envelope format v3;
/// see the [module docs](self)).
pub fn canonicalize(json: &str) -> Result<Vec<u8>, CanonicalError> {
    canonicalize_value(validated(json)?)
}

/// The canonical form of envelope format v2: numbers read as doubles (see
/// [the module docs](self#the-form-of-envelope-format-v2)). Only for opening v2 envelopes.
pub fn canonicalize_doubles(json: &str) -> Result<Vec<u8>, CanonicalError> {
    canonicalize_value_doubles(validated(json)?)
}

/// Validated once by serde_json; the scanner then walks text known to be one JSON value, in a
/// single pass (it still refuses, never panics, if that ever were not so).
fn validated(json: &str) -> Result<&str, CanonicalError> {
    serde_json::from_str::<&RawValue>(json)
        .map(RawValue::get)
        .map_err(|_| CanonicalError::Syntax)
}

/// [`canonicalize`] of a value the layer has checked already (one JSON value).
pub(crate) fn canonicalize_value(json: &str) -> Result<Vec<u8>, CanonicalError> {
    scan(json, Numbers::ExactDecimal)
}

/// [`canonicalize_doubles`] of a value the layer has checked already (one JSON value).
pub(crate) fn canonicalize_value_doubles(json: &str) -> Result<Vec<u8>, CanonicalError> {
    scan(json, Numbers::Doubles)
}

fn scan(json: &str, numbers: Numbers) -> Result<Vec<u8>, CanonicalError> {
    // Room for an object's values and its sorted members side by side (`Scanner::object`).
    let mut out = Vec::with_capacity(2 * json.len());
    let mut scanner = Scanner {
        text: json,
        pos: 0,
        numbers,
    };
    scanner.value(0, &mut out)?;
    Ok(out)
}

/// How numbers are written: the only difference between the forms of v3 and v2.
#[derive(Clone, Copy)]
enum Numbers {
    /// By exact decimal value (v3).
    ExactDecimal,
    /// As doubles, large integers exact (v2).
    Doubles,
}

/// A single-pass reader of validated JSON that writes its canonical form.
struct Scanner<'a> {
    text: &'a str,
    pos: usize,
    numbers: Numbers,
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
                match self.numbers {
                    Numbers::ExactDecimal => write_exact_number(number, out),
                    Numbers::Doubles => write_double_number(number, out),
                }
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
        // Each member's canonical value is written at the end of `out` as it is read; the members
        // are then written sorted after those values and moved down over them. `out` is the one
        // buffer of the whole scan (nested objects do the same above this one's values), and
        // the usual object's members stay on the stack.
        let mut members: SmallVec<[Member<'a>; 8]> = SmallVec::new();
        let start = out.len();
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
                let from = out.len();
                self.value(depth, out)?;
                members.push(Member::new(name, from..out.len()));
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
        let values_end = out.len();
        out.push(b'{');
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(&member.name, out);
            out.push(b':');
            out.extend_from_within(member.value.clone());
        }
        out.push(b'}');
        out.copy_within(values_end.., start);
        out.truncate(out.len() - (values_end - start));
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

/// Writes a number literal by its exact decimal value: `0` for zero (of either sign), otherwise
/// `[-]D[e[-]E]` with value `± D × 10^E`, where `D` is the literal's significant digits (integer
/// and fraction digits together, leading and trailing zeros removed) and `E` is omitted when 0.
/// Linear in the literal's length: `D` is a part of its digits, and `e-E` at most 21 bytes.
fn write_exact_number(text: &str, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    // The usual argument, an integer that neither starts nor ends with a zero, is its own
    // canonical form (`D` is its digits, `E` is 0): copied without the general path's work.
    let digits = text.strip_prefix('-').unwrap_or(text).as_bytes();
    if let (Some(b'1'..=b'9'), Some(b'1'..=b'9')) = (digits.first(), digits.last())
        && digits.iter().all(u8::is_ascii_digit)
    {
        out.extend_from_slice(text.as_bytes());
        return Ok(());
    }
    let Literal {
        negative,
        int,
        frac,
        exponent,
    } = Literal::split(text.as_bytes()).ok_or(CanonicalError::Syntax)?;
    let digit = |i: usize| {
        if i < int.len() {
            int[i]
        } else {
            frac[i - int.len()]
        }
    };
    let len = int.len() + frac.len();
    let Some(first) = (0..len).find(|&i| digit(i) != b'0') else {
        // Zero, whatever its sign and exponent.
        out.push(b'0');
        return Ok(());
    };
    // Some digit is not zero, so a last one is too.
    let last = (first..len).rev().find(|&i| digit(i) != b'0').unwrap_or(first);
    let trailing_zeros = len - 1 - last;
    let exponent = exact_exponent(exponent, frac.len(), trailing_zeros)?;
    if negative {
        out.push(b'-');
    }
    // The significant digits, copied from the integer part and the fraction.
    let (int_from, int_to) = (first.min(int.len()), (last + 1).min(int.len()));
    out.extend_from_slice(&int[int_from..int_to]);
    let (frac_from, frac_to) = (
        first.max(int.len()) - int.len(),
        (last + 1).max(int.len()) - int.len(),
    );
    out.extend_from_slice(&frac[frac_from..frac_to]);
    if exponent != 0 {
        out.push(b'e');
        out.extend_from_slice(exponent.to_string().as_bytes());
    }
    Ok(())
}

/// The exponent `E` of `± D × 10^E`: the literal's exponent, less one per fraction digit, plus
/// one per trailing zero removed from the digits; refused beyond ±[`MAX_EXPONENT`]. Computed in
/// `i128` from at most 20 exponent digits, so nothing can overflow.
fn exact_exponent(
    exponent: Option<(bool, &[u8])>,
    frac_digits: usize,
    trailing_zeros: usize,
) -> Result<i64, CanonicalError> {
    let literal: i128 = match exponent {
        None => 0,
        Some((negative, digits)) => {
            let first = digits.iter().position(|&d| d != b'0').unwrap_or(digits.len());
            let significant = &digits[first..];
            // 10^20 and beyond: the adjustments below (each less than 2^64 < 1.9 * 10^19)
            // cannot bring it back within 10^18.
            if significant.len() > 20 {
                return Err(CanonicalError::ExponentOutOfRange);
            }
            let magnitude = significant
                .iter()
                .fold(0i128, |value, &d| value * 10 + i128::from(d - b'0'));
            if negative { -magnitude } else { magnitude }
        }
    };
    let exponent = literal - frac_digits as i128 + trailing_zeros as i128;
    i64::try_from(exponent)
        .ok()
        .filter(|e| e.abs() <= MAX_EXPONENT)
        .ok_or(CanonicalError::ExponentOutOfRange)
}

/// The parts of a JSON number literal: `-? int (. frac)? ([eE] [+-]? digits)?`.
struct Literal<'a> {
    negative: bool,
    int: &'a [u8],
    frac: &'a [u8],
    /// Whether the exponent is negative, and its digits.
    exponent: Option<(bool, &'a [u8])>,
}

impl<'a> Literal<'a> {
    /// The parts of `text`, or `None` if it is not exactly one JSON number literal.
    fn split(text: &'a [u8]) -> Option<Self> {
        fn digits(text: &[u8]) -> (&[u8], &[u8]) {
            text.split_at(text.iter().take_while(|b| b.is_ascii_digit()).count())
        }
        let (negative, rest) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        let (int, rest) = digits(rest);
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return None;
        }
        let (frac, rest) = match rest.split_first() {
            Some((b'.', after)) => {
                let (frac, rest) = digits(after);
                if frac.is_empty() {
                    return None;
                }
                (frac, rest)
            }
            _ => (&rest[..0], rest),
        };
        let (exponent, rest) = match rest.split_first() {
            Some((b'e' | b'E', after)) => {
                let (negative, after) = match after.split_first() {
                    Some((b'-', after)) => (true, after),
                    Some((b'+', after)) => (false, after),
                    _ => (false, after),
                };
                let (exponent, rest) = digits(after);
                if exponent.is_empty() {
                    return None;
                }
                (Some((negative, exponent)), rest)
            }
            _ => (None, rest),
        };
        rest.is_empty().then_some(Self {
            negative,
            int,
            frac,
            exponent,
        })
    }
}

/// 2^53: above it, not every integer is a double.
const EXACT_INTEGER_LIMIT: u64 = 1 << 53;

/// Where ECMAScript switches to exponent notation.
const EXPONENT_FROM: f64 = 1e21;

/// Writes a number as the form of envelope format v2 does ([`canonicalize_doubles`]).
fn write_double_number(text: &str, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
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

    /// The form of envelope format v2.
    fn doubles(json: &str) -> String {
        String::from_utf8(canonicalize_doubles(json).unwrap()).unwrap()
    }

    #[test]
    fn numbers_are_written_by_their_exact_decimal_value() {
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0.000e-5", "0"),
            ("0e99999999999999999999999999", "0"),
            ("7", "7"),
            ("-7", "-7"),
            ("1.0", "1"),
            ("100", "1e2"),
            ("100.0", "1e2"),
            ("1e2", "1e2"),
            ("1.00E+2", "1e2"),
            ("10e1", "1e2"),
            ("0.1e3", "1e2"),
            ("120", "12e1"),
            ("4.50", "45e-1"),
            ("-0.05", "-5e-2"),
            ("2e-3", "2e-3"),
            ("1e-7", "1e-7"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740993"),
            ("9007199254740993.0", "9007199254740993"),
            ("9.007199254740992e15", "9007199254740992"),
            ("-9007199254740993.000", "-9007199254740993"),
            ("100.000000000000001", "100000000000000001e-15"),
            ("1e22", "1e22"),
            ("1.0000000000000001e22", "10000000000000001e6"),
            ("18446744073709551617", "18446744073709551617"),
            ("1e400", "1e400"),
            ("-2.5e-400", "-25e-401"),
            ("123456789.123456789e-3", "123456789123456789e-12"),
        ];
        for (input, expected) in cases {
            assert_eq!(canon(input), expected, "{input}");
            assert_eq!(canon(expected), expected, "{expected} is not a fixpoint");
        }
        // The three confusions of the review: each pair is two values, so two forms.
        for (a, b) in [
            ("9007199254740992", "9007199254740993.0"),
            ("100", "100.000000000000001"),
            ("1e22", "1.0000000000000001e22"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} vs {b}");
            assert_eq!(
                doubles(a),
                doubles(b),
                "v2 merged {a} and {b}, which is why v3 exists"
            );
        }
    }

    /// Integers take a shortcut when they neither start nor end with a zero; every integer,
    /// either way, is its digits with trailing zeros moved into the exponent.
    #[test]
    fn integers_with_and_without_the_shortcut_agree() {
        let expected = |n: i128| {
            let digits = n.unsigned_abs().to_string();
            let kept = digits.trim_end_matches('0');
            let sign = if n < 0 { "-" } else { "" };
            match digits.len() - kept.len() {
                0 => format!("{sign}{digits}"),
                zeros => format!("{sign}{kept}e{zeros}"),
            }
        };
        let big = [
            9_007_199_254_740_993,
            18_446_744_073_709_551_617,
            10_000_000_000_000_000_000_001,
            170_141_183_460_469_231_731_687_303_715_884_105_727,
        ];
        for n in (1..=2100).chain(big).flat_map(|n: i128| [n, -n]) {
            assert_eq!(canon(&n.to_string()), expected(n), "{n}");
        }
    }

    #[test]
    fn exponents_are_bounded_never_expanded_and_never_overflow() {
        let max = MAX_EXPONENT.to_string();
        assert_eq!(canon(&format!("1e{max}")), format!("1e{max}"));
        assert_eq!(canon(&format!("-1e-{max}")), format!("-1e-{max}"));
        // The bound is on the value's exponent, not the literal's.
        assert_eq!(canon("0.1e1000000000000000000"), format!("1e{max}"));
        assert_eq!(canon("10e-1000000000000000000"), format!("1e-{max}"));
        assert_eq!(
            canon("0.00000000000000000001e1000000000000000019"),
            format!("1e{max}")
        );
        for refused in [
            "1e1000000000000000000",
            "-1e-1000000000000000000",
            "10e999999999999999999",
            "1e9223372036854775807",
            "1e9223372036854775808",
            "1e-9223372036854775809",
            "1e99999999999999999999999999999999999999999999",
            "1e00000000000000000000000000000001000000000000000000",
        ] {
            assert_eq!(
                canonicalize(refused),
                Err(CanonicalError::ExponentOutOfRange),
                "{refused}"
            );
        }
        // Long literals: the form is never more than 21 bytes longer.
        let long = [
            format!("0.{}1", "0".repeat(100_000)),
            format!("1{}", "0".repeat(100_000)),
            format!("-{}.{}e-999999999999999", "9".repeat(50_000), "1".repeat(50_000)),
            format!("1.{}e1", "5".repeat(100_000)),
        ];
        for literal in long {
            let form = canon(&literal);
            assert!(
                form.len() <= literal.len() + 21,
                "{} -> {}",
                literal.len(),
                form.len()
            );
            assert_eq!(canon(&form), form);
        }
        assert_eq!(canon(&format!("0.{}1", "0".repeat(100_000))), "1e-100001");
        assert_eq!(canon(&format!("1{}", "0".repeat(100_000))), "1e100000");
    }

    #[test]
    fn v2_numbers_follow_rfc_8785() {
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
            assert_eq!(doubles(input), expected, "{input}");
        }
    }

    #[test]
    fn v2_integers_beyond_2_pow_53_keep_their_digits() {
        assert_eq!(doubles("9007199254740993"), "9007199254740993");
        assert_eq!(doubles("-9007199254740993"), "-9007199254740993");
        assert_eq!(doubles("18446744073709551617"), "18446744073709551617");
        assert_ne!(doubles("9007199254740993"), doubles("9007199254740992"));
        // In float notation the value is a double, written with the double's exact digits: the
        // shortest round-trip digits ("1152921504606847000") would read back as another integer.
        assert_eq!(doubles("9007199254740993.0"), "9007199254740992");
        assert_eq!(doubles("1152921504606846976.0"), "1152921504606846976");
        assert_eq!(doubles("1152921504606846976"), "1152921504606846976");
        assert_ne!(doubles("1152921504606847000.0"), doubles("1152921504606847000"));
        assert_eq!(doubles("-1.5e20"), "-150000000000000000000");
    }

    #[test]
    fn strings_and_names_are_written_once_one_way() {
        assert_eq!(
            canon(r#""\u0041\/\u00e9\u2028\ud83d\ude00\u001f\t\"\\""#),
            "\"A/é\u{2028}😀\\u001f\\t\\\"\\\\\""
        );
        // Strings, names and structure are the same in both forms.
        let text = r#"{"\ufb33":[true,null,"x\n"],"a":{"b":{}}}"#;
        assert_eq!(canon(text), doubles(text));
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
        assert_eq!(
            canonicalize_doubles("1e400"),
            Err(CanonicalError::NumberOutOfRange)
        );
        assert_eq!(
            canonicalize_doubles(r#"{"k":1,"k":2}"#),
            Err(CanonicalError::DuplicateMember("k".into()))
        );
        assert_eq!(canonicalize("{"), Err(CanonicalError::Syntax));
        assert_eq!(canonicalize("[] x"), Err(CanonicalError::Syntax));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(canonicalize(&deep), Err(CanonicalError::TooDeep));
        assert_eq!(canonicalize_doubles(&deep), Err(CanonicalError::TooDeep));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(canonicalize(&ok).is_ok());
    }

    /// A number literal of the value `± digits × 10^exponent` (digits without leading zeros),
    /// spelled one of many ways: extra trailing zeros, the point anywhere, any exponent style.
    fn spell(negative: bool, digits: &str, exponent: i64, choice: u64) -> String {
        let zeros = (choice % 3) as usize;
        let digits = format!("{digits}{}", "0".repeat(zeros));
        let exponent = exponent - zeros as i64;
        let point = (choice / 3) as usize % (digits.len() + 1);
        let (int, frac) = digits.split_at(point);
        let int = if int.is_empty() { "0" } else { int };
        let literal_exponent = exponent + frac.len() as i64;
        let mut out = String::new();
        if negative {
            out.push('-');
        }
        out.push_str(int);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        match (choice / 64) % 4 {
            0 if literal_exponent == 0 => {}
            0 | 1 => out.push_str(&format!("e{literal_exponent}")),
            2 => out.push_str(&format!("E{literal_exponent:+}")),
            _ => out.push_str(&format!(
                "e{}{:03}",
                if literal_exponent < 0 { "-" } else { "" },
                literal_exponent.abs()
            )),
        }
        out
    }

    /// The value of a literal, exactly, by an implementation of arbitrary-precision decimals
    /// that shares nothing with this module.
    fn exact(literal: &str) -> bigdecimal::BigDecimal {
        literal.parse().unwrap()
    }

    /// A value: sign, up to 30 significant digits (no leading zero), a moderate exponent (the
    /// reference compares by rescaling, which is only cheap for close exponents).
    fn decimal_value() -> impl Strategy<Value = (bool, String, i64)> {
        (any::<bool>(), "[1-9][0-9]{0,29}", -40i64..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Two literals share a canonical form if and only if their exact decimal values are
        /// equal: spellings of one value, of a neighbouring value (a digit or the exponent one
        /// off) and of an unrelated value, against an arbitrary-precision reference.
        #[test]
        fn equal_decimal_values_iff_equal_forms(
            (negative, digits, exponent) in decimal_value(),
            other in decimal_value(),
            choices in any::<(u64, u64)>(),
            relation in 0u8..5,
        ) {
            let a = spell(negative, &digits, exponent, choices.0);
            let b = match relation {
                0 | 1 => spell(negative, &digits, exponent, choices.1),
                2 => {
                    let mut bumped: Vec<u8> = digits.clone().into_bytes();
                    let last = bumped.len() - 1;
                    bumped[last] = if bumped[last] == b'9' { b'8' } else { bumped[last] + 1 };
                    spell(negative, std::str::from_utf8(&bumped).unwrap(), exponent, choices.1)
                }
                3 => spell(negative, &digits, exponent + 1, choices.1),
                _ => spell(other.0, &other.1, other.2, choices.1),
            };
            let (form_a, form_b) = (canon(&a), canon(&b));
            prop_assert_eq!(
                form_a == form_b,
                exact(&a) == exact(&b),
                "{} -> {}, {} -> {}", a, form_a, b, form_b
            );
            // The form means the literal's value, and is a fixpoint.
            prop_assert_eq!(exact(&form_a), exact(&a), "{} -> {}", a, form_a);
            prop_assert_eq!(canon(&form_a), form_a.clone());
            prop_assert!(form_a.len() <= a.len() + 21);
        }

        /// Zero in every spelling is one form, and never equal to a value that is not zero.
        #[test]
        fn every_zero_is_one_form(
            negative in any::<bool>(),
            fraction in "(\\.0{1,5})?",
            exponent in "([eE][+-]?[0-9]{1,30})?",
        ) {
            let zero = format!("{}0{fraction}{exponent}", if negative { "-" } else { "" });
            prop_assert_eq!(canon(&zero), "0");
        }

        /// Any literal the JSON grammar allows, long or short: a form or a refusal, never a panic,
        /// and a form only for values whose exponent is within the bound.
        #[test]
        fn any_number_literal_is_written_or_refused(
            literal in "-?(0|[1-9][0-9]{0,40})(\\.[0-9]{1,40})?([eE][+-]?[0-9]{1,25})?",
        ) {
            match canonicalize(&literal) {
                Ok(form) => prop_assert!(form.len() <= literal.len() + 21),
                Err(error) => prop_assert_eq!(error, CanonicalError::ExponentOutOfRange, "{}", literal),
            }
        }
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
            let _ = canonicalize_doubles(&text);
        }

        /// Re-serialising a value (compact or pretty, any member order serde_json picks) never
        /// changes its canonical form, and the canonical form is a fixpoint that means the same.
        #[test]
        fn reserialising_keeps_the_canonical_form(value in json_value()) {
            let compact = serde_json::to_string(&value).unwrap();
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            for form in [canonicalize, canonicalize_doubles] {
                let canonical = form(&compact).unwrap();
                prop_assert_eq!(&form(&pretty).unwrap(), &canonical);
                let text = std::str::from_utf8(&canonical).unwrap();
                prop_assert_eq!(&form(text).unwrap(), &canonical);
            }
            // v2: the form read back (numbers as doubles, as the form reads them) is the value.
            let canonical = canonicalize_doubles(&compact).unwrap();
            let reparsed: Value = serde_json::from_slice(&canonical).unwrap();
            prop_assert!(same_meaning(&reparsed, &value), "{} vs {}", reparsed, value);
            // v3: the same structure and strings, and every number the same exact decimal value
            // (read as doubles, `37644950673377202e1` would not be the integer it is).
            let canonical = String::from_utf8(canonicalize(&compact).unwrap()).unwrap();
            let reparsed: Value = serde_json::from_str(&canonical).unwrap();
            prop_assert!(same_shape(&reparsed, &value), "{} vs {}", reparsed, value);
            let mut expected = Vec::new();
            numbers_in_canonical_order(&value, &mut expected);
            let written = number_tokens(&canonical);
            prop_assert_eq!(written.len(), expected.len());
            for (form, number) in written.iter().zip(&expected) {
                prop_assert_eq!(exact(form), exact(number), "{} for {}", form, number);
            }
        }

        /// Different values (as doubles and strings compare) never share a canonical form.
        #[test]
        fn different_values_differ(a in json_value(), b in json_value()) {
            prop_assume!(!same_meaning(&a, &b));
            for form in [canonicalize, canonicalize_doubles] {
                let ca = form(&serde_json::to_string(&a).unwrap()).unwrap();
                let cb = form(&serde_json::to_string(&b).unwrap()).unwrap();
                prop_assert_ne!(ca, cb);
            }
        }
    }

    /// Equality but for numbers, which may be any numbers.
    fn same_shape(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(_), Value::Number(_)) => true,
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_shape(a, b))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_shape(v, w)))
            }
            _ => a == b,
        }
    }

    /// The numbers of a value as serde_json writes them, in the order of its canonical form
    /// (members sorted by UTF-16 code units).
    fn numbers_in_canonical_order(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Number(n) => out.push(n.to_string()),
            Value::Array(items) => items.iter().for_each(|v| numbers_in_canonical_order(v, out)),
            Value::Object(members) => {
                let mut members: Vec<_> = members.iter().collect();
                members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
                members
                    .iter()
                    .for_each(|(_, v)| numbers_in_canonical_order(v, out));
            }
            _ => {}
        }
    }

    /// The number tokens of a JSON text, in order (strings skipped).
    fn number_tokens(text: &str) -> Vec<String> {
        let mut tokens = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => {
                                chars.next();
                            }
                            '"' => break,
                            _ => {}
                        }
                    }
                }
                '-' | '0'..='9' => {
                    let mut token = c.to_string();
                    while let Some(&c) = chars
                        .peek()
                        .filter(|c| matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
                    {
                        token.push(c);
                        chars.next();
                    }
                    tokens.push(token);
                }
                _ => {}
            }
        }
        tokens
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
