//! Samples, once a second, the resident memory (`VmRSS` in `/proc/PID/status`, and its two
//! parts: `RssAnon`, the heap and stacks, and `RssFile` + `RssShmem`, pages of the executable and
//! other files) and the open file descriptors (entries of `/proc/PID/fd`) of every process under
//! test, and the flows in progress. A replica restarted during the run shows up under a new pid:
//! its samples are a new series, and growth is computed per series.
//!
//! The two parts are apart because they grow for different reasons: anonymous memory is what a
//! leak grows, while file pages grow as code that had not run yet runs for the first time (the
//! paths of a key rotation, a restart, a backend failure), and stop when every path has run.
//!
//! ```
//! use mrtr_soak::sampler::{Sample, growth};
//!
//! let series: Vec<Sample> = (0..20)
//!     .map(|i| Sample { at: i as f64, pid: 1, rss_kib: 1000 + 10 * i, anon_kib: 600, file_kib: 400 + 10 * i, fds: 20 })
//!     .collect();
//! let growth = growth(&series, 0.0, 100.0).unwrap();
//! assert!((growth.rss - 0.1791).abs() < 0.001); // mean of the last 2 (1185) over the first 2 (1005)
//! assert_eq!(growth.anon, 0.0); // all of it in file pages
//! assert_eq!(growth.fds, 0.0);
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fleet::Pids;
use crate::stats::{Clock, Stats};

/// One sample of one process.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since the start of the run.
    pub at: f64,
    /// The process.
    pub pid: u32,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Of which anonymous (`RssAnon`: heap, stacks), KiB.
    pub anon_kib: u64,
    /// Of which file-backed and shared (`RssFile` + `RssShmem`), KiB.
    pub file_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
}

/// Samples by process name, and flows in progress by second.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Every sample, by process name, in time order.
    pub processes: BTreeMap<&'static str, Vec<Sample>>,
    /// `(seconds, flows in progress)`.
    pub in_flight: Vec<(f64, i64)>,
}

/// Samples every second until the returned handle is stopped.
pub fn start(
    pids: Pids,
    stats: Arc<Stats>,
    clock: Clock,
) -> (Arc<Mutex<Samples>>, tokio::task::JoinHandle<()>) {
    let samples = Arc::new(Mutex::new(Samples::default()));
    let shared = samples.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let at = clock.now();
            let current: Vec<(&'static str, u32)> = pids
                .lock()
                .expect("not poisoned")
                .iter()
                .map(|(name, pid)| (*name, *pid))
                .collect();
            let mut taken = Vec::new();
            for (name, pid) in current {
                if let Some(sample) = read(at, pid) {
                    taken.push((name, sample));
                }
            }
            let mut samples = shared.lock().expect("not poisoned");
            for (name, sample) in taken {
                samples.processes.entry(name).or_default().push(sample);
            }
            samples
                .in_flight
                .push((at, stats.in_flight.load(Ordering::Relaxed)));
        }
    });
    (samples, task)
}

/// Memory (KiB) and open descriptors of `pid`, with its children (nginx's workers) added.
fn read(at: f64, pid: u32) -> Option<Sample> {
    let mut sample = Sample {
        at,
        pid,
        rss_kib: 0,
        anon_kib: 0,
        file_kib: 0,
        fds: 0,
    };
    add(&mut sample, pid)?;
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
        // A worker that exits between the two reads counts as nothing.
        let _ = add(&mut sample, child);
    }
    Some(sample)
}

fn add(sample: &mut Sample, pid: u32) -> Option<()> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let rss = kib("VmRSS:")?;
    let fds = fd_count(pid)?;
    sample.rss_kib += rss;
    sample.anon_kib += kib("RssAnon:").unwrap_or(0);
    sample.file_kib += kib("RssFile:").unwrap_or(0) + kib("RssShmem:").unwrap_or(0);
    sample.fds += fds;
    Some(())
}

