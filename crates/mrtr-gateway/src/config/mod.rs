//! What the gateway is given: [`Settings`], every setting declared once, and [`GatewayConfig`],
//! the settings with what they were resolved into (backends, listener TLS) and what only code
//! can give (a clock). Imports the stages for the types their settings become; imported by the
//! composition root and the binary.
//!
//! Each field of [`Settings`] is at once a command-line flag (`--catalog-ttl`), a key of the
//! config file (`catalog-ttl`, [`crate::cli`] reads it) and its documentation (its doc comment is
//! the flag's `--help` line), so a new option is one field. Defaults are the flags' defaults,
//! shown by `--help`; [`Settings::default`] gives them.
//!
//! ```
//! use std::time::Duration;
//! use mrtr_gateway::{GatewayConfig, Settings};
//!
//! let defaults = Settings::default();
//! assert_eq!(Duration::from(defaults.catalog_ttl), Duration::from_secs(30));
//! let mut config = GatewayConfig::new(vec!["alpha=http://127.0.0.1:9001/mcp".parse()?]);
//! config.settings.max_in_flight = 64.try_into()?;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod values;

use std::net::SocketAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Args, FromArgMatches};
use http::HeaderName;
use serde::Deserialize;
use tower_mrtr::Clock;

pub use self::backend::{BackendName, BackendSpec, BackendUrl, HeaderSource};
pub use self::values::{AdvertiseUrl, LegacyEraPath, PassedVar, PositiveSeconds, Seconds};
use crate::audit::{Audit, AuditSettings};
use crate::auth::{Authenticator, OAuthSettings, PRINCIPAL_HEADER};
use crate::front::origin::{HostPolicy, OriginPolicy};
use crate::front::{MCP_PATH, deadline, shed};
use crate::legacy::LegacyConfig;
use crate::observe::logging::LogFormat;
use crate::observe::trace::Traces;
use crate::ops::readiness::ReadyRule;
use crate::policy::{Policy, PolicyRule, RateLimitSpec, RateLimits};
use crate::route::pins::{PinningSettings, Pins};
use crate::serve::ClientLimits;
use crate::serve::drain::DrainConfig;
use crate::store::{SharedStore, SharedStoreSettings};
use crate::tasks::BridgeConfig;
use crate::tls::ListenerTls;
use crate::upstream::{self, Backend};

/// The layer's own default round cap, as a setting's type.
const DEFAULT_MAX_ROUNDS: NonZeroU16 = NonZeroU16::new(tower_mrtr::DEFAULT_MAX_ROUNDS).expect("not zero");

