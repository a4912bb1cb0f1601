//! One backend's process over its restarts ([`Process`]): started when first needed, its era
//! found by a handshake, supervised (started again with backoff when it exits), and stopped; and
//! the places of its calls in flight, with each principal's share of them when principals share
//! it ([`Process::share`], [`Process::place`]).

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::child;
use super::conn::{Conn, Hello, MAX_IN_FLIGHT, Place, Share, Shares, exited};
use crate::observe::metrics::{self, BackendMetrics, Held};
use crate::upstream::answer::UpstreamError;
use crate::upstream::backend::StdioCommand;
use crate::upstream::era::discover_result;
use crate::upstream::era::{
    self, AfterDiscover, DISCOVER_BODY, Era, INITIALIZE_ASKING_BODY, INITIALIZE_BODY,
};
use crate::upstream::health::Down;
use crate::upstream::session::hub::MAX_LISTENS;

/// How long a starting process has for its handshake (a first `npx -y` may be downloading).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `auto` waits for an answer to `server/discover` before trying `initialize`.
pub(crate) const DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// The first wait before a process that exited is started again.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(250);

/// The longest wait before a process that keeps exiting is started again.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How long a process must run for its next exit to count as the first again.
pub(crate) const STABLE_AFTER: Duration = Duration::from_secs(60);

/// How long the last stderr lines of a process that exited are waited for.
const STDERR_WAIT: Duration = Duration::from_secs(1);

/// How long a stopping process gets after its stdin is closed, and again after `SIGTERM`.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs failed in a row after which a call does not wait for the next one (see [`Process::up`]).
const CRASH_LOOP: u32 = 2;

/// One backend's process, over its restarts.
pub(super) struct Process {
    pub(super) name: Box<str>,
    pub(super) command: StdioCommand,
    pub(super) era: Era,
    pub(super) state: watch::Sender<State>,
    pub(super) started: AtomicBool,
    /// Runs that failed in a row (each run that stayed up long enough starts the count again).
    failing: AtomicU32,
    pub(super) stop: CancellationToken,
    pub(super) supervisor: Mutex<Option<JoinHandle<()>>>,
    pub(super) in_flight: Arc<Semaphore>,
    /// Each principal's share of `in_flight`, for a process that several principals share.
    pub(super) shares: Option<Shares>,
    /// Whether it serves one principal alone (its own process, [`Process::alone`]).
    alone: bool,
    /// Places for the process's `subscriptions/listen` streams, which take none of
    /// `in_flight`'s (they stay open).
    pub(super) listens: Arc<Semaphore>,
    /// When a request last picked it.
    last_used: Mutex<Instant>,
    pub(super) metrics: BackendMetrics,
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("era", &self.era)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
pub(super) enum State {
    /// Not started yet.
    Idle,
    /// Started (the run's number, from 1), its handshake not done.
    Starting(u64),
    Up(Arc<Conn>),
    /// Run number `.1` could not be started, failed its handshake or exited; the next one starts
    /// soon.
    Down(Down, u64),
    /// Stopped for good.
    Stopped,
}

/// Why no running process was found in time.
pub(super) enum Waited {
    Down(Down),
    Timeout,
    Stopped,
}

impl From<Waited> for UpstreamError {
    fn from(waited: Waited) -> Self {
        match waited {
            Waited::Down(down) => UpstreamError::Unreachable(down.detail),
            Waited::Timeout => UpstreamError::Timeout,
            Waited::Stopped => UpstreamError::Unreachable("the process is stopped".to_owned()),
        }
    }
}

impl Process {
    /// The (not yet started) process of the backend `name`, run with `command`, speaking `era`;
    /// with `share`, a process that principals share, each holding at most `share` of its
    /// places.
    pub(super) fn new(name: &str, command: StdioCommand, era: Era, share: Option<NonZeroUsize>) -> Self {
        Self {
            name: name.into(),
            command,
            era,
            state: watch::Sender::new(State::Idle),
            started: AtomicBool::new(false),
            failing: AtomicU32::new(0),
            stop: CancellationToken::new(),
            supervisor: Mutex::new(None),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            shares: share.map(Shares::new),
            alone: false,
            listens: Arc::new(Semaphore::new(MAX_LISTENS)),
            last_used: Mutex::new(Instant::now()),
            metrics: BackendMetrics::new(name),
        }
    }

