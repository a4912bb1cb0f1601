//! [`GatewayConfig`]: everything the gateway needs besides its keyring.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use tower_mrtr::Clock;

use crate::front::drain::DrainConfig;
use crate::front::origin::{HostPolicy, OriginPolicy};
use crate::front::server::ClientLimits;
use crate::front::{deadline, shed};
use crate::legacy::LegacyConfig;
use crate::ops::readiness::ReadyRule;
use crate::tls::ListenerTls;
use crate::upstream::{Backend, DEFAULT_IDLE_TIMEOUT, DEFAULT_STALL_TIMEOUT};

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
    /// setting wins; see [`crate::upstream::body`]).
    pub backend_stall_timeout: Duration,
    /// Most requests in flight; more get 503 at once ([`crate::front::shed`]).
    pub max_in_flight: usize,
    /// How long a request body may take once the gateway has to wait for it ([`crate::front::deadline`]).
    pub request_body_timeout: Duration,
    /// Client connections: header limits and the idle keep-alive timeout.
    pub client_limits: ClientLimits,
    /// Largest request body accepted (413 above).
    pub max_request_body: usize,
    /// Where envelope expiry reads the time (tests); `None` for the system clock.
    pub clock: Option<Arc<dyn Clock>>,
    /// TLS on the MCP listener; `None` for plain HTTP.
    pub listener_tls: Option<Arc<ListenerTls>>,
    /// How the gateway drains on [`crate::RunningGateway::drain`] (SIGTERM).
    pub drain: DrainConfig,
    /// Which backends must be up for `/readyz` to say ready.
    pub ready_rule: ReadyRule,
    /// How often every backend is sent a `server/discover` health probe; `None` (the default
    /// here; the binary probes every 10 s) sends none, and backends are judged by the catalog
    /// and discovery requests clients cause.
    pub health_interval: Option<Duration>,
    /// How clients of the `initialize` era are served.
    pub legacy: LegacyConfig,
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
            drain: DrainConfig::default(),
            ready_rule: ReadyRule::default(),
            health_interval: None,
            legacy: LegacyConfig::default(),
        }
    }
}
