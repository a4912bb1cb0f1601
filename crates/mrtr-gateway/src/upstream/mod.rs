//! The backend side: what a backend is ([`Backend`]), forwarding to it ([`forward`]), its
//! answer bodies on their way back ([`body`]), the one reader of its SSE answers ([`sse`]), its
//! health state ([`health`]) and era ([`era`]: the probe that finds it), the sessions in
//! which `initialize`-era backends are spoken to ([`legacy`], whose answers [`translate`] puts
//! in modern form, and whose notifications of their own [`hub`] fans out to listens), and the
//! processes of stdio backends ([`stdio`]). Imports `observe` and the
//! ground floor only. A new kind of backend (another transport) goes here.
//!
//! Within the room, imports run from `stdio`, `legacy` and `era` to `forward` and `hub`, then
//! `body`, `translate` and `sse`; `stdio` also uses `era`'s probe messages and `legacy`'s discovery
//! result, and `era`, `legacy` and `stdio` read `health`.
//!
//! A backend is a name (which is also the [`Route`] sealed into envelopes), a Streamable HTTP
//! URL or a command to run (a stdio server), the [`Era`] it is expected to speak ([`era`] finds
//! the one it does), and per-backend settings: a response timeout, TLS, and static headers
//! (credentials).

pub(crate) mod body;
pub(crate) mod era;
pub(crate) mod forward;
pub(crate) mod health;
pub(crate) mod hub;
pub(crate) mod session;
pub(crate) mod sse;
pub(crate) mod stdio;
pub(crate) mod translate;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use rustls::ClientConfig;
use tower_mrtr::{Route, RouteIdentity};

use crate::upstream::era::Era;
use crate::upstream::health::BackendHealth;
use crate::upstream::stdio::StdioCommand;

/// Separator between a backend's name and an original name in the catalog's prefixed names
/// (`alpha__deploy`), which is why no backend name may contain it.
pub const SEPARATOR: &str = "__";

/// How long an idle connection to a backend is kept by default: below the keep-alive timeout
/// of common servers (uvicorn closes idle connections after 5 s, Node.js after 5 s).
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// How long a backend's answer may send nothing before it is ended, by default. Long, because
/// a tool may legitimately work for minutes without a progress notification.
pub(crate) const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(300);

/// One backend MCP server the gateway forwards to.
///
/// ```
/// use std::time::Duration;
/// use mrtr_gateway::Backend;
///
/// let backend: Backend = "github=http://127.0.0.1:9001/mcp".parse().unwrap();
/// assert_eq!(backend.name(), "github");
/// assert_eq!(backend.endpoint(), "http://127.0.0.1:9001/mcp");
/// assert!("git hub=http://x/mcp".parse::<Backend>().is_err());
/// assert!("github=ftp://x/mcp".parse::<Backend>().is_err());
///
/// // Credentials are headers the backend receives; Debug shows their names, never their values.
/// let backend = Backend::new("jira", "https://jira.example/mcp")
///     .unwrap()
///     .with_timeout(Duration::from_secs(5))
///     .with_header("authorization".parse().unwrap(), "Bearer s3cret".parse().unwrap());
/// let debug = format!("{backend:?}");
/// assert!(debug.contains("authorization") && !debug.contains("s3cret"), "{debug}");
/// ```
#[derive(Clone)]
pub struct Backend {
    route: Route,
    transport: Transport,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    stall_timeout: Option<Duration>,
    tls: Option<Arc<ClientConfig>>,
    headers: HeaderMap,
    era: Era,
    health: Arc<BackendHealth>,
}

/// How a backend is reached.
#[derive(Clone, Debug)]
enum Transport {
    /// Streamable HTTP at `url`, whose authority is `host`.
    Http { url: Uri, host: HeaderValue },
    /// A process the gateway starts and speaks to over its stdin and stdout.
    Stdio(Arc<StdioCommand>),
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are credentials: only their names are shown.
        let headers: Vec<&str> = self.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("Backend")
            .field("name", &self.name())
            .field("transport", &self.transport)
            .field("era", &self.era)
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field("custom_tls", &self.tls.is_some())
            .field("headers", &headers)
            .finish()
    }
}

/// Why a `NAME=URL` backend specification was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpecError(String);

impl fmt::Display for BackendSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackendSpecError {}

impl BackendSpecError {
    pub(crate) fn new(message: String) -> Self {
        Self(message)
    }
}

