//! What a backend is ([`Backend`]): a name (which is also the [`Route`] sealed into envelopes),
//! a Streamable HTTP URL or a command to run (a stdio server, [`StdioCommand`]), the [`Era`] it is expected to
//! speak (`era.rs` finds the one it does), and per-backend settings: a response timeout, TLS, and
//! static headers (credentials). Its [`Transport`] says which door of the seam (`mod.rs`) it is
//! reached through.

use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use rustls::ClientConfig;
use tower_mrtr::{Route, RouteIdentity};

use super::era::Era;
use super::health::BackendHealth;

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
    address: Address,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    stall_timeout: Option<Duration>,
    tls: Option<Arc<ClientConfig>>,
    headers: HeaderMap,
    era: Era,
    health: Arc<BackendHealth>,
}

/// The transport a backend is reached by: what the seam (`upstream/mod.rs`) matches on, with
/// the era the backend speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Streamable HTTP.
    Http,
    /// A process's stdin and stdout.
    Stdio,
}

/// How a backend is reached, and where.
#[derive(Clone, Debug)]
enum Address {
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
            .field("address", &self.address)
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
        Ok(Self::reached_by(name, identity, Address::Http { url, host }))
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
            Address::Stdio(Arc::new(command)),
        ))
    }

    /// A backend `name` (checked) sealed as `identity`, reached at `address`, with the
    /// gateway's defaults.
    fn reached_by(name: &str, identity: RouteIdentity, address: Address) -> Self {
        Self {
            route: Route::new(name).with_identity(identity),
            address,
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
    /// gateway's default, `backend-stall-timeout`; see `upstream/http/body.rs`).
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

    /// Whether `other` is configured as this backend is (a config reload keeps its doors and
    /// health then): the same name, address, timeouts, headers and era, and TLS either on for
    /// both or off for both (the caller compares the TLS files' names; their content is read
    /// when a backend's table changes).
    pub(crate) fn same_as(&self, other: &Backend) -> bool {
        let address = match (&self.address, &other.address) {
            (Address::Http { url, .. }, Address::Http { url: other, .. }) => url == other,
            (Address::Stdio(command), Address::Stdio(other)) => command == other,
            _ => false,
        };
        address
            && self.route == other.route
            && (self.timeout, self.idle_timeout, self.stall_timeout)
                == (other.timeout, other.idle_timeout, other.stall_timeout)
            && self.headers == other.headers
            && self.era == other.era
            && self.tls.is_some() == other.tls.is_some()
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
        match &self.address {
            Address::Http { url, .. } => Some(url),
            Address::Stdio(_) => None,
        }
    }

    /// The `Host` header the backend expects: its own authority; `None` for a stdio backend.
    pub fn host(&self) -> Option<&HeaderValue> {
        match &self.address {
            Address::Http { host, .. } => Some(host),
            Address::Stdio(_) => None,
        }
    }

    /// The transport it is reached by.
    pub(crate) fn transport(&self) -> Transport {
        match self.address {
            Address::Http { .. } => Transport::Http,
            Address::Stdio(_) => Transport::Stdio,
        }
    }

    /// A stdio backend that also gets the variables `names` of the gateway's environment,
    /// read each time its process starts (an HTTP backend is returned as it is).
    pub fn passing_env(mut self, names: impl IntoIterator<Item = String>) -> Self {
        if let Address::Stdio(command) = &mut self.address {
            let command = Arc::make_mut(command);
            for name in names {
                if !command.pass_env.contains(&name) {
                    command.pass_env.push(name);
                }
            }
        }
        self
    }

    /// A stdio backend whose stderr lines are logged at `info` (when `info`) rather than
    /// `debug` (an HTTP backend is returned as it is).
    pub fn stderr_at_info(mut self, info: bool) -> Self {
        if let Address::Stdio(command) = &mut self.address {
            Arc::make_mut(command).stderr_info = info;
        }
        self
    }

    /// The command of a stdio backend (`None` for an HTTP one).
    pub fn command(&self) -> Option<&StdioCommand> {
        match &self.address {
            Address::Http { .. } => None,
            Address::Stdio(command) => Some(command),
        }
    }

    /// Where the backend is, for logs: its URL, or `stdio: ` and its command line.
    pub fn endpoint(&self) -> String {
        match &self.address {
            Address::Http { url, .. } => url.to_string(),
            Address::Stdio(command) => format!("stdio: {command}"),
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

/// The command a stdio backend is started with: a program, its arguments, the environment
/// variables it gets besides `PATH` and `HOME`, its working directory, whether each principal
/// gets a process of its own, and otherwise how many of the shared process's places one
/// principal may hold.
///
/// ```
/// use mrtr_gateway::StdioCommand;
///
/// let command = StdioCommand::parse("uvx 'mcp-server-fetch' --ignore-robots-txt")
///     .unwrap()
///     .with_env("LOG_LEVEL", "debug");
/// assert_eq!(command.to_string(), "uvx mcp-server-fetch --ignore-robots-txt");
/// assert!(StdioCommand::parse("").is_err());
/// assert!(StdioCommand::parse("node 'unclosed").is_err());
/// // Debug shows the environment's names, never its values (they may be credentials).
/// let command = command.with_env("API_TOKEN", "s3cret");
/// assert!(!format!("{command:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StdioCommand {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) per_principal: Option<NonZeroUsize>,
    pub(crate) calls_per_principal: Option<NonZeroUsize>,
    /// Variables of the gateway's environment passed on (`--stdio-pass-env`), read at each start.
    pub(crate) pass_env: Vec<String>,
    /// Whether its stderr lines are logged at `info` (`--stdio-stderr info`) rather than `debug`.
    pub(crate) stderr_info: bool,
}

impl StdioCommand {
    /// The command `argv`: the program (looked up on `PATH` when it has no `/`), then its
    /// arguments, passed as they are (no shell).
    pub fn new<I, S>(argv: I) -> Result<Self, BackendSpecError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut argv = argv.into_iter().map(Into::into);
        let program = argv
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| BackendSpecError::new("a stdio backend's command is empty".to_owned()))?;
        Ok(Self {
            program,
            args: argv.collect(),
            env: Vec::new(),
            cwd: None,
            per_principal: None,
            calls_per_principal: None,
            pass_env: Vec::new(),
            stderr_info: false,
        })
    }

    /// A command line split as a POSIX shell splits words (quotes and backslashes), without
    /// running one: no expansion, no pipes, no redirections.
    pub fn parse(line: &str) -> Result<Self, BackendSpecError> {
        let words = shlex::split(line).ok_or_else(|| {
            BackendSpecError::new(format!("cannot split the command {line:?}: an unclosed quote?"))
        })?;
        Self::new(words)
    }

    /// Sets the variable `name` to `value` in the process's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the process in `dir` (the gateway's working directory otherwise).
    pub fn with_cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Starts one process per principal (the gateway's principal header's value), at most
    /// `max` at once per replica, instead of one that every client shares: for a server that
    /// keeps what one user does (files, memory, a login) where another would see it. One more
    /// process serves what has no principal: the health probe's requests.
    pub fn per_principal(mut self, max: NonZeroUsize) -> Self {
        self.per_principal = Some(max);
        self
    }

    /// The most processes of principals run at once per replica, when each principal gets its
    /// own.
    pub fn processes_per_principal(&self) -> Option<NonZeroUsize> {
        self.per_principal
    }

    /// Lets one principal hold at most `max` of the 64 places of requests in flight of the
    /// process every principal shares (calls waiting for a place count too; more are refused at
    /// once with a JSON-RPC error), instead of a quarter of them (16); requests without a
    /// principal are one group with the same share. A `max` of 64 or more lets one principal
    /// take every place (at most 64 calls at once, waiting ones included). No effect on a backend run [`per_principal`](Self::per_principal),
    /// whose processes each serve one principal.
    pub fn with_max_calls_per_principal(mut self, max: NonZeroUsize) -> Self {
        self.calls_per_principal = Some(max);
        self
    }

    /// The most places of the shared process one principal may hold, when set (else a quarter).
    pub fn max_calls_per_principal(&self) -> Option<NonZeroUsize> {
        self.calls_per_principal
    }
}

impl fmt::Display for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = std::iter::once(&self.program).chain(&self.args);
        match shlex::try_join(words.clone().map(String::as_str)) {
            Ok(line) => f.write_str(&line),
            // A word with a NUL byte cannot be quoted (nor started): shown unquoted.
            Err(_) => f.write_str(&words.cloned().collect::<Vec<_>>().join(" ")),
        }
    }
}

impl fmt::Debug for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("StdioCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &env)
            .field("cwd", &self.cwd)
            .field("per_principal", &self.per_principal)
            .field("calls_per_principal", &self.calls_per_principal)
            .field("pass_env", &self.pass_env)
            .field("stderr_info", &self.stderr_info)
            .finish()
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
