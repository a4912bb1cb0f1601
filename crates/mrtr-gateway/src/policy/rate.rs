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
//! A retry whose `requestState` the MRTR layer opened is part of the call its first round was
//! counted for, and is not counted again (see the [policy module](super)). A request over a
//! limit is answered 429 with `Retry-After` and a JSON-RPC error, and counted in
//! `mrtr_gateway_rate_limited_total`. Requests without a principal share one bucket.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use serde::Deserialize;

use super::rules::glob;
use crate::auth::Caller;

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
    fn label(self) -> &'static str {
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

/// One limit, ready to count.
struct Limit {
    per: Per,
    tools: Vec<String>,
    buckets: DefaultKeyedRateLimiter<(Box<str>, Box<str>)>,
}

/// Every configured limit.
pub struct RateLimits {
    limits: Vec<Limit>,
    clock: DefaultClock,
    checks: AtomicU64,
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
                let quota = Quota::with_period(period / spec.requests.get())
                    .ok_or_else(|| {
                        format!("[[rate-limit]] #{}: period too short for so many requests", n + 1)
                    })?
                    .allow_burst(spec.burst.unwrap_or(spec.requests));
                Ok(Limit {
                    per: spec.per,
                    tools: spec.tools,
                    buckets: DefaultKeyedRateLimiter::keyed(quota),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            limits,
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        })
    }

    /// Counts a request of `caller` (not a verified retry) to `method` on `target`: `Err` with
    /// the time to wait when a limit is reached. Every limit that applies is counted, until
    /// one refuses.
    pub(crate) fn check(
        &self,
        caller: Option<&Caller>,
        method: &str,
        target: Option<&str>,
    ) -> Result<(), Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            for limit in &self.limits {
                limit.buckets.retain_recent();
            }
        }
        let principal = caller.map_or("", |c| &c.principal);
        let tool = (method == "tools/call").then_some(target).flatten();
        for limit in &self.limits {
            let named = |tool: &str| limit.tools.is_empty() || limit.tools.iter().any(|p| glob(p, tool));
            let key: (&str, &str) = match (limit.per, tool) {
                (Per::Principal, _) if limit.tools.is_empty() => (principal, ""),
                (Per::Principal, Some(tool)) if named(tool) => (principal, ""),
                (Per::Tool, Some(tool)) if named(tool) => ("", tool),
                (Per::PrincipalAndTool, Some(tool)) if named(tool) => (principal, tool),
                _ => continue,
            };
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

    #[test]
    fn a_limit_counts_what_it_names_per_what_it_says() {
        let limits = limits(
            r#"
[[rate-limit]]
per = "principal-and-tool"
tools = ["deploy"]
requests = 2
period = 3600
"#,
        );
        let (alice, bob) = (Caller::from_principal("alice"), Caller::from_principal("bob"));
        for _ in 0..2 {
            assert!(limits.check(Some(&alice), "tools/call", Some("deploy")).is_ok());
        }
        let wait = limits
            .check(Some(&alice), "tools/call", Some("deploy"))
            .unwrap_err();
        assert!(
            wait > Duration::from_secs(60) && wait <= Duration::from_secs(1800),
            "{wait:?}"
        );
        assert!(
            limits.check(Some(&bob), "tools/call", Some("deploy")).is_ok(),
            "bob has his own bucket"
        );
        assert!(
            limits.check(Some(&alice), "tools/call", Some("other")).is_ok(),
            "another tool is not counted"
        );
        assert!(
            limits.check(Some(&alice), "tools/list", None).is_ok(),
            "a list is not a call"
        );
    }

    #[test]
    fn a_per_principal_limit_counts_every_request() {
        let limits = limits("[[rate-limit]]\nper = \"principal\"\nrequests = 1\nperiod = 3600\n");
        let alice = Caller::from_principal("alice");
        assert!(limits.check(Some(&alice), "tools/list", None).is_ok());
        assert!(limits.check(Some(&alice), "ping", None).is_err());
        assert!(
            RateLimits::new(vec![RateLimitSpec {
                per: Per::Tool,
                tools: vec![],
                requests: NonZeroU32::MIN,
                period: 0.0,
                burst: None,
            }])
            .is_err()
        );
    }
}
