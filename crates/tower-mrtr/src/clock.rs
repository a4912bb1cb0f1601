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
use std::time::SystemTime;

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
