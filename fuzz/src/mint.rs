//! Fixed keys, a fixed clock and a table of envelopes minted from them, so that every input
//! reproduces a crash by itself.
//!
//! Inputs name the minted envelopes with placeholders: `@E0@` … `@E17@` in an input stand for
//! [`mints()`]`[0..]`'s envelopes (format v4, what the relay seals today), `@P0@` … for the same
//! mint sealed in the previous format, v3 (without its call target; v3 envelopes still open), and
//! `@V0@` … for the same mint sealed in format v2 where v2 can hold it (no audience, no route
//! identity, round 1; v2 envelopes still open too).
//! Each one is valid for exactly one binding (audience, method, target, arguments, principal) and
//! purpose, or deliberately invalid (expired, under a retired key, at the round cap).
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
use tower_mrtr::{Clock, Keyring, Route, RouteIdentity};

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
    /// The deployment it was minted for.
    pub audience: Option<&'static str>,
    /// The backend that minted the state.
    pub route: &'static str,
    /// The identity of that backend's route, if it has one.
    pub identity: Option<RouteIdentity>,
    /// The round sealed in it (request states from 1; task handles 0).
    pub round: u16,
    /// The tool sealed in a task handle (v4): that of the `tools/call` that created the task.
    pub call_target: Option<&'static str>,
    /// The backend's state, raw (between the quotes, escapes kept).
    pub state: Option<&'static str>,
    /// When it expires.
    pub expires_at: SystemTime,
    /// Whether it still opens at [`now()`] under [`relay_keyring()`].
    pub valid: bool,
    /// The key it is sealed under.
    pub kid: &'static str,
    /// The envelope text (format v4).
    pub envelope: String,
    /// The same contents and binding sealed in format v3 (which holds no call target).
    pub v3_envelope: String,
    /// The same contents and binding sealed in format v2, where v2 can hold them.
    pub v2_envelope: Option<String>,
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
            .then(|| ArgumentsDigest::of_with_v2(self.arguments).expect("mint arguments are canonical"))
    }

    /// The route sealed in it, name and identity.
    pub fn route(&self) -> Route {
        let route = Route::new(self.route);
        match self.identity {
            Some(identity) => route.with_identity(identity),
            None => route,
        }
    }

    /// Whether `text` is this mint's envelope: `Some(4)` for its v4 one, `Some(3)` and `Some(2)`
    /// for its v3 and v2 twins.
    pub fn version_of(&self, text: &str) -> Option<u8> {
        if self.envelope == text {
            Some(4)
        } else if self.v3_envelope == text {
            Some(3)
        } else if self.v2_envelope.as_deref() == Some(text) {
            Some(2)
        } else {
            None
        }
    }

    /// What opening its envelope of `version` gives: a v3 or v2 one without a call target, a v2
    /// one as round 1, without identity.
    pub fn sealed(&self, version: u8) -> Sealed {
        Sealed {
            route: if version == 2 {
                Route::new(self.route)
            } else {
                self.route()
            },
            state: self.state.map(str::to_owned),
            expires_at: self.expires_at,
            round: if version == 2 { 1 } else { self.round },
            call_target: if version == 4 {
                self.call_target.map(str::to_owned)
            } else {
                None
            },
        }
    }

    /// The binding the relay computes for a request matching this mint (arguments bound).
    pub fn binding(&self) -> Binding<'static> {
        let binding = Binding::new(self.method, self.target, self.principal).with_audience(self.audience);
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
    audience: Option<&'static str>,
    route: &'static str,
    identity: bool,
    round: u16,
    state: Option<&'static str>,
    call_target: Option<&'static str>,
    lifetime_secs: i64,
    kid: &'static str,
}

/// The identity the mints with one give their route.
pub fn alpha_identity() -> RouteIdentity {
    RouteIdentity::digest("https://alpha.internal/mcp")
}

