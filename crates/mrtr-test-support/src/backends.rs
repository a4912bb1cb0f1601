//! Backends for the gateway to talk to: the two demo backends (rmcp) as a [`Stack`], alone or
//! behind gateways; a raw hyper backend that answers every request in a chosen way
//! ([`start_backend`], [`Answer`]) for faults rmcp would never produce; an `initialize`-era
//! backend behind a gateway ([`legacy_behind`]) or a fleet of them ([`replica_of_legacy`]); and the params of the demo's two-round
//! `delete_branch` flow.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use mrtr_backends::{
    DemoBackend, DemoCatalog, LegacyBackend, ResponseMode, ServedBackend, ServedLegacy, StateSealer, serve,
    serve_legacy,
};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway, start_shared};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tower_mrtr::Keyring;

use crate::gateway::{gateway, keyring};
use crate::wait::{TIMEOUT, eventually};

/// A gateway in front of `backend`, served over HTTP as the backend `old`, with `config` applied
/// and the settings resolved, once the gateway's probe (hourly after the first) found it legacy.
pub async fn legacy_behind(
    backend: &LegacyBackend,
    config: impl FnOnce(&mut GatewayConfig),
) -> anyhow::Result<(ServedLegacy, RunningGateway)> {
    let served = serve_legacy(backend.clone()).await?;
    let gateway = replica_of_legacy(&served, keyring(), "127.0.0.1:0".parse()?, config).await?;
    Ok((served, gateway))
}

/// One replica of a fleet in front of the legacy backend `served` (as `old`): a gateway on
/// `addr` with the shared `keys`, `config` applied, once its probe found the backend legacy.
pub async fn replica_of_legacy(
    served: &ServedLegacy,
    keys: Arc<Keyring>,
    addr: SocketAddr,
    config: impl FnOnce(&mut GatewayConfig),
) -> anyhow::Result<RunningGateway> {
    let mut settings = GatewayConfig::new(vec![Backend::new("old", served.url())?]);
    settings.settings.health_interval = PositiveSeconds::from_secs(3600);
    config(&mut settings);
    let settings = settings.resolve_settings().map_err(anyhow::Error::msg)?;
    let gateway = start_shared(settings, keys, addr).await?;
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the backend found legacy", || async {
        readiness.check().1["backends"]["old"]["era"] == "legacy"
    })
    .await;
    Ok(gateway)
}

/// Two demo backends (`alpha`, `beta`) behind one or more gateways.
#[derive(Debug)]
pub struct Stack {
    /// The demo backend `alpha`.
    pub alpha: ServedBackend,
    /// The demo backend `beta`.
    pub beta: ServedBackend,
    /// The gateways in front of both; [`Stack::url`] is the first one's.
    pub gateways: Vec<RunningGateway>,
}

impl Stack {
    /// `alpha` and `beta` in the given response modes, with independent state keys.
    pub async fn start(
        alpha_mode: ResponseMode,
        beta_mode: ResponseMode,
    ) -> anyhow::Result<(ServedBackend, ServedBackend)> {
        let alpha = serve(DemoBackend::alpha("alpha")?, alpha_mode).await?;
        let beta = serve(DemoBackend::beta("beta")?, beta_mode).await?;
        Ok((alpha, beta))
    }

    /// `alpha` and `beta` sharing one state key **and scope**, so each accepts the other's raw
    /// `requestState`: only the gateway can tell them apart.
    pub async fn start_shared_key() -> anyhow::Result<(ServedBackend, ServedBackend)> {
        let sealer = StateSealer::with_key("shared", vec![7u8; 32])?;
        let alpha = serve(
            DemoBackend::with_sealer("alpha", DemoCatalog::Alpha, sealer.clone()),
            ResponseMode::Json,
        )
        .await?;
        let beta = serve(
            DemoBackend::with_sealer("beta", DemoCatalog::Beta, sealer),
            ResponseMode::Json,
        )
        .await?;
        Ok((alpha, beta))
    }

    /// The backends alpha and beta as gateway configuration.
    pub fn backends(alpha: &ServedBackend, beta: &ServedBackend) -> Vec<Backend> {
        vec![
            Backend::new("alpha", &alpha.url()).unwrap(),
            Backend::new("beta", &beta.url()).unwrap(),
        ]
    }

