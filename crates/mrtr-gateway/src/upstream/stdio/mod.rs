//! stdio backends: MCP servers the gateway starts as processes and speaks to over their stdin
//! and stdout, one JSON-RPC message per line ([`StdioBackends`]).
//!
//! * **One process per backend per replica**, started when the health probe or a request first
//!   needs it, without a shell, in a clean environment ([`child`]). A stdio server is one session
//!   by nature, so every client of the replica shares it (`docs/gateway.md` says which servers are
//!   safe to share).
//! * **Its era**, as for an HTTP backend: `auto` sends `server/discover` first and falls back to
//!   `initialize` on any answer that is not a modern one, or none within [`DISCOVER_TIMEOUT`]
//!   (the stdio transport's rule: the fallback must not depend on one error code); `modern` and
//!   `legacy` send only theirs. A legacy process is spoken to as `upstream/legacy.rs` speaks to a
//!   legacy HTTP backend (its requests lose the 2026-07-28 `_meta` keys, its answers come back in
//!   modern form through `upstream/translate.rs`, `server/discover` is answered from its
//!   `initialize` result).
//! * **Ids**: every request goes out under an id of the gateway's own, and its `progressToken`
//!   with it, so that concurrent clients' ids and tokens never collide; answers get the client's
//!   back. At most [`MAX_IN_FLIGHT`] requests are in flight per process; more wait for a place,
//!   up to the response timeout.
//! * **Answers**: one that comes within the response timeout is the HTTP answer (JSON); one that
//!   streams progress first, or takes longer, is an SSE stream ([`ChannelBody`]) that ends with
//!   it. A client that goes away gets `notifications/cancelled` sent for its request.
//! * **The process's own requests** (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`) are answered with an error that names the reason, since no one client owns
//!   the process; `ping` is answered. Its log notifications go to the gateway's debug log.
//! * **Exit**: requests in flight get a JSON-RPC error at once; the process is started again
//!   after a backoff ([`BACKOFF_FIRST`] doubling to [`BACKOFF_MAX`]; reset once it has run for
//!   [`STABLE_AFTER`]); requests arriving meanwhile wait for it, up to the response timeout.
//! * **Stop** (drain, shutdown): stdin closed, then `SIGTERM` and `SIGKILL`, [`STOP_GRACE`]
//!   apart.

mod child;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_mrtr::Route;

use super::body::{ChannelBody, ProxyBody, Relayed};
use super::era::{self, AfterDiscover, DISCOVER_BODY, Era, INITIALIZE_BODY};
use super::forward::{Answer, ForwardError};
use super::health::{Down, Found};
use super::legacy::discover_result;
use super::translate::{Reply, Translation, outgoing};
use super::{Backend, BackendSpecError, DEFAULT_STALL_TIMEOUT};
use crate::jsonrpc::{self, INTERNAL_ERROR, METHOD_NOT_FOUND, RawObject};
use crate::observe::metrics::{BackendMetrics, MethodLabel};

/// Most requests in flight per process; more wait for one to finish.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

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

/// How long a stopping process gets after its stdin is closed, and again after `SIGTERM`.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

/// Most notifications queued for one call that its client has not read yet; later progress is
/// dropped (the response always has room).
const CALL_QUEUE: usize = 64;

/// The command a stdio backend is started with: a program, its arguments, the environment
/// variables it gets besides `PATH` and `HOME`, and its working directory.
///
/// ```
/// use mrtr_gateway::StdioCommand;
///
/// let command = StdioCommand::parse("uvx 'mcp-server-fetch' --ignore-robots-txt")
///     .unwrap()
///     .with_env("LOG_LEVEL", "debug");
/// assert_eq!(command.to_string(), "uvx mcp-server-fetch --ignore-robots-txt");
/// assert!(StdioCommand::parse("").is_err());
/// assert!(StdioCommand::parse("node 'unclosed").is_err());
/// // Debug shows the environment's names, never its values (they may be credentials).
/// let command = command.with_env("API_TOKEN", "s3cret");
/// assert!(!format!("{command:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StdioCommand {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
}

