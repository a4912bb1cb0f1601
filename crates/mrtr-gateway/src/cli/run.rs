//! The binary's run: from the parsed command line to the drained exit.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tower_mrtr::Keyring;

#[cfg(feature = "demo")]
use super::demo;
use super::{Command, Keys, Run};
use crate::app::{RunningGateway, start_with_keys};
use crate::observe::logging;
use crate::observe::metrics;
use crate::ops::{self, admin, reload};

/// Runs the binary with `args` (the program name first) and `env` (the process's environment):
/// parses the command line, serves until SIGTERM or Ctrl-C, drains, and says how it ended.
pub async fn run<I, T>(args: I, env: impl Fn(&str) -> Option<String>) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let command = match super::parse(args, env) {
        Ok(command) => command,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let outcome = match command {
        Command::GenerateKey(kid) => tower_mrtr::keyring::generate_entry(&kid)
            .map(|entry| println!("{}", *entry))
            .map_err(|error| error.to_string()),
        Command::Run(resolved) => serve(*resolved).await,
        Command::Pin(config) => super::pin::print(*config).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mrtr-gateway: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Serves `run` until SIGTERM or Ctrl-C, then drains; what kept it from starting otherwise.
async fn serve(run: Run) -> Result<(), String> {
    #[cfg_attr(not(feature = "demo"), allow(unused_mut))]
    let Run {
        keys,
        mut config,
        file,
    } = run;
    let settings = config.settings.clone();
    // Kept to the end: dropping it writes the access lines still gathered.
    let _log = logging::init(settings.log_format);
    // `parse` refuses --demo in a build without the demo backends.
    #[cfg(feature = "demo")]
    let (demo_servers, fixed) = if settings.demo {
        let started = demo::start_backends()
            .await
            .map_err(|error| format!("cannot start the demo backends: {error}"))?;
        let count = started.backends.len();
        // Demo backends go first, so their resources win URI ties.
        let extra = std::mem::take(&mut config.backends);
        config.backends = started.backends.into_iter().chain(extra).collect();
        (started.servers, count)
    } else {
        (Vec::new(), 0)
    };
    #[cfg(not(feature = "demo"))]
    let fixed = 0;
    // The backends the file does not name (--demo's) stay through reloads.
    let fixed = config.backends[..fixed].to_vec();
    let running = config.clone();
    let keys = keys_or_ephemeral(keys)?;
    // The recorder goes in before anything is counted.
    let prometheus = settings
        .admin_listen
        .map(|_| admin::install_prometheus_recorder())
        .transpose()
        .map_err(|error| format!("cannot set up metrics: {error}"))?;
    let handle = keys.handle();
    metrics::keyring_in_use(&handle.load());
    let names: Vec<String> = config
        .backends
        .iter()
        .map(|b| format!("{}={}", b.name(), b.endpoint()))
        .collect();
    let certs = config
        .listener_tls
        .clone()
        .map(|tls| Arc::new(reload::CertFiles::new(tls)));
    let pins = config.pins.clone();
    let gateway = start_with_keys(config, handle, settings.listen)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", settings.listen))?;
    if settings.require_backends
        && let Err(down) = backends_up(&gateway).await
    {
        let _ = gateway.shutdown().await;
        return Err(down);
    }
    // Always watched, also without files: SIGHUP's default action would end the process.
    let keys_file = match &keys {
        Keys::File(file) => Some(file.clone()),
        Keys::Fixed(_) => None,
    };
    let watcher = tokio::spawn(reload::watch(keys_file, certs, settings.reload_interval.into()));
    let pins_watcher = pins
        .filter(|pins| pins.file().is_some())
        .map(|pins| tokio::spawn(ops::pins::watch(pins, settings.reload_interval.into())));
    let interval = settings.reload_interval.into();
    let config_watcher =
        file.map(|file| tokio::spawn(file.watch(gateway.reconfigurer(), running, fixed, interval)));
    let admin = match settings.admin_listen {
        None => None,
        Some(addr) => Some(
            admin::start(admin::AdminState::new(gateway.readiness(), prometheus), addr)
                .await
                .map_err(|error| format!("cannot listen on {addr} (admin): {error}"))?,
        ),
    };
    // Scripts and tests wait for these lines (and read the ports from them).
    if let Some(admin) = &admin {
        println!("mrtr-gateway admin listening on http://{}", admin.addr());
    }
    println!("mrtr-gateway listening on {}", gateway.url());
    tracing::info!(backends = ?names, "gateway started");
    #[cfg(feature = "demo")]
    if settings.demo {
        println!("{}", demo::instructions(&gateway.url()));
    }

    stop_signal().await;
    tracing::info!("shutting down");
    if let Err(error) = gateway.drain().await {
        tracing::warn!(%error, "the listener ended with an error");
    }
    watcher.abort();
    for watcher in [pins_watcher, config_watcher].into_iter().flatten() {
        watcher.abort();
    }
    if let Some(admin) = admin {
        let _ = admin.shutdown().await;
    }
    #[cfg(feature = "demo")]
    for server in demo_servers {
        let _ = server.shutdown().await;
    }
    tracing::info!("drained; exiting");
    Ok(())
}

/// The keys to serve with: the configured ones (a keys file readable by others is warned
/// about), or, in demo mode without any, an ephemeral key, said loudly.
fn keys_or_ephemeral(keys: Option<Keys>) -> Result<Keys, String> {
    if let Some(Keys::File(file)) = &keys
        && let Some(warning) = file.exposure()
    {
        tracing::warn!("{warning}");
    }
    if let Some(keys) = keys {
        return Ok(keys);
    }
    let keyring = Keyring::generate("demo").map_err(|error| format!("cannot generate a key: {error}"))?;
    eprintln!(
        "WARNING: demo mode with an ephemeral key: envelopes die with this process and no other \
         replica can open them. Set MRTR_KEYS for anything else."
    );
    Ok(Keys::Fixed(keyring.into()))
}

/// How long `--require-backends` waits for the first probe of every backend: a stdio server's
/// handshake has a minute (a first `npx -y` may be downloading), an HTTP backend the response
/// timeout.
const FIRST_PROBE_LIMIT: Duration = Duration::from_secs(120);

/// With `--require-backends`: waits for the first probe of every backend, and says which are down
/// and why (their `/readyz` reason) if any is, or which were not probed in time.
async fn backends_up(gateway: &RunningGateway) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + FIRST_PROBE_LIMIT;
    while gateway.backends().iter().any(|b| b.health().is_up().is_none()) {
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let down: Vec<String> = gateway
        .backends()
        .iter()
        .filter(|b| b.health().is_up() != Some(true))
        .map(|b| {
            let reason = b.health().to_json()["reason"]
                .as_str()
                .unwrap_or("not probed yet")
                .to_owned();
            format!("{} ({reason})", b.name())
        })
        .collect();
    if down.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--require-backends: backends down at start: {}; the log says why",
        down.join(", ")
    ))
}

async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
