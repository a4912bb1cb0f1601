//! The soak's verdict: flows and rounds, every failed attempt by cause and by time, each one
//! explained by a fault of the schedule or not, lost flows, round latencies, and the memory and
//! descriptors of every process.
//!
//! An error is **explained** when a window of downtime that could cause it overlaps the attempt
//! (plus [`GRACE`] seconds after the process was back):
//!
//! | cause | explained by |
//! |---|---|
//! | `gateway_502`, `backend_failed_mid_stream`, `partial_list` | the named backend (or the flow's) being down |
//! | `connect`, `closed_before_answer`, `body_cut`, `stream_without_answer`, `nginx_502`, `http_503`, `timeout` | the replica nginx named (or any, when none was named) restarting, or the flow's backend being down |
//! | `http_503` naming the shared store (the gateway's answer under `on-store-error = "deny"`) | the store being down |
//! | `invalid_envelope`, `jsonrpc_error`, `http_status`, `wrong_answer` | never |
//!
//! ```
//! use mrtr_soak::report::percentile;
//!
//! let mut micros = vec![5, 1, 3, 2, 4];
//! micros.sort_unstable();
//! assert_eq!(percentile(&micros, 0.5), 3);
//! assert_eq!(percentile(&micros, 0.99), 5);
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::client::Cause;
use crate::flows::Flow;
use crate::sampler::{Samples, growth};
use crate::schedule::{Fault, Timeline};
use crate::stats::{ErrorRecord, FlowCounts, Lost, Stats};

/// Seconds after a process is back during which errors it caused are still explained by it.
pub const GRACE: f64 = 2.0;

/// The run's parameters, as the report prints them.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// Concurrent users.
    pub clients: usize,
    /// Seconds of load.
    pub duration: f64,
    /// Seconds of warm-up (no faults; excluded from growth).
    pub warmup: f64,
    /// When the last flow ended, seconds.
    pub ended: f64,
    /// Flows still running when the run gave up waiting.
    pub unfinished: u64,
    /// Free text: settings.
    pub settings: String,
}

/// The sorted value at quantile `q` of `sorted`.
pub fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// What explains `error`, if anything.
pub fn explain(timeline: &Timeline, error: &ErrorRecord) -> Option<String> {
    let (from, to) = (error.from, error.to);
    let backend = error.backend.as_deref().unwrap_or(error.target);
    let backend_down = |name: &str| {
        timeline
            .explains(Fault::BackendDown, name, from, to, GRACE)
            .map(|w| format!("backend {} down {:.1}-{:.1}s", w.subject, w.from, w.to))
    };
    let any_backend_down = || {
        if backend == "both" {
            backend_down("alpha").or_else(|| backend_down("beta"))
        } else {
            backend_down(backend)
        }
    };
    let replica_restart = || {
        timeline
            .windows
            .iter()
            .filter(|w| w.fault == Fault::ReplicaRestart)
            .filter(|w| error.upstream.as_deref().is_none_or(|u| u.contains(&w.subject)))
            .find(|w| from <= w.to + GRACE && to >= w.from)
            .map(|w| format!("replica {} restarting {:.1}-{:.1}s", w.subject, w.from, w.to))
    };
    let store_down = || {
        timeline
            .explains(Fault::StoreDown, "redis", from, to, GRACE)
            .map(|w| format!("shared store down {:.1}-{:.1}s", w.from, w.to))
    };
    match error.cause {
        // The gateway's 503 for a request the store could not check (`on-store-error = "deny"`).
        Cause::Unavailable if error.detail.contains("shared store") => store_down(),
        Cause::GatewayBadGateway | Cause::BackendStreamError | Cause::PartialList => any_backend_down(),
        Cause::Connect
        | Cause::Closed
        | Cause::BodyCut
        | Cause::NoAnswer
        | Cause::ProxyBadGateway
        | Cause::Unavailable
        | Cause::Timeout => replica_restart().or_else(any_backend_down),
        Cause::InvalidEnvelope | Cause::RpcError | Cause::HttpStatus | Cause::WrongAnswer => None,
    }
}