impl StdioCommand {
    /// The command `argv`: the program (looked up on `PATH` when it has no `/`), then its
    /// arguments, passed as they are (no shell).
    pub fn new<I, S>(argv: I) -> Result<Self, BackendSpecError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut argv = argv.into_iter().map(Into::into);
        let program = argv
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| BackendSpecError::new("a stdio backend's command is empty".to_owned()))?;
        Ok(Self {
            program,
            args: argv.collect(),
            env: Vec::new(),
            cwd: None,
        })
    }

    /// A command line split as a POSIX shell splits words (quotes and backslashes), without
    /// running one: no expansion, no pipes, no redirections.
    pub fn parse(line: &str) -> Result<Self, BackendSpecError> {
        let words = shlex::split(line).ok_or_else(|| {
            BackendSpecError::new(format!("cannot split the command {line:?}: an unclosed quote?"))
        })?;
        Self::new(words)
    }

    /// Sets the variable `name` to `value` in the process's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the process in `dir` (the gateway's working directory otherwise).
    pub fn with_cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }
}

impl fmt::Display for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = std::iter::once(&self.program).chain(&self.args);
        match shlex::try_join(words.clone().map(String::as_str)) {
            Ok(line) => f.write_str(&line),
            // A word with a NUL byte cannot be quoted (nor started): shown unquoted.
            Err(_) => f.write_str(&words.cloned().collect::<Vec<_>>().join(" ")),
        }
    }
}

impl fmt::Debug for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("StdioCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &env)
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// The processes of the stdio backends; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct StdioBackends {
    processes: Vec<(Route, Arc<Process>)>,
    response_timeout: Duration,
}

impl Drop for StdioBackends {
    fn drop(&mut self) {
        // A proxy dropped without a stop does not leave its processes running.
        for (_, process) in &self.processes {
            process.stop.cancel();
        }
    }
}

/// One backend's process, over its restarts.
struct Process {
    name: Box<str>,
    command: StdioCommand,
    era: Era,
    state: watch::Sender<State>,
    started: AtomicBool,
    stop: CancellationToken,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    in_flight: Arc<Semaphore>,
    metrics: BackendMetrics,
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
enum State {
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

/// One running process: where its messages go and which calls wait for answers.
struct Conn {
    writer: mpsc::Sender<Bytes>,
    /// The calls waiting, by the request id the gateway gave them (raw JSON); `None` once the
    /// process's stdout closed (no answer can come).
    calls: Mutex<Option<HashMap<Box<str>, mpsc::Sender<Relayed>>>>,
    next_id: AtomicU64,
    /// What its handshake found (set once, before the process is `Up`).
    hello: std::sync::OnceLock<Hello>,
}

struct Hello {
    found: Found,
    /// For a legacy process: the `server/discover` result made from its `initialize` result.
    discover: Option<Value>,
}

/// A call's place among those in flight: given back when the call ends.
struct CallGuard {
    conn: Arc<Conn>,
    ours: Box<str>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(calls) = self.conn.calls().as_mut() {
            calls.remove(&self.ours);
        }
    }
}

/// Why a request was not sent.
enum Unsent {
    /// Not a JSON-RPC request object with object `params`.
    NotJsonRpc,
    /// The process's pipes are closed.
    Gone,
    /// The process does not read its stdin: requests are queued up to the bound.
    Stuck,
}

/// A request sent, its answer to come.
struct Call {
    messages: mpsc::Receiver<Relayed>,
    translation: Translation,
    guard: CallGuard,
}

impl Conn {
    fn calls(&self) -> std::sync::MutexGuard<'_, Option<HashMap<Box<str>, mpsc::Sender<Relayed>>>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No answer can come any more: every call waiting gets its error now, and no new one is
    /// taken.
    fn close(&self) {
        *self.calls() = None;
    }

    /// The call waiting for the id `ours` (raw JSON); with `remove`, taken out (its response came).
    fn call(&self, ours: &str, remove: bool) -> Option<mpsc::Sender<Relayed>> {
        let mut calls = self.calls();
        let calls = calls.as_mut()?;
        if remove {
            calls.remove(ours)
        } else {
            calls.get(ours).cloned()
        }
    }

    fn modern(&self) -> bool {
        self.hello.get().is_some_and(|h| h.found.modern)
    }