    /// Default stack: alpha and beta (modes given) behind one gateway.
    pub async fn new(alpha_mode: ResponseMode, beta_mode: ResponseMode) -> anyhow::Result<Self> {
        let (alpha, beta) = Self::start(alpha_mode, beta_mode).await?;
        let config = GatewayConfig::new(Self::backends(&alpha, &beta));
        Self::with_gateway(alpha, beta, config).await
    }

    /// `alpha` and `beta` behind one gateway serving `config`, with a fresh [`keyring`].
    pub async fn with_gateway(
        alpha: ServedBackend,
        beta: ServedBackend,
        config: GatewayConfig,
    ) -> anyhow::Result<Self> {
        let gateway = gateway(config, keyring()).await?;
        Ok(Self {
            alpha,
            beta,
            gateways: vec![gateway],
        })
    }

    /// The first gateway's MCP endpoint.
    pub fn url(&self) -> String {
        self.gateways[0].url()
    }

    /// Requests both backends received so far.
    pub fn backend_requests(&self) -> (u64, u64) {
        (self.alpha.requests(), self.beta.requests())
    }

    /// Shuts down every gateway, then both backends.
    pub async fn stop(self) -> anyhow::Result<()> {
        for gateway in self.gateways {
            gateway.shutdown().await?;
        }
        self.alpha.shutdown().await?;
        self.beta.shutdown().await?;
        Ok(())
    }
}

/// Round 1 of the demo's `delete_branch` flow with `name` (prefixed or not): `tools/call` params.
pub fn delete_branch(name: &str) -> Value {
    json!({ "name": name, "arguments": { "repo": "acme/api", "branch": "old" } })
}

/// Round 2: the elicitation answered and `state` echoed.
pub fn delete_branch_retry(name: &str, state: &str) -> Value {
    let mut params = delete_branch(name);
    params["requestState"] = json!(state);
    params["inputResponses"] =
        json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } });
    params
}

/// How a test MCP backend ([`start_backend`]) answers every request.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// A JSON result.
    Json,
    /// A JSON result after this delay.
    JsonAfter(Duration),
    /// An SSE stream: a progress notification, then the connection is cut.
    SseThenDie,
    /// An SSE stream: a progress notification, then nothing.
    SseThenStall,
}

type BackendBody =
    Either<Full<Bytes>, StreamBody<futures_util::stream::BoxStream<'static, io::Result<Frame<Bytes>>>>>;

async fn answer(
    request: Request<Incoming>,
    answer: Answer,
    calls: Arc<AtomicUsize>,
) -> Result<Response<BackendBody>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&body).unwrap_or_default();
    if message["method"] == "tools/call" {
        calls.fetch_add(1, Ordering::SeqCst);
    }
    let id = message["id"].clone();
    let progress = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";
    let stream = match answer {
        Answer::Json | Answer::JsonAfter(_) => {
            if let Answer::JsonAfter(delay) = answer {
                tokio::time::sleep(delay).await;
            }
            let result =
                json!({"jsonrpc": "2.0", "id": id, "result": {"content": [], "resultType": "complete"}});
            return Ok(Response::builder()
                .header("content-type", "application/json")
                .body(Either::Left(Full::new(Bytes::from(result.to_string()))))
                .unwrap());
        }
        Answer::SseThenDie => {
            futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(progress.as_bytes())))])
                .chain(futures_util::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(io::Error::other("the backend process died"))
                }))
                .boxed()
        }
        Answer::SseThenStall => {
            futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(progress.as_bytes())))])
                .chain(futures_util::stream::pending())
                .boxed()
        }
    };
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(Either::Right(StreamBody::new(stream)))
        .unwrap())
}

/// Serves `mode` on 127.0.0.1; with `idle_close`, a connection that sends no request head
/// for that long is closed (hyper's header read timeout, which runs while a connection idles).
/// Returns the backend's URL and its count of accepted connections.
pub async fn start_backend(mode: Answer, idle_close: Option<Duration>) -> (String, Arc<AtomicUsize>) {
    let (url, connections, _) = start_counting_backend(mode, idle_close).await;
    (url, connections)
}

/// [`start_backend`], also returning how many `tools/call` requests it has received (counted as
/// each arrives, before it is answered), so that a test can wait for calls to be in flight
/// instead of sleeping.
pub async fn start_counting_backend(
    mode: Answer,
    idle_close: Option<Duration>,
) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let received = calls.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(idle_close);
            let calls = received.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| answer(request, mode, calls.clone()));
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (url, connections, calls)
}
