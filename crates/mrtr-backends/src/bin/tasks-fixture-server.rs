//! Runs the Tasks (SEP-2663) conformance fixture standalone.
//!
//! ```text
//! tasks-fixture-server [--listen ADDR] [--sse] [--identity NAME]
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:0`, `NAME` to `tasks`. Once bound, the endpoint URL is printed
//! to stdout as `listening on http://ADDR/mcp`. The server stops on Ctrl-C or SIGTERM.

use std::{net::SocketAddr, process::ExitCode};

use mrtr_backends::{ResponseMode, ServeOptions, TasksFixture, serve_with};

const USAGE: &str = "usage: tasks-fixture-server [--listen ADDR] [--sse] [--identity NAME]\n\
    \n\
    --listen ADDR        socket address to bind (default 127.0.0.1:0)\n\
    --sse                answer requests with text/event-stream instead of application/json\n\
    --identity NAME      name shown in task results (default \"tasks\")\n";

#[derive(Debug)]
struct Args {
    listen: SocketAddr,
    mode: ResponseMode,
    identity: String,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        mode: ResponseMode::Json,
        identity: "tasks".to_owned(),
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg, None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--sse" => parsed.mode = ResponseMode::Sse,
            "--json" => parsed.mode = ResponseMode::Json,
            "--listen" => {
                let value = value("--listen")?;
                parsed.listen = value
                    .parse()
                    .map_err(|error| format!("invalid --listen address {value:?}: {error}"))?;
            }
            "--identity" => parsed.identity = value("--identity")?,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(parsed))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
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
            eprint!("tasks-fixture-server: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fixture = match TasksFixture::new(args.identity) {
        Ok(fixture) => fixture,
        Err(error) => {
            eprintln!("tasks-fixture-server: {error}");
            return ExitCode::FAILURE;
        }
    };
    let served = match serve_with(fixture, ServeOptions::new(args.mode).with_addr(args.listen)).await {
        Ok(served) => served,
        Err(error) => {
            eprintln!("tasks-fixture-server: cannot listen on {}: {error}", args.listen);
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
            eprintln!("tasks-fixture-server: {error}");
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
        let args = parse(&["--listen", "127.0.0.1:8123", "--sse", "--identity=a"])
            .unwrap()
            .unwrap();
        assert_eq!(args.listen.port(), 8123);
        assert_eq!(args.mode, ResponseMode::Sse);
        assert_eq!(args.identity, "a");
        assert!(parse(&["--help"]).unwrap().is_none());
        assert!(parse(&["--identity"]).is_err());
        assert!(parse(&["--listen", "nope"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
    }
}