/// The report.
#[derive(Debug)]
pub struct Report {
    /// The text printed at the end of a run.
    pub text: String,
    /// The figures, for `report.json`.
    pub json: Value,
    /// Every memory and descriptor sample, for `samples.csv`.
    pub samples_csv: String,
    /// Flows lost (an explained partial list is not lost), unfinished flows included.
    pub lost: u64,
    /// Failed attempts no fault explains.
    pub unexplained: u64,
    /// Schedule steps that failed.
    pub schedule_failures: usize,
}

/// Builds the report.
pub fn build(info: &RunInfo, stats: &Stats, timeline: &Timeline, samples: &Samples) -> Report {
    let mut out = String::new();
    let (errors, dropped) = stats.errors();
    let flows = stats.flows();
    let explained: Vec<Option<String>> = errors.iter().map(|e| explain(timeline, e)).collect();
    let lost_flows: Vec<(Lost, Option<String>)> = stats
        .lost()
        .into_iter()
        .map(|l| {
            let why = explain(timeline, &l.error);
            (l, why)
        })
        .collect();
    // A list that lacked a backend while it was down is what the gateway promises (the list of
    // the backends that answered), not a loss: counted apart as degraded.
    let degraded = |flow: &str| {
        lost_flows
            .iter()
            .filter(|(l, why)| l.error.flow == flow && l.error.cause == Cause::PartialList && why.is_some())
            .count() as u64
    };
    let degraded_total: u64 = Flow::ALL.iter().map(|f| degraded(f.label())).sum();
    let lost = lost_flows.len() as u64 - degraded_total + info.unfinished;
    let unexplained = explained.iter().filter(|e| e.is_none()).count() as u64;

    let _ = writeln!(out, "\n==== mrtr-soak report ====");
    let _ = writeln!(out, "{}", info.settings);
    // Flows.
    let total = flows.values().fold(FlowCounts::default(), |a, c| FlowCounts {
        started: a.started + c.started,
        completed: a.completed + c.completed,
        lost: a.lost + c.lost,
    });
    let rounds = stats.rounds.load(std::sync::atomic::Ordering::Relaxed);
    let attempts = stats.attempts.load(std::sync::atomic::Ordering::Relaxed);
    let multi = stats.multi_round_flows.load(std::sync::atomic::Ordering::Relaxed);
    let crossed = stats.crossed_flows.load(std::sync::atomic::Ordering::Relaxed);
    let in_flight: Vec<i64> = samples
        .in_flight
        .iter()
        .filter(|(at, _)| *at >= info.warmup && *at <= info.duration)
        .map(|(_, n)| *n)
        .collect();
    let mean_in_flight = in_flight.iter().sum::<i64>() as f64 / in_flight.len().max(1) as f64;
    let _ = writeln!(
        out,
        "\nflows: {} started, {} completed, {degraded_total} degraded, {} lost, {} unfinished; rounds: {rounds} answered ({:.0}/s), {attempts} requests sent",
        total.started,
        total.completed,
        lost,
        info.unfinished,
        rounds as f64 / info.ended.max(1.0)
    );
    let _ = writeln!(
        out,
        "flows in progress after warm-up: mean {mean_in_flight:.0}, max {}",
        in_flight.iter().max().copied().unwrap_or(0)
    );
    let _ = writeln!(
        out,
        "multi-exchange flows completed: {multi}, answered by both replicas: {crossed} ({:.1} %)",
        100.0 * crossed as f64 / multi.max(1) as f64
    );
    let _ = writeln!(
        out,
        "(degraded: a merged list without the tools of a backend that was down, as the gateway documents)"
    );
    let _ = writeln!(
        out,
        "\n{:<20} {:>9} {:>9} {:>9} {:>6}",
        "flow", "started", "completed", "degraded", "lost"
    );
    for flow in Flow::ALL {
        let c = flows.get(flow.label()).copied().unwrap_or_default();
        let degraded = degraded(flow.label());
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>9} {degraded:>9} {:>6}",
            flow.label(),
            c.started,
            c.completed,
            c.lost - degraded
        );
    }

    // Errors by cause.
    let mut by_cause: BTreeMap<Cause, (u64, u64, u64)> = BTreeMap::new();
    for (error, why) in errors.iter().zip(&explained) {
        let entry = by_cause.entry(error.cause).or_default();
        entry.0 += 1;
        entry.1 += u64::from(error.retried);
        entry.2 += u64::from(why.is_none());
    }
    let _ = writeln!(
        out,
        "\nfailed attempts: {} ({} explained by a fault, {unexplained} unexplained){}",
        errors.len(),
        errors.len() as u64 - unexplained,
        if dropped > 0 {
            format!(", {dropped} more not kept")
        } else {
            String::new()
        }
    );
    if !by_cause.is_empty() {
        let _ = writeln!(
            out,
            "{:<28} {:>8} {:>8} {:>12}",
            "cause", "attempts", "retried", "unexplained"
        );
        for (cause, (count, retried, unexplained)) in &by_cause {
            let _ = writeln!(
                out,
                "{:<28} {count:>8} {retried:>8} {unexplained:>12}",
                cause.label()
            );
        }
    }

    // Errors by time, with the schedule's events.
    let _ = writeln!(
        out,
        "\ntimeline (events, and failed attempts per second by cause):"
    );
    let mut lines: Vec<(f64, String)> = timeline
        .events
        .iter()
        .map(|e| (e.at, format!("  {:>7.1}s  event  {}", e.at, e.what)))
        .collect();
    let mut seconds: BTreeMap<u64, BTreeMap<(Cause, bool), u64>> = BTreeMap::new();
    for (error, why) in errors.iter().zip(&explained) {
        *seconds
            .entry(error.to as u64)
            .or_default()
            .entry((error.cause, why.is_some()))
            .or_default() += 1;
    }
    for (second, causes) in &seconds {
        let text: Vec<String> = causes
            .iter()
            .map(|((cause, explained), n)| {
                format!(
                    "{n} {}{}",
                    cause.label(),
                    if *explained { "" } else { " UNEXPLAINED" }
                )
            })
            .collect();
        lines.push((
            *second as f64 + 0.5,
            format!("  {second:>6}s   errors {}", text.join(", ")),
        ));
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (_, line) in &lines {
        let _ = writeln!(out, "{line}");
    }

    // Details.
    let unexplained_errors: Vec<&ErrorRecord> = errors
        .iter()
        .zip(&explained)
        .filter(|(_, why)| why.is_none())
        .map(|(e, _)| e)
        .collect();
    if !unexplained_errors.is_empty() {
        let _ = writeln!(
            out,
            "\nunexplained failed attempts (the first 8 of each cause; {} in all):",
            unexplained_errors.len()
        );
        // Per cause, so that a rare cause is not hidden behind a burst of a common one.
        for cause in Cause::ALL {
            for error in unexplained_errors.iter().filter(|e| e.cause == cause).take(8) {
                let _ = writeln!(out, "  {}", describe(error));
            }
        }
    }
    let explained_samples: Vec<(&ErrorRecord, &String)> = errors
        .iter()
        .zip(&explained)
        .filter_map(|(e, why)| why.as_ref().map(|w| (e, w)))
        .collect();
    if !explained_samples.is_empty() {
        let _ = writeln!(out, "\nexplained failed attempts, one per cause:");
        for cause in Cause::ALL {
            if let Some((error, why)) = explained_samples.iter().find(|(e, _)| e.cause == cause) {
                let _ = writeln!(out, "  {}  <- {why}", describe(error));
            }
        }
    }
    if !lost_flows.is_empty() {
        let _ = writeln!(out, "\nflows not completed (first 40 of {}):", lost_flows.len());
        for (flow, why) in lost_flows.iter().take(40) {
            let _ = writeln!(
                out,
                "  {}  [{}]",
                describe(&flow.error),
                why.as_deref().unwrap_or("no fault explains it")
            );
        }
    }

    // Latencies.
    let latencies = stats.latencies();
    let _ = writeln!(
        out,
        "\nround latency, first attempt to answer (retries included), ms:"
    );
    let _ = writeln!(
        out,
        "{:<20} {:<14} {:>9} {:>8} {:>8} {:>9}",
        "flow", "step", "rounds", "p50", "p99", "max"
    );
    let mut latency_json = Vec::new();
    for flow in Flow::ALL {
        let mut steps: Vec<(&&str, &Vec<u32>)> = latencies
            .iter()
            .filter(|((f, _), _)| *f == flow.label())
            .map(|((_, s), v)| (s, v))
            .collect();
        steps.sort_by_key(|(s, _)| step_order(s));
        for (step, values) in steps {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let ms = |q: f64| percentile(&sorted, q) as f64 / 1000.0;
            let _ = writeln!(
                out,
                "{:<20} {:<14} {:>9} {:>8.1} {:>8.1} {:>9.1}",
                flow.label(),
                step,
                sorted.len(),
                ms(0.5),
                ms(0.99),
                ms(1.0)
            );
            latency_json.push(json!({
                "flow": flow.label(), "step": step, "rounds": sorted.len(),
                "p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": ms(1.0),
            }));
        }
    }

    // Processes.
    let _ = writeln!(
        out,
        "\nprocesses, sampled every second from the end of the warm-up ({:.0}s) to the end of the load ({:.0}s);\n\
         growth = mean of the last tenth over the mean of the first tenth of each process's life:",
        info.warmup, info.duration
    );
    let _ = writeln!(
        out,
        "{:<11} {:>8} {:>8} {:>11} {:>11} {:>8} {:>10} {:>11} {:>11} {:>8} {:>11} {:>11} {:>6} {:>6} {:>8}",
        "process",
        "pid",
        "samples",
        "RSS first",
        "RSS last",
        "growth",
        "RSS max",
        "anon first",
        "anon last",
        "growth",
        "file first",
        "file last",
        "fds",
        "fds",
        "fds max"
    );
    let mut process_json = Vec::new();
    for (name, series) in &samples.processes {
        let mut pids: Vec<u32> = series.iter().map(|s| s.pid).collect();
        pids.dedup();
        for pid in pids {
            let life: Vec<_> = series.iter().filter(|s| s.pid == pid).copied().collect();
            let born = life.first().map_or(0.0, |s| s.at);
            // A process started during the run gets a warm-up of its own.
            let from = info.warmup.max(born + info.warmup);
            let Some(g) = growth(&life, from, info.duration) else {
                let _ = writeln!(
                    out,
                    "{name:<11} {pid:>8} {:>8}  (too few samples for a growth figure)",
                    life.len()
                );
                continue;
            };
            let _ = writeln!(
                out,
                "{name:<11} {pid:>8} {:>8} {:>8.1}MiB {:>8.1}MiB {:>+7.1}% {:>7.1}MiB {:>8.1}MiB {:>8.1}MiB {:>+7.1}% {:>8.1}MiB {:>8.1}MiB {:>6.0} {:>6.0} {:>8}",
                g.samples,
                g.rss_first_kib / 1024.0,
                g.rss_last_kib / 1024.0,
                100.0 * g.rss,
                g.rss_max_kib as f64 / 1024.0,
                g.anon_first_kib / 1024.0,
                g.anon_last_kib / 1024.0,
                100.0 * g.anon,
                g.file_first_kib / 1024.0,
                g.file_last_kib / 1024.0,
                g.fds_first,
                g.fds_last,
                g.fds_max
            );
            process_json.push(json!({
                "process": name, "pid": pid, "samples": g.samples,
                "rss_first_mib": g.rss_first_kib / 1024.0, "rss_last_mib": g.rss_last_kib / 1024.0,
                "rss_growth": g.rss, "rss_max_mib": g.rss_max_kib as f64 / 1024.0,
                "anon_first_mib": g.anon_first_kib / 1024.0, "anon_last_mib": g.anon_last_kib / 1024.0,
                "anon_growth": g.anon,
                "file_first_mib": g.file_first_kib / 1024.0, "file_last_mib": g.file_last_kib / 1024.0,
                "fds_first": g.fds_first, "fds_last": g.fds_last, "fds_max": g.fds_max,
            }));
        }
    }

    let _ = writeln!(
        out,
        "\nschedule: {} key rotation steps seen by both replicas, {} backend kills, {} replica restarts, {} shared-store kills, {} failed steps",
        timeline.rotation_steps,
        timeline.kills,
        timeline.restarts,
        timeline.store_kills,
        timeline.failures.len()
    );
    for failure in &timeline.failures {
        let _ = writeln!(out, "  FAILED: {failure}");
    }
    let known = KnownFaults::count(timeline, &errors, &explained);
    let _ = writeln!(
        out,
        "\nissue 15's faults as this run saw them:\n\
         \x20 1. gateway 502 or partial list while the backend was up (stale pooled connection): {}\n\
         \x20 2. failed attempts while a replica restarted (SIGTERM to listening again, + {GRACE} s): {}\n\
         \x20 3. backend killed mid-answer: {} answers cut without a word, {} ended by a JSON-RPC error event",
        known.stale_connection, known.restart, known.cut_silently, known.error_event
    );
    let _ = writeln!(
        out,
        "\nsoak: {} flows, {rounds} rounds, {lost} lost, {unexplained} unexplained errors",
        total.started
    );

    let causes: Value = by_cause
        .iter()
        .map(|(c, (n, r, u))| {
            (
                c.label().to_owned(),
                json!({ "attempts": n, "retried": r, "unexplained": u }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    let json = json!({
        "clients": info.clients, "duration_s": info.duration, "warmup_s": info.warmup,
        "flows": total.started, "completed": total.completed, "degraded": degraded_total, "lost": lost, "unfinished": info.unfinished,
        "rounds": rounds, "requests": attempts, "rounds_per_s": rounds as f64 / info.ended.max(1.0),
        "flows_in_progress_mean": mean_in_flight, "multi_exchange_flows": multi, "crossed_replicas": crossed,
        "failed_attempts": errors.len(), "unexplained": unexplained, "causes": causes,
        "latency": latency_json, "processes": process_json,
        "issue15": {
            "stale_connection": known.stale_connection, "restart": known.restart,
            "cut_silently": known.cut_silently, "error_event": known.error_event,
        },
        "rotation_steps": timeline.rotation_steps, "backend_kills": timeline.kills,
        "replica_restarts": timeline.restarts, "store_kills": timeline.store_kills,
        "schedule_failures": timeline.failures,
    });
    Report {
        text: out,
        json,
        samples_csv: crate::sampler::csv(samples),
        lost,
        unexplained,
        schedule_failures: timeline.failures.len(),
    }
}

/// Failed attempts that match the three faults of issue 15, which a soak through nginx found
/// before the gateway's transport fixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KnownFaults {
    /// A gateway 502 or a partial list no backend-down window explains: a request written onto
    /// a pooled connection the backend was closing.
    pub stale_connection: u64,
    /// Any failed attempt during a replica's restart window: the drain dropped a request.
    pub restart: u64,
    /// An answer cut off (or ended without its message) while its backend was down.
    pub cut_silently: u64,
    /// The JSON-RPC error event the gateway ends a stream with when its backend dies.
    pub error_event: u64,
}

impl KnownFaults {
    /// Counts them in `errors`, whose explanations are `explained`.
    pub fn count(timeline: &Timeline, errors: &[ErrorRecord], explained: &[Option<String>]) -> Self {
        let mut known = Self::default();
        for (error, why) in errors.iter().zip(explained) {
            let restarting = timeline.windows.iter().any(|w| {
                w.fault == Fault::ReplicaRestart && error.from <= w.to + GRACE && error.to >= w.from
            });
            match error.cause {
                Cause::GatewayBadGateway | Cause::PartialList if why.is_none() => known.stale_connection += 1,
                Cause::BodyCut | Cause::NoAnswer if !restarting && why.is_some() => known.cut_silently += 1,
                Cause::BackendStreamError => known.error_event += 1,
                _ => {}
            }
            known.restart += u64::from(restarting);
        }
        known
    }
}

fn describe(error: &ErrorRecord) -> String {
    format!(
        "{:.3}-{:.3}s {} {} {} -> {}{}{}: {}",
        error.from,
        error.to,
        error.cause.label(),
        error.flow,
        error.step,
        error.target,
        error
            .upstream
            .as_deref()
            .map(|u| format!(" via {u}"))
            .unwrap_or_default(),
        if error.retried { " (retried)" } else { "" },
        error.detail
    )
}

fn step_order(step: &str) -> (u8, &str) {
    match step {
        "call" => (0, step),
        s if s.starts_with("round") => (1, s),
        "tasks/get" => (2, step),
        _ => (3, step),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Window;

    fn error(cause: Cause, target: &'static str, upstream: Option<&str>, at: f64) -> ErrorRecord {
        ErrorRecord {
            from: at - 0.1,
            to: at,
            cause,
            flow: "deploy",
            step: "round 2",
            target,
            upstream: upstream.map(str::to_owned),
            backend: None,
            detail: String::new(),
            retried: true,
        }
    }

    #[test]
    fn errors_are_explained_only_by_a_fault_that_could_cause_them() {
        let mut timeline = Timeline::default();
        timeline.windows.push(Window {
            fault: Fault::BackendDown,
            subject: "alpha".into(),
            from: 10.0,
            to: 12.0,
        });
        timeline.windows.push(Window {
            fault: Fault::ReplicaRestart,
            subject: "127.0.0.1:2".into(),
            from: 30.0,
            to: 35.0,
        });
        assert!(explain(&timeline, &error(Cause::GatewayBadGateway, "alpha", None, 11.0)).is_some());
        assert!(explain(&timeline, &error(Cause::GatewayBadGateway, "alpha", None, 13.9)).is_some());
        assert!(explain(&timeline, &error(Cause::GatewayBadGateway, "alpha", None, 14.5)).is_none());
        assert!(explain(&timeline, &error(Cause::GatewayBadGateway, "beta", None, 11.0)).is_none());
        assert!(
            explain(
                &timeline,
                &error(Cause::ProxyBadGateway, "beta", Some("127.0.0.1:2"), 31.0)
            )
            .is_some()
        );
        assert!(
            explain(
                &timeline,
                &error(Cause::ProxyBadGateway, "beta", Some("127.0.0.1:1"), 31.0)
            )
            .is_none()
        );
        assert!(explain(&timeline, &error(Cause::Closed, "beta", None, 31.0)).is_some());
        assert!(
            explain(
                &timeline,
                &error(Cause::BodyCut, "alpha", Some("127.0.0.1:1"), 11.0)
            )
            .is_some()
        );
        assert!(explain(&timeline, &error(Cause::InvalidEnvelope, "alpha", None, 11.0)).is_none());
        assert!(explain(&timeline, &error(Cause::PartialList, "both", None, 11.0)).is_some());
        // A 503 naming the shared store: only its own window explains it.
        let store_refusal = |at| ErrorRecord {
            detail: "The gateway's shared store did not answer; retry shortly".into(),
            ..error(Cause::Unavailable, "alpha", None, at)
        };
        assert!(explain(&timeline, &store_refusal(50.0)).is_none());
        assert!(
            explain(&timeline, &store_refusal(11.0)).is_none(),
            "not by alpha being down"
        );
        let mut with_store = timeline.clone();
        with_store.windows.push(Window {
            fault: Fault::StoreDown,
            subject: "redis".into(),
            from: 49.0,
            to: 51.0,
        });
        assert!(explain(&with_store, &store_refusal(50.0)).is_some());
        assert!(explain(&with_store, &error(Cause::Unavailable, "alpha", None, 50.0)).is_none());

        let errors = [
            error(Cause::GatewayBadGateway, "alpha", None, 20.0),
            error(Cause::GatewayBadGateway, "alpha", None, 11.0),
            error(Cause::BodyCut, "alpha", None, 11.0),
            error(Cause::BackendStreamError, "alpha", None, 11.0),
            error(Cause::ProxyBadGateway, "beta", Some("127.0.0.1:2"), 31.0),
            error(Cause::BodyCut, "beta", Some("127.0.0.1:2"), 36.0),
        ];
        let explained: Vec<_> = errors.iter().map(|e| explain(&timeline, e)).collect();
        let known = KnownFaults::count(&timeline, &errors, &explained);
        let expected = KnownFaults {
            stale_connection: 1,
            restart: 2,
            cut_silently: 1,
            error_event: 1,
        };
        assert_eq!(known, expected);
    }
}
