//! Runs the MRTR conformance fixture (or the server-suite fixture, or a demo backend) standalone.
//!
//! ```text
//! fixture-server [--listen ADDR] [--sse] [--suite | --demo alpha|beta [--state-key-file FILE]]
//! fixture-server --suite --stdio
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:0`. A demo backend seals its own `requestState` with a random
//! key unless `--state-key-file` names a file whose bytes (at least 32) are the key: then a
//! restarted backend still opens the states it handed out before (the soak restarts one). Once bound, the endpoint URL is printed
//! to stdout as `listening on http://ADDR/mcp`. The server stops on Ctrl-C
//! or SIGTERM. With `--stdio`, the server-suite fixture is served over stdin and stdout instead
//! (a 2026-07-28 stdio server, for the gateway's tests), until stdin closes.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use mrtr_backends::{
    ConformanceFixture, DemoBackend, DemoCatalog, ResponseMode, ServeOptions, StateSealer, SuiteFixture, cli,
    serve_stdio,
};

const PROGRAM: &str = "fixture-server";

const USAGE: &str = "usage: fixture-server [--listen ADDR] [--sse] [--suite | --demo alpha|beta [--state-key-file FILE]]\n\
    \x20      fixture-server --suite --stdio\n\
    \n\
    --listen ADDR           socket address to bind (default 127.0.0.1:0)\n\
    --sse                   answer requests with text/event-stream instead of application/json\n\
    --suite                 serve what the suite's server scenarios call (SuiteFixture) instead\n\
    --demo alpha|beta       serve that demo backend instead of the conformance fixture\n\
    --state-key-file FILE   the demo backend's requestState key: the file's bytes, at least 32 (default random)\n\
    --stdio                 serve the --suite fixture over stdin and stdout (the MCP stdio transport)\n";

#[derive(Debug)]
struct Args {
    listen: SocketAddr,
    mode: ResponseMode,
    demo: Option<String>,
    suite: bool,
    stdio: bool,
    state_key_file: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        listen: cli::DEFAULT_LISTEN,
        mode: ResponseMode::Json,
        demo: None,
        suite: false,
        stdio: false,
        state_key_file: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sse" => parsed.mode = ResponseMode::Sse,
            "--suite" => parsed.suite = true,
            "--stdio" => parsed.stdio = true,
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
            "--state-key-file" => {
                let value = args.next().ok_or("--state-key-file needs a file")?;
                parsed.state_key_file = Some(PathBuf::from(value));
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
    if parsed.stdio && !parsed.suite {
        return Err("--stdio serves the --suite fixture only".into());
    }
    if parsed.state_key_file.is_some() && parsed.demo.is_none() {
        return Err("--state-key-file applies to --demo backends only".into());
    }
    Ok(Some(parsed))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match cli::parsed_args(PROGRAM, USAGE, parse_args(std::env::args().skip(1))) {
        Ok(args) => args,
        Err(code) => return code,
    };
    if args.stdio {
        // stdout is the protocol's: the fixture's errors go to stderr.
        let served = match SuiteFixture::new() {
            Ok(fixture) => serve_stdio(fixture).await.map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        return match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{PROGRAM}: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let options = ServeOptions::new(args.mode).with_addr(args.listen);
    match args.demo.as_deref() {
        None if args.suite => cli::serve_until_signal(PROGRAM, SuiteFixture::new(), options).await,
        None => cli::serve_until_signal(PROGRAM, ConformanceFixture::new(), options).await,
        Some(identity) => {
            let catalog = if identity == "alpha" {
                DemoCatalog::Alpha
            } else {
                DemoCatalog::Beta
            };
            let backend = match &args.state_key_file {
                None => DemoBackend::new(identity, catalog).map_err(|error| error.to_string()),
                Some(file) => demo_with_key_file(identity, catalog, file),
            };
            cli::serve_until_signal(PROGRAM, backend, options).await
        }
    }
}

/// A demo backend whose `requestState` key is the content of `file`.
fn demo_with_key_file(
    identity: &str,
    catalog: DemoCatalog,
    file: &std::path::Path,
) -> Result<DemoBackend, String> {
    let key = std::fs::read(file).map_err(|error| format!("cannot read {}: {error}", file.display()))?;
    let sealer = StateSealer::with_key(identity, key)
        .map_err(|error| format!("{}: not a usable key: {error}", file.display()))?;
    Ok(DemoBackend::with_sealer(identity, catalog, sealer))
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
        assert!(parse(&["--suite", "--stdio"]).unwrap().unwrap().stdio);
        assert!(
            parse(&["--stdio"]).is_err(),
            "--stdio serves the suite fixture only"
        );
        assert!(parse(&["--suite"]).unwrap().unwrap().suite);
        assert!(parse(&["--suite", "--demo", "beta"]).is_err());
        let keyed = parse(&["--demo", "alpha", "--state-key-file", "/k"])
            .unwrap()
            .unwrap();
        assert_eq!(keyed.state_key_file, Some(PathBuf::from("/k")));
        assert!(parse(&["--state-key-file", "/k"]).is_err());
    }

    #[test]
    fn a_state_key_file_is_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("fixture-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let short = dir.join("short");
        std::fs::write(&short, b"too short").unwrap();
        assert!(demo_with_key_file("alpha", DemoCatalog::Alpha, &short).is_err());
        assert!(demo_with_key_file("alpha", DemoCatalog::Alpha, &dir.join("missing")).is_err());
        let good = dir.join("good");
        std::fs::write(&good, [7u8; 32]).unwrap();
        let backend = demo_with_key_file("alpha", DemoCatalog::Alpha, &good).unwrap();
        assert_eq!(backend.identity(), "alpha");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
