//! The benchmark driver; see `gateway-bench --help`, `mrtr_bench` and `docs/benchmarks.md`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Arg, ArgAction, Command, value_parser};
use mrtr_bench::driver::{self, Plan};
use mrtr_bench::peer::Peer;
use mrtr_bench::report;
use mrtr_bench::workload::Cell;

const PEER_HELP: &str = "Another gateway measured beside ours, in the same rounds and cells, in front of one \
mock backend (repeat for more peers). COMMAND_TEMPLATE is a shell command line run as `sh -c 'exec COMMAND'` \
in a process group of its own, pinned like the hops, with these placeholders filled in: {port} the port it \
must listen on (127.0.0.1), {listen} 127.0.0.1:{port}, {backend} the mock backend's MCP URL \
(http://127.0.0.1:PORT/mcp), {backend_addr} its 127.0.0.1:PORT, {dir} the run's log directory; {{ and }} \
are braces. It is ready when {port} accepts a connection; requests go to http://127.0.0.1:{port} plus its \
--peer-path (default /mcp). Its CPU and peak RSS are summed over its process group, its output is in \
{dir}/NAME.log, and the group is killed at the end (also when the run fails, or on SIGINT or SIGTERM). \
Its answers may be re-framed (SSE) and re-serialised: they are compared as parsed JSON-RPC messages, in \
order, with round 1's requestState verbatim (see mrtr_bench::workload::as_relayed for what a 2026-07-28 \
gateway may add); a wrong answer fails the run. Not with --callgrind.";

const PEER_AFTER_HELP: &str = "Example, agentgateway built outside the project (see docs/benchmarks.md):

  AGENTGATEWAY_BIN=/path/to/agentgateway bash scripts/bench-gateway.sh \\
      --peer 'agentgateway=scripts/peers/agentgateway.sh {port} {backend} {dir}'";

