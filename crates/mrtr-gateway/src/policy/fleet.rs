//! The limits counted for the fleet, in the shared store (`store/`), with the accounting the
//! process uses (`rate.rs`): a retry's envelope is recorded the first time any replica sees it,
//! and that first use is part of the call its round 1 paid for; the same envelope presented
//! again, at any replica, is a replay, counted as a new call, or, with `single-use`, refused.
//!
//! What each request costs: nothing when no limit applies and single use is off (no round
//! trip); else one round trip, the store's script (`store/script.rs`), under the store's
//! timeout. When the store does not answer, `on-store-error` decides: `deny` refuses the request
//! (`503`), `allow` admits it as if no limit applied. A retry refused so has its envelope's
//! record taken back (`SharedStore::release`), since the check may still have run: its state
//! stays unspent for the client's next try.
//!
//! Single use covers request states (the envelope of round `r ≥ 1` of an MRTR call), not task
//! handles, which a client presents again by design (`tasks/get` polls).

use std::time::{Duration, SystemTime};

use super::rate::{Charge, RateLimits};
use crate::auth::Caller;
use crate::observe::metrics;
use crate::store::{Check, EnvelopeUse, OnStoreError, SharedStore, Take, Verdict};

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Over a limit; the time until it admits the request.
    Limited(Duration),
    /// A single-use request state presented again.
    Replayed,
    /// The store did not answer, and `on-store-error` is `deny`.
    StoreUnavailable,
}

impl RateLimits {
    /// Counts a request of `caller` in the shared store `store` (see the [module docs](self)).
    pub(crate) async fn check_shared(
        &self,
        store: &SharedStore,
        caller: Option<&Caller>,
        charge: Charge<'_>,
    ) -> Result<(), Refusal> {
        self.check_shared_at(store, caller, charge, SystemTime::now())
            .await
    }

    async fn check_shared_at(
        &self,
        store: &SharedStore,
        caller: Option<&Caller>,
        charge: Charge<'_>,
        now: SystemTime,
    ) -> Result<(), Refusal> {
        let settings = store.settings();
        let principal = caller.map_or("", |c| &c.principal);
        let tool = (charge.method == "tools/call").then_some(charge.target).flatten();
        let (applying, takes): (Vec<_>, Vec<Take>) = self
            .limits
            .iter()
            .filter_map(|limit| {
                let key = limit.key(principal, tool)?;
                let take = Take {
                    key: limit.store_key(&settings.key_prefix, key),
                    interval: limit.interval,
                    tolerance: limit.interval * limit.burst,
                };
                Some((limit.per, take))
            })
            .unzip();
        // As in the process, an envelope is recorded only where it matters: single use, or a
        // limit that its first use is free of.
        let envelope = charge
            .retry
            .filter(|_| settings.single_use || !takes.is_empty())
            .map(|(id, expires_at)| EnvelopeUse {
                id,
                lifetime: expires_at.duration_since(now).unwrap_or_default(),
                single_use: settings.single_use,
                token: token(),
            });
        if envelope.is_none() && takes.is_empty() {
            return Ok(());
        }
        match store
            .check(&Check {
                envelope,
                takes: &takes,
            })
            .await
        {
            Ok(Verdict::Admitted) => Ok(()),
            Ok(Verdict::Replayed) => {
                metrics::replay_refused();
                tracing::debug!(principal, tool, "a single-use request state presented again");
                Err(Refusal::Replayed)
            }
            Ok(Verdict::Limited { limit, wait }) => {
                let per = applying.get(limit).map_or("principal", |p| p.label());
                metrics::rate_limited(per);
                tracing::debug!(limit = per, principal, tool, "rate limited (fleet)");
                Err(Refusal::Limited(wait))
            }
            Err(_) => match settings.on_store_error {
                OnStoreError::Deny => {
                    if let Some(envelope) = &envelope {
                        // Best effort: a store that is down keeps the record (if the check made
                        // one) until the envelope expires, and the client's retry is a replay.
                        let _ = store.release(envelope).await;
                    }
                    Err(Refusal::StoreUnavailable)
                }
                OnStoreError::Allow => Ok(()),
            },
        }
    }
}

/// A check's own token (`store/script.rs`). Random, so that no other check, at this replica or
/// another, holds the same; should the system's generator fail, the clock's nanoseconds.
fn token() -> u64 {
    let mut bytes = [0; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}
