//! The run: starts the backends and the hops, drives every cell through every hop in interleaved
//! rounds (or counts instructions under callgrind), and collects what the report prints.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::load::{self, Target};
use crate::peer::{Peer, Values};
use crate::pipe::{self, Pipe, PipeSpawn};
use crate::procs::{self, Cpu, Launch, Proc, Spawn};
use crate::workload::{BACKEND_NAMES, Cell, Hop, Workload};

/// What to run; see `gateway-bench --help`.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Directory holding `mock-backend`, `bare-proxy` and `mrtr-gateway`.
    pub bin_dir: PathBuf,
    /// Directory for the processes' logs and callgrind dumps.
    pub work_dir: PathBuf,
    /// Cells to run.
    pub cells: Vec<Cell>,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Unmeasured start of every segment.
    pub warmup: Duration,
    /// Measured window of every segment.
    pub window: Duration,
    /// Concurrent connections of the load.
    pub connections: usize,
    /// `taskset -c` list for the backends and hops (`None`: not pinned).
    pub hop_cpus: Option<String>,
    /// Instruction counts instead of timings: requests per cell under callgrind.
    pub callgrind_requests: Option<u64>,
    /// Extra arguments for every `mrtr-gateway` hop (`--admin-listen 127.0.0.1:0` to measure
    /// with the metrics recorder installed).
    pub gateway_args: Vec<String>,
    /// Other gateways measured beside ours, each in front of the first backend (timings only).
    pub peers: Vec<Peer>,
    /// CPU time the mock backend spends on each message when it is a stdio process (through
    /// the gateway and over its pipes alike), microseconds.
    pub stdio_work_us: u64,
    /// `taskset -c` list for those stdio processes, when not the hops' (`hop_cpus`): a process
    /// of its own core shows whether the gateway keeps it busy, not what sharing a core costs.
    pub stdio_cpus: Option<String>,
}

/// The processes of a run.
struct Fleet {
    backends: Backends,
    hops: HashMap<Hop, Proc>,
    /// The stdio processes the driver speaks to itself ([`Hop::Pipe`]).
    pipes: HashMap<Hop, Arc<Pipe>>,
}

/// The mock backends a run's hops need (see [`Backends::start`]).
struct Backends {
    /// 2026-07-28 backends: as many as the hop with the most of them fronts (at least one).
    modern: Vec<Proc>,
    /// The `initialize`-era backend of [`Hop::LegacyHttp`], if a cell needs it.
    legacy: Option<Proc>,
}

impl Backends {
    fn all(&self) -> impl Iterator<Item = &Proc> {
        self.modern.iter().chain(&self.legacy)
    }
}

impl Fleet {
    fn target(&self, hop: Hop) -> Target {
        let url = match hop {
            Hop::Direct => &self.backends.modern[0].url,
            hop => &self.hops[&hop].url,
        };
        Target::from_url(url).expect("the processes print http://ADDR/PATH")
    }
}

/// One measured segment: one cell through one hop in one round.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Round number.
    pub round: usize,
    /// Requests per second.
    pub rate: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 95th percentile latency, µs.
    pub p95_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Exchanges answered during the whole segment, warm-up included, correctly or not.
    pub answered: u64,
    /// Of those, wrong answers and failed exchanges.
    pub failed: u64,
    /// CPU of the hop process per request, µs (`None` for direct).
    pub hop_cpu_us: Option<f64>,
    /// Kernel share of the hop's CPU time.
    pub hop_system_share: Option<f64>,
    /// Context switches of the hop's threads per request.
    pub hop_switches: Option<f64>,
    /// Read and write system calls of the hop per request.
    pub hop_io_calls: Option<f64>,
    /// CPU of the backend process(es) per request, µs (a stdio backend's: the gateway's child,
    /// or the process of [`Hop::Pipe`]).
    pub backend_cpu_us: f64,
    /// Cores the hop kept busy in the window: its CPU time over the window's length.
    pub hop_cores: Option<f64>,
    /// Cores the backend process(es) kept busy in the window.
    pub backend_cores: f64,
}

