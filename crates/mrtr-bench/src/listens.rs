//! Many `subscriptions/listen` streams on one gateway, and a notification reaching all of them
//! (issue 40): `scale-bench --listens N`.
//!
//! The question is what an open listen costs a gateway replica (memory, descriptors) and how
//! late a backend's notification reaches every client when thousands are open. So:
//!
//! 1. one mock backend ([`crate::backend`], which serves `subscriptions/listen`) and one
//!    gateway in front of it, as `scale-bench` starts them (`--backend-cpus` may pin the backend
//!    apart); the gateway's RSS (`VmRSS`) and descriptors at rest, after a few `tools/call`s;
//! 2. N listens (`toolsListChanged`) opened through the gateway by loader processes
//!    ([`scale`]'s, this binary again with `--loader-listens`), multiplexed over HTTP/2
//!    cleartext connections of at most `--streams-per-connection` streams each: with one backend
//!    the gateway passes each listen through on a backend HTTP/1.1 connection of its own, so the
//!    listens cost it one descriptor each and the clients' side a few connections, which keeps
//!    10,000 listens under a process's 20,000 descriptors. Every acknowledgement is checked
//!    (method, `subscriptionId` = the listen's id, the category accepted);
//! 3. the gateway's RSS and descriptors again: the difference over the listens acknowledged is
//!    the cost of one listen (the backend's own share is measured alike);
//! 4. K broadcasts, spaced: a `tools/call` of [`crate::backend::BROADCAST`] sent straight to the
//!    backend, which writes one `notifications/tools/list_changed` on each of its listen streams,
//!    stamped with the call's and the write's wall-clock time. Every loader checks every
//!    notification (method, `subscriptionId`, a broadcast number not seen before on that
//!    stream) and reports when it arrived: the delivery latency from the broadcast call (the
//!    whole fan-out: the backend's writes, the gateway, the loaders), and from the backend's
//!    write on that stream (the gateway's hop and the client's read), and the CPU time the
//!    gateway and the backend spent meanwhile (they do nothing else). A listen that has not
//!    received a broadcast within `--broadcast-wait-secs` counts as missing it: an error.

use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::backend::BROADCAST;
use crate::load::Target;
use crate::mcp::PROTOCOL_VERSION;
use crate::procs::{self, Cpu, Proc, Spawn};
use crate::scale::{self, Loaders, Snapshot};

mod loader;

pub use loader::loader;

/// The most streams the gateway's HTTP/2 server lets one connection open at once (hyper's
/// default `SETTINGS_MAX_CONCURRENT_STREAMS`, which the gateway keeps).
pub const MAX_STREAMS: usize = 200;

/// Descriptors beyond one per listen and one per client connection kept free in the gateway:
/// its listener, runtime, logs, and the backend connections of the warm-up and health probe.
const FD_MARGIN: usize = 64;

/// What to run; see `scale-bench --help`.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The processes, CPUs, loaders and extra gateway arguments, as for `scale-bench`'s phases.
    pub base: scale::Plan,
    /// Listens asked for.
    pub listens: usize,
    /// Most listens on one client connection (at most [`MAX_STREAMS`]).
    pub streams: usize,
    /// Broadcasts sent once every listen is open.
    pub broadcasts: usize,
    /// Pause before each broadcast.
    pub spacing: Duration,
    /// How long every listen has to receive a broadcast.
    pub wait: Duration,
    /// `taskset -c` list for the backend, which may differ from the gateway's, so that its
    /// fan-out does not take the gateway's CPU.
    pub backend_cpus: Option<String>,
}

/// A listens loader's instruction, one JSON line on its stdin.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Open the client connections and the listens, and wait for every acknowledgement.
    Open,
    /// Wait (at most `wait_ms`) until every open listen has received broadcast `seq`; report
    /// the latencies.
    Collect {
        /// The broadcast's number.
        seq: u64,
        /// Longest wait.
        wait_ms: u64,
    },
    /// Close every listen and connection.
    Close,
}

/// A listens loader's answer to a [`Command`], one JSON line on its stdout.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reply {
    /// Client connections open.
    pub connections: usize,
    /// Listens acknowledged so far.
    pub acknowledged: usize,
    /// Listens acknowledged whose stream is still open.
    pub open: usize,
    /// Listens that received the broadcast (`Collect`).
    pub received: usize,
    /// Failures so far: listens refused or broken, wrong messages.
    pub failures: u64,
    /// Up to three failure reasons.
    pub samples: Vec<String>,
    /// Per listen that received the broadcast: µs from the broadcast call to its arrival.
    pub delivery_us: Vec<u32>,
    /// The same listens: µs from the backend's write on that listen's stream to its arrival.
    pub hop_us: Vec<u32>,
}

