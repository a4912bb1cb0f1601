//! Sealing keys: a [`Keyring`] of 32-byte keys, each named by a [`KeyId`].
//!
//! One key is *active* and seals every new envelope; every key in the ring opens envelopes that
//! name it. That split is what makes rotation safe across replicas:
//!
//! 1. add the new key to every replica as open-only (`old,new` with `old` first, so still active);
//! 2. once every replica has it, make it active (`new,old`);
//! 3. after the longest envelope lifetime has passed, drop the old key (`new`).
//!
//! At no step can a replica receive an envelope sealed under a key it does not hold.
//!
//! Keys are zeroised when the ring is dropped and never printed by `Debug`.
//!
//! # Example
//!
//! ```
//! use tower_mrtr::Keyring;
//!
//! // The format of `MRTR_KEYS`: `kid:base64url-key` pairs separated by commas, active key first.
//! let ring: Keyring = "k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8,\
//!                      k1:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
//!     .parse()
//!     .unwrap();
//! assert_eq!(ring.active_key_id().as_str(), "k2");
//! assert_eq!(ring.len(), 2);
//! // Debug never shows key material.
//! assert!(!format!("{ring:?}").contains("AAECAwQ"));
//!
//! // A fresh entry for configuration, e.g. `MRTR_KEYS=$(mrtr-gateway --generate-key k3)`.
//! let entry = tower_mrtr::keyring::generate_entry("k3").unwrap();
//! let ring: Keyring = entry.parse().unwrap();
//! assert_eq!(ring.active_key_id().as_str(), "k3");
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use zeroize::Zeroizing;

/// Length of every key, in bytes.
pub const KEY_LEN: usize = 32;

/// Longest accepted key id, in bytes.
pub const MAX_KEY_ID_LEN: usize = 32;

/// The public name of a key. It travels in every envelope header so that the right key can be
/// picked without trial decryption.
///
/// A key id is 1 to [`MAX_KEY_ID_LEN`] ASCII letters, digits, `-`, `_` or `.`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeyId(Box<str>);

impl KeyId {
    /// Checks and wraps a key id.
    pub fn new(id: &str) -> Result<Self, KeyringError> {
        let valid_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
        if id.is_empty() || id.len() > MAX_KEY_ID_LEN || !id.bytes().all(valid_char) {
            return Err(KeyringError::InvalidKeyId(id.chars().take(40).collect()));
        }
        Ok(Self(id.into()))
    }

    /// The key id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// 32 bytes of secret key material, zeroised on drop and redacted in `Debug`.
///
/// The bytes live on the heap, written in place: generating, decoding or encoding a key leaves no
/// copy of it on the stack.
pub struct Key(Box<Zeroizing<[u8; KEY_LEN]>>);

impl Key {
    /// Wraps raw key bytes. (The caller's array is a copy this type cannot wipe.)
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let mut key = Self::zeroed();
        key.0.copy_from_slice(&bytes);
        key
    }

    fn zeroed() -> Self {
        Self(Box::new(Zeroizing::new([0u8; KEY_LEN])))
    }

    /// A new random key from the operating system's CSPRNG, written straight into its final
    /// place.
    pub fn generate() -> Result<Self, KeyringError> {
        let mut key = Self::zeroed();
        getrandom::fill(&mut key.0[..]).map_err(|_| KeyringError::Rng)?;
        Ok(key)
    }

    /// Decodes a base64url key (padding optional). The standard alphabet is not accepted, so one
    /// configuration string has exactly one meaning.
    pub fn from_base64url(text: &str) -> Result<Self, KeyringError> {
        let engine = if text.ends_with('=') {
            &URL_SAFE
        } else {
            &URL_SAFE_NO_PAD
        };
        let decoded = Zeroizing::new(
            engine
                .decode(text.trim())
                .map_err(|_| KeyringError::InvalidKeyEncoding)?,
        );
        if decoded.len() != KEY_LEN {
            return Err(KeyringError::InvalidKeyLength(decoded.len()));
        }
        // All zeros or all one byte: a placeholder or a broken generator, not a secret.
        if decoded.iter().all(|&b| b == decoded[0]) {
            return Err(KeyringError::WeakKey);
        }
        let mut key = Self::zeroed();
        key.0.copy_from_slice(&decoded);
        Ok(key)
    }

