//! How long a test waits: the one [`TIMEOUT`] every network step is bounded by, and
//! [`eventually`] for a condition that becomes true in its own time.

use std::future::Future;
use std::time::Duration;

/// Every network step of a test is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Polls `check` every 50 ms until it holds, for at most `limit`; panics with `what` otherwise.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
