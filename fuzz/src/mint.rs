//! Fixed keys, a fixed clock and a table of envelopes minted from them, so that every input
//! reproduces a crash by itself.
//!
//! Inputs name the minted envelopes with placeholders: `@E0@` … `@E11@` in an input stand for
//! [`mints()`]`[0..]`'s envelopes. Each one is valid for exactly one binding (method, target,
//! arguments, principal) and purpose, or deliberately invalid (expired, under a retired key).
//!
//! ```
//! use tower_mrtr_fuzz::mint::{mints, substitute};
//!
//! let text = substitute(br#"{"requestState":"@E0@"}"#);
//! assert!(String::from_utf8(text).unwrap().contains(&mints()[0].envelope));
//! ```

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower_mrtr::envelope::{ArgumentsDigest, Binding, Purpose, Sealed, Sealer};
use tower_mrtr::keyring::{Key, KeyId};
use tower_mrtr::{Clock, Keyring, Route};

/// The instant the fixed clock shows.
pub fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A clock that always shows [`now()`].
#[derive(Debug, Clone, Copy)]
pub struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> SystemTime {
        now()
    }
}

fn key(byte: u8) -> Key {
    Key::from_bytes([byte; 32])
}

fn id(text: &str) -> KeyId {
    KeyId::new(text).expect("valid key id")
}

/// The relay's keyring in the middle of a rotation: `k2` active, `k1` still opening. `k0` was
/// retired: envelopes under it must not open.
pub fn relay_keyring() -> Arc<Keyring> {
    static RING: LazyLock<Arc<Keyring>> = LazyLock::new(|| {
        let ring = Keyring::new(id("k2"), key(2))
            .with_key(id("k1"), key(1))
            .expect("distinct ids");
        Arc::new(ring)
    });
    RING.clone()
}

/// A ring sealing under `kid` (one of `k0`, `k1`, `k2`), for minting.
fn sealing_ring(kid: &str) -> Keyring {
    let byte = kid.as_bytes()[1] - b'0';
    Keyring::new(id(kid), key(byte))
}

/// The principal header the relays under test read, when they bind a principal.
pub const PRINCIPAL_HEADER: &str = "x-user";

/// One minted envelope and what it is bound to.
#[derive(Debug, Clone)]
pub struct Mint {
    /// What it is: a `requestState` or a task handle.
    pub purpose: Purpose,
    /// The JSON-RPC method it was minted for (`tasks` for task handles, which bind no method).
    pub method: &'static str,
    /// `params.name` or `params.uri`.
    pub target: Option<&'static str>,
    /// Raw JSON of the arguments it is bound to (`None`: no arguments, or not bound).
    pub arguments: Option<&'static str>,
    /// The principal it is bound to.
    pub principal: Option<&'static str>,
    /// The backend that minted the state.
    pub route: &'static str,
    /// The backend's state, raw (between the quotes, escapes kept).
    pub state: Option<&'static str>,
    /// When it expires.
    pub expires_at: SystemTime,
    /// Whether it still opens at [`now()`] under [`relay_keyring()`].
    pub valid: bool,
    /// The key it is sealed under.
    pub kid: &'static str,
    /// The envelope text.
    pub envelope: String,
}

impl Mint {
    /// The backend state as a client-independent string (escapes decoded).
    pub fn decoded_state(&self) -> Option<String> {
        self.state.map(|raw| {
            serde_json::from_str(&format!("\"{raw}\"")).expect("mint states are JSON string contents")
        })
    }

    /// The digest of the arguments it is bound to: request states of `tools/call` and
    /// `prompts/get` (the relay binds arguments by default).
    pub fn digest(&self) -> Option<ArgumentsDigest> {
        (self.purpose == Purpose::REQUEST_STATE && self.method != "resources/read")
            .then(|| ArgumentsDigest::of(self.arguments).expect("mint arguments are canonical"))
    }

    /// The binding the relay computes for a request matching this mint (arguments bound).
    pub fn binding(&self) -> Binding<'static> {
        let binding = Binding::new(self.method, self.target, self.principal);
        match self.digest() {
            Some(digest) => binding.with_arguments(digest),
            None => binding,
        }
    }
}

struct Spec {
    purpose: Purpose,
    method: &'static str,
    target: Option<&'static str>,
    arguments: Option<&'static str>,
    principal: Option<&'static str>,
    route: &'static str,
    state: Option<&'static str>,
    lifetime_secs: i64,
    kid: &'static str,
}

const fn request_state(
    method: &'static str,
    target: &'static str,
    arguments: Option<&'static str>,
    route: &'static str,
    state: Option<&'static str>,
) -> Spec {
    Spec {
        purpose: Purpose::REQUEST_STATE,
        method,
        target: Some(target),
        arguments,
        principal: None,
        route,
        state,
        lifetime_secs: 600,
        kid: "k2",
    }
}

const fn task_handle(route: &'static str, task_id: &'static str) -> Spec {
    Spec {
        purpose: Purpose::TASK_HANDLE,
        method: "tasks",
        target: None,
        arguments: None,
        principal: None,
        route,
        state: Some(task_id),
        lifetime_secs: 3600,
        kid: "k2",
    }
}

/// The arguments most mints are bound to.
pub const DEPLOY_ARGUMENTS: &str = r#"{"env":"prod"}"#;

