use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;

use super::*;
use crate::keyring::{Key, KeyId, Keyring};

/// Key of the test vectors: bytes 0x00..=0x1f.
fn vector_key() -> Key {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = i as u8;
    }
    Key::from_bytes(bytes)
}

/// Nonce of the test vectors: bytes 0x40..=0x57.
fn vector_nonce() -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    for (i, b) in nonce.iter_mut().enumerate() {
        *b = 0x40 + i as u8;
    }
    nonce
}

fn vector_sealer() -> Sealer {
    Sealer::new(Arc::new(Keyring::new(KeyId::new("k1").unwrap(), vector_key())))
}

fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

const EXPIRES_MS: u64 = 1_800_000_000_000;

/// One test vector: purpose, binding, contents, and the expected wire form.
struct Vector {
    purpose: Purpose,
    binding: Binding<'static>,
    route: &'static str,
    state: Option<&'static str>,
    wire: &'static str,
}

const VECTORS: &[Vector] = &[
    Vector {
        purpose: Purpose::RequestState,
        binding: Binding {
            method: "tools/call",
            target: Some("delete_branch"),
            principal: None,
        },
        route: "backend-a",
        state: Some("opaque-state"),
        wire: "mrtr1.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_3l38z3APz2l8zFfCky6x9U0DZ9ZVf1mhKwxhazqGIP7sYDs6s7UA",
    },
    Vector {
        purpose: Purpose::RequestState,
        binding: Binding {
            method: "resources/read",
            target: Some("file:///tmp/a.txt"),
            principal: Some("alice"),
        },
        route: "b",
        state: None,
        wire: "mrtr1.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_XlvpOZJQPbGvJ0sqB2WH8ko0E",
    },
    Vector {
        purpose: Purpose::RequestState,
        binding: Binding {
            method: "prompts/get",
            target: Some("greet"),
            principal: None,
        },
        route: "b",
        state: Some(""),
        wire: "mrtr1.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_XlvySqst_d8ZLujHvy3HGD_0I",
    },
    Vector {
        purpose: Purpose::TaskHandle,
        binding: Binding {
            method: "tasks",
            target: None,
            principal: None,
        },
        route: "backend-a",
        state: Some("task-7f3a"),
        wire: "mrtr1.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_3l38z3APz2l8zFZzgg8UcGm3Zol-iMKuiere88ZBCgmxv4JQ",
    },
];

fn vector_sealed(v: &Vector) -> Sealed {
    Sealed {
        route: Route::new(v.route),
        state: v.state.map(str::to_owned),
        expires_at: at_ms(EXPIRES_MS),
    }
}

#[test]
fn test_vectors_match_and_are_documented() {
    let sealer = vector_sealer();
    let doc = include_str!("../../../../docs/envelope.md");
    for v in VECTORS {
        let wire = sealer
            .seal_with_nonce(v.purpose, &v.binding, &vector_sealed(v), vector_nonce())
            .unwrap();
        assert_eq!(wire, v.wire, "vector for {:?} {:?}", v.purpose, v.binding);
        assert!(doc.contains(v.wire), "docs/envelope.md lacks vector {}", v.wire);
        let opened = sealer
            .open(v.purpose, &v.binding, v.wire, at_ms(EXPIRES_MS - 1))
            .unwrap();
        assert_eq!(opened, vector_sealed(v));
    }
}

fn sample() -> (Sealer, Binding<'static>, Sealed, SystemTime) {
    let now = at_ms(EXPIRES_MS - 60_000);
    let sealed = Sealed {
        route: Route::new("backend-a"),
        state: Some("st".into()),
        expires_at: at_ms(EXPIRES_MS),
    };
    (
        vector_sealer(),
        Binding::new("tools/call", Some("t"), Some("alice")),
        sealed,
        now,
    )
}

#[test]
fn absent_and_empty_state_stay_distinct() {
    let (sealer, binding, mut sealed, now) = sample();
    for state in [None, Some(String::new()), Some("x".to_owned())] {
        sealed.state = state.clone();
        let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
        assert_eq!(
            sealer
                .open(Purpose::RequestState, &binding, &wire, now)
                .unwrap()
                .state,
            state
        );
    }
}

