//! Overload run of `mrtr-gateway` (issue 11): a slow backend, the gateway with a limit of
//! requests in flight, ten times the sustainable load, and the gateway's memory throughout.
//! See `mrtr_bench::overload` and `docs/reliability.md`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::{Arg, Command, value_parser};
use mrtr_bench::overload::{Driver, Phase, start_slow_backend};
use mrtr_bench::procs::Spawn;

#[tokio::main]
async fn main() -> ExitCode {
    let matches = Command::new("overload-bench")
        .about("Offers mrtr-gateway ten times the load a slow backend behind it sustains, and samples the gateway's memory")
        .arg(Arg::new("max-in-flight").long("max-in-flight").default_value("32").value_parser(value_parser!(usize)))
        .arg(Arg::new("delay-ms").long("delay-ms").default_value("100").value_parser(value_parser!(u64)).help("The backend's time per answer"))
        .arg(Arg::new("factor").long("factor").default_value("10").value_parser(value_parser!(f64)).help("Overload: this times the sustained rate"))
        .arg(Arg::new("secs").long("secs").default_value("10").value_parser(value_parser!(f64)).help("Length of the overload phase (the others: half of it)"))
        .arg(Arg::new("bin-dir").long("bin-dir").value_parser(value_parser!(PathBuf)).help("Where mrtr-gateway is (default: beside this binary)"))
        .get_matches();
    let max_in_flight = *matches.get_one::<usize>("max-in-flight").expect("default");
    let delay = Duration::from_millis(*matches.get_one::<u64>("delay-ms").expect("default"));
    let factor = *matches.get_one::<f64>("factor").expect("default");
    let secs = Duration::from_secs_f64(*matches.get_one::<f64>("secs").expect("default"));
    let bin_dir = matches.get_one::<PathBuf>("bin-dir").cloned().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(PathBuf::from))
            .unwrap_or_default()
    });
    match run(max_in_flight, delay, factor, secs, &bin_dir).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("overload-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    max_in_flight: usize,
    delay: Duration,
    factor: f64,
    secs: Duration,
    bin_dir: &std::path::Path,
) -> Result<bool, String> {
    let backend = start_slow_backend(delay).await.map_err(|e| e.to_string())?;
    let work_dir = std::env::temp_dir().join(format!("overload-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir).map_err(|e| e.to_string())?;
    let keys = std::process::Command::new(bin_dir.join("mrtr-gateway"))
        .args(["--generate-key", "bench"])
        .output()
        .map_err(|e| format!("mrtr-gateway --generate-key: {e}"))?;
    let keys = String::from_utf8_lossy(&keys.stdout).trim().to_owned();
    let gateway = Spawn {
        name: "gateway",
        program: &bin_dir.join("mrtr-gateway"),
        args: vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--backend".into(),
            format!("alpha={backend}"),
            "--max-in-flight".into(),
            max_in_flight.to_string(),
        ],
        env: vec![("MRTR_KEYS", keys), ("RUST_LOG", "warn".into())],
        cpus: Some("0"),
        callgrind_out: None,
        log_dir: &work_dir,
    }
    .start(Duration::from_secs(30))
    .map_err(|e| e.to_string())?;
    let driver = Driver::new(&gateway.url)?;

    // RSS every 100 ms, by phase.
    let phase_now = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (phase_now, stop) = (phase_now.clone(), stop.clone());
        let pid = gateway.pid();
        tokio::spawn(async move {
            let mut peaks = [0u64; 3];
            let mut last = [0u64; 3];
            while !stop.load(Ordering::Relaxed) {
                if let Ok(kib) = mrtr_bench::procs::status_kib(pid, "VmRSS:") {
                    let phase = phase_now.load(Ordering::Relaxed) as usize;
                    peaks[phase] = peaks[phase].max(kib);
                    last[phase] = kib;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (peaks, last)
        })
    };
    println!(
        "overload-bench: backend {} ms per answer, gateway --max-in-flight {max_in_flight}, commit {}",
        delay.as_millis(),
        commit()
    );
    let sustained = driver.closed_loop(max_in_flight, secs / 2).await;
    let rate = sustained.ok as f64 / sustained.elapsed.as_secs_f64();
    phase_now.store(1, Ordering::Relaxed);
    let overload = driver.open_loop(rate * factor, secs).await;
    phase_now.store(2, Ordering::Relaxed);
    let recovery = driver.closed_loop(max_in_flight, secs / 2).await;
    stop.store(true, Ordering::Relaxed);
    let (peaks, last) = sampler.await.map_err(|e| e.to_string())?;

    println!(
        "\n| phase | offered req/s | 200 | 503 (shed) | not sent | failed | 200 p50 / p99 ms | 503 p50 / p99 ms | gateway RSS peak (end) MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---|---|");
    let names = [
        "sustained (closed loop)",
        &format!("overload ({factor}x, open loop)"),
        "recovery (closed loop)",
    ];
    for (i, phase) in [&sustained, &overload, &recovery].into_iter().enumerate() {
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {:.1} / {:.1} | {:.2} / {:.2} | {:.1} ({:.1}) |",
            names[i],
            phase.offered as f64 / phase.elapsed.as_secs_f64(),
            phase.ok,
            phase.shed,
            phase.not_sent,
            phase.failed,
            Phase::quantile_ms(&phase.ok_us, 0.5),
            Phase::quantile_ms(&phase.ok_us, 0.99),
            Phase::quantile_ms(&phase.shed_us, 0.5),
            Phase::quantile_ms(&phase.shed_us, 0.99),
            peaks[i] as f64 / 1024.0,
            last[i] as f64 / 1024.0,
        );
        for sample in &phase.samples {
            println!("  failure: {sample}");
        }
    }
    let recovered = recovery.ok as f64 / recovery.elapsed.as_secs_f64();
    println!("\nsustained {rate:.0} req/s, after the overload {recovered:.0} req/s");
    Ok(sustained.failed + overload.failed + recovery.failed == 0)
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