fn command() -> Command {
    Command::new("gateway-bench")
        .about(
            "Runs mrtr-gateway, a bare hyper proxy, the backend itself and any peer gateway (--peer) side by \
             side against a mock MCP backend, and prints req/s, latency, hop CPU and peak RSS ratios (or, \
             with --callgrind, instructions per request). Every answer is checked; any wrong answer fails \
             the run.",
        )
        .arg(Arg::new("rounds").long("rounds").default_value("3").value_parser(value_parser!(usize)).help("Interleaved rounds"))
        .arg(Arg::new("secs").long("secs").default_value("5").value_parser(value_parser!(f64)).help("Measured seconds per segment"))
        .arg(Arg::new("warmup").long("warmup").default_value("0.5").value_parser(value_parser!(f64)).help("Unmeasured seconds at the start of each segment"))
        .arg(Arg::new("connections").long("connections").default_value("32").value_parser(value_parser!(usize)))
        .arg(Arg::new("cells").long("cells").help("Comma-separated cells (default all): call-256, call-4096, r1-256, r2-256, r1-4096, r2-4096, sse, list; \
             beside them, through gateways of other backends and clients: legacy-http-256, legacy-http-sse (an initialize-era \
             HTTP backend), legacy-client-256 (an initialize-era client), stdio-256, legacy-stdio-256 (the mock backend as a \
             stdio process, through the gateway and straight over its pipes), list-3, list-10 (tools/list merged over 3 or 10 backends)"))
        .arg(
            Arg::new("stdio-work-us")
                .long("stdio-work-us")
                .default_value("0")
                .value_parser(value_parser!(u64))
                .help("CPU microseconds the mock backend spends on each message as a stdio process (the stdio cells), to stand for a server that works"),
        )
        .arg(Arg::new("stdio-cpus").long("stdio-cpus").help("taskset -c list for the mock backend as a stdio process (the gateway's child, and the one driven over its pipes); default: --hop-cpus"))
        .arg(Arg::new("hop-cpus").long("hop-cpus").default_value("0").help("taskset -c list for the backends and hops; \"none\" not to pin"))
        .arg(Arg::new("bin-dir").long("bin-dir").help("Where mock-backend, bare-proxy and mrtr-gateway are (default: beside this binary)"))
        .arg(
            Arg::new("gateway-arg")
                .long("gateway-arg")
                .action(ArgAction::Append)
                .allow_hyphen_values(true)
                .help("An extra argument for every mrtr-gateway hop (repeat); e.g. --gateway-arg=--admin-listen --gateway-arg=127.0.0.1:0 to count with metrics on"),
        )
        .arg(
            Arg::new("peer")
                .long("peer")
                .value_name("NAME=COMMAND_TEMPLATE")
                .action(ArgAction::Append)
                .allow_hyphen_values(true)
                .help("Another gateway measured beside ours (repeat for more); see below")
                .long_help(PEER_HELP),
        )
        .arg(
            Arg::new("peer-path")
                .long("peer-path")
                .value_name("NAME=PATH")
                .action(ArgAction::Append)
                .help("The MCP path of peer NAME (default /mcp)"),
        )
        .after_help("Peers: --peer NAME=COMMAND_TEMPLATE starts another gateway in front of one mock backend; --help says how.")
        .after_long_help(PEER_AFTER_HELP)
        .arg(Arg::new("smoke").long("smoke").action(ArgAction::SetTrue).help("One round of 1 s segments: checks answers, times nothing"))
        .arg(
            Arg::new("callgrind")
                .long("callgrind")
                .value_parser(value_parser!(u64))
                .num_args(0..=1)
                .default_missing_value("500")
                .help("Count instructions per request of each hop under valgrind (N requests per cell, default 500)"),
        )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let matches = command().get_matches();
    let started = Instant::now();
    let cells = match matches.get_one::<String>("cells") {
        None => Cell::ALL.to_vec(),
        Some(list) => {
            let mut cells = Vec::new();
            for name in list.split(',') {
                match Cell::ALL.iter().find(|c| c.name() == name.trim()) {
                    Some(cell) => cells.push(*cell),
                    None => {
                        eprintln!("gateway-bench: unknown cell {name:?}");
                        return ExitCode::from(2);
                    }
                }
            }
            cells
        }
    };
    let smoke = matches.get_flag("smoke");
    let secs = |name: &str| Duration::from_secs_f64(*matches.get_one::<f64>(name).expect("has a default"));
    let bin_dir = match matches.get_one::<String>("bin-dir") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(PathBuf::from))
            .unwrap_or_default(),
    };
    let work_dir = std::env::temp_dir().join(format!("gateway-bench-{}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&work_dir) {
        eprintln!("gateway-bench: cannot create {}: {error}", work_dir.display());
        return ExitCode::FAILURE;
    }
    let hop_cpus = matches
        .get_one::<String>("hop-cpus")
        .filter(|c| *c != "none")
        .cloned();
    let hop_cpus = hop_cpus.filter(|_| {
        let found = mrtr_bench::procs::available("taskset");
        if !found {
            eprintln!("gateway-bench: taskset not found; processes are not pinned");
        }
        found
    });
    let peers = match peers(&matches) {
        Ok(peers) => peers,
        Err(error) => {
            eprintln!("gateway-bench: {error}");
            return ExitCode::from(2);
        }
    };
    if !peers.is_empty() && matches.get_one::<u64>("callgrind").is_some() {
        eprintln!("gateway-bench: --callgrind counts our hops only; --peer is for timings");
        return ExitCode::from(2);
    }
    let plan = Plan {
        bin_dir,
        work_dir: work_dir.clone(),
        cells,
        rounds: if smoke {
            1
        } else {
            *matches.get_one("rounds").expect("has a default")
        },
        warmup: if smoke {
            Duration::from_millis(200)
        } else {
            secs("warmup")
        },
        window: if smoke {
            Duration::from_secs(1)
        } else {
            secs("secs")
        },
        connections: *matches.get_one("connections").expect("has a default"),
        hop_cpus,
        callgrind_requests: matches.get_one::<u64>("callgrind").copied(),
        gateway_args: matches
            .get_many::<String>("gateway-arg")
            .map(|args| args.cloned().collect())
            .unwrap_or_default(),
        peers,
        stdio_work_us: *matches.get_one("stdio-work-us").expect("has a default"),
        stdio_cpus: matches.get_one::<String>("stdio-cpus").cloned(),
    };
    println!(
        "gateway-bench: {} connections, hops pinned to CPUs {}, this driver on CPUs {}; logs in {}",
        plan.connections,
        plan.hop_cpus.as_deref().unwrap_or("(not pinned)"),
        own_cpus(),
        work_dir.display()
    );

    // A signal ends the run here, so that the processes are dropped and killed: a peer runs in a
    // process group of its own and would not get the terminal's Ctrl-C.
    let run = async {
        if plan.callgrind_requests.is_some() {
            counted(driver::run_counts(&plan).await, &plan, &work_dir)
        } else {
            timed(driver::run_timings(&plan).await, &plan, smoke)
        }
    };
    let code = tokio::select! {
        code = run => code,
        signal = interrupted() => {
            eprintln!("gateway-bench: {signal}; every process it started is stopped");
            return ExitCode::from(130);
        }
    };
    println!(
        "gateway-bench finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    code
}

/// Prints the instruction counts.
fn counted(counts: std::io::Result<Vec<driver::Count>>, plan: &Plan, work_dir: &std::path::Path) -> ExitCode {
    match counts {
        Ok(counts) => {
            print!("{}", report::counts(&plan.cells, &counts));
            println!(
                "\ncallgrind dumps (callgrind_annotate FILE): {}",
                work_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("gateway-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the timings (not in a smoke run) and the verdict on the answers.
fn timed(timings: std::io::Result<driver::Timings>, plan: &Plan, smoke: bool) -> ExitCode {
    match timings {
        Ok(timings) => {
            if !smoke {
                print!("{}", report::timings(&plan.cells, &timings));
            }
            if timings.failure_count == 0 {
                println!("\nevery answer was correct");
                ExitCode::SUCCESS
            } else {
                println!(
                    "\n{} wrong answers or failed exchanges, for example:",
                    timings.failure_count
                );
                for failure in &timings.failures {
                    println!("  {failure}");
                }
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("gateway-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves when SIGINT or SIGTERM arrives (never, if they cannot be watched).
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

/// The `--peer` gateways, with their `--peer-path`s.
fn peers(matches: &clap::ArgMatches) -> Result<Vec<Peer>, String> {
    let mut peers = Vec::new();
    for spec in matches.get_many::<String>("peer").into_iter().flatten() {
        let peer = Peer::parse(spec)?;
        if peers.iter().any(|p: &Peer| p.name == peer.name) {
            return Err(format!("--peer {}: named twice", peer.name));
        }
        peers.push(peer);
    }
    for spec in matches.get_many::<String>("peer-path").into_iter().flatten() {
        let (name, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--peer-path {spec:?}: expected NAME=PATH"))?;
        let peer = peers
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("--peer-path {spec:?}: no --peer named {name:?}"))?;
        peer.set_path(path)?;
    }
    Ok(peers)
}

/// The CPUs this process may run on (`Cpus_allowed_list`), to show the driver's pinning.
fn own_cpus() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "(unknown)".to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        super::command().debug_assert();
    }
}