impl Reply {
    fn merge(&mut self, other: Reply) {
        self.connections += other.connections;
        self.acknowledged += other.acknowledged;
        self.open += other.open;
        self.received += other.received;
        self.failures += other.failures;
        for sample in other.samples {
            if self.samples.len() < 3 {
                self.samples.push(sample);
            }
        }
        self.delivery_us.extend(other.delivery_us);
        self.hop_us.extend(other.hop_us);
    }

    fn merged(replies: Vec<Reply>) -> Reply {
        let mut total = Reply::default();
        for reply in replies {
            total.merge(reply);
        }
        total
    }
}

/// The 2026-07-28 headers every request of the benchmark carries, and its `_meta`.
fn post(
    uri: &Uri,
    host: &str,
    method: &str,
    name: Option<&str>,
    body: Value,
) -> Result<Request<Full<Bytes>>, String> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri.clone())
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// One broadcast's figures.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// The broadcast's number.
    pub seq: u64,
    /// Listen streams the backend queued it on.
    pub reached: usize,
    /// Listen streams the backend skipped, too far behind.
    pub lagging: usize,
    /// Listens open in the loaders when it was sent.
    pub open: usize,
    /// Listens that received it in time.
    pub received: usize,
    /// Their latencies from the broadcast call, µs, sorted.
    pub delivery_us: Vec<u32>,
    /// Their latencies from the backend's write on their stream, µs, sorted.
    pub hop_us: Vec<u32>,
    /// The gateway's CPU time from the broadcast call until every listen had it (it does
    /// nothing else meanwhile).
    pub gateway_cpu: Cpu,
    /// The backend's, alike.
    pub backend_cpu: Cpu,
}

impl Round {
    /// Open listens that did not receive it.
    pub fn missing(&self) -> usize {
        self.open.saturating_sub(self.received)
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The gateway's soft descriptor limit.
    pub fd_limit: usize,
    /// Listens opened: the ones asked for, or what fits under the limit.
    pub sized: usize,
    /// The loaders' replies once every listen was acknowledged.
    pub opened: Reply,
    /// How long opening took, seconds.
    pub open_secs: f64,
    /// The gateway at rest, after its warm-up.
    pub gateway_before: Snapshot,
    /// The gateway with every listen open.
    pub gateway_after: Snapshot,
    /// The gateway after the broadcasts.
    pub gateway_end: Snapshot,
    /// The gateway's peak RSS (`VmHWM`), KiB.
    pub gateway_peak_kib: u64,
    /// The backend before the listens.
    pub backend_before: Snapshot,
    /// The backend with every listen open.
    pub backend_after: Snapshot,
    /// The broadcasts.
    pub rounds: Vec<Round>,
    /// The loaders' last replies: every failure of the run.
    pub closed: Reply,
}

impl Outcome {
    /// Listens not acknowledged, failures, and broadcasts missed by an open listen.
    pub fn errors(&self) -> u64 {
        let missing: usize = self.rounds.iter().map(Round::missing).sum();
        (self.sized.saturating_sub(self.opened.acknowledged) + missing) as u64 + self.closed.failures
    }

    /// Gateway RSS per listen acknowledged, KiB.
    pub fn rss_per_listen(&self) -> f64 {
        per(
            self.gateway_after.rss_kib,
            self.gateway_before.rss_kib,
            self.opened.acknowledged,
        )
    }

    /// Every delivery latency of every broadcast, sorted.
    fn all(&self, hop: bool) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .rounds
            .iter()
            .flat_map(|r| if hop { &r.hop_us } else { &r.delivery_us })
            .copied()
            .collect();
        all.sort_unstable();
        all
    }
}

fn per(after: u64, before: u64, count: usize) -> f64 {
    (after as f64 - before as f64) / count.max(1) as f64
}

/// The `q` quantile of `sorted` µs, in ms.
fn quantile_ms(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    f64::from(sorted[((sorted.len() - 1) as f64 * q).round() as usize]) / 1000.0
}

