//! The sealed envelope (format v4): what the client holds between rounds.
//!
//! An envelope carries the backend's own `requestState` (or task id), the [`Route`] of the backend
//! that minted it (its name and, if it has one, its [identity](crate::RouteIdentity)), the MRTR
//! round it belongs to, for a task handle the tool whose call created the task, and an expiry,
//! encrypted and authenticated with XChaCha20-Poly1305 under
//! the active key of a [`Keyring`]. The associated data binds it to a [`Purpose`] (a request
//! state can never be opened as a task handle, or the reverse) and to a [`Binding`]: the
//! deployment's audience, the JSON-RPC method, the target name, the call's arguments
//! ([`ArgumentsDigest`]) and, optionally, the principal. An envelope presented for another
//! deployment, method, tool, prompt, resource, set of arguments or user fails authentication
//! exactly like a tampered one.
//!
//! The byte layout is specified in `docs/envelope.md`, with test vectors that the crate's tests
//! check.
//!
//! # Formats v3 and v2
//!
//! Envelopes of format v3 (prefix `mrtr3.`, which carried no call target) still **open**, as
//! envelopes without one: a task handle sealed before the upgrade names no tool, so a relay that
//! checks task follow-ups against a policy by their tool finds none to check.
//!
//! Envelopes of format v2 (prefix `mrtr2.`, before the audience, the route identity, the round
//! and the exact decimal form of arguments) still **open**, so that those in flight at an upgrade
//! keep working: as envelopes bound to no audience (so never where an audience is configured), of
//! a route without identity, in round 1, with arguments digested in v2's form
//! ([`canonical::canonicalize_doubles`]). Nothing seals v2 any more. Opening v2 stays for at least
//! one envelope lifetime after the upgrade (the longest: a task handle's) and will be removed in
//! a later release, as a keyring rotation retires an old key.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, SystemTime};
//! use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
//! use tower_mrtr::{Keyring, Route, RouteIdentity};
//!
//! let sealer = Sealer::new(Arc::new(Keyring::generate("k1").unwrap()));
//! let now = SystemTime::now();
//! let binding = Binding::new("tools/call", Some("delete_branch"), Some("alice")).with_audience(Some("prod"));
//! let route = Route::new("git-backend").with_identity(RouteIdentity::digest("https://git.internal/mcp"));
//! let sealed = Sealed {
//!     route: route.clone(),
//!     state: Some("backend-state-123".into()),
//!     expires_at: now + Duration::from_secs(600),
//!     round: 1,
//!     call_target: None,
//! };
//! let envelope = sealer.seal(Purpose::REQUEST_STATE, &binding, &sealed).unwrap();
//! assert!(envelope.starts_with("mrtr4."));
//!
//! let opened = sealer.open(Purpose::REQUEST_STATE, &binding, &envelope, now).unwrap();
//! assert_eq!(opened.state.as_deref(), Some("backend-state-123"));
//! assert_eq!(opened.route, route); // name and identity
//! assert_eq!(opened.round, 1);
//!
//! // Bound to the tool: the same envelope does not open for another one.
//! let other = Binding::new("tools/call", Some("drop_database"), Some("alice")).with_audience(Some("prod"));
//! assert!(sealer.open(Purpose::REQUEST_STATE, &other, &envelope, now).is_err());
//! // Nor in another deployment, nor in one without an audience.
//! let staging = Binding { audience: Some("staging"), ..binding };
//! assert!(sealer.open(Purpose::REQUEST_STATE, &staging, &envelope, now).is_err());
//! assert!(sealer.open(Purpose::REQUEST_STATE, &binding.with_audience(None), &envelope, now).is_err());
//! // Nor after it expired.
//! let later = now + Duration::from_secs(601);
//! assert!(sealer.open(Purpose::REQUEST_STATE, &binding, &envelope, later).is_err());
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;

use crate::canonical::{self, CanonicalError};
use crate::keyring::Keyring;
use crate::route::{Route, RouteIdentity};

mod xchacha;

/// Text every envelope sealed today (format v4) starts with. The `.` is outside the base64url
/// alphabet, so the prefix can never be confused with encoded bytes.
pub const PREFIX: &str = "mrtr4.";

/// Version byte of the v4 header.
pub const VERSION: u8 = 4;

/// Text every envelope of format v3 starts with: they still open (see the
/// [module docs](self#formats-v3-and-v2)).
pub const V3_PREFIX: &str = "mrtr3.";

/// Version byte of the v3 header.
pub const V3_VERSION: u8 = 3;

/// Text every envelope of format v2 starts with: they still open (see the
/// [module docs](self#formats-v3-and-v2)). Version 1 (prefix `mrtr1.`) bound no arguments; its envelopes
/// are refused.
pub const V2_PREFIX: &str = "mrtr2.";

/// Version byte of the v2 header.
pub const V2_VERSION: u8 = 2;

/// Nonce length of XChaCha20-Poly1305 (192 bits: random nonces are safe at any realistic volume).
pub const NONCE_LEN: usize = 24;

/// Poly1305 tag length.
pub const TAG_LEN: usize = 16;

/// Length of a route identity in the plaintext.
const IDENTITY_LEN: usize = 32;

/// Smallest v4 plaintext: expiry (8) + round (2) + route length (2) + identity flag (1) + call
/// target flag (1) + state flag (1).
const MIN_PLAINTEXT_LEN: usize = 8 + 2 + 2 + 1 + 1 + 1;

/// Smallest v3 plaintext: v4's without the call target flag.
const MIN_V3_PLAINTEXT_LEN: usize = 8 + 2 + 2 + 1 + 1;

