//! The overload run (issue 11): a backend that takes a fixed time per answer behind the
//! gateway, whose `--max-in-flight` then bounds what the pair sustains. Three phases:
//!
//! 1. **sustained**: closed loop, as many connections as the limit: the rate the pair sustains;
//! 2. **overload**: open loop at `factor` times that rate for a while: requests are sent on
//!    schedule whether or not earlier ones were answered (each on a pooled connection, as many
//!    as needed, at most [`MAX_OUTSTANDING`] outstanding in the driver);
//! 3. **recovery**: the closed loop of phase 1 again.
//!
//! The gateway's resident memory is sampled every 100 ms throughout. Every answer is checked:
//! 200 with the echoed result, or 503 with the JSON-RPC overload error; anything else fails.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::mcp;
use crate::workload::{Cell, Hop, Workload};

/// Most requests the driver keeps outstanding in the open loop; beyond, a scheduled request is
/// counted as not sent.
pub const MAX_OUTSTANDING: u64 = 20_000;

/// Serves `tools/call` of `echo` after `delay` on 127.0.0.1; the `http://ADDR/mcp` URL.
pub async fn start_slow_backend(delay: Duration) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| async move {
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let id = serde_json::from_slice::<serde_json::Value>(&body)
                        .map(|m| m["id"].to_string())
                        .unwrap_or_default();
                    tokio::time::sleep(delay).await;
                    let mut response = Response::new(Full::new(Bytes::from(mcp::echo_answer(&id, 256))));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

/// What one phase saw.
#[derive(Debug, Default)]
pub struct Phase {
    /// Requests scheduled (open loop) or sent (closed loop).
    pub offered: u64,
    /// Answered 200 with the right result.
    pub ok: u64,
    /// Answered 503 with the overload error.
    pub shed: u64,
    /// Not sent: the driver's outstanding limit was reached.
    pub not_sent: u64,
    /// Wrong answers and failed exchanges, with a few samples.
    pub failed: u64,
    /// Up to three failure descriptions.
    pub samples: Vec<String>,
    /// Latencies of 200 answers and of 503 answers, in microseconds, sorted.
    pub ok_us: Vec<u64>,
    /// See `ok_us`.
    pub shed_us: Vec<u64>,
    /// How long the phase ran.
    pub elapsed: Duration,
}

impl Phase {
    /// `q`-quantile of sorted microseconds, in milliseconds.
    pub fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let at = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[at] as f64 / 1000.0
    }

    fn merge(&mut self, other: Phase) {
        self.offered += other.offered;
        self.ok += other.ok;
        self.shed += other.shed;
        self.not_sent += other.not_sent;
        self.failed += other.failed;
        for sample in other.samples {
            if self.samples.len() < 3 {
                self.samples.push(sample);
            }
        }
        self.ok_us.extend(other.ok_us);
        self.shed_us.extend(other.shed_us);
    }

    fn finish(&mut self, elapsed: Duration) {
        self.elapsed = elapsed;
        self.ok_us.sort_unstable();
        self.shed_us.sort_unstable();
    }
}

/// How one answer is judged.
enum Verdict {
    Ok,
    Shed,
    Failed(String),
}

/// The driver's HTTP client toward the gateway.
#[derive(Clone, Debug)]
pub struct Driver {
    client: Client<HttpConnector, Full<Bytes>>,
    url: http::Uri,
    headers: http::HeaderMap,
    ids: Arc<AtomicU64>,
}