/// Every setting of the gateway; see the [module docs](self). The binary reads the listeners,
/// keys, TLS files, backend specifications, `demo` and `log-format`; an embedder that calls
/// [`start`](crate::start) gives their equivalents directly, and the rest shape the stack.
#[derive(Clone, Debug, Args, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Settings {
    /// Read settings from this TOML file (keys named like these options, plus `[[backend]]` sections); options given here win. Re-read on SIGHUP and on change: its backends, policy, rate-limit and oauth tables apply at once, other settings at the next restart
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Print a new keyring entry 'KID:key' and exit
    #[arg(long, value_name = "KID")]
    #[serde(skip)]
    pub generate_key: Option<String>,

    /// Address to serve MCP on, at the path /mcp (port 0 picks a free port)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Address of the admin listener serving /metrics (Prometheus), /healthz and /readyz; off unless given
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,

    /// A backend: NAME=URL for a Streamable HTTP endpoint (http:// or https://), or NAME=stdio:COMMAND for a stdio server the gateway starts (the command split into words as a shell would, run without one, e.g. 'fs=stdio:npx -y @modelcontextprotocol/server-filesystem /srv/data'); repeat for several. NAME is its route and name prefix. Replaces the config file's backends
    #[arg(long, value_name = "NAME=URL|NAME=stdio:COMMAND", action = ArgAction::Append)]
    pub backend: Vec<BackendSpec>,

    /// Trust only the CA certificate(s) in this PEM file for https:// backends that name no CA of their own (default: the system's trust store)
    #[arg(long, value_name = "FILE")]
    pub backend_ca: Option<PathBuf>,

    /// Start two built-in MRTR demo backends (alpha: JSON answers, beta: SSE answers) and print how to try them; uses an ephemeral key unless keys are given
    #[arg(long)]
    pub demo: bool,

    /// Read the keyring from a file instead of MRTR_KEYS (entries separated by commas or newlines, '#' starts a comment line); re-read on SIGHUP and on change
    #[arg(long, value_name = "FILE")]
    pub keys_file: Option<PathBuf>,

    /// How often the keys file, the listener certificate, the config file and the pins file are checked for changes
    #[arg(long, value_name = "SECONDS", default_value = "5")]
    pub reload_interval: PositiveSeconds,

    /// Serve MCP over TLS with this PEM certificate chain (needs --tls-key); re-read on SIGHUP and on change
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// Bind every envelope (request states, task handles, legacy session ids) to this deployment name; every replica of one deployment uses the same, and deployments that share a keyring never open each other's envelopes
    #[arg(long, value_name = "NAME")]
    pub audience: Option<String>,

    /// Most rounds of input_required one call may take; a retry past them is refused before it reaches a backend
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_ROUNDS)]
    pub max_rounds: NonZeroU16,

    /// Bind every sealed requestState to this request header's value (set by an authenticating proxy in front, which must strip it from client requests)
    #[arg(long, value_name = "NAME", value_parser = values::header_name)]
    #[serde(deserialize_with = "values::de_some_header_name")]
    pub principal_header: Option<HeaderName>,

    /// A browser Origin to accept (e.g. `https://app.example.com`); repeat for several. Requests without Origin are always accepted
    #[arg(long, value_name = "ORIGIN", action = ArgAction::Append)]
    pub allowed_origin: Vec<String>,

    /// Refuse http(s)://localhost, 127.0.0.1 and `[::1]` origins, which are accepted by default
    #[arg(long)]
    pub no_loopback_origins: bool,

    /// A Host header value to accept (any port); repeat for several. Default: loopback names when listening on a loopback address, any Host otherwise
    #[arg(long, value_name = "HOST", action = ArgAction::Append)]
    pub allowed_host: Vec<String>,

    /// How long backend tool/prompt/resource lists are trusted before they are listed again on demand
    #[arg(long, value_name = "SECONDS", default_value = "30")]
    pub catalog_ttl: Seconds,

    /// How long a sealed requestState stays valid
    #[arg(long, value_name = "SECONDS", default_value_t = Seconds(tower_mrtr::DEFAULT_TTL))]
    pub envelope_ttl: Seconds,

    /// How long to wait for a backend's response headers
    #[arg(long, value_name = "SECONDS", default_value = "60")]
    pub backend_timeout: Seconds,

    /// Largest request body accepted (HTTP 413 above)
    #[arg(long, value_name = "BYTES", default_value_t = tower_mrtr::DEFAULT_MAX_REQUEST_BODY)]
    pub max_request_body: usize,

    /// How often every backend is probed (server/discover, then initialize) for /readyz
    #[arg(long, value_name = "SECONDS", default_value = "10")]
    pub health_interval: Option<PositiveSeconds>,

    /// /readyz is 200 when any backend (or all) was usable (an MCP server it can speak with) at its last probe
    #[arg(long, value_name = "any|all", default_value_t = ReadyRule::Any)]
    pub ready_backends: ReadyRule,

    /// Exit with an error at start, naming each backend that is down at its first health probe and why (a stdio server that cannot start, a URL that does not answer), instead of serving without it
    #[arg(long)]
    pub require_backends: bool,

    /// Close a backend connection idle this long; keep it below the backends' own keep-alive timeouts (a `[[backend]]` idle-timeout wins)
    #[arg(long, value_name = "SECONDS", default_value_t = PositiveSeconds(upstream::backend::DEFAULT_IDLE_TIMEOUT))]
    pub backend_idle_timeout: PositiveSeconds,

    /// End an HTTP backend's answer that sends nothing this long (a `[[backend]]` stall-timeout wins; stdio backends have --stdio-stall-timeout)
    #[arg(long, value_name = "SECONDS", default_value_t = PositiveSeconds(upstream::backend::DEFAULT_STALL_TIMEOUT))]
    pub backend_stall_timeout: PositiveSeconds,

    /// End a stdio backend's answer that sends nothing this long, counted once it streams (a `[[backend]]` stall-timeout wins). Shorter than --backend-stall-timeout because a silent call holds one of its shared process's 64 places (and one of its principal's share) while it lasts; a minute still lets a tool work between progress notifications
    #[arg(long, value_name = "SECONDS", default_value_t = PositiveSeconds(upstream::stdio::DEFAULT_STDIO_STALL_TIMEOUT))]
    pub stdio_stall_timeout: PositiveSeconds,

    /// A variable of the gateway's environment to pass on to every stdio backend, which otherwise gets only PATH, HOME and its own env (e.g. SSL_CERT_FILE, HTTPS_PROXY, NO_PROXY); repeat for several. Read when a process starts; a backend's own env of that name wins. Never MRTR_KEYS
    #[arg(long, value_name = "VAR", action = ArgAction::Append)]
    pub stdio_pass_env: Vec<PassedVar>,

    /// Log each stderr line of a stdio backend at info instead of debug (the last lines of a process that exits are logged at warn either way)
    #[arg(long)]
    pub stdio_stderr_info: bool,

    /// Most requests in flight; more get 503 with a JSON-RPC error at once
    #[arg(long, value_name = "N", default_value_t = shed::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: NonZeroUsize,

    /// How long a request body may take once the gateway has to wait for it
    #[arg(long, value_name = "SECONDS", default_value_t = PositiveSeconds(deadline::DEFAULT_REQUEST_BODY_TIMEOUT))]
    pub request_body_timeout: PositiveSeconds,

    /// A client connection must send a complete request head within this time of opening and of its previous answer (closes idle keep-alive connections)
    #[arg(long, value_name = "SECONDS", default_value = "30")]
    pub client_idle_timeout: PositiveSeconds,

    /// Largest request head (HTTP 431 above; at least 8192 for HTTP/1.1)
    #[arg(long, value_name = "BYTES", default_value = "65536")]
    pub max_header_bytes: usize,

    /// Most request header fields (HTTP 431 above)
    #[arg(long, value_name = "N", default_value = "100")]
    pub max_headers: usize,

    /// Most client connections open at once; more wait in the kernel's backlog
    #[arg(long, value_name = "N", default_value = "4096")]
    pub max_connections: NonZeroUsize,

    /// Serve no clients of the initialize era (2025-03-26, 2025-06-18, 2025-11-25): their initialize gets the modern-only answer (HTTP 400)
    #[arg(long)]
    pub no_legacy_clients: bool,

    /// Serve MCP at this path too (e.g. /mcp-legacy), where 2026-07-28 requests are declined (400): an SDK that negotiates the era by itself falls back to initialize there, and a legacy backend's requests (elicitation, sampling, roots) then reach it inside its calls, as for any legacy client. For clients without the Tasks extension; /mcp is unchanged
    #[arg(long, value_name = "PATH")]
    pub legacy_era_path: Option<LegacyEraPath>,

    /// How long a legacy client's sealed Mcp-Session-Id stays valid
    #[arg(long, value_name = "SECONDS", default_value = "86400")]
    pub legacy_session_ttl: PositiveSeconds,

    /// How long a legacy call waits for its client's answers to one round of server-to-client requests
    #[arg(long, value_name = "SECONDS", default_value = "300")]
    pub legacy_answer_timeout: PositiveSeconds,

    /// How long a legacy call may last in all, every round together
    #[arg(long, value_name = "SECONDS", default_value = "900")]
    pub legacy_call_timeout: PositiveSeconds,

    /// Most legacy calls waiting for their clients' answers on this replica; more end at once with an error
    #[arg(long, value_name = "N", default_value = "256")]
    pub legacy_max_waiting_calls: NonZeroUsize,

    /// Most legacy calls of one session waiting for its answers at once
    #[arg(long, value_name = "N", default_value = "8")]
    pub legacy_max_waiting_calls_per_session: NonZeroUsize,

    /// Most legacy calls of one principal (with --principal-header) waiting for answers at once
    #[arg(long, value_name = "N", default_value = "32")]
    pub legacy_max_waiting_calls_per_principal: NonZeroUsize,

    /// Most server-to-client requests waiting for a legacy client's answer on this replica
    #[arg(long, value_name = "N", default_value = "10000")]
    pub legacy_max_waiting_answers: NonZeroUsize,

    /// Most server-to-client requests of one legacy session waiting for its answer at once
    #[arg(long, value_name = "N", default_value = "64")]
    pub legacy_max_waiting_answers_per_session: NonZeroUsize,

    /// Most server-to-client requests of one principal (with --principal-header) waiting for its legacy clients' answers at once
    #[arg(long, value_name = "N", default_value = "256")]
    pub legacy_max_waiting_answers_per_principal: NonZeroUsize,

    /// Most legacy sessions this replica keeps notes about (a DELETE, a logging/setLevel)
    #[arg(long, value_name = "N", default_value = "100000")]
    pub legacy_max_session_notes: NonZeroUsize,

    /// Interval of SSE keep-alive comments while a legacy call waits for its client
    #[arg(long, value_name = "SECONDS", default_value = "15")]
    pub legacy_keep_alive: PositiveSeconds,

    /// Largest message read from the modern stack for a legacy call (one JSON answer or one SSE event)
    #[arg(long, value_name = "BYTES", default_value = "4194304")]
    pub legacy_max_message: usize,

    /// Most bridged tasks on this replica (a legacy backend's own requests to a client that declared the Tasks extension); 0 turns the bridge off
    #[arg(long, value_name = "N", default_value = "1000")]
    pub bridged_tasks_max: usize,

    /// Most bridged tasks of one principal (with --principal-header or an oauth table) at once
    #[arg(long, value_name = "N", default_value = "32")]
    pub bridged_tasks_per_principal: NonZeroUsize,

    /// A bridged task's whole life (its ttlMs): still running then, it fails and its backend call is cancelled
    #[arg(long, value_name = "SECONDS", default_value = "3600")]
    pub bridged_task_ttl: PositiveSeconds,

    /// How long a bridged task waits for the client's inputResponses before it fails
    #[arg(long, value_name = "SECONDS", default_value = "300")]
    pub bridged_task_answer_timeout: PositiveSeconds,

    /// How long a finished bridged task keeps its outcome for tasks/get
    #[arg(long, value_name = "SECONDS", default_value = "300")]
    pub bridged_task_result_ttl: PositiveSeconds,

    /// This replica's own URL for the other replicas (e.g. http://POD_IP:8080/mcp): named in its bridged tasks' ids, so that a tasks/* reaching another replica is forwarded here; without it, other replicas answer such a request -32602
    #[arg(long, value_name = "URL")]
    pub advertise_url: Option<AdvertiseUrl>,

    /// Log lines as text or as JSON objects (tracing-subscriber's JSON formatter); RUST_LOG filters them
    #[arg(long, value_name = "text|json", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// After SIGTERM, keep accepting (answering with 'Connection: close') this long so load balancers notice /readyz (0 with --demo unless given)
    #[arg(long, value_name = "SECONDS", default_value = "5")]
    pub drain_delay: Seconds,

    /// After SIGTERM, let open requests and streams run at most this long, then exit
    #[arg(long, value_name = "SECONDS", default_value = "30")]
    pub drain_timeout: Seconds,

    /// Export a trace span per request over OTLP/HTTP (protobuf) to this collector, e.g. http://127.0.0.1:4318 (/v1/traces is appended to a URL without a path); off when absent
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// The `[oauth]` table (config file only): the gateway as an OAuth 2.1 resource server.
    #[arg(skip)]
    pub oauth: Option<OAuthSettings>,

    /// The `[[policy]]` tables (config file only): who may call which tools, prompts, resources.
    #[arg(skip)]
    pub policy: Vec<PolicyRule>,

    /// The `[[rate-limit]]` tables (config file only).
    #[arg(skip)]
    pub rate_limit: Vec<RateLimitSpec>,

    /// The shared store of a fleet, a Redis or Valkey server: redis://HOST:PORT/DB or
    /// rediss://… (port and database optional; the password from $MRTR_SHARED_STORE_PASSWORD).
    /// Every rate limit becomes one budget for all replicas. Sets the url of the file's
    /// shared-store table
    #[arg(long, value_name = "URL")]
    pub shared_store: Option<SharedStoreSettings>,

    /// The `[audit]` table (config file only): an audit event per tool call, prompt, resource
    /// read and task follow-up, and per refusal of one.
    #[arg(skip)]
    pub audit: Option<AuditSettings>,

    /// The `[pinning]` table (config file only): tool, prompt and resource-template definitions
    /// pinned, so that a backend cannot change them under their users.
    #[arg(skip)]
    pub pinning: Option<PinningSettings>,
}

