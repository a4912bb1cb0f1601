//! Graceful drain: what the gateway does between SIGTERM and exit.
//!
//! 1. At once: `/readyz` answers 503, and every HTTP/1.1 response carries `Connection: close`,
//!    so clients and load balancers move away from this replica connection by connection. Nothing
//!    is closed yet: a keep-alive connection that sends a request is answered, then closed, so no
//!    request is written onto a connection the gateway is closing.
//! 2. After [`DrainConfig::delay`] (time for load balancers to see `/readyz` and stop sending
//!    new connections): the listener closes; idle connections close; HTTP/2 connections get
//!    `GOAWAY`; requests and SSE streams in flight run on.
//! 3. [`DrainConfig::timeout`] after SIGTERM, whatever is still open is dropped, and the process
//!    exits 0.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How long the phases of a drain last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainConfig {
    /// From SIGTERM until the listener stops accepting (step 2 above).
    pub delay: Duration,
    /// From SIGTERM until connections still open are dropped (step 3 above).
    pub timeout: Duration,
}

/// Whether the gateway is draining; shared by the listener, the admin endpoints and the signal
/// handler. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    draining: Arc<watch::Sender<bool>>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl Lifecycle {
    /// Serving, not draining.
    pub fn new() -> Self {
        Self {
            draining: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Starts draining (idempotent).
    pub fn begin_drain(&self) {
        if !self.draining.send_replace(true) {
            crate::observe::metrics::draining();
            tracing::info!("draining: /readyz now answers 503 and responses close their connections");
        }
    }

    /// Whether draining has started.
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Resolves once draining has started.
    pub async fn drain_started(&self) {
        let mut draining = self.draining.subscribe();
        // The sender lives in `self`, so this never fails.
        let _ = draining.wait_for(|d| *d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifecycle_drains_once_begun() {
        let lifecycle = Lifecycle::new();
        assert!(!lifecycle.is_draining());
        lifecycle.begin_drain();
        assert!(lifecycle.is_draining());
    }
}
