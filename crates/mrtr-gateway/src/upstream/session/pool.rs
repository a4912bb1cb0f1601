//! One backend's sessions ([`Pool`]): one per [`Key`] (a principal and the capabilities its
//! client declared), opened by its first request ([`open`]: `initialize`, then
//! `notifications/initialized`), leased by each request that uses it ([`Lease`]), bounded per
//! backend and per principal, and closed (`DELETE`) when evicted or idle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::wire::{self, identity_headers};
use crate::observe::metrics::{self, Held};
use crate::upstream::answer::UpstreamError;
use crate::upstream::backend::Backend;
use crate::upstream::era::{LEGACY_VERSIONS, discover_result};
use crate::upstream::http::forward::Forwarder;
use crate::upstream::session::hub::Hub;
use crate::upstream::translate::Reply;

/// Most sessions kept per backend (one per principal and set of capabilities).
pub(crate) const MAX_SESSIONS: usize = 1024;

/// Most sessions one principal has with one backend (one per set of capabilities its legacy
/// clients declare, and its 2026-07-28 clients' one).
pub(crate) const MAX_SESSIONS_PER_PRINCIPAL: usize = 16;

/// One backend's sessions.
#[derive(Debug, Default)]
pub(super) struct Pool {
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
}

/// What a session is for: no two principals, and no two sets of declared capabilities, share one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) principal: Option<Box<str>>,
    /// The capabilities `initialize` declares (raw JSON); `{}` for a 2026-07-28 client.
    pub(super) capabilities: Box<str>,
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) session: OnceCell<Session>,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The session's `GET` stream, while a listen uses it.
    pub(super) notifications: tokio::sync::Mutex<Weak<Notifications>>,
}

/// A session's `GET` stream, read into the hub of its listens (`upstream/session/hub.rs`): one per
/// session however many listen, since the backend sends each message on one stream only. Every
/// listen's stream holds it; the last one to end closes the `GET` stream, and the session goes
/// back to being idle (its lease is held until then, so it is not closed under a listen).
#[derive(Debug)]
pub(super) struct Notifications {
    pub(super) hub: Arc<Hub>,
    pub(super) reader: tokio::task::JoinHandle<()>,
    pub(super) _lease: Lease,
}

impl Drop for Notifications {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// An open session.
#[derive(Debug)]
pub(super) struct Session {
    /// `None` for a backend that gave no `Mcp-Session-Id` (a stateless legacy server).
    pub(super) id: Option<HeaderValue>,
    pub(super) version: String,
    /// A `server/discover` result made from the `initialize` result.
    pub(super) discover: Value,
    next_id: AtomicU64,
    /// Counted in `mrtr_gateway_backend_sessions` while open.
    _counted: Held,
}

impl Session {
    /// A fresh request id of the gateway's own in this session, as raw JSON.
    pub(super) fn next_id(&self) -> String {
        format!("\"mrtr-{}\"", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// A session in use by one request: counted as busy until dropped.
#[derive(Debug)]
pub(super) struct Lease {
    pub(super) slot: Arc<Slot>,
}

impl Lease {
    pub(super) fn new(slot: Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::SeqCst);
        Self { slot }
    }

    pub(super) fn session(&self) -> Option<&Session> {
        self.slot.session.get()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.slot.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.slot.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    /// The key's session with `backend`, opened if there is none yet.
    pub(super) async fn lease(
        &self,
        forwarder: &Forwarder,
        backend: &Backend,
        key: &Key,
        headers: &HeaderMap,
    ) -> Result<Lease, UpstreamError> {
        let (lease, evicted) = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let mut evicted = None;
            if !slots.contains_key(key) {
                // A principal's sessions (one per set of capabilities its clients declare) are
                // bounded apart, so that one principal cannot take the backend's whole pool.
                let principal = key.principal.as_ref();
                let theirs = principal.map_or(0, |_| {
                    slots.keys().filter(|k| k.principal.as_ref() == principal).count()
                });
                let principal_full = theirs >= MAX_SESSIONS_PER_PRINCIPAL;
                if principal_full || slots.len() >= MAX_SESSIONS {
                    let idle = slots
                        .iter()
                        .filter(|(k, s)| {
                            s.in_flight.load(Ordering::SeqCst) == 0
                                && (!principal_full || k.principal.as_ref() == principal)
                        })
                        .min_by_key(|(_, s)| *s.last_used.lock().unwrap_or_else(|e| e.into_inner()))
                        .map(|(k, _)| k.clone());
                    let Some(idle) = idle else {
                        let message = if principal_full {
                            format!(
                                "all {MAX_SESSIONS_PER_PRINCIPAL} of this principal's sessions with this backend are busy"
                            )
                        } else {
                            format!("all {MAX_SESSIONS} sessions with this backend are busy")
                        };
                        return Err(UpstreamError::Unreachable(message));
                    };
                    evicted = slots.remove(&idle);
                }
            }
            let slot = slots
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Slot {
                        session: OnceCell::new(),
                        in_flight: AtomicUsize::new(0),
                        last_used: Mutex::new(Instant::now()),
                        notifications: tokio::sync::Mutex::new(Weak::new()),
                    })
                })
                .clone();
            (Lease::new(slot), evicted)
        };
        if let Some(slot) = evicted {
            close(forwarder, backend, &slot).await;
        }
        lease
            .slot
            .session
            .get_or_try_init(|| open(forwarder, backend, key, headers))
            .await?;
        Ok(lease)
    }

