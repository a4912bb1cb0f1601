//! What the standalone server binaries (`fixture-server`,
//! `tasks-fixture-server`) share: reading the parsed command line, the
//! `--listen` value, and serving a backend until Ctrl-C or SIGTERM.
//!
//! Each binary keeps its own argument parser and usage text; a typical `main`
//! is
//!
//! ```no_run
//! # use std::{net::SocketAddr, process::ExitCode};
//! # use mrtr_backends::{ResponseMode, ServeOptions, TasksFixture, cli};
//! # struct Args { listen: SocketAddr, mode: ResponseMode }
//! # fn parse_args(_: impl Iterator<Item = String>) -> Result<Option<Args>, String> { unimplemented!() }
//! # const USAGE: &str = "";
//! # async fn run() -> ExitCode {
//! let args = match cli::parsed_args("my-server", USAGE, parse_args(std::env::args().skip(1))) {
//!     Ok(args) => args,
//!     Err(code) => return code,
//! };
//! let options = ServeOptions::new(args.mode).with_addr(args.listen);
//! cli::serve_until_signal("my-server", TasksFixture::new("tasks"), options).await
//! # }
//! ```

use std::{
    fmt::Display,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    process::ExitCode,
};

use rmcp::ServerHandler;

use crate::serve::{ResponseMode, ServeOptions, serve_with};

/// The default `--listen` address, `127.0.0.1:0`.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// Parses a `--listen` value as a socket address; the error names the value.
pub fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    value
        .parse()
        .map_err(|error| format!("invalid --listen address {value:?}: {error}"))
}

/// Turns a parser's answer into the arguments to run with, or the exit code
/// to leave with: `Ok(None)` (`--help`) prints `usage` to stdout and exits
/// successfully; `Err(message)` prints `{program}: {message}` and `usage` to
/// stderr and exits with status 2.
pub fn parsed_args<A>(program: &str, usage: &str, parsed: Result<Option<A>, String>) -> Result<A, ExitCode> {
    match parsed {
        Ok(Some(args)) => Ok(args),
        Ok(None) => {
            print!("{usage}");
            Err(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprint!("{program}: {message}\n{usage}");
            Err(ExitCode::from(2))
        }
    }
}

/// Serves `handler` with `options`, prints `listening on {url} ({json|sse}
/// responses)` to stdout once bound, and runs until Ctrl-C or SIGTERM.
///
/// Every failure is printed to stderr prefixed with `{program}: ` and exits
/// with [`ExitCode::FAILURE`]: `handler` being an error (the backend could
/// not be built), the address not being bindable (`cannot listen on ADDR:
/// ...`), or the server stopping on an I/O error.
pub async fn serve_until_signal<H, E>(program: &str, handler: Result<H, E>, options: ServeOptions) -> ExitCode
where
    H: ServerHandler + Clone + Send + Sync + 'static,
    E: Display,
{
    let handler = match handler {
        Ok(handler) => handler,
        Err(error) => {
            eprintln!("{program}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (addr, mode) = (options.addr, options.mode);
    let served = match serve_with(handler, options).await {
        Ok(served) => served,
        Err(error) => {
            eprintln!("{program}: cannot listen on {addr}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mode = match mode {
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
            eprintln!("{program}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Completes on Ctrl-C or (on Unix) SIGTERM; on Ctrl-C only if the SIGTERM
/// handler cannot be installed.
pub async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listen() {
        assert_eq!(parse_listen("127.0.0.1:8123").unwrap().port(), 8123);
        assert!(parse_listen("nope").unwrap_err().contains("\"nope\""));
        assert_eq!(DEFAULT_LISTEN, SocketAddr::from(([127, 0, 0, 1], 0)));
    }
}