    /// The key bytes, borrowed where they live.
    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The key as unpadded base64url, for writing configuration. The returned string is zeroised
    /// on drop.
    pub fn to_base64url(&self) -> Zeroizing<String> {
        // Encoded from the slice: `encode(*self.0)` would copy the array onto the stack first.
        let mut out = Zeroizing::new(String::with_capacity(KEY_LEN.div_ceil(3) * 4));
        URL_SAFE_NO_PAD.encode_string(&self.0[..], &mut out);
        out
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// One key of a ring.
struct Entry {
    id: KeyId,
    // Zeroised on drop. The cipher derives a subkey from it per envelope (XChaCha20), so there is
    // no per-key cipher state to keep.
    key: Key,
}

/// A set of keys: the first seals, all of them open. See the [module docs](crate::keyring).
pub struct Keyring {
    entries: Vec<Entry>,
}

impl Keyring {
    /// A ring with a single key, which is active.
    pub fn new(id: KeyId, key: Key) -> Self {
        Self {
            entries: vec![Self::entry(id, key)],
        }
    }

    /// A ring holding one freshly generated key under `id`. Envelopes sealed with it can only be
    /// opened by this process, so it suits tests and demos, not replicated deployments.
    pub fn generate(id: &str) -> Result<Self, KeyringError> {
        Ok(Self::new(KeyId::new(id)?, Key::generate()?))
    }

    /// Adds an open-only key (step 1 of a rotation). Fails if the id is already in the ring, or
    /// if another id already holds the same key bytes (one key under two ids would make a
    /// retired id live on).
    pub fn with_key(mut self, id: KeyId, key: Key) -> Result<Self, KeyringError> {
        if self.entries.iter().any(|e| e.id == id) {
            return Err(KeyringError::DuplicateKeyId(id.to_string()));
        }
        if let Some(other) = self.entries.iter().find(|e| e.key.0[..] == key.0[..]) {
            return Err(KeyringError::DuplicateKey {
                id: id.to_string(),
                other: other.id.to_string(),
            });
        }
        self.entries.push(Self::entry(id, key));
        Ok(self)
    }

    /// Makes an existing key the active one (step 2 of a rotation).
    pub fn with_active(mut self, id: &str) -> Result<Self, KeyringError> {
        let pos = self
            .entries
            .iter()
            .position(|e| e.id.as_str() == id)
            .ok_or_else(|| KeyringError::UnknownKeyId(id.to_string()))?;
        let entry = self.entries.remove(pos);
        self.entries.insert(0, entry);
        Ok(self)
    }

    /// Removes a key (step 3 of a rotation). The active key cannot be removed.
    pub fn without_key(mut self, id: &str) -> Result<Self, KeyringError> {
        match self.entries.iter().position(|e| e.id.as_str() == id) {
            Some(0) => Err(KeyringError::RemoveActive(id.to_string())),
            Some(pos) => {
                self.entries.remove(pos);
                Ok(self)
            }
            None => Err(KeyringError::UnknownKeyId(id.to_string())),
        }
    }

    /// The id of the key that seals.
    pub fn active_key_id(&self) -> &KeyId {
        &self.entries[0].id
    }

    /// Every key id, active first.
    pub fn key_ids(&self) -> impl Iterator<Item = &KeyId> {
        self.entries.iter().map(|e| &e.id)
    }

    /// Number of keys in the ring (never zero).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Writes the ring back in the `kid:base64url,...` format, active key first. The string holds
    /// secrets and is zeroised on drop.
    pub fn to_config_string(&self) -> Zeroizing<String> {
        let mut out = Zeroizing::new(String::new());
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(e.id.as_str());
            out.push(':');
            out.push_str(&e.key.to_base64url());
        }
        out
    }

    pub(crate) fn active(&self) -> (&KeyId, &Key) {
        let e = &self.entries[0];
        (&e.id, &e.key)
    }

    pub(crate) fn find(&self, id: &[u8]) -> Option<&Key> {
        self.entries
            .iter()
            .find(|e| e.id.as_str().as_bytes() == id)
            .map(|e| &e.key)
    }

    fn entry(id: KeyId, key: Key) -> Entry {
        Entry { id, key }
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("active", self.active_key_id())
            .field("key_ids", &self.key_ids().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A keyring that can be replaced while the layer runs: key rotation without a restart.
///
/// Cheap to clone (one `Arc`); reading the current keyring is a lock-free atomic load
/// ([`arc_swap`]). Every request reads the keyring once, when it arrives, and uses that one to
/// the end: a request in flight (a long SSE stream included) finishes with the keys it started
/// with, and the keyring it holds is dropped (and zeroised) when the last such request ends.
///
/// ```
/// use tower_mrtr::{Keyring, KeyringHandle, MrtrLayer};
///
/// let handle = KeyringHandle::new(Keyring::generate("k1").unwrap());
/// let layer = MrtrLayer::with_keyring_handle(handle.clone());
/// # let _ = layer;
/// // Later, e.g. when the keys file changed (in practice the new ring is parsed from it):
/// let next: Keyring = Keyring::generate("k2").unwrap();
/// handle.store(next);
/// assert_eq!(handle.load().active_key_id().as_str(), "k2");
/// ```
#[derive(Clone)]
pub struct KeyringHandle(Arc<ArcSwap<Keyring>>);

impl KeyringHandle {
    /// A handle holding `keyring`.
    pub fn new(keyring: Keyring) -> Self {
        Self::from_shared(Arc::new(keyring))
    }

    /// A handle holding a keyring shared with other users.
    pub fn from_shared(keyring: Arc<Keyring>) -> Self {
        Self(Arc::new(ArcSwap::new(keyring)))
    }

    /// The current keyring.
    pub fn load(&self) -> Arc<Keyring> {
        self.0.load_full()
    }

    /// Replaces the keyring for every request that arrives from now on.
    pub fn store(&self, keyring: Keyring) {
        self.store_shared(Arc::new(keyring));
    }

    /// Replaces the keyring with a shared one.
    pub fn store_shared(&self, keyring: Arc<Keyring>) {
        self.0.store(keyring);
    }
}

impl fmt::Debug for KeyringHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeyringHandle").field(&*self.0.load()).finish()
    }
}

impl From<Keyring> for KeyringHandle {
    fn from(keyring: Keyring) -> Self {
        Self::new(keyring)
    }
}

impl From<Arc<Keyring>> for KeyringHandle {
    fn from(keyring: Arc<Keyring>) -> Self {
        Self::from_shared(keyring)
    }
}

/// Parses `kid:base64url,kid:base64url,...` (active key first). Whitespace around entries is
/// ignored, so the value may be wrapped over several lines.
impl FromStr for Keyring {
    type Err = KeyringError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut ring: Option<Keyring> = None;
        for (index, part) in s.split(',').map(str::trim).enumerate() {
            if part.is_empty() {
                return Err(KeyringError::EmptyEntry { index });
            }
            let (id, key) = part
                .split_once(':')
                .ok_or(KeyringError::MissingSeparator { index })?;
            let id = KeyId::new(id.trim())?;
            let key = Key::from_base64url(key.trim()).map_err(|e| KeyringError::InvalidKey {
                id: id.to_string(),
                source: Box::new(e),
            })?;
            ring = Some(match ring {
                None => Keyring::new(id, key),
                Some(r) => r.with_key(id, key)?,
            });
        }
        ring.ok_or(KeyringError::Empty)
    }
}

/// Generates one `kid:base64url` keyring entry with a fresh random key.
pub fn generate_entry(id: &str) -> Result<Zeroizing<String>, KeyringError> {
    Ok(Keyring::generate(id)?.to_config_string())
}

/// Why a key or keyring could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum KeyringError {
    /// The configuration string holds no keys.
    Empty,
    /// Entry number `index` (from 0) is empty, e.g. a doubled or trailing comma.
    EmptyEntry {
        /// Position of the entry.
        index: usize,
    },
    /// Entry number `index` has no `:` between key id and key.
    MissingSeparator {
        /// Position of the entry.
        index: usize,
    },
    /// A key id is empty, too long or has characters outside `[A-Za-z0-9._-]`.
    InvalidKeyId(String),
    /// The same key id appears twice.
    DuplicateKeyId(String),
    /// The key id is not in the ring.
    UnknownKeyId(String),
    /// The active key cannot be removed; make another key active first.
    RemoveActive(String),
    /// The key of entry `id` is malformed.
    InvalidKey {
        /// The entry's key id.
        id: String,
        /// What is wrong with the key.
        source: Box<KeyringError>,
    },
    /// A key is not valid base64url.
    InvalidKeyEncoding,
    /// A key decodes to the wrong number of bytes.
    InvalidKeyLength(usize),
    /// A key's 32 bytes are all one value (all zeros, say): not a secret.
    WeakKey,
    /// Two key ids hold the same key bytes.
    DuplicateKey {
        /// The id added second.
        id: String,
        /// The id that already held them.
        other: String,
    },
    /// The operating system's random number generator failed.
    Rng,
}

