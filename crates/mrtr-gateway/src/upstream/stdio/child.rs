//! One run of a stdio backend's process: started without a shell, in its own process group and
//! a clean environment ([`spawn`]); its stderr logged line by line under the backend's name (at
//! `debug`, or `info` with `--stdio-stderr info`), its last lines kept for the log when it exits
//! ([`Stderr`]); and
//! stopped the way the MCP stdio transport describes ([`stop`]): stdin closed, then `SIGTERM`,
//! then `SIGKILL`, each after a grace period.
//!
//! The environment is the configured variables plus `PATH` and `HOME` (which a command found on
//! the `PATH`, `npx` or `uvx`, needs) and the variables the operator lists in
//! `--stdio-pass-env` (`SSL_CERT_FILE`, `HTTPS_PROXY`, …, which `uvx` and `npx` need behind a
//! proxy or a private CA): nothing else of the gateway's, so never `MRTR_KEYS`, the keys file's
//! path or a backend credential.

use std::collections::VecDeque;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use crate::upstream::backend::StdioCommand;

/// Longest line read from a process's stdout: one JSON-RPC message (as much as the gateway
/// reads of any backend answer it translates). A longer one is dropped, with a warning.
pub(crate) const MAX_LINE: usize = 8 * 1024 * 1024;

/// Longest stderr line logged whole; a longer one is logged cut.
const MAX_LOG_LINE: usize = 8 * 1024;

/// The variables of the gateway's environment a child gets (besides the configured ones).
const INHERITED: [&str; 2] = ["PATH", "HOME"];

/// How many of a process's last stderr lines are kept, to log at `warn` when it exits.
const TAIL_LINES: usize = 10;

/// A started process: the child, its stdout as lines, and its stderr's reader.
pub(crate) struct Spawned {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: Lines<ChildStdout>,
    pub(crate) stderr: Stderr,
}

/// The reader of a process's stderr: each line logged (at `debug`, or at `info` with
/// `--stdio-stderr info`) and the last [`TAIL_LINES`] kept.
pub(crate) struct Stderr {
    reader: tokio::task::JoinHandle<()>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl Stderr {
    /// The last lines the process wrote, oldest first, once its stderr closed (waiting at most
    /// `wait` for that: a process it started may hold the pipe open).
    pub(crate) async fn tail(&mut self, wait: Duration) -> Vec<String> {
        let _ = tokio::time::timeout(wait, &mut self.reader).await;
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect()
    }
}

/// A pipe's lines to its end. A line that cannot be read (too long, not UTF-8) is an error and
/// reading goes on: tokio-util's framing follows an error with one `None` and then resumes, so
/// that `None` is not taken for the end.
pub(crate) struct Lines<R> {
    lines: FramedRead<R, LinesCodec>,
    after_error: bool,
}

impl<R: tokio::io::AsyncRead + Unpin> Lines<R> {
    fn new(lines: FramedRead<R, LinesCodec>) -> Self {
        Self {
            lines,
            after_error: false,
        }
    }

