//! `mrtr-gateway`: a multi-backend MCP 2026-07-28 gateway that relays multi round-trip requests
//! (SEP-2322) statelessly, built on [`tower_mrtr::MrtrLayer`].
//!
//! The stack, outermost first:
//!
//! 0. `server`: hyper's HTTP/1.1 and HTTP/2 server (plain or TLS, [`tls`]), one task per
//!    connection, graceful drain ([`drain`]);
//! 1. [`front::Gateway`]: `Origin`/`Host` validation (403) and POST media types (415/406)
//!    ([`origin`]); paths other than `/mcp` get 404;
//! 2. [`telemetry::RequestMetricsLayer`]: counts and times every request, the layer's own
//!    refusals included;
//! 3. [`MrtrLayer`]: seals backend `requestState` into envelopes naming the backend, opens
//!    them on retries and pins the retry to that backend;
//! 4. [`Proxy`]: validates the mirrored MCP headers, routes by the layer's parsed request head,
//!    aggregates catalogs across backends ([`catalog`]), and forwards over HTTP (`forward`).
//!
//! Around all of it, [`middleware::HttpLayer`] (sensitive headers, request ids, a trace span per
//! request), then [`middleware::DecompressRequestLayer`] (gzip and deflate request bodies
//! decoded, so that the layer can read them).
//!
//! Between 1 and 2 sits the [`legacy`] front ([`legacy::DualEra`]): a POST declaring
//! `MCP-Protocol-Version: 2026-07-28` passes straight through it; clients of the `initialize`
//! era (2025-06-18, 2025-11-25) are served by it, with MRTR bridged inside their requests; GET,
//! and DELETE without a legacy session, get 405 with `Allow: POST`.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mrtr_gateway::{Backend, GatewayConfig, start};
//!
//! let config = GatewayConfig::new(vec![
//!     "alpha=http://127.0.0.1:9001/mcp".parse()?,
//!     "beta=http://127.0.0.1:9002/mcp".parse()?,
//! ]);
//! let keyring = std::env::var("MRTR_KEYS")?.parse()?;
//! let gateway = start(config, keyring, "127.0.0.1:8080".parse()?).await?;
//! println!("serving MCP at {}", gateway.url());
//! gateway.wait().await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use http::HeaderName;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower_layer::Layer;
use tower_mrtr::{Clock, Keyring, KeyringHandle, MrtrLayer};

pub mod access;
pub mod admin;
mod backend;
pub mod body;
pub mod catalog;
pub mod cli;
pub mod config_file;
pub mod deadline;
pub mod demo;
pub mod drain;
mod forward;
pub mod front;
mod headers;
pub mod health;
pub mod jsonrpc;
pub mod legacy;
pub mod logging;
pub mod middleware;
pub mod origin;
pub mod proxy;
pub mod relay;
pub mod reload;
mod server;
pub mod shed;
pub mod telemetry;
pub mod tls;

pub use backend::{Backend, BackendSpecError, DEFAULT_IDLE_TIMEOUT, DEFAULT_STALL_TIMEOUT};
pub use front::Gateway;

/// What [`service`] returns: the [`Gateway`] inside request decompression and the outermost
/// HTTP layers ([`middleware`]).
pub type GatewayService = middleware::HttpService<middleware::DecompressRequest<Gateway>>;
pub use headers::SUPPORTED_VERSIONS;
pub use origin::{HostPolicy, OriginPolicy};
pub use proxy::Proxy;
pub use server::ClientLimits;

/// The path the gateway serves MCP at.
pub const MCP_PATH: &str = "/mcp";

/// Everything the gateway needs besides its keyring.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Backends in priority order (first wins for duplicate resource URIs).
    pub backends: Vec<Backend>,
    /// Bind envelopes to this request header's value (set by an authenticating proxy in front).
    pub principal_header: Option<HeaderName>,
    /// Accepted browser origins.
    pub origins: OriginPolicy,
    /// Accepted `Host` values; `None` chooses by listen address (loopback names on a loopback
    /// address, anything otherwise).
    pub hosts: Option<HostPolicy>,
    /// How long a backend catalog is trusted before it is listed again on demand.
    pub catalog_ttl: Duration,
    /// How long a sealed `requestState` stays valid.
    pub envelope_ttl: Duration,
    /// How long to wait for a backend's response head (a backend's own setting wins).
    pub backend_timeout: Duration,
    /// How long an idle backend connection is kept (a backend's own setting wins); keep it
    /// below the backends' keep-alive timeouts.
    pub backend_idle_timeout: Duration,
    /// How long a backend's answer may send nothing before it is ended (a backend's own
    /// setting wins; see [`relay`]).
    pub backend_stall_timeout: Duration,
    /// Most requests in flight; more get 503 at once ([`shed`]).
    pub max_in_flight: usize,
    /// How long a request body may take once the gateway has to wait for it ([`deadline`]).
    pub request_body_timeout: Duration,
    /// Client connections: header limits and the idle keep-alive timeout.
    pub client_limits: ClientLimits,
    /// Largest request body accepted (413 above).
    pub max_request_body: usize,
    /// Where envelope expiry reads the time (tests); `None` for the system clock.
    pub clock: Option<Arc<dyn Clock>>,
    /// TLS on the MCP listener; `None` for plain HTTP.
    pub listener_tls: Option<Arc<tls::ListenerTls>>,
    /// How the gateway drains on [`RunningGateway::drain`] (SIGTERM).
    pub drain: drain::DrainConfig,
    /// Which backends must be up for `/readyz` to say ready.
    pub ready_rule: health::ReadyRule,
    /// How often every backend is sent a `server/discover` health probe; `None` (the default
    /// here; the binary probes every 10 s) sends none, and backends are judged by the catalog
    /// and discovery requests clients cause.
    pub health_interval: Option<Duration>,
    /// How clients of the `initialize` era are served.
    pub legacy: legacy::LegacyConfig,
}