/// Smallest v2 plaintext: expiry (8) + route length (2) + state flag (1).
const MIN_V2_PLAINTEXT_LEN: usize = 8 + 2 + 1;

/// What an envelope stands for: the domain-separation label at the start of its associated data.
///
/// An envelope sealed for one purpose never opens for another, whatever its binding: the label is
/// authenticated with everything else, so a request state presented as a task handle fails
/// authentication like a tampered envelope. The layer seals and opens [`Purpose::REQUEST_STATE`]
/// and [`Purpose::TASK_HANDLE`]; an application that seals state of its own with a [`Sealer`]
/// (a session id, a resume token) gives it a purpose of its own with [`Purpose::custom`].
///
/// # Labels
///
/// A label must be unique to its purpose, because the label is the only thing that tells two
/// purposes apart. Two purposes with the same label open each other's envelopes whenever the
/// binding fields agree, and a binding is not chosen to keep purposes apart: a token the
/// application mints for one use would then be accepted for the other. [`Purpose::custom`]
/// therefore refuses:
///
/// * an empty label, and any byte outside visible ASCII (`0x21..=0x7e`): a label is followed by
///   `0x00` in the associated data, so a label that holds no `0x00` ends exactly there and two
///   different labels always give different associated data;
/// * a label equal to one of the library's own (`tower-mrtr/v2/request-state`,
///   `tower-mrtr/v2/task-handle`), a prefix of one, or one of them followed by more bytes, so that
///   no custom label reads as a library label cut short or extended.
///
/// It cannot see the other purposes of the same program: keep every custom label distinct, and
/// name it after the application and its format version (`my-app/v1/resume-token`). Labels that
/// start with `tower-mrtr/` are best left to this library, which may add purposes later; the
/// gateway's `tower-mrtr/v2/legacy-session` predates custom purposes and keeps its bytes so that
/// session ids sealed before still open. `docs/envelope.md` specifies the encoding.
///
/// Two purposes are equal when their labels are: the label is what the cipher sees.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, SystemTime};
/// use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
/// use tower_mrtr::{Keyring, Route};
///
/// const RESUME_TOKEN: Purpose = Purpose::custom("my-app/v1/resume-token", "resume token");
///
/// let sealer = Sealer::new(Arc::new(Keyring::generate("k1").unwrap()));
/// let binding = Binding::new("my-app/resume", None, Some("alice"));
/// let now = SystemTime::now();
/// let sealed = Sealed {
///     route: Route::new("worker-3"),
///     state: Some("cursor=42".into()),
///     expires_at: now + Duration::from_secs(60),
///     round: 0,
///     call_target: None,
/// };
/// let token = sealer.seal(RESUME_TOKEN, &binding, &sealed).unwrap();
/// let opened = sealer.open(RESUME_TOKEN, &binding, &token, now).unwrap();
/// assert_eq!(opened.state.as_deref(), Some("cursor=42"));
/// // Never a request state, even with the same binding.
/// assert!(sealer.open(Purpose::REQUEST_STATE, &binding, &token, now).is_err());
/// ```
///
/// A label that collides with the library's does not compile when the purpose is a constant:
///
/// ```compile_fail,E0080
/// use tower_mrtr::envelope::Purpose;
/// const STOLEN: Purpose = Purpose::custom("tower-mrtr/v2/request-state", "state");
/// # let _ = STOLEN;
/// ```
#[derive(Clone, Copy)]
pub struct Purpose {
    label: &'static str,
    name: &'static str,
}

/// The labels of the library's own purposes, which no custom label may collide with.
const LIBRARY_LABELS: [&str; 2] = [Purpose::REQUEST_STATE.label, Purpose::TASK_HANDLE.label];

impl Purpose {
    /// A backend's MRTR `requestState` (SEP-2322). Label `tower-mrtr/v2/request-state`.
    pub const REQUEST_STATE: Purpose = Purpose {
        label: "tower-mrtr/v2/request-state",
        name: "requestState",
    };

    /// A backend's task id (Tasks extension, SEP-2663). Label `tower-mrtr/v2/task-handle`.
    pub const TASK_HANDLE: Purpose = Purpose {
        label: "tower-mrtr/v2/task-handle",
        name: "task handle",
    };

    /// A purpose of the application's own, with domain label `label` and a human-readable `name`
    /// for its logs. See [the label rules](Purpose#labels).
    ///
    /// # Panics
    ///
    /// When [`Purpose::try_custom`] refuses the label. Declared as a `const`, a refused label is
    /// a compile error instead.
    pub const fn custom(label: &'static str, name: &'static str) -> Purpose {
        match Self::try_custom(label, name) {
            Ok(purpose) => purpose,
            Err(error) => panic!("{}", error.message()),
        }
    }

    /// [`Purpose::custom`] that returns the refusal instead of panicking.
    pub const fn try_custom(label: &'static str, name: &'static str) -> Result<Purpose, LabelError> {
        let bytes = label.as_bytes();
        if bytes.is_empty() {
            return Err(LabelError::Empty);
        }
        let mut i = 0;
        while i < bytes.len() {
            if !matches!(bytes[i], 0x21..=0x7e) {
                return Err(LabelError::NotVisibleAscii);
            }
            i += 1;
        }
        let mut i = 0;
        while i < LIBRARY_LABELS.len() {
            let reserved = LIBRARY_LABELS[i].as_bytes();
            if is_prefix(bytes, reserved) || is_prefix(reserved, bytes) {
                return Err(LabelError::Reserved);
            }
            i += 1;
        }
        Ok(Purpose { label, name })
    }

