//! The `[[rate-limit]]` tables: token buckets per principal, per tool, or per principal and
//! tool (GCRA, from `governor`), held in this replica's memory. With several replicas each
//! counts its own requests: a limit of N per replica is N × replicas in all, unless the load
//! balancer keeps a principal on one replica.
//!
//! What counts:
//! * `per = "principal"`: every request of the principal (with `tools`, only its calls of
//!   those tools);
//! * `per = "tool"` and `per = "principal-and-tool"`: `tools/call`s of the tools named by
//!   `tools` (every tool when it is empty).
//!
//! A call is counted once, **with its rounds**: an MRTR retry is keyed as the call it continues
//! (its principal and tool, which the envelope binds), and the first time this replica sees its
//! `requestState` it is part of that call and costs nothing more, so a round trip that was
//! admitted is never cut by its own rounds. The same state presented **again** is a replay
//! (`uses.rs`), and costs a token like a new call of that tool: a loop
//! replaying one state reaches the backend once more than the limit allows new calls, and only
//! at the expense of that principal's own calls. Task follow-ups (`tasks/get`, `tasks/update`,
//! `tasks/cancel`) run no tool again (a task is one execution, paid for by its `tools/call`):
//! they count as requests of the principal, under `per = "principal"` limits without `tools`.
//!
//! A request over a limit is answered 429 with `Retry-After` and a JSON-RPC error, and counted
//! in `mrtr_gateway_rate_limited_total`. Without a principal (no principal header and no
//! `[oauth]`), every request is keyed as one caller.
//!
//! With a shared store (`[shared-store]`), the same limits are counted for the fleet instead, in
//! the store, with the same accounting (`fleet.rs`); this file then only says which limits apply
//! to a request and what their keys are.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::time::SystemTime;

use std::sync::Arc;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tower_mrtr::EnvelopeId;

use super::rules::glob;
use super::uses::{FirstUses, Use};
use crate::auth::Caller;
use crate::store::SharedStore;

/// Every this many checks, buckets that are full again are dropped (`retain_recent`), so that
/// memory follows the callers seen recently.
const SWEEP_EVERY: u64 = 4096;

/// What a limit counts per.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Per {
    /// One bucket per principal.
    Principal,
    /// One bucket per tool, shared by every caller.
    Tool,
    /// One bucket per principal and tool.
    PrincipalAndTool,
}

impl Per {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Principal => "principal",
            Self::Tool => "tool",
            Self::PrincipalAndTool => "principal-and-tool",
        }
    }
}

/// One `[[rate-limit]]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RateLimitSpec {
    /// The limit's name, in its keys in a shared store (default: `rate-limit-N`, its place in
    /// the file): a limit renamed, or moved when unnamed, starts with a full budget.
    #[serde(default)]
    pub name: Option<String>,
    /// What the limit counts per.
    pub per: Per,
    /// The tools it counts (exposed names, globs); see the [module docs](self).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Requests allowed per `period`.
    pub requests: NonZeroU32,
    /// The period, in seconds.
    pub period: f64,
    /// Requests allowed at once after a quiet spell (default: `requests`).
    pub burst: Option<NonZeroU32>,
}

/// What a request is to the limits: see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Charge<'a> {
    /// The method of the call counted: the request's own, or the one a retry continues.
    pub(crate) method: &'a str,
    /// That call's target (the tool of a `tools/call`, as the client named it).
    pub(crate) target: Option<&'a str>,
    /// For an MRTR retry, its envelope's id and expiry: its first use is part of its call.
    pub(crate) retry: Option<(EnvelopeId, SystemTime)>,
}

impl<'a> Charge<'a> {
    /// A request that continues no call.
    pub(crate) fn call(method: &'a str, target: Option<&'a str>) -> Self {
        Self {
            method,
            target,
            retry: None,
        }
    }