/// Everything a timing run measured.
#[derive(Debug, Default)]
pub struct Timings {
    /// The peer gateways measured, in the order given.
    pub peers: Vec<Hop>,
    /// Samples by cell and hop, in round order.
    pub samples: HashMap<(Cell, Hop), Vec<Sample>>,
    /// Peak RSS of each process at the end, KiB.
    pub peak_rss_kib: Vec<(String, u64)>,
    /// Wrong answers or failed exchanges (each a reason), all segments.
    pub failures: Vec<String>,
    /// Failed exchanges in total.
    pub failure_count: u64,
    /// Concurrent clients (keep-alive connections) of every segment.
    pub clients: usize,
}

/// Instructions per request of one cell through one hop.
#[derive(Clone, Debug)]
pub struct Count {
    /// The cell.
    pub cell: Cell,
    /// The hop.
    pub hop: Hop,
    /// Instructions (callgrind `Ir`) per request.
    pub per_request: f64,
    /// The dump file, for `callgrind_annotate`.
    pub dump: PathBuf,
}

/// The hops a cell is measured through: ours, then the peers (in front of one modern backend,
/// so only for the cells of that backend).
pub fn hops_for(cell: Cell, peers: &[Hop]) -> Vec<Hop> {
    let (ours, peers): (&[Hop], _) = match cell {
        Cell::List => (&[Hop::Direct, Hop::Bare, Hop::Gateway, Hop::Gateway2], peers),
        Cell::Call { .. } | Cell::Round1 { .. } | Cell::Round2 { .. } | Cell::Sse => {
            (&[Hop::Direct, Hop::Bare, Hop::Gateway], peers)
        }
        // The backend's own sessions and processes are not reached directly: through the
        // gateway only, read against the reference cell's gateway figures.
        Cell::LegacyHttp { .. } => (&[Hop::LegacyHttp], &[]),
        Cell::LegacyClient => (&[Hop::Gateway], &[]),
        // Beside the same process driven over its pipes (timings only: it is the driver's).
        Cell::Stdio { legacy: false } => (&[Hop::Pipe { legacy: false }, Hop::Stdio], &[]),
        Cell::Stdio { legacy: true } => (&[Hop::Pipe { legacy: true }, Hop::LegacyStdio], &[]),
        Cell::Merge { backends: 3 } => (&[Hop::Merge(3)], &[]),
        Cell::Merge { .. } => (&[Hop::Merge(10)], &[]),
    };
    ours.iter().chain(peers).copied().collect()
}

/// The processes of ours that `cells` go through, in a fixed order (not [`Hop::Direct`], pipes
/// nor peers).
fn hops_of(cells: &[Cell]) -> Vec<Hop> {
    let mut hops: Vec<Hop> = Vec::new();
    for &cell in cells {
        for hop in hops_for(cell, &[]) {
            if !matches!(hop, Hop::Direct | Hop::Pipe { .. }) && !hops.contains(&hop) {
                hops.push(hop);
            }
        }
    }
    hops
}

/// The stdio processes `cells` are driven over directly ([`Hop::Pipe`]).
fn pipes_of(cells: &[Cell]) -> Vec<Hop> {
    let mut pipes: Vec<Hop> = Vec::new();
    for &cell in cells {
        for hop in hops_for(cell, &[]) {
            if matches!(hop, Hop::Pipe { .. }) && !pipes.contains(&hop) {
                pipes.push(hop);
            }
        }
    }
    pipes
}

/// Starts the mock backend as the stdio process of [`Hop::Pipe`], pinned like the hops.
async fn start_pipe(plan: &Plan, hop: Hop) -> io::Result<Pipe> {
    let legacy = matches!(hop, Hop::Pipe { legacy: true });
    let mut args = vec!["--work-us".to_owned(), plan.stdio_work_us.to_string()];
    if legacy {
        args.push("--legacy".to_owned());
    }
    PipeSpawn {
        name: &hop.file_name(),
        program: &binary(plan, "mock-backend")?,
        args,
        cpus: plan.stdio_cpus.as_deref().or(plan.hop_cpus.as_deref()),
        log_dir: &plan.work_dir,
        legacy,
    }
    .start()
    .await
}

/// How many modern mock backends `hop` fronts.
fn backends_of(hop: Hop) -> usize {
    match hop {
        Hop::Gateway2 => 2,
        Hop::Merge(n) => n.min(BACKEND_NAMES.len()),
        _ => 1,
    }
}