    /// The domain-separation label at the start of the associated data.
    pub const fn label(self) -> &'static [u8] {
        self.label.as_bytes()
    }

    /// What an envelope of this purpose is called in logs and, for the library's own purposes,
    /// in the uniform error a client gets (`Invalid or expired requestState`).
    pub const fn name(self) -> &'static str {
        self.name
    }
}

/// Whether `prefix` is a prefix of `bytes` (in a `const fn`, where `starts_with` is not).
const fn is_prefix(prefix: &[u8], bytes: &[u8]) -> bool {
    if prefix.len() > bytes.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if prefix[i] != bytes[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl PartialEq for Purpose {
    fn eq(&self, other: &Self) -> bool {
        self.label == other.label
    }
}

impl Eq for Purpose {}

impl std::hash::Hash for Purpose {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.label.hash(state);
    }
}

impl fmt::Debug for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Purpose").field(&self.label).finish()
    }
}

/// Why [`Purpose::try_custom`] refused a label. See [the label rules](Purpose#labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LabelError {
    /// The label is empty.
    Empty,
    /// The label holds a byte outside visible ASCII (`0x21..=0x7e`).
    NotVisibleAscii,
    /// The label equals one of the library's own labels, is a prefix of one, or starts with one.
    Reserved,
}

impl LabelError {
    const fn message(self) -> &'static str {
        match self {
            Self::Empty => "a purpose label must not be empty",
            Self::NotVisibleAscii => "a purpose label must be visible ASCII (0x21..=0x7e)",
            Self::Reserved => {
                "a purpose label must not equal, be a prefix of or extend a label of tower-mrtr's own purposes"
            }
        }
    }
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for LabelError {}

/// The request context an envelope is bound to. Never the JSON-RPC id: retries use a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The deployment's name ([`MrtrLayer::audience`](crate::MrtrLayer::audience)), when one is
    /// configured. An envelope minted with one audience opens only where the same audience is
    /// configured, and one minted without opens only where none is (absent and empty differ).
    pub audience: Option<&'a str>,
    /// JSON-RPC method, e.g. `tools/call`.
    pub method: &'a str,
    /// `params.name` (tools, prompts) or `params.uri` (resources); `None` when absent.
    pub target: Option<&'a str>,
    /// The principal, when the layer is configured to bind one and the request has one.
    pub principal: Option<&'a str>,
    /// The digest of `params.arguments` (`tools/call`, `prompts/get`), when arguments are bound.
    pub arguments: Option<ArgumentsDigest>,
}

impl<'a> Binding<'a> {
    /// A binding from method, target and principal, without audience or arguments.
    pub fn new(method: &'a str, target: Option<&'a str>, principal: Option<&'a str>) -> Self {
        Self {
            audience: None,
            method,
            target,
            principal,
            arguments: None,
        }
    }

    /// The same binding, bound to the deployment `audience` (`None`: to no audience).
    pub fn with_audience(mut self, audience: Option<&'a str>) -> Self {
        self.audience = audience;
        self
    }

    /// The same binding, also bound to a call's arguments.
    pub fn with_arguments(mut self, arguments: ArgumentsDigest) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// The fields of v4 and v3 (the same): the audience, then the fields of v2 with the
    /// exact-decimal digest.
    fn write_to(&self, out: &mut Vec<u8>) {
        write_field(out, self.audience.map(str::as_bytes));
        write_field(out, Some(self.method.as_bytes()));
        write_field(out, self.target.map(str::as_bytes));
        write_field(out, self.principal.map(str::as_bytes));
        write_field(out, self.arguments.as_ref().map(|d| &d.exact[..]));
    }

    /// The v2 fields (no audience; the digest of v2's canonical form), or `None` if this binding
    /// cannot be that of a v2 envelope: it has an audience, or arguments without a v2 digest.
    fn write_v2_to(&self, out: &mut Vec<u8>) -> Option<()> {
        if self.audience.is_some() {
            return None;
        }
        let arguments = match &self.arguments {
            None => None,
            Some(digest) => Some(&digest.doubles.as_ref()?[..]),
        };
        write_field(out, Some(self.method.as_bytes()));
        write_field(out, self.target.map(str::as_bytes));
        write_field(out, self.principal.map(str::as_bytes));
        write_field(out, arguments);
        Some(())
    }
}

/// SHA-256 of the canonical form ([`crate::canonical`]) of a call's `params.arguments`: what
/// binds an envelope to the arguments of the request that minted it, so that a retry carrying
/// other arguments does not open it.
///
/// It holds the digest of the exact-decimal form ([`canonical::canonicalize`]), which v4 and v3
/// envelopes are bound to, and, when it was computed and the arguments have one, the digest of
/// v2's form ([`canonical::canonicalize_doubles`]), without which a v2 envelope bound to
/// arguments does not open. [`ArgumentsDigest::of`] computes the first (all that sealing and
/// opening v4 and v3 need), [`ArgumentsDigest::of_with_v2`] both. (The layer computes the v2 digest
/// only for a retry that presents a v2 envelope.)
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArgumentsDigest {
    exact: [u8; 32],
    doubles: Option<[u8; 32]>,
}

impl ArgumentsDigest {
    /// The exact-decimal digest of raw JSON `arguments`: what sealing, and opening a v4 or v3
    /// envelope, need. Absent, `null` and `{}` all mean "no arguments" and digest alike. Fails
    /// if the arguments have no canonical form.
    pub fn of(arguments: Option<&str>) -> Result<Self, CanonicalError> {
        match arguments.map(str::trim).filter(|a| *a != "null") {
            None => Ok(Self::exact(*EMPTY_ARGUMENTS)),
            Some(arguments) => Ok(Self::exact(sha256(&canonical::canonicalize(arguments)?))),
        }
    }

