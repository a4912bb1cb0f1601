//! Which envelopes this replica has seen used ([`FirstUses`]): what tells a retry's first
//! presentation of a `requestState`, which is part of the call its first round was counted for,
//! from a replay of it, which the rate limits count as a new call (`rate.rs`).
//!
//! An entry is an envelope's id (its nonce, `tower_mrtr::EnvelopeId`) and its expiry, kept until
//! the envelope stops opening, when a replay of it is refused anyway. Only retries that some
//! limit applies to are recorded. The set is bounded ([`CAPACITY`]); when it is full of
//! envelopes still open, a retry is treated as a replay (it is counted), so that the bound can
//! only make the limits stricter, never looser.
//!
//! The set is this replica's: a state presented once at each of R replicas is a first use at
//! each (see `docs/gateway.md`, "Rate limits").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use tower_mrtr::EnvelopeId;

/// Most envelopes remembered at once (about 64 bytes each).
pub(crate) const CAPACITY: usize = 100_000;

/// What a use of an envelope was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// Its first on this replica.
    First,
    /// A later one: a replay.
    Again,
    /// Not known, and no room to remember it: counted as a replay.
    Full,
}

/// The envelopes used on this replica, until each expires; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct FirstUses {
    inner: Mutex<Inner>,
    capacity: usize,
}

#[derive(Debug)]
struct Inner {
    seen: HashMap<EnvelopeId, SystemTime>,
    /// The earliest expiry among `seen`: nothing can be pruned before it.
    earliest: Option<SystemTime>,
}

impl Default for FirstUses {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl FirstUses {
    /// An empty set remembering at most `capacity` envelopes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                seen: HashMap::new(),
                earliest: None,
            }),
            capacity,
        }
    }

    /// Records a use at `now` of the envelope `id`, which opens until `expires_at`.
    pub(crate) fn record(&self, id: EnvelopeId, expires_at: SystemTime, now: SystemTime) -> Use {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.seen.get(&id).is_some_and(|expiry| *expiry > now) {
            return Use::Again;
        }
        if inner.seen.len() >= self.capacity && inner.earliest.is_some_and(|e| e <= now) {
            // Pruned only once something has expired, so a set full of open envelopes costs a
            // look-up, not a scan, per use.
            inner.seen.retain(|_, expiry| *expiry > now);
            inner.earliest = inner.seen.values().min().copied();
        }
        if inner.seen.len() >= self.capacity {
            return Use::Full;
        }
        inner.seen.insert(id, expires_at);
        inner.earliest = Some(inner.earliest.map_or(expires_at, |e| e.min(expires_at)));
        Use::First
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().unwrap().seen.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn id(n: u8) -> EnvelopeId {
        EnvelopeId::from_nonce([n; 24])
    }

    #[test]
    fn the_first_use_is_told_from_the_rest_until_the_envelope_expires() {
        let uses = FirstUses::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let expires = now + Duration::from_secs(60);
        assert_eq!(uses.record(id(1), expires, now), Use::First);
        assert_eq!(uses.record(id(1), expires, now), Use::Again);
        assert_eq!(uses.record(id(2), expires, now), Use::First);
        // Expired, it opens no more: whatever is recorded then does not matter, and is replaced.
        assert_eq!(
            uses.record(id(1), expires + Duration::from_secs(1), expires),
            Use::First
        );
    }

    #[test]
    fn a_full_set_counts_unknown_envelopes_as_replays_until_some_expire() {
        let uses = FirstUses::with_capacity(2);
        let now = SystemTime::UNIX_EPOCH;
        let soon = now + Duration::from_secs(10);
        let later = now + Duration::from_secs(100);
        assert_eq!(uses.record(id(1), soon, now), Use::First);
        assert_eq!(uses.record(id(2), later, now), Use::First);
        assert_eq!(uses.record(id(3), later, now), Use::Full);
        assert_eq!(uses.record(id(2), later, now), Use::Again);
        assert_eq!(uses.record(id(3), later, soon), Use::First, "1 expired: room");
        assert_eq!(uses.len(), 2);
    }
}