    /// Sends `body`, a `method` request, under an id of the gateway's own.
    fn send(
        self: &Arc<Self>,
        body: &[u8],
        method: &str,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Call, Unsent> {
        let ours = format!("\"mrtr-{}\"", self.next_id.fetch_add(1, Ordering::Relaxed));
        // The handshake's own requests go as they are; after it, a legacy process's in legacy form.
        let legacy = !self.modern() && self.hello.get().is_some();
        let request = outgoing(body, &ours, legacy, true).ok_or(Unsent::NotJsonRpc)?;
        let (sender, messages) = mpsc::channel(CALL_QUEUE + 1);
        self.calls()
            .as_mut()
            .ok_or(Unsent::Gone)?
            .insert(ours.as_str().into(), sender);
        let guard = CallGuard {
            conn: self.clone(),
            ours: ours.as_str().into(),
            _permit: permit,
        };
        self.writer.try_send(request.body).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unsent::Stuck,
            mpsc::error::TrySendError::Closed(_) => Unsent::Gone,
        })?;
        let writer = self.writer.clone();
        let reply: Reply = Arc::new(move |message| {
            // A full or closed pipe: the process is stuck or gone, and learns nothing more.
            let _ = writer.try_send(message);
        });
        let theirs = request.id.as_deref().unwrap_or("null");
        let mut translation = Translation::new(&ours, theirs, reply)
            .for_method(method)
            .with_progress(request.progress);
        if self.modern() {
            translation = translation.modern();
        }
        Ok(Call {
            messages,
            translation,
            guard,
        })
    }

    /// Routes one line of the process's stdout.
    fn dispatch(&self, backend: &str, line: String) {
        let Ok(message) = serde_json::from_str::<RawObject>(&line) else {
            if !line.trim().is_empty() {
                tracing::warn!(
                    backend,
                    "stdio backend wrote a line that is not a JSON-RPC message; dropped"
                );
            }
            return;
        };
        let id = message.get("id").map(RawValue::get).filter(|id| *id != "null");
        match (message.get("method"), id) {
            (None, Some(id)) => {
                match self.call(id, true) {
                    // The queue keeps a place for the response.
                    Some(call) => {
                        let _ = call.try_send(Relayed {
                            message: Bytes::from(line),
                            response: true,
                        });
                    }
                    None => tracing::debug!(backend, id, "stdio backend answered a call no one waits for"),
                }
            }
            (Some(method), Some(id)) => {
                let method: String = serde_json::from_str(method.get()).unwrap_or_default();
                let _ = self.writer.try_send(answer_process_request(id, &method));
            }
            (Some(method), None) if method.get() == r#""notifications/progress""# => {
                let token = message
                    .get("params")
                    .and_then(|p| serde_json::from_str::<RawObject>(p.get()).ok())
                    .and_then(|p| p.get("progressToken").map(|t| t.get().to_owned()));
                let call = token.and_then(|t| self.call(&t, false));
                if let Some(call) = call
                    && call.capacity() > 1
                {
                    let _ = call.try_send(Relayed {
                        message: Bytes::from(line),
                        response: false,
                    });
                }
            }
            (Some(method), None) => {
                tracing::debug!(backend, method = method.get(), message = %line, "stdio backend notification (not relayed)");
            }
            (None, None) => {
                tracing::warn!(backend, message = %line, "stdio backend sent an error about no request");
            }
        }
    }

    /// Sends `body` (a `method` request) and waits up to `timeout` for the response, translated.
    async fn request(
        self: &Arc<Self>,
        body: &[u8],
        method: &str,
        permit: Option<OwnedSemaphorePermit>,
        timeout: Duration,
    ) -> Result<Answer, ForwardError> {
        let mut call = self.send(body, method, permit).map_err(|unsent| match unsent {
            Unsent::NotJsonRpc => ForwardError::Unreachable("not a JSON-RPC request".to_owned()),
            Unsent::Gone => exited(),
            Unsent::Stuck => stuck(),
        })?;
        let message = response(&mut call, timeout).await?;
        Ok(Answer {
            status: StatusCode::OK,
            message: Some(call.translation.one(message)),
        })
    }
}

/// Waits up to `timeout` for `call`'s response (its notifications skipped), as it came.
async fn response(call: &mut Call, timeout: Duration) -> Result<Bytes, ForwardError> {
    let wait = async {
        while let Some(relayed) = call.messages.recv().await {
            if relayed.response {
                return Ok(relayed.message);
            }
        }
        Err(exited())
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| ForwardError::Timeout)?
}