    /// [`ArgumentsDigest::of`] and the digest of v2's form, so that the binding also opens v2
    /// envelopes (see [format v2](self#formats-v3-and-v2)). The v2 digest is left out if the arguments
    /// have no v2 form (a number beyond the range of a double).
    pub fn of_with_v2(arguments: Option<&str>) -> Result<Self, CanonicalError> {
        let arguments = arguments.map(str::trim).filter(|a| *a != "null").unwrap_or("{}");
        let exact = sha256(&canonical::canonicalize(arguments)?);
        let doubles = canonical::canonicalize_doubles(arguments)
            .ok()
            .map(|c| sha256(&c));
        Ok(Self { exact, doubles })
    }

    /// The exact-decimal digest alone, of a value the layer has parsed (and so validated)
    /// already: what sealing, and opening a v4 or v3 envelope, need.
    pub(crate) fn exact_of_value(arguments: Option<&str>) -> Result<Self, CanonicalError> {
        match arguments.filter(|a| *a != "null") {
            None => Ok(Self::exact(*EMPTY_ARGUMENTS)),
            Some(raw) => Ok(Self::exact(sha256(&canonical::canonicalize_value(raw)?))),
        }
    }

    /// Both digests of a parsed value, both required: what opening a v2 envelope needs (and the
    /// round after it, sealed as v4).
    pub(crate) fn both_of_value(arguments: Option<&str>) -> Result<Self, CanonicalError> {
        match arguments.filter(|a| *a != "null") {
            None => Ok(Self {
                exact: *EMPTY_ARGUMENTS,
                doubles: Some(*EMPTY_ARGUMENTS),
            }),
            Some(raw) => Ok(Self {
                exact: sha256(&canonical::canonicalize_value(raw)?),
                doubles: Some(sha256(&canonical::canonicalize_value_doubles(raw)?)),
            }),
        }
    }

    fn exact(exact: [u8; 32]) -> Self {
        Self { exact, doubles: None }
    }

    /// A digest from the 32 bytes of the exact-decimal digest (it opens no v2 envelope bound to
    /// arguments).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self {
            exact: bytes,
            doubles: None,
        }
    }

    /// The 32 bytes of the exact-decimal digest, which v4 and v3 envelopes are bound to.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.exact
    }

    /// The 32 bytes of the v2 digest, if computed and the arguments have a v2 form.
    pub fn v2_bytes(&self) -> Option<&[u8; 32]> {
        self.doubles.as_ref()
    }
}

/// ring's SHA-256 (BoringSSL's assembly): SHA-NI where the CPU has it, and AVX2 or SSSE3 code
/// where it does not (Skylake and Cascade Lake Xeons, say), where the `sha2` crate falls back to
/// portable code.
fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The digest of no arguments (`{}`, the same in both forms), computed once.
static EMPTY_ARGUMENTS: std::sync::LazyLock<[u8; 32]> = std::sync::LazyLock::new(|| sha256(b"{}"));

impl fmt::Debug for ArgumentsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |f: &mut fmt::Formatter<'_>, bytes: &[u8; 32]| {
            bytes.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
        };
        f.write_str("ArgumentsDigest(")?;
        hex(f, &self.exact)?;
        if let Some(doubles) = &self.doubles {
            f.write_str(", v2 ")?;
            hex(f, doubles)?;
        }
        f.write_str(")")
    }
}

/// `0x00` for absent, or `0x01 || u32 BE length || bytes`: absent and empty stay distinct, and no
/// two different field lists encode to the same bytes.
fn write_field(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        None => out.push(0),
        Some(bytes) => {
            out.push(1);
            // Lengths above u32::MAX cannot occur: bodies are bounded far below that.
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
    }
}

/// The contents of an envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// Backend that minted the state.
    pub route: Route,
    /// The backend's own state, exactly as it sent it: for a JSON string, the characters between
    /// the quotes with their escapes untouched, so that it can be put back byte for byte. `None`
    /// when the backend sent no state, which is distinct from `Some("")`.
    pub state: Option<String>,
    /// Instant after which the envelope no longer opens.
    pub expires_at: SystemTime,
    /// The MRTR round of a request state: 1 for the state of a call's first `input_required`,
    /// `r + 1` for the state answering a retry that presented round `r`. Task handles carry 0
    /// (they belong to no round), and so do the gateway's session ids; a custom purpose may use
    /// it as it likes. A v2 envelope, which carries no round, opens as round 1.
    pub round: u16,
    /// The target of the call the envelope belongs to, when the relay seals it: for a task handle,
    /// the tool named by the `tools/call` whose answer created the task (as the client named it),
    /// so that a task follow-up, which names only the task, can be checked and counted as a call
    /// of that tool. `None` for request states, whose target is bound in the associated data, for
    /// the gateway's session ids, and for envelopes of formats v3 and v2, which carry none.
    pub call_target: Option<String>,
}

impl Sealed {
    /// The contents, borrowed.
    fn contents(&self) -> Contents<'_> {
        Contents {
            route: &self.route,
            state: self.state.as_deref(),
            expires_at: self.expires_at,
            round: self.round,
            call_target: self.call_target.as_deref(),
        }
    }
}

/// What a seal encrypts, borrowed: the layer seals a backend's state straight from the answer
/// that carries it, without a copy of its own.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Contents<'a> {
    pub(crate) route: &'a Route,
    pub(crate) state: Option<&'a str>,
    pub(crate) expires_at: SystemTime,
    pub(crate) round: u16,
    pub(crate) call_target: Option<&'a str>,
}