impl GatewayConfig {
    /// Defaults: no principal binding, loopback origins, catalog TTL 30 s, envelope TTL 10 min,
    /// backend timeout 60 s, idle backend connections kept 4 s, backend stall timeout 5 min,
    /// 1024 requests in flight, request bodies up to 2 MiB arriving within 30 s, the
    /// [`ClientLimits`] defaults, plain HTTP, drain delay 5 s and timeout
    /// 30 s, ready when any backend is up, no health probes.
    pub fn new(backends: Vec<Backend>) -> Self {
        Self {
            backends,
            principal_header: None,
            origins: OriginPolicy::new([], true),
            hosts: None,
            catalog_ttl: Duration::from_secs(30),
            envelope_ttl: tower_mrtr::DEFAULT_TTL,
            backend_timeout: Duration::from_secs(60),
            backend_idle_timeout: DEFAULT_IDLE_TIMEOUT,
            backend_stall_timeout: DEFAULT_STALL_TIMEOUT,
            max_in_flight: shed::DEFAULT_MAX_IN_FLIGHT,
            request_body_timeout: deadline::DEFAULT_REQUEST_BODY_TIMEOUT,
            client_limits: ClientLimits::default(),
            max_request_body: tower_mrtr::DEFAULT_MAX_REQUEST_BODY,
            clock: None,
            listener_tls: None,
            drain: drain::DrainConfig::default(),
            ready_rule: health::ReadyRule::default(),
            health_interval: None,
            legacy: legacy::LegacyConfig::default(),
        }
    }
}

/// The gateway as one tower service ([`Gateway`] inside [`middleware::HttpLayer`]) serving
/// [`MCP_PATH`]; `listen` chooses the default `Host` policy.
///
/// # Panics
///
/// If `config.backends` is empty.
pub fn service(config: &GatewayConfig, keyring: Arc<Keyring>, listen: SocketAddr) -> GatewayService {
    let proxy = Proxy::new(
        backends_with_defaults(config),
        config.catalog_ttl,
        config.backend_timeout,
    );
    service_with(config, KeyringHandle::from_shared(keyring), proxy, listen)
}

