//! One soak run: start the fleet, check it answers, drive the users while the fault schedule
//! runs and the sampler samples, let the flows in progress finish, stop everything, report.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fleet::{Backend, KeysFile, Nginx, Pids, Programs, Replica, ReplicaSettings, Store};
use crate::flows::{Behaviour, User};
use crate::mcp::Call;
use crate::report::{self, Report, RunInfo};
use crate::schedule::{self, Targets};
use crate::stats::{Clock, Stats};
use crate::{client, sampler};

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The programs.
    pub programs: Programs,
    /// Where configs and logs go.
    pub dir: PathBuf,
    /// Concurrent users.
    pub clients: usize,
    /// Seconds of load.
    pub duration: Duration,
    /// Start of the fault schedule; the users start spread over its first half.
    pub warmup: Duration,
    /// Length of one fault cycle.
    pub cycle: Duration,
    /// Longest think time between rounds.
    pub think: Duration,
    /// Longest pause between flows.
    pub pause: Duration,
    /// First retry's backoff.
    pub backoff: Duration,
    /// Longest wait for one answer.
    pub request_timeout: Duration,
    /// How long the killed backend stays down.
    pub backend_down: Duration,
    /// The replicas' settings.
    pub replica: ReplicaSettings,
}

/// Runs the soak.
pub async fn run(settings: Settings) -> io::Result<Report> {
    let pids: Pids = Arc::default();
    let programs = &settings.programs;
    let dir = &settings.dir;
    let mut keys = KeysFile::create(&programs.gateway, dir).await?;
    let mut alpha = Backend::alpha(programs, dir, &pids)?;
    let mut beta = Backend::beta(programs, dir, &pids)?;
    alpha.start().await?;
    beta.start().await?;
    let mut store = match &programs.redis {
        Some(program) => {
            let mut store = Store::new(program, dir, &pids)?;
            store.start().await?;
            Some(store)
        }
        None => None,
    };
    let replica_settings = ReplicaSettings {
        shared_store: store.as_ref().map(|s| (s.url(), s.config.clone())),
        ..settings.replica.clone()
    };
    let replica = |name| {
        Replica::new(
            name,
            programs,
            dir,
            &keys.path,
            &[&alpha, &beta],
            &replica_settings,
            &pids,
        )
    };
    let mut replicas = [replica("gateway-a")?, replica("gateway-b")?];
    for replica in &mut replicas {
        replica.start().await?;
    }
    let mut nginx = Nginx::start(&programs.nginx, dir, &[replicas[0].addr, replicas[1].addr], &pids).await?;
    preflight(nginx.addr).await?;
    eprintln!(
        "fleet up: nginx {} -> gateway-a {}, gateway-b {} -> alpha {} (SSE), beta {} (JSON){}; logs in {}",
        nginx.addr,
        replicas[0].addr,
        replicas[1].addr,
        alpha.addr,
        beta.addr,
        store
            .as_ref()
            .map(|s| format!("; shared store redis {}", s.addr))
            .unwrap_or_default(),
        dir.display()
    );

    let clock = Clock::start();
    let stats = Arc::new(Stats::default());
    let (samples, sampler) = sampler::start(pids.clone(), stats.clone(), clock);
    let behaviour = Behaviour {
        target: nginx.addr,
        think: settings.think,
        pause: settings.pause,
        backoff: settings.backoff,
        request_timeout: settings.request_timeout,
    };
    let deadline = clock.at(settings.duration.as_secs_f64());
    let spread = settings.warmup / 2;
    let users: Vec<_> = (0..settings.clients)
        .map(|index| {
            let user = User::new(index, behaviour, stats.clone(), clock);
            let delay = spread.mul_f64(index as f64 / settings.clients.max(1) as f64);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                user.run_until(deadline).await;
            })
        })
        .collect();

    let plan = schedule::Plan {
        start: settings.warmup.as_secs_f64(),
        end: settings.duration.as_secs_f64(),
        cycle: settings.cycle.as_secs_f64(),
        backend_down: settings.backend_down,
        envelope_ttl: settings.replica.envelope_ttl,
        drain_timeout: settings.replica.drain_timeout,
        reload_interval: settings.replica.reload_interval,
    };
    let timeline = schedule::run(
        plan,
        clock,
        Targets {
            keys: &mut keys,
            alpha: &mut alpha,
            replicas: &mut replicas,
            store: store.as_mut(),
        },
    )
    .await;

    // Flows in progress at the deadline run to their end, within a bound: the longest flow's
    // three thinks, and four timed-out attempts of its last round.
    let finish_by = deadline + settings.think * 3 + settings.request_timeout * 4 + Duration::from_secs(30);
    let mut unfinished = 0;
    for user in users {
        let left = finish_by.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, user).await.is_err() {
            unfinished += 1;
        }
    }
    let ended = clock.now();
    sampler.abort();
    eprintln!("[{ended:7.1}s] load ended; stopping the fleet");

    for replica in &mut replicas {
        let _ = replica
            .stop(settings.replica.drain_timeout + Duration::from_secs(5))
            .await;
    }
    alpha.kill().await?;
    beta.kill().await?;
    nginx.stop().await?;
    if let Some(store) = &mut store {
        store.kill().await?;
    }

    let samples = samples.lock().expect("not poisoned").clone();
    let info = RunInfo {
        clients: settings.clients,
        duration: settings.duration.as_secs_f64(),
        warmup: settings.warmup.as_secs_f64(),
        ended,
        unfinished,
        settings: format!(
            "{} users for {:?} (warm-up {:?}), think up to {:?}, pause up to {:?}, retry backoff {:?} doubling, request timeout {:?};\n\
             fault cycle {:?}, alpha down {:?}, envelope TTL {:?}, drain delay {:?} / timeout {:?}, reload interval {:?}{}",
            settings.clients,
            settings.duration,
            settings.warmup,
            settings.think,
            settings.pause,
            settings.backoff,
            settings.request_timeout,
            settings.cycle,
            settings.backend_down,
            settings.replica.envelope_ttl,
            settings.replica.drain_delay,
            settings.replica.drain_timeout,
            settings.replica.reload_interval,
            if store.is_some() {
                ";\nshared store (redis-server, killed and restarted empty at 0.65 of each cycle), one limit on every request, on-store-error = deny"
            } else {
                ""
            }
        ),
    };
    Ok(report::build(&info, &stats, &timeline, &samples))
}

/// Waits (at most 30 s) until a merged `tools/list` through nginx holds both backends' tools.
async fn preflight(target: std::net::SocketAddr) -> io::Result<()> {
    let mut connection = client::Connection::new(target);
    let mut last = String::new();
    for id in 1..=60 {
        match connection
            .attempt(id, &Call::list_tools(), false, Duration::from_secs(5))
            .await
        {
            Ok(reply) => {
                let text = reply.result.to_string();
                if text.contains("provision_cluster") && text.contains("test_tool_with_task") {
                    return Ok(());
                }
                last = text;
            }
            Err(failure) => last = format!("{}: {}", failure.cause.label(), failure.detail),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(io::Error::other(format!(
        "the fleet does not answer a merged tools/list through nginx: {last}"
    )))
}