fn fd_count(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Growth of one series between its first and its last tenth.
#[derive(Clone, Copy, Debug)]
pub struct Growth {
    /// Samples used.
    pub samples: usize,
    /// Mean RSS of the first tenth, KiB.
    pub rss_first_kib: f64,
    /// Mean RSS of the last tenth, KiB.
    pub rss_last_kib: f64,
    /// `last / first - 1` for RSS.
    pub rss: f64,
    /// Mean anonymous RSS of the first tenth, KiB.
    pub anon_first_kib: f64,
    /// Mean anonymous RSS of the last tenth, KiB.
    pub anon_last_kib: f64,
    /// `last / first - 1` for anonymous RSS.
    pub anon: f64,
    /// Mean file-backed RSS of the first tenth, KiB.
    pub file_first_kib: f64,
    /// Mean file-backed RSS of the last tenth, KiB.
    pub file_last_kib: f64,
    /// Mean open descriptors of the first tenth.
    pub fds_first: f64,
    /// Mean open descriptors of the last tenth.
    pub fds_last: f64,
    /// `last / first - 1` for descriptors.
    pub fds: f64,
    /// Highest RSS, KiB.
    pub rss_max_kib: u64,
    /// Most open descriptors.
    pub fds_max: u64,
}

/// Growth of `series` over its samples taken from `from` (the end of the warm-up) to `to` (the
/// end of the load); `None` with fewer than 10 such samples.
pub fn growth(series: &[Sample], from: f64, to: f64) -> Option<Growth> {
    let used: Vec<&Sample> = series.iter().filter(|s| s.at >= from && s.at <= to).collect();
    if used.len() < 10 {
        return None;
    }
    let tenth = used.len() / 10;
    let mean = |part: &[&Sample], f: fn(&Sample) -> u64| {
        part.iter().map(|s| f(s) as f64).sum::<f64>() / part.len() as f64
    };
    let (first, last) = (&used[..tenth], &used[used.len() - tenth..]);
    let ratio = |a: f64, b: f64| if a > 0.0 { b / a - 1.0 } else { 0.0 };
    let rss_first_kib = mean(first, |s| s.rss_kib);
    let rss_last_kib = mean(last, |s| s.rss_kib);
    let anon_first_kib = mean(first, |s| s.anon_kib);
    let anon_last_kib = mean(last, |s| s.anon_kib);
    let fds_first = mean(first, |s| s.fds);
    let fds_last = mean(last, |s| s.fds);
    Some(Growth {
        samples: used.len(),
        rss_first_kib,
        rss_last_kib,
        rss: ratio(rss_first_kib, rss_last_kib),
        anon_first_kib,
        anon_last_kib,
        anon: ratio(anon_first_kib, anon_last_kib),
        file_first_kib: mean(first, |s| s.file_kib),
        file_last_kib: mean(last, |s| s.file_kib),
        fds_first,
        fds_last,
        fds: ratio(fds_first, fds_last),
        rss_max_kib: used.iter().map(|s| s.rss_kib).max().unwrap_or(0),
        fds_max: used.iter().map(|s| s.fds).max().unwrap_or(0),
    })
}

/// Every sample as CSV (`samples.csv` beside `report.json`): one line per process and second.
pub fn csv(samples: &Samples) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("at_s,process,pid,rss_kib,anon_kib,file_kib,fds\n");
    for (name, series) in &samples.processes {
        for s in series {
            let _ = writeln!(
                out,
                "{:.1},{name},{},{},{},{},{}",
                s.at, s.pid, s.rss_kib, s.anon_kib, s.file_kib, s.fds
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let sample = read(1.0, std::process::id()).unwrap();
        assert!(sample.rss_kib > 0 && sample.fds > 0);
        assert!(sample.anon_kib > 0 && sample.file_kib > 0);
        assert!(sample.anon_kib + sample.file_kib <= sample.rss_kib + 4);
        assert!(read(1.0, u32::MAX).is_none());
    }

    #[test]
    fn growth_needs_ten_samples_after_the_warm_up() {
        let series: Vec<Sample> = (0..15)
            .map(|i| Sample {
                at: i as f64,
                pid: 1,
                rss_kib: 100,
                anon_kib: 60,
                file_kib: 40,
                fds: 10,
            })
            .collect();
        assert!(growth(&series, 6.0, 20.0).is_none());
        assert!(growth(&series, 0.0, 8.0).is_none());
        assert_eq!(growth(&series, 5.0, 20.0).unwrap().rss, 0.0);
    }
}
