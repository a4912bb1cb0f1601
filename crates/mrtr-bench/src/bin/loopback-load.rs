//! A loopback load run: the same forwarding proxy, bare and wrapped in [`MrtrLayer`], measured
//! side by side under concurrent keep-alive load.
//!
//! ```sh
//! cargo build --release --workspace --bins    # the README's build
//! target/release/loopback-load
//! target/release/loopback-load --seconds 4 --connections 32 --rounds 3
//! ```
//!
//! # What runs
//!
//! Everything listens on 127.0.0.1 (ephemeral ports) inside this one process:
//!
//! * an MCP-like hyper **backend** with four tools: `echo` answers a `complete` JSON result of
//!   `--size` bytes; `confirm` answers `input_required` (with a `requestState` of `--state` bytes)
//!   and, on a retry carrying that state back unchanged, `complete`; `stream` answers an SSE
//!   stream of `--events` progress notifications (about 150 B each, a keep-alive comment every
//!   100) followed by a `complete` result, one frame per event; `stream-bulk` answers the same
//!   stream in 16 KiB frames;
//! * two **proxies**, identical except that one is wrapped in `MrtrLayer`: each forwards every
//!   request to the backend with a pooled keep-alive hyper-util client and reports a
//!   [`Route`], served through `TowerToHyperService` as in `crates/tower-mrtr/tests/it/over_http.rs`;
//! * a **load generator**: `--connections` keep-alive HTTP/1 connections, each sending one request
//!   after another until the segment's time (or request cap) runs out; a request in flight at the
//!   deadline is finished and counted, and the segment's time runs until the last one ends.
//!
//! # What is measured
//!
//! Four scenarios, each checked for correctness on every response (a wrong answer counts as an
//! error, not as throughput):
//!
//! * **JSON pass-through**: `tools/call` → `complete`. The layer buffers and parses the request
//!   and buffers and scans the answer, but changes nothing. This is the common case.
//! * **MRTR cycle**: `tools/call` → `input_required`, then the retry with the state → `complete`.
//!   Through the layer the client gets a sealed envelope and sends it back (one seal and one open
//!   per cycle); through the bare proxy it sends the backend's raw state back. One cycle is two
//!   HTTP requests; latency is the whole cycle's.
//! * **SSE long stream**: `tools/call` answered with a long event stream, which the layer must
//!   watch event by event (the result at its end could be `input_required`) but passes through
//!   unchanged. Reported as MB/s and events/s, with the time to the first byte (the layer must not
//!   buffer the stream). Twice: with the backend handing hyper one frame per event (a server that
//!   flushes after every event: per-frame costs dominate, in hyper as in the layer) and in 16 KiB
//!   frames (a backlog written in bulk: per-byte costs, the framer's scan, dominate). Fewer
//!   concurrent streams (`--sse-connections`, 8) than requests: one stream is tens of
//!   milliseconds of CPU, and 32 at once would each outlast a whole segment.
//!
//! For each: operations per second, p50 and p99 latency, and CPU time per operation (the whole
//! process: backend, proxy and load generator, from `/proc`; the difference between the two
//! variants is what the layer costs). Every figure is given for both variants and as the ratio
//! layered/bare.
//!
//! # Why side by side
//!
//! A loopback run on a small, shared machine is noisy: absolute figures move by tens of percent
//! between runs. The bare and layered segments therefore alternate (bare, layered, layered, bare,
//! …, so that a drift in the machine's load hits both equally) within one run, after a short
//! unmeasured warm-up of both, and the ratio measured within the run is the figure to record.
//! The per-round throughput ratios printed under the table show how much that ratio itself moves.
//!
//! Backend, proxies and load generator share one runtime (`--threads`, default: every core), so
//! the proxy gets only part of the CPU, as it would next to other work; the ratios describe the
//! whole loopback system. The CPU-per-operation delta is the layer's cost, direct (parsing,
//! scanning, sealing) and indirect (buffered bodies copied, larger messages), within the noise.
//!
//! `--variant bare` or `--variant layered` loads one proxy only, to profile one side, e.g.
//! `perf record -g target/release/loopback-load --only json --variant layered`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use memchr::memmem;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tower::{BoxError, ServiceBuilder};
use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};

