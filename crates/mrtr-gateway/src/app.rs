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
//!    refusals; then, with `[audit]`, the audit trail's collection point (`audit::AuditLayer`),
//!    which sees every call and its refusals as the metrics do. Without `[audit]`, [`start`]
//!    serves the stack without it (a second instance of the same composition, `compose`), so
//!    that an unconfigured trail costs nothing per request;
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
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceBuilder;
use tower::layer::util::Identity;
use tower_layer::Layer;
use tower_mrtr::{Keyring, KeyringHandle, Mrtr, MrtrLayer};

use crate::audit::{AuditLayer, Audited};
use crate::auth::Authenticator;
use crate::config::{GatewayConfig, LegacyEraPath};
use crate::front::http_layers::{DecompressRequest, DecompressRequestLayer, Http, HttpLayer};
use crate::front::metrics::{RequestMetrics, RequestMetricsLayer};
use crate::front::origin::Guard;
use crate::front::shed::LoadShed;
use crate::front::{Front, FrontLayer, MCP_PATH};
use crate::legacy::{self, DualEra};
use crate::observe::trace::Traces;
use crate::ops::live::{Live, Proxies};
use crate::ops::readiness::{self, Readiness, ReadyRule};
use crate::policy;
use crate::route::{KnownOrigin, Proxy};
use crate::serve::Server;
use crate::serve::drain::Lifecycle;
use crate::store::SharedStore;
use crate::tasks::{BridgeLayer, Bridged};
use crate::upstream::Backend;

/// The MCP stack behind the front, as [`service`] composes it; `Calls` is what serves the
/// modern calls (the MRTR layer and the proxy in use, with or without the audit trail around
/// them).
pub type McpStack<Calls = Audited<Mrtr<Bridged<Live>>>> = DualEra<RequestMetrics<Calls>>;

/// What [`service`] returns: the whole stack, as composed below.
pub type GatewayService<Calls = Audited<Mrtr<Bridged<Live>>>> =
    Http<DecompressRequest<Front<McpStack<Calls>>>>;

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
    let (proxies, auth) = live(config);
    service_with(config, KeyringHandle::from_shared(keyring), proxies, auth, listen)
}

/// The cells a config reload swaps (`ops/live.rs`): the proxy, and the OAuth resource server.
fn live(config: &GatewayConfig) -> (Proxies, Option<Arc<ArcSwap<Authenticator>>>) {
    let proxies = Arc::new(ArcSwap::from_pointee(proxy(config)));
    let auth = config.auth.clone().map(|auth| Arc::new(ArcSwap::new(auth)));
    (proxies, auth)
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
    .bridging(config.settings.bridged_tasks_max > 0)
    .accountable(config.pins.clone(), config.audit.is_some())
}

/// [`service`] over the proxy `proxies` holds and the resource server `auth` holds, reading the
/// keyring through `keys` (each can be replaced while the gateway runs), with the audit trail's
/// collection point in the stack.
fn service_with(
    config: &GatewayConfig,
    keys: KeyringHandle,
    proxies: Proxies,
    auth: Option<Arc<ArcSwap<Authenticator>>>,
    listen: SocketAddr,
) -> GatewayService {
    compose(
        config,
        keys,
        (proxies, auth),
        listen,
        AuditLayer::new(config.audit.clone()),
    )
}

/// The one place the stack is composed, with `calls` around the MRTR layer: the audit trail's
/// layer, or [`Identity`] when there is no trail to keep.
fn compose<L>(
    config: &GatewayConfig,
    keys: KeyringHandle,
    (proxies, auth): (Proxies, Option<Arc<ArcSwap<Authenticator>>>),
    listen: SocketAddr,
    calls: L,
) -> GatewayService<L::Service>
where
    L: Layer<Mrtr<Bridged<Live>>>,
{
    ServiceBuilder::new()
        .layer(HttpLayer)
        .layer(DecompressRequestLayer)
        .layer(front_layer(config, auth, listen))
        // One keyring handle for the legacy front, the MRTR layer and the bridge, so a replaced
        // keyring reaches all three.
        .layer(legacy_front(config, keys.clone()))
        .layer(RequestMetricsLayer::new())
        .layer(calls)
        .layer(mrtr_layer(config, keys.clone(), &proxies))
        .layer(BridgeLayer::new(
            config.settings.bridged(),
            config.principal_header(),
            keys,
            proxies.clone(),
        ))
        .service(Live::new(proxies, config.reloadable))
}