/// The gateway in front of `backend`, with no limit that would end a silent listen stream.
fn start_gateway(plan: &Plan, backend: &str, keys: &str) -> io::Result<Proc> {
    let base = &plan.base;
    let program = scale::binary(base, "mrtr-gateway")?;
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &format!("alpha={backend}"),
        // A listen stream is silent between broadcasts; its backend answer must not be ended
        // as stalled (300 s by default) in a long run.
        "--backend-stall-timeout",
        "3600",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(base.gateway_args.iter().cloned());
    let mut env = vec![("MRTR_KEYS", keys.to_owned()), ("RUST_LOG", "warn".to_owned())];
    env.extend(base.gateway_env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    Spawn {
        name: "gateway-listens",
        program: &program,
        args,
        env,
        cpus: base.hop_cpus.as_deref(),
        callgrind_out: None,
        log_dir: &base.work_dir,
    }
    .start(scale::START_TIMEOUT)
}

fn start_backend(plan: &Plan) -> io::Result<Proc> {
    let base = &plan.base;
    Spawn {
        name: "mock-backend-listens",
        program: &scale::binary(base, "mock-backend")?,
        args: vec!["--listen".into(), "127.0.0.1:0".into()],
        env: Vec::new(),
        cpus: plan.backend_cpus.as_deref(),
        callgrind_out: None,
        log_dir: &base.work_dir,
    }
    .start(scale::START_TIMEOUT)
}

/// Asks the backend (directly, not through the gateway) to broadcast: the broadcast's number,
/// the listens it reached and those it skipped.
async fn broadcast(backend: &Target, id: u64) -> io::Result<(u64, usize, usize)> {
    let host = backend.addr.to_string();
    let uri: Uri = backend.path.parse().map_err(io::Error::other)?;
    let tcp = TcpStream::connect(backend.addr).await?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(connection);
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": { "name": BROADCAST, "arguments": {}, "_meta": meta() },
    });
    let request = post(&uri, &host, "tools/call", Some(BROADCAST), body).map_err(io::Error::other)?;
    let response = sender.send_request(request).await.map_err(io::Error::other)?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(io::Error::other)?
        .to_bytes();
    let answer: Value = serde_json::from_slice(&body).map_err(io::Error::other)?;
    let field = |key: &str| {
        answer["result"]["structuredContent"][key]
            .as_u64()
            .ok_or_else(|| io::Error::other(format!("broadcast answered without {key}: {answer:.300}")))
    };
    let count = |key: &str| field(key).map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    Ok((field("seq")?, count("listens")?, count("lagging")?))
}