const USAGE: &str = "\
usage: loopback-load [--seconds S] [--connections N] [--sse-connections N] [--rounds N]
                     [--size BYTES] [--state BYTES] [--events N] [--threads N] [--max-ops N]
                     [--only json,mrtr,sse-events,sse-chunks,sse] [--variant bare|layered]

  --seconds S      measured time per scenario, split over every bare and layered segment (4)
  --connections N  concurrent keep-alive client connections, JSON and MRTR (32)
  --sse-connections N
                   concurrent SSE streams (8)
  --rounds N       bare/layered segment pairs per scenario (4)
  --size BYTES     size of the JSON complete result (1024)
  --state BYTES    size of the backend's requestState (256)
  --events N       progress events per SSE stream (2000)
  --threads N      runtime worker threads (all cores)
  --max-ops N      cap on operations per segment (JSON/MRTR 200000, SSE 5000)
  --only NAMES     run only these scenarios (comma-separated)
  --variant V      load only the bare or only the layered proxy (to profile one side)";

/// Each request gets this long before it counts as an error (the run must end on its own).
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Unmeasured warm-up of each variant before a scenario's first round.
const WARM_UP: Duration = Duration::from_millis(250);

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Json,
    Mrtr,
    /// The backend hands hyper one frame per event, as a server flushing after every event does.
    SseEvents,
    /// The same stream in 16 KiB frames, as a server writing a backlog in bulk does.
    SseChunks,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::Json,
        Scenario::Mrtr,
        Scenario::SseEvents,
        Scenario::SseChunks,
    ];

    /// The name `--only` takes and the progress lines show.
    fn key(self) -> &'static str {
        match self {
            Scenario::Json => "json",
            Scenario::Mrtr => "mrtr",
            Scenario::SseEvents => "sse-events",
            Scenario::SseChunks => "sse-chunks",
        }
    }

    fn is_sse(self) -> bool {
        matches!(self, Scenario::SseEvents | Scenario::SseChunks)
    }

    /// The backend tool that produces this scenario's answer.
    fn tool(self) -> &'static str {
        match self {
            Scenario::Json => "echo",
            Scenario::Mrtr => "confirm",
            Scenario::SseEvents => "stream",
            Scenario::SseChunks => "stream-bulk",
        }
    }

    fn default_cap(self) -> u64 {
        if self.is_sse() { 5_000 } else { 200_000 }
    }
}

#[derive(Clone, Debug)]
struct Options {
    seconds: f64,
    connections: usize,
    sse_connections: usize,
    rounds: usize,
    size: usize,
    state: usize,
    events: usize,
    threads: usize,
    max_ops: Option<u64>,
    only: Option<String>,
    /// Only this proxy (`true`: the layered one), for profiling one side with `perf record`.
    variant: Option<bool>,
}

impl Options {
    fn parse() -> Result<Option<Self>, String> {
        let mut options = Options {
            seconds: 4.0,
            connections: 32,
            sse_connections: 8,
            rounds: 4,
            size: 1024,
            state: 256,
            events: 2000,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_ops: None,
            only: None,
            variant: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(None);
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = || format!("bad value for {flag}: {value:?}");
            match flag.as_str() {
                "--seconds" => options.seconds = value.parse().map_err(|_| bad())?,
                "--connections" => options.connections = value.parse().map_err(|_| bad())?,
                "--sse-connections" => options.sse_connections = value.parse().map_err(|_| bad())?,
                "--rounds" => options.rounds = value.parse().map_err(|_| bad())?,
                "--size" => options.size = value.parse().map_err(|_| bad())?,
                "--state" => options.state = value.parse().map_err(|_| bad())?,
                "--events" => options.events = value.parse().map_err(|_| bad())?,
                "--threads" => options.threads = value.parse().map_err(|_| bad())?,
                "--max-ops" => options.max_ops = Some(value.parse().map_err(|_| bad())?),
                "--only" => {
                    let known = |name: &str| name == "sse" || Scenario::ALL.iter().any(|s| s.key() == name);
                    if let Some(name) = value.split(',').find(|name| !known(name)) {
                        return Err(format!("unknown scenario {name:?}"));
                    }
                    options.only = Some(value);
                }
                "--variant" => {
                    options.variant = Some(match value.as_str() {
                        "bare" => false,
                        "layered" => true,
                        _ => return Err(format!("unknown variant {value:?}")),
                    })
                }
                _ => return Err(format!("unknown flag {flag:?}")),
            }
        }
        if !(options.seconds.is_finite() && options.seconds > 0.0 && options.seconds <= 600.0) {
            return Err("--seconds must be in (0, 600]".into());
        }
        if [
            options.connections,
            options.sse_connections,
            options.rounds,
            options.threads,
        ]
        .contains(&0)
        {
            return Err("--connections, --sse-connections, --rounds and --threads must be at least 1".into());
        }
        if options.max_ops == Some(0) {
            return Err("--max-ops must be at least 1".into());
        }
        Ok(Some(options))
    }

