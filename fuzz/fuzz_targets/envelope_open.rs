//! Envelope opening (`tower_mrtr::envelope::Sealer::open`) on arbitrary strings, against the
//! relay's keyring in the middle of a rotation.
//!
//! Input: a byte choosing the purpose and time, a byte choosing the binding to open with (that of
//! mint `n`, or one of no mint), then the envelope text,
//! in which `@E<n>@` stands for minted envelope `n` (format v4), `@P<n>@` for its v3 twin and
//! `@V<n>@` for its v2 twin (seeds also hold minted envelopes written out, so that mutations reach
//! inside them).
//!
//! Invariant, exact: `open` succeeds if and only if the text is an envelope this keyring minted
//! (v4, or v3 and v2 while they still open), under a key the ring still holds, opened with the
//! purpose and binding (audience included) it was minted for (for v2, arguments compared as v2
//! compares them: numbers as doubles), before its expiry; it then returns exactly
//! what was sealed: the route with its identity, the round and a task handle's call target for
//! v4, the same without call target for v3, the route without identity and round 1 for v2.
//! Anything else (a mutation of any byte, another binding or audience, a retired key, an expired
//! envelope) is refused, with a text that starts with none of the prefixes refused as not an
//! envelope.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use mrtr_gateway::fuzzing::SESSION_PURPOSE;
use tower_mrtr::envelope::{
    ArgumentsDigest, Binding, OpenError, PREFIX, Purpose, Sealer, V2_PREFIX, V3_PREFIX,
};
use tower_mrtr_fuzz::mint::{AUDIENCE, Mint, mints, now, relay_keyring, substitute};

fuzz_target!(|data: &[u8]| {
    let [choice, binding_choice, rest @ ..] = data else {
        return;
    };
    let choice = *choice;
    let text = String::from_utf8_lossy(&substitute(rest)).into_owned();
    // The gateway's session purpose is a custom one no mint has: nothing may open under it.
    let purpose =
        [Purpose::REQUEST_STATE, Purpose::TASK_HANDLE, SESSION_PURPOSE][usize::from(choice & 3) % 3];
    let at = match (choice >> 2) & 7 {
        0..=2 => now(),
        3 => now() + Duration::from_secs(599),
        4 => now() + Duration::from_secs(600),
        5 => UNIX_EPOCH,
        6 => now() + Duration::from_secs(86_400 * 365),
        _ => now() - Duration::from_secs(86_400),
    };
    // The binding of one of the mints (with or without its arguments), the same under another
    // audience (or none, or one), or one of no mint.
    let deploy =
        ArgumentsDigest::of_with_v2(Some(tower_mrtr_fuzz::mint::DEPLOY_ARGUMENTS)).expect("canonical");
    let bindings: Vec<Binding<'static>> = mints()
        .iter()
        .map(Mint::binding)
        .chain([
            Binding::new("tools/call", Some("deploy"), None),
            Binding::new("tools/call", Some("deploy"), Some("alice"))
                .with_arguments(ArgumentsDigest::of_with_v2(Some(r#"{"env":"dev"}"#)).expect("canonical")),
            Binding::new("tools/call", Some("deploy"), None)
                .with_arguments(deploy)
                .with_audience(Some(AUDIENCE)),
            Binding::new("tools/call", Some("deploy"), None)
                .with_arguments(deploy)
                .with_audience(Some("staging")),
            Binding::new("tasks", None, None).with_audience(Some("staging")),
            Binding::new("tasks", None, None),
            // The exact-decimal neighbours of E17's arguments.
            Binding::new("tools/call", Some("transfer"), None).with_arguments(
                ArgumentsDigest::of_with_v2(Some(r#"{"amount":100,"id":9007199254740992}"#))
                    .expect("canonical"),
            ),
        ])
        .collect();
    let binding = &bindings[usize::from(*binding_choice) % bindings.len()];

    let sealer = Sealer::new(relay_keyring());
    let opened = sealer.open(purpose, binding, &text, at);
    let minted = mints()
        .iter()
        .find_map(|m| m.version_of(&text).map(|version| (m, version)));
    let should_open = minted.filter(|(m, version)| {
        m.kid != "k0"
            && m.purpose == purpose
            && binds_alike(binding, &m.binding(), *version)
            && at < m.expires_at
    });
    match (opened, should_open) {
        (Ok(sealed), Some((mint, version))) => {
            // v4: the route with its identity, the round, the call target; v3: no call target;
            // v2: no identity, round 1, no call target.
            assert_eq!(sealed, mint.sealed(version), "version {version}");
        }
        (Ok(sealed), None) => panic!("opened what it must refuse: {text:?} -> {sealed:?}"),
        (Err(error), Some(mint)) => panic!("refused a valid envelope ({error}): mint {mint:?}"),
        (Err(error), None) => {
            if ![PREFIX, V3_PREFIX, V2_PREFIX]
                .iter()
                .any(|prefix| text.starts_with(prefix))
            {
                assert_eq!(error, OpenError::NotAnEnvelope);
            }
            if let Some((mint, _)) = minted
                && mint.kid == "k0"
            {
                assert_eq!(
                    error,
                    OpenError::UnknownKey,
                    "a retired key must be reported as such"
                );
            }
            assert!(!error.reason().is_empty());
        }
    }
});

/// Whether an envelope of `version` minted under `minted` opens under `binding`: v4 and v3 bind
/// every field exactly; v2 binds the digest of v2's form of the arguments, numbers read as doubles, so
/// arguments equal as doubles (E17's exact-decimal neighbours) open a v2 envelope too, as
/// `docs/envelope.md` says of format v2.
fn binds_alike(binding: &Binding<'_>, minted: &Binding<'_>, version: u8) -> bool {
    if version != 2 {
        return binding == minted;
    }
    fn without_arguments<'a>(binding: &Binding<'a>) -> Binding<'a> {
        Binding {
            arguments: None,
            ..*binding
        }
    }
    let v2_digest = |b: &Binding<'_>| b.arguments.map(|d| d.v2_bytes().copied());
    without_arguments(binding) == without_arguments(minted) && v2_digest(binding) == v2_digest(minted)
}
