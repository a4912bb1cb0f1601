//! The cost of a client connection, and the gateway with many of them (issue 25): `scale-bench`.
//!
//! Three phases against one mock backend, each gateway a fresh process (glibc keeps what a
//! process freed, so a second batch on the same process would reuse it and look free):
//!
//! 1. **connected only**: N connections that send nothing; the gateway's RSS and open file
//!    descriptors before and after. Connections the gateway cannot take (its descriptor limit)
//!    stay in the kernel's backlog or time out, and the count of those it did take says where it
//!    stopped.
//! 2. **one request each**: N connections that each send one `tools/call` (answer checked), at
//!    the closed loop's rate (`--rate`), and then stay open, idle; RSS per connection as in 1,
//!    just after the last answer and again [`IDLE_WAIT`] later (the gateway parks HTTP/1.1
//!    connections idle for a second).
//! 3. **closed loop**, on the gateway of 2: every connection sends `tools/call` after a think
//!    time (random around its mean, so that the total rate is about `--rate`), each answer
//!    checked, for a while: requests per second, p50/p99 latency, errors, the gateway's peak RSS
//!    and descriptors.
//!
//! The connections are held by loader processes (this binary again, `--loader`), each under its
//! own descriptor limit, driven over their stdin and stdout one JSON line at a time
//! ([`Command`], [`Reply`]).

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::load::{self, Target};
use crate::mcp;
use crate::procs::{self, Proc, Spawn};
use crate::workload::{Cell, Hop, Workload};

/// What to run; see `scale-bench --help`.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Directory holding `mock-backend` and `mrtr-gateway`.
    pub bin_dir: PathBuf,
    /// Directory for the processes' logs.
    pub work_dir: PathBuf,
    /// Client connections asked for.
    pub connections: usize,
    /// Most connections one loader process holds.
    pub per_loader: usize,
    /// Connection attempts in flight at once, all loaders together (the gateway's listen
    /// backlog is 128).
    pub ramp: usize,
    /// Total request rate of the closed loop, requests per second (sets the think time).
    pub rate: f64,
    /// Length of the closed loop.
    pub load_secs: Duration,
    /// The gateway's `--max-in-flight`: it bounds the backend connections, so that many
    /// descriptors (and [`FD_MARGIN`] more) are kept free for them when phases 2 and 3 are
    /// sized under the gateway's descriptor limit.
    pub max_in_flight: usize,
    /// `taskset -c` list for the gateway and the backend.
    pub hop_cpus: Option<String>,
    /// `taskset -c` list for the loaders.
    pub load_cpus: Option<String>,
    /// Extra arguments for `mrtr-gateway`.
    pub gateway_args: Vec<String>,
    /// Extra environment for `mrtr-gateway` (`MALLOC_ARENA_MAX=1`).
    pub gateway_env: Vec<(String, String)>,
    /// Skip phase 1.
    pub skip_connect_only: bool,
}

/// A loader's instruction, one JSON line on its stdin.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Open the connections (nothing sent).
    Open,
    /// Send one request on every connection, one after another at most `per_second` a second,
    /// and read its answer.
    One {
        /// This loader's share of the total rate.
        per_second: f64,
    },
    /// Closed loop for `secs`, each connection waiting about `think_ms` between requests.
    Load {
        /// Length of the loop.
        secs: f64,
        /// Mean think time.
        think_ms: f64,
    },
    /// Close every connection.
    Close,
}

/// A loader's answer to a [`Command`], one JSON line on its stdout.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reply {
    /// Connections open after the command.
    pub open: usize,
    /// Connections that could not be opened (refused, or not accepted within the timeout).
    pub not_opened: usize,
    /// Correct answers.
    pub correct: u64,
    /// Wrong answers and failed exchanges.
    pub failures: u64,
    /// Connections that broke (and were dropped).
    pub broken: usize,
    /// Up to three failure reasons.
    pub samples: Vec<String>,
    /// Latencies of the answers completed inside the window, microseconds (`Load`).
    pub latencies_us: Vec<u32>,
    /// Requests completed inside the window (`Load`).
    pub completed: u64,
}

