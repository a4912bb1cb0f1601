//! The fault schedule, run while the clients drive traffic, and the timeline it leaves: events,
//! and the windows in which a process was down, which explain the errors that fall into them.
//!
//! After the warm-up, the schedule repeats a cycle of `cycle` seconds. At these fractions of
//! each cycle:
//!
//! | at | fault |
//! |---|---|
//! | 0.05 | key rotation step 1: a new key is **added** to the shared keys file (open-only) |
//! | 0.20 | `kill -9` of backend `alpha`; restarted `backend_down` later on the same port |
//! | 0.35 | step 2: the new key is **activated** (once both replicas showed step 1 in `/readyz`) |
//! | 0.50 | rolling restart of `gateway-b`: SIGTERM, drain (`--drain-delay`, `--drain-timeout`), start again |
//! | 0.65 | with `--shared-store`: `kill -9` of `redis`; restarted (empty) `backend_down` later, the window open until both replicas' `/readyz` show the store up |
//! | 0.90 | step 3: the old key is **retired** (not before `--envelope-ttl` after step 2 reached both) |
//!
//! The keys file is rewritten atomically and the replicas pick it up by themselves (hot reload,
//! checked every `--reload-interval`); the schedule only watches `/readyz` on each replica's
//! admin listener to see when a step has reached both, as an operator would.
//!
//! ```
//! use mrtr_soak::schedule::{Fault, Timeline, Window};
//!
//! let mut timeline = Timeline::default();
//! timeline.windows.push(Window { fault: Fault::BackendDown, subject: "alpha".into(), from: 10.0, to: 13.0 });
//! assert!(timeline.explains(Fault::BackendDown, "alpha", 12.0, 12.5, 1.0).is_some());
//! assert!(timeline.explains(Fault::BackendDown, "alpha", 20.0, 20.1, 1.0).is_none());
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::client;
use crate::fleet::{Backend, KeysFile, Replica, Store};
use crate::stats::Clock;

/// What a window of downtime was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A backend was killed and not yet back.
    BackendDown,
    /// A replica was draining, stopped, or starting.
    ReplicaRestart,
    /// The shared store was killed, and not yet seen up again by both replicas.
    StoreDown,
}

/// A span of time in which one process was (partly) down.
#[derive(Clone, Debug)]
pub struct Window {
    /// What happened.
    pub fault: Fault,
    /// The backend's name, or the replica's address.
    pub subject: String,
    /// Start (seconds since the start of the run).
    pub from: f64,
    /// End: the process was serving again.
    pub to: f64,
}

/// Something the schedule did, or saw.
#[derive(Clone, Debug)]
pub struct Event {
    /// When (seconds since the start of the run).
    pub at: f64,
    /// What.
    pub what: String,
}

/// What the schedule did.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Every event, in order.
    pub events: Vec<Event>,
    /// Every window of downtime.
    pub windows: Vec<Window>,
    /// Steps that did not happen as they must (a reload never seen, a process that did not start).
    pub failures: Vec<String>,
    /// Key rotation steps that reached both replicas.
    pub rotation_steps: u32,
    /// Backend kills.
    pub kills: u32,
    /// Replica restarts.
    pub restarts: u32,
    /// Shared-store kills.
    pub store_kills: u32,
}

impl Timeline {
    /// The window of `fault` on `subject` that overlaps `[from, to]`, with `grace` seconds added
    /// after the window's end (the time the rest of the system needs to notice the process is
    /// back).
    pub fn explains(&self, fault: Fault, subject: &str, from: f64, to: f64, grace: f64) -> Option<&Window> {
        self.windows
            .iter()
            .find(|w| w.fault == fault && w.subject == subject && from <= w.to + grace && to >= w.from)
    }

    fn event(&mut self, clock: &Clock, what: impl Into<String>) {
        let what = what.into();
        eprintln!("[{:7.1}s] {what}", clock.now());
        self.events.push(Event {
            at: clock.now(),
            what,
        });
    }

    fn failed(&mut self, clock: &Clock, what: String) {
        self.event(clock, format!("FAILED: {what}"));
        self.failures.push(what);
    }
}