    /// Length of one measured segment: the scenario's time over its 2 × rounds segments.
    fn segment(&self) -> Duration {
        Duration::from_secs_f64(self.seconds / (2 * self.rounds) as f64)
    }

    fn cap(&self, scenario: Scenario) -> u64 {
        self.max_ops.unwrap_or(scenario.default_cap())
    }

    fn connections(&self, scenario: Scenario) -> usize {
        if scenario.is_sse() {
            self.sse_connections
        } else {
            self.connections
        }
    }

    fn selected(&self, scenario: Scenario) -> bool {
        self.only.as_deref().is_none_or(|only| {
            only.split(',')
                .any(|name| name == scenario.key() || (name == "sse" && scenario.is_sse()))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP plumbing

/// Serves a tower service over HTTP/1 on an ephemeral loopback port for the rest of the run.
async fn serve<S, B>(service: S) -> Result<SocketAddr, BoxError>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// One keep-alive client connection of the load generator.
async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// The pooled keep-alive client a proxy forwards with.
fn pooled_client<B>() -> Client<HttpConnector, B>
where
    B: Body + Send,
    B::Data: Send,
{
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// The proxy: forwards a request to the backend and reports the backend's route. The same code
/// serves both proxies; only the request body type differs (the layer hands it a
/// [`RequestBody`]).
async fn forward<B>(
    client: Client<HttpConnector, B>,
    backend: Uri,
    route: Route,
    request: Request<B>,
) -> Result<Response<Incoming>, BoxError>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = request.into_parts();
    parts.uri = backend;
    parts.headers.remove(header::HOST);
    let mut response = client.request(Request::from_parts(parts, body)).await?;
    response.extensions_mut().insert(route);
    Ok(response)
}

// ---------------------------------------------------------------------------------------------
// Backend

/// A response body that is either one buffer or a pre-built SSE stream handed out one event per
/// frame (as a server flushing after every event would), then the final result.
#[derive(Debug)]
enum BackendBody {
    Full(Option<Bytes>),
    Sse {
        events: Arc<Vec<Bytes>>,
        next: usize,
        result: Option<Bytes>,
    },
}

impl Body for BackendBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let data = match self.get_mut() {
            BackendBody::Full(data) => data.take(),
            BackendBody::Sse { events, next, result } => match events.get(*next) {
                Some(event) => {
                    *next += 1;
                    Some(event.clone())
                }
                None => result.take(),
            },
        };
        Poll::Ready(data.map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            BackendBody::Full(data) => data.is_none(),
            BackendBody::Sse { result, .. } => result.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            BackendBody::Full(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            BackendBody::Sse { .. } => SizeHint::default(),
        }
    }
}

#[derive(Debug)]
struct Backend {
    /// Text of the `echo` result, sized so the whole answer is about `--size` bytes.
    echo_text: String,
    /// Padding of the `confirm` state, sized so the state is `--state` bytes.
    state_pad: String,
    state_len: usize,
    /// The SSE stream's progress events and keep-alives, one `Bytes` per event.
    events: Arc<Vec<Bytes>>,
    /// The same bytes cut into 16 KiB pieces.
    chunks: Arc<Vec<Bytes>>,
}

const STATE_PREFIX: &str = "st1.";

impl Backend {
    fn new(options: &Options) -> Self {
        let echo_overhead =
            r#"{"jsonrpc":"2.0","id":1000000,"result":{"resultType":"complete","content":[{"type":"text","text":""}]}}"#
                .len();
        let mut events = Vec::with_capacity(options.events + options.events / 100 + 1);
        for i in 0..options.events {
            // About 150 bytes per event; nothing in it the layer would have to look at.
            events.push(Bytes::from(format!(
                "data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"job-7\",\"progress\":{i},\"total\":{},\"message\":\"step {i} of the job\"}}}}\n\n",
                options.events
            )));
            if i % 100 == 99 {
                events.push(Bytes::from_static(b": keep-alive\n\n"));
            }
        }
        let whole = Bytes::from(events.concat());
        let chunks = (0..whole.len())
            .step_by(16 * 1024)
            .map(|at| whole.slice(at..whole.len().min(at + 16 * 1024)))
            .collect();
        Backend {
            chunks: Arc::new(chunks),
            echo_text: "y".repeat(options.size.saturating_sub(echo_overhead)),
            state_pad: "s".repeat(options.state.saturating_sub(STATE_PREFIX.len())),
            state_len: options.state.max(STATE_PREFIX.len()),
            events: Arc::new(events),
        }
    }

    /// Number of SSE blocks (events and comments, each ending in a blank line) per stream.
    fn sse_blocks(&self) -> u64 {
        self.events.len() as u64 + 1
    }

    fn json(body: String) -> Response<BackendBody> {
        let mut response = Response::new(BackendBody::Full(Some(Bytes::from(body))));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }

    fn error(id: &str, code: i32, message: &str) -> Response<BackendBody> {
        Self::json(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"{message}"}}}}"#
        ))
    }

    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<BackendBody>, Infallible> {
        let Ok(body) = request.into_body().collect().await.map(|c| c.to_bytes()) else {
            let mut response = Response::new(BackendBody::Full(None));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(response);
        };
        let Ok(request) = serde_json::from_slice::<Value>(&body) else {
            return Ok(Self::error("null", -32700, "parse error"));
        };
        let id = request
            .get("id")
            .map_or_else(|| "null".to_owned(), Value::to_string);
        let params = &request["params"];
        let state = params["requestState"].as_str();
        let answer = match params["name"].as_str() {
            Some("echo") => Self::json(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"{}"}}]}}}}"#,
                self.echo_text
            )),
            Some("confirm") => match state {
                None => Self::json(format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"ok":{{"method":"elicitation/create","params":{{"message":"Deploy?","requestedSchema":{{"type":"object","properties":{{}}}}}}}}}},"requestState":"{STATE_PREFIX}{}"}}}}"#,
                    self.state_pad
                )),
                // The backend's own state came back byte for byte.
                Some(s) if s.starts_with(STATE_PREFIX) && s.len() == self.state_len => Self::json(format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"deployed"}}]}}}}"#
                )),
                Some(_) => Self::error(&id, -32602, "unknown requestState"),
            },
            Some(tool @ ("stream" | "stream-bulk")) => {
                let result = format!(
                    "data: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"resultType\":\"complete\",\"content\":[{{\"type\":\"text\",\"text\":\"job done\"}}]}}}}\n\n"
                );
                let pieces = if tool == "stream" {
                    &self.events
                } else {
                    &self.chunks
                };
                let mut response = Response::new(BackendBody::Sse {
                    events: pieces.clone(),
                    next: 0,
                    result: Some(Bytes::from(result)),
                });
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                response
            }
            _ => Self::error(&id, -32601, "unknown tool"),
        };
        Ok(answer)
    }
}

