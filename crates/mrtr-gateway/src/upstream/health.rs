//! One backend's health: what the gateway's last probe of it gave, shared by every clone of its
//! [`Backend`](crate::upstream::Backend). `ops/readiness.rs` probes and reads it for `/readyz`,
//! which shows a down backend's reason as a class only ([`Down::reason`]); what exactly failed
//! goes to the log, which is not served to whoever can reach the admin listener.

use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{Value, json};

/// Why a backend is down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Down {
    /// A class of failure for `/readyz`: `unreachable`, `timeout` or `not_mcp`.
    pub(crate) reason: &'static str,
    /// What failed, for the log.
    pub(crate) detail: String,
}

/// What the backend's last probe gave.
#[derive(Clone, Debug)]
struct Check {
    down: Option<Down>,
    at: SystemTime,
}

/// One backend's health, shared by every clone of its [`Backend`](crate::upstream::Backend).
#[derive(Debug, Default)]
pub struct BackendHealth {
    last: Mutex<Option<Check>>,
}

impl BackendHealth {
    /// Records the outcome of a probe.
    pub(crate) fn record(&self, backend: &str, outcome: Result<(), Down>) {
        let check = Check {
            down: outcome.err(),
            at: SystemTime::now(),
        };
        let up = check.down.is_none();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let was_up = last.as_ref().map(|c| c.down.is_none());
        if was_up != Some(up) {
            match &check.down {
                None => tracing::info!(backend, "backend up"),
                Some(down) => {
                    tracing::warn!(backend, reason = down.reason, detail = %down.detail, "backend down")
                }
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
            .map(|c| c.down.is_none())
    }

    pub(crate) fn to_json(&self) -> Value {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match last {
            None => json!({ "state": "unknown" }),
            Some(check) => {
                let age = check.at.elapsed().unwrap_or_default().as_secs();
                let mut value = json!({
                    "state": if check.down.is_none() { "up" } else { "down" },
                    "checked_seconds_ago": age,
                });
                if let Some(down) = check.down {
                    value["reason"] = json!(down.reason);
                }
                value
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_shows_a_class_of_failure_never_its_detail() {
        let health = BackendHealth::default();
        assert_eq!(health.to_json(), json!({ "state": "unknown" }));
        let detail = "unreachable: tcp connect error: 10.0.3.7:8443 Connection refused".to_owned();
        health.record(
            "crm",
            Err(Down {
                reason: "unreachable",
                detail,
            }),
        );
        let shown = health.to_json();
        assert_eq!(
            (shown["state"].as_str(), shown["reason"].as_str()),
            (Some("down"), Some("unreachable"))
        );
        assert!(!shown.to_string().contains("10.0.3.7"), "{shown}");
        health.record("crm", Ok(()));
        assert_eq!(health.to_json()["state"], "up");
        assert!(health.to_json().get("reason").is_none());
    }
}