impl Reply {
    fn merge(&mut self, other: Reply) {
        self.open += other.open;
        self.not_opened += other.not_opened;
        self.correct += other.correct;
        self.failures += other.failures;
        self.broken += other.broken;
        for sample in other.samples {
            if self.samples.len() < 3 {
                self.samples.push(sample);
            }
        }
        self.latencies_us.extend(other.latencies_us);
        self.completed += other.completed;
    }

    fn fail(&mut self, reason: String) {
        self.failures += 1;
        if self.samples.len() < 3 {
            self.samples.push(reason);
        }
    }
}

/// Descriptors beyond `--max-in-flight` kept for backend connections: the health probe's, and
/// connections opened for a request that an idle one then served first.
pub const FD_MARGIN: usize = 16;

/// How long phase 2 waits after the answers before it looks again: past the gateway's parking
/// delay (1 s).
pub const IDLE_WAIT: Duration = Duration::from_secs(2);

/// How long a loader waits for one connection to be established.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Request ids: the loader's index in the high bits, so that no two requests of a run share one.
pub(crate) fn first_id(loader: usize) -> u64 {
    ((loader as u64) + 1) << 40
}

/// A loader: holds `connections` connections to `target` and obeys [`Command`]s read from
/// stdin until it ends. Run by `scale-bench --loader`.
pub async fn loader(target: Target, connections: usize, ramp: usize, index: usize) -> io::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let work = Arc::new(Workload::new(Cell::Call { size: 256 }, Hop::Gateway, None));
    let mut held: Vec<load::Connection> = Vec::new();
    let mut next_id = first_id(index);
    while let Some(line) = rx.recv().await {
        let command: Command = serde_json::from_str(&line).map_err(io::Error::other)?;
        let mut reply = Reply::default();
        match command {
            Command::Open => {
                let (opened, failed) = open_all(&target, connections, ramp.max(1)).await;
                held.extend(opened);
                reply.not_opened = failed;
            }
            Command::One { per_second } => {
                // One at a time: requests in flight at once would grow the gateway's backend
                // pool, whose connections would then count as the clients'.
                let (kept, part) = one_each(std::mem::take(&mut held), &work, per_second, &mut next_id).await;
                held = kept;
                reply.merge(part);
            }
            Command::Load { secs, think_ms } => {
                let (kept, part) = closed_loop(
                    std::mem::take(&mut held),
                    &work,
                    Duration::from_secs_f64(secs),
                    think_ms,
                    index,
                )
                .await;
                held = kept;
                reply.merge(part);
            }
            Command::Close => held.clear(),
        }
        reply.open = held.len();
        let mut out = io::stdout().lock();
        serde_json::to_writer(&mut out, &reply).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    Ok(())
}

/// Opens `count` connections, at most `ramp` attempts at once.
async fn open_all(target: &Target, count: usize, ramp: usize) -> (Vec<load::Connection>, usize) {
    let mut opened = Vec::with_capacity(count);
    let mut failed = 0;
    let mut attempts = tokio::task::JoinSet::new();
    let mut started = 0;
    while started < count || !attempts.is_empty() {
        while started < count && attempts.len() < ramp {
            let target = target.clone();
            attempts.spawn(async move {
                tokio::time::timeout(CONNECT_TIMEOUT, load::Connection::open(&target)).await
            });
            started += 1;
        }
        match attempts.join_next().await {
            Some(Ok(Ok(Ok(connection)))) => opened.push(connection),
            Some(_) => failed += 1,
            None => {}
        }
    }
    (opened, failed)
}

