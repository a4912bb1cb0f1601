//! Pins learned by the fleet (with `[shared-store]`): what [`Pins`] claims in the store, how it
//! keeps the fleet's answer, and what it holds back while the store does not answer (see the
//! parent module's docs). The store's side, one Lua script, is `store/pins.rs`.

use std::sync::atomic::Ordering;

use super::{Key, Pin, Pins, lock};
use crate::store::{FleetPin, OnStoreError, PinClaim, SharedStore};

impl Pins {
    /// Whether the next listing must be observed even if no backend's answer changed: with a
    /// shared store, pins learned while it did not answer wait for a claim, or the store came
    /// back since the last claims (a merged list kept from before is then merged again).
    pub(crate) fn claims_pending(&self) -> bool {
        self.fleet.as_ref().is_some_and(|fleet| {
            fleet.health().recoveries() != self.claimed_at.load(Ordering::Relaxed)
                || !lock(&self.unconfirmed).is_empty()
        })
    }

    /// Claims `batch` (keys, and the pin this replica would set) in the shared store, keeps the
    /// fleet's pin of each and reports what differs from it; without an answer, keeps this
    /// replica's own until the next listing claims it again.
    pub(super) async fn claim(&self, fleet: &SharedStore, batch: &[(Key, Pin)]) {
        let claims: Vec<PinClaim> = batch
            .iter()
            .map(|((backend, kind, name), pin)| PinClaim {
                backend: backend.clone(),
                kind: kind.label(),
                name: name.clone(),
                digest: pin.digest.clone(),
                definition: pin.definition.clone(),
            })
            .collect();
        match fleet.claim_pins(&claims).await {
            Ok(pins) => {
                for ((key, _), FleetPin { digest, definition }) in batch.iter().zip(pins) {
                    let pin = Pin { digest, definition };
                    self.keep(&self.learned, key, pin.clone());
                    lock(&self.unconfirmed).remove(key);
                    let now = lock(&self.current).get(key).cloned();
                    if let Some(now) = now.filter(|now| now.digest != pin.digest) {
                        self.report(key, &pin, &now);
                    }
                }
            }
            Err(_) => {
                for (key, pin) in batch {
                    if self.keep(&self.learned, key, pin.clone()) {
                        lock(&self.unconfirmed).insert(key.clone());
                    }
                }
            }
        }
    }

    /// Whether `key`'s pin was learned here while the store did not answer, with
    /// `on-store-error = "deny"`: then it is not known to be the fleet's.
    pub(super) fn unconfirmed_denied(&self, key: &Key) -> bool {
        self.fleet
            .as_ref()
            .is_some_and(|fleet| fleet.settings().on_store_error == OnStoreError::Deny)
            && lock(&self.unconfirmed).contains(key)
    }
}
