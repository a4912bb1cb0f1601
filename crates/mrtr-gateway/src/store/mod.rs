//! The shared store of a fleet (`[shared-store]`, `--shared-store URL`): a Redis (or Valkey)
//! server every replica talks to, so that the rate limits are one budget for the fleet and a
//! request state opens at most once in it. Imports `observe` and the ground floor; `policy`
//! puts the limits and single use on it, `ops` shows its health in `/readyz`.
//!
//! The room, lowest first:
//!
//! * [`settings`]: the `[shared-store]` table and `--shared-store`, checked as they are read
//!   (a password in the URL is refused: it comes from the environment);
//! * [`health`]: what the last operation found (`/readyz`, `mrtr_gateway_shared_store_up`);
//! * `script.rs`: the one check each request makes, an atomic Lua script (one round trip): a
//!   retry's envelope recorded (`SET NX`), then a GCRA cell taken from each limit that applies;
//!   and the release of a record whose check timed out;
//! * `pins.rs`: pins learned by the fleet (`[pinning]`), the first definition any replica saw;
//! * this file: [`SharedStore`], the connection (redis-rs's `ConnectionManager`: one
//!   multiplexed connection, reconnected with backoff, commands pipelined on it, at most
//!   [`MAX_IN_FLIGHT`] at once) and the timeout every operation runs under.
//!
//! No operation waits longer than the store's `timeout`: when it passes, or the connection is
//! down, the operation fails at once with a `StoreError`, counted in
//! `mrtr_gateway_shared_store_errors_total`, and the caller applies `on-store-error`.
//!
//! Redis Cluster is not supported: one check touches the keys of every limit that applies and of
//! the envelope, which fall in different hash slots. A single primary (with a replica and
//! Sentinel or a managed failover in front, which the connection manager reconnects to) is what
//! the check needs.

pub mod health;
mod pins;
mod script;
pub mod settings;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub(crate) use self::health::StoreHealth;
pub(crate) use self::pins::{FleetPin, MAX_CLAIMS_PER_RUN, PinClaim};
pub(crate) use self::script::{Check, EnvelopeUse, Take, Verdict};
pub use self::settings::{OnStoreError, SharedStoreSettings, StoreUrl};
use crate::observe::metrics;

/// Most store operations in flight on one replica's connection; more wait for a place (within
/// the timeout), so that a slow store cannot collect an unbounded queue.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Why a store operation failed; the label of `mrtr_gateway_shared_store_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreError {
    /// No answer within the timeout.
    Timeout,
    /// No connection (refused, reset, being re-established).
    Connection,
    /// The store answered with an error (a script error, a wrong password, out of memory).
    Refused,
}

impl StoreError {
    /// The metric label and the `/readyz` reason.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Refused => "refused",
        }
    }

    fn of(error: &redis::RedisError) -> Self {
        if error.is_timeout() {
            Self::Timeout
        } else if error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal() {
            Self::Connection
        } else {
            Self::Refused
        }
    }
}

/// The shared store: see the [module docs](self). Cheap to share (`Arc`).
pub struct SharedStore {
    client: redis::Client,
    /// Made on first use, inside the runtime (the manager spawns its reconnection there).
    manager: OnceLock<Result<ConnectionManager, String>>,
    settings: SharedStoreSettings,
    health: Arc<StoreHealth>,
    script: script::Script,
    pins: pins::PinScript,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("url", &self.settings.url)
            .field("single_use", &self.settings.single_use)
            .field("on_store_error", &self.settings.on_store_error)
            .finish_non_exhaustive()
    }
}

