//! Where the gateway's logs go: stderr, as text or as JSON lines, filtered by `RUST_LOG`
//! (default `info,rmcp=warn`; the [access log](crate::access) is the target
//! `mrtr_gateway::access`).
//!
//! ```
//! use mrtr_gateway::logging::LogFormat;
//!
//! assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
//! assert!("xml".parse::<LogFormat>().is_err());
//! ```

use std::str::FromStr;

use serde::Deserialize;

/// The filter used when `RUST_LOG` is unset or does not parse.
pub const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (colored on a terminal).
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON formatter): `timestamp`, `level`,
    /// `target`, `fields`.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format {other:?}: use text or json")),
        }
    }
}

/// Installs the process-wide subscriber: stderr in `format`, filtered by `RUST_LOG`.
pub fn init(format: LogFormat) {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;
    let filter: Targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| f.parse().ok())
        // rmcp logs every served request at info level; the demo backends would drown the rest.
        .unwrap_or_else(|| DEFAULT_FILTER.parse().expect("valid filter"));
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            tracing_subscriber::registry()
                .with(layer.with_ansi(ansi))
                .with(filter)
                .init();
        }
        LogFormat::Json => tracing_subscriber::registry()
            .with(layer.json())
            .with(filter)
            .init(),
    }
}