/// Runs the benchmark: opens the listens, measures, broadcasts.
pub async fn run(plan: &Plan) -> io::Result<Outcome> {
    let keys = scale::gateway_keys(&plan.base)?;
    let backend = start_backend(plan)?;
    let gateway = start_gateway(plan, &backend.url, &keys)?;
    let bad_url = || io::Error::other("a process printed a URL that does not parse");
    let gateway_target = Target::from_url(&gateway.url).ok_or_else(bad_url)?;
    let backend_target = Target::from_url(&backend.url).ok_or_else(bad_url)?;
    scale::warm(&gateway_target).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (gw, be) = (gateway.pid(), backend.pid());
    let mut outcome = Outcome {
        fd_limit: scale::fd_limit(gw)?,
        gateway_before: scale::snapshot(gw)?,
        backend_before: scale::snapshot(be)?,
        ..Outcome::default()
    };
    // A listen holds a backend connection; a client connection carries `streams` listens.
    let room = outcome
        .fd_limit
        .saturating_sub(outcome.gateway_before.fds + FD_MARGIN);
    outcome.sized = plan.listens.min(room * plan.streams / (plan.streams + 1));
    if outcome.sized < plan.listens {
        eprintln!(
            "{} listens asked for; the gateway's descriptor limit is {} and it holds {} of its own: {} listens",
            plan.listens, outcome.fd_limit, outcome.gateway_before.fds, outcome.sized
        );
    }
    let extra = [
        "--loader-listens",
        "--streams-per-connection",
        &plan.streams.to_string(),
    ]
    .map(str::to_owned);
    let started = Instant::now();
    let mut loaders = Loaders::start(&plan.base, &gateway.url, outcome.sized, &extra)?;
    outcome.opened = Reply::merged(loaders.ask(&Command::Open)?);
    outcome.open_secs = started.elapsed().as_secs_f64();
    let opened = &outcome.opened;
    eprintln!(
        "listens: {} of {} acknowledged over {} connections in {:.1} s, {} failures",
        opened.acknowledged, outcome.sized, opened.connections, outcome.open_secs, opened.failures
    );
    let want = outcome.gateway_before.fds + opened.acknowledged + opened.connections;
    outcome.gateway_after = scale::settle(gw, want)?;
    outcome.backend_after = scale::snapshot(be)?;
    eprintln!(
        "gateway RSS {} → {} KiB, {:.2} KiB per listen; descriptors {} → {}",
        outcome.gateway_before.rss_kib,
        outcome.gateway_after.rss_kib,
        outcome.rss_per_listen(),
        outcome.gateway_before.fds,
        outcome.gateway_after.fds
    );
    for n in 0..plan.broadcasts {
        tokio::time::sleep(plan.spacing).await;
        let cpu_before = (procs::cpu(gw)?, procs::cpu(be)?);
        let (seq, reached, lagging) = broadcast(&backend_target, n as u64 + 1).await?;
        let wait_ms = u64::try_from(plan.wait.as_millis()).unwrap_or(u64::MAX);
        let mut reply = Reply::merged(loaders.ask(&Command::Collect { seq, wait_ms })?);
        let cpu_after = (procs::cpu(gw)?, procs::cpu(be)?);
        reply.delivery_us.sort_unstable();
        reply.hop_us.sort_unstable();
        let round = Round {
            seq,
            reached,
            lagging,
            open: reply.open,
            received: reply.received,
            delivery_us: reply.delivery_us,
            hop_us: reply.hop_us,
            gateway_cpu: cpu_after.0.since(cpu_before.0),
            backend_cpu: cpu_after.1.since(cpu_before.1),
        };
        eprintln!(
            "broadcast {seq}: {} of {} open listens received it; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            round.received,
            round.open,
            quantile_ms(&round.delivery_us, 0.5),
            quantile_ms(&round.delivery_us, 0.99),
            quantile_ms(&round.delivery_us, 1.0)
        );
        outcome.rounds.push(round);
    }
    outcome.gateway_end = scale::snapshot(gw)?;
    outcome.gateway_peak_kib = crate::procs::status_kib(gw, "VmHWM:")?;
    outcome.closed = Reply::merged(loaders.ask(&Command::Close)?);
    Ok(outcome)
}

/// One line of the broadcasts' table.
fn row(out: &mut String, name: &str, round: &Round) {
    use std::fmt::Write as _;
    let (delivery, hop) = (&round.delivery_us, &round.hop_us);
    let notifications = round.received.max(1) as f64;
    let _ = writeln!(
        out,
        "| {name} | {} | {} ({}) | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} / {:.1} | {:.1} ({:.1}, {:.2}) | {:.1} |",
        round.open,
        round.reached,
        round.lagging,
        round.received,
        round.missing(),
        quantile_ms(delivery, 0.5),
        quantile_ms(delivery, 0.95),
        quantile_ms(delivery, 0.99),
        quantile_ms(delivery, 1.0),
        quantile_ms(hop, 0.5),
        quantile_ms(hop, 0.99),
        quantile_ms(hop, 1.0),
        round.gateway_cpu.on_cpu_ns as f64 / 1e6,
        round.gateway_cpu.on_cpu_ns as f64 / 1e3 / notifications,
        round.gateway_cpu.io_calls as f64 / notifications,
        round.backend_cpu.on_cpu_ns as f64 / 1e6,
    );
}

/// The targets of issue 40, which the report says are met or not.
const TARGET_KIB_PER_LISTEN: f64 = 8.0;
const TARGET_P99_MS: f64 = 50.0;

