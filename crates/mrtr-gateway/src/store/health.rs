//! What the shared store's last operation found: shown in `/readyz` (`"shared_store"`) and as
//! `mrtr_gateway_shared_store_up`. A store outage does not make a replica unready: every replica
//! shares the store, so taking them out of the load balancer would turn limits that answer
//! `on-store-error` into no service at all; the detail says why limited requests are refused.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};

use super::settings::OnStoreError;
use crate::observe::metrics;

/// The store's state as its operations found it.
#[derive(Debug)]
pub struct StoreHealth {
    on_error: OnStoreError,
    state: Mutex<State>,
    /// How many times the store answered after not answering (or before its first answer):
    /// what it holds may have been lost meanwhile (a restart without persistence).
    recoveries: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// `None` until the first operation; then whether the last one succeeded, and why not.
    last: Option<Result<(), &'static str>>,
    /// When the state last changed.
    since: Instant,
}

impl StoreHealth {
    pub(super) fn new(on_error: OnStoreError) -> Self {
        Self {
            on_error,
            state: Mutex::new(State {
                last: None,
                since: Instant::now(),
            }),
            recoveries: AtomicU64::new(0),
        }
    }

    /// Records a success; true when the store was down (or unknown) before.
    pub(super) fn succeeded(&self) -> bool {
        self.set(Ok(()))
    }

    /// Records a failure for `reason`; true when the store was up (or unknown) before.
    pub(super) fn failed(&self, reason: &'static str) -> bool {
        self.set(Err(reason))
    }

    fn set(&self, now: Result<(), &'static str>) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let changed = state.last.map(|r| r.is_ok()) != Some(now.is_ok());
        if changed {
            state.since = Instant::now();
            metrics::shared_store_up(now.is_ok());
            if now.is_ok() {
                self.recoveries.fetch_add(1, Ordering::Relaxed);
            }
        }
        state.last = Some(now);
        changed
    }

    /// How many times the store came (back) up: see [`StoreHealth`]'s field.
    pub(crate) fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Relaxed)
    }

    /// Whether the last operation succeeded (`None` before the first).
    pub fn up(&self) -> Option<bool> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last
            .map(|r| r.is_ok())
    }

    /// The `/readyz` detail: `{"state":"up"|"down"|"unknown","since_seconds":N,"on_error":…}`,
    /// with the `reason` of the last failure when down.
    pub fn detail(&self) -> Value {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut detail = json!({
            "state": match state.last {
                None => "unknown",
                Some(Ok(())) => "up",
                Some(Err(_)) => "down",
            },
            "since_seconds": state.since.elapsed().as_secs(),
            "on_error": self.on_error.to_string(),
        });
        if let Some(Err(reason)) = state.last {
            detail["reason"] = Value::from(reason);
        }
        detail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_reported_once_and_shown() {
        let health = StoreHealth::new(OnStoreError::Deny);
        assert_eq!(health.detail()["state"], "unknown");
        assert!(health.succeeded());
        assert!(!health.succeeded());
        assert!(health.failed("timeout"));
        assert!(!health.failed("connection"));
        let detail = health.detail();
        assert_eq!(
            (
                detail["state"].as_str(),
                detail["reason"].as_str(),
                detail["on_error"].as_str()
            ),
            (Some("down"), Some("connection"), Some("deny"))
        );
        assert_eq!(health.up(), Some(false));
    }
}