impl Default for Settings {
    /// Every flag's default.
    fn default() -> Self {
        let command = Self::augment_args(clap::Command::new("defaults"));
        let matches = command
            .try_get_matches_from(["defaults"])
            .expect("every default parses (a unit test holds this)");
        Self::from_arg_matches(&matches).expect("every default parses (a unit test holds this)")
    }
}

impl Settings {
    /// The accepted browser origins.
    pub fn origins(&self) -> OriginPolicy {
        OriginPolicy::new(self.allowed_origin.iter().cloned(), !self.no_loopback_origins)
    }

    /// The accepted `Host` values on a listener at `listen`: the configured ones, else loopback
    /// names on a loopback address and anything otherwise.
    pub fn hosts(&self, listen: SocketAddr) -> HostPolicy {
        match (&self.allowed_host[..], listen.ip().is_loopback()) {
            ([], true) => HostPolicy::loopback(),
            ([], false) => HostPolicy::any(),
            (hosts, _) => HostPolicy::only(hosts.to_vec()),
        }
    }

    /// What one client connection may hold.
    pub fn client_limits(&self) -> ClientLimits {
        ClientLimits {
            idle_timeout: self.client_idle_timeout.0,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_connections: self.max_connections.get(),
            park_after: crate::serve::PARK_AFTER,
        }
    }