impl fmt::Display for KeyringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => {
                f.write_str("keyring is empty: expected `kid:base64url-key[,kid:base64url-key...]`")
            }
            Self::EmptyEntry { index } => write!(f, "keyring entry {index} is empty (stray comma?)"),
            Self::MissingSeparator { index } => {
                write!(f, "keyring entry {index} has no `:` between key id and key")
            }
            Self::InvalidKeyId(id) => write!(
                f,
                "invalid key id {id:?}: use 1 to {MAX_KEY_ID_LEN} characters from A-Z a-z 0-9 . _ -"
            ),
            Self::DuplicateKeyId(id) => write!(f, "key id {id:?} appears more than once"),
            Self::UnknownKeyId(id) => write!(f, "key id {id:?} is not in the keyring"),
            Self::RemoveActive(id) => {
                write!(
                    f,
                    "key {id:?} is active and cannot be removed; activate another key first"
                )
            }
            Self::InvalidKey { id, source } => write!(f, "key {id:?}: {source}"),
            Self::InvalidKeyEncoding => f.write_str("key is not valid base64url (alphabet A-Z a-z 0-9 - _)"),
            Self::InvalidKeyLength(n) => write!(f, "key decodes to {n} bytes, expected {KEY_LEN}"),
            Self::WeakKey => f.write_str(
                "key bytes are all one value, which is no secret: generate a key with `mrtr-gateway --generate-key KID`",
            ),
            Self::DuplicateKey { id, other } => {
                write!(f, "key {id:?} has the same bytes as key {other:?}: every id needs its own key")
            }
            Self::Rng => f.write_str("the operating system's random number generator failed"),
        }
    }
}