/// One request on every connection, one connection after another and at most `per_second` a
/// second; the connections that still work.
async fn one_each(
    held: Vec<load::Connection>,
    work: &Workload,
    per_second: f64,
    next_id: &mut u64,
) -> (Vec<load::Connection>, Reply) {
    let interval = Duration::from_secs_f64(1.0 / per_second.max(1e-3));
    let mut next = tokio::time::Instant::now();
    let mut reply = Reply::default();
    let mut kept = Vec::with_capacity(held.len());
    for mut connection in held {
        tokio::time::sleep_until(next).await;
        next += interval;
        let id = *next_id;
        *next_id += 1;
        match exchange(&mut connection, work, id).await {
            Ok(_) => {
                reply.correct += 1;
                kept.push(connection);
            }
            Err((reason, broken)) => {
                reply.fail(reason);
                if broken {
                    reply.broken += 1;
                } else {
                    kept.push(connection);
                }
            }
        }
    }
    (kept, reply)
}

/// One checked `tools/call` of request `id`: its latency, or the reason it failed and whether
/// the connection is broken.
async fn exchange(
    connection: &mut load::Connection,
    work: &Workload,
    id: u64,
) -> Result<Duration, (String, bool)> {
    let sent = Instant::now();
    match connection.send(work, mcp::echo_request(id, 256)).await {
        Ok(reply) => work
            .check(id, reply.status, reply.content_type(), &reply.body)
            .map(|()| sent.elapsed())
            .map_err(|reason| (format!("request {id}: {reason}"), false)),
        Err(reason) => Err((format!("request {id}: {reason}"), true)),
    }
}

/// Every connection sends a request, waits a think time drawn uniformly from half to one and a
/// half times `think_ms`, and again, until `secs` are over.
async fn closed_loop(
    held: Vec<load::Connection>,
    work: &Arc<Workload>,
    length: Duration,
    think_ms: f64,
    index: usize,
) -> (Vec<load::Connection>, Reply) {
    let start = Instant::now();
    let end = start + length;
    let mut tasks = tokio::task::JoinSet::new();
    for (n, mut connection) in held.into_iter().enumerate() {
        let work = work.clone();
        // Ids of this connection: its own block of 2^20 within the loader's.
        let mut id = first_id(index) + ((n as u64 + 1) << 20);
        let mut random = Xorshift::new(id);
        tasks.spawn(async move {
            let mut reply = Reply::default();
            // A first wait anywhere in one think time spreads the connections' starts.
            let mut wait = think_ms * random.next_unit();
            loop {
                let at = Instant::now() + Duration::from_secs_f64(wait / 1000.0);
                if at >= end {
                    break;
                }
                tokio::time::sleep_until(at.into()).await;
                id += 1;
                match exchange(&mut connection, &work, id).await {
                    Ok(latency) => {
                        reply.correct += 1;
                        if Instant::now() <= end {
                            reply.completed += 1;
                            reply
                                .latencies_us
                                .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
                        }
                    }
                    Err((reason, broken)) => {
                        reply.fail(reason);
                        if broken {
                            reply.broken = 1;
                            return (None, reply);
                        }
                    }
                }
                wait = think_ms * (0.5 + random.next_unit());
            }
            (Some(connection), reply)
        });
    }
    let mut total = Reply::default();
    let mut kept = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((connection, reply)) => {
                kept.extend(connection);
                total.merge(reply);
            }
            Err(error) => total.fail(format!("loader task: {error}")),
        }
    }
    (kept, total)
}

/// xorshift64: think times need spread, not quality.
struct Xorshift(u64);

impl Xorshift {
    fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// Uniform in [0, 1).
    fn next_unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One loader process, driven from the orchestrator.
struct Loader {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Loader {
    fn send<C: Serialize>(&mut self, command: &C) -> io::Result<()> {
        serde_json::to_writer(&mut self.stdin, command).map_err(io::Error::other)?;
        self.stdin.write_all(b"\n")?;
        self.stdin.flush()
    }

