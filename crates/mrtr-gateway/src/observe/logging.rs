//! Where the gateway's logs go: stderr, as text or as JSON lines, filtered by `RUST_LOG`
//! (default `info,rmcp=warn`; the [access log](crate::observe::access) is the target
//! `mrtr_gateway::access`).
//!
//! Access lines are gathered and written together ([`Stderr`]): at most a tenth of a second
//! late, in one `write` per batch instead of a system call per request (`docs/benchmarks.md`
//! has its cost). [`init`] has the access log write its lines into that batch itself, without a
//! `tracing` event each (`observe/access.rs`), except on a terminal, where the subscriber
//! writes them in color. Every other line is written at once, after the access lines
//! gathered before it, so the order holds. [`init`]'s guard writes what is left when dropped.

use std::io::{self, Write as _};
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use tracing::Metadata;
use tracing_subscriber::fmt::MakeWriter;

use crate::observe::access;

/// The filter used when `RUST_LOG` is unset or does not parse.
pub(crate) const DEFAULT_FILTER: &str = "info,rmcp=warn";

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

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
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

/// Installs the process-wide subscriber: stderr in `format`, filtered by `RUST_LOG`. Keep the
/// guard until the process ends: dropping it writes the access lines still gathered.
#[must_use = "dropping the guard at once writes gathered access lines only then; keep it for the process"]
pub(crate) fn init(format: LogFormat) -> LogGuard {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;
    let filter: Targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| f.parse().ok())
        // rmcp logs every served request at info level; the demo backends would drown the rest.
        .unwrap_or_else(|| DEFAULT_FILTER.parse().expect("valid filter"));
    let stderr = Stderr::new();
    stderr.start_flushing();
    let layer = tracing_subscriber::fmt::layer().with_writer(stderr.clone());
    let gathered = stderr.clone();
    let gather = move |line: &[u8]| gathered.gather(line);
    match format {
        LogFormat::Text => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            if !ansi {
                access::write_lines(false, gather);
            }
            tracing_subscriber::registry()
                .with(layer.with_ansi(ansi))
                .with(filter)
                .init();
        }
        LogFormat::Json => {
            access::write_lines(true, gather);
            tracing_subscriber::registry()
                .with(layer.json())
                .with(filter)
                .init();
        }
    }
    LogGuard(stderr)
}

/// Writes the access lines still gathered when dropped; see [`init`].
#[derive(Debug)]
pub(crate) struct LogGuard(Stderr);

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.0.flush_gathered();
    }
}

/// How long an access line may wait to be written.
pub(crate) const GATHER_FOR: Duration = Duration::from_millis(100);

/// How many gathered bytes are written at once without waiting.
pub(crate) const GATHER_AT_MOST: usize = 32 * 1024;

/// Standard error for tracing-subscriber: access lines are gathered and written every
/// [`GATHER_FOR`] (or once [`GATHER_AT_MOST`] bytes wait); other lines are written at once,
/// after the gathered ones.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stderr {
    shared: Arc<Gathered>,
}

#[derive(Debug, Default)]
struct Gathered {
    lines: Mutex<Vec<u8>>,
    /// Signalled when the first line of a batch arrives.
    arrived: Condvar,
}

impl Stderr {
    /// A writer with nothing gathered; call [`Stderr::start_flushing`] to have gathered lines
    /// written on time.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Starts the thread that writes each batch [`GATHER_FOR`] after its first line. It sleeps
    /// while nothing is gathered.
    pub(crate) fn start_flushing(&self) {
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || {
                loop {
                    let lines = lock(&shared.lines);
                    let lines = shared
                        .arrived
                        .wait_while(lines, |lines| lines.is_empty())
                        .unwrap_or_else(PoisonError::into_inner);
                    drop(lines);
                    std::thread::sleep(GATHER_FOR);
                    write_out(&mut lock(&shared.lines));
                }
            });
        if let Err(error) = started {
            // Lines are then written when a batch fills or another line comes, and at exit.
            eprintln!("mrtr-gateway: cannot start the log writer thread: {error}");
        }
    }

    /// Writes the gathered lines now.
    pub(crate) fn flush_gathered(&self) {
        write_out(&mut lock(&self.shared.lines));
    }

    /// Gathers `bytes` (whole access lines) to be written with the next batch.
    pub(crate) fn gather(&self, bytes: &[u8]) {
        let mut lines = lock(&self.shared.lines);
        let first = lines.is_empty();
        lines.extend_from_slice(bytes);
        if lines.len() >= GATHER_AT_MOST {
            write_out(&mut lines);
        } else if first {
            self.shared.arrived.notify_one();
        }
    }
}

fn lock(lines: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    // A panic while holding the lock leaves whole lines at worst: keep going.
    lines.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `lines` to stderr and empties it. A failed write drops them: logging must not stop
/// the gateway, and stderr that fails now will not take them later.
fn write_out(lines: &mut Vec<u8>) {
    if !lines.is_empty() {
        let _ = io::stderr().lock().write_all(lines);
        lines.clear();
    }
}

/// One event's writer from [`Stderr`].
#[derive(Debug)]
pub(crate) struct StderrWriter<'a> {
    stderr: &'a Stderr,
    gather: bool,
}

impl io::Write for StderrWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.gather {
            self.stderr.gather(bytes);
        } else {
            // Under the lock, so that no access line is gathered between the two writes.
            let mut lines = lock(&self.stderr.shared.lines);
            write_out(&mut lines);
            io::stderr().lock().write_all(bytes)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.gather {
            write_out(&mut lock(&self.stderr.shared.lines));
        }
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = StderrWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        StderrWriter {
            stderr: self,
            gather: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        StderrWriter {
            stderr: self,
            gather: meta.target() == access::TARGET,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_read_as_the_flag_names_them() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("xml".parse::<LogFormat>().is_err());
    }

    #[test]
    fn a_write_outside_an_access_line_goes_out_at_once() {
        use std::io::Write;
        let stderr = Stderr::new();
        stderr.make_writer().write_all(b"written at once\n").unwrap();
        assert!(lock(&stderr.shared.lines).is_empty());
        stderr.flush_gathered();
    }
}
