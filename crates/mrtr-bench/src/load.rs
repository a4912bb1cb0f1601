//! The load generator: a fixed number of keep-alive HTTP/1.1 connections, each sending its next
//! request as soon as the previous answer has been read to the end and checked (closed loop).
//!
//! A segment runs for a warm-up and then a measured window; only requests that complete inside
//! the window count, so the counts match the CPU the driver samples at the window's edges.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::workload::Workload;

/// Where the requests go.
#[derive(Clone, Debug)]
pub struct Target {
    /// Listening address of the hop (or backend).
    pub addr: SocketAddr,
    /// Request path (`/mcp`).
    pub path: String,
}

impl Target {
    /// The target of an `http://addr/path` URL.
    pub fn from_url(url: &str) -> Option<Self> {
        let uri: http::Uri = url.parse().ok()?;
        let addr = uri.authority()?.as_str().parse().ok()?;
        Some(Self {
            addr,
            path: uri.path().to_owned(),
        })
    }
}

/// Every request id is unique within a run, so an answer can never pass for another's.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One keep-alive connection to the target.
pub struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    target: Target,
    host: HeaderValue,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("target", &self.target)
            .finish()
    }
}

/// The outcome of one request.
#[derive(Debug)]
pub struct Exchange {
    /// Request id.
    pub id: u64,
    /// When the request was sent and when its answer had been read.
    pub sent: Instant,
    /// When the last byte of the answer was read.
    pub done: Instant,
    /// `Err` with the reason when the answer was wrong or the exchange failed.
    pub verdict: Result<(), String>,
}

impl Connection {
    /// Opens a connection (`TCP_NODELAY`, as every hop sets).
    pub async fn open(target: &Target) -> std::io::Result<Self> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        let host = HeaderValue::from_str(&target.addr.to_string()).map_err(std::io::Error::other)?;
        Ok(Self {
            sender,
            target: target.clone(),
            host,
        })
    }

    /// Sends one request of `work` and reads the whole answer.
    pub async fn exchange(&mut self, work: &Workload) -> Exchange {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let verdict = self.send(work, work.body(id)).await;
        let verdict =
            verdict.and_then(|reply| work.check(id, reply.status, reply.content_type(), &reply.body));
        Exchange {
            id,
            sent,
            done: Instant::now(),
            verdict,
        }
    }

    /// Sends `body` with `work`'s headers; the answer, read to its end.
    pub async fn send(&mut self, work: &Workload, body: Vec<u8>) -> Result<Reply, String> {
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.target.path.parse().map_err(|e| format!("bad path: {e}"))?;
        let headers = request.headers_mut();
        headers.clone_from(work.headers());
        headers.insert(header::HOST, self.host.clone());
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection: {e}"))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        let session = response.headers().get("mcp-session-id").cloned();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("answer body failed: {e}"))?
            .to_bytes();
        Ok(Reply {
            status,
            content_type,
            session,
            body,
        })
    }
}

/// An answer, read to its end.
#[derive(Debug)]
pub struct Reply {
    /// Its status.
    pub status: http::StatusCode,
    /// Its `Content-Type`, if any.
    pub content_type: Option<HeaderValue>,
    /// Its `Mcp-Session-Id`, if any (the answer to a legacy client's `initialize`).
    pub session: Option<HeaderValue>,
    /// Its whole body.
    pub body: Bytes,
}

impl Reply {
    /// The `Content-Type` as text, if it is.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_ref().and_then(|v| v.to_str().ok())
    }
}

/// What one segment measured.
#[derive(Debug, Default)]
pub struct Segment {
    /// Requests answered (correctly or not) inside the measured window.
    pub completed: u64,
    /// Correct answers during the whole segment, warm-up included.
    pub correct: u64,
    /// Wrong answers and failed exchanges during the whole segment, warm-up included.
    pub failures: u64,
    /// The first few failure reasons.
    pub failure_samples: Vec<String>,
    /// Latency of every request counted in `completed`, in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// Length of the measured window.
    pub window: Duration,
}

impl Segment {
    /// Requests per second in the window.
    pub fn rate(&self) -> f64 {
        self.completed as f64 / self.window.as_secs_f64()
    }