/// The audience the mints with one were minted for.
pub const AUDIENCE: &str = "prod";

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
        audience: None,
        route,
        identity: false,
        round: 1,
        state,
        call_target: None,
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
        audience: None,
        route,
        identity: false,
        round: 0,
        state: Some(task_id),
        // The tool of the call that created the task, as the relay seals it.
        call_target: Some("deploy"),
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
        // E7, E8: task handles of alpha and beta; E8's call named no tool.
        task_handle("alpha", "BKTASK-E7."),
        Spec {
            call_target: None,
            ..task_handle("beta", "BKTASK-E8.")
        },
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
        // E12: minted for the audience `prod` (opens only where the relay has that audience).
        Spec {
            audience: Some(AUDIENCE),
            ..deploy("BKSTATE-E12.")
        },
        // E13: alpha's route with an identity (the scripted proxy reports the pinned route).
        Spec {
            identity: true,
            ..deploy("BKSTATE-E13.")
        },
        // E14: round 15, one below the default cap: opens, and the next round is 16.
        Spec {
            round: 15,
            ..deploy("BKSTATE-E14.")
        },
        // E15: round 16, the default cap: refused before the backend.
        Spec {
            round: 16,
            ..deploy("BKSTATE-E15.")
        },
        // E16: a task handle minted for the audience `prod`.
        Spec {
            audience: Some(AUDIENCE),
            ..task_handle("beta", "BKTASK-E16.")
        },
        // E17: arguments whose numbers only exact decimals tell apart (9007199254740993.0 is
        // not 9007199254740992, 100.000000000000001 is not 100).
        request_state(
            "tools/call",
            "transfer",
            Some(r#"{"amount":100.000000000000001,"id":9007199254740993.0}"#),
            "beta",
            Some("BKSTATE-E17."),
        ),
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
                    audience: spec.audience,
                    route: spec.route,
                    identity: spec.identity.then(alpha_identity),
                    round: spec.round,
                    call_target: spec.call_target,
                    state: spec.state,
                    expires_at,
                    valid: spec.lifetime_secs > 0 && spec.kid != "k0",
                    kid: spec.kid,
                    envelope: String::new(),
                    v3_envelope: String::new(),
                    v2_envelope: None,
                };
                let sealer = Sealer::new(Arc::new(sealing_ring(spec.kid)));
                // v4 under nonce 0xc0 + i; the v3 twin under nonce 0x80 + i and the v2 twin under
                // nonce i, as the mints were sealed before v4 and before v3 (so seeds holding those
                // envelopes written out still name a mint).
                mint.envelope = sealer
                    .seal_with_nonce(
                        spec.purpose,
                        &mint.binding(),
                        &mint.sealed(4),
                        [0xc0 + i as u8; 24],
                    )
                    .expect("sealing a fixed mint");
                mint.v3_envelope = sealer
                    .seal_v3_with_nonce(
                        spec.purpose,
                        &mint.binding(),
                        &mint.sealed(3),
                        [0x80 + i as u8; 24],
                    )
                    .expect("sealing a fixed v3 mint");
                let v2_fits = spec.audience.is_none() && !spec.identity && spec.round <= 1;
                mint.v2_envelope = v2_fits.then(|| {
                    sealer
                        .seal_v2_with_nonce(spec.purpose, &mint.binding(), &mint.sealed(2), [i as u8; 24])
                        .expect("sealing a fixed v2 mint")
                });
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

/// Replaces every `@E<n>@` placeholder by the envelope of mint `n`, every `@P<n>@` by its v3
/// twin and every `@V<n>@` by its v2 twin; other bytes are kept.
pub fn substitute(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 64);
    pieces(input, |piece| match piece {
        Piece::Text(text) => out.extend_from_slice(text),
        Piece::Mint(index) => out.extend_from_slice(mints()[index].envelope.as_bytes()),
        Piece::Twin(envelope) => out.extend_from_slice(envelope.as_bytes()),
    });
    out
}

/// The mints whose envelopes `input` names with placeholders (`@E<n>@`, `@P<n>@`, `@V<n>@`), in
/// order.
pub fn placeholders(input: &[u8]) -> Vec<usize> {
    placeholder_envelopes(input)
        .into_iter()
        .map(|(index, _)| index)
        .collect()
}

/// The mints `input` names with placeholders, with the envelope each placeholder stands for.
pub fn placeholder_envelopes(input: &[u8]) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    pieces(input, |piece| match piece {
        Piece::Mint(index) => found.push((index, mints()[index].envelope.as_str())),
        Piece::Twin(envelope) => {
            let index = mints()
                .iter()
                .position(|m| m.v3_envelope == envelope || m.v2_envelope.as_deref() == Some(envelope))
                .expect("a twin placeholder names a mint");
            found.push((index, envelope));
        }
        Piece::Text(_) => {}
    });
    found
}

/// A part of a text with placeholders: bytes kept as they are, the mint an `@E<n>@` names, or
/// the v3 or v2 envelope an `@P<n>@` or `@V<n>@` names.
enum Piece<'a> {
    Text(&'a [u8]),
    Mint(usize),
    Twin(&'static str),
}

/// Hands `each` the pieces of `input`, in order.
fn pieces<'a>(input: &'a [u8], mut each: impl FnMut(Piece<'a>)) {
    let mut rest = input;
    while let Some(at) = rest.iter().position(|&b| b == b'@') {
        each(Piece::Text(&rest[..at]));
        rest = &rest[at..];
        match placeholder(rest) {
            Some((index, len)) if rest[1] == b'V' => {
                // A mint without a v2 twin: the placeholder stays text.
                match mints()[index].v2_envelope.as_deref() {
                    Some(envelope) => each(Piece::Twin(envelope)),
                    None => each(Piece::Text(&rest[..len])),
                }
                rest = &rest[len..];
            }
            Some((index, len)) if rest[1] == b'P' => {
                each(Piece::Twin(mints()[index].v3_envelope.as_str()));
                rest = &rest[len..];
            }
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

/// `@E<n>@`, `@P<n>@` or `@V<n>@` at the start of `text`: the mint index and the placeholder's
/// length.
fn placeholder(text: &[u8]) -> Option<(usize, usize)> {
    let digits = text
        .strip_prefix(b"@E")
        .or_else(|| text.strip_prefix(b"@P"))
        .or_else(|| text.strip_prefix(b"@V"))?;
    let len = digits.iter().take(2).take_while(|b| b.is_ascii_digit()).count();
    if len == 0 || digits.get(len) != Some(&b'@') {
        return None;
    }
    let index: usize = std::str::from_utf8(&digits[..len]).ok()?.parse().ok()?;
    (index < mints().len()).then_some((index, 2 + len + 1))
}