    /// How clients of the `initialize` era are served: the `legacy-*` settings, and the round
    /// cap every call shares.
    pub fn legacy(&self) -> LegacyConfig {
        LegacyConfig {
            enabled: !self.no_legacy_clients,
            era_path: self.legacy_era_path.as_ref().map(LegacyEraPath::shared),
            main_path: MCP_PATH,
            session_ttl: self.legacy_session_ttl.0,
            answer_timeout: self.legacy_answer_timeout.0,
            call_timeout: self.legacy_call_timeout.0,
            max_rounds: usize::from(self.max_rounds.get()),
            max_waiting_calls: self.legacy_max_waiting_calls.get(),
            max_waiting_calls_per_session: self.legacy_max_waiting_calls_per_session.get(),
            max_waiting_calls_per_principal: self.legacy_max_waiting_calls_per_principal.get(),
            max_waiting_answers: self.legacy_max_waiting_answers.get(),
            max_waiting_answers_per_session: self.legacy_max_waiting_answers_per_session.get(),
            max_waiting_answers_per_principal: self.legacy_max_waiting_answers_per_principal.get(),
            max_session_notes: self.legacy_max_session_notes.get(),
            keep_alive: self.legacy_keep_alive.0,
            max_message: self.legacy_max_message,
        }
    }

