//! The mock backend as a stdio process driven straight over its pipes (issue 40): what the same
//! process serves without the gateway, for the cells of stdio backends ([`Pipe`],
//! [`run_segment`]).
//!
//! Many clients share one process, as the gateway's calls do: each request goes out under an id
//! of the driver's own on the one stdin, one line, and a reader routes each line of stdout to
//! the client whose id it answers. Nothing else sits between the clients and the process, so the
//! rate through the gateway over this rate is what the gateway's stdio door costs the process.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use crate::load::{self, Exchange, Segment};
use crate::procs::{self, Cpu};
use crate::workload::Workload;

/// Longest the driver waits for one answer before counting it a failure.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>>;

/// One mock backend process, spoken to over its stdin and stdout; killed on drop.
#[derive(Debug)]
pub struct Pipe {
    /// Name in messages and log file names.
    pub name: String,
    child: Child,
    writer: mpsc::Sender<Vec<u8>>,
    waiting: Waiting,
    next_id: AtomicU64,
}

/// How to start a [`Pipe`].
#[derive(Debug)]
pub struct PipeSpawn<'a> {
    /// Name in messages and log file names.
    pub name: &'a str,
    /// The `mock-backend` executable.
    pub program: &'a Path,
    /// Its arguments after `--stdio` (`--legacy`, `--work-us N`).
    pub args: Vec<String>,
    /// `taskset -c` list, or `None` not to pin.
    pub cpus: Option<&'a str>,
    /// Where its stderr goes.
    pub log_dir: &'a Path,
    /// Whether it speaks the `initialize` era: the driver opens the session first, as the
    /// gateway's handshake does.
    pub legacy: bool,
}

#[derive(Deserialize)]
struct Answered {
    id: Option<u64>,
}

impl PipeSpawn<'_> {
    /// Starts the process (and, in the `initialize` era, does its handshake).
    pub async fn start(self) -> io::Result<Pipe> {
        let mut argv: Vec<String> = Vec::new();
        if let Some(cpus) = self.cpus {
            argv.extend(["taskset".to_owned(), "-c".to_owned(), cpus.to_owned()]);
        }
        argv.push(self.program.display().to_string());
        argv.push("--stdio".to_owned());
        argv.extend(self.args);
        let log = std::fs::File::create(self.log_dir.join(format!("{}.log", self.name)))?;
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", argv[0])))?;
        let mut stdin = child.stdin.take().ok_or_else(|| io::Error::other("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no stdout"))?;
        // One write per message, newline included, as one line of the transport.
        let (writer, mut lines) = mpsc::channel::<Vec<u8>>(1024);
        tokio::spawn(async move {
            while let Some(mut line) = lines.recv().await {
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() {
                    break;
                }
            }
        });
        let waiting: Waiting = Arc::default();
        let routes = waiting.clone();
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = stdout.next_line().await {
                let Some(id) = serde_json::from_str::<Answered>(&line).ok().and_then(|a| a.id) else {
                    continue;
                };
                let client = routes.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                if let Some(client) = client {
                    let _ = client.send(line.into_bytes());
                }
            }
        });
        let pipe = Pipe {
            name: self.name.to_owned(),
            child,
            writer,
            waiting,
            next_id: AtomicU64::new(1),
        };
        if self.legacy {
            pipe.call(crate::mcp::initialize_request).await.1?;
            pipe.notify(crate::mcp::initialized_notification()).await?;
        }
        Ok(pipe)
    }
}

impl Pipe {
    /// Sends the request `body(id)` under a fresh id; its id and its answer (one line).
    pub async fn call(&self, body: impl FnOnce(u64) -> Vec<u8>) -> (u64, io::Result<Vec<u8>>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, answer);
        if self.writer.send(body(id)).await.is_err() {
            return (id, Err(io::Error::other("the process's stdin is closed")));
        }
        let result = match tokio::time::timeout(ANSWER_TIMEOUT, answered).await {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(_)) => Err(io::Error::other("the process's stdout closed")),
            Err(_) => {
                self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                Err(io::Error::other(format!("no answer within {ANSWER_TIMEOUT:?}")))
            }
        };
        (id, result)
    }

    async fn notify(&self, body: Vec<u8>) -> io::Result<()> {
        self.writer
            .send(body)
            .await
            .map_err(|_| io::Error::other("the process's stdin is closed"))
    }

    /// CPU time of the process so far.
    pub fn cpu(&self) -> io::Result<Cpu> {
        let pid = self.child.id().ok_or_else(|| io::Error::other("exited"))?;
        procs::cpu(pid)
    }

    /// Peak resident set size so far, in KiB.
    pub fn peak_rss_kib(&self) -> io::Result<u64> {
        let pid = self.child.id().ok_or_else(|| io::Error::other("exited"))?;
        procs::status_kib(pid, "VmHWM:")
    }
}

/// Runs `work` from `clients` concurrent clients over `pipe` for `warmup` and then `window`, as
/// [`load::run_segment`] does over HTTP connections; every answer is checked.
pub async fn run_segment(
    pipe: Arc<Pipe>,
    clients: usize,
    work: Arc<Workload>,
    warmup: Duration,
    window: Duration,
    at_start: impl FnOnce(),
    at_end: impl FnOnce(),
) -> io::Result<Segment> {
    let start = Instant::now() + warmup;
    let end = start + window;
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (pipe, work) = (pipe.clone(), work.clone());
        tasks.push(tokio::spawn(async move {
            let mut part = Segment::default();
            while Instant::now() < end {
                let sent = Instant::now();
                let (id, answer) = pipe.call(|id| work.body(id)).await;
                let done = Instant::now();
                // A failed exchange (the process gone, or silent for 10 s) ends this client, as a
                // broken connection does over HTTP.
                let (verdict, gone) = match answer {
                    Ok(line) => (
                        work.check(id, http::StatusCode::OK, Some("application/json"), &line),
                        false,
                    ),
                    Err(error) => (Err(error.to_string()), true),
                };
                part.count(
                    &Exchange {
                        id,
                        sent,
                        done,
                        verdict,
                    },
                    start,
                    end,
                );
                if gone {
                    break;
                }
            }
            part
        }));
    }
    load::gather(tasks, start, window, at_start, at_end).await
}
