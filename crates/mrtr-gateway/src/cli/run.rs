//! The binary's run: from the parsed command line to the drained exit.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use tower_mrtr::Keyring;

#[cfg(feature = "demo")]
use super::demo;
use super::{Command, Keys, Run};
use crate::app::start_with_keys;
use crate::observe::logging;
use crate::observe::metrics as telemetry;
use crate::ops::{admin, reload};

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
    let resolved = match command {
        Command::GenerateKey(kid) => {
            return match tower_mrtr::keyring::generate_entry(&kid) {
                Ok(entry) => {
                    println!("{}", *entry);
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("mrtr-gateway: {error}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Run(resolved) => *resolved,
    };
    #[cfg_attr(not(feature = "demo"), allow(unused_mut))]
    let Run { keys, mut config } = resolved;
    let settings = config.settings.clone();
    // Kept to the end: dropping it writes the access lines still gathered.
    let _log = logging::init(settings.log_format);

    // `parse` refuses --demo in a build without the demo backends.
    #[cfg(feature = "demo")]
    let mut demo_servers = Vec::new();
    #[cfg(feature = "demo")]
    if settings.demo {
        match demo::start_backends().await {
            Ok(started) => {
                // Demo backends go first, so their resources win URI ties.
                let extra = std::mem::take(&mut config.backends);
                config.backends = started.backends.into_iter().chain(extra).collect();
                demo_servers = started.servers;
            }
            Err(error) => {
                eprintln!("mrtr-gateway: cannot start the demo backends: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(Keys::File(file)) = &keys
        && let Some(warning) = file.exposure()
    {
        tracing::warn!("{warning}");
    }
    let keys = match keys {
        Some(keys) => keys,
        None => match Keyring::generate("demo") {
            Ok(keyring) => {
                eprintln!(
                    "WARNING: demo mode with an ephemeral key: envelopes die with this process and no other \
                     replica can open them. Set MRTR_KEYS for anything else."
                );
                Keys::Fixed(keyring.into())
            }
            Err(error) => {
                eprintln!("mrtr-gateway: cannot generate a key: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    // The recorder goes in before anything is counted.
    let prometheus = match settings.admin_listen {
        None => None,
        Some(_) => match admin::install_prometheus_recorder() {
            Ok(handle) => Some(handle),
            Err(error) => {
                eprintln!("mrtr-gateway: cannot set up metrics: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    let handle = keys.handle();
    telemetry::keyring_in_use(&handle.load());
    let names: Vec<String> = config
        .backends
        .iter()
        .map(|b| format!("{}={}", b.name(), b.endpoint()))
        .collect();
    let certs = config
        .listener_tls
        .clone()
        .map(|tls| Arc::new(reload::CertFiles::new(tls)));
    let gateway = match start_with_keys(config, handle, settings.listen).await {
        Ok(gateway) => gateway,
        Err(error) => {
            eprintln!("mrtr-gateway: cannot listen on {}: {error}", settings.listen);
            return ExitCode::FAILURE;
        }
    };
    // Always watched, also without files: SIGHUP's default action would end the process.
    let keys_file = match &keys {
        Keys::File(file) => Some(file.clone()),
        Keys::Fixed(_) => None,
    };
    let watcher = tokio::spawn(reload::watch(keys_file, certs, settings.reload_interval.into()));
    let admin = match settings.admin_listen {
        None => None,
        Some(addr) => match admin::start(admin::AdminState::new(gateway.readiness(), prometheus), addr).await
        {
            Ok(admin) => Some(admin),
            Err(error) => {
                eprintln!("mrtr-gateway: cannot listen on {addr} (admin): {error}");
                return ExitCode::FAILURE;
            }
        },
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
    if let Some(admin) = admin {
        let _ = admin.shutdown().await;
    }
    #[cfg(feature = "demo")]
    for server in demo_servers {
        let _ = server.shutdown().await;
    }
    tracing::info!("drained; exiting");
    ExitCode::SUCCESS
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
