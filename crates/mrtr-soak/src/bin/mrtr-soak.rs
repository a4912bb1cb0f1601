//! The soak driver; see the crate docs and `mrtr-soak --help`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};
use mrtr_soak::fleet::{Programs, ReplicaSettings};
use mrtr_soak::run::{self, Settings};

const ABOUT: &str = "Soak of mrtr-gateway through nginx: two backends, two replicas sharing a keys \
file, round-robin without stickiness; N users run MRTR, task and plain flows for T seconds through key \
rotation, a backend kill -9 and a replica restart (and, with --shared-store, a kill -9 of the replicas' \
Redis). Exits 1 if a flow was lost or a fault step failed.";

fn command() -> Command {
    let number = |name: &'static str, default: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("N")
            .value_parser(value_parser!(u64))
            .default_value(default)
            .help(help)
    };
    let optional = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("SECONDS")
            .value_parser(value_parser!(u64))
            .help(help)
    };
    let optional_ms = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("MS")
            .value_parser(value_parser!(u64))
            .help(help)
    };
    Command::new("mrtr-soak")
        .about(ABOUT)
        .arg(
            Arg::new("bin-dir")
                .long("bin-dir")
                .value_name("DIR")
                .required(true)
                .value_parser(value_parser!(PathBuf))
                .help("Directory holding mrtr-gateway, fixture-server and tasks-fixture-server"),
        )
        .arg(
            Arg::new("nginx")
                .long("nginx")
                .value_name("PATH")
                .default_value("nginx")
                .value_parser(value_parser!(PathBuf))
                .help("The nginx binary"),
        )
        .arg(
            Arg::new("work-dir")
                .long("work-dir")
                .value_name("DIR")
                .value_parser(value_parser!(PathBuf))
                .help("Where configs, logs and report.json go (default: a new directory under the temp dir)"),
        )
        .arg(number("clients", "100", "Concurrent users"))
        .arg(number("duration", "60", "Seconds of load"))
        .arg(optional("warmup", "Seconds before the first fault; users start over its first half (default: a tenth of --duration, at least 5)"))
        .arg(optional("cycle", "Seconds of one fault cycle (default: --duration minus --warmup: one cycle)"))
        .arg(number("think-ms", "100", "Longest think time of a user between rounds, ms"))
        .arg(optional_ms("pause-ms", "Longest pause of a user between flows, ms (default: --think-ms)"))
        .arg(number("backoff-ms", "1000", "First retry's backoff, ms; it doubles for the next two"))
        .arg(number("request-timeout", "60", "Longest wait for one answer, seconds"))
        .arg(number("backend-down", "2", "Seconds the killed backend stays down"))
        .arg(optional("envelope-ttl", "The replicas' --envelope-ttl (default: 0.45 of --cycle, at least 10)"))
        .arg(number("drain-delay", "3", "The replicas' --drain-delay"))
        .arg(number("drain-timeout", "15", "The replicas' --drain-timeout"))
        .arg(number("reload-interval", "2", "The replicas' --reload-interval"))
        .arg(
            Arg::new("shared-store")
                .long("shared-store")
                .action(ArgAction::SetTrue)
                .help("Give the replicas a shared store (redis-server) with a limit on every request, and kill -9 the store once a cycle"),
        )
        .arg(
            Arg::new("redis-server")
                .long("redis-server")
                .value_name("PATH")
                .default_value("redis-server")
                .value_parser(value_parser!(PathBuf))
                .help("The redis-server binary, with --shared-store"),
        )
        .arg(
            Arg::new("fail-on-unexplained")
                .long("fail-on-unexplained")
                .action(ArgAction::SetTrue)
                .help("Also exit 1 when a failed attempt falls outside every fault window"),
        )
}

fn secs(m: &ArgMatches, name: &str) -> Duration {
    Duration::from_secs(*m.get_one::<u64>(name).expect("has a default"))
}