impl Backend {
    /// Whether `name` may name a backend: ASCII letters, digits, `-` and `_`, 1 to 64 bytes, and
    /// no [`SEPARATOR`].
    pub fn check_name(name: &str) -> Result<(), BackendSpecError> {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !name.contains(SEPARATOR);
        if valid {
            return Ok(());
        }
        Err(BackendSpecError(format!(
            "invalid backend name {name:?}: use 1-64 ASCII letters, digits, '-' or '_' (and no {SEPARATOR:?})"
        )))
    }

    /// Whether `url` may be a backend's endpoint: `http://` or `https://`, with a host.
    pub fn check_url(url: &str) -> Result<(), BackendSpecError> {
        Self::parse_url("", url).map(|_| ())
    }

    /// The URL and the `Host` header it gives, or why it cannot be a backend's (naming `name`).
    fn parse_url(name: &str, url: &str) -> Result<(Uri, HeaderValue), BackendSpecError> {
        let whose = if name.is_empty() {
            String::new()
        } else {
            format!(" for backend {name:?}")
        };
        let url: Uri = url
            .parse()
            .map_err(|e| BackendSpecError(format!("invalid URL{whose}: {e}")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) {
            return Err(BackendSpecError(format!(
                "the URL{whose} must start with http:// or https://"
            )));
        }
        let authority = url
            .authority()
            .ok_or_else(|| BackendSpecError(format!("the URL{whose} has no host")))?;
        // Credentials in the URL would reach the startup log and the backend's `Host` header.
        if authority.as_str().contains('@') {
            return Err(BackendSpecError(format!(
                "the URL{whose} carries credentials (user:password@host): give them as a header instead, \
                 e.g. `headers.authorization = {{ env = \"BACKEND_TOKEN\", prefix = \"Basic \" }}` in its [[backend]] section"
            )));
        }
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| BackendSpecError(format!("the URL{whose}: {e}")))?;
        Ok((url, host))
    }

    /// A backend named `name` (ASCII letters, digits, `-` and `_`, at most 64 bytes, no `__`)
    /// at `url` (`http://host:port/path` or `https://…`).
    pub fn new(name: &str, url: &str) -> Result<Self, BackendSpecError> {
        Self::check_name(name)?;
        let (url, host) = Self::parse_url(name, url)?;
        // By default a backend is its URL: another gateway's backend of the same name at
        // another URL never opens this one's envelopes.
        let identity = RouteIdentity::digest(url.to_string());
        Ok(Self::reached_by(name, identity, Transport::Http { url, host }))
    }

    /// A backend named `name` (as for [`new`](Self::new)) that is a process the gateway starts
    /// with `command` and speaks to over stdio (see `upstream/stdio/`).
    ///
    /// ```
    /// use mrtr_gateway::{Backend, StdioCommand};
    ///
    /// let command = StdioCommand::new(["npx", "-y", "@modelcontextprotocol/server-memory"]).unwrap();
    /// let backend = Backend::stdio("memory", command).unwrap();
    /// assert!(backend.url().is_none());
    /// assert_eq!(backend.endpoint(), "stdio: npx -y @modelcontextprotocol/server-memory");
    /// ```
    pub fn stdio(name: &str, command: StdioCommand) -> Result<Self, BackendSpecError> {
        Self::check_name(name)?;
        // By default a stdio backend is its command line.
        let identity = RouteIdentity::digest(command.to_string());
        Ok(Self::reached_by(
            name,
            identity,
            Transport::Stdio(Arc::new(command)),
        ))
    }

    /// A backend `name` (checked) sealed as `identity`, reached by `transport`, with the
    /// gateway's defaults.
    fn reached_by(name: &str, identity: RouteIdentity, transport: Transport) -> Self {
        Self {
            route: Route::new(name).with_identity(identity),
            transport,
            timeout: None,
            idle_timeout: None,
            stall_timeout: None,
            tls: None,
            headers: HeaderMap::new(),
            era: Era::Auto,
            health: Arc::default(),
        }
    }

    /// Seals `identity` with this backend's route instead of its URL, so that envelopes stay
    /// valid when the backend moves to another URL: give it the old URL (or any name every
    /// replica of every deployment that should share envelopes uses for this backend).
    pub fn with_identity(mut self, identity: &str) -> Self {
        self.route = Route::new(self.route.as_str()).with_identity(RouteIdentity::digest(identity));
        self
    }