    fn reply<R: DeserializeOwned>(&mut self) -> io::Result<R> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err(io::Error::other("a loader ended without answering (see its log)"));
        }
        serde_json::from_str(&line).map_err(io::Error::other)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The loaders of one gateway, holding `connections` between them.
pub(crate) struct Loaders(Vec<Loader>);

impl Loaders {
    /// Starts the loaders, each with `extra` arguments after its own (another kind of loader).
    pub(crate) fn start(plan: &Plan, url: &str, connections: usize, extra: &[String]) -> io::Result<Self> {
        let exe = std::env::current_exe()?;
        let count = connections.div_ceil(plan.per_loader.max(1)).max(1);
        let ramp = (plan.ramp / count).max(1);
        let mut loaders = Vec::with_capacity(count);
        for index in 0..count {
            // Spread evenly: the first ones take one more when it does not divide.
            let share = connections / count + usize::from(index < connections % count);
            let mut argv: Vec<String> = Vec::new();
            if let Some(cpus) = &plan.load_cpus {
                argv.extend(["taskset".into(), "-c".into(), cpus.clone()]);
            }
            argv.push(exe.display().to_string());
            argv.extend([
                "--loader".into(),
                url.to_owned(),
                "--connections".into(),
                share.to_string(),
                "--ramp".into(),
                ramp.to_string(),
                "--loader-index".into(),
                index.to_string(),
            ]);
            argv.extend(extra.iter().cloned());
            let log = std::fs::File::create(plan.work_dir.join(format!("loader-{index}.log")))?;
            let mut child = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(log)
                .spawn()?;
            let stdin = child.stdin.take().ok_or_else(|| io::Error::other("no stdin"))?;
            let stdout = BufReader::new(child.stdout.take().ok_or_else(|| io::Error::other("no stdout"))?);
            loaders.push(Loader { child, stdin, stdout });
        }
        Ok(Self(loaders))
    }

    /// Sends `command` to every loader, then gathers their replies.
    fn all(&mut self, command: &Command) -> io::Result<Reply> {
        let mut total = Reply::default();
        for reply in self.ask(command)? {
            total.merge(reply);
        }
        Ok(total)
    }

    /// Sends `command` to every loader, then gathers their replies, one per loader.
    pub(crate) fn ask<C: Serialize, R: DeserializeOwned>(&mut self, command: &C) -> io::Result<Vec<R>> {
        for loader in &mut self.0 {
            loader.send(command)?;
        }
        self.0.iter_mut().map(Loader::reply).collect()
    }
}

/// The gateway's memory and descriptors at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    /// `VmRSS`, KiB.
    pub rss_kib: u64,
    /// `RssAnon` (heap, stacks), KiB.
    pub anon_kib: u64,
    /// Open file descriptors.
    pub fds: usize,
}

pub(crate) fn snapshot(pid: u32) -> io::Result<Snapshot> {
    Ok(Snapshot {
        rss_kib: procs::status_kib(pid, "VmRSS:")?,
        anon_kib: procs::status_kib(pid, "RssAnon:")?,
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count(),
    })
}

/// Minor page faults of a process so far (`/proc/PID/stat`, field 10).
fn minor_faults(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name start at field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    rest.split_whitespace()
        .nth(10 - 3)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no minflt in /proc/{pid}/stat")))
}

/// The soft `Max open files` of a process.
pub(crate) fn fd_limit(pid: u32) -> io::Result<usize> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no Max open files in /proc/{pid}/limits")))
}

/// Idle memory per connection measured on a fresh gateway.
#[derive(Clone, Debug, Default)]
pub struct Idle {
    /// Connections asked for.
    pub asked: usize,
    /// Connections the gateway took (its descriptors beyond those it had at rest).
    pub accepted: usize,
    /// Connections a loader could not open.
    pub not_opened: usize,
    /// Before and after the connections.
    pub before: Snapshot,
    /// See `before`.
    pub after: Snapshot,
    /// Checked answers of the one request each (phase 2).
    pub answers: Reply,
}

impl Idle {
    /// RSS per connection taken, KiB.
    pub fn rss_per_connection(&self) -> f64 {
        per(self.after.rss_kib, self.before.rss_kib, self.accepted)
    }

    /// Anonymous RSS per connection taken, KiB.
    pub fn anon_per_connection(&self) -> f64 {
        per(self.after.anon_kib, self.before.anon_kib, self.accepted)
    }
}

fn per(after: u64, before: u64, count: usize) -> f64 {
    (after as f64 - before as f64) / count.max(1) as f64
}

