//! The sealed envelope (format v2): what the client holds between rounds.
//!
//! An envelope carries the backend's own `requestState` (or task id), the [`Route`] of the backend
//! that minted it and an expiry, encrypted and authenticated with XChaCha20-Poly1305 under the
//! active key of a [`Keyring`]. The associated data binds it to a [`Purpose`] (a request state can
//! never be opened as a task handle, or the reverse) and to a [`Binding`]: the JSON-RPC method, the
//! target name, the call's arguments ([`ArgumentsDigest`]) and, optionally, the principal. An
//! envelope presented for another method, tool, prompt, resource, set of arguments or user fails
//! authentication exactly like a tampered one.
//!
//! The byte layout is specified in `docs/envelope.md`, with test vectors that the crate's tests
//! check.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, SystemTime};
//! use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
//! use tower_mrtr::{Keyring, Route};
//!
//! let sealer = Sealer::new(Arc::new(Keyring::generate("k1").unwrap()));
//! let now = SystemTime::now();
//! let binding = Binding::new("tools/call", Some("delete_branch"), Some("alice"));
//! let sealed = Sealed {
//!     route: Route::new("git-backend"),
//!     state: Some("backend-state-123".into()),
//!     expires_at: now + Duration::from_secs(600),
//! };
//! let envelope = sealer.seal(Purpose::REQUEST_STATE, &binding, &sealed).unwrap();
//! assert!(envelope.starts_with("mrtr2."));
//!
//! let opened = sealer.open(Purpose::REQUEST_STATE, &binding, &envelope, now).unwrap();
//! assert_eq!(opened.state.as_deref(), Some("backend-state-123"));
//! assert_eq!(opened.route.as_str(), "git-backend");
//!
//! // Bound to the tool: the same envelope does not open for another one.
//! let other = Binding::new("tools/call", Some("drop_database"), Some("alice"));
//! assert!(sealer.open(Purpose::REQUEST_STATE, &other, &envelope, now).is_err());
//! // Nor after it expired.
//! let later = now + Duration::from_secs(601);
//! assert!(sealer.open(Purpose::REQUEST_STATE, &binding, &envelope, later).is_err());
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Generate, Payload};

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::canonical::{
    CanonicalError, canonicalize_doubles as canonicalize, canonicalize_value_doubles as canonicalize_value,
};
use crate::keyring::Keyring;
use crate::route::Route;

/// Text every v2 envelope starts with. The `.` is outside the base64url alphabet, so the prefix
/// can never be confused with encoded bytes.
pub const PREFIX: &str = "mrtr2.";

/// Version byte of the v2 header. Version 1 (prefix `mrtr1.`) bound no arguments; its envelopes
/// are refused.
pub const VERSION: u8 = 2;

/// Nonce length of XChaCha20-Poly1305 (192 bits: random nonces are safe at any realistic volume).
pub const NONCE_LEN: usize = 24;

/// Poly1305 tag length.
pub const TAG_LEN: usize = 16;

/// Smallest plaintext: expiry (8) + route length (2) + state flag (1).
const MIN_PLAINTEXT_LEN: usize = 8 + 2 + 1;

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
    /// A binding from method, target and principal, without arguments.
    pub fn new(method: &'a str, target: Option<&'a str>, principal: Option<&'a str>) -> Self {
        Self {
            method,
            target,
            principal,
            arguments: None,
        }
    }

    /// The same binding, also bound to a call's arguments.
    pub fn with_arguments(mut self, arguments: ArgumentsDigest) -> Self {
        self.arguments = Some(arguments);
        self
    }

    fn write_to(&self, out: &mut Vec<u8>) {
        write_field(out, Some(self.method.as_bytes()));
        write_field(out, self.target.map(str::as_bytes));
        write_field(out, self.principal.map(str::as_bytes));
        write_field(out, self.arguments.as_ref().map(|d| &d.0[..]));
    }
}