impl SharedStore {
    /// The store `settings` name, with its password read through `env` (from the variable
    /// `password-env` names, when set there). Connects nothing yet: the first operation does,
    /// and a store that is down at start is a store that is down, not a reason not to start.
    pub fn new(
        settings: SharedStoreSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Arc<Self>, String> {
        let info = settings.url.connection_info()?;
        let info = match env(&settings.password_env).filter(|p| !p.is_empty()) {
            Some(password) => {
                let redis = info.redis_settings().clone().set_password(password);
                info.set_redis_settings(redis)
            }
            None => info,
        };
        let client = redis::Client::open(info).map_err(|e| format!("[shared-store] url: {e}"))?;
        Ok(Arc::new(Self {
            client,
            manager: OnceLock::new(),
            health: Arc::new(StoreHealth::new(settings.on_store_error)),
            script: script::Script::new(&settings.key_prefix),
            pins: pins::PinScript::new(&settings.key_prefix),
            settings,
        }))
    }

    /// The settings it was made from.
    pub fn settings(&self) -> &SharedStoreSettings {
        &self.settings
    }

    /// What the last operation found.
    pub(crate) fn health(&self) -> &Arc<StoreHealth> {
        &self.health
    }

    /// The connection, made on first use.
    fn manager(&self) -> Result<ConnectionManager, StoreError> {
        let made = self.manager.get_or_init(|| {
            let timeout = self.settings.timeout();
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                // Reconnection is retried in the background, never past a second between tries.
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(1))
                .set_concurrency_limit(MAX_IN_FLIGHT);
            ConnectionManager::new_lazy_with_config(self.client.clone(), config).map_err(|e| e.to_string())
        });
        made.clone().map_err(|error| {
            tracing::error!(%error, "cannot set up the shared store's connection");
            StoreError::Refused
        })
    }

    /// The connection; a failure to set it up is recorded, its setting up is no success (it
    /// connects nothing: only an answer from the store says it is up).
    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let made = self.manager();
        if let Err(error) = made {
            let _ = self.observe::<()>(Err(error));
        }
        made
    }

    /// Runs `check` (one round trip), within the timeout.
    pub(crate) async fn check(&self, check: &Check<'_>) -> Result<Verdict, StoreError> {
        let mut connection = self.connection()?;
        self.within("check", self.script.run(&mut connection, check))
            .await
    }

    /// Takes back the record the check for `envelope` may have made (`script.rs`), within the
    /// timeout; for a request refused because that check did not answer in time.
    pub(crate) async fn release(&self, envelope: &EnvelopeUse) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        self.within("release", self.script.release(&mut connection, envelope))
            .await
    }

    /// Claims learned pins (at most [`MAX_CLAIMS_PER_RUN`], one round trip, within the
    /// timeout): the fleet's pin for each, in order (`pins.rs`).
    pub(crate) async fn claim_pins(&self, claims: &[PinClaim]) -> Result<Vec<FleetPin>, StoreError> {
        let mut connection = self.connection()?;
        self.within("pin claim", self.pins.run(&mut connection, claims))
            .await
    }

    /// Asks the store whether it answers (`PING`), within the timeout: what keeps `/readyz`
    /// current while no request reaches the store.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        let command = redis::cmd("PING");
        let ping = command.query_async::<String>(&mut connection);
        self.within("ping", async { ping.await.map(drop) }).await
    }

    /// Runs the operation `what` under the store's timeout, its outcome observed.
    async fn within<T>(
        &self,
        what: &'static str,
        operation: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let result = match tokio::time::timeout(self.settings.timeout(), operation).await {
            Ok(result) => result.map_err(|e| {
                tracing::debug!(error = %e, operation = what, "shared store operation failed");
                StoreError::of(&e)
            }),
            Err(_) => Err(StoreError::Timeout),
        };
        self.observe(result)
    }

    /// Records an operation's outcome in the health and the metrics.
    fn observe<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match &result {
            Ok(_) => {
                if self.health.succeeded() {
                    tracing::info!(store = %self.settings.url, "shared store reachable");
                }
            }
            Err(error) => {
                metrics::shared_store_error(error.label());
                if self.health.failed(error.label()) {
                    tracing::warn!(
                        store = %self.settings.url,
                        reason = error.label(),
                        on_store_error = %self.settings.on_store_error,
                        "shared store unreachable; limited requests get on-store-error's answer until it answers again"
                    );
                }
            }
        }
        result
    }
}

/// Pings `store` every `interval` until the task is aborted (see [`SharedStore::ping`]).
pub(crate) async fn watch(store: Arc<SharedStore>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let _ = store.ping().await;
    }
}
