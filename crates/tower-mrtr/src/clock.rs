//! Where the layer reads the time, so that expiry can be tested without waiting.
//!
//! # Example
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::{Duration, SystemTime};
//! use tower_mrtr::{Clock, Keyring, MrtrLayer};
//!
//! /// A clock the test moves by hand.
//! #[derive(Debug)]
//! struct ManualClock(Mutex<SystemTime>);
//!
//! impl Clock for ManualClock {
//!     fn now(&self) -> SystemTime {
//!         *self.0.lock().unwrap()
//!     }
//! }
//!
//! let clock = Arc::new(ManualClock(Mutex::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
//! let layer = MrtrLayer::new(Keyring::generate("k1").unwrap()).clock(clock.clone());
//! # let _ = layer;
//! ```

use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time.
pub trait Clock: Debug + Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock. Replicas sharing a keyring should keep their clocks in sync (NTP);
/// skew shortens or lengthens envelope lifetimes by the same amount.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// `now + ttl`, saturating: a lifetime too long for the clock (such as `Duration::MAX`) means
/// "as late as an envelope can say" (`u64::MAX` milliseconds after the epoch) instead of an
/// overflow.
pub(crate) fn expiry(now: SystemTime, ttl: Duration) -> SystemTime {
    now.checked_add(ttl).map_or(latest(), |t| t.min(latest()))
}

/// The latest instant an envelope can hold.
fn latest() -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(u64::MAX))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_saturates_instead_of_overflowing() {
        let now = SystemTime::now();
        assert_eq!(expiry(now, Duration::from_secs(1)), now + Duration::from_secs(1));
        let far = expiry(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(100 * 365 * 24 * 3600));
        assert_eq!(expiry(far, Duration::MAX), far);
    }
}