impl std::error::Error for KeyringError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidKey { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_repeated_byte_are_refused() {
        for byte in [0u8, 0xff, 7] {
            let text = format!("k1:{}", Key::from_bytes([byte; KEY_LEN]).to_base64url().as_str());
            let error = text.parse::<Keyring>().expect_err("refused");
            assert!(
                matches!(&error, KeyringError::InvalidKey { source, .. } if matches!(**source, KeyringError::WeakKey)),
                "{error}"
            );
        }
        let mut bytes = [0u8; KEY_LEN];
        bytes[31] = 1;
        let nearly = format!("k1:{}", Key::from_bytes(bytes).to_base64url().as_str());
        assert!(nearly.parse::<Keyring>().is_ok(), "one byte differs: accepted");
    }

    #[test]
    fn one_key_under_two_ids_is_refused() {
        let key = Key::generate().unwrap().to_base64url();
        let text = format!("k2:{},k1:{}", key.as_str(), key.as_str());
        let error = text.parse::<Keyring>().expect_err("refused");
        assert!(
            matches!(&error, KeyringError::DuplicateKey { id, other } if id == "k1" && other == "k2"),
            "{error}"
        );
        assert!(
            !error.to_string().contains(key.as_str()),
            "no key material in the message"
        );
    }

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
    const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";