    /// Drops `lease`'s session from the pool (the backend forgot it), unless another request
    /// already replaced it.
    pub(super) fn forget(&self, lease: &Lease) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|_, slot| !Arc::ptr_eq(slot, &lease.slot));
    }

    /// Takes out of the pool every session idle for `idle` or longer, for closing.
    pub(super) fn take_idle(&self, idle: Duration) -> Vec<Arc<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let keys: Vec<Key> = slots
            .iter()
            .filter(|(_, s)| {
                s.in_flight.load(Ordering::SeqCst) == 0
                    && s.last_used.lock().unwrap_or_else(|e| e.into_inner()).elapsed() >= idle
            })
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter().filter_map(|k| slots.remove(k)).collect()
    }
}

/// Ends `slot`'s session, if it was opened and named.
pub(super) async fn close(forwarder: &Forwarder, backend: &Backend, slot: &Slot) {
    if let Some(Session {
        id: Some(id),
        version,
        ..
    }) = slot.session.get()
    {
        wire::close(forwarder, backend, version, id.clone()).await;
    }
}

/// `initialize` and `notifications/initialized` for `key`, with the client's principal header.
pub(super) async fn open(
    forwarder: &Forwarder,
    backend: &Backend,
    key: &Key,
    client_headers: &HeaderMap,
) -> Result<Session, UpstreamError> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"mrtr-init","method":"initialize","params":{{"protocolVersion":"{}","capabilities":{},"clientInfo":{{"name":"mrtr-gateway","version":"{}"}}}}}}"#,
        LEGACY_VERSIONS[0],
        key.capabilities,
        env!("CARGO_PKG_VERSION")
    );
    let headers = identity_headers(client_headers);
    let (answer, id) =
        wire::exchange(forwarder, backend, headers.clone(), None, None, Bytes::from(body)).await?;
    let result: Option<Value> = answer.result().and_then(|r| serde_json::from_str(r.get()).ok());
    let Some(result) = result else {
        return Err(UpstreamError::Unreachable(format!(
            "initialize got no result (HTTP {})",
            answer.status
        )));
    };
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !LEGACY_VERSIONS.contains(&version) {
        return Err(UpstreamError::Unreachable(format!(
            "initialize answered protocol version {version:?}, which the gateway does not speak"
        )));
    }
    let initialized = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let (done, _) = wire::exchange(
        forwarder,
        backend,
        headers,
        Some(version),
        id.as_ref(),
        initialized,
    )
    .await?;
    if !done.status.is_success() {
        return Err(UpstreamError::Unreachable(format!(
            "notifications/initialized got HTTP {}",
            done.status
        )));
    }
    tracing::debug!(
        backend = backend.name(),
        version,
        session = id.is_some(),
        "legacy session opened"
    );
    Ok(Session {
        id,
        version: version.to_owned(),
        discover: discover_result(&result),
        next_id: AtomicU64::new(1),
        _counted: Held::new(metrics::BACKEND_SESSIONS, Some(backend.name())),
    })
}

/// Answers into `lease`'s session in the background, holding the lease until the translation
/// that uses it is dropped.
pub(super) fn reply_sink(forwarder: Forwarder, backend: Backend, lease: Lease) -> Reply {
    let lease = Arc::new(lease);
    Arc::new(move |message: Bytes| {
        let (forwarder, backend, lease) = (forwarder.clone(), backend.clone(), lease.clone());
        let Some(session) = lease.session() else { return };
        let (version, id) = (session.version.clone(), session.id.clone());
        // A translation dropped as the runtime shuts down has no one to send with.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let sent = wire::exchange(&forwarder, &backend, HeaderMap::new(), Some(&version), id.as_ref(), message).await;
            if let Err(error) = sent {
                tracing::debug!(backend = backend.name(), %error, "answering a legacy backend's message failed");
            }
            drop(lease);
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_principal_has_at_most_its_share_of_a_backends_sessions() {
        // Nothing listens there: each session fails to open, but its place is taken (and given
        // up by eviction) as for one that opened.
        let backend = Backend::new("old", "http://127.0.0.1:1/mcp").unwrap();
        let forwarder = Forwarder::new(std::slice::from_ref(&backend), Duration::from_secs(5));
        let pool = Pool::default();
        let key = |user: &str, n: usize| Key {
            principal: Some(user.into()),
            capabilities: format!(r#"{{"n":{n}}}"#).into(),
        };
        let count = |user: &str| {
            let slots = pool.slots.lock().unwrap();
            slots
                .keys()
                .filter(|k| k.principal.as_deref() == Some(user))
                .count()
        };
        for n in 0..MAX_SESSIONS_PER_PRINCIPAL + 4 {
            let _ = pool
                .lease(&forwarder, &backend, &key("alice", n), &HeaderMap::new())
                .await;
        }
        assert_eq!(
            count("alice"),
            MAX_SESSIONS_PER_PRINCIPAL,
            "her idlest made room for her newest"
        );
        let _ = pool
            .lease(&forwarder, &backend, &key("bob", 0), &HeaderMap::new())
            .await;
        assert_eq!(
            (count("alice"), count("bob")),
            (MAX_SESSIONS_PER_PRINCIPAL, 1),
            "bob's is not hers to take"
        );
    }
}