/// When the schedule runs and how long its steps wait.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Start of the first cycle (end of the warm-up), seconds.
    pub start: f64,
    /// No fault starts after this, seconds.
    pub end: f64,
    /// Length of a cycle, seconds.
    pub cycle: f64,
    /// How long `alpha` stays down.
    pub backend_down: Duration,
    /// The replicas' `--envelope-ttl`.
    pub envelope_ttl: Duration,
    /// The replicas' `--drain-timeout`.
    pub drain_timeout: Duration,
    /// The replicas' `--reload-interval`.
    pub reload_interval: Duration,
}

/// What the schedule acts on.
#[derive(Debug)]
pub struct Targets<'a> {
    /// The shared keys file.
    pub keys: &'a mut KeysFile,
    /// The backend it kills.
    pub alpha: &'a mut Backend,
    /// The replicas; the second is the one restarted.
    pub replicas: &'a mut [Replica; 2],
    /// The shared store, when there is one: killed too.
    pub store: Option<&'a mut Store>,
}

/// Runs the schedule until `plan.end`.
pub async fn run(plan: Plan, clock: Clock, targets: Targets<'_>) -> Timeline {
    let mut timeline = Timeline::default();
    let Targets {
        keys,
        alpha,
        replicas,
        mut store,
    } = targets;
    let mut base = plan.start;
    'cycles: while base < plan.end {
        let at = |fraction: f64| base + fraction * plan.cycle;
        // Step 1.
        if !wait_until(&clock, at(0.05), plan.end).await {
            break;
        }
        match keys.add().await {
            Ok(kid) => {
                timeline.event(
                    &clock,
                    format!("rotation step 1: add {kid} (keys file: {:?})", keys.kids()),
                );
                await_keys(&clock, &plan, keys, replicas, &mut timeline).await;
            }
            Err(e) => timeline.failed(&clock, format!("rotation step 1: {e}")),
        }
        // Backend kill.
        if !wait_until(&clock, at(0.20), plan.end).await {
            break;
        }
        let from = clock.now();
        match alpha.kill().await {
            Ok(()) => {
                timeline.kills += 1;
                timeline.event(&clock, format!("kill -9 backend {}", alpha.name));
                tokio::time::sleep(plan.backend_down).await;
                match alpha.start().await {
                    Ok(()) => {
                        timeline.event(&clock, format!("backend {} restarted and listening", alpha.name))
                    }
                    Err(e) => timeline.failed(&clock, format!("restart of {}: {e}", alpha.name)),
                }
            }
            Err(e) => timeline.failed(&clock, format!("kill of {}: {e}", alpha.name)),
        }
        timeline.windows.push(Window {
            fault: Fault::BackendDown,
            subject: alpha.name.to_owned(),
            from,
            to: clock.now(),
        });
        // Step 2.
        if !wait_until(&clock, at(0.35), plan.end).await {
            break;
        }
        let activated = match keys.activate() {
            Ok(()) => {
                timeline.event(
                    &clock,
                    format!("rotation step 2: activate (keys file: {:?})", keys.kids()),
                );
                await_keys(&clock, &plan, keys, replicas, &mut timeline).await;
                clock.now()
            }
            Err(e) => {
                timeline.failed(&clock, format!("rotation step 2: {e}"));
                continue 'cycles;
            }
        };
        // Rolling restart of one replica.
        if !wait_until(&clock, at(0.50), plan.end).await {
            break;
        }
        restart(&clock, &plan, &mut replicas[1], &mut timeline).await;
        if let Some(store) = store.as_deref_mut() {
            if !wait_until(&clock, at(0.65), plan.end).await {
                break;
            }
            store_outage(&clock, &plan, store, replicas, &mut timeline).await;
        }
        // Step 3, once every envelope sealed with the old key has expired.
        let retire_at = at(0.90).max(activated + plan.envelope_ttl.as_secs_f64() + 1.0);
        if !wait_until(&clock, retire_at, plan.end).await {
            break;
        }
        match keys.retire() {
            Ok(()) => {
                timeline.event(
                    &clock,
                    format!("rotation step 3: retire (keys file: {:?})", keys.kids()),
                );
                await_keys(&clock, &plan, keys, replicas, &mut timeline).await;
            }
            Err(e) => timeline.failed(&clock, format!("rotation step 3: {e}")),
        }
        base += plan.cycle;
    }
    timeline
}

/// Sleeps until `at`; false (at once) if `at` is past `end`.
async fn wait_until(clock: &Clock, at: f64, end: f64) -> bool {
    if at > end {
        return false;
    }
    tokio::time::sleep_until(clock.at(at).into()).await;
    true
}