    /// `[oauth]` and `principal-header` are exclusive: each names the principal.
    pub(crate) fn one_principal_source(&self) -> Result<(), String> {
        if self.oauth.is_some() && self.principal_header.is_some() {
            return Err(
                "principal-header and [oauth] are exclusive: with [oauth] the gateway verifies bearer tokens itself and takes the principal from a claim"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// `legacy-era-path` is for clients of the `initialize` era: it needs them served.
    pub(crate) fn legacy_era_path_served(&self) -> Result<(), String> {
        match &self.legacy_era_path {
            Some(path) if self.no_legacy_clients => Err(format!(
                "legacy-era-path {path} serves initialize-era clients, which no-legacy-clients turns away: set one or the other"
            )),
            _ => Ok(()),
        }
    }

    /// The bounds of bridged tasks (`tasks/`): the `bridged-*` settings, and the largest
    /// message the legacy front reads (`legacy-max-message`), which a task reads its backend's
    /// answer with too.
    pub(crate) fn bridged(&self) -> BridgeConfig {
        BridgeConfig {
            max_tasks: self.bridged_tasks_max,
            max_per_principal: self.bridged_tasks_per_principal.get(),
            ttl: self.bridged_task_ttl.0,
            answer_timeout: self.bridged_task_answer_timeout.0,
            result_ttl: self.bridged_task_result_ttl.0,
            max_message: self.legacy_max_message,
            advertise: self.advertise_url.as_ref().map(AdvertiseUrl::shared),
        }
    }

    /// How the gateway drains.
    pub fn drain(&self) -> DrainConfig {
        DrainConfig {
            delay: self.drain_delay.0,
            timeout: self.drain_timeout.0,
        }
    }
}

/// Everything the gateway needs besides its keyring.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Every setting ([`Settings`]).
    pub settings: Settings,
    /// Backends in priority order (first wins for duplicate resource URIs): the binary resolves
    /// them from `settings.backend`.
    pub backends: Vec<Backend>,
    /// TLS on the MCP listener; `None` for plain HTTP (the binary loads it from
    /// `settings.tls_cert` and `settings.tls_key`).
    pub listener_tls: Option<Arc<ListenerTls>>,
    /// Where envelope expiry reads the time (tests); `None` for the system clock.
    pub clock: Option<Arc<dyn Clock>>,
    /// The OAuth resource server (the binary builds it from `settings.oauth`).
    pub auth: Option<Arc<Authenticator>>,
    /// The per-tool policy (from `settings.policy`); `None`: every caller may call everything.
    pub policy: Option<Arc<Policy>>,
    /// The rate limits (from `settings.rate_limit`).
    pub rate_limits: Option<Arc<RateLimits>>,
    /// The trace exporter (the binary builds it from `settings.otlp_endpoint`).
    pub traces: Option<Arc<Traces>>,
    /// The shared store of a fleet (from `settings.shared_store`).
    pub shared_store: Option<Arc<SharedStore>>,
    /// The audit trail (from `settings.audit`).
    pub audit: Option<Arc<Audit>>,
    /// The pinned definitions (from `settings.pinning`); `None` with `mode = "off"`.
    pub pins: Option<Arc<Pins>>,
    /// Whether the binary reloads the config file: the stack then reads the proxy in use per
    /// request (`ops/live.rs`); otherwise it is fixed, at no cost.
    pub(crate) reloadable: bool,
}

impl GatewayConfig {
    /// `backends` with the [`Settings`] defaults, except that an embedded gateway sends no
    /// health probe unless `settings.health_interval` is set (backends are then judged by the
    /// catalog and discovery requests clients cause), plain HTTP and the system clock.
    pub fn new(backends: Vec<Backend>) -> Self {
        Self {
            settings: Settings {
                health_interval: None,
                ..Settings::default()
            },
            backends,
            listener_tls: None,
            clock: None,
            auth: None,
            policy: None,
            rate_limits: None,
            traces: None,
            shared_store: None,
            audit: None,
            pins: None,
            reloadable: false,
        }
    }

    /// Builds what `settings` configure beyond the backends: the resource server, the policy,
    /// the rate limits, the trace exporter, the audit trail (its writer's thread starts here)
    /// and the pins (the binary does this; an embedder that sets `settings.oauth`, `policy`,
    /// `rate_limit`, `otlp_endpoint`, `audit` or `pinning` calls it). `[oauth]` and
    /// `principal-header` are exclusive: each names the principal.
    pub fn resolve_settings(self) -> Result<Self, String> {
        self.resolve_settings_in(&|name| std::env::var(name).ok())
    }

    /// [`resolve_settings`](Self::resolve_settings), reading environment variables (the shared
    /// store's password) through `env`.
    pub fn resolve_settings_in(mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let settings = &self.settings;
        settings.one_principal_source()?;
        settings.legacy_era_path_served()?;
        self.auth = settings.oauth.clone().map(Authenticator::new).transpose()?;
        self.policy = if settings.policy.is_empty() {
            None
        } else {
            Some(Arc::new(Policy::new(settings.policy.clone())?))
        };
        self.shared_store = settings
            .shared_store
            .clone()
            .map(|store| SharedStore::new(store, env))
            .transpose()?;
        self.rate_limits = rate_limits(&settings.rate_limit, self.shared_store.as_ref(), None)?;
        self.traces = settings.otlp_endpoint.as_deref().map(Traces::otlp).transpose()?;
        let otlp = settings.otlp_endpoint.as_deref();
        self.audit = settings
            .audit
            .clone()
            .map(|audit| Audit::start(audit, otlp))
            .transpose()?;
        self.pins = match &settings.pinning {
            Some(pinning) => Pins::new(pinning, self.audit.clone(), self.shared_store.clone())?,
            None => None,
        };
        Ok(self)
    }

    /// The configuration a reload of the config file makes of this one: `settings` and
    /// `backends` (resolved by the binary), with `[oauth]`, `[[policy]]` and `[[rate-limit]]`
    /// built anew (limits unchanged since `previous` keep its counts; an unchanged `[oauth]`
    /// keeps its resource server and the issuer's keys it holds). What needs a restart (the
    /// listener's TLS, the shared store, traces, the audit trail, the pins) stays this one's:
    /// the caller has put the running values of such settings into `settings`.
    pub(crate) fn reloaded(
        &self,
        settings: Settings,
        backends: Vec<Backend>,
        previous: Option<&RateLimits>,
    ) -> Result<Self, String> {
        let auth = match (&settings.oauth, &self.settings.oauth) {
            (Some(next), Some(now)) if format!("{next:?}") == format!("{now:?}") => self.auth.clone(),
            (oauth, _) => oauth.clone().map(Authenticator::new).transpose()?,
        };
        let policy = if settings.policy.is_empty() {
            None
        } else {
            Some(Arc::new(Policy::new(settings.policy.clone())?))
        };
        let rate_limits = rate_limits(&settings.rate_limit, self.shared_store.as_ref(), previous)?;
        Ok(Self {
            settings,
            backends,
            auth,
            policy,
            rate_limits,
            ..self.clone()
        })
    }

    /// The header that names each request's principal: `principal-header`, or with `[oauth]`
    /// the one the resource server sets ([`PRINCIPAL_HEADER`]).
    pub fn principal_header(&self) -> Option<HeaderName> {
        match &self.auth {
            Some(_) => Some(PRINCIPAL_HEADER),
            None => self.settings.principal_header.clone(),
        }
    }

    /// The configured backends, with the settings' defaults where a backend has no setting of
    /// its own.
    pub(crate) fn backends_with_defaults(&self) -> Vec<Backend> {
        self.backends
            .iter()
            .map(|backend| {
                let mut backend = backend.clone();
                if backend.idle_timeout().is_none() {
                    backend = backend.with_idle_timeout(self.settings.backend_idle_timeout.0);
                }
                if backend.stall_timeout().is_none() {
                    let stall = if backend.command().is_some() {
                        self.settings.stdio_stall_timeout
                    } else {
                        self.settings.backend_stall_timeout
                    };
                    backend = backend.with_stall_timeout(stall.0);
                }
                if !self.settings.stdio_pass_env.is_empty() {
                    let names = self.settings.stdio_pass_env.iter().map(|var| var.0.clone());
                    backend = backend.passing_env(names);
                }
                if self.settings.stdio_stderr_info {
                    backend = backend.stderr_at_info(true);
                }
                backend
            })
            .collect()
    }

    /// How often backends are probed, if they are.
    pub(crate) fn health_interval(&self) -> Option<Duration> {
        self.settings.health_interval.map(Duration::from)
    }
}

/// The rate limits of `specs`, counted in `store` when there is one, with `previous`'s counts
/// for the limits unchanged since (a reload).
fn rate_limits(
    specs: &[RateLimitSpec],
    store: Option<&Arc<SharedStore>>,
    previous: Option<&RateLimits>,
) -> Result<Option<Arc<RateLimits>>, String> {
    // With a store the proxy asks it even without limits: single use.
    if specs.is_empty() && store.is_none() {
        return Ok(None);
    }
    let mut limits = RateLimits::new(specs.to_vec())?;
    if let Some(store) = store {
        limits = limits.with_store(store.clone());
    }
    if let Some(previous) = previous {
        limits = limits.carrying(previous);
    }
    Ok(Some(Arc::new(limits)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_parse_and_are_the_libraries_own() {
        let defaults = Settings::default();
        assert_eq!(defaults.envelope_ttl.0, tower_mrtr::DEFAULT_TTL);
        assert_eq!(defaults.max_request_body, tower_mrtr::DEFAULT_MAX_REQUEST_BODY);
        assert_eq!(defaults.max_in_flight, shed::DEFAULT_MAX_IN_FLIGHT);
        assert_eq!(defaults.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(
            defaults.health_interval.map(Duration::from),
            Some(Duration::from_secs(10))
        );
        assert!(GatewayConfig::new(Vec::new()).settings.health_interval.is_none());
    }

    #[test]
    fn stdio_backends_stall_after_the_stdio_stall_timeout_unless_they_have_their_own() {
        assert_eq!(
            Settings::default().stdio_stall_timeout.0,
            upstream::stdio::DEFAULT_STDIO_STALL_TIMEOUT
        );
        let command = || upstream::stdio::StdioCommand::new(["server"]).unwrap();
        let mut config = GatewayConfig::new(vec![
            Backend::stdio("local", command()).unwrap(),
            Backend::stdio("slow", command())
                .unwrap()
                .with_stall_timeout(Duration::from_secs(600)),
            Backend::new("remote", "http://127.0.0.1:9001/mcp").unwrap(),
        ]);
        config.settings.stdio_stall_timeout = PositiveSeconds(Duration::from_secs(7));
        config.settings.backend_stall_timeout = PositiveSeconds(Duration::from_secs(90));
        let stalls: Vec<_> = config
            .backends_with_defaults()
            .iter()
            .map(|b| b.stall_timeout().map(|s| s.as_secs()))
            .collect();
        assert_eq!(stalls, [Some(7), Some(600), Some(90)]);
    }
}