/// What an envelope opened to, its state still in the decrypted buffer (which is wiped once the
/// caller of [`Sealer::open_with`] is done with it).
#[derive(Debug)]
pub(crate) struct Opened<'a> {
    pub(crate) route: Route,
    pub(crate) state: Option<&'a str>,
    pub(crate) expires_at: SystemTime,
    pub(crate) round: u16,
    pub(crate) call_target: Option<&'a str>,
    /// The envelope's nonce, unique to it (the header is authenticated).
    pub(crate) nonce: [u8; NONCE_LEN],
}

impl Opened<'_> {
    /// The contents, owned.
    pub(crate) fn into_sealed(self) -> Sealed {
        Sealed {
            route: self.route,
            state: self.state.map(str::to_owned),
            expires_at: self.expires_at,
            round: self.round,
            call_target: self.call_target.map(str::to_owned),
        }
    }
}

/// A sealed envelope in its binary form, before base64url: the layer encodes it straight into
/// the message that carries it.
#[derive(Debug)]
pub(crate) struct Wire {
    prefix: &'static str,
    raw: Vec<u8>,
    /// The length of the wire form, computed once.
    len: usize,
}

impl Wire {
    /// `None` only if the length overflowed, which bounded bodies never reach.
    fn new(prefix: &'static str, raw: Vec<u8>) -> Option<Self> {
        let len = prefix.len().checked_add(base64::encoded_len(raw.len(), false)?)?;
        Some(Self { prefix, raw, len })
    }

    /// The length of the wire form in bytes (it is ASCII).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes the wire form into `out`, which must be [`len`](Self::len) bytes long.
    pub(crate) fn write_to(&self, out: &mut [u8]) -> Option<()> {
        let (prefix, encoded) = out.split_at_mut_checked(self.prefix.len())?;
        prefix.copy_from_slice(self.prefix.as_bytes());
        (wire_base64().encode_slice(&self.raw, encoded).ok()? == encoded.len()).then_some(())
    }

    /// The wire form as a string.
    fn into_string(self) -> Option<String> {
        let mut wire = vec![0; self.len];
        self.write_to(&mut wire)?;
        // The prefix and the base64 alphabet are ASCII: this checks, and never fails.
        String::from_utf8(wire).ok()
    }
}

/// Seals and opens envelopes with a shared [`Keyring`].
#[derive(Clone, Debug)]
pub struct Sealer {
    keyring: Arc<Keyring>,
}

impl Sealer {
    /// A sealer over a keyring.
    pub fn new(keyring: Arc<Keyring>) -> Self {
        Self { keyring }
    }

    /// The keyring in use.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Seals `sealed` under the active key with a fresh random nonce.
    pub fn seal(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        sealed: &Sealed,
    ) -> Result<String, SealError> {
        self.seal_wire(purpose, binding, sealed.contents())?
            .into_string()
            .ok_or(SealError::Cipher)
    }

