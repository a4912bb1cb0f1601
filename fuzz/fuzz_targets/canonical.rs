//! The argument canonicalisers (`tower_mrtr::canonical::canonicalize`, the exact-decimal form of
//! envelope v3, and `canonicalize_doubles`, v2's) and the digest built on them
//! (`envelope::ArgumentsDigest`), on arbitrary text.
//!
//! Invariants, for both forms:
//! * it refuses exactly what has no single meaning: text serde_json rejects, objects with two
//!   members of one (decoded) name, and numbers beyond the form's range (v3: an exponent beyond
//!   ±(10^18 − 1); v2: beyond a double);
//! * a canonical form is a fixpoint, and is itself JSON;
//! * every re-serialisation of the same value (member order, whitespace, escapes, number
//!   spelling) has the same canonical form and the same digest;
//! * absent, `null` and `{}` arguments digest alike.
//!
//! And for the exact-decimal form, against a second implementation written here from
//! `docs/envelope.md` (the value as `0.d1…dn × 10^point`, then `D × 10^E`): every number is
//! written as that reference says, or refused exactly when the reference is out of range; its
//! form is at most 21 bytes longer than its literal; and a number whose last significant digit
//! changes gets another form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use tower_mrtr::canonical::{CanonicalError, MAX_EXPONENT, canonicalize, canonicalize_doubles};
use tower_mrtr::envelope::ArgumentsDigest;
use tower_mrtr_fuzz::lenient::Node;
use tower_mrtr_fuzz::reserialise::{reserialise, reserialise_exact};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// v3: numbers by exact decimal value.
    Exact,
    /// v2: numbers as doubles.
    Doubles,
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check(text, data.len(), Form::Exact);
    check(text, data.len(), Form::Doubles);
    check_numbers(text);
});

fn check(text: &str, len: usize, form: Form) {
    let canonicalize_exact = canonicalize;
    let (canonicalize, reserialise): (fn(&str) -> _, fn(&str, u64) -> _) = match form {
        Form::Exact => (canonicalize, reserialise_exact),
        Form::Doubles => (canonicalize_doubles, reserialise),
    };
    let valid_json = serde_json::from_str::<&RawValue>(text).is_ok();
    match canonicalize(text) {
        Ok(canonical) => {
            assert!(
                valid_json,
                "{form:?}: canonical form of text serde_json refuses: {text:?}"
            );
            let canonical_text = std::str::from_utf8(&canonical).expect("canonical form is UTF-8");
            assert!(
                serde_json::from_str::<&RawValue>(canonical_text).is_ok(),
                "{form:?}: canonical form is not JSON: {canonical_text:?}"
            );
            assert_eq!(
                canonicalize(canonical_text).as_deref(),
                Ok(&canonical[..]),
                "{form:?}: canonical form is not a fixpoint"
            );
            if let Ok(node) = serde_json::from_str::<Node>(text) {
                assert!(
                    !has_duplicate(&node),
                    "{form:?}: accepted an object with a duplicate member: {text:?}"
                );
            }
            let digest = ArgumentsDigest::of(Some(text)).ok();
            let digest_of = |t: &str| {
                ArgumentsDigest::of_with_v2(Some(t)).ok().map(|d| match form {
                    Form::Exact => Some(*d.as_bytes()),
                    Form::Doubles => d.v2_bytes().copied(),
                })
            };
            let ours = digest_of(text);
            match (form, &digest) {
                (Form::Exact, None) => panic!("no digest of text with an exact form: {text:?}"),
                // A digest needs the exact form: text with a v2 form only (an exponent beyond
                // v3's bound, which v2 read as 0) has none, and such a v2 retry is refused.
                (Form::Doubles, None) => {
                    assert_eq!(
                        canonicalize_exact(text),
                        Err(CanonicalError::ExponentOutOfRange),
                        "no digest of text with both forms: {text:?}"
                    );
                    return;
                }
                _ => {}
            }
            assert_eq!(
                digest_of(canonical_text),
                ours,
                "{form:?}: digest differs from its canonical form's"
            );
            for seed in 0..4u64 {
                let seed = seed ^ len as u64;
                let Some(variant) = reserialise(text, seed) else {
                    continue;
                };
                assert_eq!(
                    canonicalize(&variant).as_deref(),
                    Ok(&canonical[..]),
                    "{form:?}: a re-serialisation canonicalises differently:\n  original {text:?}\n  variant  {variant:?}"
                );
                assert_eq!(digest_of(&variant), ours);
            }
            if matches!(text.trim(), "null" | "{}") {
                assert_eq!(ArgumentsDigest::of(None).ok(), digest);
            }
        }
        Err(CanonicalError::Syntax) => {
            assert!(
                !valid_json,
                "{form:?}: valid JSON refused as a syntax error: {text:?}"
            );
        }
        Err(CanonicalError::DuplicateMember(name)) => {
            assert!(
                valid_json,
                "{form:?}: duplicate refusal of text that is not JSON: {text:?}"
            );
            match serde_json::from_str::<Node>(text) {
                Ok(node) => assert!(
                    has_duplicate(&node),
                    "{form:?}: no member {name:?} appears twice in {text:?}"
                ),
                // The canonicaliser reports the first refusal in document order: what it would
                // refuse later (a number serde_json cannot read as a double, a string with a lone
                // surrogate, nesting too deep) may come after the duplicate and stop serde_json
                // too (crashes of this oracle, found by a long run and by CI; the inputs are seeds).
                Err(error) => assert!(
                    [
                        "number out of range",
                        "lone leading surrogate",
                        "invalid unicode code point",
                        "unexpected end of hex escape",
                        "recursion limit exceeded",
                    ]
                    .iter()
                    .any(|refused_later| error.to_string().starts_with(refused_later)),
                    "{form:?}: valid JSON the oracle cannot read ({error}): {text:?}"
                ),
            }
        }
        Err(CanonicalError::NumberOutOfRange) => {
            assert_eq!(
                form,
                Form::Doubles,
                "the exact form has no double range: {text:?}"
            );
            assert!(valid_json, "range refusal of text that is not JSON: {text:?}");
            assert!(
                serde_json::from_str::<Node>(text).is_err(),
                "a number out of range that serde_json reads as a double: {text:?}"
            );
        }
        Err(CanonicalError::ExponentOutOfRange) => {
            assert_eq!(form, Form::Exact, "v2 has no exponent bound: {text:?}");
            assert!(valid_json, "exponent refusal of text that is not JSON: {text:?}");
            assert!(
                number_literals(text)
                    .iter()
                    .any(|n| reference(n) == Err(OutOfRange)),
                "an exponent refusal of text whose every number is within the bound: {text:?}"
            );
        }
        Err(CanonicalError::TooDeep | CanonicalError::InvalidString) => {
            assert!(
                valid_json,
                "{form:?}: depth or string refusal of text that is not JSON: {text:?}"
            );
        }
        Err(other) => panic!("unknown refusal {other:?}"),
    }
}

