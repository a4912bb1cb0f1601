//! The sealed `Mcp-Session-Id`: everything a replica needs to turn a legacy request into a
//! modern one, carried by the client instead of stored by the gateway.
//!
//! At `initialize` the gateway seals the negotiated protocol version, the client's `clientInfo`
//! and `capabilities` and an expiry into an envelope (tower-mrtr's [`Sealer`], under the
//! gateway's own [purpose](SESSION_PURPOSE)) bound to the principal, and hands it out as the
//! session id. Every later request of the session carries it back; any replica holding the
//! keyring opens it. A session id that does not
//! open (tampered, expired, sealed for another principal, under a retired key) is "not found",
//! which a legacy client answers by starting a new session.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
use tower_mrtr::{Keyring, KeyringHandle, Route};

use crate::jsonrpc::RawObject;

/// The session header of the legacy Streamable HTTP transport.
pub const MCP_SESSION_ID: &str = "mcp-session-id";

/// The purpose of session envelopes: the gateway's own, not one of tower-mrtr's. Its label is
/// the one session ids were sealed with when tower-mrtr still defined this purpose itself; the
/// bytes must never change, or every session id handed out before stops opening (its clients
/// would all start new sessions at once).
pub const SESSION_PURPOSE: Purpose = Purpose::custom("tower-mrtr/v2/legacy-session", "session id");

/// The binding's method field for session envelopes (the purpose label already separates them
/// from request states and task handles; this names what the binding is about).
pub(crate) const SESSION_BINDING: &str = "mrtr-gateway/legacy-session";

/// Longest session id accepted, checked before any decoding (legacy clients echo it in a header;
/// common proxies refuse headers much above 8 KiB).
pub(crate) const MAX_SESSION_ID_LEN: usize = 6 * 1024;

/// Route recorded in a session envelope: not a backend, sessions are not routed.
const SESSION_ROUTE: &str = "@legacy-session";

/// What a legacy session is: the handshake's outcome.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Session {
    #[serde(rename = "v")]
    protocol_version: String,
    #[serde(rename = "i")]
    client_info: Box<RawValue>,
    #[serde(rename = "c")]
    capabilities: Box<RawValue>,
    /// The members this session adds to every modern request's `_meta`, written once
    /// ([`modern_meta`](Self::modern_meta)); not part of the sealed id.
    #[serde(skip)]
    modern_meta: OnceLock<Box<str>>,
}

/// Why a session could not be created from an `initialize` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionError {
    /// `clientInfo` or `capabilities` is not a JSON object.
    NotAnObject(&'static str),
    /// The sealed id would be longer than [`MAX_SESSION_ID_LEN`].
    TooLarge,
    /// Sealing failed (the random number generator).
    Seal,
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAnObject(what) => write!(f, "params.{what} must be an object"),
            Self::TooLarge => write!(
                f,
                "clientInfo and capabilities are too large to be carried in a session id (at most {MAX_SESSION_ID_LEN} bytes sealed)"
            ),
            Self::Seal => f.write_str("the session could not be sealed"),
        }
    }
}

impl Session {
    /// A session for `protocol_version`, from the raw `clientInfo` and `capabilities` objects of
    /// an `initialize` request. Client capabilities that only a legacy server understands (the
    /// 2025-11-25 `tasks` capability) are left out: modern backends must ignore them anyway.
    pub(crate) fn new(
        protocol_version: &str,
        client_info: &str,
        capabilities: &str,
    ) -> Result<Self, SessionError> {
        let object = |raw: &str, what| {
            serde_json::from_str::<RawObject>(raw).map_err(|_| SessionError::NotAnObject(what))
        };
        object(client_info, "clientInfo")?;
        let mut capabilities = object(capabilities, "capabilities")?;
        capabilities.0.retain(|(key, _)| key != "tasks");
        let raw = |s: String| RawValue::from_string(s).map_err(|_| SessionError::NotAnObject("capabilities"));
        Ok(Self {
            protocol_version: protocol_version.to_owned(),
            client_info: raw(client_info.to_owned())?,
            capabilities: raw(serde_json::to_string(&capabilities).map_err(|_| SessionError::Seal)?)?,
            modern_meta: OnceLock::new(),
        })
    }