    /// Seals `contents` under the active key with a fresh random nonce, in binary form.
    pub(crate) fn seal_wire(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        contents: Contents<'_>,
    ) -> Result<Wire, SealError> {
        // The kernel's generator for every nonce, not a user-space one seeded from it: a fork or a
        // cloned VM would copy that one's state and repeat nonces under the same key.
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|_| SealError::Rng)?;
        self.seal_contents(purpose, binding, contents, nonce)
    }

    /// Seals with a caller-chosen nonce. Only for test vectors: reusing a nonce under one key
    /// breaks the cipher's guarantees.
    #[doc(hidden)]
    pub fn seal_with_nonce(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        sealed: &Sealed,
        nonce: [u8; NONCE_LEN],
    ) -> Result<String, SealError> {
        self.seal_contents(purpose, binding, sealed.contents(), nonce)?
            .into_string()
            .ok_or(SealError::Cipher)
    }

    fn seal_contents(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        sealed: Contents<'_>,
        nonce: [u8; NONCE_LEN],
    ) -> Result<Wire, SealError> {
        let route = sealed.route.as_str().as_bytes();
        let route_len = u16::try_from(route.len()).map_err(|_| SealError::RouteTooLong)?;
        let identity = sealed.route.identity();
        let state = sealed.state;
        let call_target = sealed.call_target.map(str::as_bytes);
        let call_target_len = call_target
            .map(|t| u16::try_from(t.len()).map_err(|_| SealError::CallTargetTooLong))
            .transpose()?;
        let plaintext_len = MIN_PLAINTEXT_LEN
            + route.len()
            + identity.map_or(0, |_| IDENTITY_LEN)
            + call_target.map_or(0, |t| 2 + t.len())
            + state.map_or(0, str::len);
        let write = |plaintext: &mut Vec<u8>| {
            plaintext.extend_from_slice(&unix_millis(sealed.expires_at).to_be_bytes());
            plaintext.extend_from_slice(&sealed.round.to_be_bytes());
            plaintext.extend_from_slice(&route_len.to_be_bytes());
            plaintext.extend_from_slice(route);
            push_identity(plaintext, identity);
            match (call_target, call_target_len) {
                (Some(target), Some(len)) => {
                    plaintext.push(1);
                    plaintext.extend_from_slice(&len.to_be_bytes());
                    plaintext.extend_from_slice(target);
                }
                _ => plaintext.push(0),
            }
            push_state(plaintext, state);
        };
        self.encrypt(VERSION, nonce, plaintext_len, write, |header| {
            let mut aad = aad_start(purpose, header);
            binding.write_to(&mut aad);
            Some(aad)
        })
    }

    /// Seals in format v3, with a caller-chosen nonce: only for the tests (and fuzz targets)
    /// that check that v3 envelopes still open. The call target is not sealed (v3 has none).
    /// Goes away with v3 opening.
    #[doc(hidden)]
    pub fn seal_v3_with_nonce(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        sealed: &Sealed,
        nonce: [u8; NONCE_LEN],
    ) -> Result<String, SealError> {
        let route = sealed.route.as_str().as_bytes();
        let route_len = u16::try_from(route.len()).map_err(|_| SealError::RouteTooLong)?;
        let identity = sealed.route.identity();
        let state = sealed.state.as_deref();
        let plaintext_len = MIN_V3_PLAINTEXT_LEN
            + route.len()
            + identity.map_or(0, |_| IDENTITY_LEN)
            + state.map_or(0, str::len);
        let write = |plaintext: &mut Vec<u8>| {
            plaintext.extend_from_slice(&unix_millis(sealed.expires_at).to_be_bytes());
            plaintext.extend_from_slice(&sealed.round.to_be_bytes());
            plaintext.extend_from_slice(&route_len.to_be_bytes());
            plaintext.extend_from_slice(route);
            push_identity(plaintext, identity);
            push_state(plaintext, state);
        };
        self.encrypt(V3_VERSION, nonce, plaintext_len, write, |header| {
            let mut aad = aad_start(purpose, header);
            binding.write_to(&mut aad);
            Some(aad)
        })?
        .into_string()
        .ok_or(SealError::Cipher)
    }

    /// Seals in format v2, with a caller-chosen nonce: only for the tests (and fuzz targets)
    /// that check that v2 envelopes still open. The route's identity and the round are not
    /// sealed (v2 has neither); a binding with an audience, or arguments without a v2 digest,
    /// cannot be sealed ([`SealError::NotV2`]). Goes away with v2 opening.
    #[doc(hidden)]
    pub fn seal_v2_with_nonce(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        sealed: &Sealed,
        nonce: [u8; NONCE_LEN],
    ) -> Result<String, SealError> {
        let route = sealed.route.as_str().as_bytes();
        let route_len = u16::try_from(route.len()).map_err(|_| SealError::RouteTooLong)?;
        let state = sealed.state.as_deref();
        let plaintext_len = MIN_V2_PLAINTEXT_LEN + route.len() + state.map_or(0, str::len);
        let write = |plaintext: &mut Vec<u8>| {
            plaintext.extend_from_slice(&unix_millis(sealed.expires_at).to_be_bytes());
            plaintext.extend_from_slice(&route_len.to_be_bytes());
            plaintext.extend_from_slice(route);
            push_state(plaintext, state);
        };
        self.encrypt(V2_VERSION, nonce, plaintext_len, write, |header| {
            let mut aad = aad_start(purpose, header);
            binding.write_v2_to(&mut aad)?;
            Some(aad)
        })?
        .into_string()
        .ok_or(SealError::Cipher)
    }

    /// Seals under the active key: the header of `version`, then the `plaintext_len` bytes that
    /// `plaintext` writes, encrypted in place, then the tag; returns the binary form. `aad` makes
    /// the associated data of the header, or refuses the binding.
    fn encrypt(
        &self,
        version: u8,
        nonce: [u8; NONCE_LEN],
        plaintext_len: usize,
        plaintext: impl FnOnce(&mut Vec<u8>),
        aad: impl FnOnce(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<Wire, SealError> {
        let (kid, key) = self.keyring.active();
        let header_len = 2 + kid.as_str().len() + NONCE_LEN;
        // Sized once, so that no reallocation leaves a copy of the plaintext behind.
        let mut raw = Vec::with_capacity(header_len + plaintext_len + TAG_LEN);
        raw.push(version);
        // Key ids are at most 32 bytes (checked by `KeyId::new`).
        raw.push(kid.as_str().len() as u8);
        raw.extend_from_slice(kid.as_str().as_bytes());
        raw.extend_from_slice(&nonce);
        let aad = aad(&raw).ok_or(SealError::NotV2)?;
        plaintext(&mut raw);
        debug_assert_eq!(
            raw.len(),
            header_len + plaintext_len,
            "the buffer was sized for it"
        );
        let Some(tag) = xchacha::seal_in_place(key, &nonce, &aad, &mut raw[header_len..]) else {
            zero(&mut raw);
            return Err(SealError::Cipher);
        };
        raw.extend_from_slice(&tag);
        let prefix = match version {
            V2_VERSION => V2_PREFIX,
            V3_VERSION => V3_PREFIX,
            _ => PREFIX,
        };
        Wire::new(prefix, raw).ok_or(SealError::Cipher)
    }

    /// Opens an envelope: checks format, key id, authenticity under `purpose` and `binding`, and
    /// expiry against `now`. Every failure is an [`OpenError`] whose variant is for logs only;
    /// clients must get one uniform answer.
    ///
    /// Opens v4 envelopes and, during an upgrade, v3 and v2 ones (see the
    /// [module docs](self#formats-v3-and-v2)).
    pub fn open(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        envelope: &str,
        now: SystemTime,
    ) -> Result<Sealed, OpenError> {
        self.open_with(purpose, binding, envelope, now, |opened| opened.into_sealed())
    }

    /// [`open`](Self::open), handing what opened to `f` while its state is still in the
    /// decrypted buffer, which is wiped when `f` returns: the layer puts a backend's state back
    /// into the request from there, without a copy of its own.
    pub(crate) fn open_with<R>(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        envelope: &str,
        now: SystemTime,
        f: impl FnOnce(Opened<'_>) -> R,
    ) -> Result<R, OpenError> {
        let (version, encoded) = [
            (VERSION, PREFIX),
            (V3_VERSION, V3_PREFIX),
            (V2_VERSION, V2_PREFIX),
        ]
        .into_iter()
        .find_map(|(version, prefix)| Some((version, envelope.strip_prefix(prefix)?)))
        .ok_or(OpenError::NotAnEnvelope)?;
        let mut raw = wire_base64().decode(encoded).map_err(|_| OpenError::Encoding)?;
        let (&found, rest) = raw.split_first().ok_or(OpenError::Truncated)?;
        // The version byte must be the prefix's: the prefix is not authenticated, the byte is.
        if found != version {
            return Err(OpenError::UnknownVersion(found));
        }
        let min_plaintext = match version {
            VERSION => MIN_PLAINTEXT_LEN,
            V3_VERSION => MIN_V3_PLAINTEXT_LEN,
            _ => MIN_V2_PLAINTEXT_LEN,
        };
        let (&kid_len, rest) = rest.split_first().ok_or(OpenError::Truncated)?;
        let kid_len = usize::from(kid_len);
        if rest.len() < kid_len + NONCE_LEN + TAG_LEN + min_plaintext {
            return Err(OpenError::Truncated);
        }
        let (kid, rest) = rest.split_at(kid_len);
        let nonce: [u8; NONCE_LEN] = rest
            .get(..NONCE_LEN)
            .and_then(|nonce| nonce.try_into().ok())
            .ok_or(OpenError::Truncated)?;
        let header_len = 2 + kid_len + NONCE_LEN;

        let key = self.keyring.find(kid).ok_or(OpenError::UnknownKey)?;
        let mut aad = aad_start(purpose, &raw[..header_len]);
        if version != V2_VERSION {
            // v3 and v4 bind the same fields.
            binding.write_to(&mut aad);
        } else if binding.write_v2_to(&mut aad).is_none() {
            // Bound to no audience, or to arguments this binding has no v2 digest of: what the
            // cipher would refuse, refused without it.
            return Err(OpenError::Authentication);
        }
        let plaintext = xchacha::open_in_place(key, &nonce, &aad, &mut raw[header_len..])
            .ok_or(OpenError::Authentication)?;
        let parsed = match version {
            V2_VERSION => parse_v2_plaintext(plaintext),
            _ => parse_plaintext(plaintext, version == VERSION),
        };
        let result = match parsed {
            Ok(opened) if now < opened.expires_at => Ok(f(Opened { nonce, ..opened })),
            Ok(_) => Err(OpenError::Expired),
            Err(error) => Err(error),
        };
        zero(plaintext);
        result
    }
}

/// The base64url of the wire form: unpadded, and canonical when decoding (no padding, no stray
/// bits in the last symbol). The `base64` crate's SIMD engine where the CPU has AVX2 or NEON: the
/// same bytes and the same refusals as its scalar `URL_SAFE_NO_PAD`, which it falls back to.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn wire_base64() -> &'static impl Engine {
    static ENGINE: std::sync::LazyLock<base64::engine::Simd> =
        std::sync::LazyLock::new(|| base64::engine::Simd::url_safe(base64::engine::general_purpose::NO_PAD));
    &*ENGINE
}

/// The base64url of the wire form (see the SIMD variant above): the scalar engine.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn wire_base64() -> &'static impl Engine {
    &base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// The associated data up to the binding: the label, `0x00`, the header.
fn aad_start(purpose: Purpose, header: &[u8]) -> Vec<u8> {
    let label = purpose.label();
    let mut aad = Vec::with_capacity(label.len() + 1 + header.len() + 96);
    aad.extend_from_slice(label);
    aad.push(0);
    aad.extend_from_slice(header);
    aad
}

/// The identity flag and the identity.
fn push_identity(plaintext: &mut Vec<u8>, identity: Option<&RouteIdentity>) {
    match identity {
        None => plaintext.push(0),
        Some(identity) => {
            plaintext.push(1);
            plaintext.extend_from_slice(identity.as_bytes());
        }
    }
}

/// The state flag and the state.
fn push_state(plaintext: &mut Vec<u8>, state: Option<&str>) {
    match state {
        None => plaintext.push(0),
        Some(state) => {
            plaintext.push(1);
            plaintext.extend_from_slice(state.as_bytes());
        }
    }
}

/// A v4 plaintext (expiry, round, route, identity, call target, state), or with `!v4` a v3 one,
/// which has no call target.
fn parse_plaintext(pt: &[u8], v4: bool) -> Result<Opened<'_>, OpenError> {
    let (expires_at, rest) = take_expiry(pt)?;
    let (round, rest) = take_u16(rest)?;
    let (name, rest) = take_route_name(rest)?;
    let (flag, rest) = rest.split_first().ok_or(OpenError::Malformed)?;
    let mut route = Route::new(name);
    let rest = match flag {
        0 => rest,
        1 => {
            let identity = rest.get(..IDENTITY_LEN).ok_or(OpenError::Malformed)?;
            let identity: [u8; IDENTITY_LEN] = identity.try_into().map_err(|_| OpenError::Malformed)?;
            route = route.with_identity(RouteIdentity::from_bytes(identity));
            &rest[IDENTITY_LEN..]
        }
        _ => return Err(OpenError::Malformed),
    };
    let (call_target, rest) = if v4 { take_call_target(rest)? } else { (None, rest) };
    Ok(Opened {
        route,
        state: take_state(rest)?,
        expires_at,
        round,
        call_target,
        nonce: [0; NONCE_LEN],
    })
}

