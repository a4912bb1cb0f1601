//! Runs the MRTR conformance fixture (or a demo backend) standalone.
//!
//! ```text
//! fixture-server [--listen ADDR] [--sse] [--demo alpha|beta]
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:0`. Once bound, the endpoint URL is printed
//! to stdout as `listening on http://ADDR/mcp`. The server stops on Ctrl-C
//! or SIGTERM.

use std::{net::SocketAddr, process::ExitCode};

use mrtr_backends::{ConformanceFixture, DemoBackend, ResponseMode, ServeOptions, serve_with};

const USAGE: &str = "usage: fixture-server [--listen ADDR] [--sse] [--demo alpha|beta]\n\
    \n\
    --listen ADDR        socket address to bind (default 127.0.0.1:0)\n\
    --sse                answer requests with text/event-stream instead of application/json\n\
    --demo alpha|beta    serve that demo backend instead of the conformance fixture\n";

#[derive(Debug)]
struct Args {
    listen: SocketAddr,
    mode: ResponseMode,
    demo: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        mode: ResponseMode::Json,
        demo: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sse" => parsed.mode = ResponseMode::Sse,
            "--json" => parsed.mode = ResponseMode::Json,
            "--listen" => {
                let value = args.next().ok_or("--listen needs an address")?;
                parsed.listen = value
                    .parse()
                    .map_err(|error| format!("invalid --listen address {value:?}: {error}"))?;
            }
            "--demo" => {
                let value = args.next().ok_or("--demo needs alpha or beta")?;
                if value != "alpha" && value != "beta" {
                    return Err(format!("--demo must be alpha or beta, not {value:?}"));
                }
                parsed.demo = Some(value);
            }
            "-h" | "--help" => return Ok(None),
            other => {
                if let Some(value) = other.strip_prefix("--listen=") {
                    parsed.listen = value
                        .parse()
                        .map_err(|error| format!("invalid --listen address {value:?}: {error}"))?;
                } else {
                    return Err(format!("unknown argument {other:?}"));
                }
            }
        }
    }
    Ok(Some(parsed))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprint!("fixture-server: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let options = ServeOptions::new(args.mode).with_addr(args.listen);
    let served = match args.demo.as_deref() {
        None => match ConformanceFixture::new() {
            Ok(fixture) => serve_with(fixture, options).await,
            Err(error) => {
                eprintln!("fixture-server: {error}");
                return ExitCode::FAILURE;
            }
        },
        Some(identity) => {
            let backend = if identity == "alpha" {
                DemoBackend::alpha(identity)
            } else {
                DemoBackend::beta(identity)
            };
            match backend {
                Ok(backend) => serve_with(backend, options).await,
                Err(error) => {
                    eprintln!("fixture-server: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let served = match served {
        Ok(served) => served,
        Err(error) => {
            eprintln!("fixture-server: cannot listen on {}: {error}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let mode = match args.mode {
        ResponseMode::Json => "json",
        ResponseMode::Sse => "sse",
    };
    println!("listening on {} ({mode} responses)", served.url());
    let handle = served.shutdown_handle();
    tokio::spawn(async move {
        shutdown_signal().await;
        handle.shutdown();
    });
    match served.wait().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fixture-server: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_flags() {
        let args = parse(&["--listen", "127.0.0.1:8123", "--sse"]).unwrap().unwrap();
        assert_eq!(args.listen.port(), 8123);
        assert_eq!(args.mode, ResponseMode::Sse);
        let args = parse(&["--listen=127.0.0.1:9"]).unwrap().unwrap();
        assert_eq!(args.mode, ResponseMode::Json);
        assert!(parse(&["--help"]).unwrap().is_none());
        assert!(parse(&["--listen"]).is_err());
        assert!(parse(&["--listen", "nope"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
    }
}
