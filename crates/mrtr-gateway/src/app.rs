//! The composition root: the one place the gateway's stack is built ([`service`]), and the
//! running gateway ([`start`], [`RunningGateway`]).
//!
//! A request meets, outermost first:
//!
//! 0. hyper's HTTP/1.1 and HTTP/2 server, plain or TLS, one task per connection, with its
//!    connection limits and graceful drain (`serve/`);
//! 1. the HTTP layer (`front::http_layers::HttpLayer`): credentials marked sensitive, a request id, a trace
//!    span per request, the id copied onto the answer;
//! 2. request decompression (`front::http_layers::DecompressRequestLayer`): gzip and deflate bodies decoded so
//!    that the MRTR layer reads them;
//! 3. the front ([`FrontLayer`]): load shedding, `Origin`/`Host` and media types, the path
//!    (`/mcp`; with `[oauth]` the Protected Resource Metadata at its well-known path; else 404),
//!    with `[oauth]` the bearer token (`auth/`), the request-body deadline, the access log line;
//! 4. the legacy front ([`legacy::DualEraLayer`]): a modern POST passes after one header comparison;
//!    clients of the `initialize` era are served here, MRTR bridged inside their requests;
//! 5. request metrics (`front::metrics::RequestMetricsLayer`), outside the layer so that they count its
//!    refusals; then the audit trail's collection point (`audit::AuditLayer`, always in the stack, passing requests through when `[audit]` is absent),
//!    which sees every call and its refusals as the metrics do;
//! 6. the MRTR layer ([`MrtrLayer`]): with `[[policy]]`, calls checked before anything else
//!    (`policy/`); `input_required` states sealed with the backend's route, retries opened and
//!    pinned to that backend;
//! 7. the bridge ([`Bridged`], `tasks/`): a legacy backend's own requests during the call of a
//!    client that declared the Tasks extension become a task on this replica, served here;
//! 8. the [`Proxy`]: mirrored MCP headers checked, the rate limits (`policy/`), routing and
//!    fan-out, the merged catalog (filtered by the policy), and forwarding to the backends
//!    (`upstream/`).
//!
//! [`start`] binds a listener and serves that stack; the health probe (`ops/readiness.rs`)
//! runs beside it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceBuilder;
use tower_mrtr::{Keyring, KeyringHandle, Mrtr, MrtrLayer};

use crate::audit::{AuditLayer, Audited};
use crate::config::GatewayConfig;
use crate::front::http_layers::{DecompressRequest, DecompressRequestLayer, Http, HttpLayer};
use crate::front::metrics::{RequestMetrics, RequestMetricsLayer};
use crate::front::origin::Guard;
use crate::front::shed::LoadShed;
use crate::front::{Front, FrontLayer, MCP_PATH};
use crate::legacy::{self, DualEra};
use crate::observe::trace::Traces;
use crate::ops::readiness::{self, Readiness, ReadyRule};
use crate::policy;
use crate::route::{KnownOrigin, Proxy};
use crate::serve::Server;
use crate::serve::drain::Lifecycle;
use crate::store::SharedStore;
use crate::tasks::{BridgeLayer, Bridged};
use crate::upstream::Backend;

/// The MCP stack behind the front, as [`service`] composes it.
pub type McpStack = DualEra<RequestMetrics<Audited<Mrtr<Bridged<Proxy>>>>>;

/// What [`service`] returns: the whole stack, as composed below.
pub type GatewayService = Http<DecompressRequest<Front<McpStack>>>;

/// The gateway as one tower service serving [`MCP_PATH`] (see the
/// [module docs](self) for the stack); `listen` chooses the default `Host` policy.
///
/// A `GET /mcp` gets `405` from the legacy front, without reaching a backend:
///
/// ```
/// # use std::sync::Arc;
/// use mrtr_gateway::{Backend, GatewayConfig};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = GatewayConfig::new(vec![Backend::new("alpha", "http://127.0.0.1:9/mcp")?]);
/// let keyring = Arc::new(tower_mrtr::Keyring::generate("k1")?);
/// let gateway = mrtr_gateway::service(&config, keyring, "127.0.0.1:8080".parse()?);
/// let request = http::Request::get("/mcp")
///     .header("host", "127.0.0.1:8080")
///     .body(http_body_util::Empty::<bytes::Bytes>::new())?;
/// let response = gateway.oneshot(request).await?;
/// assert_eq!(response.status(), 405);
/// assert_eq!(response.headers()["allow"], "POST");
/// # Ok(()) }
/// ```
///
/// # Panics
///
/// If `config.backends` is empty.
pub fn service(config: &GatewayConfig, keyring: Arc<Keyring>, listen: SocketAddr) -> GatewayService {
    service_with(config, KeyringHandle::from_shared(keyring), proxy(config), listen)
}

