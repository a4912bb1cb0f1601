//! The cost per client connection and the gateway with many of them; with `--listens`, many
//! `subscriptions/listen` streams and a notification reaching all of them. See
//! `scale-bench --help`, `mrtr_bench::scale`, `mrtr_bench::listens` and `docs/benchmarks.md`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};
use mrtr_bench::listens;
use mrtr_bench::scale::{self, Plan};

fn command() -> Command {
    Command::new("scale-bench")
        .about(
            "Measures what an idle client connection costs mrtr-gateway (RSS per connection, fresh process per \
             measurement), then drives every connection in a closed loop with a think time: req/s, p50/p99, \
             errors, the gateway's peak RSS and descriptors. Every answer is checked; any wrong answer fails the run.",
        )
        .arg(Arg::new("connections").long("connections").default_value("20000").value_parser(value_parser!(usize)).help("Client connections asked for (phases 2 and 3 use what fits under the gateway's descriptor limit)"))
        .arg(Arg::new("per-loader").long("per-loader").default_value("5000").value_parser(value_parser!(usize)).help("Most connections one loader process holds"))
        .arg(Arg::new("ramp").long("ramp").default_value("64").value_parser(value_parser!(usize)).help("Connection attempts in flight at once, all loaders together (the gateway's listen backlog is 128)"))
        .arg(Arg::new("rate").long("rate").default_value("2000").value_parser(value_parser!(f64)).help("Total request rate of the closed loop; each connection thinks connections / rate seconds on average"))
        .arg(Arg::new("secs").long("secs").default_value("30").value_parser(value_parser!(f64)).help("Length of the closed loop"))
        .arg(Arg::new("max-in-flight").long("max-in-flight").default_value("256").value_parser(value_parser!(usize)).help("The gateway's --max-in-flight; it bounds the backend connections, whose descriptors are kept free when the connections asked for do not fit"))
        .arg(Arg::new("hop-cpus").long("hop-cpus").default_value("0").help("taskset -c list for the gateway and the backend; \"none\" not to pin"))
        .arg(Arg::new("load-cpus").long("load-cpus").default_value("1").help("taskset -c list for the loaders; \"none\" not to pin"))
        .arg(Arg::new("bin-dir").long("bin-dir").help("Where mock-backend and mrtr-gateway are (default: beside this binary)"))
        .arg(Arg::new("gateway-arg").long("gateway-arg").action(ArgAction::Append).allow_hyphen_values(true).help("An extra argument for mrtr-gateway (repeat)"))
        .arg(Arg::new("gateway-env").long("gateway-env").action(ArgAction::Append).help("KEY=VALUE in mrtr-gateway's environment (repeat); e.g. MALLOC_ARENA_MAX=1"))
        .arg(Arg::new("skip-connect-only").long("skip-connect-only").action(ArgAction::SetTrue).help("Skip phase 1 (connections that send nothing)"))
        .arg(Arg::new("smoke").long("smoke").action(ArgAction::SetTrue).help("CI: 500 connections, 5 s of closed loop at 100 req/s; with --listens, 200 listens and 3 broadcasts. Checks every answer, times nothing"))
        .arg(Arg::new("listens").long("listens").value_name("N").value_parser(value_parser!(usize)).help("Instead of the connection phases: N subscriptions/listen streams through the gateway (over HTTP/2 connections), their cost in gateway RSS, then --broadcasts notifications sent by the backend to all of them, each checked and timed to its arrival"))
        .arg(Arg::new("streams-per-connection").long("streams-per-connection").default_value("100").value_parser(value_parser!(usize)).help("With --listens: most listens on one HTTP/2 connection (the gateway allows 200)"))
        .arg(Arg::new("broadcasts").long("broadcasts").default_value("5").value_parser(value_parser!(usize)).help("With --listens: notifications broadcast to every listen, one after another"))
        .arg(Arg::new("broadcast-spacing-ms").long("broadcast-spacing-ms").default_value("1000").value_parser(value_parser!(u64)).help("With --listens: pause before each broadcast"))
        .arg(Arg::new("backend-cpus").long("backend-cpus").help("With --listens: taskset -c list for the backend (default: --hop-cpus); \"none\" not to pin"))
        .arg(Arg::new("broadcast-wait-secs").long("broadcast-wait-secs").default_value("10").value_parser(value_parser!(f64)).help("With --listens: how long every listen has to receive a broadcast before it counts as missed"))
        // The loader mode: this binary again, holding a share of the connections.
        .arg(Arg::new("loader").long("loader").value_name("URL").hide(true))
        .arg(Arg::new("loader-index").long("loader-index").default_value("0").value_parser(value_parser!(usize)).hide(true))
        .arg(Arg::new("loader-listens").long("loader-listens").action(ArgAction::SetTrue).hide(true))
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let runtime = if matches.contains_id("loader") {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("scale-bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(url) = matches.get_one::<String>("loader") {
        let Some(target) = scale::target_of(url) else {
            eprintln!("scale-bench --loader: bad URL {url}");
            return ExitCode::from(2);
        };
        let connections = *matches.get_one::<usize>("connections").expect("default");
        let ramp = *matches.get_one::<usize>("ramp").expect("default");
        let index = *matches.get_one::<usize>("loader-index").expect("default");
        let ran = if matches.get_flag("loader-listens") {
            let streams = *matches
                .get_one::<usize>("streams-per-connection")
                .expect("default");
            runtime.block_on(listens::loader(target, connections, streams, ramp, index))
        } else {
            runtime.block_on(scale::loader(target, connections, ramp, index))
        };
        return match ran {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("scale-bench --loader: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let plan = match plan(&matches) {
        Ok(plan) => plan,
        Err(error) => {
            eprintln!("scale-bench: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = std::fs::create_dir_all(&plan.work_dir) {
        eprintln!("scale-bench: cannot create {}: {error}", plan.work_dir.display());
        return ExitCode::FAILURE;
    }
    if matches.contains_id("listens") {
        return match listens_plan(&matches, plan) {
            Ok(plan) => run_listens(&runtime, &plan),
            Err(error) => {
                eprintln!("scale-bench: {error}");
                ExitCode::from(2)
            }
        };
    }
    println!(
        "scale-bench: {} connections in loaders of at most {} (CPUs {}), gateway and backend on CPUs {}; \
         closed loop {:.0} req/s for {:.0} s; descriptor limit here {}; logs in {}",
        plan.connections,
        plan.per_loader,
        plan.load_cpus.as_deref().unwrap_or("(not pinned)"),
        plan.hop_cpus.as_deref().unwrap_or("(not pinned)"),
        plan.rate,
        plan.load_secs.as_secs_f64(),
        own_fd_limit(),
        plan.work_dir.display()
    );
    let started = Instant::now();
    let run = runtime.block_on(scale::run(&plan));
    let code = verdict(
        run.map(|outcome| (scale::report(&plan, &outcome), outcome.errors())),
        "every answer was correct",
        "wrong answers, failed exchanges or connections not taken",
    );
    println!("scale-bench finished in {:.1} s", started.elapsed().as_secs_f64());
    code
}

fn plan(matches: &ArgMatches) -> Result<Plan, String> {
    let smoke = matches.get_flag("smoke");
    let cpus = |name: &str| {
        matches
            .get_one::<String>(name)
            .filter(|c| *c != "none")
            .cloned()
            .filter(|_| mrtr_bench::procs::available("taskset"))
    };
    let bin_dir = match matches.get_one::<String>("bin-dir") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(PathBuf::from))
            .unwrap_or_default(),
    };
    if !scale::has_binaries(&bin_dir) {
        return Err(format!(
            "no mrtr-gateway and mock-backend in {} (scripts/bench-connections.sh builds them)",
            bin_dir.display()
        ));
    }
    let gateway_env = matches
        .get_many::<String>("gateway-env")
        .into_iter()
        .flatten()
        .map(|kv| scale::key_value(kv).ok_or_else(|| format!("--gateway-env {kv}: not KEY=VALUE")))
        .collect::<Result<Vec<_>, _>>()?;
    let value = |name: &str| *matches.get_one::<usize>(name).expect("default");
    let float = |name: &str| *matches.get_one::<f64>(name).expect("default");
    Ok(Plan {
        bin_dir,
        work_dir: scale::work_dir(),
        connections: if smoke { 500 } else { value("connections") },
        per_loader: value("per-loader"),
        ramp: value("ramp"),
        // A debug gateway (CI's) spends about 0.7 ms of CPU per request: 100 req/s leaves it idle
        // most of the time, so that nothing is shed.
        rate: if smoke { 100.0 } else { float("rate") },
        load_secs: Duration::from_secs_f64(if smoke { 5.0 } else { float("secs") }),
        // The smoke checks answers, not capacity: with a place in flight for every connection,
        // a slow debug gateway on a busy machine queues instead of shedding (503).
        max_in_flight: if smoke { 500 } else { value("max-in-flight") },
        hop_cpus: cpus("hop-cpus"),
        load_cpus: cpus("load-cpus"),
        gateway_args: matches
            .get_many::<String>("gateway-arg")
            .map(|args| args.cloned().collect())
            .unwrap_or_default(),
        gateway_env,
        skip_connect_only: matches.get_flag("skip-connect-only"),
    })
}

/// The `--listens` run of `base`'s processes.
fn listens_plan(matches: &ArgMatches, base: Plan) -> Result<listens::Plan, String> {
    let smoke = matches.get_flag("smoke");
    let streams = *matches
        .get_one::<usize>("streams-per-connection")
        .expect("default");
    if !(1..=listens::MAX_STREAMS).contains(&streams) {
        return Err(format!(
            "--streams-per-connection {streams}: the gateway allows 1 to {} streams on a connection",
            listens::MAX_STREAMS
        ));
    }
    let listens = *matches.get_one::<usize>("listens").expect("present");
    let spacing = *matches.get_one::<u64>("broadcast-spacing-ms").expect("default");
    let wait = *matches.get_one::<f64>("broadcast-wait-secs").expect("default");
    let backend_cpus = match matches.get_one::<String>("backend-cpus") {
        Some(cpus) => (cpus != "none" && mrtr_bench::procs::available("taskset")).then(|| cpus.clone()),
        None => base.hop_cpus.clone(),
    };
    Ok(listens::Plan {
        base,
        listens: if smoke { 200 } else { listens },
        streams,
        broadcasts: if smoke {
            3
        } else {
            *matches.get_one::<usize>("broadcasts").expect("default")
        },
        spacing: Duration::from_millis(if smoke { 200 } else { spacing }),
        wait: Duration::try_from_secs_f64(wait).map_err(|e| format!("--broadcast-wait-secs: {e}"))?,
        backend_cpus,
    })
}

/// Prints a run's report and what it found: `correct` when it counted no error, else how many
/// of `wrong`; the exit code to match.
fn verdict(run: std::io::Result<(String, u64)>, correct: &str, wrong: &str) -> ExitCode {
    match run {
        Ok((report, errors)) => {
            print!("{report}");
            if errors == 0 {
                println!("\n{correct}");
                ExitCode::SUCCESS
            } else {
                println!("\n{errors} {wrong}");
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("scale-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run_listens(runtime: &tokio::runtime::Runtime, plan: &listens::Plan) -> ExitCode {
    println!(
        "scale-bench --listens: {} listens, {} per HTTP/2 connection, in loaders of at most {} (CPUs {}), \
         gateway on CPUs {}, backend on CPUs {}; {} broadcasts {} ms apart; logs in {}",
        plan.listens,
        plan.streams,
        plan.base.per_loader,
        plan.base.load_cpus.as_deref().unwrap_or("(not pinned)"),
        plan.base.hop_cpus.as_deref().unwrap_or("(not pinned)"),
        plan.backend_cpus.as_deref().unwrap_or("(not pinned)"),
        plan.broadcasts,
        plan.spacing.as_millis(),
        plan.base.work_dir.display()
    );
    let started = Instant::now();
    let run = runtime.block_on(listens::run(plan));
    let code = verdict(
        run.map(|outcome| (listens::report(plan, &outcome), outcome.errors())),
        "every listen was acknowledged and received every broadcast, every message correct",
        "listens not acknowledged, broadcasts missed, wrong messages or broken streams",
    );
    println!("scale-bench finished in {:.1} s", started.elapsed().as_secs_f64());
    code
}

/// This process's soft `Max open files` (the loaders and the gateway inherit it).
fn own_fd_limit() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find_map(|l| l.strip_prefix("Max open files"))
                .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
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