// ---------------------------------------------------------------------------------------------
// Load generator

/// What the load generator needs to talk to one proxy.
#[derive(Debug)]
struct Target {
    addr: SocketAddr,
    host: HeaderValue,
    layered: bool,
    sse_blocks: u64,
}

/// One completed operation.
#[derive(Debug, Default)]
struct Sample {
    latency: Duration,
    first_byte: Option<Duration>,
    bytes: u64,
    events: u64,
}

fn tool_call(id: u64, tool: &str, state: Option<&str>) -> Bytes {
    let retry = match state {
        Some(state) => format!(
            r#","requestState":"{state}","inputResponses":{{"ok":{{"action":"accept","content":{{}}}}}}"#
        ),
        None => String::new(),
    };
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"target":"staging","dryRun":false}}{retry}}}}}"#
    ))
}

async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
    tool: &'static str,
    body: Bytes,
) -> Result<Response<Incoming>, BoxError> {
    sender.ready().await?;
    let request = Request::post("/mcp")
        .header(header::HOST, target.host.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(Full::new(body))?;
    let response = sender.send_request(request).await?;
    if response.status() != StatusCode::OK {
        return Err(format!("HTTP {}", response.status()).into());
    }
    Ok(response)
}

fn check_complete(body: &[u8]) -> Result<(), BoxError> {
    if memmem::find(body, br#""resultType":"complete""#).is_some() {
        Ok(())
    } else {
        Err(format!(
            "not a complete result: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
        .into())
    }
}

async fn op_json(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
    id: u64,
) -> Result<Sample, BoxError> {
    let start = Instant::now();
    let response = post(sender, target, "echo", tool_call(id, "echo", None)).await?;
    let body = response.into_body().collect().await?.to_bytes();
    let latency = start.elapsed();
    check_complete(&body)?;
    Ok(Sample {
        latency,
        bytes: body.len() as u64,
        ..Sample::default()
    })
}

async fn op_mrtr(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
    id: u64,
) -> Result<Sample, BoxError> {
    let start = Instant::now();
    let response = post(sender, target, "confirm", tool_call(2 * id, "confirm", None)).await?;
    let first = response.into_body().collect().await?.to_bytes();
    let first: Value = serde_json::from_slice(&first)?;
    let state = first["result"]["requestState"]
        .as_str()
        .ok_or("round 1: no requestState")?;
    // The layered proxy must hand out an envelope, never the backend's state.
    let expected = if target.layered { "mrtr4." } else { STATE_PREFIX };
    if !state.starts_with(expected) {
        return Err(format!("round 1: requestState {state:.40}… does not start with {expected}").into());
    }
    let retry = tool_call(2 * id + 1, "confirm", Some(state));
    let response = post(sender, target, "confirm", retry).await?;
    let second = response.into_body().collect().await?.to_bytes();
    let latency = start.elapsed();
    check_complete(&second)?;
    Ok(Sample {
        latency,
        // What the client carries between the rounds: the backend's state or the envelope.
        bytes: state.len() as u64,
        ..Sample::default()
    })
}

async fn op_sse(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
    tool: &'static str,
    id: u64,
) -> Result<Sample, BoxError> {
    let start = Instant::now();
    let response = post(sender, target, tool, tool_call(id, tool, None)).await?;
    let mut body = response.into_body();
    let mut sample = Sample::default();
    // Blank lines end SSE blocks; one may straddle two frames. The tail keeps the stream's end.
    let mut last_byte = 0u8;
    let mut tail: Vec<u8> = Vec::with_capacity(512);
    let blank_line = memmem::Finder::new(b"\n\n");
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        sample.first_byte.get_or_insert_with(|| start.elapsed());
        sample.bytes += data.len() as u64;
        sample.events += blank_line.find_iter(&data).count() as u64;
        if last_byte == b'\n' && data[0] == b'\n' {
            sample.events += 1;
        }
        last_byte = data[data.len() - 1];
        tail.extend_from_slice(&data[data.len().saturating_sub(256)..]);
        if tail.len() > 256 {
            tail.drain(..tail.len() - 256);
        }
    }
    sample.latency = start.elapsed();
    if sample.events != target.sse_blocks {
        return Err(format!(
            "stream had {} blocks, expected {}",
            sample.events, target.sse_blocks
        )
        .into());
    }
    check_complete(&tail)?;
    Ok(sample)
}

#[derive(Debug, Default)]
struct Tally {
    latencies: Vec<u64>,
    first_bytes: Vec<u64>,
    ops: u64,
    bytes: u64,
    events: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    cpu: Option<Duration>,
}

impl Tally {
    fn record(&mut self, sample: Sample) {
        self.ops += 1;
        self.latencies.push(nanos(sample.latency));
        if let Some(first) = sample.first_byte {
            self.first_bytes.push(nanos(first));
        }
        self.bytes += sample.bytes;
        self.events += sample.events;
    }

    fn error(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    fn merge(&mut self, other: Tally) {
        // A fresh tally takes the other's CPU time; later merges add to it (unknown stays unknown).
        self.cpu = if self.elapsed.is_zero() && self.ops == 0 && self.errors == 0 {
            other.cpu
        } else {
            self.cpu.zip(other.cpu).map(|(a, b)| a + b)
        };
        self.latencies.extend(other.latencies);
        self.first_bytes.extend(other.first_bytes);
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.events += other.events;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.elapsed += other.elapsed;
    }

    fn per_second(&self, count: u64) -> f64 {
        count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One client connection's loop: operations back to back until the deadline or the cap.
async fn worker(
    mut sender: SendRequest<Full<Bytes>>,
    scenario: Scenario,
    target: Arc<Target>,
    deadline: Instant,
    issued: Arc<AtomicU64>,
    cap: u64,
) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let n = issued.fetch_add(1, Ordering::Relaxed);
        if n >= cap {
            break;
        }
        let op = async {
            match scenario {
                Scenario::Json => op_json(&mut sender, &target, n + 1).await,
                Scenario::Mrtr => op_mrtr(&mut sender, &target, n + 1).await,
                Scenario::SseEvents | Scenario::SseChunks => {
                    op_sse(&mut sender, &target, scenario.tool(), n + 1).await
                }
            }
        };
        let error = match tokio::time::timeout(OP_TIMEOUT, op).await {
            Ok(Ok(sample)) => {
                tally.record(sample);
                continue;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {OP_TIMEOUT:?}"),
        };
        tally.error(error);
        // The connection may be unusable now: start a fresh one (or give up on this worker).
        match connect(target.addr).await {
            Ok(fresh) => sender = fresh,
            Err(error) => {
                tally.error(format!("reconnect failed: {error}"));
                break;
            }
        }
    }
    tally
}

/// One measured segment against one proxy: connect every client, run them until the deadline.
async fn segment(
    scenario: Scenario,
    target: &Arc<Target>,
    connections: usize,
    length: Duration,
    cap: u64,
) -> Result<Tally, BoxError> {
    let senders = futures_util::future::try_join_all((0..connections).map(|_| connect(target.addr))).await?;
    let issued = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_time();
    let start = Instant::now();
    let deadline = start + length;
    let workers: Vec<_> = senders
        .into_iter()
        .map(|sender| {
            tokio::spawn(worker(
                sender,
                scenario,
                target.clone(),
                deadline,
                issued.clone(),
                cap,
            ))
        })
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        match worker.await {
            Ok(t) => tally.merge(t),
            Err(error) => tally.error(format!("worker failed: {error}")),
        }
    }
    tally.elapsed = start.elapsed();
    tally.cpu = match (cpu_before, cpu_time()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(tally)
}

/// CPU time (user + system) of the whole process so far: the sum of every thread's run time from
/// `/proc/self/task/*/schedstat` (nanoseconds), else `/proc/self/stat` (clock ticks, taken as
/// 1/100 s), else unknown.
fn cpu_time() -> Option<Duration> {
    let from_schedstat = || -> Option<Duration> {
        let mut total = 0u64;
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let path = task.ok()?.path().join("schedstat");
            let text = std::fs::read_to_string(path).ok()?;
            total += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(Duration::from_nanos(total))
    };
    let from_stat = || -> Option<Duration> {
        let text = std::fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = text.get(text.rfind(')')? + 1..)?.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_millis(ticks * 10))
    };
    from_schedstat().or_else(from_stat)
}

// ---------------------------------------------------------------------------------------------
// Report

#[derive(Debug)]
struct Outcome {
    scenario: Scenario,
    bare: Tally,
    layered: Tally,
    /// Per-round throughput ratios layered/bare.
    round_ratios: Vec<f64>,
}

fn percentile(sorted: &[u64], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(Duration::from_nanos(sorted[rank.clamp(1, sorted.len()) - 1]))
}

fn fmt_duration(d: Option<Duration>) -> String {
    match d {
        None => "–".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{} µs", d.as_micros()),
        Some(d) if d < Duration::from_millis(100) => format!("{:.2} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1e3),
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn ratio(layered: f64, bare: f64) -> String {
    if bare > 0.0 && layered > 0.0 && layered.is_finite() {
        format!("{:.2}", layered / bare)
    } else {
        "–".into()
    }
}

fn secs(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64())
}

/// CPU time per operation, in microseconds.
fn cpu_per_op(t: &Tally) -> Option<f64> {
    t.cpu
        .filter(|_| t.ops > 0)
        .map(|cpu| cpu.as_secs_f64() * 1e6 / t.ops as f64)
}

fn print_report(options: &Options, outcomes: &mut [Outcome]) {
    let mut rows: Vec<[String; 5]> = Vec::new();
    let mut row = |scenario: &str, metric: &str, bare: String, layered: String, r: String| {
        rows.push([scenario.into(), metric.into(), bare, layered, r]);
    };
    for outcome in outcomes.iter_mut() {
        outcome.bare.latencies.sort_unstable();
        outcome.layered.latencies.sort_unstable();
        outcome.bare.first_bytes.sort_unstable();
        outcome.layered.first_bytes.sort_unstable();
        let (b, l) = (&outcome.bare, &outcome.layered);
        let title = match outcome.scenario {
            Scenario::Json => format!("JSON tools/call → complete ({} B)", options.size),
            Scenario::Mrtr => format!(
                "MRTR cycle: input_required → retry → complete (state {} B)",
                options.state
            ),
            Scenario::SseEvents | Scenario::SseChunks => {
                let per_stream = (b.bytes + l.bytes).checked_div(b.ops + l.ops).unwrap_or(0);
                format!(
                    "SSE stream: {} progress events + result (≈ {} KB), {}",
                    options.events,
                    per_stream / 1000,
                    if outcome.scenario == Scenario::SseEvents {
                        "one frame per event"
                    } else {
                        "16 KiB frames"
                    }
                )
            }
        };
        let unit = match outcome.scenario {
            Scenario::Json => "requests/s",
            Scenario::Mrtr => "cycles/s (2 requests each)",
            Scenario::SseEvents | Scenario::SseChunks => "streams/s",
        };
        row(
            &title,
            unit,
            fmt_rate(b.per_second(b.ops)),
            fmt_rate(l.per_second(l.ops)),
            ratio(l.per_second(l.ops), b.per_second(b.ops)),
        );
        if outcome.scenario.is_sse() {
            let mbs = |t: &Tally| t.per_second(t.bytes) / 1e6;
            row(
                "",
                "MB/s",
                fmt_rate(mbs(b)),
                fmt_rate(mbs(l)),
                ratio(mbs(l), mbs(b)),
            );
            let eps = |t: &Tally| t.per_second(t.events);
            row(
                "",
                "events/s",
                fmt_rate(eps(b)),
                fmt_rate(eps(l)),
                ratio(eps(l), eps(b)),
            );
        }
        for (name, p) in [("p50 latency", 50.0), ("p99 latency", 99.0)] {
            let (pb, pl) = (percentile(&b.latencies, p), percentile(&l.latencies, p));
            row(
                "",
                name,
                fmt_duration(pb),
                fmt_duration(pl),
                ratio(secs(pl), secs(pb)),
            );
        }
        if outcome.scenario.is_sse() {
            let (pb, pl) = (percentile(&b.first_bytes, 50.0), percentile(&l.first_bytes, 50.0));
            row(
                "",
                "p50 first byte",
                fmt_duration(pb),
                fmt_duration(pl),
                ratio(secs(pl), secs(pb)),
            );
        }
        if outcome.scenario == Scenario::Mrtr {
            let state = |t: &Tally| t.bytes.checked_div(t.ops);
            let (sb, sl) = (state(b), state(l));
            row(
                "",
                "requestState the client carries",
                sb.map_or("–".into(), |n| format!("{n} B")),
                sl.map_or("–".into(), |n| format!("{n} B")),
                ratio(sl.map_or(0.0, |n| n as f64), sb.map_or(0.0, |n| n as f64)),
            );
        }
        let (cb, cl) = (cpu_per_op(b), cpu_per_op(l));
        let fmt_cpu = |c: Option<f64>| c.map_or("–".into(), |c| format!("{c:.0} µs"));
        row(
            "",
            "CPU per op (whole process)",
            fmt_cpu(cb),
            fmt_cpu(cl),
            ratio(cl.unwrap_or(f64::NAN), cb.unwrap_or(f64::NAN)),
        );
    }

    println!();
    println!(
        "### tower-mrtr loopback load: {} connections ({} for SSE), {} rounds × {:.2} s per variant \
         and scenario, {} runtime threads, {} cores",
        options.connections,
        options.sse_connections,
        options.rounds,
        options.segment().as_secs_f64(),
        options.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!();
    println!("| scenario | metric | bare | layered | layered/bare |");
    println!("|---|---|---:|---:|---:|");
    for [scenario, metric, bare, layered, r] in &rows {
        println!("| {scenario} | {metric} | {bare} | {layered} | {r} |");
    }
    println!();
    for outcome in outcomes.iter() {
        let ratios: Vec<String> = outcome.round_ratios.iter().map(|r| format!("{r:.2}")).collect();
        let mut sorted = outcome.round_ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let median = match sorted.len() {
            0 => "–".to_owned(),
            n if n % 2 == 1 => format!("{:.2}", sorted[n / 2]),
            n => format!("{:.2}", (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
        };
        let (cb, cl) = (cpu_per_op(&outcome.bare), cpu_per_op(&outcome.layered));
        let delta = match (cb, cl) {
            (Some(b), Some(l)) => match outcome.scenario {
                _ if outcome.scenario.is_sse() && outcome.layered.ops > 0 => {
                    let per_event =
                        (l - b) * 1e3 * outcome.layered.ops as f64 / outcome.layered.events.max(1) as f64;
                    format!("{:+.0} µs per stream ({per_event:+.0} ns per event)", l - b)
                }
                _ => format!("{:+.1} µs per op", l - b),
            },
            _ => "unknown".into(),
        };
        println!(
            "* {}: throughput ratio per round {} (median {median}); layer CPU (layered − bare) {}; ops bare {} / layered {}; \
             errors bare {} / layered {}",
            outcome.scenario.key(),
            ratios.join(", "),
            delta,
            outcome.bare.ops,
            outcome.layered.ops,
            outcome.bare.errors,
            outcome.layered.errors,
        );
        for (variant, tally) in [("bare", &outcome.bare), ("layered", &outcome.layered)] {
            if let Some(error) = &tally.first_error {
                println!("  * first {variant} error: {error}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Main

async fn run(options: Options) -> Result<(), BoxError> {
    let backend = Arc::new(Backend::new(&options));
    let sse_blocks = backend.sse_blocks();
    let backend_addr = serve(tower::service_fn({
        let backend = backend.clone();
        move |request| backend.clone().handle(request)
    }))
    .await?;
    let backend_uri: Uri = format!("http://{backend_addr}/mcp").parse()?;
    let route = Route::new("backend-a");

    let bare_proxy = {
        let (client, uri, route) = (pooled_client::<Incoming>(), backend_uri.clone(), route.clone());
        tower::service_fn(move |request: Request<Incoming>| {
            forward(client.clone(), uri.clone(), route.clone(), request)
        })
    };
    let layered_proxy = {
        let (client, uri, route) = (pooled_client::<RequestBody<Incoming>>(), backend_uri, route);
        let proxy = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
            forward(client.clone(), uri.clone(), route.clone(), request)
        });
        ServiceBuilder::new()
            .layer(MrtrLayer::new(Keyring::generate("k1")?))
            .service(proxy)
    };
    let target = |addr: SocketAddr, layered: bool| -> Result<Arc<Target>, BoxError> {
        Ok(Arc::new(Target {
            addr,
            host: HeaderValue::from_str(&addr.to_string())?,
            layered,
            sse_blocks,
        }))
    };
    let bare = target(serve(bare_proxy).await?, false)?;
    let layered = target(serve(layered_proxy).await?, true)?;

    eprintln!(
        "backend {backend_addr}, bare proxy {}, layered proxy {}; {} connections ({} for SSE), \
         {} rounds of {:.2} s segments",
        bare.addr,
        layered.addr,
        options.connections,
        options.sse_connections,
        options.rounds,
        options.segment().as_secs_f64()
    );

    let mut outcomes = Vec::new();
    for scenario in Scenario::ALL {
        if !options.selected(scenario) {
            continue;
        }
        let connections = options.connections(scenario);
        let cap = options.cap(scenario);
        // Warm-up: fills both proxies' connection pools and the caches; not measured.
        for (is_layered, t) in [(false, &bare), (true, &layered)] {
            if options.variant.is_none_or(|v| v == is_layered) {
                segment(scenario, t, connections, WARM_UP, cap).await?;
            }
        }
        let mut outcome = Outcome {
            scenario,
            bare: Tally::default(),
            layered: Tally::default(),
            round_ratios: Vec::new(),
        };
        for round in 0..options.rounds {
            // Bare first in even rounds, layered first in odd ones: a drift in the machine's load
            // then falls on both variants alike.
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            let mut pair = [None, None];
            for is_layered in order {
                if options.variant.is_some_and(|v| v != is_layered) {
                    continue;
                }
                let t = if is_layered { &layered } else { &bare };
                let tally = segment(scenario, t, connections, options.segment(), cap).await?;
                eprintln!(
                    "{:<10} round {} {:<7} {:>8} ops in {:.2} s ({:.0}/s), {} errors",
                    scenario.key(),
                    round + 1,
                    if is_layered { "layered" } else { "bare" },
                    tally.ops,
                    tally.elapsed.as_secs_f64(),
                    tally.per_second(tally.ops),
                    tally.errors
                );
                pair[usize::from(is_layered)] = Some(tally.per_second(tally.ops));
                if is_layered {
                    outcome.layered.merge(tally);
                } else {
                    outcome.bare.merge(tally);
                }
            }
            if let [Some(b), Some(l)] = pair
                && b > 0.0
            {
                outcome.round_ratios.push(l / b);
            }
        }
        outcomes.push(outcome);
    }
    print_report(&options, &mut outcomes);
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let options = match Options::parse() {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.threads)
        .enable_all()
        .build()?
        .block_on(run(options))
}