    /// The next line, or why one was dropped; `None` at the end of the pipe.
    pub(crate) async fn next(&mut self) -> Option<Result<String, tokio_util::codec::LinesCodecError>> {
        loop {
            match self.lines.next().await {
                Some(line) => {
                    self.after_error = line.is_err();
                    return Some(line);
                }
                None if self.after_error => self.after_error = false,
                None => return None,
            }
        }
    }
}

/// Starts `command` for the backend `name`, its stderr logged until it closes.
pub(crate) fn spawn(name: &str, command: &StdioCommand) -> io::Result<Spawned> {
    let mut process = Command::new(&command.program);
    process
        .args(&command.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A process the gateway loses track of (the gateway dies) is not left running.
        .kill_on_drop(true);
    let passed = command.pass_env.iter().map(String::as_str);
    for var in INHERITED.into_iter().chain(passed) {
        if let Some(value) = std::env::var_os(var) {
            process.env(var, value);
        }
    }
    process.envs(command.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &command.cwd {
        process.current_dir(cwd);
    }
    // Its own group, so that a stop reaches what a launcher (`npx`, `uvx`) starts in turn.
    #[cfg(unix)]
    process.process_group(0);
    let mut child = process.spawn()?;
    let missing = || io::Error::other("the process's pipes were not set up");
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    let backend = name.to_owned();
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let kept = tail.clone();
    let info = command.stderr_info;
    let reader = tokio::spawn(async move {
        // Read to the end whatever comes: a process whose stderr is not read blocks once the
        // pipe is full.
        let mut lines = Lines::new(FramedRead::new(
            stderr,
            LinesCodec::new_with_max_length(MAX_LOG_LINE),
        ));
        while let Some(line) = lines.next().await {
            match line {
                Ok(line) => {
                    let line = line.trim_end();
                    if info {
                        tracing::info!(backend, stderr = %line, "stdio backend");
                    } else {
                        tracing::debug!(backend, stderr = %line, "stdio backend");
                    }
                    let mut tail = kept.lock().unwrap_or_else(|e| e.into_inner());
                    if tail.len() == TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line.to_owned());
                }
                Err(error) => tracing::debug!(backend, %error, "stdio backend (a stderr line dropped)"),
            }
        }
    });
    Ok(Spawned {
        child,
        stdin,
        stdout: Lines::new(FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE))),
        stderr: Stderr { reader, tail },
    })
}

/// Most bytes of queued messages gathered into one write to a process's stdin.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes each message of `messages` to `stdin` as one line, until the channel closes or `close`
/// is cancelled; stdin is closed then (the first step of a stop). A message and its newline go
/// in one write, with whatever else is queued by then (up to [`WRITE_BATCH`]): a pipe write is a
/// system call, and under load many calls wait at once.
pub(crate) async fn write_lines(
    mut stdin: ChildStdin,
    mut messages: mpsc::Receiver<bytes::Bytes>,
    close: CancellationToken,
) {
    let mut batch = Vec::new();
    loop {
        let message = tokio::select! {
            message = messages.recv() => message,
            () = close.cancelled() => None,
        };
        let Some(message) = message else { break };
        batch.clear();
        batch.extend_from_slice(&message);
        batch.push(b'\n');
        while batch.len() < WRITE_BATCH {
            let Ok(message) = messages.try_recv() else { break };
            batch.extend_from_slice(&message);
            batch.push(b'\n');
        }
        if stdin.write_all(&batch).await.is_err() {
            // The process closed its stdin or exited: the supervisor sees the exit.
            break;
        }
        // A batch grown by a large message is not kept at that size.
        batch.shrink_to(WRITE_BATCH);
    }
}

/// Stops `child` once its stdin is closed: it gets `grace` to exit, then `SIGTERM` (to its
/// group) and `grace` again, then `SIGKILL`.
pub(crate) async fn stop(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status.ok();
    }
    signal(child, Signal::Term);
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status.ok();
    }
    signal(child, Signal::Kill);
    let _ = child.start_kill();
    child.wait().await.ok()
}

enum Signal {
    Term,
    Kill,
}

/// Sends `signal` to `child`'s process group (it leads it).
#[cfg(unix)]
fn signal(child: &Child, signal: Signal) {
    use rustix::process::{Pid, Signal as Sig, kill_process_group};
    let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
    else {
        return;
    };
    let signal = match signal {
        Signal::Term => Sig::TERM,
        Signal::Kill => Sig::KILL,
    };
    // It may have exited in between: nothing to do then.
    let _ = kill_process_group(pid, signal);
}

/// Elsewhere there are no signals: the `SIGKILL` step's `start_kill` is what stops it.
#[cfg(not(unix))]
fn signal(_child: &Child, _signal: Signal) {}