/// The closed loop's figures.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Connections in the loop.
    pub connections: usize,
    /// Mean think time, ms.
    pub think_ms: f64,
    /// Checked answers and failures, latencies.
    pub reply: Reply,
    /// Requests per second completed in the window.
    pub rate: f64,
    /// Peak RSS and descriptors sampled during the loop.
    pub peak: Snapshot,
    /// At the end of the loop.
    pub end: Snapshot,
    /// The gateway's CPU time per request, µs.
    pub cpu_us_per_request: f64,
    /// The gateway's kernel share of that CPU time.
    pub system_share: f64,
    /// The gateway's minor page faults per request (memory given back to the kernel and
    /// touched again).
    pub faults_per_request: f64,
}

impl Loaded {
    /// The `q` quantile of latency, ms.
    pub fn latency_ms(&self, q: f64) -> f64 {
        let sorted = &self.reply.latencies_us;
        if sorted.is_empty() {
            return f64::NAN;
        }
        f64::from(sorted[((sorted.len() - 1) as f64 * q).round() as usize]) / 1000.0
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The gateway's soft descriptor limit.
    pub fd_limit: usize,
    /// Its descriptors at rest (listener, runtime, backend connection, standard streams).
    pub own_fds: usize,
    /// Connections phases 2 and 3 used: the ones asked for, or what fits under the limit.
    pub sized: usize,
    /// Phase 1.
    pub connect_only: Option<Idle>,
    /// Phase 2, just after the answers.
    pub one_request: Idle,
    /// Phase 2, [`IDLE_WAIT`] later.
    pub one_request_idle: Snapshot,
    /// Phase 3.
    pub loaded: Loaded,
}

impl Outcome {
    /// Wrong answers and failed exchanges of phases 2 and 3, and connections of phase 2 not taken.
    pub fn errors(&self) -> u64 {
        self.one_request.answers.failures
            + self.loaded.reply.failures
            + (self.sized - self.one_request.accepted.min(self.sized)) as u64
    }
}

pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn binary(plan: &Plan, name: &str) -> io::Result<PathBuf> {
    let path = plan.bin_dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} not found: build it first (scripts/bench-connections.sh does)",
                path.display()
            ),
        ))
    }
}

