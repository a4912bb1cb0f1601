//! What the clients record while they run: every failed attempt with its time and cause, every
//! lost flow, the latency of every round, and counters. Shared by all clients behind one `Arc`.
//!
//! Times are seconds since the start of the run ([`Clock`]), so errors line up with the fault
//! schedule's events.
//!
//! ```
//! use mrtr_soak::stats::{Clock, Stats};
//!
//! let stats = Stats::default();
//! stats.latency("deploy", "round 2", std::time::Duration::from_millis(3));
//! assert_eq!(stats.latencies()[&("deploy", "round 2")], vec![3000]);
//! assert!(Clock::start().now() >= 0.0);
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::client::Cause;

/// Seconds since the start of the run.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    /// A clock starting now.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Seconds since the start.
    pub fn now(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }

    /// The instant `seconds` after the start.
    pub fn at(&self, seconds: f64) -> Instant {
        self.0 + Duration::from_secs_f64(seconds.max(0.0))
    }
}

/// One failed attempt.
#[derive(Clone, Debug)]
pub struct ErrorRecord {
    /// When the attempt started.
    pub from: f64,
    /// When it failed.
    pub to: f64,
    /// Why.
    pub cause: Cause,
    /// The flow's name.
    pub flow: &'static str,
    /// The step within the flow (`round 2`, `tasks/get`, ...).
    pub step: &'static str,
    /// The backend the request was for (`both` for a merged list).
    pub target: &'static str,
    /// The replica nginx named, if an answer came back.
    pub upstream: Option<String>,
    /// The backend an error message named.
    pub backend: Option<String>,
    /// What was seen.
    pub detail: String,
    /// Whether the client tried again after it.
    pub retried: bool,
}

/// A flow that did not complete: its last failed attempt (boxed: flows return it as their
/// `Err`, which stays small).
#[derive(Clone, Debug)]
pub struct Lost {
    /// The attempt that ended it.
    pub error: Box<ErrorRecord>,
}

impl From<ErrorRecord> for Lost {
    fn from(record: ErrorRecord) -> Self {
        Self {
            error: Box::new(record),
        }
    }
}

/// Flows of one kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowCounts {
    /// Started.
    pub started: u64,
    /// Completed with the expected answer.
    pub completed: u64,
    /// Not completed.
    pub lost: u64,
}

/// At most this many error records are kept (a broken run must not eat the memory).
const MAX_ERRORS: usize = 1_000_000;

/// Everything the clients record.
#[derive(Debug, Default)]
pub struct Stats {
    errors: Mutex<Vec<ErrorRecord>>,
    dropped_errors: AtomicU64,
    lost: Mutex<Vec<Lost>>,
    latencies: Mutex<HashMap<(&'static str, &'static str), Vec<u32>>>,
    flows: Mutex<HashMap<&'static str, FlowCounts>>,
    /// Exchanges answered as the flow expected.
    pub rounds: AtomicU64,
    /// Requests sent, retries included.
    pub attempts: AtomicU64,
    /// Completed flows of two or more exchanges.
    pub multi_round_flows: AtomicU64,
    /// Of those, flows whose exchanges were answered by more than one replica.
    pub crossed_flows: AtomicU64,
    /// Flows in progress now.
    pub in_flight: AtomicI64,
}

impl Stats {
    /// Records a failed attempt.
    pub fn error(&self, record: ErrorRecord) {
        let mut errors = self.errors.lock().expect("not poisoned");
        if errors.len() < MAX_ERRORS {
            errors.push(record);
        } else {
            self.dropped_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the latency of a round (first attempt to answer, retries included).
    pub fn latency(&self, flow: &'static str, step: &'static str, took: Duration) {
        let micros = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
        let mut latencies = self.latencies.lock().expect("not poisoned");
        latencies.entry((flow, step)).or_default().push(micros);
    }

    /// Counts a flow that starts.
    pub fn flow_started(&self, flow: &'static str) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.flows
            .lock()
            .expect("not poisoned")
            .entry(flow)
            .or_default()
            .started += 1;
    }

    /// Counts a flow that ended, completed (`lost` is `None`) or not.
    pub fn flow_ended(&self, flow: &'static str, lost: Option<Lost>) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let mut flows = self.flows.lock().expect("not poisoned");
        let counts = flows.entry(flow).or_default();
        match lost {
            None => counts.completed += 1,
            Some(lost) => {
                counts.lost += 1;
                drop(flows);
                self.lost.lock().expect("not poisoned").push(lost);
            }
        }
    }

    /// Every failed attempt, and how many more were not kept.
    pub fn errors(&self) -> (Vec<ErrorRecord>, u64) {
        let errors = self.errors.lock().expect("not poisoned").clone();
        (errors, self.dropped_errors.load(Ordering::Relaxed))
    }

    /// Every lost flow.
    pub fn lost(&self) -> Vec<Lost> {
        self.lost.lock().expect("not poisoned").clone()
    }

    /// Round latencies in µs by flow and step.
    pub fn latencies(&self) -> HashMap<(&'static str, &'static str), Vec<u32>> {
        self.latencies.lock().expect("not poisoned").clone()
    }

    /// Flow counts by kind.
    pub fn flows(&self) -> HashMap<&'static str, FlowCounts> {
        self.flows.lock().expect("not poisoned").clone()
    }
}
