//! Runs the Tasks (SEP-2663) conformance fixture standalone.
//!
//! ```text
//! tasks-fixture-server [--listen ADDR] [--sse] [--identity NAME]
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:0`, `NAME` to `tasks`. Once bound, the endpoint URL is printed
//! to stdout as `listening on http://ADDR/mcp`. The server stops on Ctrl-C or SIGTERM.

use std::{net::SocketAddr, process::ExitCode};

use mrtr_backends::{ResponseMode, ServeOptions, TasksFixture, cli};

const PROGRAM: &str = "tasks-fixture-server";

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
        listen: cli::DEFAULT_LISTEN,
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
            "--listen" => parsed.listen = cli::parse_listen(&value("--listen")?)?,
            "--identity" => parsed.identity = value("--identity")?,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
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
    cli::serve_until_signal(PROGRAM, TasksFixture::new(args.identity), options).await
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
