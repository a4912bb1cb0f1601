//! The gateway's readiness, and the probe that keeps the backends' health current.
//!
//! A backend (`upstream/health.rs` holds its state) is **up** when the gateway's last probe
//! found it to be a 2026-07-28 server: `server/discover` with fixed headers answered with a
//! result (or a modern error about headers). The probe falls back to `initialize` (see
//! `upstream/era.rs`) to tell an `initialize`-era server, which is **down** with its era and
//! version shown, from no MCP server at all. It is **down** too when the probe failed
//! (unreachable, timed out, no MCP answer), and **unknown** before the first probe. [`probe`]
//! runs at start-up and then at a fixed interval, so the state is never older than that
//! interval. Only the probe decides: what a client's request gets from a backend says as much
//! about the request as about the backend, and one bad request must not take a replica out of a
//! load balancer's rotation.
//!
//! The gateway is **ready** when its keyring is loaded, it is listening, it is not draining, and
//! the backends satisfy the [`ReadyRule`]: by default **any** one backend up (a replica that can
//! reach some backends still serves them, and every replica sees the same backends, so taking all
//! replicas out because one backend is down would turn a partial outage into a total one), or
//! **all** of them.
//!
//! With a shared store (`[shared-store]`), the body also shows what its last operation found
//! (`"shared_store"`, from `store/health.rs`): up or down, since when, why, and what limited
//! requests get meanwhile (`on-store-error`). A store outage does not make a replica unready:
//! every replica shares the store, so leaving them all out of rotation would turn refusals of
//! limited requests into no service at all.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tower_mrtr::KeyringHandle;

use super::live::Proxies;
use crate::route::Proxy;
use crate::serve::drain::Lifecycle;
use crate::store::StoreHealth;
use crate::upstream::Backend;
use crate::upstream::session::IDLE_TIMEOUT;

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

/// What readiness is judged from, read afresh at every [`check`](Readiness::check); a running
/// gateway's is [`RunningGateway::readiness`](crate::RunningGateway::readiness).
#[derive(Clone, Debug)]
pub struct Readiness {
    pub(crate) keys: KeyringHandle,
    /// True while the MCP listener accepts connections.
    pub(crate) accepting: Arc<AtomicBool>,
    pub(crate) lifecycle: Lifecycle,
    /// The proxy in use, whose backends are judged.
    pub(crate) proxies: Proxies,
    pub(crate) rule: ReadyRule,
    /// The shared store's health, when there is one.
    pub(crate) store: Option<Arc<StoreHealth>>,
}

impl Readiness {
    /// Readiness and its explanation: `(ready, JSON body)`. The body lists every reason for not
    /// being ready, the active key id and the state of each backend.
    pub fn check(&self) -> (bool, Value) {
        let listening = self.accepting.load(Ordering::SeqCst);
        let draining = self.lifecycle.is_draining();
        let keyring = self.keys.load();
        let mut reasons = Vec::new();
        if !listening {
            reasons.push("not listening".to_owned());
        }
        if draining {
            reasons.push("draining".to_owned());
        }
        let proxy = self.proxies.load();
        let states: Vec<Option<bool>> = proxy.backends().iter().map(|b| b.health().is_up()).collect();
        let up = states.iter().filter(|s| **s == Some(true)).count();
        let backends_ok = match self.rule {
            ReadyRule::Any => up > 0,
            ReadyRule::All => up == states.len(),
        };
        if !backends_ok {
            let not_up: Vec<&str> = proxy
                .backends()
                .iter()
                .zip(&states)
                .filter(|(_, s)| **s != Some(true))
                .map(|(b, _)| b.name())
                .collect();
            reasons.push(match self.rule {
                ReadyRule::Any => "no backend was usable at its last probe".to_owned(),
                ReadyRule::All => format!("backends not usable at their last probe: {}", not_up.join(", ")),
            });
        }
        let backends: serde_json::Map<String, Value> = proxy
            .backends()
            .iter()
            .map(|b| (b.name().to_owned(), b.health().to_json()))
            .collect();
        let ready = reasons.is_empty();
        let mut body = json!({
            "ready": ready,
            "reasons": reasons,
            "draining": draining,
            "listening": listening,
            "keyring": { "active": keyring.active_key_id().as_str(), "keys": keyring.len() },
            "ready_backends": self.rule.to_string(),
            "backends": backends,
        });
        if let Some(store) = &self.store {
            body["shared_store"] = store.detail();
        }
        (ready, body)
    }
}

/// Probes every backend of the proxy in use now and then every `interval`, forever
/// (spawn it; abort the task to stop). The outcomes land in each backend's [`BackendHealth`](crate::upstream::health::BackendHealth).
pub(crate) async fn probe(proxies: Proxies, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let proxy = proxies.load_full();
        probe_once(&proxy, proxy.backends()).await;
        proxy.upstreams().sweep(proxy.backends(), IDLE_TIMEOUT).await;
    }
}

/// Probes `backends` of `proxy` once (a reload probes the backends it added at once, so that
/// `/readyz` need not wait for the next round to judge them).
pub(crate) async fn probe_once(proxy: &Proxy, backends: &[Backend]) {
    let upstreams = proxy.upstreams();
    let probes = backends.iter().map(|backend| async {
        let outcome = upstreams.detect(backend).await;
        backend.health().record(backend.name(), outcome);
    });
    futures_util::future::join_all(probes).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_rules_read_as_the_flag_names_them() {
        assert_eq!("all".parse::<ReadyRule>(), Ok(ReadyRule::All));
        assert!("most".parse::<ReadyRule>().is_err());
    }
}
