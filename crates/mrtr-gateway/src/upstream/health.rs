//! One backend's health: what its last catalog or discovery request gave, shared by every clone
//! of its [`Backend`](crate::upstream::Backend). [`crate::ops::readiness`] reads it for
//! `/readyz` and keeps it current with its probe.

use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{Value, json};

/// What one backend's last catalog or discovery request gave.
#[derive(Clone, Debug)]
struct Check {
    up: bool,
    detail: Option<String>,
    at: SystemTime,
}

/// One backend's health, shared by every clone of its [`Backend`](crate::upstream::Backend).
#[derive(Debug, Default)]
pub struct BackendHealth {
    last: Mutex<Option<Check>>,
}

impl BackendHealth {
    /// Records the outcome of a catalog or discovery request; `detail` says why it failed.
    pub(crate) fn record(&self, backend: &str, outcome: Result<(), String>) {
        let up = outcome.is_ok();
        let check = Check {
            up,
            detail: outcome.err(),
            at: SystemTime::now(),
        };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let was_up = last.as_ref().map(|c| c.up);
        if was_up != Some(up) {
            match &check.detail {
                None => tracing::info!(backend, "backend up"),
                Some(detail) => tracing::warn!(backend, %detail, "backend down"),
            }
            crate::observe::metrics::backend_up(backend, up);
        }
        *last = Some(check);
    }

    /// `Some(true)` up, `Some(false)` down, `None` not checked yet.
    pub fn is_up(&self) -> Option<bool> {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.up)
    }

    pub(crate) fn to_json(&self) -> Value {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match last {
            None => json!({ "state": "unknown" }),
            Some(check) => {
                let age = check.at.elapsed().unwrap_or_default().as_secs();
                let mut value = json!({
                    "state": if check.up { "up" } else { "down" },
                    "checked_seconds_ago": age,
                });
                if let Some(detail) = check.detail {
                    value["error"] = json!(detail);
                }
                value
            }
        }
    }
}