/// Each number literal of valid JSON, alone, against the reference: the same form, or refused
/// exactly when the reference is out of range; and a changed last digit, another form.
fn check_numbers(text: &str) {
    if serde_json::from_str::<&RawValue>(text).is_err() {
        return;
    }
    for literal in number_literals(text).into_iter().take(8) {
        let ours = canonicalize(literal).map(|form| String::from_utf8(form).expect("UTF-8"));
        match (reference(literal), &ours) {
            (Ok(expected), Ok(form)) => {
                assert_eq!(form, &expected, "the exact form of {literal:?}");
                assert!(form.len() <= literal.len() + 21, "{literal:?} -> {form:?}");
                if let Some(bumped) = bump_last_digit(literal) {
                    let other = canonicalize(&bumped).map(|f| String::from_utf8(f).expect("UTF-8"));
                    assert_ne!(
                        other.as_ref(),
                        Ok(form),
                        "{literal:?} and {bumped:?} are two values"
                    );
                }
            }
            (Err(OutOfRange), Err(CanonicalError::ExponentOutOfRange)) => {}
            (expected, ours) => panic!("{literal:?}: reference {expected:?}, canonicaliser {ours:?}"),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct OutOfRange;

/// The exact-decimal form of a JSON number literal, computed another way than the library does:
/// the digits `d1…dn` (leading and trailing zeros removed) and the position of the decimal point
/// relative to `d1` give `value = 0.d1…dn × 10^point`, so `E = point − n`.
fn reference(literal: &str) -> Result<String, OutOfRange> {
    let (negative, rest) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: String = format!("{int}{frac}");
    let Some(first) = all.find(|c: char| c != '0') else {
        return Ok("0".to_owned());
    };
    let last = all.rfind(|c: char| c != '0').expect("a non-zero digit");
    let digits = &all[first..=last];
    // The point sits after `int`: `first` digits into `all` it moves left of d1.
    let (exp_negative, exp_digits) = match exponent.as_bytes().first() {
        Some(b'-') => (true, &exponent[1..]),
        Some(b'+') => (false, &exponent[1..]),
        _ => (false, exponent),
    };
    let exp_digits = exp_digits.trim_start_matches('0');
    if exp_digits.len() > 30 {
        return Err(OutOfRange);
    }
    let exp: i128 = if exp_digits.is_empty() {
        0
    } else {
        exp_digits.parse().expect("digits")
    };
    let exp = if exp_negative { -exp } else { exp };
    let point = int.len() as i128 - first as i128 + exp;
    let e = point - digits.len() as i128;
    if e.abs() > i128::from(MAX_EXPONENT) {
        return Err(OutOfRange);
    }
    let sign = if negative { "-" } else { "" };
    Ok(match e {
        0 => format!("{sign}{digits}"),
        e => format!("{sign}{digits}e{e}"),
    })
}

/// The literal with its last non-zero digit of the mantissa changed (another value), if it has
/// one.
fn bump_last_digit(literal: &str) -> Option<String> {
    let end = literal.find(['e', 'E']).unwrap_or(literal.len());
    let at = literal[..end].rfind(|c: char| c.is_ascii_digit() && c != '0')?;
    let digit = literal.as_bytes()[at];
    let bumped = if digit == b'9' { b'8' } else { digit + 1 };
    let mut out = literal.as_bytes().to_vec();
    out[at] = bumped;
    String::from_utf8(out).ok()
}

/// The number literals of a JSON text, outside its strings.
fn number_literals(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    i += 1;
                }
                found.push(&text[start..i]);
            }
            _ => i += 1,
        }
    }
    found
}

/// Whether any object in the tree has two members of one (decoded) name.
fn has_duplicate(node: &Node) -> bool {
    match node {
        Node::Object(members) => {
            let mut names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
            names.sort_unstable();
            names.windows(2).any(|w| w[0] == w[1]) || members.iter().any(|(_, v)| has_duplicate(v))
        }
        Node::Array(items) => items.iter().any(has_duplicate),
        _ => false,
    }
}