    /// An MRTR retry of a call of `method` on `target`, presenting the envelope `envelope`,
    /// which opens until `expires_at`.
    pub(crate) fn retry(
        method: &'a str,
        target: Option<&'a str>,
        envelope: EnvelopeId,
        expires_at: SystemTime,
    ) -> Self {
        Self {
            method,
            target,
            retry: Some((envelope, expires_at)),
        }
    }
}

/// One limit, ready to count.
pub(super) struct Limit {
    pub(super) per: Per,
    tools: Vec<String>,
    /// Shared with the next configuration's when a reload keeps the limit as it is.
    buckets: Arc<DefaultKeyedRateLimiter<(Box<str>, Box<str>)>>,
    /// In a shared store's keys: the name, and a digest of what the limit is, so that a limit
    /// changed in any way starts clean there.
    pub(super) name: String,
    pub(super) version: String,
    /// The time one request is worth, and how many may come at once.
    pub(super) interval: Duration,
    pub(super) burst: u32,
}

impl Limit {
    /// Whether this limit counts a request of `tool` (the tool of a `tools/call`, else `None`)
    /// by `principal`, and under which key: `(principal, "")`, `("", tool)` or both.
    pub(super) fn key<'a>(&self, principal: &'a str, tool: Option<&'a str>) -> Option<(&'a str, &'a str)> {
        let named = |tool: &str| self.tools.is_empty() || self.tools.iter().any(|p| glob(p, tool));
        match (self.per, tool) {
            (Per::Principal, _) if self.tools.is_empty() => Some((principal, "")),
            (Per::Principal, Some(tool)) if named(tool) => Some((principal, "")),
            (Per::Tool, Some(tool)) if named(tool) => Some(("", tool)),
            (Per::PrincipalAndTool, Some(tool)) if named(tool) => Some((principal, tool)),
            _ => None,
        }
    }

    /// The key of `key`'s bucket in a shared store whose keys begin with `prefix`: the
    /// principal and tool as a digest (fixed length, unambiguous, and no principal in clear).
    pub(super) fn store_key(&self, prefix: &str, (principal, tool): (&str, &str)) -> String {
        let mut hash = Sha256::new();
        hash.update((principal.len() as u64).to_be_bytes());
        hash.update(principal);
        hash.update(tool);
        let digest = hash.finalize();
        let mut hex = [0; 32];
        let hex = base16ct::lower::encode_str(&digest[..16], &mut hex).unwrap_or_default();
        let mut key = String::with_capacity(prefix.len() + self.name.len() + self.version.len() + 40);
        for part in [prefix, ":v1:rl:", &self.name, ":", &self.version, ":", hex] {
            key.push_str(part);
        }
        key
    }
}