fn exited() -> ForwardError {
    ForwardError::Unreachable("the process exited before answering".to_owned())
}

fn stuck() -> ForwardError {
    ForwardError::Unreachable("the process does not read its input".to_owned())
}

/// The gateway's answer to a request a shared process sent: no one client can answer it.
fn answer_process_request(id: &str, method: &str) -> Bytes {
    if method == "ping" {
        return Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
    }
    let message = format!(
        "mrtr-gateway shares this stdio server among all its clients, so no one client can answer {method} (see docs/gateway.md, stdio backends)"
    );
    jsonrpc::error_body(Some(id), METHOD_NOT_FOUND, &message, None)
}

impl StdioBackends {
    /// The (not yet started) processes of the stdio backends among `backends`; requests wait at
    /// most `response_timeout` (unless a backend has its own) for a process and an answer.
    pub(crate) fn new(backends: &[Backend], response_timeout: Duration) -> Self {
        let processes = backends
            .iter()
            .filter_map(|backend| {
                let command = backend.command()?.clone();
                let process = Process {
                    name: backend.name().into(),
                    command,
                    era: backend.era(),
                    state: watch::Sender::new(State::Idle),
                    started: AtomicBool::new(false),
                    stop: CancellationToken::new(),
                    supervisor: Mutex::new(None),
                    in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
                    metrics: BackendMetrics::new(backend.name()),
                };
                Some((backend.route().clone(), Arc::new(process)))
            })
            .collect();
        Self {
            processes,
            response_timeout,
        }
    }

    /// Whether `backend` is a stdio backend.
    pub(crate) fn serves(backend: &Backend) -> bool {
        backend.command().is_some()
    }

    fn process(&self, backend: &Backend) -> Result<&Arc<Process>, ForwardError> {
        self.processes
            .iter()
            .find(|(route, _)| route == backend.route())
            .map(|(_, process)| process)
            .ok_or_else(|| ForwardError::Unreachable("not a configured stdio backend".to_owned()))
    }

    fn timeout(&self, backend: &Backend) -> Duration {
        backend.timeout().unwrap_or(self.response_timeout)
    }

    /// The health probe: starts the process if it is not running, and says what it is once its
    /// handshake is done (waiting at most the response timeout), or why it is down.
    pub(crate) async fn detect(&self, backend: &Backend) -> Result<Found, Down> {
        let process = self.process(backend).map_err(era::unavailable)?;
        // A process between runs is reported as it is: the probe round does not wait for its
        // next start (the other backends' probes wait for the round).
        if let State::Down(down, _) = &*process.state.borrow() {
            return Err(down.clone());
        }
        match process.up(self.timeout(backend).max(START_TIMEOUT)).await {
            Ok(conn) => Ok(conn
                .hello
                .get()
                .map(|h| h.found.clone())
                .ok_or_else(|| era::unavailable(ForwardError::Unreachable("no handshake".to_owned())))?),
            Err(Waited::Down(down)) => Err(down),
            Err(Waited::Timeout) => Err(Down {
                reason: "timeout",
                detail: "the process has not finished its handshake yet".to_owned(),
            }),
            Err(Waited::Stopped) => Err(Down {
                reason: "unreachable",
                detail: "the process is stopped".to_owned(),
            }),
        }
    }

    /// A client's request (its `headers`, `id` as raw JSON, and `body`) sent to `backend`'s
    /// process; the answer is JSON, or an SSE stream when it streams (see the module docs).
    pub(crate) async fn relay(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        id: Option<&str>,
        body: Bytes,
    ) -> Result<Response<ProxyBody>, ForwardError> {
        let Some(id) = id else {
            // 2026-07-28 has no client notification over HTTP to pass on.
            return Ok(own(StatusCode::ACCEPTED, Bytes::new()));
        };
        let process = self.process(backend)?;
        let timeout = self.timeout(backend);
        let started = Instant::now();
        let label = MethodLabel::of_headers(headers);
        let result = self.relay_to(process, backend, headers, id, body, timeout).await;
        let failure = match &result {
            Ok(_) => None,
            Err(ForwardError::Timeout) => Some("timeout"),
            Err(ForwardError::Unreachable(_)) => Some("unreachable"),
        };
        process.metrics.request(label, failure, started.elapsed());
        result
    }