/// Step 8: the proxy, with the principal header, the policy (lists filtered), the rate limits
/// and, with traces on, the spans it begins.
fn proxy(config: &GatewayConfig) -> Proxy {
    Proxy::with_principal_header(
        config.backends_with_defaults(),
        config.settings.catalog_ttl.into(),
        config.settings.backend_timeout.into(),
        config.principal_header(),
    )
    .with_access(config.policy.clone(), config.rate_limits.clone())
    .traced(config.traces.is_some())
    .accountable(config.pins.clone(), config.audit.is_some())
}

/// [`service`] over an existing proxy, reading the keyring through `keys` (so that it can be
/// replaced while the gateway runs). The one place the stack is composed.
fn service_with(
    config: &GatewayConfig,
    keys: KeyringHandle,
    proxy: Proxy,
    listen: SocketAddr,
) -> GatewayService {
    ServiceBuilder::new()
        .layer(HttpLayer)
        .layer(DecompressRequestLayer)
        .layer(front_layer(config, listen))
        // One keyring handle for the legacy front and the MRTR layer, so a replaced keyring
        // reaches both.
        .layer(legacy_front(config, keys.clone()))
        .layer(RequestMetricsLayer::new())
        .layer(AuditLayer::new(config.audit.clone()))
        .layer(mrtr_layer(config, keys, &proxy))
        .layer(BridgeLayer::new(
            config.settings.bridged(),
            config.principal_header(),
        ))
        .service(proxy)
}

/// Step 3: shedding, the `Origin`/`Host`/media-type guard, the path (and the resource
/// server's metadata), the bearer token, and the body deadline.
fn front_layer(config: &GatewayConfig, listen: SocketAddr) -> FrontLayer {
    let settings = &config.settings;
    let guard = Guard {
        origins: settings.origins(),
        hosts: settings.hosts(listen),
    };
    FrontLayer::new(
        guard,
        LoadShed::new(settings.max_in_flight.get()),
        settings.request_body_timeout.into(),
    )
    .authenticate(config.auth.clone())
    // With [oauth] the resource server names the principal itself.
    .require_principal(config.auth.is_none().then(|| config.principal_header()).flatten())
    .traced(config.traces.clone())
    .audited(config.audit.clone())
}

/// Step 4: clients of the `initialize` era served, modern POSTs passed on after one header
/// comparison; it also answers the 405s on `/mcp`.
fn legacy_front(config: &GatewayConfig, keys: KeyringHandle) -> legacy::DualEraLayer {
    let front = legacy::DualEraLayer::new(config.settings.legacy(), keys)
        .principal_header(config.principal_header())
        .audience(config.settings.audience.as_deref().map(Arc::from))
        .max_request_body(config.settings.max_request_body);
    match &config.clock {
        Some(clock) => front.clock(clock.clone()),
        None => front,
    }
}

/// Step 6: the MRTR layer, with the configured expiry, body limit, round cap, audience, clock
/// and principal, and the policy's check of calls (knowing from `proxy`'s catalog where a name
/// comes from).
fn mrtr_layer(config: &GatewayConfig, keys: KeyringHandle, proxy: &Proxy) -> MrtrLayer {
    let mut layer = MrtrLayer::with_keyring_handle(keys)
        .ttl(config.settings.envelope_ttl.into())
        .max_request_body(config.settings.max_request_body)
        .max_rounds(config.settings.max_rounds.get());
    if let Some(audience) = &config.settings.audience {
        layer = layer.audience(audience.as_str());
    }
    if let Some(clock) = &config.clock {
        layer = layer.clock(clock.clone());
    }
    if let Some(header) = config.principal_header() {
        // The caller the front (or the resource server) left on the request: the principal
        // header read the one way everything keyed by principal reads it.
        layer = layer.bind_principal(move |parts| {
            policy::caller_of(&parts.extensions, &parts.headers, Some(&header))
                .map(|caller| caller.principal.to_string())
        });
    }
    if let Some(policy) = config.policy.clone() {
        let header = config.principal_header();
        let proxy = proxy.clone();
        layer = layer.authorize(move |parts, method, target| {
            let caller = policy::caller_of(&parts.extensions, &parts.headers, header.as_ref());
            let origin = target.and_then(|target| proxy.origin_of(method, target));
            let origin = origin.as_ref().map(KnownOrigin::as_origin);
            policy.authorize(caller.as_ref(), method, target, origin)
        });
    }
    layer
}

