//! Keyring configuration parsing: `Keyring::from_str` (the `MRTR_KEYS` format) and the
//! gateway's `cli::parse_keys` (keys files: newlines, comments), on arbitrary text.
//!
//! Invariants: a parsed ring is never empty, its active key is the first entry, its key ids are
//! distinct; writing it back (`to_config_string`) and parsing that gives the same ring (a
//! fixpoint); `Debug` never shows key material; `parse_keys` agrees with `from_str` on text
//! without newlines or comments; a ring that parses seals envelopes that it opens.
#![no_main]

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use mrtr_gateway::fuzzing::parse_keys;
use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
use tower_mrtr::{KeyId, Keyring, Route};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let direct = text.parse::<Keyring>();
    if let Ok(ring) = &direct {
        check_ring(ring);
    }
    let from_file = parse_keys(text);
    if let Ok(ring) = &from_file {
        check_ring(ring);
    }
    if !text.contains(['\n', '\r', '#']) && !text.split(',').any(|e| e.trim().is_empty()) {
        // Without line structure or empty entries, both readings agree.
        match (&direct, &from_file) {
            (Ok(a), Ok(b)) => assert_eq!(*a.to_config_string(), *b.to_config_string()),
            (Err(_), Err(_)) => {}
            (a, b) => panic!(
                "from_str and parse_keys disagree on {text:?}: {:?} vs {:?}",
                a.is_ok(),
                b.is_ok()
            ),
        }
    }
});

fn check_ring(ring: &Keyring) {
    assert!(ring.len() >= 1);
    let ids: Vec<&KeyId> = ring.key_ids().collect();
    assert_eq!(ids.len(), ring.len());
    assert_eq!(ids[0], ring.active_key_id());
    for (i, id) in ids.iter().enumerate() {
        assert!(!ids[..i].contains(id), "key id {id} appears twice");
        assert!(KeyId::new(id.as_str()).is_ok());
    }
    let config = ring.to_config_string();
    let again: Keyring = config.parse().expect("a ring's own configuration parses");
    assert_eq!(
        *again.to_config_string(),
        *config,
        "configuration is not a fixpoint"
    );
    // Debug shows the key ids (public); with them taken out, no key material may be left.
    let mut shown = format!("{ring:?}");
    for id in &ids {
        shown = shown.replace(&format!("{id:?}"), "");
    }
    for entry in config.split(',') {
        let (_, key) = entry.split_once(':').expect("kid:key");
        assert!(!shown.contains(&key[..16]), "Debug shows key material: {shown}");
    }
    // The ring seals with its active key and opens what it sealed.
    let sealer = Sealer::new(Arc::new(again));
    let binding = Binding::new("tools/call", Some("t"), None);
    let sealed = Sealed {
        route: Route::new("r"),
        state: Some("s".to_owned()),
        expires_at: UNIX_EPOCH + Duration::from_secs(10),
        round: 1,
        call_target: None,
    };
    let envelope = sealer
        .seal_with_nonce(Purpose::REQUEST_STATE, &binding, &sealed, [0; 24])
        .expect("sealing");
    let opened = sealer
        .open(Purpose::REQUEST_STATE, &binding, &envelope, UNIX_EPOCH)
        .expect("a ring opens what it sealed");
    assert_eq!(opened, sealed);
}