#[test]
fn every_flipped_byte_of_the_envelope_is_rejected() {
    let (sealer, binding, sealed, now) = sample();
    let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    let raw = URL_SAFE_NO_PAD.decode(&wire[PREFIX.len()..]).unwrap();
    for i in 0..raw.len() {
        for flip in [0x01u8, 0x80] {
            let mut tampered = raw.clone();
            tampered[i] ^= flip;
            let tampered = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&tampered));
            let err = sealer
                .open(Purpose::RequestState, &binding, &tampered, now)
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    OpenError::Authentication
                        | OpenError::UnknownKey
                        | OpenError::UnknownVersion(_)
                        | OpenError::Truncated
                ),
                "byte {i}: {err:?}"
            );
        }
    }
    // And every character of the text form.
    for i in PREFIX.len()..wire.len() {
        let mut chars: Vec<char> = wire.chars().collect();
        chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
        let tampered: String = chars.into_iter().collect();
        assert!(
            sealer
                .open(Purpose::RequestState, &binding, &tampered, now)
                .is_err(),
            "char {i}"
        );
    }
}

#[test]
fn truncated_extended_and_foreign_envelopes_are_rejected() {
    let (sealer, binding, sealed, now) = sample();
    let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    for len in 0..wire.len() {
        assert!(
            sealer
                .open(Purpose::RequestState, &binding, &wire[..len], now)
                .is_err(),
            "len {len}"
        );
    }
    for suffix in ["A", "AA", "AAAA", "=", "=="] {
        assert!(
            sealer
                .open(Purpose::RequestState, &binding, &format!("{wire}{suffix}"), now)
                .is_err()
        );
    }
    let cases = [
        (
            "mrtr2.".to_owned() + &wire[PREFIX.len()..],
            OpenError::NotAnEnvelope,
        ),
        (wire[PREFIX.len()..].to_owned(), OpenError::NotAnEnvelope),
        (
            "MRTR1.".to_owned() + &wire[PREFIX.len()..],
            OpenError::NotAnEnvelope,
        ),
        ("mrtr1.+/==".to_owned(), OpenError::Encoding),
        ("mrtr1.".to_owned(), OpenError::Truncated),
        ("plain-backend-state".to_owned(), OpenError::NotAnEnvelope),
    ];
    for (input, expected) in cases {
        assert_eq!(
            sealer
                .open(Purpose::RequestState, &binding, &input, now)
                .unwrap_err(),
            expected,
            "{input}"
        );
    }
}

#[test]
fn binding_mismatches_are_rejected() {
    let (sealer, binding, sealed, now) = sample();
    let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    let others = [
        Binding::new("prompts/get", Some("t"), Some("alice")),
        Binding::new("tools/call", Some("u"), Some("alice")),
        Binding::new("tools/call", None, Some("alice")),
        Binding::new("tools/call", Some(""), Some("alice")),
        Binding::new("tools/call", Some("t"), Some("bob")),
        Binding::new("tools/call", Some("t"), None),
        Binding::new("tools/call", Some("t"), Some("")),
        // Field boundaries are length-prefixed: moving bytes between fields does not collide.
        Binding::new("tools/call", Some("ta"), Some("lice")),
    ];
    for other in others {
        assert_eq!(
            sealer
                .open(Purpose::RequestState, &other, &wire, now)
                .unwrap_err(),
            OpenError::Authentication,
            "{other:?}"
        );
    }
    assert_eq!(
        sealer
            .open(Purpose::TaskHandle, &binding, &wire, now)
            .unwrap_err(),
        OpenError::Authentication
    );
    let handle = sealer.seal(Purpose::TaskHandle, &binding, &sealed).unwrap();
    assert_eq!(
        sealer
            .open(Purpose::RequestState, &binding, &handle, now)
            .unwrap_err(),
        OpenError::Authentication
    );
}

#[test]
fn expiry_is_exclusive() {
    let (sealer, binding, sealed, _) = sample();
    let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    assert!(
        sealer
            .open(Purpose::RequestState, &binding, &wire, at_ms(EXPIRES_MS - 1))
            .is_ok()
    );
    assert_eq!(
        sealer
            .open(Purpose::RequestState, &binding, &wire, at_ms(EXPIRES_MS))
            .unwrap_err(),
        OpenError::Expired
    );
    assert_eq!(
        sealer
            .open(Purpose::RequestState, &binding, &wire, at_ms(EXPIRES_MS + 1))
            .unwrap_err(),
        OpenError::Expired
    );
}