fn start_gateway(
    plan: &Plan,
    backend: &str,
    keys: &str,
    name: &str,
    max_connections: usize,
) -> io::Result<Proc> {
    let program = binary(plan, "mrtr-gateway")?;
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &format!("alpha={backend}"),
        // Idle for the whole run, and every connection asked for must be taken.
        "--client-idle-timeout",
        "3600",
        "--max-connections",
        &max_connections.to_string(),
        "--max-in-flight",
        &plan.max_in_flight.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(plan.gateway_args.iter().cloned());
    let mut env = vec![("MRTR_KEYS", keys.to_owned()), ("RUST_LOG", "warn".to_owned())];
    env.extend(plan.gateway_env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    Spawn {
        name,
        program: &program,
        args,
        env,
        cpus: plan.hop_cpus.as_deref(),
        callgrind_out: None,
        log_dir: &plan.work_dir,
    }
    .start(START_TIMEOUT)
}

/// A few requests on one connection, closed again: what the first request sets up once (the
/// backend connection, lazily built state) is not counted as the clients'.
pub(crate) async fn warm(target: &Target) -> io::Result<()> {
    let work = Workload::new(Cell::Call { size: 256 }, Hop::Gateway, None);
    let warmed = load::run_count(target, &work, 5).await?;
    if warmed.failures > 0 {
        return Err(io::Error::other(format!(
            "warm-up failed: {:?}",
            warmed.failure_samples
        )));
    }
    Ok(())
}

/// Waits until the gateway holds `want` descriptors, or they stop growing for two seconds; the
/// last snapshot.
pub(crate) fn settle(pid: u32, want: usize) -> io::Result<Snapshot> {
    let mut last = snapshot(pid)?;
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = snapshot(pid)?;
        if now.fds != last.fds {
            since = Instant::now();
        }
        last = now;
        if last.fds >= want || since.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    // Let the last ones finish their first read.
    std::thread::sleep(Duration::from_millis(500));
    snapshot(pid)
}

/// A fresh gateway at rest after its warm-up: the process, its target and its snapshot.
async fn fresh_gateway(
    plan: &Plan,
    backend: &str,
    keys: &str,
    name: &str,
    max_connections: usize,
) -> io::Result<(Proc, Target, Snapshot)> {
    let gateway = start_gateway(plan, backend, keys, name, max_connections)?;
    let target = Target::from_url(&gateway.url).ok_or_else(|| io::Error::other("gateway URL"))?;
    warm(&target).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rest = snapshot(gateway.pid())?;
    Ok((gateway, target, rest))
}

/// Runs the three phases.
pub async fn run(plan: &Plan) -> io::Result<Outcome> {
    let keys = gateway_keys(plan)?;
    let backend = Spawn {
        name: "mock-backend",
        program: &binary(plan, "mock-backend")?,
        args: vec!["--listen".into(), "127.0.0.1:0".into()],
        env: Vec::new(),
        cpus: plan.hop_cpus.as_deref(),
        callgrind_out: None,
        log_dir: &plan.work_dir,
    }
    .start(START_TIMEOUT)?;
    let mut outcome = Outcome::default();
    let max_connections = plan.connections + 64;

    if !plan.skip_connect_only {
        let (gateway, target, before) =
            fresh_gateway(plan, &backend.url, &keys, "gateway-connect-only", max_connections).await?;
        outcome.fd_limit = fd_limit(gateway.pid())?;
        outcome.own_fds = before.fds;
        let mut loaders = Loaders::start(plan, &gateway.url, plan.connections, &[])?;
        let opened = loaders.all(&Command::Open)?;
        let after = settle(gateway.pid(), before.fds + plan.connections)?;
        let idle = Idle {
            asked: plan.connections,
            accepted: after.fds.saturating_sub(before.fds),
            not_opened: opened.not_opened,
            before,
            after,
            answers: Reply::default(),
        };
        eprintln!(
            "connected only: {} of {} taken, {} not opened; RSS {} → {} KiB, {:.2} KiB per connection",
            idle.accepted,
            idle.asked,
            idle.not_opened,
            idle.before.rss_kib,
            idle.after.rss_kib,
            idle.rss_per_connection()
        );
        outcome.connect_only = Some(idle);
        loaders.all(&Command::Close)?;
        drop(loaders);
        drop(gateway);
        let _ = target;
    }

    let (gateway, target, before) =
        fresh_gateway(plan, &backend.url, &keys, "gateway", max_connections).await?;
    let pid = gateway.pid();
    outcome.fd_limit = fd_limit(pid)?;
    outcome.own_fds = before.fds;
    // Every connection is a descriptor; the backend pool grows with the requests in flight.
    let reserve = plan.max_in_flight + FD_MARGIN;
    outcome.sized = plan
        .connections
        .min(outcome.fd_limit.saturating_sub(before.fds + reserve));
    if outcome.sized < plan.connections {
        eprintln!(
            "{} connections asked for; the gateway's descriptor limit is {} and it holds {} of its own, \
             {reserve} kept for backend connections: {} connections",
            plan.connections, outcome.fd_limit, before.fds, outcome.sized
        );
    }
    let mut loaders = Loaders::start(plan, &gateway.url, outcome.sized, &[])?;
    let opened = loaders.all(&Command::Open)?;
    // At the closed loop's rate: a gateway's clients do not all call in the same second, and
    // the gateway holds hyper's buffers only for connections that called in the last second.
    let answers = loaders.all(&Command::One {
        per_second: plan.rate / loaders.0.len() as f64,
    })?;
    let after = settle(pid, before.fds + outcome.sized)?;
    // The gateway parks an HTTP/1.1 connection idle for a second (drops hyper's buffers): what
    // a connection holds then, as most of a gateway's connections are between calls.
    std::thread::sleep(IDLE_WAIT);
    outcome.one_request_idle = snapshot(pid)?;
    outcome.one_request = Idle {
        asked: outcome.sized,
        // Answered and still open (the descriptors may include a backend connection or two).
        accepted: answers.open,
        not_opened: opened.not_opened,
        before,
        after,
        answers,
    };
    let idle = &outcome.one_request;
    eprintln!(
        "one request each: {} connections, {} correct answers, {} failures; RSS {} → {} KiB, {:.2} KiB per connection; {} KiB {} s later",
        idle.accepted,
        idle.answers.correct,
        idle.answers.failures,
        idle.before.rss_kib,
        idle.after.rss_kib,
        idle.rss_per_connection(),
        outcome.one_request_idle.rss_kib,
        IDLE_WAIT.as_secs()
    );

    // Phase 3 on the same gateway, sampled every 200 ms.
    let think_ms = outcome.sized as f64 / plan.rate.max(1.0) * 1000.0;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = Snapshot::default();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(now) = snapshot(pid) {
                    peak.rss_kib = peak.rss_kib.max(now.rss_kib);
                    peak.anon_kib = peak.anon_kib.max(now.anon_kib);
                    peak.fds = peak.fds.max(now.fds);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            peak
        })
    };
    let cpu_before = gateway.cpu()?;
    let faults_before = minor_faults(pid)?;
    let reply = loaders.all(&Command::Load {
        secs: plan.load_secs.as_secs_f64(),
        think_ms,
    })?;
    let cpu = gateway.cpu()?.since(cpu_before);
    let faults = minor_faults(pid)?.saturating_sub(faults_before);
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().map_err(|_| io::Error::other("sampler panicked"))?;
    let mut reply = reply;
    reply.latencies_us.sort_unstable();
    outcome.loaded = Loaded {
        connections: outcome.one_request.accepted,
        think_ms,
        rate: reply.completed as f64 / plan.load_secs.as_secs_f64(),
        cpu_us_per_request: cpu.on_cpu_ns as f64 / 1000.0 / reply.correct.max(1) as f64,
        system_share: cpu.system_share(),
        faults_per_request: faults as f64 / reply.correct.max(1) as f64,
        reply,
        peak,
        end: snapshot(pid)?,
    };
    loaders.all(&Command::Close)?;
    let _ = target;
    Ok(outcome)
}