/// Every configured limit.
pub struct RateLimits {
    pub(super) limits: Vec<Limit>,
    clock: DefaultClock,
    checks: AtomicU64,
    /// The envelopes retries presented, to tell a replay from a first use.
    uses: Arc<FirstUses>,
    /// With a shared store, where the limits are counted instead (`fleet.rs`).
    pub(super) store: Option<Arc<SharedStore>>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("limits", &self.limits.iter().map(|l| l.per).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RateLimits {
    /// The limits of `specs`, or what is wrong with one.
    pub fn new(specs: Vec<RateLimitSpec>) -> Result<Self, String> {
        let limits = specs
            .into_iter()
            .enumerate()
            .map(|(n, spec)| {
                let period = Duration::try_from_secs_f64(spec.period)
                    .ok()
                    .filter(|p| !p.is_zero())
                    .ok_or_else(|| {
                        format!(
                            "[[rate-limit]] #{}: period must be a positive number of seconds",
                            n + 1
                        )
                    })?;
                let interval = period / spec.requests.get();
                let burst = spec.burst.unwrap_or(spec.requests);
                let quota = Quota::with_period(interval)
                    .ok_or_else(|| {
                        format!("[[rate-limit]] #{}: period too short for so many requests", n + 1)
                    })?
                    .allow_burst(burst);
                let version = Sha256::digest(format!(
                    "{}|{:?}|{}|{}|{}",
                    spec.per.label(),
                    spec.tools,
                    spec.requests,
                    spec.period,
                    burst
                ));
                Ok(Limit {
                    name: spec.name.unwrap_or_else(|| format!("rate-limit-{}", n + 1)),
                    version: version[..4].iter().map(|b| format!("{b:02x}")).collect(),
                    interval,
                    burst: burst.get(),
                    per: spec.per,
                    tools: spec.tools,
                    buckets: Arc::new(DefaultKeyedRateLimiter::keyed(quota)),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            limits,
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
            uses: Arc::default(),
            store: None,
        })
    }

    /// These limits counted for the fleet in `store` (and, with its `single-use`, every request
    /// state opened at most once there); see `fleet.rs`.
    pub fn with_store(mut self, store: Arc<SharedStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// These limits after a config reload: every limit that is the same as one of `previous`
    /// (its name and what it is) keeps its counts, and the envelopes retries presented stay
    /// known; a changed or new limit starts with full buckets.
    pub(crate) fn carrying(mut self, previous: &RateLimits) -> Self {
        for limit in &mut self.limits {
            let same = |old: &&Limit| old.name == limit.name && old.version == limit.version;
            if let Some(old) = previous.limits.iter().find(same) {
                limit.buckets = old.buckets.clone();
            }
        }
        self.uses = previous.uses.clone();
        self
    }

    /// The shared store the limits are counted in, if any.
    pub(crate) fn store(&self) -> Option<&Arc<SharedStore>> {
        self.store.as_ref()
    }

    /// Counts a request of `caller` (see [`Charge`]): `Err` with the time to wait when a limit
    /// is reached. Every limit that applies is counted, until one refuses.
    pub(crate) fn check(&self, caller: Option<&Caller>, charge: Charge<'_>) -> Result<(), Duration> {
        self.check_at(caller, charge, SystemTime::now())
    }

    fn check_at(&self, caller: Option<&Caller>, charge: Charge<'_>, now: SystemTime) -> Result<(), Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            for limit in &self.limits {
                limit.buckets.retain_recent();
            }
        }
        let principal = caller.map_or("", |c| &c.principal);
        let tool = (charge.method == "tools/call").then_some(charge.target).flatten();
        let mut first_use = None;
        for limit in &self.limits {
            let Some(key) = limit.key(principal, tool) else {
                continue;
            };
            if let Some((envelope, expires_at)) = charge.retry {
                // Recorded once per request, and only when a limit applies to it.
                let used = *first_use.get_or_insert_with(|| self.uses.record(envelope, expires_at, now));
                if used == Use::First {
                    continue;
                }
                tracing::debug!(%envelope, ?used, "a request state presented again: counted as a call");
            }
            if let Err(not_until) = limit.buckets.check_key(&(Box::from(key.0), Box::from(key.1))) {
                crate::observe::metrics::rate_limited(limit.per.label());
                tracing::debug!(limit = limit.per.label(), principal, tool, "rate limited");
                return Err(not_until.wait_time_from(self.clock.now()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(text: &str) -> RateLimits {
        let table: toml::Table = toml::from_str(text).unwrap();
        RateLimits::new(table["rate-limit"].clone().try_into().unwrap()).unwrap()
    }

    const DEPLOY_TWO_AN_HOUR: &str = r#"
[[rate-limit]]
per = "principal-and-tool"
tools = ["deploy"]
requests = 2
period = 3600
"#;

    fn call(tool: &str) -> Charge<'_> {
        Charge::call("tools/call", Some(tool))
    }

    #[test]
    fn a_limit_counts_what_it_names_per_what_it_says() {
        let limits = limits(DEPLOY_TWO_AN_HOUR);
        let (alice, bob) = (Caller::from_principal("alice"), Caller::from_principal("bob"));
        for _ in 0..2 {
            assert!(limits.check(Some(&alice), call("deploy")).is_ok());
        }
        let wait = limits.check(Some(&alice), call("deploy")).unwrap_err();
        assert!(
            wait > Duration::from_secs(60) && wait <= Duration::from_secs(1800),
            "{wait:?}"
        );
        assert!(
            limits.check(Some(&bob), call("deploy")).is_ok(),
            "bob has his own bucket"
        );
        assert!(
            limits.check(Some(&alice), call("other")).is_ok(),
            "another tool is not counted"
        );
        assert!(
            limits
                .check(Some(&alice), Charge::call("tools/list", None))
                .is_ok(),
            "a list is not a call"
        );
    }

    #[test]
    fn a_per_principal_limit_counts_every_request() {
        let limits = limits("[[rate-limit]]\nper = \"principal\"\nrequests = 1\nperiod = 3600\n");
        let alice = Caller::from_principal("alice");
        assert!(
            limits
                .check(Some(&alice), Charge::call("tools/list", None))
                .is_ok()
        );
        assert!(limits.check(Some(&alice), Charge::call("ping", None)).is_err());
        assert!(
            RateLimits::new(vec![RateLimitSpec {
                name: None,
                per: Per::Tool,
                tools: vec![],
                requests: NonZeroU32::MIN,
                period: 0.0,
                burst: None,
            }])
            .is_err()
        );
    }

    fn retry(n: u8) -> Charge<'static> {
        let expires = SystemTime::now() + Duration::from_secs(600);
        Charge::retry(
            "tools/call",
            Some("deploy"),
            EnvelopeId::from_nonce([n; 24]),
            expires,
        )
    }

    #[test]
    fn a_replayed_state_costs_a_call_and_stops_at_the_limit() {
        let limits = limits(DEPLOY_TWO_AN_HOUR);
        let alice = Caller::from_principal("alice");
        // One admitted call, then its round-1 state presented twenty times: the first is part of
        // the call, each later one a new call; the one token left admits one of them.
        assert!(limits.check(Some(&alice), call("deploy")).is_ok());
        let reached = (0..20)
            .filter(|_| limits.check(Some(&alice), retry(1)).is_ok())
            .count();
        assert_eq!(reached, 2);
        assert!(
            limits.check(Some(&alice), call("deploy")).is_err(),
            "the replays spent alice's calls"
        );
        let bob = Caller::from_principal("bob");
        assert!(
            limits.check(Some(&bob), call("deploy")).is_ok(),
            "and no one else's"
        );
    }

    #[test]
    fn a_round_trip_is_not_cut_by_its_own_rounds() {
        let limits = limits(DEPLOY_TWO_AN_HOUR);
        let alice = Caller::from_principal("alice");
        // Two calls of four rounds each (every round a new state): both whole.
        for call_number in 0..2u8 {
            assert!(limits.check(Some(&alice), call("deploy")).is_ok());
            for round in 1..=3u8 {
                assert!(
                    limits
                        .check(Some(&alice), retry(call_number * 10 + round))
                        .is_ok(),
                    "call {call_number}, retry of round {round}"
                );
            }
        }
        assert!(limits.check(Some(&alice), call("deploy")).is_err());
    }

    #[test]
    fn a_retry_no_limit_applies_to_is_not_recorded() {
        let limits = limits(DEPLOY_TWO_AN_HOUR);
        let alice = Caller::from_principal("alice");
        let other = Charge::retry(
            "tools/call",
            Some("other"),
            EnvelopeId::from_nonce([7; 24]),
            SystemTime::now() + Duration::from_secs(600),
        );
        for _ in 0..3 {
            assert!(limits.check(Some(&alice), other).is_ok());
        }
        assert!(
            limits.check(Some(&alice), retry(7)).is_ok(),
            "the same envelope under a limit: its first use there"
        );
    }
}