    /// The process of one principal alone (a backend run per principal): its own requests
    /// during that principal's one call in flight go to the call's client (`conn.rs`).
    pub(super) fn alone(mut self) -> Self {
        self.alone = true;
        self
    }

    /// A request picked it now.
    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(super) fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call or a listen uses it.
    pub(super) fn busy(&self) -> bool {
        self.in_flight.available_permits() < MAX_IN_FLIGHT || self.listens.available_permits() < MAX_LISTENS
    }

    /// Stops it (stdin closed, then signals) and waits for its supervisor to end.
    pub(super) async fn stop_and_wait(&self) {
        self.stop.cancel();
        let supervisor = self.supervisor.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(supervisor) = supervisor {
            let _ = supervisor.await;
        }
    }

    /// Starts the supervisor, once.
    pub(super) fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let process = self.clone();
        let supervisor = tokio::spawn(async move { process.supervise().await });
        *self.supervisor.lock().unwrap_or_else(|e| e.into_inner()) = Some(supervisor);
    }

    /// The running process, waiting up to `timeout` for one: through a start or a restart, but
    /// not through a second failure (a process down when the wait began gets its next attempt,
    /// unless its last runs failed in a row: a server that keeps exiting fails calls at once
    /// rather than hold each one, and every list that fans out to it, through its backoff).
    pub(super) async fn up(self: &Arc<Self>, timeout: Duration) -> Result<Arc<Conn>, Waited> {
        self.start();
        let mut state = self.state.subscribe();
        // The last run whose failure does not end the wait (a watch shows only the latest
        // state, so runs are told apart by number, not by the transitions seen).
        let mut waited_out = None;
        let wait = async {
            loop {
                let current = state.borrow_and_update().clone();
                let before = match &current {
                    State::Idle => 0,
                    State::Starting(run) => run - 1,
                    State::Down(_, run) => *run,
                    State::Up(_) | State::Stopped => 0,
                };
                let waited_out = *waited_out.get_or_insert(before);
                if let State::Down(down, run) = &current
                    && *run == waited_out
                    && self.failing.load(Ordering::Relaxed) >= CRASH_LOOP
                {
                    return Err(Waited::Down(down.clone()));
                }
                match current {
                    State::Up(conn) => return Ok(conn),
                    State::Stopped => return Err(Waited::Stopped),
                    State::Down(down, run) if run > waited_out => return Err(Waited::Down(down)),
                    State::Idle | State::Starting(_) | State::Down(..) => {}
                }
                if state.changed().await.is_err() {
                    return Err(Waited::Stopped);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| Waited::Timeout)?
    }

    /// A place of `principal`'s share of the places, taken before waiting for one (so that
    /// calls waiting count too): `Ok(None)` for a process no principals share, `Err` with the
    /// share's size when the principal holds all of it already.
    pub(super) fn share(&self, principal: Option<&str>) -> Result<Option<Share>, usize> {
        match &self.shares {
            None => Ok(None),
            Some(shares) => shares.take(principal).map(Some).ok_or(shares.max()),
        }
    }

    /// The running process and a place among its requests in flight, within `timeout`, held
    /// with `share` (see [`share`](Self::share)).
    pub(super) async fn place(
        self: &Arc<Self>,
        timeout: Duration,
        share: Option<Share>,
    ) -> Result<(Arc<Conn>, Place), UpstreamError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let conn = self.up(timeout).await?;
        let permit = tokio::time::timeout_at(deadline, self.in_flight.clone().acquire_owned())
            .await
            .map_err(|_| UpstreamError::Timeout)?
            .map_err(|_| UpstreamError::Unreachable("the process is stopped".to_owned()))?;
        Ok((conn, Place::new(permit, share)))
    }

    /// Runs the process until it is stopped, starting it again after each exit.
    pub(super) async fn supervise(self: Arc<Self>) {
        let mut failures: u32 = 0;
        let mut run = 0;
        while !self.stop.is_cancelled() {
            let began = Instant::now();
            run += 1;
            let down = self.run_once(run).await;
            if self.stop.is_cancelled() {
                break;
            }
            metrics::stdio_down(&self.name, down.reason);
            failures = if began.elapsed() >= STABLE_AFTER {
                1
            } else {
                failures + 1
            };
            let backoff = BACKOFF_FIRST
                .saturating_mul(1 << (failures - 1).min(16))
                .min(BACKOFF_MAX);
            if down.reason == "not_found" {
                // Nothing will change by itself: an error, still tried again (with backoff) in
                // case the program is installed meanwhile.
                tracing::error!(
                    backend = &*self.name,
                    reason = down.reason,
                    detail = %down.detail,
                    restart_in_ms = backoff.as_millis() as u64,
                    "stdio backend cannot start"
                );
            } else {
                tracing::warn!(
                    backend = &*self.name,
                    reason = down.reason,
                    detail = %down.detail,
                    restart_in_ms = backoff.as_millis() as u64,
                    "stdio backend down"
                );
            }
            self.failing.store(failures, Ordering::Relaxed);
            self.state.send_replace(State::Down(down, run));
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.stop.cancelled() => break,
            }
        }
        self.state.send_replace(State::Stopped);
    }