    /// Counts one client's `exchange` in a segment whose window is `start` to `end`: a failure
    /// (its reason among the first few kept), or a correct answer, whose latency counts when the
    /// exchange lies inside the window.
    pub fn count(&mut self, exchange: &Exchange, start: Instant, end: Instant) {
        if let Err(reason) = &exchange.verdict {
            self.failures += 1;
            if self.failure_samples.len() < 3 {
                self.failure_samples
                    .push(format!("request {}: {reason}", exchange.id));
            }
            return;
        }
        self.correct += 1;
        if exchange.sent >= start && exchange.done <= end {
            self.completed += 1;
            let micros = exchange.done.duration_since(exchange.sent).as_micros();
            self.latencies_us.push(u32::try_from(micros).unwrap_or(u32::MAX));
        }
    }

    /// Adds what one client of the segment measured (its latencies unsorted).
    pub fn add(&mut self, part: Segment) {
        self.completed += part.completed;
        self.correct += part.correct;
        self.failures += part.failures;
        self.failure_samples.extend(
            part.failure_samples
                .into_iter()
                .take(3usize.saturating_sub(self.failure_samples.len())),
        );
        self.latencies_us.extend(part.latencies_us);
    }

    /// The `q` quantile of latency (0.5, 0.99), in microseconds.
    pub fn latency_us(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let at = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        f64::from(self.latencies_us[at])
    }
}

/// Runs `work` over `connections` for `warmup` and then `window`, calling `at_start` when the
/// window opens and `at_end` when it closes (the driver samples CPU there).
pub async fn run_segment(
    target: &Target,
    connections: usize,
    work: Arc<Workload>,
    warmup: Duration,
    window: Duration,
    at_start: impl FnOnce(),
    at_end: impl FnOnce(),
) -> std::io::Result<Segment> {
    let mut opened = Vec::with_capacity(connections);
    for _ in 0..connections {
        opened.push(Connection::open(target).await?);
    }
    let start = Instant::now() + warmup;
    let end = start + window;
    let mut tasks = Vec::with_capacity(connections);
    for mut connection in opened {
        let work = work.clone();
        tasks.push(tokio::spawn(async move {
            let mut part = Segment::default();
            while Instant::now() < end {
                let exchange = connection.exchange(&work).await;
                part.count(&exchange, start, end);
                // A broken connection would fail every further request at once.
                if let Err(reason) = &exchange.verdict
                    && (reason.starts_with("connection") || reason.starts_with("request failed"))
                {
                    break;
                }
            }
            part
        }));
    }
    gather(tasks, start, window, at_start, at_end).await
}

/// The segment of the clients `tasks`, whose window opens at `start` and lasts `window`: waits
/// for it to open (calling `at_start`) and close (`at_end`), then adds up what each client
/// measured.
pub async fn gather(
    tasks: Vec<tokio::task::JoinHandle<Segment>>,
    start: Instant,
    window: Duration,
    at_start: impl FnOnce(),
    at_end: impl FnOnce(),
) -> std::io::Result<Segment> {
    tokio::time::sleep_until(start.into()).await;
    at_start();
    tokio::time::sleep_until((start + window).into()).await;
    at_end();
    let mut segment = Segment {
        window,
        ..Segment::default()
    };
    for task in tasks {
        segment.add(task.await.map_err(std::io::Error::other)?);
    }
    segment.latencies_us.sort_unstable();
    Ok(segment)
}

/// Sends exactly `count` requests of `work`, one after another on one connection (for
/// instruction counts, where a fixed amount of work matters and time does not).
pub async fn run_count(target: &Target, work: &Workload, count: u64) -> std::io::Result<Segment> {
    let mut connection = Connection::open(target).await?;
    let started = Instant::now();
    let mut segment = Segment::default();
    for _ in 0..count {
        let exchange = connection.exchange(work).await;
        match exchange.verdict {
            Ok(()) => {
                segment.completed += 1;
                segment.correct += 1;
            }
            Err(reason) => {
                segment.failures += 1;
                if segment.failure_samples.len() < 3 {
                    segment
                        .failure_samples
                        .push(format!("request {}: {reason}", exchange.id));
                }
            }
        }
    }
    segment.window = started.elapsed();
    Ok(segment)
}