/// SHA-256 of the canonical form ([`crate::canonical`]) of a call's `params.arguments`: what
/// binds an envelope to the arguments of the request that minted it, so that a retry carrying
/// other arguments does not open it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArgumentsDigest([u8; 32]);

impl ArgumentsDigest {
    /// The digest of raw JSON `arguments`. Absent, `null` and `{}` all mean "no arguments" and
    /// digest alike.
    pub fn of(arguments: Option<&str>) -> Result<Self, CanonicalError> {
        let arguments = arguments.map(str::trim).filter(|a| *a != "null").unwrap_or("{}");
        let canonical = canonicalize(arguments)?;
        Ok(Self(Sha256::digest(&canonical).into()))
    }

    /// [`ArgumentsDigest::of`] of a value the layer has parsed (and so validated) already.
    pub(crate) fn of_value(arguments: Option<&RawValue>) -> Result<Self, CanonicalError> {
        match arguments.filter(|a| a.get() != "null") {
            None => Ok(*EMPTY_ARGUMENTS),
            Some(raw) => Ok(Self(Sha256::digest(&canonicalize_value(raw)?).into())),
        }
    }

    /// A digest from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The digest of no arguments (`{}`), computed once.
static EMPTY_ARGUMENTS: std::sync::LazyLock<ArgumentsDigest> =
    std::sync::LazyLock::new(|| ArgumentsDigest(Sha256::digest(b"{}").into()));

impl fmt::Debug for ArgumentsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArgumentsDigest(")?;
        for byte in &self.0 {
            write!(f, "{byte:02x}")?;
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
        let nonce = XNonce::try_generate().map_err(|_| SealError::Rng)?;
        self.seal_with_nonce(purpose, binding, sealed, nonce.into())
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
        let (kid, cipher) = self.keyring.active();
        let route = sealed.route.as_str().as_bytes();
        let route_len = u16::try_from(route.len()).map_err(|_| SealError::RouteTooLong)?;
        let expires_ms = unix_millis(sealed.expires_at);

        let state_len = sealed.state.as_ref().map_or(0, String::len);
        let mut plaintext = Vec::with_capacity(MIN_PLAINTEXT_LEN + route.len() + state_len);
        plaintext.extend_from_slice(&expires_ms.to_be_bytes());
        plaintext.extend_from_slice(&route_len.to_be_bytes());
        plaintext.extend_from_slice(route);
        match &sealed.state {
            None => plaintext.push(0),
            Some(state) => {
                plaintext.push(1);
                plaintext.extend_from_slice(state.as_bytes());
            }
        }

        let mut header = Vec::with_capacity(2 + kid.as_str().len() + NONCE_LEN);
        header.push(VERSION);
        // Key ids are at most 32 bytes (checked by `KeyId::new`).
        header.push(kid.as_str().len() as u8);
        header.extend_from_slice(kid.as_str().as_bytes());
        header.extend_from_slice(&nonce);

        let aad = associated_data(purpose, &header, binding);
        let ciphertext = cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: &plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| SealError::Cipher)?;
        zero(&mut plaintext);

        header.extend_from_slice(&ciphertext);
        let mut wire = String::with_capacity(PREFIX.len() + header.len().div_ceil(3) * 4);
        wire.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(&header, &mut wire);
        Ok(wire)
    }