#[test]
fn keys_unknown_or_retired_are_rejected() {
    let (sealer, binding, sealed, now) = sample();
    let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    // Same key bytes under another id: the id is authenticated, and looked up, not guessed.
    let renamed = Sealer::new(Arc::new(Keyring::new(KeyId::new("k2").unwrap(), vector_key())));
    assert_eq!(
        renamed
            .open(Purpose::RequestState, &binding, &wire, now)
            .unwrap_err(),
        OpenError::UnknownKey
    );
    // Same id, other key bytes.
    let other = Sealer::new(Arc::new(Keyring::new(
        KeyId::new("k1").unwrap(),
        Key::generate().unwrap(),
    )));
    assert_eq!(
        other
            .open(Purpose::RequestState, &binding, &wire, now)
            .unwrap_err(),
        OpenError::Authentication
    );
}

#[test]
fn rotation_keeps_every_round_in_flight_working() {
    let (_, binding, sealed, now) = sample();
    let old = "old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
    let new = "new:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";
    let ring = |s: &str| Sealer::new(Arc::new(s.parse::<Keyring>().unwrap()));
    let stage0 = ring(old); // before rotation
    let stage1 = ring(&format!("{old},{new}")); // new key added, open-only
    let stage2 = ring(&format!("{new},{old}")); // new key active
    let stage3 = ring(new); // old key dropped, after the longest TTL

    // Replicas at adjacent stages coexist during a rollout: whatever one seals, the other opens.
    for (a, b) in [(&stage0, &stage1), (&stage1, &stage2)] {
        for (minter, opener) in [(a, b), (b, a)] {
            let wire = minter.seal(Purpose::RequestState, &binding, &sealed).unwrap();
            assert!(opener.open(Purpose::RequestState, &binding, &wire, now).is_ok());
        }
    }
    // Stage 3 only begins after every stage-1 envelope expired; stage-2 envelopes still open.
    let wire = stage2.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    assert!(stage3.open(Purpose::RequestState, &binding, &wire, now).is_ok());
    let wire = stage0.seal(Purpose::RequestState, &binding, &sealed).unwrap();
    assert_eq!(
        stage3
            .open(Purpose::RequestState, &binding, &wire, now)
            .unwrap_err(),
        OpenError::UnknownKey
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn seal_open_round_trip(
        route in "[a-z0-9./:-]{0,64}",
        state in proptest::option::of(".{0,512}"),
        method in "[a-z/]{1,20}",
        target in proptest::option::of(".{0,64}"),
        principal in proptest::option::of(".{0,32}"),
        purpose in prop_oneof![Just(Purpose::RequestState), Just(Purpose::TaskHandle)],
    ) {
        let sealer = vector_sealer();
        let binding = Binding::new(&method, target.as_deref(), principal.as_deref());
        let sealed = Sealed { route: Route::new(route), state, expires_at: at_ms(EXPIRES_MS) };
        let wire = sealer.seal(purpose, &binding, &sealed).unwrap();
        prop_assert_eq!(sealer.open(purpose, &binding, &wire, at_ms(0)).unwrap(), sealed);
    }

    #[test]
    fn any_bit_flip_is_rejected(state in ".{0,256}", bit in 0usize..4096) {
        let sealer = vector_sealer();
        let binding = Binding::new("tools/call", Some("t"), None);
        let sealed = Sealed { route: Route::new("r"), state: Some(state), expires_at: at_ms(EXPIRES_MS) };
        let wire = sealer.seal(Purpose::RequestState, &binding, &sealed).unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(&wire[PREFIX.len()..]).unwrap();
        let bit = bit % (raw.len() * 8);
        raw[bit / 8] ^= 1 << (bit % 8);
        let tampered = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
        prop_assert!(sealer.open(Purpose::RequestState, &binding, &tampered, at_ms(0)).is_err());
    }

    #[test]
    fn arbitrary_text_never_opens_or_panics(text in ".{0,300}", tail in "[A-Za-z0-9_-]{0,300}") {
        let sealer = vector_sealer();
        let binding = Binding::new("tools/call", Some("t"), None);
        prop_assert!(sealer.open(Purpose::RequestState, &binding, &text, at_ms(0)).is_err());
        let prefixed = format!("{PREFIX}{tail}");
        prop_assert!(sealer.open(Purpose::RequestState, &binding, &prefixed, at_ms(0)).is_err());
    }
}