    /// One run: spawn, handshake, serve until the process exits or the gateway stops it.
    /// Returns why it is down.
    pub(super) async fn run_once(&self, run: u64) -> Down {
        self.state.send_replace(State::Starting(run));
        let spawned = match child::spawn(&self.name, &self.command) {
            Ok(spawned) => spawned,
            Err(error) => return not_started(&self.command, &error),
        };
        let child::Spawned {
            mut child,
            stdin,
            mut stdout,
            mut stderr,
        } = spawned;
        let _running = Held::new(metrics::STDIO_PROCESSES, Some(&self.name));
        let (writer, lines) = mpsc::channel(MAX_IN_FLIGHT * 4);
        let close = self.stop.child_token();
        tokio::spawn(child::write_lines(stdin, lines, close.clone()));
        let conn = Arc::new(Conn {
            writer,
            calls: Mutex::new(Some(HashMap::new())),
            next_id: AtomicU64::new(1),
            alone: self.alone,
            hello: std::sync::OnceLock::new(),
            hub: Default::default(),
        });
        let reader = {
            let conn = conn.clone();
            let name = self.name.clone();
            tokio::spawn(async move {
                while let Some(line) = stdout.next().await {
                    match line {
                        Ok(line) => conn.dispatch(&name, line),
                        Err(error) => tracing::warn!(backend = &*name, %error, "stdio backend line dropped"),
                    }
                }
                // The process closed its stdout: every call waiting gets its error now.
                conn.close();
            })
        };
        let down = tokio::select! {
            hello = handshake(&conn, self.era) => match hello {
                Ok(hello) => {
                    tracing::info!(
                        backend = &*self.name,
                        era = hello.found.era(),
                        protocol_version = %hello.found.version,
                        server = %hello.found.server_text(),
                        "stdio backend started"
                    );
                    let _ = conn.hello.set(hello);
                    self.state.send_replace(State::Up(conn.clone()));
                    tokio::select! {
                        status = child.wait() => {
                            let tail = stderr.tail(STDERR_WAIT).await;
                            tracing::warn!(
                                backend = &*self.name,
                                stderr = %tail.join("\n"),
                                "stdio backend exited; its last stderr lines"
                            );
                            exit(status, "")
                        }
                        () = self.stop.cancelled() => stopped(),
                    }
                }
                // A handshake cut short by the process closing its stdout is its exit, whichever
                // of the two the select saw first: the reason does not depend on that race.
                Err(down) if down.reason != "timeout" => {
                    match tokio::time::timeout(STDERR_WAIT, child.wait()).await {
                        Ok(status) => self.exited_in_handshake(status, &mut stderr).await,
                        Err(_) => down,
                    }
                }
                Err(down) => down,
            },
            status = child.wait() => self.exited_in_handshake(status, &mut stderr).await,
            () = self.stop.cancelled() => stopped(),
        };
        // Whatever ended the run, the process goes: stdin closed, then signals.
        close.cancel();
        if let Some(status) = child::stop(&mut child, STOP_GRACE).await {
            tracing::debug!(backend = &*self.name, %status, "stdio backend process ended");
        }
        reader.abort();
        conn.close();
        down
    }