fn settings(m: &ArgMatches) -> Result<Settings, String> {
    let bin_dir: &PathBuf = m.get_one("bin-dir").expect("required");
    let program = |name: &str| {
        let path = bin_dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{} not found: build it first (scripts/soak.sh does)",
                path.display()
            ))
        }
    };
    let duration = secs(m, "duration");
    let warmup = m
        .get_one::<u64>("warmup")
        .map_or((duration / 10).max(Duration::from_secs(5)), |s| {
            Duration::from_secs(*s)
        });
    if warmup >= duration {
        return Err("--warmup must be shorter than --duration".into());
    }
    let cycle = m
        .get_one::<u64>("cycle")
        .map_or(duration - warmup, |s| Duration::from_secs(*s));
    let envelope_ttl = m
        .get_one::<u64>("envelope-ttl")
        .map_or(cycle.mul_f64(0.45).max(Duration::from_secs(10)), |s| {
            Duration::from_secs(*s)
        });
    let think = Duration::from_millis(*m.get_one::<u64>("think-ms").expect("has a default"));
    let dir = match m.get_one::<PathBuf>("work-dir") {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("mrtr-soak-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(Settings {
        programs: Programs {
            gateway: program("mrtr-gateway")?,
            fixture: program("fixture-server")?,
            tasks_fixture: program("tasks-fixture-server")?,
            nginx: m.get_one::<PathBuf>("nginx").expect("has a default").clone(),
            redis: m.get_flag("shared-store").then(|| {
                m.get_one::<PathBuf>("redis-server")
                    .expect("has a default")
                    .clone()
            }),
        },
        dir,
        clients: *m.get_one::<u64>("clients").expect("has a default") as usize,
        duration,
        warmup,
        cycle,
        think,
        pause: m
            .get_one::<u64>("pause-ms")
            .map_or(think, |ms| Duration::from_millis(*ms)),
        backoff: Duration::from_millis(*m.get_one::<u64>("backoff-ms").expect("has a default")),
        request_timeout: secs(m, "request-timeout"),
        backend_down: secs(m, "backend-down"),
        replica: ReplicaSettings {
            envelope_ttl,
            drain_delay: secs(m, "drain-delay"),
            drain_timeout: secs(m, "drain-timeout"),
            reload_interval: secs(m, "reload-interval"),
            shared_store: None,
        },
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let matches = command().get_matches();
    let settings = match settings(&matches) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("mrtr-soak: {message}");
            return ExitCode::from(2);
        }
    };
    let dir = settings.dir.clone();
    let report = match run::run(settings).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("mrtr-soak: {error} (logs in {})", dir.display());
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report.text);
    let json_path = dir.join("report.json");
    match serde_json::to_string_pretty(&report.json) {
        Ok(text) => {
            if let Err(error) = std::fs::write(&json_path, text) {
                eprintln!("mrtr-soak: cannot write {}: {error}", json_path.display());
            }
        }
        Err(error) => eprintln!("mrtr-soak: {error}"),
    }
    let csv_path = dir.join("samples.csv");
    if let Err(error) = std::fs::write(&csv_path, &report.samples_csv) {
        eprintln!("mrtr-soak: cannot write {}: {error}", csv_path.display());
    }
    println!(
        "logs, nginx config, report.json and samples.csv in {}",
        dir.display()
    );
    let strict = matches.get_flag("fail-on-unexplained");
    if report.lost > 0 || report.schedule_failures > 0 || (strict && report.unexplained > 0) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
        let m = command()
            .try_get_matches_from([
                "mrtr-soak",
                "--bin-dir",
                "/nonexistent",
                "--duration",
                "600",
                "--cycle",
                "150",
            ])
            .unwrap();
        assert_eq!(secs(&m, "duration"), Duration::from_secs(600));
        assert!(
            settings(&m)
                .unwrap_err()
                .contains("/nonexistent/mrtr-gateway not found")
        );
    }
}