/// The call target flag, then `u16` length and UTF-8 when it is `0x01`.
fn take_call_target(pt: &[u8]) -> Result<(Option<&str>, &[u8]), OpenError> {
    match pt.split_first() {
        Some((0, rest)) => Ok((None, rest)),
        Some((1, rest)) => {
            let (target, rest) = take_route_name(rest)?;
            Ok((Some(target), rest))
        }
        _ => Err(OpenError::Malformed),
    }
}

/// A v2 plaintext: expiry, route, state; it opens as round 1, its route without identity.
fn parse_v2_plaintext(pt: &[u8]) -> Result<Opened<'_>, OpenError> {
    let (expires_at, rest) = take_expiry(pt)?;
    let (name, rest) = take_route_name(rest)?;
    Ok(Opened {
        route: Route::new(name),
        state: take_state(rest)?,
        expires_at,
        round: 1,
        call_target: None,
        nonce: [0; NONCE_LEN],
    })
}

fn take_expiry(pt: &[u8]) -> Result<(SystemTime, &[u8]), OpenError> {
    let expires = pt.get(..8).ok_or(OpenError::Malformed)?;
    let expires_ms = u64::from_be_bytes(expires.try_into().map_err(|_| OpenError::Malformed)?);
    let expires_at = UNIX_EPOCH
        .checked_add(Duration::from_millis(expires_ms))
        .ok_or(OpenError::Malformed)?;
    Ok((expires_at, &pt[8..]))
}