/// SIGTERM, drain, exit, start again: the window covers all of it.
async fn restart(clock: &Clock, plan: &Plan, replica: &mut Replica, timeline: &mut Timeline) {
    let from = clock.now();
    timeline.event(clock, format!("SIGTERM {} ({})", replica.name, replica.addr));
    match replica.stop(plan.drain_timeout + Duration::from_secs(10)).await {
        Ok(status) => timeline.event(clock, format!("{} exited: {status}", replica.name)),
        Err(e) => timeline.failed(clock, format!("stop of {}: {e}", replica.name)),
    }
    match replica.start().await {
        Ok(()) => {
            timeline.restarts += 1;
            timeline.event(clock, format!("{} started again and listening", replica.name));
        }
        Err(e) => timeline.failed(clock, format!("start of {}: {e}", replica.name)),
    }
    timeline.windows.push(Window {
        fault: Fault::ReplicaRestart,
        subject: replica.addr.to_string(),
        from,
        to: clock.now(),
    });
}

/// `kill -9` of the store, a restart `backend_down` later; the window lasts until both replicas
/// have seen it answer again (their pings, every `--health-interval`, or a request).
async fn store_outage(
    clock: &Clock,
    plan: &Plan,
    store: &mut Store,
    replicas: &[Replica; 2],
    timeline: &mut Timeline,
) {
    let from = clock.now();
    if let Err(e) = store.kill().await {
        timeline.failed(clock, format!("kill of redis: {e}"));
        return;
    }
    timeline.store_kills += 1;
    timeline.event(clock, "kill -9 redis (the shared store)");
    tokio::time::sleep(plan.backend_down).await;
    match store.start().await {
        Ok(()) => timeline.event(clock, "redis restarted, empty"),
        Err(e) => timeline.failed(clock, format!("restart of redis: {e}")),
    }
    let limit = Duration::from_secs(15);
    for replica in replicas {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let seen = match replica.admin {
                Some(admin) => store_state(admin).await,
                None => None,
            };
            if seen.as_deref() == Some("up") {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                timeline.failed(
                    clock,
                    format!(
                        "{} shows the store {seen:?} {limit:?} after its restart",
                        replica.name
                    ),
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    timeline.event(clock, "both replicas show the store up");
    timeline.windows.push(Window {
        fault: Fault::StoreDown,
        subject: "redis".into(),
        from,
        to: clock.now(),
    });
}

/// The shared store's state a replica's `/readyz` shows (`up`, `down`).
async fn store_state(admin: SocketAddr) -> Option<String> {
    let (_, body) = client::get(admin, "/readyz", Duration::from_secs(5)).await.ok()?;
    let ready: Value = serde_json::from_slice(&body).ok()?;
    Some(ready["shared_store"]["state"].as_str()?.to_owned())
}

/// Waits until every replica's `/readyz` shows the keys file's keyring (sealing key and count).
async fn await_keys(
    clock: &Clock,
    plan: &Plan,
    keys: &KeysFile,
    replicas: &[Replica; 2],
    timeline: &mut Timeline,
) {
    let kids = keys.kids();
    let limit = plan.reload_interval * 3 + Duration::from_secs(10);
    let began = clock.now();
    for replica in replicas {
        let Some(admin) = replica.admin else {
            timeline.failed(clock, format!("{} has no admin listener", replica.name));
            return;
        };
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match keyring(admin).await {
                Some((active, count)) if active == kids[0] && count == kids.len() => break,
                seen if tokio::time::Instant::now() > deadline => {
                    timeline.failed(
                        clock,
                        format!(
                            "{} still shows {seen:?} after {limit:?}, not {kids:?}",
                            replica.name
                        ),
                    );
                    return;
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
    timeline.rotation_steps += 1;
    timeline.event(
        clock,
        format!(
            "both replicas show keyring {kids:?} ({:.1} s after the edit)",
            clock.now() - began
        ),
    );
}

/// The keyring a replica's `/readyz` shows: sealing key id and number of keys.
async fn keyring(admin: SocketAddr) -> Option<(String, usize)> {
    let (_, body) = client::get(admin, "/readyz", Duration::from_secs(5)).await.ok()?;
    let ready: Value = serde_json::from_slice(&body).ok()?;
    let keyring = &ready["keyring"];
    Some((
        keyring["active"].as_str()?.to_owned(),
        keyring["keys"].as_u64()? as usize,
    ))
}
