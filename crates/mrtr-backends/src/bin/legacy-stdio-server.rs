//! Serves a [`LegacyBackend`] (an `initialize`-era MCP server) over stdin and stdout, the MCP
//! stdio transport, until stdin closes: the stdio backend of the gateway's tests.
//!
//! ```text
//! legacy-stdio-server [NAME]
//! ```
//!
//! `NAME` (default `legacy-stdio`) is the `serverInfo` name. It logs nothing to stdout, which
//! is the protocol's; one line goes to stderr once it serves.

use std::process::ExitCode;

use mrtr_backends::{LegacyBackend, serve_legacy_stdio};

#[tokio::main]
async fn main() -> ExitCode {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "legacy-stdio".to_owned());
    if name.starts_with('-') {
        eprintln!("usage: legacy-stdio-server [NAME]");
        return ExitCode::from(2);
    }
    eprintln!("legacy-stdio-server {name}: serving on stdio");
    match serve_legacy_stdio(LegacyBackend::new(&name)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("legacy-stdio-server: {error}");
            ExitCode::FAILURE
        }
    }
}