fn take_u16(pt: &[u8]) -> Result<(u16, &[u8]), OpenError> {
    match pt {
        [high, low, rest @ ..] => Ok((u16::from_be_bytes([*high, *low]), rest)),
        _ => Err(OpenError::Malformed),
    }
}

/// A name (the route's, or the call target): `u16` length, then that many bytes of UTF-8.
fn take_route_name(pt: &[u8]) -> Result<(&str, &[u8]), OpenError> {
    let (len, rest) = take_u16(pt)?;
    let name = rest.get(..usize::from(len)).ok_or(OpenError::Malformed)?;
    let name = std::str::from_utf8(name).map_err(|_| OpenError::Malformed)?;
    Ok((name, &rest[usize::from(len)..]))
}

/// The state flag and the rest: `0x00` and nothing (no state), or `0x01` and UTF-8.
fn take_state(pt: &[u8]) -> Result<Option<&str>, OpenError> {
    match pt.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, bytes)) => Ok(Some(
            std::str::from_utf8(bytes).map_err(|_| OpenError::Malformed)?,
        )),
        _ => Err(OpenError::Malformed),
    }
}

fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Best-effort wipe of a plaintext buffer (it may hold a backend's secrets).
fn zero(buf: &mut [u8]) {
    zeroize::Zeroize::zeroize(buf);
}

/// Why sealing failed. Sealing failures are the layer's own faults; the layer answers the client
/// with an internal error and never the unsealed state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SealError {
    /// The operating system's random number generator failed.
    Rng,
    /// A route is longer than 65535 bytes.
    RouteTooLong,
    /// A call target is longer than 65535 bytes.
    CallTargetTooLong,
    /// The cipher refused the input (plaintext beyond its limits).
    Cipher,
    /// [`Sealer::seal_v2_with_nonce`]: the binding has an audience, or arguments without a v2
    /// digest, which format v2 cannot bind.
    NotV2,
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rng => "random number generator failed",
            Self::RouteTooLong => "route longer than 65535 bytes",
            Self::CallTargetTooLong => "call target longer than 65535 bytes",
            Self::Cipher => "cipher refused the plaintext",
            Self::NotV2 => "format v2 binds no audience and only arguments with a v2 digest",
        })
    }
}

impl std::error::Error for SealError {}

/// Why an envelope did not open. For logs and metrics only: clients get one uniform error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenError {
    /// Longer than the configured maximum (checked by the layer before any decoding).
    TooLong,
    /// Starts with none of [`PREFIX`], [`V3_PREFIX`] and [`V2_PREFIX`].
    NotAnEnvelope,
    /// Not canonical unpadded base64url.
    Encoding,
    /// Too short to hold a header, a tag and a minimal plaintext.
    Truncated,
    /// A header version byte other than its prefix's (`4` under `mrtr4.`, `3` under `mrtr3.`,
    /// `2` under `mrtr2.`).
    UnknownVersion(u8),
    /// Sealed under a key id the keyring does not hold (retired, or never known).
    UnknownKey,
    /// Authentication failed: tampered, or bound to another purpose, audience, method, target,
    /// arguments or principal (the cipher cannot tell these apart, by design).
    Authentication,
    /// Authentic but not a plaintext of its version (would mean a key was shared with another
    /// format).
    Malformed,
    /// Authentic but past its expiry.
    Expired,
}

impl OpenError {
    /// A short, stable reason label for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLong => "too_long",
            Self::NotAnEnvelope => "not_an_envelope",
            Self::Encoding => "encoding",
            Self::Truncated => "truncated",
            Self::UnknownVersion(_) => "unknown_version",
            Self::UnknownKey => "unknown_key",
            Self::Authentication => "authentication",
            Self::Malformed => "malformed",
            Self::Expired => "expired",
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownVersion(v) => write!(f, "unknown envelope version {v}"),
            Self::Authentication => {
                f.write_str(
                    "authentication failed: tampered, or bound to another purpose, audience, method, target, arguments or principal",
                )
            }
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for OpenError {}

#[cfg(test)]
mod tests;