    /// The legacy protocol version negotiated at `initialize`.
    pub(crate) fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// The members this session adds to every modern request's `_meta` (JSON text, no braces),
    /// which `write` writes the first time: the same on every request of the session.
    pub(crate) fn modern_meta(&self, write: impl FnOnce(&Self) -> String) -> &str {
        self.modern_meta.get_or_init(|| write(self).into())
    }

    /// The client's `clientInfo`, raw.
    pub(crate) fn client_info(&self) -> &RawValue {
        &self.client_info
    }

    /// The client's capabilities (as declared at `initialize`, legacy-only ones removed), raw.
    pub(crate) fn capabilities(&self) -> &RawValue {
        &self.capabilities
    }

    /// Whether the client declared the capability a server-to-client `method` needs
    /// (`elicitation/create` in `mode`, `sampling/createMessage`, `roots/list`). An empty
    /// `elicitation: {}` means form mode only.
    pub(crate) fn declares(&self, method: &str, elicitation_mode: Option<&str>) -> bool {
        let Ok(caps) = serde_json::from_str::<serde_json::Value>(self.capabilities.get()) else {
            return false;
        };
        match method {
            "elicitation/create" => {
                let Some(elicitation) = caps.get("elicitation").and_then(|e| e.as_object()) else {
                    return false;
                };
                match elicitation_mode.unwrap_or("form") {
                    "form" => elicitation.is_empty() || elicitation.contains_key("form"),
                    mode => elicitation.contains_key(mode),
                }
            }
            "sampling/createMessage" => caps.get("sampling").is_some_and(|s| s.is_object()),
            "roots/list" => caps.get("roots").is_some_and(|r| r.is_object()),
            _ => false,
        }
    }
}

/// An opened session id: the session, its expiry and a digest that names it in per-replica
/// bookkeeping without keeping the id itself.
#[derive(Clone, Debug)]
pub(crate) struct OpenedSession {
    session: Arc<Session>,
    expires_at: SystemTime,
    digest: SessionDigest,
}

impl std::ops::Deref for OpenedSession {
    type Target = Session;
    fn deref(&self) -> &Session {
        &self.session
    }
}

impl OpenedSession {
    /// When the session id stops opening.
    pub(crate) fn expires_at(&self) -> SystemTime {
        self.expires_at
    }

    /// The digest of the session id.
    pub(crate) fn digest(&self) -> SessionDigest {
        self.digest
    }
}

/// SHA-256 of a session id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SessionDigest([u8; 32]);

impl SessionDigest {
    /// The digest of `id`.
    pub(crate) fn of(id: &str) -> Self {
        Self(Sha256::digest(id.as_bytes()).into())
    }
}

/// Seals sessions into ids and opens them, with whatever keyring the handle holds at the time
/// (a key rotation applies to session ids as to every other envelope).
#[derive(Clone, Debug)]
pub(crate) struct SessionSealer {
    keys: KeyringHandle,
    ttl: Duration,
    /// The deployment's name, bound into every session id as the layer binds envelopes.
    audience: Option<Arc<str>>,
    /// What opening an id gave lately.
    opened: Arc<Opened>,
}

/// Most session ids [`Opened`] remembers; when it is full it starts again empty (a bound, not
/// an eviction policy: a replica serving more sessions at once opens ids as if it had none).
const OPENED_MAX: usize = 1024;

/// Longest session id [`Opened`] remembers (a session with a large `clientInfo` or
/// `capabilities` is opened on every request), so that it holds at most about 2 MiB.
const OPENED_MAX_ID: usize = 1024;

/// Session ids opened lately, each with the principal and the keyring it opened for. A legacy
/// client sends its id with every request, and opening it (the envelope, the session's JSON,
/// its digest) is the front's largest cost per request; an id is opened again for another
/// principal, after the keyring changed (a retired key must stop opening it) and past its
/// expiry. A memo only: nothing a client relies on lives here, and a replica without it opens
/// the id as before.
#[derive(Debug, Default)]
struct Opened(std::sync::Mutex<std::collections::HashMap<Box<str>, Memo>>);