    /// Opens an envelope: checks format, key id, authenticity under `purpose` and `binding`, and
    /// expiry against `now`. Every failure is an [`OpenError`] whose variant is for logs only;
    /// clients must get one uniform answer.
    pub fn open(
        &self,
        purpose: Purpose,
        binding: &Binding<'_>,
        envelope: &str,
        now: SystemTime,
    ) -> Result<Sealed, OpenError> {
        let encoded = envelope.strip_prefix(PREFIX).ok_or(OpenError::NotAnEnvelope)?;
        let raw = URL_SAFE_NO_PAD.decode(encoded).map_err(|_| OpenError::Encoding)?;
        let (&version, rest) = raw.split_first().ok_or(OpenError::Truncated)?;
        if version != VERSION {
            return Err(OpenError::UnknownVersion(version));
        }
        let (&kid_len, rest) = rest.split_first().ok_or(OpenError::Truncated)?;
        let kid_len = usize::from(kid_len);
        if rest.len() < kid_len + NONCE_LEN + TAG_LEN + MIN_PLAINTEXT_LEN {
            return Err(OpenError::Truncated);
        }
        let (kid, rest) = rest.split_at(kid_len);
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let header_len = 2 + kid_len + NONCE_LEN;
        let header = &raw[..header_len];

        let cipher = self.keyring.find(kid).ok_or(OpenError::UnknownKey)?;
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| OpenError::Truncated)?;
        let aad = associated_data(purpose, header, binding);
        let mut plaintext = cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| OpenError::Authentication)?;
        let parsed = parse_plaintext(&plaintext);
        zero(&mut plaintext);
        let sealed = parsed?;
        if now >= sealed.expires_at {
            return Err(OpenError::Expired);
        }
        Ok(sealed)
    }
}

fn associated_data(purpose: Purpose, header: &[u8], binding: &Binding<'_>) -> Vec<u8> {
    let label = purpose.label();
    let mut aad = Vec::with_capacity(label.len() + 1 + header.len() + 64);
    aad.extend_from_slice(label);
    aad.push(0);
    aad.extend_from_slice(header);
    binding.write_to(&mut aad);
    aad
}

fn parse_plaintext(pt: &[u8]) -> Result<Sealed, OpenError> {
    let expires = pt.get(..8).ok_or(OpenError::Malformed)?;
    let expires_ms = u64::from_be_bytes(expires.try_into().map_err(|_| OpenError::Malformed)?);
    let route_len = pt.get(8..10).ok_or(OpenError::Malformed)?;
    let route_len = usize::from(u16::from_be_bytes([route_len[0], route_len[1]]));
    let route = pt.get(10..10 + route_len).ok_or(OpenError::Malformed)?;
    let route = std::str::from_utf8(route).map_err(|_| OpenError::Malformed)?;
    let (flag, state) = pt
        .get(10 + route_len..)
        .and_then(<[u8]>::split_first)
        .ok_or(OpenError::Malformed)?;
    let state = match (flag, state) {
        (0, []) => None,
        (1, bytes) => Some(
            std::str::from_utf8(bytes)
                .map_err(|_| OpenError::Malformed)?
                .to_owned(),
        ),
        _ => return Err(OpenError::Malformed),
    };
    let expires_at = UNIX_EPOCH
        .checked_add(Duration::from_millis(expires_ms))
        .ok_or(OpenError::Malformed)?;
    Ok(Sealed {
        route: Route::new(route),
        state,
        expires_at,
    })
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
    /// The cipher refused the input (plaintext beyond its limits).
    Cipher,
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rng => "random number generator failed",
            Self::RouteTooLong => "route longer than 65535 bytes",
            Self::Cipher => "cipher refused the plaintext",
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
    /// Does not start with [`PREFIX`].
    NotAnEnvelope,
    /// Not canonical unpadded base64url.
    Encoding,
    /// Too short to hold a header, a tag and a minimal plaintext.
    Truncated,
    /// A header version this build does not know.
    UnknownVersion(u8),
    /// Sealed under a key id the keyring does not hold (retired, or never known).
    UnknownKey,
    /// Authentication failed: tampered, or bound to another purpose, method, target, arguments or
    /// principal (the cipher cannot tell these apart, by design).
    Authentication,
    /// Authentic but not a v1 plaintext (would mean a key was shared with another format).
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
                    "authentication failed: tampered, or bound to another purpose, method, target, arguments or principal",
                )
            }
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for OpenError {}

#[cfg(test)]
mod tests;
