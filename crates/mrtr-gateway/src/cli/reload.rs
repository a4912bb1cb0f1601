//! Re-reading the `--config` file while the gateway runs: on SIGHUP and whenever its content
//! changes (checked every `--reload-interval`, as the keys file is: `ops/reload.rs`).
//!
//! The file is read and checked as at start (with the command line's own values over it), and
//! then applies to new requests: the backends (added, removed, changed), `[[policy]]`,
//! `[[rate-limit]]` and `[oauth]`'s content (`app.rs`'s `Reconfigurer`). Requests in flight
//! finish on the configuration they started with.
//!
//! A file that does not read, parse or validate changes nothing: the running configuration
//! stays, the error is logged naming the file and the problem, and
//! `mrtr_gateway_config_reloads_total{result="failed"}` counts it, once per bad content.
//!
//! Settings that only a restart changes (`RESTART_ONLY`: listeners, TLS files, keys, the
//! shared store, the audit trail, traces, pins, the front's and the MRTR layer's limits, adding
//! or removing `[oauth]`) keep their running values when the file changes them: one warning
//! names them, the rest of the file applies, and the reload counts as `result="partial"`.

use std::path::PathBuf;

use clap::ArgMatches;

use super::{checked_backends, file, merged};
use crate::app::Reconfigurer;
use crate::config::{GatewayConfig, Settings};
use crate::observe::metrics as telemetry;
use crate::ops::reload::{Fingerprint, Reloaded, Reloads, fingerprint};
use crate::upstream::Backend;

/// The settings a reload applies; every other one is in `RESTART_ONLY` (a test holds this).
#[cfg(test)]
const RELOADABLE: &[&str] = &[
    "backend",
    "backend-ca",
    "backend-timeout",
    "backend-idle-timeout",
    "backend-stall-timeout",
    "stdio-stall-timeout",
    "stdio-pass-env",
    "stdio-stderr-info",
    "catalog-ttl",
    "policy",
    "rate-limit",
    // Its content; adding or removing the table needs a restart (it names the principal).
    "oauth",
];

/// Declares `RESTART_ONLY` and `restart_only` over one list of fields.
macro_rules! restart_only {
    ($($field:ident),* $(,)?) => {
        /// The settings only a restart changes (field names).
        #[cfg(test)]
        const RESTART_ONLY: &[&str] = &[$(stringify!($field)),*];

        /// Names (by file key) each setting of `RESTART_ONLY` that differs between `now` and
        /// `next`, compared by its `Debug` text (every setting has one), and sets it back to its
        /// running value in `next`.
        fn restart_only(now: &Settings, next: &mut Settings, changed: &mut Vec<String>) {
            $(
                if format!("{:?}", now.$field) != format!("{:?}", next.$field) {
                    changed.push(stringify!($field).replace('_', "-"));
                    next.$field = now.$field.clone();
                }
            )*
        }
    };
}

restart_only!(
    config,
    generate_key,
    listen,
    admin_listen,
    demo,
    keys_file,
    reload_interval,
    tls_cert,
    tls_key,
    audience,
    max_rounds,
    principal_header,
    allowed_origin,
    no_loopback_origins,
    allowed_host,
    envelope_ttl,
    max_request_body,
    health_interval,
    ready_backends,
    require_backends,
    max_in_flight,
    request_body_timeout,
    client_idle_timeout,
    max_header_bytes,
    max_headers,
    max_connections,
    no_legacy_clients,
    legacy_era_path,
    legacy_session_ttl,
    legacy_answer_timeout,
    legacy_call_timeout,
    legacy_max_waiting_calls,
    legacy_max_waiting_calls_per_session,
    legacy_max_waiting_calls_per_principal,
    legacy_max_waiting_answers,
    legacy_max_waiting_answers_per_session,
    legacy_max_waiting_answers_per_principal,
    legacy_max_session_notes,
    legacy_keep_alive,
    legacy_max_message,
    // The bridged tasks' bounds: the bridge layer is built once with the stack.
    bridged_tasks_max,
    bridged_tasks_per_principal,
    bridged_task_ttl,
    bridged_task_answer_timeout,
    bridged_task_result_ttl,
    advertise_url,
    log_format,
    drain_delay,
    drain_timeout,
    otlp_endpoint,
    shared_store,
    audit,
    pinning,
);

/// The settings of `next` that only a restart changes and that differ from `now`'s, by their
/// file key; each is set back to its running value in `next`.
fn needing_restart(now: &Settings, next: &mut Settings) -> Vec<String> {
    let mut changed = Vec::new();
    restart_only(now, next, &mut changed);
    if now.oauth.is_some() != next.oauth.is_some() {
        changed.push("oauth (added or removed)".to_owned());
        next.oauth = now.oauth.clone();
    }
    changed
}

/// The config file, and what the gateway runs now.
#[derive(Debug)]
pub(super) struct ConfigFile {
    path: PathBuf,
    /// What the command line gave, applied over the file as at start.
    given: ArgMatches,
    seen: Option<Fingerprint>,
    /// The configuration in use, and the backends not in the file (`--demo`'s).
    running: Option<(GatewayConfig, Vec<Backend>)>,
}

impl ConfigFile {
    /// The file at `path`, with the command line's own values `given` (only those).
    pub(super) fn new(path: PathBuf, given: ArgMatches) -> Self {
        let seen = std::fs::read(&path).ok().map(|bytes| fingerprint(&[&bytes]));
        Self {
            path,
            given,
            seen,
            running: None,
        }
    }

