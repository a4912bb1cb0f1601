//! One backend's health: what the gateway's last probe of it gave, shared by every clone of its
//! `Backend`. `ops/readiness.rs` probes and reads it for `/readyz`,
//! which shows a down backend's reason as a class only ([`Down::reason`]); what exactly failed
//! goes to the log, which is not served to whoever can reach the admin listener.
//!
//! A backend is up when the probe found it to be an MCP server the gateway can speak with, of
//! either era ([`Found`], by `upstream/era.rs`); its era, revision and server are kept for
//! `/readyz`, the log and the choice of how requests reach it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use serde_json::{Value, json};

/// What the probe found a backend to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// Whether it is a 2026-07-28 server (else an `initialize`-era one).
    pub(crate) modern: bool,
    /// The revision spoken with it: 2026-07-28, or the one `initialize` negotiated.
    pub(crate) version: String,
    /// Its `serverInfo` name and version, when it gave them.
    pub(crate) server: Option<(String, String)>,
}

impl Found {
    /// `"modern"` or `"legacy"`, as `/readyz` and the metrics name it.
    pub(crate) fn era(&self) -> &'static str {
        if self.modern { "modern" } else { "legacy" }
    }

    /// `name version` of its server, or `unknown`, for the log.
    pub(crate) fn server_text(&self) -> String {
        match &self.server {
            Some((name, version)) => format!("{name} {version}"),
            None => "unknown".to_owned(),
        }
    }
}

/// Why a backend is down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Down {
    /// A class of failure for `/readyz`: `unreachable`, `timeout`, `not_mcp` (no MCP answer),
    /// `not_modern` (configured `modern`, answers as a legacy server) or `unknown_era` (answers
    /// `initialize` with a revision the gateway does not know).
    pub(crate) reason: &'static str,
    /// What failed, for the log.
    pub(crate) detail: String,
}

/// What the backend's last probe gave.
#[derive(Clone, Debug)]
struct Check {
    down: Option<Down>,
    /// What the backend was found to be, when the probe got that far.
    found: Option<Found>,
    at: SystemTime,
}

/// One backend's health, shared by every clone of its `Backend`.
#[derive(Debug, Default)]
pub struct BackendHealth {
    last: Mutex<Option<Check>>,
    /// Whether the last probe found an `initialize`-era server: read by every request routed to
    /// the backend, so kept apart from the lock.
    legacy: AtomicBool,
}

impl BackendHealth {
    /// Records the outcome of a probe: the era found, or why the backend is down.
    pub(crate) fn record(&self, backend: &str, outcome: Result<Found, Down>) {
        let (found, down) = match outcome {
            Ok(found) => (Some(found), None),
            Err(down) => (None, Some(down)),
        };
        if let Some(found) = &found {
            self.legacy.store(!found.modern, Ordering::Relaxed);
        }
        let check = Check {
            down,
            found,
            at: SystemTime::now(),
        };
        let up = check.down.is_none();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let before = last.as_ref().map(|c| (c.down.is_none(), c.found.clone()));
        if before.as_ref() != Some(&(up, check.found.clone())) {
            let (era, version, server) = match &check.found {
                Some(found) => (found.era(), found.version.as_str(), found.server_text()),
                None => ("unknown", "", String::new()),
            };
            match &check.down {
                None => tracing::info!(backend, era, version, server, "backend up"),
                Some(down) => {
                    tracing::warn!(backend, reason = down.reason, detail = %down.detail, "backend down")
                }
            }
            crate::observe::metrics::backend_up(backend, up);
            let previous = before.and_then(|(_, found)| found);
            crate::observe::metrics::backend_era(
                backend,
                previous.as_ref().map(|f| (f.era(), f.version.as_str())),
                check.found.as_ref().map(|f| (f.era(), f.version.as_str())),
            );
        }
        *last = Some(check);
    }

    /// Whether a probe found this backend to be an `initialize`-era server (spoken to through
    /// `upstream/session/`); a probe that failed keeps what an earlier one found.
    pub(crate) fn is_legacy(&self) -> bool {
        self.legacy.load(Ordering::Relaxed)
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
                if let Some(found) = check.found {
                    value["era"] = json!(found.era());
                    value["protocol_version"] = json!(found.version);
                    if let Some((name, version)) = found.server {
                        value["server"] = json!({ "name": name, "version": version });
                    }
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
        health.record("crm", Ok(found(true)));
        let shown = health.to_json();
        assert_eq!(
            (
                shown["state"].as_str(),
                shown["era"].as_str(),
                shown["server"]["name"].as_str()
            ),
            (Some("up"), Some("modern"), Some("crm"))
        );
        assert!(shown.get("reason").is_none());
        assert!(!health.is_legacy());
    }

    fn found(modern: bool) -> Found {
        Found {
            modern,
            version: if modern { "2026-07-28" } else { "2025-11-25" }.to_owned(),
            server: Some(("crm".to_owned(), "3.1".to_owned())),
        }
    }

    #[test]
    fn an_initialize_era_backend_is_up_with_its_era() {
        let health = BackendHealth::default();
        health.record("crm", Ok(found(false)));
        let shown = health.to_json();
        assert_eq!(
            (
                shown["state"].as_str(),
                shown.get("reason"),
                shown["era"].as_str(),
                shown["protocol_version"].as_str()
            ),
            (Some("up"), None, Some("legacy"), Some("2025-11-25"))
        );
        assert_eq!(health.is_up(), Some(true));
        assert!(health.is_legacy());
        health.record(
            "crm",
            Err(Down {
                reason: "timeout",
                detail: String::new(),
            }),
        );
        assert!(health.is_legacy(), "a failed probe keeps the era found before");
    }
}