/// A fresh keyring entry from the gateway binary itself.
pub(crate) fn gateway_keys(plan: &Plan) -> io::Result<String> {
    let output = std::process::Command::new(binary(plan, "mrtr-gateway")?)
        .args(["--generate-key", "bench"])
        .output()?;
    let keys = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() && !keys.is_empty() {
        Ok(keys)
    } else {
        Err(io::Error::other("mrtr-gateway --generate-key failed"))
    }
}

/// The report: markdown tables.
pub fn report(plan: &Plan, outcome: &Outcome) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\ngateway: descriptor limit {}, {} descriptors of its own at rest, --max-in-flight {}; {} connections asked for, {} used in phases 2 and 3\n",
        outcome.fd_limit, outcome.own_fds, plan.max_in_flight, plan.connections, outcome.sized
    );
    let _ = writeln!(
        out,
        "| phase | connections taken | not opened | RSS before → after (KiB) | RSS per connection (KiB) | anonymous RSS per connection (KiB) | descriptors before → after |"
    );
    let _ = writeln!(out, "|---|---:|---:|---|---:|---:|---|");
    let row = |out: &mut String, name: &str, idle: &Idle| {
        let _ = writeln!(
            out,
            "| {name} | {} of {} | {} | {} → {} | {:.2} | {:.2} | {} → {} |",
            idle.accepted,
            idle.asked,
            idle.not_opened,
            idle.before.rss_kib,
            idle.after.rss_kib,
            idle.rss_per_connection(),
            idle.anon_per_connection(),
            idle.before.fds,
            idle.after.fds
        );
    };
    if let Some(idle) = &outcome.connect_only {
        row(&mut out, "connected, nothing sent", idle);
    }
    row(
        &mut out,
        &format!(
            "one `tools/call` each ({:.0} req/s), just after the last",
            plan.rate
        ),
        &outcome.one_request,
    );
    let later = Idle {
        after: outcome.one_request_idle,
        ..outcome.one_request.clone()
    };
    row(
        &mut out,
        &format!("one `tools/call` each, then {} s idle", IDLE_WAIT.as_secs()),
        &later,
    );
    let loaded = &outcome.loaded;
    let _ = writeln!(
        out,
        "\n| closed loop | connections | think (mean) | seconds | requests | req/s | p50 ms | p99 ms | max ms | errors | broken connections | gateway CPU µs/req (kernel) | page faults/req | peak RSS KiB (per connection) | peak descriptors (backend) |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|"
    );
    let _ = writeln!(
        out,
        "| `tools/call` 256 B | {} | {:.0} ms | {:.0} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {:.1} ({:.0} %) | {:.2} | {} ({:.2}) | {} ({}) |",
        loaded.connections,
        loaded.think_ms,
        plan.load_secs.as_secs_f64(),
        loaded.reply.correct + loaded.reply.failures,
        loaded.rate,
        loaded.latency_ms(0.5),
        loaded.latency_ms(0.99),
        loaded.latency_ms(1.0),
        loaded.reply.failures,
        loaded.reply.broken,
        loaded.cpu_us_per_request,
        loaded.system_share * 100.0,
        loaded.faults_per_request,
        loaded.peak.rss_kib,
        per(
            loaded.peak.rss_kib,
            outcome.one_request.before.rss_kib,
            loaded.connections
        ),
        loaded.peak.fds,
        loaded
            .peak
            .fds
            .saturating_sub(loaded.connections + outcome.own_fds),
    );
    let failures = outcome
        .one_request
        .answers
        .samples
        .iter()
        .chain(&loaded.reply.samples)
        .take(3);
    for sample in failures {
        let _ = writeln!(out, "  failure: {sample}");
    }
    out
}