    /// Waits at most `timeout` for this backend's response head (instead of the gateway's
    /// default).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Keeps an idle connection to this backend open for at most `idle` (instead of the
    /// gateway's default, `backend-idle-timeout`). Keep it below the backend server's own
    /// keep-alive timeout, so that the gateway never writes a request onto a connection the
    /// backend is closing.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// Ends an answer of this backend that sends nothing for `stall` (instead of the
    /// gateway's default, `backend-stall-timeout`; see `upstream/body.rs`).
    pub fn with_stall_timeout(mut self, stall: Duration) -> Self {
        self.stall_timeout = Some(stall);
        self
    }

    /// This backend's own idle connection timeout, if it has one.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// This backend's own stall timeout, if it has one.
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// Connects to this backend with `tls` (its own CA, a client certificate) instead of the
    /// system's roots. See [`crate::tls::BackendTls`].
    pub fn with_tls(mut self, tls: Arc<ClientConfig>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sends `name: value` with every request to this backend, replacing any client value of
    /// that header (credentials such as `Authorization: Bearer …`). The value is marked
    /// sensitive, so HTTP/2 never indexes it, and it never appears in `Debug` output.
    pub fn with_header(mut self, name: HeaderName, mut value: HeaderValue) -> Self {
        value.set_sensitive(true);
        self.headers.append(name, value);
        self
    }

    /// Expects this backend to speak `era` (the default, [`Era::Auto`], finds out; see
    /// `upstream/era.rs`).
    pub fn with_era(mut self, era: Era) -> Self {
        self.era = era;
        self
    }

    /// The era this backend is expected to speak.
    pub fn era(&self) -> Era {
        self.era
    }

    /// This backend's own response timeout, if it has one.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// This backend's own TLS client configuration, if it has one.
    pub fn tls(&self) -> Option<&Arc<ClientConfig>> {
        self.tls.as_ref()
    }

    /// This backend's health, shared by every clone (see `upstream/health.rs`).
    pub fn health(&self) -> &BackendHealth {
        &self.health
    }

    /// The static headers sent to this backend.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        self.route.as_str()
    }

    /// The route reported to (and pinned by) the MRTR layer: the name.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The backend's MCP endpoint; `None` for a stdio backend.
    pub fn url(&self) -> Option<&Uri> {
        match &self.transport {
            Transport::Http { url, .. } => Some(url),
            Transport::Stdio(_) => None,
        }
    }

    /// The `Host` header the backend expects: its own authority; `None` for a stdio backend.
    pub fn host(&self) -> Option<&HeaderValue> {
        match &self.transport {
            Transport::Http { host, .. } => Some(host),
            Transport::Stdio(_) => None,
        }
    }

    /// The command of a stdio backend.
    pub fn command(&self) -> Option<&StdioCommand> {
        match &self.transport {
            Transport::Http { .. } => None,
            Transport::Stdio(command) => Some(command),
        }
    }

    /// Where the backend is, for logs: its URL, or `stdio: ` and its command line.
    pub fn endpoint(&self) -> String {
        match &self.transport {
            Transport::Http { url, .. } => url.to_string(),
            Transport::Stdio(command) => format!("stdio: {command}"),
        }
    }
}

impl FromStr for Backend {
    type Err = BackendSpecError;

    /// Parses `NAME=URL`.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (name, url) = spec
            .split_once('=')
            .ok_or_else(|| BackendSpecError(format!("expected NAME=URL, got {spec:?}")))?;
        Self::new(name.trim(), url.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_are_refused_without_showing_them() {
        for url in [
            "http://user:s3cret@127.0.0.1:9001/mcp",
            "https://token@backend.internal/mcp",
        ] {
            let error = Backend::new("crm", url).unwrap_err().to_string();
            assert!(
                error.contains("carries credentials") && error.contains("headers.authorization"),
                "{error}"
            );
            assert!(!error.contains("s3cret") && !error.contains("token@"), "{error}");
        }
        assert!(Backend::new("crm", "http://127.0.0.1:9001/mcp").is_ok());
    }

    #[test]
    fn a_backend_is_its_url_unless_given_an_identity() {
        let x = Backend::new("alpha", "http://127.0.0.1:9001/mcp").unwrap();
        let y = Backend::new("alpha", "http://127.0.0.1:9002/mcp").unwrap();
        assert_ne!(x.route(), y.route(), "same name, another backend");
        assert_eq!(
            x.route(),
            Backend::new("alpha", "http://127.0.0.1:9001/mcp")
                .unwrap()
                .route()
        );
        let moved = y.with_identity("http://127.0.0.1:9001/mcp");
        assert_eq!(
            x.route(),
            moved.route(),
            "moved, keeping the old URL as its identity"
        );
        assert_eq!(moved.endpoint(), "http://127.0.0.1:9002/mcp");
    }
}