    /// A process that exited during its handshake: its last stderr lines logged, `exited`.
    async fn exited_in_handshake(
        &self,
        status: std::io::Result<std::process::ExitStatus>,
        stderr: &mut child::Stderr,
    ) -> Down {
        let tail = stderr.tail(STDERR_WAIT).await;
        tracing::warn!(
            backend = &*self.name,
            stderr = %tail.join("\n"),
            "stdio backend exited during its handshake; its last stderr lines"
        );
        Down {
            reason: "exited",
            ..exit(status, " during its handshake")
        }
    }
}

/// Why a process that could not be started is down: `not_found` when its program is not
/// there (not on the `PATH` the process gets, or no such file), else `unreachable`.
fn not_started(command: &StdioCommand, error: &std::io::Error) -> Down {
    if error.kind() == std::io::ErrorKind::NotFound {
        return Down {
            reason: "not_found",
            detail: format!(
                "cannot start `{command}`: the program `{}` was not found (is it installed, and on the PATH the gateway passes on?)",
                command.program
            ),
        };
    }
    Down {
        reason: "unreachable",
        detail: format!("cannot start `{command}`: {error}"),
    }
}

/// Why a process that ended (`when`: a phrase, or nothing) is down.
pub(super) fn exit(status: std::io::Result<std::process::ExitStatus>, when: &str) -> Down {
    Down {
        reason: "unreachable",
        detail: match status {
            Ok(status) => format!("the process exited{when} ({status})"),
            Err(error) => format!("the process was lost: {error}"),
        },
    }
}

pub(super) fn stopped() -> Down {
    Down {
        reason: "unreachable",
        detail: "stopped".to_owned(),
    }
}

/// Finds the process's era as `era` allows, as the health probe does for an HTTP backend.
pub(super) async fn handshake(conn: &Arc<Conn>, era: Era) -> Result<Hello, Down> {
    let mut not_modern = None;
    if era != Era::Legacy {
        let timeout = if era == Era::Auto {
            DISCOVER_TIMEOUT
        } else {
            START_TIMEOUT
        };
        match conn
            .request(DISCOVER_BODY.as_bytes(), "server/discover", None, timeout)
            .await
        {
            Ok(answer) => match era::after_discover(&answer, era)? {
                AfterDiscover::Modern(found) => {
                    return Ok(Hello {
                        found,
                        discover: None,
                    });
                }
                AfterDiscover::Fallback(what) => not_modern = Some(what),
            },
            Err(UpstreamError::Timeout) if era == Era::Auto => {
                not_modern = Some(format!("no answer within {} s", DISCOVER_TIMEOUT.as_secs()));
            }
            Err(error) => return Err(era::unavailable(error)),
        }
    }
    // A principal's own process declares what its clients may be asked (`era.rs`).
    let initialize = if conn.alone {
        INITIALIZE_ASKING_BODY
    } else {
        INITIALIZE_BODY
    };
    let answer = conn
        .request(initialize.as_bytes(), "initialize", None, START_TIMEOUT)
        .await
        .map_err(era::unavailable)?;
    let found = era::initialized(&answer, not_modern.as_deref())?;
    let result: Value = answer
        .message
        .as_ref()
        .and_then(|m| serde_json::from_slice::<Value>(m).ok())
        .map(|m| m["result"].clone())
        .unwrap_or_default();
    let initialized = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    conn.writer
        .try_send(initialized)
        .map_err(|_| era::unavailable(exited()))?;
    Ok(Hello {
        found,
        discover: Some(discover_result(&result)),
    })
}