fn specs() -> Vec<Spec> {
    let deploy = |state| {
        request_state(
            "tools/call",
            "deploy",
            Some(DEPLOY_ARGUMENTS),
            "alpha",
            Some(state),
        )
    };
    vec![
        // E0: a round-one state of `deploy`, minted by alpha.
        deploy("BKSTATE-E0."),
        // E1: a prompt, by beta, no arguments.
        request_state("prompts/get", "greet", None, "beta", Some("BKSTATE-E1.")),
        // E2: a resource read whose backend sent no state (the retry removes the member).
        request_state("resources/read", "file:///notes.txt", None, "alpha", None),
        // E3: expired a second ago.
        Spec {
            lifetime_secs: -1,
            ..deploy("BKSTATE-E3.")
        },
        // E4: bound to principal alice; the state holds escapes, restored byte for byte.
        Spec {
            principal: Some("alice"),
            route: "beta",
            ..deploy(r#"BKSTATE-E4. \"quoted\" caf\u00e9 \ud83d\ude00"#)
        },
        // E5: under the retired key k0.
        Spec {
            kid: "k0",
            ..deploy("BKSTATE-E5.")
        },
        // E6: under k1, which opens but no longer seals (step 2 of a rotation).
        Spec {
            kid: "k1",
            route: "beta",
            ..deploy("BKSTATE-E6.")
        },
        // E7, E8: task handles of alpha and beta.
        task_handle("alpha", "BKTASK-E7."),
        task_handle("beta", "BKTASK-E8."),
        // E9: a task handle bound to alice.
        Spec {
            principal: Some("alice"),
            ..task_handle("alpha", "BKTASK-E9.")
        },
        // E10: arguments with an integer above 2^53, compared exactly.
        request_state(
            "tools/call",
            "transfer",
            Some(r#"{"amount":9007199254740993,"to":"bob"}"#),
            "beta",
            Some("BKSTATE-E10."),
        ),
        // E11: an empty state, distinct from none.
        request_state("tools/call", "deploy", Some(DEPLOY_ARGUMENTS), "alpha", Some("")),
    ]
}

/// Every minted envelope, in placeholder order (`@E0@` is `mints()[0]`).
pub fn mints() -> &'static [Mint] {
    static MINTS: LazyLock<Vec<Mint>> = LazyLock::new(|| {
        specs()
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let expires_at = if spec.lifetime_secs >= 0 {
                    now() + Duration::from_secs(spec.lifetime_secs.unsigned_abs())
                } else {
                    now() - Duration::from_secs(spec.lifetime_secs.unsigned_abs())
                };
                let mut mint = Mint {
                    purpose: spec.purpose,
                    method: spec.method,
                    target: spec.target,
                    arguments: spec.arguments,
                    principal: spec.principal,
                    route: spec.route,
                    state: spec.state,
                    expires_at,
                    valid: spec.lifetime_secs > 0 && spec.kid != "k0",
                    kid: spec.kid,
                    envelope: String::new(),
                };
                let sealed = Sealed {
                    route: Route::new(spec.route),
                    state: spec.state.map(str::to_owned),
                    expires_at,
                };
                let sealer = Sealer::new(Arc::new(sealing_ring(spec.kid)));
                mint.envelope = sealer
                    .seal_with_nonce(spec.purpose, &mint.binding(), &sealed, [i as u8; 24])
                    .expect("sealing a fixed mint");
                mint
            })
            .collect()
    });
    &MINTS
}

/// The mint whose backend state (decoded) is `state`, if any.
pub fn mint_of_state(purpose: Purpose, state: &str) -> Option<&'static Mint> {
    mints()
        .iter()
        .find(|m| m.purpose == purpose && m.decoded_state().as_deref() == Some(state))
}

/// Replaces every `@E<n>@` placeholder by the envelope of mint `n`; other bytes are kept.
pub fn substitute(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 64);
    pieces(input, |piece| match piece {
        Piece::Text(text) => out.extend_from_slice(text),
        Piece::Mint(index) => out.extend_from_slice(mints()[index].envelope.as_bytes()),
    });
    out
}

/// The mints whose envelopes `input` names with `@E<n>@` placeholders, in order.
pub fn placeholders(input: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    pieces(input, |piece| {
        if let Piece::Mint(index) = piece {
            found.push(index);
        }
    });
    found
}

/// A part of a text with placeholders: bytes kept as they are, or the mint a placeholder names.
enum Piece<'a> {
    Text(&'a [u8]),
    Mint(usize),
}

/// Hands `each` the pieces of `input`, in order.
fn pieces<'a>(input: &'a [u8], mut each: impl FnMut(Piece<'a>)) {
    let mut rest = input;
    while let Some(at) = rest.iter().position(|&b| b == b'@') {
        each(Piece::Text(&rest[..at]));
        rest = &rest[at..];
        match placeholder(rest) {
            Some((index, len)) => {
                each(Piece::Mint(index));
                rest = &rest[len..];
            }
            None => {
                each(Piece::Text(&rest[..1]));
                rest = &rest[1..];
            }
        }
    }
    each(Piece::Text(rest));
}

/// `@E<n>@` at the start of `text`: the mint index and the placeholder's length.
fn placeholder(text: &[u8]) -> Option<(usize, usize)> {
    let digits = text.strip_prefix(b"@E")?;
    let len = digits.iter().take(2).take_while(|b| b.is_ascii_digit()).count();
    if len == 0 || digits.get(len) != Some(&b'@') {
        return None;
    }
    let index: usize = std::str::from_utf8(&digits[..len]).ok()?.parse().ok()?;
    (index < mints().len()).then_some((index, 2 + len + 1))
}
