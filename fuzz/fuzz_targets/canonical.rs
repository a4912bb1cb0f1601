//! The argument canonicaliser (`tower_mrtr::canonical::canonicalize`) and the digest built on it
//! (`envelope::ArgumentsDigest`), on arbitrary text.
//!
//! Invariants:
//! * it refuses exactly what has no single meaning: text serde_json rejects, and objects with
//!   two members of one (decoded) name;
//! * a canonical form is a fixpoint, and is itself JSON;
//! * every re-serialisation of the same value (member order, whitespace, escapes, number
//!   spelling) has the same canonical form and the same digest;
//! * absent, `null` and `{}` arguments digest alike.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use tower_mrtr::canonical::{CanonicalError, canonicalize};
use tower_mrtr::envelope::ArgumentsDigest;
use tower_mrtr_fuzz::lenient::Node;
use tower_mrtr_fuzz::reserialise::reserialise;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let valid_json = serde_json::from_str::<&RawValue>(text).is_ok();
    match canonicalize(text) {
        Ok(canonical) => {
            assert!(valid_json, "canonical form of text serde_json refuses: {text:?}");
            let canonical_text = std::str::from_utf8(&canonical).expect("canonical form is UTF-8");
            assert!(
                serde_json::from_str::<&RawValue>(canonical_text).is_ok(),
                "canonical form is not JSON: {canonical_text:?}"
            );
            assert_eq!(
                canonicalize(canonical_text).as_deref(),
                Ok(&canonical[..]),
                "canonical form is not a fixpoint"
            );
            if let Ok(node) = serde_json::from_str::<Node>(text) {
                assert!(
                    !has_duplicate(&node),
                    "accepted an object with a duplicate member: {text:?}"
                );
            }
            let digest = ArgumentsDigest::of(Some(text)).expect("digest of canonicalisable text");
            assert_eq!(
                ArgumentsDigest::of(Some(canonical_text)),
                Ok(digest),
                "digest differs from its canonical form's"
            );
            for seed in 0..4u64 {
                let seed = seed ^ data.len() as u64;
                let Some(variant) = reserialise(text, seed) else {
                    continue;
                };
                assert_eq!(
                    canonicalize(&variant).as_deref(),
                    Ok(&canonical[..]),
                    "a re-serialisation canonicalises differently:\n  original {text:?}\n  variant  {variant:?}"
                );
                assert_eq!(ArgumentsDigest::of(Some(&variant)), Ok(digest));
            }
            if matches!(text.trim(), "null" | "{}") {
                assert_eq!(ArgumentsDigest::of(None), Ok(digest));
            }
        }
        Err(CanonicalError::Syntax) => {
            assert!(!valid_json, "valid JSON refused as a syntax error: {text:?}");
        }
        Err(CanonicalError::DuplicateMember(name)) => {
            assert!(valid_json, "duplicate refusal of text that is not JSON: {text:?}");
            match serde_json::from_str::<Node>(text) {
                Ok(node) => assert!(
                    has_duplicate(&node),
                    "no member {name:?} appears twice in {text:?}"
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
                    "valid JSON the oracle cannot read ({error}): {text:?}"
                ),
            }
        }
        Err(CanonicalError::NumberOutOfRange) => {
            assert!(valid_json, "range refusal of text that is not JSON: {text:?}");
            assert!(
                serde_json::from_str::<Node>(text).is_err(),
                "a number out of range that serde_json reads as a double: {text:?}"
            );
        }
        Err(CanonicalError::TooDeep | CanonicalError::InvalidString) => {
            assert!(
                valid_json,
                "depth or string refusal of text that is not JSON: {text:?}"
            );
        }
        Err(other) => panic!("unknown refusal {other:?}"),
    }
});

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