/// A running gateway.
#[derive(Debug)]
pub struct RunningGateway {
    addr: SocketAddr,
    tls: bool,
    stop: watch::Sender<bool>,
    task: JoinHandle<io::Result<()>>,
    probe: Option<JoinHandle<()>>,
    /// Kept to close the sessions with `initialize`-era backends once the server stopped.
    proxy: Proxy,
    /// Flushed once the server stopped.
    traces: Option<Arc<Traces>>,
    /// Written out and flushed once the server stopped.
    audit: Option<Arc<crate::audit::Audit>>,
    keys: KeyringHandle,
    lifecycle: Lifecycle,
    accepting: Arc<AtomicBool>,
    backends: Vec<Backend>,
    ready_rule: ReadyRule,
    /// The shared store, and the task that pings it so that `/readyz` stays current.
    store: Option<Arc<SharedStore>>,
    store_watch: Option<JoinHandle<()>>,
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

    /// Whether the gateway drains (see `serve/drain.rs`).
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
            store: self.store.as_ref().map(|store| store.health().clone()),
        }
    }

    /// Stops accepting connections at once, lets in-flight requests finish (within the drain
    /// timeout), and waits.
    pub async fn shutdown(self) -> io::Result<()> {
        let _ = self.stop.send(true);
        self.lifecycle.begin_drain();
        self.wait().await
    }

    /// Drains as on SIGTERM (`serve/drain.rs`): not ready at once, `Connection: close` on answers,
    /// stops accepting after the drain delay, and waits for open requests up to the drain
    /// timeout.
    pub async fn drain(self) -> io::Result<()> {
        self.lifecycle.begin_drain();
        self.wait().await
    }

    /// Waits until the server stops.
    pub async fn wait(self) -> io::Result<()> {
        let served = self.task.await.map_err(io::Error::other);
        for task in [self.probe, self.store_watch].into_iter().flatten() {
            task.abort();
        }
        self.proxy.upstreams().shutdown(self.proxy.backends()).await;
        if let Some(traces) = self.traces {
            // The exporter's client blocks; off the runtime's threads.
            let _ = tokio::task::spawn_blocking(move || traces.flush()).await;
        }
        if let Some(audit) = self.audit {
            let _ = tokio::task::spawn_blocking(move || audit.flush()).await;
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
    if let Some(auth) = &config.auth {
        // So that the first client need not wait for the issuer's keys; a failure is logged,
        // and the first request tries again.
        auth.load_keys().await;
    }
    let proxy = proxy(&config);
    let probe = config
        .health_interval()
        .map(|interval| tokio::spawn(readiness::probe(proxy.clone(), interval)));
    let store = config.shared_store.clone();
    let store_watch = store
        .clone()
        .zip(config.health_interval())
        .map(|(store, interval)| tokio::spawn(crate::store::watch(store, interval)));
    let app = service_with(&config, keys.clone(), proxy.clone(), addr);
    let (stop, stopped) = watch::channel(false);
    let lifecycle = Lifecycle::new();
    let accepting = Arc::new(AtomicBool::new(true));
    let server = Server {
        listener,
        service: app,
        tls: config.listener_tls.clone(),
        drain: Some((lifecycle.clone(), config.settings.drain())),
        stop: stopped,
        accepting: accepting.clone(),
        limits: config.settings.client_limits(),
    };
    Ok(RunningGateway {
        addr,
        tls: config.listener_tls.is_some(),
        stop,
        task: tokio::spawn(server.run()),
        probe,
        proxy,
        traces: config.traces.clone(),
        audit: config.audit.clone(),
        keys,
        lifecycle,
        accepting,
        backends: config.backends,
        ready_rule: config.settings.ready_backends,
        store,
        store_watch,
    })
}
