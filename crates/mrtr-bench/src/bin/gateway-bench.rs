//! The benchmark driver; see `gateway-bench --help`, `mrtr_bench` and `docs/benchmarks.md`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Arg, ArgAction, Command, value_parser};
use mrtr_bench::driver::{self, Plan};
use mrtr_bench::report;
use mrtr_bench::workload::Cell;

fn command() -> Command {
    Command::new("gateway-bench")
        .about(
            "Runs mrtr-gateway, a bare hyper proxy and the backend itself side by side against a mock MCP \
             backend, and prints req/s, latency, hop CPU and peak RSS ratios (or, with --callgrind, \
             instructions per request). Every answer is checked; any wrong answer fails the run.",
        )
        .arg(Arg::new("rounds").long("rounds").default_value("3").value_parser(value_parser!(usize)).help("Interleaved rounds"))
        .arg(Arg::new("secs").long("secs").default_value("5").value_parser(value_parser!(f64)).help("Measured seconds per segment"))
        .arg(Arg::new("warmup").long("warmup").default_value("0.5").value_parser(value_parser!(f64)).help("Unmeasured seconds at the start of each segment"))
        .arg(Arg::new("connections").long("connections").default_value("32").value_parser(value_parser!(usize)))
        .arg(Arg::new("cells").long("cells").help("Comma-separated cells (default all): call-256, call-4096, r1-256, r2-256, r1-4096, r2-4096, sse, list"))
        .arg(Arg::new("hop-cpus").long("hop-cpus").default_value("0").help("taskset -c list for the backends and hops; \"none\" not to pin"))
        .arg(Arg::new("bin-dir").long("bin-dir").help("Where mock-backend, bare-proxy and mrtr-gateway are (default: beside this binary)"))
        .arg(
            Arg::new("gateway-arg")
                .long("gateway-arg")
                .action(ArgAction::Append)
                .allow_hyphen_values(true)
                .help("An extra argument for every mrtr-gateway hop (repeat); e.g. --gateway-arg=--admin-listen --gateway-arg=127.0.0.1:0 to count with metrics on"),
        )
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
    };
    println!(
        "gateway-bench: {} connections, hops pinned to CPUs {}, this driver on CPUs {}; logs in {}",
        plan.connections,
        plan.hop_cpus.as_deref().unwrap_or("(not pinned)"),
        own_cpus(),
        work_dir.display()
    );

    let code = if plan.callgrind_requests.is_some() {
        match driver::run_counts(&plan).await {
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
    } else {
        match driver::run_timings(&plan).await {
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
    };
    println!(
        "gateway-bench finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    code
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