const START_TIMEOUT: Duration = Duration::from_secs(60);

fn binary(plan: &Plan, name: &str) -> io::Result<PathBuf> {
    let path = plan.bin_dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} not found: build it first (scripts/bench-gateway.sh does)",
                path.display()
            ),
        ))
    }
}

/// A fresh keyring entry from the gateway binary itself.
fn gateway_keys(plan: &Plan) -> io::Result<String> {
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

impl Backends {
    /// Starts the mock backends `hops` need: as many modern ones as the hop with the most (two at
    /// least, as before the cells of other backends), and the legacy one if [`Hop::LegacyHttp`]
    /// is among them.
    fn start(plan: &Plan, hops: &[Hop]) -> io::Result<Self> {
        let program = binary(plan, "mock-backend")?;
        let spawn = |name: &str, legacy: bool| {
            let mut args = vec!["--listen".to_owned(), "127.0.0.1:0".to_owned()];
            if legacy {
                args.push("--legacy".to_owned());
            }
            Spawn {
                name: &format!("backend-{name}"),
                program: &program,
                args,
                env: Vec::new(),
                cpus: plan.hop_cpus.as_deref(),
                callgrind_out: None,
                log_dir: &plan.work_dir,
            }
            .start(START_TIMEOUT)
        };
        let count = hops.iter().copied().map(backends_of).fold(2, usize::max);
        let modern = BACKEND_NAMES[..count]
            .iter()
            .map(|name| spawn(name, false))
            .collect::<io::Result<_>>()?;
        let legacy = match hops.contains(&Hop::LegacyHttp) {
            true => Some(spawn("legacy", true)?),
            false => None,
        };
        Ok(Self { modern, legacy })
    }
}

fn start_hop(plan: &Plan, hop: Hop, backends: &Backends, keys: &str, callgrind: bool) -> io::Result<Proc> {
    if matches!(hop, Hop::Direct | Hop::Peer(_) | Hop::Pipe { .. }) {
        unreachable!("no process of ours");
    }
    let name = hop.file_name();
    let name = name.as_str();
    let (program, args, env) = match hop {
        Hop::Bare => (
            binary(plan, "bare-proxy")?,
            vec![
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--backend".into(),
                backends.modern[0].url.clone(),
            ],
            Vec::new(),
        ),
        _ => {
            let mut args = vec!["--listen".to_owned(), "127.0.0.1:0".to_owned()];
            let mock = || binary(plan, "mock-backend").map(|p| p.display().to_string());
            let backend = match hop {
                Hop::LegacyHttp => {
                    let legacy = backends.legacy.as_ref().expect("started for this hop");
                    vec![format!("legacy={}", legacy.url)]
                }
                // The gateway starts the process; under callgrind it is not counted (valgrind
                // does not follow children unless told to).
                Hop::Stdio | Hop::LegacyStdio => {
                    let legacy = if hop == Hop::LegacyStdio { " --legacy" } else { "" };
                    // The process inherits the gateway's CPUs unless told its own.
                    let pin = plan
                        .stdio_cpus
                        .as_deref()
                        .map_or(String::new(), |cpus| format!("taskset -c {cpus} "));
                    vec![format!(
                        "stdio=stdio:{pin}{} --stdio{legacy} --work-us {}",
                        mock()?,
                        plan.stdio_work_us
                    )]
                }
                _ => backends
                    .modern
                    .iter()
                    .zip(BACKEND_NAMES)
                    .take(backends_of(hop))
                    .map(|(backend, name)| format!("{name}={}", backend.url))
                    .collect(),
            };
            for backend in backend {
                args.extend(["--backend".to_owned(), backend]);
            }
            args.extend(plan.gateway_args.iter().cloned());
            (
                binary(plan, "mrtr-gateway")?,
                args,
                vec![("MRTR_KEYS", keys.to_owned())],
            )
        }
    };
    Spawn {
        name,
        program: &program,
        args,
        env,
        cpus: plan.hop_cpus.as_deref(),
        callgrind_out: callgrind.then(|| plan.work_dir.join(format!("{name}.callgrind"))),
        log_dir: &plan.work_dir,
    }
    .start(if callgrind {
        START_TIMEOUT * 2
    } else {
        START_TIMEOUT
    })
}

/// Starts a peer in front of `backend` on a free port; ready when the port accepts connections.
async fn start_peer(plan: &Plan, peer: &Peer, backend: &Proc) -> io::Result<Proc> {
    let values = Values {
        port: procs::free_port()?,
        backend: backend.url.clone(),
        dir: plan.work_dir.display().to_string(),
    };
    let command = peer.command(&values).map_err(io::Error::other)?;
    eprintln!("starting peer {}: {command}", peer.name);
    Launch {
        name: peer.name,
        command: &command,
        port: values.port,
        path: &peer.path,
        cpus: plan.hop_cpus.as_deref(),
        log_dir: &plan.work_dir,
    }
    .start(START_TIMEOUT)
    .await
}

/// Round 2 replays one retry: its state (an envelope through the gateway) comes from one round 1.
/// A legacy client opens its session first. A hop in front of a legacy backend or a stdio
/// process is waited for until it answers correctly (its health probe finds the backend's era).
async fn workload(cell: Cell, hop: Hop, target: &Target) -> io::Result<Workload> {
    if matches!(hop, Hop::LegacyHttp | Hop::Stdio | Hop::LegacyStdio) {
        ready(cell, hop, target).await?;
    }
    if cell == Cell::LegacyClient {
        return legacy_session(cell, hop, target).await;
    }
    let Cell::Round2 { state } = cell else {
        return Ok(Workload::new(cell, hop, None));
    };
    let round1 = Workload::new(Cell::Round1 { state }, hop, None);
    let mut connection = load::Connection::open(target).await?;
    let reply = connection
        .send(&round1, Workload::retry_state_request(state, 1))
        .await
        .map_err(io::Error::other)?;
    let retry_state = Workload::retry_state_from(reply.content_type(), &reply.body).ok_or_else(|| {
        io::Error::other(format!(
            "no requestState in round 1 through {} (HTTP {}): {}",
            hop.name(),
            reply.status,
            crate::messages::excerpt(&reply.body)
        ))
    })?;
    Ok(Workload::new(cell, hop, Some(retry_state)))
}

/// Waits (at most 30 s) until a request of `cell` through `hop` is answered correctly.
async fn ready(cell: Cell, hop: Hop, target: &Target) -> io::Result<()> {
    let work = Workload::new(cell, hop, None);
    let mut last = String::new();
    for _ in 0..300 {
        let mut connection = load::Connection::open(target).await?;
        match connection.exchange(&work).await.verdict {
            Ok(()) => return Ok(()),
            Err(reason) => last = reason,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(io::Error::other(format!(
        "{} via {}: no correct answer within 30 s: {last}",
        cell.name(),
        hop.name()
    )))
}

/// An `initialize`-era client's session at the gateway's front: `initialize`, then
/// `notifications/initialized`, the requests of `cell` in the session the front gave.
async fn legacy_session(cell: Cell, hop: Hop, target: &Target) -> io::Result<Workload> {
    let opening = Workload::new(cell, hop, None);
    let mut connection = load::Connection::open(target).await?;
    let reply = connection
        .send(&opening, crate::mcp::initialize_request(1))
        .await
        .map_err(io::Error::other)?;
    let session = reply
        .session
        .filter(|_| reply.status.is_success())
        .ok_or_else(|| {
            io::Error::other(format!(
                "initialize through {} opened no session (HTTP {}): {}",
                hop.name(),
                reply.status,
                crate::messages::excerpt(&reply.body)
            ))
        })?;
    let work = opening.in_session(session);
    let reply = connection
        .send(&work, crate::mcp::initialized_notification())
        .await
        .map_err(io::Error::other)?;
    if reply.status != http::StatusCode::ACCEPTED {
        return Err(io::Error::other(format!(
            "notifications/initialized through {}: HTTP {} instead of 202",
            hop.name(),
            reply.status
        )));
    }
    Ok(work)
}

/// Runs the timing rounds.
pub async fn run_timings(plan: &Plan) -> io::Result<Timings> {
    let keys = gateway_keys(plan)?;
    let ours = hops_of(&plan.cells);
    let backends = Backends::start(plan, &ours)?;
    let mut hops = HashMap::new();
    for hop in ours {
        hops.insert(hop, start_hop(plan, hop, &backends, &keys, false)?);
    }
    // Whatever has started is killed (dropped) if a later process fails to start.
    for peer in &plan.peers {
        hops.insert(peer.hop(), start_peer(plan, peer, &backends.modern[0]).await?);
    }
    let mut pipes = HashMap::new();
    for hop in pipes_of(&plan.cells) {
        pipes.insert(hop, Arc::new(start_pipe(plan, hop).await?));
    }
    let fleet = Fleet {
        backends,
        hops,
        pipes,
    };
    let mut timings = Timings {
        peers: plan.peers.iter().map(Peer::hop).collect(),
        clients: plan.connections,
        ..Timings::default()
    };
    for round in 0..plan.rounds {
        for (index, &cell) in plan.cells.iter().enumerate() {
            // Rotate the order of hops from segment to segment so drift hits each alike.
            let mut order = hops_for(cell, &timings.peers);
            let turn = (round + index) % order.len();
            order.rotate_left(turn);
            for hop in order {
                let sample = run_one(plan, &fleet, cell, hop, round, &mut timings).await?;
                eprintln!(
                    "round {} {:>8} {:<20} {:>8.0} req/s  p50 {:>6.0} µs  p99 {:>6.0} µs  hop CPU {}",
                    round + 1,
                    cell.name(),
                    hop.name(),
                    sample.rate,
                    sample.p50_us,
                    sample.p99_us,
                    sample
                        .hop_cpu_us
                        .map_or("-".to_owned(), |c| format!("{c:.1} µs/req")),
                );
                timings.samples.entry((cell, hop)).or_default().push(sample);
            }
        }
    }
    for proc in fleet.backends.all().chain(fleet.hops.values()) {
        timings
            .peak_rss_kib
            .push((proc.name.clone(), proc.peak_rss_kib()?));
    }
    for pipe in fleet.pipes.values() {
        timings
            .peak_rss_kib
            .push((pipe.name.clone(), pipe.peak_rss_kib()?));
    }
    timings.peak_rss_kib.sort();
    Ok(timings)
}

async fn run_one(
    plan: &Plan,
    fleet: &Fleet,
    cell: Cell,
    hop: Hop,
    round: usize,
    timings: &mut Timings,
) -> io::Result<Sample> {
    let hop_proc = fleet.hops.get(&hop);
    let backends = &fleet.backends;
    let pipe = fleet.pipes.get(&hop);
    let read = || -> (Option<Cpu>, Cpu) {
        // A pipe's process is the backend, and there is no hop.
        let backend = match (pipe, hop_proc) {
            (Some(pipe), _) => pipe.cpu().unwrap_or_default(),
            // A stdio backend is the gateway's own child.
            (None, Some(proc)) if matches!(hop, Hop::Stdio | Hop::LegacyStdio) => procs::children(proc.pid())
                .into_iter()
                .filter_map(|pid| procs::cpu(pid).ok())
                .fold(Cpu::default(), Cpu::plus),
            (None, _) => backends
                .all()
                .filter_map(|b| b.cpu().ok())
                .fold(Cpu::default(), Cpu::plus),
        };
        (hop_proc.and_then(|p| p.cpu().ok()), backend)
    };
    let mut before = None;
    let mut after = None;
    let segment = match pipe {
        Some(pipe) => {
            let work = Arc::new(Workload::new(cell, hop, None));
            pipe::run_segment(
                pipe.clone(),
                plan.connections,
                work,
                plan.warmup,
                plan.window,
                || before = Some(read()),
                || after = Some(read()),
            )
            .await?
        }
        None => {
            let target = fleet.target(hop);
            let work = Arc::new(workload(cell, hop, &target).await?);
            load::run_segment(
                &target,
                plan.connections,
                work,
                plan.warmup,
                plan.window,
                || before = Some(read()),
                || after = Some(read()),
            )
            .await?
        }
    };
    timings.failure_count += segment.failures;
    for reason in segment.failure_samples.iter().take(3) {
        timings
            .failures
            .push(format!("{} via {}: {reason}", cell.name(), hop.name()));
    }
    // A slow build (CI's debug smoke run) may finish no request inside a short window; it must
    // still have answered, and correctly.
    if segment.correct == 0 {
        timings.failure_count += 1;
        timings
            .failures
            .push(format!("{} via {}: no correct answer", cell.name(), hop.name()));
    }
    let ((hop_before, backend_before), (hop_after, backend_after)) =
        (before.unwrap_or_default(), after.unwrap_or_default());
    let per_request = |ns: u64| ns as f64 / 1000.0 / segment.completed.max(1) as f64;
    let hop_used = hop_after.zip(hop_before).map(|(a, b)| a.since(b));
    let backend_used = backend_after.since(backend_before);
    let cores = |ns: u64| ns as f64 / segment.window.as_nanos().max(1) as f64;
    Ok(Sample {
        round,
        rate: segment.rate(),
        p50_us: segment.latency_us(0.5),
        p95_us: segment.latency_us(0.95),
        p99_us: segment.latency_us(0.99),
        answered: segment.correct + segment.failures,
        failed: segment.failures,
        hop_cpu_us: hop_used.map(|c| per_request(c.on_cpu_ns)),
        hop_system_share: hop_used.map(Cpu::system_share),
        hop_switches: hop_used.map(|c| c.context_switches as f64 / segment.completed.max(1) as f64),
        hop_io_calls: hop_used.map(|c| c.io_calls as f64 / segment.completed.max(1) as f64),
        backend_cpu_us: per_request(backend_used.on_cpu_ns),
        hop_cores: hop_used.map(|c| cores(c.on_cpu_ns)),
        backend_cores: cores(backend_used.on_cpu_ns),
    })
}

/// Counts instructions per request of the bare proxy and the gateways under callgrind (the
/// gateway with two backends is not counted): after a warm-up, counters are zeroed, `requests`
/// requests are sent one after another, and the counters dumped.
pub async fn run_counts(plan: &Plan) -> io::Result<Vec<Count>> {
    const WARMUP_REQUESTS: u64 = 50;
    let requests = plan.callgrind_requests.unwrap_or(500).max(1);
    let keys = gateway_keys(plan)?;
    let hops: Vec<Hop> = hops_of(&plan.cells)
        .into_iter()
        .filter(|&hop| hop != Hop::Gateway2)
        .collect();
    let backends = Backends::start(plan, &hops)?;
    let mut counts = Vec::new();
    for hop in hops {
        let proc = start_hop(plan, hop, &backends, &keys, true)?;
        let target = Target::from_url(&proc.url).expect("the hop prints http://ADDR/PATH");
        let base = plan.work_dir.join(format!("{}.callgrind", proc.name));
        let cells = plan
            .cells
            .iter()
            .filter(|&&cell| hops_for(cell, &[]).contains(&hop));
        for (dumps, &cell) in (1..).zip(cells) {
            let work = workload(cell, hop, &target).await?;
            let warm = load::run_count(&target, &work, WARMUP_REQUESTS).await?;
            procs::callgrind_control(proc.pid(), "--zero")?;
            let measured = load::run_count(&target, &work, requests).await?;
            procs::callgrind_control(proc.pid(), "--dump")?;
            if warm.failures + measured.failures > 0 {
                return Err(io::Error::other(format!(
                    "{} via {}: wrong answers under callgrind: {:?}",
                    cell.name(),
                    hop.name(),
                    warm.failure_samples
                        .iter()
                        .chain(&measured.failure_samples)
                        .collect::<Vec<_>>()
                )));
            }
            let dump = PathBuf::from(format!("{}.{dumps}", base.display()));
            let named = plan
                .work_dir
                .join(format!("{}-{}.callgrind", proc.name, cell.name()));
            let total = read_dump(&dump, &named).await?;
            let count = Count {
                cell,
                hop,
                per_request: total as f64 / requests as f64,
                dump: named,
            };
            eprintln!(
                "callgrind {:>8} {:<12} {:>10.0} instructions/request",
                cell.name(),
                hop.name(),
                count.per_request
            );
            counts.push(count);
        }
    }
    Ok(counts)
}

/// Waits for callgrind's dump file, moves it to `named` and reads its total.
async fn read_dump(dump: &Path, named: &Path) -> io::Result<u64> {
    for _ in 0..100 {
        if let Ok(total) = procs::callgrind_total(dump) {
            std::fs::rename(dump, named)?;
            return Ok(total);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    procs::callgrind_total(dump)
}
