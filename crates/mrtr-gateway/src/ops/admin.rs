//! The admin listener (`--admin-listen ADDR`): `/metrics`, `/healthz` and `/readyz`, apart
//! from the MCP listener so that neither probes nor scrapes are exposed to MCP clients.
//!
//! | path | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text: the gateway's metrics (`docs/operations.md` lists them) and the MRTR layer's |
//! | `GET /healthz` | `200 ok` while the process serves (liveness) |
//! | `GET /readyz` | `200` when ready, else `503`; JSON with the reasons, the active key id and each backend's state ([`Readiness::check`](crate::ops::readiness::Readiness::check)) |
//!
//! ```
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mrtr_gateway::admin;
//! use mrtr_gateway::{GatewayConfig, start};
//!
//! let config = GatewayConfig::new(vec!["alpha=http://127.0.0.1:9001/mcp".parse()?]);
//! let gateway = start(config, tower_mrtr::Keyring::generate("k1")?, "127.0.0.1:0".parse()?).await?;
//! let metrics = admin::install_prometheus_recorder()?;
//! let admin = admin::start(admin::AdminState::new(gateway.readiness(), Some(metrics)), "127.0.0.1:0".parse()?).await?;
//! println!("readiness at http://{}/readyz", admin.addr());
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::observe::metrics::{BYTES_BUCKETS, SECONDS_BUCKETS};
use crate::ops::readiness::Readiness;
use crate::serve::{ClientLimits, Server};

/// Installs the process-wide Prometheus recorder (histograms with the buckets in
/// `observe/metrics.rs`) and describes the gateway's metrics. Call once per process.
pub fn install_prometheus_recorder() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Suffix("_bytes".to_owned()), BYTES_BUCKETS)?
        .install_recorder()?;
    crate::observe::metrics::describe();
    // Histograms keep their samples until upkeep folds them in; without it memory grows.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(5));
        loop {
            ticks.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// What a connection to the admin listener may hold: it serves probes and scrapes, a few
/// requests with small heads.
const ADMIN_LIMITS: ClientLimits = ClientLimits {
    idle_timeout: Duration::from_secs(30),
    max_header_bytes: 16 * 1024,
    max_headers: 100,
    max_connections: 64,
    park_after: crate::serve::PARK_AFTER,
};

/// What the admin endpoints read.
#[derive(Clone, Debug)]
pub struct AdminState {
    readiness: Readiness,
    prometheus: Option<PrometheusHandle>,
}

impl AdminState {
    /// `/readyz` judges by `readiness` (a running gateway's is
    /// [`RunningGateway::readiness`](crate::RunningGateway::readiness)); `/metrics` renders
    /// `prometheus` (404 without it).
    pub fn new(readiness: Readiness, prometheus: Option<PrometheusHandle>) -> Self {
        Self {
            readiness,
            prometheus,
        }
    }
}

/// The admin endpoints as a router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Arc::new(state))
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    match &state.prometheus {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            handle.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no metrics recorder installed\n").into_response(),
    }
}

async fn ready(State(state): State<Arc<AdminState>>) -> Response {
    let (ready, body) = state.readiness.check();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// A running admin listener.
#[derive(Debug)]
pub struct RunningAdmin {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<io::Result<()>>,
}

impl RunningAdmin {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving (call it after the MCP listener has drained).
    pub async fn shutdown(self) -> io::Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(io::Error::other)?
    }
}

/// Binds `addr` and serves the admin endpoints until [`RunningAdmin::shutdown`].
pub async fn start(state: AdminState, addr: SocketAddr) -> io::Result<RunningAdmin> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let server = Server {
        listener,
        service: router(state),
        tls: None,
        drain: None,
        stop: stopped,
        accepting: Arc::new(AtomicBool::new(true)),
        limits: ADMIN_LIMITS,
    };
    Ok(RunningAdmin {
        addr,
        stop,
        task: tokio::spawn(server.run()),
    })
}