    #[test]
    fn parses_padded_and_unpadded_keys_active_first() {
        let ring: Keyring = format!(" a:{K1} ,\n b:{K2}= ").parse().unwrap();
        assert_eq!(ring.active_key_id().as_str(), "a");
        assert_eq!(ring.key_ids().map(KeyId::as_str).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn config_string_round_trips() {
        let ring: Keyring = format!("a:{K1}").parse().unwrap();
        let ring = ring
            .with_key(KeyId::new("b").unwrap(), Key::generate().unwrap())
            .unwrap();
        let again: Keyring = ring.to_config_string().parse().unwrap();
        assert_eq!(*again.to_config_string(), *ring.to_config_string());
    }

    #[test]
    fn malformed_configuration_is_refused_with_a_clear_error() {
        let cases: &[(&str, &str)] = &[
            ("", "entry 0 is empty"),
            ("nocolon", "no `:`"),
            (":AAAA", "invalid key id"),
            ("bad id:AAAA", "invalid key id"),
            ("a:!!!", "not valid base64url"),
            ("a:AAAA", "3 bytes, expected 32"),
            (
                "a:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8+",
                "not valid base64url",
            ),
        ];
        for (input, expected) in cases {
            let err = input.parse::<Keyring>().unwrap_err().to_string();
            assert!(err.contains(expected), "{input:?}: {err}");
        }
        let trailing = format!("a:{K1},").parse::<Keyring>().unwrap_err();
        assert!(trailing.to_string().contains("entry 1 is empty"), "{trailing}");
        let dup = format!("a:{K1},a:{K1}").parse::<Keyring>().unwrap_err();
        assert!(dup.to_string().contains("more than once"), "{dup}");
        let long_id = "x".repeat(MAX_KEY_ID_LEN + 1);
        assert!(KeyId::new(&long_id).is_err());
        assert!(KeyId::new(&"x".repeat(MAX_KEY_ID_LEN)).is_ok());
    }

    #[test]
    fn debug_redacts_key_material() {
        let key = Key::from_base64url(K1).unwrap();
        let ring = Keyring::new(KeyId::new("k1").unwrap(), key);
        let shown = format!(
            "{ring:?} {:?} {:?}",
            Key::from_base64url(K1).unwrap(),
            ring.active_key_id()
        );
        assert!(shown.contains("k1"), "{shown}");
        assert!(!shown.contains(K1) && !shown.contains("AAECAw"), "{shown}");
        assert!(!shown.contains("[0, 1, 2"), "{shown}");
    }

    #[test]
    fn rotation_steps() {
        let ring = Keyring::generate("old").unwrap();
        let ring = ring
            .with_key(KeyId::new("new").unwrap(), Key::generate().unwrap())
            .unwrap();
        assert_eq!(ring.active_key_id().as_str(), "old");
        let ring = ring.with_active("new").unwrap();
        assert_eq!(ring.active_key_id().as_str(), "new");
        assert!(ring.find(b"old").is_some());
        assert!(matches!(
            ring.without_key("new"),
            Err(KeyringError::RemoveActive(_))
        ));
        let ring = Keyring::generate("x")
            .unwrap()
            .with_key(KeyId::new("y").unwrap(), Key::generate().unwrap())
            .unwrap();
        let ring = ring.without_key("y").unwrap();
        assert_eq!(ring.len(), 1);
        assert!(ring.find(b"y").is_none());
    }

    #[test]
    fn generated_keys_differ() {
        let a = Key::generate().unwrap().to_base64url();
        let b = Key::generate().unwrap().to_base64url();
        assert_ne!(*a, *b);
        assert_eq!(a.len(), 43);
    }
}