/// [`service`] over an existing proxy, reading the keyring through `keys` (so that it can be
/// replaced while the gateway runs).
fn service_with(
    config: &GatewayConfig,
    keys: KeyringHandle,
    proxy: Proxy,
    listen: SocketAddr,
) -> GatewayService {
    // One handle for the layer and the legacy front, so a keyring replacement reaches both.
    let mut layer = MrtrLayer::with_keyring_handle(keys.clone())
        .ttl(config.envelope_ttl)
        .max_request_body(config.max_request_body);
    if let Some(clock) = &config.clock {
        layer = layer.clock(clock.clone());
    }
    if let Some(header) = config.principal_header.clone() {
        layer = layer.bind_principal(move |parts| {
            parts
                .headers
                .get(&header)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
    }
    // The request metrics sit outside the layer, so that they see the layer's own refusals.
    let mcp = telemetry::RequestMetricsLayer::new().layer(layer.layer(proxy));
    // ---- legacy front (issue 13): one header comparison for modern POSTs, everything else of
    // the `initialize` era served here. It also answers the 405s on `/mcp`.
    let mut front = legacy::Front::new(config.legacy.clone(), keys)
        .principal_header(config.principal_header.clone())
        .max_request_body(config.max_request_body);
    if let Some(clock) = &config.clock {
        front = front.clock(clock.clone());
    }
    let mcp = legacy::DualEra::new(mcp, front);
    // ---- end of the legacy front
    let hosts = config.hosts.clone().unwrap_or_else(|| {
        if listen.ip().is_loopback() {
            HostPolicy::loopback()
        } else {
            HostPolicy::any()
        }
    });
    let guard = origin::Guard {
        origins: config.origins.clone(),
        hosts,
    };
    let gateway = Gateway::new(
        guard,
        shed::LoadShed::new(config.max_in_flight),
        config.request_body_timeout,
        mcp,
    );
    // Compressed request bodies decoded before the front (nothing added without
    // Content-Encoding), so that the layer reads them; outermost, sensitive headers, request id
    // and trace span. See `middleware`.
    middleware::HttpLayer.layer(middleware::DecompressRequestLayer.layer(gateway))
}

/// The configured backends, with the gateway's defaults where a backend has no setting of its
/// own.
fn backends_with_defaults(config: &GatewayConfig) -> Vec<Backend> {
    config
        .backends
        .iter()
        .map(|backend| {
            let mut backend = backend.clone();
            if backend.idle_timeout().is_none() {
                backend = backend.with_idle_timeout(config.backend_idle_timeout);
            }
            if backend.stall_timeout().is_none() {
                backend = backend.with_stall_timeout(config.backend_stall_timeout);
            }
            backend
        })
        .collect()
}

/// A running gateway.
#[derive(Debug)]
pub struct RunningGateway {
    addr: SocketAddr,
    tls: bool,
    stop: watch::Sender<bool>,
    task: JoinHandle<io::Result<()>>,
    probe: Option<JoinHandle<()>>,
    keys: KeyringHandle,
    lifecycle: drain::Lifecycle,
    accepting: Arc<AtomicBool>,
    backends: Vec<Backend>,
    ready_rule: health::ReadyRule,
}

impl RunningGateway {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}/mcp` (`https://` with listener TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{MCP_PATH}", self.addr)
    }

    /// The keyring in use; [`KeyringHandle::store`] replaces it for new requests.
    pub fn keys(&self) -> &KeyringHandle {
        &self.keys
    }

    /// Whether the gateway drains (see [`drain`]).
    pub fn lifecycle(&self) -> &drain::Lifecycle {
        &self.lifecycle
    }

    /// The configured backends, with their health.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// Which backends must be up for the gateway to be ready.
    pub fn ready_rule(&self) -> health::ReadyRule {
        self.ready_rule
    }

    /// Stops accepting connections at once, lets in-flight requests finish (within the drain
    /// timeout), and waits.
    pub async fn shutdown(self) -> io::Result<()> {
        let _ = self.stop.send(true);
        self.lifecycle.begin_drain();
        self.wait().await
    }

    /// Drains as on SIGTERM ([`drain`]): not ready at once, `Connection: close` on answers,
    /// stops accepting after the drain delay, and waits for open requests up to the drain
    /// timeout.
    pub async fn drain(self) -> io::Result<()> {
        self.lifecycle.begin_drain();
        self.wait().await
    }

    /// Waits until the server stops.
    pub async fn wait(self) -> io::Result<()> {
        let served = self.task.await.map_err(io::Error::other);
        if let Some(probe) = self.probe {
            probe.abort();
        }
        served?
    }
}

/// Binds `addr` and serves the gateway until [`RunningGateway::shutdown`].
pub async fn start(config: GatewayConfig, keyring: Keyring, addr: SocketAddr) -> io::Result<RunningGateway> {
    start_with_keys(config, KeyringHandle::new(keyring), addr).await
}

/// [`start`] with a keyring shared with other gateways (tests, embedding).
pub async fn start_shared(
    config: GatewayConfig,
    keyring: Arc<Keyring>,
    addr: SocketAddr,
) -> io::Result<RunningGateway> {
    start_with_keys(config, KeyringHandle::from_shared(keyring), addr).await
}

/// [`start`] reading the keyring through `keys`, which can be replaced while the gateway runs
/// (see [`reload`]).
pub async fn start_with_keys(
    config: GatewayConfig,
    keys: KeyringHandle,
    addr: SocketAddr,
) -> io::Result<RunningGateway> {
    if config.backends.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "at least one backend is required",
        ));
    }
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let proxy = Proxy::new(
        backends_with_defaults(&config),
        config.catalog_ttl,
        config.backend_timeout,
    );
    let probe = config
        .health_interval
        .map(|interval| tokio::spawn(health::probe(proxy.clone(), interval)));
    let app = service_with(&config, keys.clone(), proxy, addr);
    let (stop, stopped) = watch::channel(false);
    let lifecycle = drain::Lifecycle::new();
    let accepting = Arc::new(AtomicBool::new(true));
    let server = server::Server {
        listener,
        service: app,
        tls: config.listener_tls.clone(),
        drain: Some((lifecycle.clone(), config.drain)),
        stop: stopped,
        accepting: accepting.clone(),
        limits: config.client_limits,
    };
    Ok(RunningGateway {
        addr,
        tls: config.listener_tls.is_some(),
        stop,
        task: tokio::spawn(server.run()),
        probe,
        keys,
        lifecycle,
        accepting,
        backends: config.backends,
        ready_rule: config.ready_rule,
    })
}