    /// Re-reads the file on SIGHUP and every `interval`, applying what changed to `gateway`,
    /// which runs `config` (with `fixed`, backends the file does not name, first), until the
    /// task is aborted.
    pub(super) async fn watch(
        mut self,
        gateway: Reconfigurer,
        config: GatewayConfig,
        fixed: Vec<Backend>,
        interval: std::time::Duration,
    ) {
        self.running = Some((config, fixed));
        let mut reloads = Reloads::start(interval).await;
        loop {
            let forced = reloads.next().await;
            if self.reload(&gateway).await == Reloaded::Unchanged && forced {
                tracing::info!(file = %self.path.display(), "SIGHUP: config file unchanged");
            }
        }
    }

    /// Re-reads the file and applies it if its content changed and it checks out.
    pub(super) async fn reload(&mut self, gateway: &Reconfigurer) -> Reloaded {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) => {
                return failed(format!(
                    "cannot read the config file {}: {e}",
                    self.path.display()
                ));
            }
        };
        let print = fingerprint(&[&bytes]);
        if self.seen == Some(print) {
            return Reloaded::Unchanged;
        }
        // Remembered before it is checked, so that a bad content is reported once.
        self.seen = Some(print);
        let Some((running, fixed)) = &self.running else {
            return Reloaded::Unchanged;
        };
        let next = match self.next(&bytes, running, fixed, gateway) {
            Ok(next) => next,
            Err(error) => return failed(error),
        };
        let (next, restart) = next;
        let same_spec = |name: &str| same_backend_spec(&running.settings, &next.settings, name);
        let changes = gateway.reconfigure(running, &next, &same_spec).await;
        tracing::info!(
            file = %self.path.display(),
            added = ?changes.added,
            removed = ?changes.removed,
            changed = ?changes.changed,
            policy_rules = next.settings.policy.len(),
            rate_limits = next.settings.rate_limit.len(),
            "config reloaded"
        );
        if restart.is_empty() {
            telemetry::config_reloaded("ok");
        } else {
            telemetry::config_reloaded("partial");
            tracing::warn!(
                file = %self.path.display(),
                settings = %restart.join(", "),
                "config reload: these settings need a restart and keep their running values; the rest of the file applies"
            );
        }
        let fixed = fixed.clone();
        self.running = Some((next, fixed));
        Reloaded::Applied
    }

    /// The configuration `bytes` give, checked, with the running values of the settings only a
    /// restart changes (named in the second part).
    fn next(
        &self,
        bytes: &[u8],
        running: &GatewayConfig,
        fixed: &[Backend],
        gateway: &Reconfigurer,
    ) -> Result<(GatewayConfig, Vec<String>), String> {
        let origin = self.path.display().to_string();
        let text = std::str::from_utf8(bytes).map_err(|e| format!("{origin}: not UTF-8: {e}"))?;
        let settings = file::parse(text, &origin)?;
        let mut settings = merged(settings, &self.given).map_err(|e| format!("{origin}: {e}"))?;
        let restart = needing_restart(&running.settings, &mut settings);
        let env = |name: &str| std::env::var(name).ok();
        let named = checked_backends(&settings, &env).map_err(|e| format!("{origin}: {e}"))?;
        let backends: Vec<Backend> = fixed.iter().cloned().chain(named).collect();
        if backends.is_empty() {
            return Err(format!("{origin}: no backend"));
        }
        let limits = gateway.limits();
        let next = running
            .reloaded(settings, backends, limits.as_deref())
            .map_err(|e| format!("{origin}: {e}"))?;
        Ok((next, restart))
    }
}

fn failed(error: String) -> Reloaded {
    telemetry::config_reloaded("failed");
    tracing::error!(%error, "config reload failed; the running configuration stays in use");
    Reloaded::Failed(error)
}

/// Whether the backend `name` is configured alike in `now` and `next` as far as the file says
/// (its table, and the settings every backend's connections are built from): its TLS files'
/// names are compared here, their content is read when its table changes.
fn same_backend_spec(now: &Settings, next: &Settings, name: &str) -> bool {
    let spec = |settings: &Settings| {
        let spec = settings.backend.iter().find(|b| b.name.as_str() == name);
        format!("{spec:?}")
    };
    let shared = |s: &Settings| format!("{:?}", (&s.backend_ca, &s.stdio_pass_env, s.stdio_stderr_info));
    spec(now) == spec(next) && shared(now) == shared(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting is either applied by a reload or named when a reload leaves it: a new
    /// setting must be put in one list or the other.
    #[test]
    fn every_setting_is_reloadable_or_restart_only() {
        let mut now = Settings::default();
        let mut next = Settings::default();
        assert!(needing_restart(&now, &mut next).is_empty());
        let debug = format!("{now:#?}");
        let fields: Vec<String> = debug
            .lines()
            .filter_map(|line| {
                line.strip_prefix("    ")?
                    .split_once(':')
                    .map(|(f, _)| f.to_owned())
            })
            .filter(|f| !f.starts_with(' '))
            .collect();
        assert!(fields.len() > 40, "{fields:?}");
        for field in &fields {
            let key = field.replace('_', "-");
            assert!(
                RELOADABLE.contains(&key.as_str()) || RESTART_ONLY.contains(&field.as_str()),
                "the setting {field} is neither reloadable nor restart-only (cli/reload.rs)"
            );
        }
        // A change of a restart-only setting is named and undone; a reloadable one is kept.
        next.listen = "127.0.0.1:9".parse().unwrap();
        next.catalog_ttl = crate::config::Seconds::from_secs(1);
        now.legacy_keep_alive = crate::config::PositiveSeconds::from_secs(3).unwrap();
        let changed = needing_restart(&now, &mut next);
        assert_eq!(changed, ["listen", "legacy-keep-alive"]);
        assert_eq!(next.catalog_ttl, crate::config::Seconds::from_secs(1));
        next.catalog_ttl = now.catalog_ttl;
        assert_eq!(format!("{next:?}"), format!("{now:?}"), "the rest set back");
    }
}