/// The report: markdown tables.
pub fn report(plan: &Plan, outcome: &Outcome) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let opened = &outcome.opened;
    let _ = writeln!(
        out,
        "\n{} listens asked for, {} opened (gateway descriptor limit {}); {} acknowledged over {} HTTP/2 connections of at most {} streams, in {:.1} s\n",
        plan.listens,
        outcome.sized,
        outcome.fd_limit,
        opened.acknowledged,
        opened.connections,
        plan.streams,
        outcome.open_secs
    );
    let _ = writeln!(
        out,
        "| process | RSS before → with the listens (KiB) | RSS per listen (KiB) | anonymous RSS per listen (KiB) | descriptors before → with the listens |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---|");
    for (name, before, after) in [
        ("gateway", outcome.gateway_before, outcome.gateway_after),
        ("mock backend", outcome.backend_before, outcome.backend_after),
    ] {
        let _ = writeln!(
            out,
            "| {name} | {} → {} | {:.2} | {:.2} | {} → {} |",
            before.rss_kib,
            after.rss_kib,
            per(after.rss_kib, before.rss_kib, opened.acknowledged),
            per(after.anon_kib, before.anon_kib, opened.acknowledged),
            before.fds,
            after.fds
        );
    }
    let _ = writeln!(
        out,
        "\ngateway after the broadcasts: RSS {} KiB, peak (VmHWM) {} KiB\n",
        outcome.gateway_end.rss_kib, outcome.gateway_peak_kib
    );
    let _ = writeln!(
        out,
        "| broadcast | listens open | queued by the backend (skipped) | received | missing | p50 ms | p95 ms | p99 ms | max ms | from the backend's write: p50 / p99 / max ms | gateway CPU ms (µs, syscalls per notification) | backend CPU ms |"
    );
    let _ = writeln!(out, "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|");
    let total = Round {
        seq: 0,
        reached: outcome.rounds.iter().map(|r| r.reached).sum(),
        lagging: outcome.rounds.iter().map(|r| r.lagging).sum(),
        open: outcome.rounds.iter().map(|r| r.open).sum(),
        received: outcome.rounds.iter().map(|r| r.received).sum(),
        delivery_us: outcome.all(false),
        hop_us: outcome.all(true),
        gateway_cpu: outcome
            .rounds
            .iter()
            .fold(Cpu::default(), |c, r| c.plus(r.gateway_cpu)),
        backend_cpu: outcome
            .rounds
            .iter()
            .fold(Cpu::default(), |c, r| c.plus(r.backend_cpu)),
    };
    let rounds = outcome.rounds.iter().map(|r| (r.seq.to_string(), r));
    for (name, round) in rounds.chain([("all".to_owned(), &total)]) {
        row(&mut out, &name, round);
    }
    let delivery = &total.delivery_us;
    let p99 = quantile_ms(delivery, 0.99);
    let per_listen = outcome.rss_per_listen();
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let _ = writeln!(
        out,
        "\ntargets at {} listens: ≤ {TARGET_KIB_PER_LISTEN} KiB of gateway RSS per listen: {per_listen:.2} KiB, {}; \
         notification p99 < {TARGET_P99_MS} ms: {p99:.1} ms, {}",
        opened.acknowledged,
        verdict(per_listen <= TARGET_KIB_PER_LISTEN),
        verdict(p99 < TARGET_P99_MS)
    );
    for sample in &outcome.closed.samples {
        let _ = writeln!(out, "  failure: {sample}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_round_trip_as_json_lines() {
        for command in [
            Command::Open,
            Command::Collect { seq: 3, wait_ms: 10 },
            Command::Close,
        ] {
            let line = serde_json::to_string(&command).unwrap();
            let back: Command = serde_json::from_str(&line).unwrap();
            assert_eq!(format!("{back:?}"), format!("{command:?}"));
        }
        let reply = Reply {
            acknowledged: 2,
            received: 2,
            delivery_us: vec![5, 7],
            samples: vec!["a".into(), "b".into()],
            ..Reply::default()
        };
        let line = serde_json::to_string(&reply).unwrap();
        assert!(!line.contains('\n'));
        let back: Reply = serde_json::from_str(&line).unwrap();
        let total = Reply::merged(vec![back.clone(), back]);
        assert_eq!((total.acknowledged, total.received), (4, 4));
        assert_eq!(total.delivery_us, [5, 7, 5, 7]);
        assert_eq!(total.samples.len(), 3);
    }

    #[test]
    fn a_missed_broadcast_is_an_error_and_quantiles_read_sorted_latencies() {
        let round = Round {
            open: 4,
            received: 3,
            delivery_us: vec![1000, 2000, 3000],
            ..Round::default()
        };
        assert_eq!(quantile_ms(&round.delivery_us, 0.5), 2.0);
        assert_eq!(quantile_ms(&round.delivery_us, 1.0), 3.0);
        let outcome = Outcome {
            sized: 4,
            opened: Reply {
                acknowledged: 4,
                ..Reply::default()
            },
            rounds: vec![round],
            ..Outcome::default()
        };
        assert_eq!(outcome.errors(), 1);
    }
}
