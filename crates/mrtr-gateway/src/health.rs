//! Backend health and the gateway's readiness.
//!
//! A backend is **up** when it answered its last catalog or discovery request (`*/list` or
//! `server/discover`, from a client's call, a catalog refresh, or the gateway's own probe) with a
//! JSON-RPC response, success or error: it is reachable and speaks MCP. It is **down** when that
//! request failed (unreachable, timed out, or an answer that is no JSON-RPC response), and
//! **unknown** before its first such request. [`probe`] sends `server/discover` to every backend
//! at start-up and then at a fixed interval, so the state is never older than that interval.
//!
//! The gateway is **ready** when its keyring is loaded, it is listening, it is not draining, and
//! the backends satisfy the [`ReadyRule`]: by default **any** one backend up (a replica that can
//! reach some backends still serves them, and every replica sees the same backends, so taking all
//! replicas out because one backend is down would turn a partial outage into a total one), or
//! **all** of them.
//!
//! ```
//! use mrtr_gateway::health::ReadyRule;
//!
//! assert_eq!("all".parse::<ReadyRule>(), Ok(ReadyRule::All));
//! assert!("most".parse::<ReadyRule>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tower_mrtr::KeyringHandle;

use crate::backend::Backend;
use crate::proxy::Proxy;

/// Which backends must be up for the gateway to be ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadyRule {
    /// At least one backend is up.
    #[default]
    Any,
    /// Every backend is up.
    All,
}

impl FromStr for ReadyRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "any" => Ok(Self::Any),
            "all" => Ok(Self::All),
            other => Err(format!("expected \"any\" or \"all\", got {other:?}")),
        }
    }
}

impl fmt::Display for ReadyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Any => "any",
            Self::All => "all",
        })
    }
}

/// What one backend's last catalog or discovery request gave.
#[derive(Clone, Debug)]
struct Check {
    up: bool,
    detail: Option<String>,
    at: SystemTime,
}

/// One backend's health, shared by every clone of its [`Backend`].
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
            crate::telemetry::backend_up(backend, up);
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

    fn to_json(&self) -> Value {
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

/// Everything readiness depends on.
#[derive(Clone, Debug)]
pub struct ReadinessInputs {
    /// The keyring in use.
    pub keys: KeyringHandle,
    /// Whether the MCP listener accepts connections.
    pub listening: bool,
    /// Whether the gateway drains.
    pub draining: bool,
    /// The configured backends.
    pub backends: Vec<Backend>,
    /// Which backends must be up.
    pub rule: ReadyRule,
}

/// Readiness and its explanation: `(ready, JSON body)`. The body lists every reason for not
/// being ready, the active key id and the state of each backend.
pub fn readiness(inputs: &ReadinessInputs) -> (bool, Value) {
    let keyring = inputs.keys.load();
    let mut reasons = Vec::new();
    if !inputs.listening {
        reasons.push("not listening".to_owned());
    }
    if inputs.draining {
        reasons.push("draining".to_owned());
    }
    let states: Vec<Option<bool>> = inputs.backends.iter().map(|b| b.health().is_up()).collect();
    let up = states.iter().filter(|s| **s == Some(true)).count();
    let backends_ok = match inputs.rule {
        ReadyRule::Any => up > 0,
        ReadyRule::All => up == states.len(),
    };
    if !backends_ok {
        let not_up: Vec<&str> = inputs
            .backends
            .iter()
            .zip(&states)
            .filter(|(_, s)| **s != Some(true))
            .map(|(b, _)| b.name())
            .collect();
        reasons.push(match inputs.rule {
            ReadyRule::Any => "no backend answered its last catalog or discovery request".to_owned(),
            ReadyRule::All => format!(
                "backends that did not answer their last catalog or discovery request: {}",
                not_up.join(", ")
            ),
        });
    }
    let backends: serde_json::Map<String, Value> = inputs
        .backends
        .iter()
        .map(|b| (b.name().to_owned(), b.health().to_json()))
        .collect();
    let ready = reasons.is_empty();
    let body = json!({
        "ready": ready,
        "reasons": reasons,
        "draining": inputs.draining,
        "listening": inputs.listening,
        "keyring": { "active": keyring.active_key_id().as_str(), "keys": keyring.len() },
        "ready_backends": inputs.rule.to_string(),
        "backends": backends,
    });
    (ready, body)
}

/// The discovery request the probe sends.
const PROBE_BODY: &str = r#"{"jsonrpc":"2.0","id":"mrtr-gateway-health","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

fn probe_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
}

/// Sends `server/discover` to every backend of `proxy` now and then every `interval`, forever
/// (spawn it; abort the task to stop). The outcomes land in each backend's [`BackendHealth`].
pub async fn probe(proxy: Proxy, interval: Duration) {
    let headers = probe_headers();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let forwarder = proxy.forwarder();
        let probes = proxy.backends().iter().map(|backend| {
            // `exchange_recorded` records the outcome in the backend's health.
            forwarder.exchange_recorded(backend, &headers, Bytes::from_static(PROBE_BODY.as_bytes()))
        });
        futures_util::future::join_all(probes).await;
    }
}
