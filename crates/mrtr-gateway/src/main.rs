//! The `mrtr-gateway` binary; see `mrtr-gateway --help` and `docs/gateway.md`.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use mrtr_gateway::cli::{self, Command};
use mrtr_gateway::{demo, start_shared};
use tower_mrtr::Keyring;

#[tokio::main]
async fn main() -> ExitCode {
    let command = match cli::parse(std::env::args_os(), |name| std::env::var(name).ok()) {
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
    let settings = match command {
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
        Command::Run(settings) => *settings,
    };
    init_tracing();

    let mut config = settings.config;
    let mut demo_servers = Vec::new();
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
    let keyring = match settings.keyring {
        Some(keyring) => keyring,
        None => match Keyring::generate("demo") {
            Ok(keyring) => {
                eprintln!(
                    "WARNING: demo mode with an ephemeral key: envelopes die with this process and no other \
                     replica can open them. Set MRTR_KEYS for anything else."
                );
                keyring
            }
            Err(error) => {
                eprintln!("mrtr-gateway: cannot generate a key: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    let names: Vec<String> = config
        .backends
        .iter()
        .map(|b| format!("{}={}", b.name(), b.url()))
        .collect();
    let gateway = match start_shared(config, Arc::new(keyring), settings.listen).await {
        Ok(gateway) => gateway,
        Err(error) => {
            eprintln!("mrtr-gateway: cannot listen on {}: {error}", settings.listen);
            return ExitCode::FAILURE;
        }
    };
    // Scripts and tests wait for this line (and read the port from it).
    println!("mrtr-gateway listening on {}", gateway.url());
    tracing::info!(backends = ?names, "gateway started");
    if settings.demo {
        println!("{}", demo::instructions(&gateway.url()));
    }

    stop_signal().await;
    tracing::info!("shutting down");
    let _ = gateway.shutdown().await;
    for server in demo_servers {
        let _ = server.shutdown().await;
    }
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

fn init_tracing() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;
    let filter: Targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| f.parse().ok())
        // rmcp logs every served request at info level; the demo backends would drown the rest.
        .unwrap_or_else(|| "info,rmcp=warn".parse().expect("valid filter"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi),
        )
        .with(filter)
        .init();
}
