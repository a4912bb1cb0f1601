//! The gateway's naming rule (`mrtr_gateway::fuzzing::expose`, `Names::resolve`,
//! `Names::exposed`) on arbitrary catalogs.
//!
//! Input: one line per backend, `NAME:tool,tool,...`, or `NAME` alone for a backend whose list
//! is unknown (it did not answer).
//!
//! Invariants: `resolve` and `exposed` are inverse; every offered name is exposed as itself or
//! as `<backend>__<name>`, or hidden only because that exposed name is already taken; a name
//! offered by two or more backends is never exposed unprefixed for either of them (no client
//! lands on an arbitrary backend); a backend whose list is unknown exposes nothing; the result
//! does not depend on anything but the input.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use mrtr_gateway::fuzzing::{SEPARATOR, expose};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut backends: Vec<&str> = Vec::new();
    let mut offered: Vec<Option<Vec<String>>> = Vec::new();
    for line in text.lines().take(16) {
        match line.split_once(':') {
            Some((backend, names)) => {
                backends.push(backend);
                offered.push(Some(names.split(',').take(64).map(str::to_owned).collect()));
            }
            None => {
                backends.push(line);
                offered.push(None);
            }
        }
    }
    let names = expose(&backends, &offered);
    let again = expose(&backends, &offered);

    let offered_by = |name: &str| -> usize {
        offered
            .iter()
            .filter(|list| list.as_ref().is_some_and(|l| l.iter().any(|n| n == name)))
            .count()
    };
    for (b, list) in offered.iter().enumerate() {
        let Some(list) = list else {
            continue;
        };
        for name in list {
            let prefixed = format!("{}{SEPARATOR}{name}", backends[b]);
            let exposed = names.exposed(b, name);
            assert_eq!(exposed, again.exposed(b, name), "not deterministic");
            match exposed {
                Some(exposed) => {
                    assert!(
                        exposed == name || exposed == prefixed,
                        "{name:?} exposed as {exposed:?}"
                    );
                    assert_eq!(names.resolve(exposed), Some((b, name.as_str())), "not inverse");
                    if offered_by(name) > 1 {
                        assert_eq!(exposed, prefixed, "a conflicting name exposed unprefixed");
                    }
                }
                None => assert!(
                    names.resolve(name).is_some() || names.resolve(&prefixed).is_some(),
                    "{name:?} of backend {b} hidden without a collision"
                ),
            }
        }
    }
    // Whatever resolves, resolves to a name its backend offered, exposed as that name.
    let mut candidates: HashSet<String> = HashSet::new();
    for (b, list) in offered.iter().enumerate() {
        for name in list.iter().flatten() {
            candidates.insert(name.clone());
            candidates.insert(format!("{}{SEPARATOR}{name}", backends[b]));
        }
    }
    for candidate in &candidates {
        if let Some((b, original)) = names.resolve(candidate) {
            let list = offered[b]
                .as_ref()
                .expect("a backend with an unknown list exposes nothing");
            assert!(list.iter().any(|n| n == original));
            assert_eq!(names.exposed(b, original), Some(candidate.as_str()));
            if offered_by(original) > 1 {
                assert_ne!(candidate, original, "a conflicting name resolves unprefixed");
            }
        }
    }
});