    async fn relay_to(
        &self,
        process: &Arc<Process>,
        backend: &Backend,
        headers: &HeaderMap,
        id: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<ProxyBody>, ForwardError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (conn, permit) = process.place(timeout).await?;
        let method = mcp_method(headers);
        if !conn.modern()
            && let Some(answer) = legacy_own_answer(&conn, backend, method, id)
        {
            return Ok(answer);
        }
        let mut call = match conn.send(&body, method, Some(permit)) {
            Ok(call) => call,
            Err(Unsent::Gone) => return Err(exited()),
            Err(Unsent::Stuck) => return Err(stuck()),
            Err(Unsent::NotJsonRpc) => {
                return Ok(own(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::error_body(
                        Some(id),
                        INTERNAL_ERROR,
                        "The request could not be put in JSON-RPC form",
                        None,
                    ),
                ));
            }
        };
        let first = match tokio::time::timeout_at(deadline, call.messages.recv()).await {
            Ok(None) => return Err(exited()),
            Ok(Some(relayed)) if relayed.response => {
                let answer = call.translation.one(relayed.message);
                return Ok(own(StatusCode::OK, answer));
            }
            Ok(Some(relayed)) => Some(relayed),
            // Slow to answer: the answer streams, so the client need not wait for a head.
            Err(_) => None,
        };
        let Call {
            messages,
            translation,
            guard,
        } = call;
        let stall = backend.stall_timeout().unwrap_or(DEFAULT_STALL_TIMEOUT);
        let body = ChannelBody::new(
            messages,
            first,
            translation,
            id,
            backend.route(),
            stall,
            Box::new(guard),
        );
        let mut response = Response::new(super::body::boxed(body));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        Ok(response)
    }

    /// A read-only request of the gateway's own or a client's list (as
    /// [`Forwarder::exchange`](super::forward::Forwarder::exchange)), to `backend`'s process.
    pub(crate) async fn exchange(
        &self,
        backend: &Backend,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Answer, ForwardError> {
        let process = self.process(backend)?;
        let timeout = self.timeout(backend);
        let (conn, permit) = process.place(timeout).await?;
        let method = mcp_method(headers);
        if method == "server/discover"
            && let Some(discover) = conn.hello.get().and_then(|h| h.discover.as_ref())
        {
            let message = format!(r#"{{"jsonrpc":"2.0","id":"mrtr-gateway","result":{discover}}}"#);
            return Ok(Answer {
                status: StatusCode::OK,
                message: Some(Bytes::from(message)),
            });
        }
        conn.request(&body, method, Some(permit), timeout).await
    }

    /// Stops every process (stdin closed, then signals; see the module docs) and waits for them.
    pub(crate) async fn stop(&self) {
        for (_, process) in &self.processes {
            process.stop.cancel();
        }
        for (_, process) in &self.processes {
            let supervisor = process
                .supervisor
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(supervisor) = supervisor {
                let _ = supervisor.await;
            }
        }
    }
}

/// What a legacy process's session answers itself: `server/discover` (from its `initialize`
/// result) and `subscriptions/listen` (not relayed), as for a legacy HTTP backend.
fn legacy_own_answer(conn: &Conn, backend: &Backend, method: &str, id: &str) -> Option<Response<ProxyBody>> {
    match method {
        "server/discover" => {
            let discover = conn.hello.get()?.discover.as_ref()?;
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{discover}}}"#);
            Some(own(StatusCode::OK, Bytes::from(body)))
        }
        "subscriptions/listen" => {
            let message = format!(
                "subscriptions/listen is not relayed to the initialize-era backend {:?}",
                backend.name()
            );
            Some(own(
                StatusCode::NOT_FOUND,
                jsonrpc::error_body(Some(id), METHOD_NOT_FOUND, &message, None),
            ))
        }
        _ => None,
    }
}

/// Why no running process was found in time.
enum Waited {
    Down(Down),
    Timeout,
    Stopped,
}

impl From<Waited> for ForwardError {
    fn from(waited: Waited) -> Self {
        match waited {
            Waited::Down(down) => ForwardError::Unreachable(down.detail),
            Waited::Timeout => ForwardError::Timeout,
            Waited::Stopped => ForwardError::Unreachable("the process is stopped".to_owned()),
        }
    }
}