impl Driver {
    /// A driver sending to `url` (`http://ADDR/mcp`).
    pub fn new(url: &str) -> Result<Self, String> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Self {
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(usize::MAX)
                .build(connector),
            url: url.parse().map_err(|e| format!("bad URL {url}: {e}"))?,
            headers: Workload::new(Cell::Call { size: 256 }, Hop::Gateway, None)
                .headers()
                .clone(),
            ids: Arc::new(AtomicU64::new(1)),
        })
    }

    async fn one(&self) -> (Verdict, Duration) {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let mut request = Request::new(Full::new(Bytes::from(mcp::echo_request(id, 256))));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.url.clone();
        request.headers_mut().clone_from(&self.headers);
        let verdict = match self.client.request(request).await {
            Err(error) => Verdict::Failed(format!("request {id}: {error}")),
            Ok(response) => {
                let status = response.status();
                match response.into_body().collect().await {
                    Err(error) => Verdict::Failed(format!("request {id}: body: {error}")),
                    Ok(body) => judge(id, status, &body.to_bytes()),
                }
            }
        };
        (verdict, started.elapsed())
    }

    /// Closed loop: `connections` tasks, each sending its next request when the last is answered.
    pub async fn closed_loop(&self, connections: usize, length: Duration) -> Phase {
        let started = Instant::now();
        let end = started + length;
        let tasks: Vec<_> = (0..connections)
            .map(|_| {
                let driver = self.clone();
                tokio::spawn(async move {
                    let mut phase = Phase::default();
                    while Instant::now() < end {
                        let (verdict, took) = driver.one().await;
                        phase.offered += 1;
                        record(&mut phase, verdict, took);
                    }
                    phase
                })
            })
            .collect();
        let mut phase = Phase::default();
        for task in tasks {
            if let Ok(part) = task.await {
                phase.merge(part);
            }
        }
        phase.finish(started.elapsed());
        phase
    }

    /// Open loop: `rate` requests per second for `length`, in 1 ms ticks.
    pub async fn open_loop(&self, rate: f64, length: Duration) -> Phase {
        let started = Instant::now();
        let outstanding = Arc::new(AtomicU64::new(0));
        let (results, mut collected) = tokio::sync::mpsc::unbounded_channel();
        let mut phase = Phase::default();
        let mut ticker = tokio::time::interval(Duration::from_millis(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut due = 0.0;
        while started.elapsed() < length {
            ticker.tick().await;
            let target = rate * started.elapsed().as_secs_f64();
            while due < target {
                due += 1.0;
                phase.offered += 1;
                if outstanding.load(Ordering::Relaxed) >= MAX_OUTSTANDING {
                    phase.not_sent += 1;
                    continue;
                }
                outstanding.fetch_add(1, Ordering::Relaxed);
                let driver = self.clone();
                let results = results.clone();
                let outstanding = outstanding.clone();
                tokio::spawn(async move {
                    let answer = driver.one().await;
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                    let _ = results.send(answer);
                });
            }
        }
        drop(results);
        while let Some((verdict, took)) = collected.recv().await {
            record(&mut phase, verdict, took);
        }
        phase.finish(started.elapsed());
        phase
    }
}

fn record(phase: &mut Phase, verdict: Verdict, took: Duration) {
    let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    match verdict {
        Verdict::Ok => {
            phase.ok += 1;
            phase.ok_us.push(micros);
        }
        Verdict::Shed => {
            phase.shed += 1;
            phase.shed_us.push(micros);
        }
        Verdict::Failed(reason) => {
            phase.failed += 1;
            if phase.samples.len() < 3 {
                phase.samples.push(reason);
            }
        }
    }
}

fn judge(id: u64, status: StatusCode, body: &[u8]) -> Verdict {
    let message: serde_json::Value = match serde_json::from_slice(body) {
        Ok(message) => message,
        Err(_) => {
            return Verdict::Failed(format!(
                "request {id}: HTTP {status}, not JSON: {:?}",
                String::from_utf8_lossy(body)
            ));
        }
    };
    match status {
        StatusCode::OK if message["id"] == id && message["result"].is_object() => Verdict::Ok,
        StatusCode::SERVICE_UNAVAILABLE if message["error"]["code"] == -32000 => Verdict::Shed,
        _ => Verdict::Failed(format!("request {id}: HTTP {status}: {message}")),
    }
}