/// Step 3: shedding, the `Origin`/`Host`/media-type guard, the path (and the resource
/// server's metadata), the bearer token, and the body deadline.
fn front_layer(
    config: &GatewayConfig,
    auth: Option<Arc<ArcSwap<Authenticator>>>,
    listen: SocketAddr,
) -> FrontLayer {
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
    .authenticate(auth)
    // With [oauth] the resource server names the principal itself.
    .require_principal(config.auth.is_none().then(|| config.principal_header()).flatten())
    .traced(config.traces.clone())
    .audited(config.audit.clone())
    .legacy_era_path(settings.legacy_era_path.as_ref().map(LegacyEraPath::shared))
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
/// and principal, and the policy's check of calls (the policy of the proxy in use, knowing from
/// its catalog where a name comes from).
fn mrtr_layer(config: &GatewayConfig, keys: KeyringHandle, proxies: &Proxies) -> MrtrLayer {
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
    let header = config.principal_header();
    if config.reloadable {
        // In place without a policy too: a reload may add one.
        let proxies = proxies.clone();
        layer.authorize(move |parts, method, target| {
            authorize(&proxies.load(), header.as_ref(), parts, method, target)
        })
    } else if config.policy.is_some() {
        let proxy = proxies.load_full();
        layer
            .authorize(move |parts, method, target| authorize(&proxy, header.as_ref(), parts, method, target))
    } else {
        layer
    }
}

/// The check of a call by `proxy`'s policy, if it has one.
fn authorize(
    proxy: &Proxy,
    header: Option<&http::HeaderName>,
    parts: &http::request::Parts,
    method: &str,
    target: Option<&str>,
) -> Result<(), tower_mrtr::Denied> {
    let Some(policy) = proxy.policy() else {
        return Ok(());
    };
    let caller = policy::caller_of(&parts.extensions, &parts.headers, header);
    let origin = target.and_then(|target| proxy.origin_of(method, target));
    let origin = origin.as_ref().map(KnownOrigin::as_origin);
    policy.authorize(caller.as_ref(), method, target, origin)
}

/// A running gateway.
#[derive(Debug)]
pub struct RunningGateway {
    addr: SocketAddr,
    tls: bool,
    stop: watch::Sender<bool>,
    task: JoinHandle<io::Result<()>>,
    probe: Option<JoinHandle<()>>,
    /// The proxy in use (replaced by [`reconfigure`](Self::reconfigure)); its sessions with
    /// `initialize`-era backends are closed once the server stopped.
    proxies: Proxies,
    /// The OAuth resource server in use, with `[oauth]`.
    auth: Option<Arc<ArcSwap<Authenticator>>>,
    /// Flushed once the server stopped.
    traces: Option<Arc<Traces>>,
    /// Written out and flushed once the server stopped.
    audit: Option<Arc<crate::audit::Audit>>,
    keys: KeyringHandle,
    lifecycle: Lifecycle,
    accepting: Arc<AtomicBool>,
    ready_rule: ReadyRule,
    /// How long a backend a reload removed may finish its calls in flight.
    retire_limit: Duration,
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

    /// The backends in use, with their health.
    pub fn backends(&self) -> Vec<Backend> {
        self.proxies.load().backends().to_vec()
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
            proxies: self.proxies.clone(),
            rule: self.ready_rule,
            store: self.store.as_ref().map(|store| store.health().clone()),
        }
    }

    /// What replaces this gateway's backends, policy, limits and resource server while it runs
    /// (the binary's reload of the config file).
    pub(crate) fn reconfigurer(&self) -> Reconfigurer {
        Reconfigurer {
            proxies: self.proxies.clone(),
            auth: self.auth.clone(),
            retire_limit: self.retire_limit,
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
        let proxy = self.proxies.load_full();
        proxy.upstreams().shutdown(proxy.backends()).await;
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

/// The cells of a running gateway that a reload replaces ([`RunningGateway::reconfigurer`]).
#[derive(Clone, Debug)]
pub(crate) struct Reconfigurer {
    proxies: Proxies,
    auth: Option<Arc<ArcSwap<Authenticator>>>,
    retire_limit: Duration,
}

impl Reconfigurer {
    /// The rate limits in use (a reload keeps the counts of those it does not change).
    pub(crate) fn limits(&self) -> Option<Arc<crate::policy::RateLimits>> {
        self.proxies.load().limits().cloned()
    }

    /// Serves `next`'s backends, `[[policy]]`, `[[rate-limit]]`s and `[oauth]` from now on, for
    /// new requests (a reload of the config file; the binary has refused what needs a restart
    /// and put the running values in `next`). A backend `same_spec` names and configured as
    /// before keeps its connections, sessions, processes, health and, when every backend is
    /// kept, the catalog; an added one is probed at once; a removed or changed one is shut down
    /// once its calls in flight have ended. What changed, by backend name.
    pub(crate) async fn reconfigure(
        &self,
        previous: &GatewayConfig,
        next: &GatewayConfig,
        same_spec: &(dyn Fn(&str) -> bool + Sync),
    ) -> Reconfigured {
        let old = self.proxies.load_full();
        let mut kept = Vec::new();
        let backends: Vec<Backend> = next
            .backends_with_defaults()
            .into_iter()
            .map(
                |backend| match old.backends().iter().find(|o| o.name() == backend.name()) {
                    Some(o) if same_spec(o.name()) && o.same_as(&backend) => {
                        kept.push(backend.name().to_owned());
                        o.clone()
                    }
                    _ => backend,
                },
            )
            .collect();
        let kept_one = |b: &Backend| kept.iter().any(|k| k == b.name());
        let retired: Vec<Backend> = old.backends().iter().filter(|b| !kept_one(b)).cloned().collect();
        let added: Vec<Backend> = backends.iter().filter(|b| !kept_one(b)).cloned().collect();
        let same_order = old
            .backends()
            .iter()
            .map(Backend::name)
            .eq(backends.iter().map(Backend::name));
        let ttl = (next.settings.catalog_ttl, previous.settings.catalog_ttl);
        let catalog = (ttl.0.into(), same_order && retired.is_empty() && ttl.0 == ttl.1);
        let timeout = next.settings.backend_timeout.into();
        let proxy = old
            .reconfigured(backends, &kept_one, catalog, timeout, next.principal_header())
            .with_access(next.policy.clone(), next.rate_limits.clone());
        if let (Some(cell), Some(auth)) = (&self.auth, &next.auth)
            && !Arc::ptr_eq(&cell.load(), auth)
        {
            auth.load_keys().await;
            cell.store(auth.clone());
        }
        self.proxies.store(Arc::new(proxy.clone()));
        let changes = Reconfigured::between(&retired, &added);
        let limit = self.retire_limit;
        tokio::spawn(async move {
            readiness::probe_once(&proxy, &added).await;
            // `old` goes once the requests that hold it have ended too.
            old.upstreams().retire(&retired, limit).await;
        });
        changes
    }
}

/// What a [`Reconfigurer::reconfigure`] changed among the backends, by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reconfigured {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    /// In both, configured otherwise.
    pub(crate) changed: Vec<String>,
}

impl Reconfigured {
    fn between(retired: &[Backend], added: &[Backend]) -> Self {
        let names = |list: &[Backend]| list.iter().map(|b| b.name().to_owned()).collect::<Vec<_>>();
        let (retired, added) = (names(retired), names(added));
        Self {
            changed: added.iter().filter(|n| retired.contains(n)).cloned().collect(),
            removed: retired.iter().filter(|n| !added.contains(n)).cloned().collect(),
            added: added.into_iter().filter(|n| !retired.contains(n)).collect(),
        }
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
    let (proxies, auth) = live(&config);
    let probe = config
        .health_interval()
        .map(|interval| tokio::spawn(readiness::probe(proxies.clone(), interval)));
    let store = config.shared_store.clone();
    let store_watch = store
        .clone()
        .zip(config.health_interval())
        .map(|(store, interval)| tokio::spawn(crate::store::watch(store, interval)));
    let (stop, stopped) = watch::channel(false);
    let lifecycle = Lifecycle::new();
    let accepting = Arc::new(AtomicBool::new(true));
    let server = Server {
        listener,
        service: (),
        tls: config.listener_tls.clone(),
        drain: Some((lifecycle.clone(), config.settings.drain())),
        stop: stopped,
        accepting: accepting.clone(),
        limits: config.settings.client_limits(),
    };
    let served = keys.clone();
    let task = match &config.audit {
        Some(audit) => {
            let live = (proxies.clone(), auth.clone());
            let app = compose(&config, served, live, addr, AuditLayer::new(Some(audit.clone())));
            tokio::spawn(server.serving(app).run())
        }
        None => {
            let live = (proxies.clone(), auth.clone());
            let app = compose(&config, served, live, addr, Identity::new());
            tokio::spawn(server.serving(app).run())
        }
    };
    Ok(RunningGateway {
        addr,
        tls: config.listener_tls.is_some(),
        stop,
        task,
        probe,
        proxies,
        auth,
        traces: config.traces.clone(),
        audit: config.audit.clone(),
        keys,
        lifecycle,
        accepting,
        ready_rule: config.settings.ready_backends,
        retire_limit: config.settings.drain_timeout.into(),
        store,
        store_watch,
    })
}