#[derive(Debug)]
struct Memo {
    principal: Option<Box<str>>,
    keyring: Arc<Keyring>,
    opened: OpenedSession,
}

impl Opened {
    fn memo(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Box<str>, Memo>> {
        // Nothing panics while holding it; a poisoned memo is still a consistent map.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `id` opened to for `principal` under `keyring`, if it is remembered and not expired
    /// at `now` (an envelope opens while `now` is before its expiry).
    fn get(
        &self,
        id: &str,
        principal: Option<&str>,
        keyring: &Arc<Keyring>,
        now: SystemTime,
    ) -> Option<OpenedSession> {
        let memo = self.memo();
        let kept = memo.get(id)?;
        (kept.principal.as_deref() == principal
            && Arc::ptr_eq(&kept.keyring, keyring)
            && now < kept.opened.expires_at)
            .then(|| kept.opened.clone())
    }

    fn keep(&self, id: &str, principal: Option<&str>, keyring: Arc<Keyring>, opened: &OpenedSession) {
        if id.len() > OPENED_MAX_ID {
            return;
        }
        let mut memo = self.memo();
        if memo.len() >= OPENED_MAX && !memo.contains_key(id) {
            memo.clear();
        }
        let kept = Memo {
            principal: principal.map(Box::from),
            keyring,
            opened: opened.clone(),
        };
        memo.insert(id.into(), kept);
    }
}

impl SessionSealer {
    /// Sessions sealed with the keys behind `keys`, valid for `ttl`.
    pub(crate) fn new(keys: KeyringHandle, ttl: Duration) -> Self {
        Self {
            keys,
            ttl,
            audience: None,
            opened: Arc::default(),
        }
    }

    /// Binds session ids to the deployment named `audience`.
    pub(crate) fn with_audience(mut self, audience: Option<Arc<str>>) -> Self {
        self.audience = audience;
        self
    }

    fn binding<'a>(&'a self, principal: Option<&'a str>) -> Binding<'a> {
        Binding::new(SESSION_BINDING, None, principal).with_audience(self.audience.as_deref())
    }

    fn sealer(&self) -> Sealer {
        Sealer::new(self.keys.load())
    }

    /// The session id for `session`, bound to `principal`, expiring `ttl` after `now`.
    pub(crate) fn seal(
        &self,
        session: &Session,
        principal: Option<&str>,
        now: SystemTime,
    ) -> Result<String, SessionError> {
        let state = serde_json::to_string(session).map_err(|_| SessionError::Seal)?;
        // Sessions belong to no MRTR round.
        let sealed = Sealed {
            route: Route::new(SESSION_ROUTE),
            state: Some(state),
            expires_at: now + self.ttl,
            round: 0,
            call_target: None,
        };
        let id = self
            .sealer()
            .seal(SESSION_PURPOSE, &self.binding(principal), &sealed)
            .map_err(|_| SessionError::Seal)?;
        if id.len() > MAX_SESSION_ID_LEN {
            return Err(SessionError::TooLarge);
        }
        Ok(id)
    }

    /// The session behind `id`, if it opens for `principal` at `now`. Every failure is `None`;
    /// the reason goes to the debug log.
    pub(crate) fn open(&self, id: &str, principal: Option<&str>, now: SystemTime) -> Option<OpenedSession> {
        if id.len() > MAX_SESSION_ID_LEN {
            tracing::debug!("legacy session id refused: too long");
            return None;
        }
        let keyring = self.keys.load();
        if let Some(opened) = self.opened.get(id, principal, &keyring, now) {
            return Some(opened);
        }
        let sealed =
            match Sealer::new(keyring.clone()).open(SESSION_PURPOSE, &self.binding(principal), id, now) {
                Ok(sealed) => sealed,
                Err(error) => {
                    tracing::debug!(reason = error.reason(), "legacy session id refused");
                    return None;
                }
            };
        if sealed.route.as_str() != SESSION_ROUTE {
            return None;
        }
        let session = serde_json::from_str(sealed.state.as_deref()?).ok()?;
        let opened = OpenedSession {
            session: Arc::new(session),
            expires_at: sealed.expires_at,
            digest: SessionDigest::of(id),
        };
        self.opened.keep(id, principal, keyring, &opened);
        Some(opened)
    }
}

#[cfg(test)]
mod tests {
    use tower_mrtr::Keyring;

    use super::*;

    fn sealer() -> SessionSealer {
        SessionSealer::new(
            KeyringHandle::new(Keyring::generate("k1").unwrap()),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn a_rotated_keyring_still_opens_sessions_sealed_before() {
        let old = Keyring::generate("old").unwrap().to_config_string();
        let keys = KeyringHandle::new(old.parse().unwrap());
        let sealer = SessionSealer::new(keys.clone(), Duration::from_secs(60));
        let now = SystemTime::now();
        let id = sealer
            .seal(&Session::new("2025-11-25", "{}", "{}").unwrap(), None, now)
            .unwrap();
        let new = Keyring::generate("new").unwrap();
        keys.store(format!("{},{}", *new.to_config_string(), *old).parse().unwrap());
        assert!(sealer.open(&id, None, now).is_some(), "old key still opens");
        keys.store(new);
        assert!(
            sealer.open(&id, None, now).is_none(),
            "retired key: session not found"
        );
    }

    /// An id opened again for the same principal under the same keyring is not decrypted again:
    /// the session is the one the first opening gave. The rotation, principal and expiry tests
    /// around it check that the memo never opens what the envelope would not.
    #[test]
    fn an_id_opened_again_is_taken_from_the_memo() {
        let sealer = sealer();
        let now = SystemTime::now();
        let id = sealer
            .seal(
                &Session::new("2025-11-25", "{}", "{}").unwrap(),
                Some("alice"),
                now,
            )
            .unwrap();
        let first = sealer.open(&id, Some("alice"), now).unwrap();
        let again = sealer.open(&id, Some("alice"), now).unwrap();
        assert!(Arc::ptr_eq(&first.session, &again.session), "remembered");
        assert!(sealer.open(&id, Some("bob"), now).is_none(), "another principal");
        let just_expired = first.expires_at();
        assert!(sealer.open(&id, Some("alice"), just_expired).is_none(), "expired");
        // A tampered id is another key of the memo, and does not open.
        let mut tampered = id.clone();
        tampered.push('A');
        assert!(sealer.open(&tampered, Some("alice"), now).is_none());
    }

    #[test]
    fn tampered_or_foreign_ids_do_not_open() {
        let sealer = sealer();
        let now = SystemTime::now();
        let session = Session::new("2025-06-18", "{}", "{}").unwrap();
        let id = sealer.seal(&session, None, now).unwrap();
        assert!(sealer.open(&id, None, now).is_some());
        let mut tampered = id.clone().into_bytes();
        let last = tampered.len() - 1;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(
            sealer
                .open(std::str::from_utf8(&tampered).unwrap(), None, now)
                .is_none()
        );
        assert!(sealer.open(&id, Some("alice"), now).is_none());
        assert!(sealer.open("not-a-session", None, now).is_none());
        assert!(
            sealer
                .open(&"x".repeat(MAX_SESSION_ID_LEN + 1), None, now)
                .is_none()
        );
        // Another gateway's keys.
        assert!(self::sealer().open(&id, None, now).is_none());
    }

    /// The gateway's v2 session-id vector in `docs/envelope.md` (v2 vector 6), produced by
    /// `scripts/envelope_vectors.py` (Python, libsodium) with the label bytes
    /// `tower-mrtr/v2/legacy-session`, which tower-mrtr used for this purpose before the purpose
    /// moved into the gateway. Session ids sealed before the upgrade to envelope format v3.
    const SESSION_VECTOR_V2: &str = "mrtr2.AgJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_vH0sr7BPHrl96hYCo69QQwhmd_JhmyJMkwW3ijtT3Nh9ZgKLP4y-BJE4kC4JamlJ9klWbWKXk-TosZYNw16qkhxpquCvWAmOU8CRkTVFUtjyX3519IB0MZ3qrRkQrCtM4MuH1stPbi_SXRwSOOVZ5RgHv17RuAyg";

    /// The same session sealed in envelope format v3 (v3 vector 10): no audience, round 0. Session
    /// ids sealed before the upgrade to envelope format v4.
    const SESSION_VECTOR_V3: &str = "mrtr3.AwJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_SHse_wAPXz2dTpYDwg6QNek0UIfwHmNMMgXGWgsT3Og9l-P_j20_JJR5NN69Xx094y1nDeLSE-TtUWccAuvOpzktP-D_mdha5pRQoHRkZ-kyXp6UdQBxwOlazUjAjfqcAW8yh567Hkjm6jVmWkPdgE1kTpXdwlxuYGdw";

    /// The same session sealed as the gateway seals it now, in envelope format v4 (v4 vector 10):
    /// no audience, round 0, no call target.
    const SESSION_VECTOR: &str = "mrtr4.BAJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_SHse_wAPXz2dTpYDwg6QNek0UJBViyYNs4TGeitiXSg8VhOO_43bkCX9IUp9r925kqzjHRIDUvT51fcNY2o_FswN3wW-qKhLRvREYfXlVhjTe2uEkRRgRPzOvdiQLVtNUD7i54p6mliG6jVOkdHOmA-z7taE62mPzEQmY";

    /// Key `k1` = bytes 0x00..=0x1f, the key of the envelope test vectors.
    const VECTOR_KEYS: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

    #[test]
    fn session_ids_sealed_with_the_old_label_still_open() {
        let expires_at = std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
        let keyring: Arc<Keyring> = Arc::new(VECTOR_KEYS.parse().unwrap());
        let sessions = SessionSealer::new(
            KeyringHandle::from_shared(keyring.clone()),
            Duration::from_secs(60),
        );
        let before = expires_at - Duration::from_millis(1);

        // Sealed before the upgrades (v2, v3) or after (v4): all open.
        for vector in [SESSION_VECTOR_V2, SESSION_VECTOR_V3, SESSION_VECTOR] {
            let opened = sessions.open(vector, Some("alice"), before).expect("opens");
            assert_eq!(opened.protocol_version(), "2025-11-25");
            assert_eq!(
                opened.client_info().get(),
                r#"{"name":"claude-desktop","version":"1.0"}"#
            );
            assert_eq!(opened.capabilities().get(), r#"{"elicitation":{}}"#);
            assert_eq!(opened.expires_at(), expires_at);
            assert!(sessions.open(vector, Some("bob"), before).is_none());
            assert!(sessions.open(vector, Some("alice"), expires_at).is_none());
        }

        // And what the gateway seals today is that envelope, byte for byte, given its nonce.
        assert_eq!(SESSION_PURPOSE.label(), b"tower-mrtr/v2/legacy-session");
        let session = Session::new(
            "2025-11-25",
            r#"{"name":"claude-desktop","version":"1.0"}"#,
            r#"{"elicitation":{}}"#,
        )
        .unwrap();
        let sealed = Sealed {
            route: Route::new(SESSION_ROUTE),
            state: Some(serde_json::to_string(&session).unwrap()),
            expires_at,
            round: 0,
            call_target: None,
        };
        let nonce: [u8; 24] = std::array::from_fn(|i| 0x40 + i as u8);
        let wire = Sealer::new(keyring)
            .seal_with_nonce(
                SESSION_PURPOSE,
                &Binding::new(SESSION_BINDING, None, Some("alice")),
                &sealed,
                nonce,
            )
            .unwrap();
        assert_eq!(wire, SESSION_VECTOR);
    }

    #[test]
    fn a_session_id_is_never_a_request_state() {
        let keyring = Arc::new(Keyring::generate("k1").unwrap());
        let sessions = SessionSealer::new(
            KeyringHandle::from_shared(keyring.clone()),
            Duration::from_secs(60),
        );
        let now = SystemTime::now();
        let id = sessions
            .seal(&Session::new("2025-11-25", "{}", "{}").unwrap(), None, now)
            .unwrap();
        let raw = Sealer::new(keyring);
        for method in ["tools/call", "prompts/get", "resources/read"] {
            assert!(
                raw.open(
                    Purpose::REQUEST_STATE,
                    &Binding::new(method, None, None),
                    &id,
                    now
                )
                .is_err()
            );
        }
        for purpose in [Purpose::REQUEST_STATE, Purpose::TASK_HANDLE] {
            assert_eq!(
                raw.open(purpose, &Binding::new(SESSION_BINDING, None, None), &id, now),
                Err(tower_mrtr::envelope::OpenError::Authentication),
                "{purpose:?}, even with the session's own binding"
            );
        }
    }

    #[test]
    fn declared_capabilities() {
        let s = |caps: &str| Session::new("2025-11-25", "{}", caps).unwrap();
        assert!(s(r#"{"elicitation":{}}"#).declares("elicitation/create", None));
        assert!(!s(r#"{"elicitation":{}}"#).declares("elicitation/create", Some("url")));
        assert!(s(r#"{"elicitation":{"url":{}}}"#).declares("elicitation/create", Some("url")));
        assert!(!s(r#"{"elicitation":{"url":{}}}"#).declares("elicitation/create", Some("form")));
        assert!(s(r#"{"sampling":{}}"#).declares("sampling/createMessage", None));
        assert!(!s(r#"{"sampling":{}}"#).declares("roots/list", None));
        assert!(s(r#"{"roots":{"listChanged":true}}"#).declares("roots/list", None));
        assert!(!s("{}").declares("elicitation/create", None));
        assert_eq!(
            Session::new("x", "[]", "{}").unwrap_err(),
            SessionError::NotAnObject("clientInfo")
        );
        assert_eq!(
            Session::new("x", "{}", "1").unwrap_err(),
            SessionError::NotAnObject("capabilities")
        );
    }

    #[test]
    fn a_session_id_opens_for_its_principal_until_it_expires() {
        let keys = KeyringHandle::new(tower_mrtr::Keyring::generate("k1").unwrap());
        let sealer = SessionSealer::new(keys, Duration::from_secs(3600));
        let session = Session::new(
            "2025-11-25",
            r#"{"name":"claude-desktop","version":"1.0"}"#,
            r#"{"elicitation":{},"tasks":{"requests":{}}}"#,
        )
        .unwrap();
        let now = SystemTime::now();
        let id = sealer.seal(&session, Some("alice"), now).unwrap();
        assert!(
            id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "visible ASCII, as legacy clients require"
        );

        let opened = sealer.open(&id, Some("alice"), now).unwrap();
        assert_eq!(opened.protocol_version(), "2025-11-25");
        // The legacy `tasks` capability means nothing to a modern backend: it is dropped.
        assert_eq!(opened.capabilities().get(), r#"{"elicitation":{}}"#);
        assert!(
            sealer.open(&id, Some("bob"), now).is_none(),
            "bound to the principal"
        );
        assert!(
            sealer
                .open(&id, Some("alice"), now + Duration::from_secs(3601))
                .is_none(),
            "expired"
        );
    }

    #[test]
    fn session_ids_open_only_for_their_audience() {
        let keys = KeyringHandle::new(Keyring::generate("k1").unwrap());
        let sealer = |audience: Option<&str>| {
            SessionSealer::new(keys.clone(), Duration::from_secs(60)).with_audience(audience.map(Arc::from))
        };
        let (prod, staging, none) = (sealer(Some("prod")), sealer(Some("staging")), sealer(None));
        let session = Session::new("2025-11-25", "{}", "{}").unwrap();
        let now = SystemTime::now();
        let id = prod.seal(&session, None, now).unwrap();
        assert!(prod.open(&id, None, now).is_some());
        assert!(staging.open(&id, None, now).is_none(), "another deployment");
        assert!(none.open(&id, None, now).is_none(), "no audience");
        let unbound = none.seal(&session, None, now).unwrap();
        assert!(prod.open(&unbound, None, now).is_none(), "sealed without one");
    }
}
