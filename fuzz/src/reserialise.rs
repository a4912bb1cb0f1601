//! Re-serialisations of a JSON text that keep its value: what a client may legitimately do to
//! `arguments` between two rounds (reorder members, change whitespace, escape characters, write a
//! number another way). The canonicaliser must map all of them to one form.
//!
//! Numbers are rewritten only where the value is provably the same: the decimal value of a
//! literal is kept (`1.5` as `15e-1`). [`reserialise`] never turns an integer literal above 2^53
//! into a double literal (the double-based form of envelope v2 keeps only integer literals
//! exact); [`reserialise_exact`] does, since the exact-decimal form (v3) keeps every value.
//!
//! ```
//! use tower_mrtr::canonical::canonicalize;
//! use tower_mrtr_fuzz::reserialise::reserialise;
//!
//! let text = r#"{"b":[1,2.50,"x\/y"],"a":{"c":null}}"#;
//! let other = reserialise(text, 7).unwrap();
//! assert_ne!(other, text);
//! assert_eq!(canonicalize(&other), canonicalize(text));
//! ```

use std::fmt::Write as _;

use serde_json::value::RawValue;

use crate::lenient::raw_members;

/// A small deterministic generator (xorshift64*): the same input always gives the same variant.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Another text of the same JSON value, chosen by `seed`, for both canonical forms; `None` if
/// `text` is not JSON.
pub fn reserialise(text: &str, seed: u64) -> Option<String> {
    reserialise_with(text, seed, false)
}

/// Another text of the same JSON value, chosen by `seed`, that only the exact-decimal form must
/// map to one form: integer literals above 2^53 may be written as double literals too.
pub fn reserialise_exact(text: &str, seed: u64) -> Option<String> {
    reserialise_with(text, seed, true)
}

fn reserialise_with(text: &str, seed: u64, exact: bool) -> Option<String> {
    let raw: &RawValue = serde_json::from_str(text).ok()?;
    let mut out = String::with_capacity(text.len() * 2);
    let mut rng = Rng::new(seed);
    space(&mut rng, &mut out);
    value(raw, &mut rng, &mut out, exact)?;
    space(&mut rng, &mut out);
    Some(out)
}

fn space(rng: &mut Rng, out: &mut String) {
    out.push_str(["", "", " ", "\n", "\t", "\r\n  "][rng.below(6)]);
}

fn value(raw: &RawValue, rng: &mut Rng, out: &mut String, exact: bool) -> Option<()> {
    let text = raw.get();
    match text.as_bytes().first()? {
        b'{' => {
            let mut members = raw_members(text)?;
            // A shuffle: member order carries no meaning.
            for i in (1..members.len()).rev() {
                members.swap(i, rng.below(i + 1));
            }
            out.push('{');
            for (i, (name, member)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(rng, out);
                string(name, rng, out);
                space(rng, out);
                out.push(':');
                space(rng, out);
                value(member, rng, out, exact)?;
                space(rng, out);
            }
            out.push('}');
        }
        b'[' => {
            let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(rng, out);
                value(item, rng, out, exact)?;
                space(rng, out);
            }
            out.push(']');
        }
        b'"' => string(&serde_json::from_str::<String>(text).ok()?, rng, out),
        b'-' | b'0'..=b'9' => number(text, rng, out, exact),
        _ => out.push_str(text),
    }
    Some(())
}

/// A string with each character written plainly or escaped, at random.
fn string(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str(["\\\"", "\\u0022"][rng.below(2)]),
            '\\' => out.push_str(["\\\\", "\\u005C", "\\u005c"][rng.below(3)]),
            '\n' => out.push_str(["\\n", "\\u000a"][rng.below(2)]),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            '/' if rng.below(2) == 0 => out.push_str("\\/"),
            c if rng.below(4) == 0 => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    if rng.below(2) == 0 {
                        let _ = write!(out, "\\u{unit:04X}");
                    } else {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number literal written another way with the same decimal value, where that keeps its
/// canonical form.
fn number(text: &str, rng: &mut Rng, out: &mut String, exact: bool) {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let integer_literal = exponent.is_none() && !mantissa.contains('.');
    // An integer literal above 2^53 is canonicalised with its own digits; as a double literal it
    // would be rounded. 15 digits stay below 2^53.
    if integer_literal && int.len() > 15 && !exact {
        out.push_str(text);
        return;
    }
    let Some(exponent) = exponent.map_or(Some(0i64), |e| e.parse::<i32>().ok().map(i64::from)) else {
        out.push_str(text);
        return;
    };
    let zeros = rng.below(3);
    let mut digits = format!("{int}{frac}");
    digits.extend(std::iter::repeat_n('0', zeros));
    let exponent = exponent - frac.len() as i64 - zeros as i64;
    // Leading zeros are not JSON: keep one digit before the point.
    let trimmed = digits.trim_start_matches('0');
    let digits = if trimmed.is_empty() { "0" } else { trimmed };
    if negative {
        out.push('-');
    }
    match rng.below(3) {
        0 => {
            let _ = write!(out, "{digits}e{exponent}");
        }
        1 => {
            // d.ddd0 × 10^(e + len − 1): the same decimal value, one more (zero) digit.
            let shifted = exponent + digits.len() as i64 - 1;
            let _ = write!(out, "{}.{}0E{shifted}", &digits[..1], &digits[1..]);
        }
        _ => {
            let _ = write!(out, "{digits}E{exponent:+}");
        }
    }
}