/// The path of a loader's target: the gateway's URL.
pub fn target_of(url: &str) -> Option<Target> {
    Target::from_url(url)
}

/// Parses `KEY=VALUE`.
pub fn key_value(text: &str) -> Option<(String, String)> {
    let (key, value) = text.split_once('=')?;
    (!key.is_empty()).then(|| (key.to_owned(), value.to_owned()))
}

/// The directory a run writes its logs to.
pub fn work_dir() -> PathBuf {
    std::env::temp_dir().join(format!("scale-bench-{}", std::process::id()))
}

/// Whether `dir` holds the binaries a run needs.
pub fn has_binaries(dir: &Path) -> bool {
    dir.join("mrtr-gateway").is_file() && dir.join("mock-backend").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_round_trip_as_json_lines() {
        for command in [
            Command::Open,
            Command::One { per_second: 100.0 },
            Command::Load {
                secs: 2.0,
                think_ms: 500.0,
            },
            Command::Close,
        ] {
            let line = serde_json::to_string(&command).unwrap();
            assert!(!line.contains('\n'));
            let back: Command = serde_json::from_str(&line).unwrap();
            assert_eq!(format!("{back:?}"), format!("{command:?}"));
        }
        let mut total = Reply::default();
        for n in 0..5 {
            let mut reply = Reply {
                open: 10,
                correct: 3,
                latencies_us: vec![n],
                ..Reply::default()
            };
            reply.fail(format!("failure {n}"));
            total.merge(serde_json::from_str(&serde_json::to_string(&reply).unwrap()).unwrap());
        }
        assert_eq!((total.open, total.correct, total.failures), (50, 15, 5));
        assert_eq!(total.samples.len(), 3);
        assert_eq!(total.latencies_us.len(), 5);
    }

    #[test]
    fn ids_of_loaders_and_connections_do_not_meet() {
        assert!(first_id(0) + ((100_000u64 + 1) << 20) < first_id(1));
        let mut random = Xorshift::new(7);
        for _ in 0..1000 {
            let x = random.next_unit();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
