//! Serving a backend over Streamable HTTP (MCP `2026-07-28`) with axum.
//!
//! [`serve`] binds `127.0.0.1:0` (or [`ServeOptions::addr`]), mounts rmcp's
//! [`StreamableHttpService`] at exactly `/mcp`, and returns a
//! [`ServedBackend`] with the bound address and a shutdown handle.
//!
//! The service is configured for the stateless 2026-07-28 transport:
//!
//! * `legacy_session_mode = false` with [`NeverSessionManager`]: no
//!   `Mcp-Session-Id`, and GET/DELETE on `/mcp` answer `405`;
//! * `stateless_protocol_metadata_required = true`: a request POST without
//!   `MCP-Protocol-Version` gets HTTP 400 / `-32020`, and one without the
//!   `_meta` protocol version gets HTTP 400 / `-32602`;
//! * [`ResponseMode::Json`] sets `json_response = true` (one
//!   `application/json` body per request); [`ResponseMode::Sse`] leaves it
//!   `false`, so every successful request is answered with a
//!   `text/event-stream` carrying the response as its only event. In both
//!   modes rmcp answers errors that map to HTTP 4xx (`-32020`, `-32021`,
//!   `-32022`, `-32601`, malformed `_meta`) with a JSON body;
//! * DNS-rebinding protection: the `Host` header must be a loopback name
//!   (`localhost`, `127.0.0.1`, `::1`, any port) unless
//!   [`ServeOptions::allowed_hosts`] says otherwise, and a present `Origin`
//!   must be a loopback origin (missing `Origin` is accepted).

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::Router;
use rmcp::{
    ServerHandler,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
    },
};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

/// The path the MCP endpoint is mounted at.
pub const MCP_PATH: &str = "/mcp";

/// How successful request POSTs are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseMode {
    /// `Content-Type: application/json`, one JSON-RPC response per POST.
    #[default]
    Json,
    /// `Content-Type: text/event-stream`, the response as the last SSE event.
    Sse,
}

/// Options for [`serve`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Address to bind; defaults to `127.0.0.1:0`.
    pub addr: SocketAddr,
    /// JSON or SSE responses.
    pub mode: ResponseMode,
    /// `Host` allow-list (names or `host:port`); defaults to loopback names.
    /// An empty list disables the check.
    pub allowed_hosts: Vec<String>,
    /// `Origin` allow-list; defaults to loopback origins on any port.
    pub allowed_origins: Vec<String>,
    /// SSE keep-alive comment interval (SSE mode only); `None` disables it.
    pub sse_keep_alive: Option<Duration>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            mode: ResponseMode::Json,
            allowed_hosts: ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec(),
            allowed_origins: ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .map(String::from)
                .to_vec(),
            sse_keep_alive: Some(Duration::from_secs(15)),
        }
    }
}

impl ServeOptions {
    /// Default options with the given response mode.
    pub fn new(mode: ResponseMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Sets the address to bind.
    pub fn with_addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Replaces the `Host` allow-list (empty disables the check).
    pub fn with_allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the `Origin` allow-list (empty disables the check).
    pub fn with_allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    fn http_config(&self, cancel: CancellationToken) -> StreamableHttpServerConfig {
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(self.mode == ResponseMode::Json)
            .with_stateless_protocol_metadata_required(true)
            .with_sse_keep_alive(self.sse_keep_alive)
            .with_sse_retry(None)
            .with_cancellation_token(cancel);
        config = if self.allowed_hosts.is_empty() {
            config.disable_allowed_hosts()
        } else {
            config.with_allowed_hosts(self.allowed_hosts.iter().cloned())
        };
        if self.allowed_origins.is_empty() {
            config.disable_allowed_origins()
        } else {
            config.with_allowed_origins(self.allowed_origins.iter().cloned())
        }
    }
}

/// Stops a served backend; cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(CancellationToken);

impl ShutdownHandle {
    /// Starts a graceful shutdown: stop accepting connections and cancel
    /// in-flight request streams.
    pub fn shutdown(&self) {
        self.0.cancel();
    }

    /// Whether shutdown has been requested.
    pub fn is_shutdown(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// A running backend.
///
/// Dropping it does **not** stop the server; call [`ServedBackend::shutdown`]
/// or use the [`ShutdownHandle`].
#[derive(Debug)]
pub struct ServedBackend {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    shutdown: ShutdownHandle,
    task: JoinHandle<io::Result<()>>,
}

impl ServedBackend {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many HTTP requests the server has received so far (tests use it
    /// to prove that a gateway refused something without reaching it).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// `http://{addr}/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// A handle that stops the server.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Shuts down and waits for the server task to finish.
    pub async fn shutdown(self) -> io::Result<()> {
        self.shutdown.shutdown();
        self.wait().await
    }

    /// Waits until the server stops (after a shutdown, or on an I/O error).
    pub async fn wait(self) -> io::Result<()> {
        match self.task.await {
            Ok(result) => result,
            Err(error) => Err(io::Error::other(error)),
        }
    }
}

/// Builds the axum router serving `handler` at `/mcp` (useful to embed it in
/// a larger app). A clone of `handler` serves each request.
pub fn router<H>(handler: H, options: &ServeOptions, cancel: CancellationToken) -> Router
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        options.http_config(cancel),
    );
    Router::new().route_service(MCP_PATH, service)
}

/// Serves `handler` over this process's stdin and stdout (the MCP stdio transport) until stdin
/// closes.
pub async fn serve_stdio<H>(handler: H) -> io::Result<()>
where
    H: ServerHandler + Send + Sync + 'static,
{
    use rmcp::ServiceExt;
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(io::Error::other)?;
    running.waiting().await.map_err(io::Error::other)?;
    Ok(())
}

/// Serves `handler` on `127.0.0.1:0` with the given response mode.
pub async fn serve<H>(handler: H, mode: ResponseMode) -> io::Result<ServedBackend>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    serve_with(handler, ServeOptions::new(mode)).await
}

/// Serves `handler` with explicit options.
pub async fn serve_with<H>(handler: H, options: ServeOptions) -> io::Result<ServedBackend>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    let listener = TcpListener::bind(options.addr).await?;
    let addr = listener.local_addr()?;
    let cancel = CancellationToken::new();
    let requests = Arc::new(AtomicU64::new(0));
    let counter = requests.clone();
    let app = router(handler, &options, cancel.child_token()).layer(axum::middleware::map_request(
        move |request: axum::extract::Request| {
            counter.fetch_add(1, Ordering::SeqCst);
            std::future::ready(request)
        },
    ));
    let stop = cancel.clone();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await
    });
    Ok(ServedBackend {
        addr,
        requests,
        shutdown: ShutdownHandle(cancel),
        task,
    })
}
