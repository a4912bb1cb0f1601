//! Runs the MRTR conformance fixture (or the server-suite fixture, or a demo backend) standalone.
//!
//! ```text
//! fixture-server [--listen ADDR] [--sse] [--suite | --demo alpha|beta]
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:0`. Once bound, the endpoint URL is printed
//! to stdout as `listening on http://ADDR/mcp`. The server stops on Ctrl-C
//! or SIGTERM.

use std::{net::SocketAddr, process::ExitCode};

use mrtr_backends::{ConformanceFixture, DemoBackend, ResponseMode, ServeOptions, SuiteFixture, cli};

const PROGRAM: &str = "fixture-server";

const USAGE: &str = "usage: fixture-server [--listen ADDR] [--sse] [--suite | --demo alpha|beta]\n\
    \n\
    --listen ADDR        socket address to bind (default 127.0.0.1:0)\n\
    --sse                answer requests with text/event-stream instead of application/json\n\
    --suite              serve what the suite's server scenarios call (SuiteFixture) instead\n\
    --demo alpha|beta    serve that demo backend instead of the conformance fixture\n";

#[derive(Debug)]
struct Args {
    listen: SocketAddr,
    mode: ResponseMode,
    demo: Option<String>,
    suite: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        listen: cli::DEFAULT_LISTEN,
        mode: ResponseMode::Json,
        demo: None,
        suite: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sse" => parsed.mode = ResponseMode::Sse,
            "--suite" => parsed.suite = true,
            "--json" => parsed.mode = ResponseMode::Json,
            "--listen" => {
                let value = args.next().ok_or("--listen needs an address")?;
                parsed.listen = cli::parse_listen(&value)?;
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
                    parsed.listen = cli::parse_listen(value)?;
                } else {
                    return Err(format!("unknown argument {other:?}"));
                }
            }
        }
    }
    if parsed.suite && parsed.demo.is_some() {
        return Err("--suite and --demo exclude each other".into());
    }
    Ok(Some(parsed))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match cli::parsed_args(PROGRAM, USAGE, parse_args(std::env::args().skip(1))) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let options = ServeOptions::new(args.mode).with_addr(args.listen);
    match args.demo.as_deref() {
        None if args.suite => cli::serve_until_signal(PROGRAM, SuiteFixture::new(), options).await,
        None => cli::serve_until_signal(PROGRAM, ConformanceFixture::new(), options).await,
        Some(identity) => {
            let backend = if identity == "alpha" {
                DemoBackend::alpha(identity)
            } else {
                DemoBackend::beta(identity)
            };
            cli::serve_until_signal(PROGRAM, backend, options).await
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
        assert!(parse(&["--suite"]).unwrap().unwrap().suite);
        assert!(parse(&["--suite", "--demo", "beta"]).is_err());
    }
}
