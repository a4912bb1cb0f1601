//! The composition root: the one place the gateway's stack is built, outermost first, and the
//! running gateway ([`start`], [`RunningGateway`]).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower_layer::Layer;
use tower_mrtr::{Keyring, KeyringHandle, MrtrLayer};

use crate::config::GatewayConfig;
use crate::front::drain::Lifecycle;
use crate::front::http_layers::{self, DecompressRequest, HttpService};
use crate::front::metrics::RequestMetricsLayer;
use crate::front::origin::{Guard, HostPolicy};
use crate::front::server::Server;
use crate::front::{Gateway, MCP_PATH, shed};
use crate::legacy;
use crate::ops::readiness::{self, Readiness, ReadyRule};
use crate::route::Proxy;
use crate::upstream::Backend;

/// What [`service`] returns: the [`Gateway`] inside request decompression and the outermost
/// HTTP layers ([`http_layers`]).
pub type GatewayService = HttpService<DecompressRequest<Gateway>>;

/// The gateway as one tower service ([`Gateway`] inside [`http_layers::HttpLayer`]) serving
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
    let mcp = RequestMetricsLayer::new().layer(layer.layer(proxy));
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
    let guard = Guard {
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
    http_layers::HttpLayer.layer(http_layers::DecompressRequestLayer.layer(gateway))
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
    lifecycle: Lifecycle,
    accepting: Arc<AtomicBool>,
    backends: Vec<Backend>,
    ready_rule: ReadyRule,
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

    /// Whether the gateway drains (see [`crate::front::drain`]).
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    /// The configured backends, with their health.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// Which backends must be up for the gateway to be ready.
    pub fn ready_rule(&self) -> ReadyRule {
        self.ready_rule
    }

    /// What this gateway's readiness is judged from (for `/readyz`, [`crate::ops::admin`]).
    pub fn readiness(&self) -> Readiness {
        Readiness {
            keys: self.keys.clone(),
            accepting: self.accepting.clone(),
            lifecycle: self.lifecycle.clone(),
            backends: self.backends.clone(),
            rule: self.ready_rule,
        }
    }

    /// Stops accepting connections at once, lets in-flight requests finish (within the drain
    /// timeout), and waits.
    pub async fn shutdown(self) -> io::Result<()> {
        let _ = self.stop.send(true);
        self.lifecycle.begin_drain();
        self.wait().await
    }

    /// Drains as on SIGTERM ([`crate::front::drain`]): not ready at once, `Connection: close` on answers,
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
/// (see [`crate::ops::reload`]).
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
        .map(|interval| tokio::spawn(readiness::probe(proxy.clone(), interval)));
    let app = service_with(&config, keys.clone(), proxy, addr);
    let (stop, stopped) = watch::channel(false);
    let lifecycle = Lifecycle::new();
    let accepting = Arc::new(AtomicBool::new(true));
    let server = Server {
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