impl Process {
    /// Starts the supervisor, once.
    fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let process = self.clone();
        let supervisor = tokio::spawn(async move { process.supervise().await });
        *self.supervisor.lock().unwrap_or_else(|e| e.into_inner()) = Some(supervisor);
    }

    /// The running process, waiting up to `timeout` for one: through a start or a restart, but
    /// not through a second failure (a process down when the wait began gets its next attempt).
    async fn up(self: &Arc<Self>, timeout: Duration) -> Result<Arc<Conn>, Waited> {
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

    /// The running process and a place among its requests in flight, within `timeout`.
    async fn place(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Result<(Arc<Conn>, OwnedSemaphorePermit), ForwardError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let conn = self.up(timeout).await?;
        let permit = tokio::time::timeout_at(deadline, self.in_flight.clone().acquire_owned())
            .await
            .map_err(|_| ForwardError::Timeout)?
            .map_err(|_| ForwardError::Unreachable("the process is stopped".to_owned()))?;
        Ok((conn, permit))
    }

    /// Runs the process until it is stopped, starting it again after each exit.
    async fn supervise(self: Arc<Self>) {
        let mut failures: u32 = 0;
        let mut run = 0;
        while !self.stop.is_cancelled() {
            let began = Instant::now();
            run += 1;
            let down = self.run_once(run).await;
            if self.stop.is_cancelled() {
                break;
            }
            failures = if began.elapsed() >= STABLE_AFTER {
                1
            } else {
                failures + 1
            };
            let backoff = BACKOFF_FIRST
                .saturating_mul(1 << (failures - 1).min(16))
                .min(BACKOFF_MAX);
            tracing::warn!(
                backend = &*self.name,
                reason = down.reason,
                detail = %down.detail,
                restart_in_ms = backoff.as_millis() as u64,
                "stdio backend down"
            );
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
    async fn run_once(&self, run: u64) -> Down {
        self.state.send_replace(State::Starting(run));
        let spawned = match child::spawn(&self.name, &self.command) {
            Ok(spawned) => spawned,
            Err(error) => {
                return Down {
                    reason: "unreachable",
                    detail: format!("cannot start `{}`: {error}", self.command),
                };
            }
        };
        let child::Spawned {
            mut child,
            stdin,
            mut stdout,
        } = spawned;
        let (writer, lines) = mpsc::channel(MAX_IN_FLIGHT * 4);
        let close = self.stop.child_token();
        tokio::spawn(child::write_lines(stdin, lines, close.clone()));
        let conn = Arc::new(Conn {
            writer,
            calls: Mutex::new(Some(HashMap::new())),
            next_id: AtomicU64::new(1),
            hello: std::sync::OnceLock::new(),
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
                        status = child.wait() => Down {
                            reason: "unreachable",
                            detail: match status {
                                Ok(status) => format!("the process exited ({status})"),
                                Err(error) => format!("the process was lost: {error}"),
                            },
                        },
                        () = self.stop.cancelled() => stopped(),
                    }
                }
                Err(down) => down,
            },
            status = child.wait() => Down {
                reason: "unreachable",
                detail: match status {
                    Ok(status) => format!("the process exited during its handshake ({status})"),
                    Err(error) => format!("the process was lost: {error}"),
                },
            },
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
}

fn stopped() -> Down {
    Down {
        reason: "unreachable",
        detail: "stopped".to_owned(),
    }
}

/// Finds the process's era as `era` allows, as the health probe does for an HTTP backend.
async fn handshake(conn: &Arc<Conn>, era: Era) -> Result<Hello, Down> {
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
            Err(ForwardError::Timeout) if era == Era::Auto => {
                not_modern = Some(format!("no answer within {} s", DISCOVER_TIMEOUT.as_secs()));
            }
            Err(error) => return Err(era::unavailable(error)),
        }
    }
    let answer = conn
        .request(INITIALIZE_BODY.as_bytes(), "initialize", None, START_TIMEOUT)
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

fn mcp_method(headers: &HeaderMap) -> &str {
    headers
        .get("mcp-method")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn own(status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let json = !body.is_empty();
    let mut response = Response::new(super::body::full(body));
    *response.status_mut() = status;
    if json {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    response
}
