//! Command-line options of the `mrtr-gateway` binary, merged with `--config FILE`
//! ([`crate::cli::file`]): a flag given on the command line wins over the file, the file wins
//! over the flag's default. `--backend` flags replace the file's `[[backend]]` sections.
//!
//! ```
//! use mrtr_gateway::cli::{Command, parse};
//!
//! let env = |_: &str| None;
//! let Command::Run(settings) = parse(["mrtr-gateway", "--demo"], env).unwrap() else { panic!() };
//! assert!(settings.demo && settings.keys.is_none());
//! assert_eq!(settings.listen.to_string(), "127.0.0.1:8080");
//! assert_eq!(settings.config.drain.timeout.as_secs(), 30);
//! ```

pub mod demo;
pub mod file;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command as Clap, value_parser};
use http::HeaderName;
use tower_mrtr::KeyringHandle;

use self::file::{BackendEntry, FileSettings};
use crate::config::GatewayConfig;
use crate::front::origin::{HostPolicy, OriginPolicy};
use crate::observe::logging::LogFormat;
use crate::ops::readiness::ReadyRule;
use crate::ops::reload::{KeysFile, parse_keys};
use crate::tls::{BackendTls, ListenerTls};
use crate::upstream::Backend;

/// Environment variable holding the keyring.
pub const KEYS_ENV: &str = "MRTR_KEYS";

const ABOUT: &str = "A multi-backend MCP (2026-07-28) gateway that relays multi round-trip requests \
statelessly: backend requestState is sealed (XChaCha20-Poly1305) together with the backend that \
minted it, so any replica holding the same keys can route the retry.";

const AFTER_HELP: &str = "\
KEYS:
  The keyring comes from the environment variable MRTR_KEYS or from --keys-file, in the form
  'kid:base64url-32-bytes[,kid:base64url-32-bytes...]'; the first key seals, every key opens.
  Generate an entry with --generate-key KID. Without keys the gateway refuses to start, except
  in --demo mode, which generates an ephemeral key. A --keys-file is re-read on SIGHUP and when
  it changes (rotation without restarts); a file that does not parse keeps the keys in use.

CONFIG FILE:
  --config FILE takes every option below as a TOML key of the same name (without '--'), plus
  [[backend]] sections with url, timeout, TLS files and headers (credentials for the backend).
  Options given on the command line win. See docs/gateway.toml.

LOGGING:
  Logs go to stderr, filtered by RUST_LOG (default 'info,rmcp=warn'), as text or, with
  --log-format json, one JSON object per line. Every request gets an access log line at info
  (target mrtr_gateway::access: method, target, backend, status, duration; never bodies,
  envelopes or credentials); RUST_LOG=info,mrtr_gateway::access=off turns it off.

OVERLOAD AND SLOW PEERS:
  Over --max-in-flight requests the gateway answers 503 with Retry-After: 1 and a JSON-RPC
  error at once. Request bodies must arrive within --request-body-timeout, request heads within
  --client-idle-timeout (which also closes idle client connections); backend answers that send
  nothing for --backend-stall-timeout are ended (SSE: with a JSON-RPC error event).

SIGNALS:
  SIGTERM drains: /readyz turns 503, answers carry 'Connection: close', the listener closes after
  --drain-delay, and open requests and streams get until --drain-timeout; then exit 0.
  SIGHUP re-reads the keys file and the listener certificate.

EXAMPLES:
  mrtr-gateway --demo
  (umask 077 && mrtr-gateway --generate-key k1 > keys)   # once; every replica reads this file
  mrtr-gateway --keys-file keys --listen 127.0.0.1:8080 \\
      --backend github=http://127.0.0.1:9001/mcp --backend jira=https://jira.internal/mcp
  mrtr-gateway --config /etc/mrtr/gateway.toml --admin-listen 0.0.0.0:9090";

/// What the binary was asked to do.
#[derive(Debug)]
pub enum Command {
    /// Serve.
    Run(Box<Settings>),
    /// Print a fresh keyring entry with this key id, and exit.
    GenerateKey(String),
}

/// Where the keyring comes from.
#[derive(Debug)]
pub enum Keys {
    /// `MRTR_KEYS`: fixed for the life of the process.
    Fixed(KeyringHandle),
    /// `--keys-file`: re-read on SIGHUP and on change.
    File(Arc<KeysFile>),
}

impl Keys {
    /// The handle the gateway reads the keyring through.
    pub fn handle(&self) -> KeyringHandle {
        match self {
            Self::Fixed(keyring) => keyring.clone(),
            Self::File(file) => file.handle().clone(),
        }
    }
}

/// Parsed settings for a run.
#[derive(Debug)]
pub struct Settings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`), if any.
    pub admin_listen: Option<SocketAddr>,
    /// Start the two built-in demo backends.
    pub demo: bool,
    /// Keys from `MRTR_KEYS` or `--keys-file`, if any.
    pub keys: Option<Keys>,
    /// How often the keys file and the listener certificate are checked for changes.
    pub reload_interval: Duration,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// Everything else.
    pub config: GatewayConfig,
}

fn command() -> Clap {
    let secs = |name: &'static str, default: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("SECONDS")
            .default_value(default)
            .value_parser(value_parser!(u64))
            .help(help)
    };
    let positive_secs = |name: &'static str, default: &'static str, help: &'static str| {
        secs(name, default, help).value_parser(value_parser!(u64).range(1..))
    };
    let decimal_secs = |name: &'static str, default: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("SECONDS")
            .default_value(default)
            .value_parser(file::parse_seconds)
            .help(help)
    };
    let path = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("FILE")
            .value_parser(value_parser!(PathBuf))
            .help(help)
    };
    Clap::new("mrtr-gateway")
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .after_help(AFTER_HELP)
        .arg(path("config", "Read settings from this TOML file (keys named like these options, plus [[backend]] sections); options given here win"))
        .arg(
            Arg::new("listen")
                .long("listen")
                .value_name("ADDR")
                .default_value("127.0.0.1:8080")
                .value_parser(value_parser!(SocketAddr))
                .help("Address to serve MCP on, at the path /mcp (port 0 picks a free port)"),
        )
        .arg(
            Arg::new("admin-listen")
                .long("admin-listen")
                .value_name("ADDR")
                .value_parser(value_parser!(SocketAddr))
                .help("Address of the admin listener serving /metrics (Prometheus), /healthz and /readyz; off unless given"),
        )
        .arg(
            Arg::new("backend")
                .long("backend")
                .value_name("NAME=URL")
                .action(ArgAction::Append)
                .value_parser(|s: &str| s.parse::<Backend>())
                .help("A backend's Streamable HTTP endpoint (http:// or https://); repeat for several. NAME is its route and name prefix. Replaces the config file's backends"),
        )
        .arg(path("backend-ca", "Trust only the CA certificate(s) in this PEM file for https:// backends that name no CA of their own (default: the system's trust store)"))
        .arg(
            Arg::new("demo")
                .long("demo")
                .action(ArgAction::SetTrue)
                .help("Start two built-in MRTR demo backends (alpha: JSON answers, beta: SSE answers) and print how to try them; uses an ephemeral key unless keys are given"),
        )
        .arg(path("keys-file", "Read the keyring from a file instead of MRTR_KEYS (entries separated by commas or newlines, '#' starts a comment line); re-read on SIGHUP and on change"))
        .arg(positive_secs("reload-interval", "5", "How often the keys file and the listener certificate are checked for changes"))
        .arg(
            Arg::new("generate-key")
                .long("generate-key")
                .value_name("KID")
                .help("Print a new keyring entry 'KID:key' and exit"),
        )
        .arg(path("tls-cert", "Serve MCP over TLS with this PEM certificate chain (needs --tls-key); re-read on SIGHUP and on change"))
        .arg(path("tls-key", "The PEM private key of --tls-cert"))
        .arg(
            Arg::new("principal-header")
                .long("principal-header")
                .value_name("NAME")
                .value_parser(|s: &str| s.parse::<HeaderName>())
                .help("Bind every sealed requestState to this request header's value (set by an authenticating proxy in front, which must strip it from client requests)"),
        )
        .arg(
            Arg::new("allowed-origin")
                .long("allowed-origin")
                .value_name("ORIGIN")
                .action(ArgAction::Append)
                .help("A browser Origin to accept (e.g. https://app.example.com); repeat for several. Requests without Origin are always accepted"),
        )
        .arg(
            Arg::new("no-loopback-origins")
                .long("no-loopback-origins")
                .action(ArgAction::SetTrue)
                .help("Refuse http(s)://localhost, 127.0.0.1 and [::1] origins, which are accepted by default"),
        )
        .arg(
            Arg::new("allowed-host")
                .long("allowed-host")
                .value_name("HOST")
                .action(ArgAction::Append)
                .help("A Host header value to accept (any port); repeat for several. Default: loopback names when listening on a loopback address, any Host otherwise"),
        )
        .arg(secs("catalog-ttl", "30", "How long backend tool/prompt/resource lists are trusted before they are listed again on demand"))
        .arg(secs("envelope-ttl", "600", "How long a sealed requestState stays valid"))
        .arg(secs("backend-timeout", "60", "How long to wait for a backend's response headers"))
        .arg(
            Arg::new("max-request-body")
                .long("max-request-body")
                .value_name("BYTES")
                .default_value("2097152")
                .value_parser(value_parser!(usize))
                .help("Largest request body accepted (HTTP 413 above)"),
        )
        .arg(positive_secs("health-interval", "10", "How often every backend is probed with server/discover for /readyz"))
        .arg(
            Arg::new("ready-backends")
                .long("ready-backends")
                .value_name("any|all")
                .default_value("any")
                .value_parser(|s: &str| s.parse::<ReadyRule>())
                .help("/readyz is 200 when any backend (or all) answered its last catalog or discovery request"),
        )
        .arg(decimal_secs("backend-idle-timeout", "4", "Close a backend connection idle this long; keep it below the backends' own keep-alive timeouts (a [[backend]] idle-timeout wins)"))
        .arg(decimal_secs("backend-stall-timeout", "300", "End a backend answer that sends nothing this long (a [[backend]] stall-timeout wins)"))
        .arg(
            Arg::new("max-in-flight")
                .long("max-in-flight")
                .value_name("N")
                .default_value("1024")
                .value_parser(clap::builder::RangedU64ValueParser::<usize>::new().range(1..))
                .help("Most requests in flight; more get 503 with a JSON-RPC error at once"),
        )
        .arg(decimal_secs("request-body-timeout", "30", "How long a request body may take once the gateway has to wait for it"))
        .arg(decimal_secs("client-idle-timeout", "30", "A client connection must send a complete request head within this time of opening and of its previous answer (closes idle keep-alive connections)"))
        .arg(
            Arg::new("max-header-bytes")
                .long("max-header-bytes")
                .value_name("BYTES")
                .default_value("65536")
                .value_parser(value_parser!(usize))
                .help("Largest request head (HTTP 431 above; at least 8192 for HTTP/1.1)"),
        )
        .arg(
            Arg::new("max-headers")
                .long("max-headers")
                .value_name("N")
                .default_value("100")
                .value_parser(value_parser!(usize))
                .help("Most request header fields (HTTP 431 above)"),
        )
        .arg(
            Arg::new("max-connections")
                .long("max-connections")
                .value_name("N")
                .default_value("4096")
                .value_parser(value_parser!(u64).range(1..))
                .help("Most client connections open at once; more wait in the kernel's backlog"),
        )
        .arg(
            Arg::new("log-format")
                .long("log-format")
                .value_name("text|json")
                .default_value("text")
                .value_parser(|s: &str| s.parse::<LogFormat>())
                .help("Log lines as text or as JSON objects (tracing-subscriber's JSON formatter); RUST_LOG filters them"),
        )
        .arg(secs("drain-delay", "5", "After SIGTERM, keep accepting (answering with 'Connection: close') this long so load balancers notice /readyz"))
        .arg(secs("drain-timeout", "30", "After SIGTERM, let open requests and streams run at most this long, then exit"))
}

/// Parses the command line; `env` reads environment variables (`MRTR_KEYS`, header sources).
pub fn parse<I, T>(args: I, env: impl Fn(&str) -> Option<String>) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut clap = command();
    let matches = clap.try_get_matches_from_mut(args)?;
    if let Some(kid) = matches.get_one::<String>("generate-key") {
        return Ok(Command::GenerateKey(kid.clone()));
    }
    settings(&matches, env)
        .map(|s| Command::Run(Box::new(s)))
        .map_err(|message| clap.error(clap::error::ErrorKind::ValueValidation, message))
}

/// A flag's value when given on the command line, else the file's, else the flag's default.
fn merged<T: Clone + Send + Sync + 'static>(m: &ArgMatches, id: &str, file: Option<T>) -> Option<T> {
    match (m.value_source(id), file) {
        (Some(ValueSource::CommandLine), _) | (_, None) => m.get_one::<T>(id).cloned(),
        (_, file) => file,
    }
}

fn merged_secs(m: &ArgMatches, id: &str, file: Option<Duration>) -> Duration {
    merged(m, id, file.map(|d| d.as_secs())).map_or(Duration::ZERO, Duration::from_secs)
}

fn merged_list(m: &ArgMatches, id: &str, file: Option<Vec<String>>) -> Option<Vec<String>> {
    match m.get_many::<String>(id) {
        Some(values) => Some(values.cloned().collect()),
        None => file,
    }
}

fn settings(m: &ArgMatches, env: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let file = match m.get_one::<PathBuf>("config") {
        Some(path) => file::load(path, &env)?,
        None => FileSettings::default(),
    };
    let demo = m.get_flag("demo");
    let backend_ca = merged(m, "backend-ca", file.backend_ca.clone());
    let entries: Vec<BackendEntry> = match m.get_many::<Backend>("backend") {
        Some(backends) => backends
            .cloned()
            .map(|backend| BackendEntry {
                backend,
                tls: BackendTls::default(),
            })
            .collect(),
        None => file.backends,
    };
    let backends = entries
        .into_iter()
        .map(|entry| with_tls(entry, backend_ca.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut names: Vec<&str> = backends.iter().map(Backend::name).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("backend name {:?} is used twice", w[0]));
    }
    if backends.is_empty() && !demo {
        return Err(
            "no backend: give --backend NAME=URL (at least once), [[backend]] in --config, or --demo"
                .to_owned(),
        );
    }
    let keys_file = merged(m, "keys-file", file.keys_file.clone());
    let keys = match (keys_file, env(KEYS_ENV).filter(|k| !k.trim().is_empty())) {
        (Some(_), Some(_)) => return Err(format!("set either {KEYS_ENV} or --keys-file, not both")),
        (Some(path), None) => Some(Keys::File(Arc::new(KeysFile::load(path)?))),
        (None, Some(keys)) => Some(Keys::Fixed(KeyringHandle::new(
            parse_keys(&keys).map_err(|e| format!("invalid keyring in {KEYS_ENV}: {e}"))?,
        ))),
        (None, None) => None,
    };
    if keys.is_none() && !demo {
        return Err(format!(
            "no keys: set {KEYS_ENV} (or --keys-file) to 'kid:base64url-key,...'; generate one with `mrtr-gateway --generate-key k1`. \
             Every replica must share the same keyring."
        ));
    }
    let listener_tls = match (
        merged(m, "tls-cert", file.tls_cert.clone()),
        merged(m, "tls-key", file.tls_key.clone()),
    ) {
        (Some(cert), Some(key)) => Some(Arc::new(ListenerTls::load(cert, key).map_err(|e| e.to_string())?)),
        (None, None) => None,
        _ => return Err("--tls-cert and --tls-key go together".to_owned()),
    };
    let origins = merged_list(m, "allowed-origin", file.allowed_origins.clone()).unwrap_or_default();
    let no_loopback = m.get_flag("no-loopback-origins") || file.no_loopback_origins == Some(true);

    let mut config = GatewayConfig::new(backends);
    config.principal_header = merged(m, "principal-header", file.principal_header.clone());
    config.origins = OriginPolicy::new(origins, !no_loopback);
    config.hosts = merged_list(m, "allowed-host", file.allowed_hosts.clone()).map(HostPolicy::only);
    config.catalog_ttl = merged_secs(m, "catalog-ttl", file.catalog_ttl);
    config.envelope_ttl = merged_secs(m, "envelope-ttl", file.envelope_ttl);
    config.backend_timeout = merged_secs(m, "backend-timeout", file.backend_timeout);
    config.max_request_body = merged(m, "max-request-body", file.max_request_body).expect("has a default");
    config.listener_tls = listener_tls;
    config.drain.delay = merged_secs(m, "drain-delay", file.drain_delay);
    config.drain.timeout = merged_secs(m, "drain-timeout", file.drain_timeout);
    config.health_interval = Some(merged_secs(m, "health-interval", file.health_interval));
    config.ready_rule = merged(m, "ready-backends", file.ready_backends).expect("has a default");
    config.backend_idle_timeout =
        merged(m, "backend-idle-timeout", file.backend_idle_timeout).expect("has a default");
    config.backend_stall_timeout =
        merged(m, "backend-stall-timeout", file.backend_stall_timeout).expect("has a default");
    config.max_in_flight = merged(m, "max-in-flight", file.max_in_flight).expect("has a default");
    config.request_body_timeout =
        merged(m, "request-body-timeout", file.request_body_timeout).expect("has a default");
    config.client_limits.idle_timeout =
        merged(m, "client-idle-timeout", file.client_idle_timeout).expect("has a default");
    config.client_limits.max_header_bytes =
        merged(m, "max-header-bytes", file.max_header_bytes).expect("has a default");
    config.client_limits.max_headers = merged(m, "max-headers", file.max_headers).expect("has a default");
    let max_connections = merged(m, "max-connections", file.max_connections.map(|n| n as u64));
    config.client_limits.max_connections = max_connections
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or("max-connections must be at least 1")?;
    if config.drain.delay > config.drain.timeout {
        return Err("--drain-delay must not exceed --drain-timeout".to_owned());
    }
    Ok(Settings {
        listen: merged(m, "listen", file.listen).expect("has a default"),
        admin_listen: merged(m, "admin-listen", file.admin_listen),
        demo,
        keys,
        reload_interval: merged_secs(m, "reload-interval", file.reload_interval),
        log_format: merged(m, "log-format", file.log_format).expect("has a default"),
        config,
    })
}

/// Gives an `https://` backend (or one with TLS files) its rustls configuration, reading its
/// files now so that a bad one stops the start, naming the backend.
fn with_tls(entry: BackendEntry, default_ca: Option<&PathBuf>) -> Result<Backend, String> {
    let BackendEntry { backend, mut tls } = entry;
    let https = backend.url().scheme_str() == Some("https");
    if !https {
        if !tls.is_default() {
            return Err(format!(
                "backend {:?}: TLS files are set but its URL is http://",
                backend.name()
            ));
        }
        return Ok(backend);
    }
    if tls.ca_file.is_none() {
        tls.ca_file = default_ca.cloned();
    }
    let config = tls
        .client_config()
        .map_err(|e| format!("backend {:?}: {e}", backend.name()))?;
    Ok(backend.with_tls(config))
}

#[cfg(test)]
mod tests {
    use tower_mrtr::Keyring;

    use super::*;

    fn run(args: &[&str], keys: Option<&str>) -> Result<Settings, String> {
        let keys = keys.map(str::to_owned);
        match parse(
            std::iter::once("mrtr-gateway").chain(args.iter().copied()),
            |_| keys.clone(),
        ) {
            Ok(Command::Run(s)) => Ok(*s),
            Ok(Command::GenerateKey(_)) => Err("generate".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn refuses_to_start_without_keys_outside_demo() {
        let error = run(&["--backend", "a=http://127.0.0.1:1/mcp"], None).unwrap_err();
        assert!(error.contains("no keys: set MRTR_KEYS"), "{error}");
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let settings = run(
            &[
                "--backend",
                "a=http://127.0.0.1:1/mcp",
                "--principal-header",
                "x-user",
            ],
            Some(&keys),
        )
        .unwrap();
        let Some(Keys::Fixed(keyring)) = settings.keys else {
            panic!("keys from the environment")
        };
        assert_eq!(keyring.load().active_key_id().as_str(), "k1");
        assert_eq!(settings.config.principal_header.unwrap().as_str(), "x-user");
    }

    #[test]
    fn refuses_bad_backends() {
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        assert!(run(&[], Some(&keys)).unwrap_err().contains("no backend"));
        assert!(
            run(
                &["--backend", "a=http://x/mcp", "--backend", "a=http://y/mcp"],
                Some(&keys)
            )
            .unwrap_err()
            .contains("twice")
        );
        assert!(run(&["--backend", "a__b=http://x/mcp"], Some(&keys)).is_err());
    }

    #[test]
    fn flags_override_the_config_file() {
        let dir = std::env::temp_dir().join(format!("mrtr-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            "listen = \"127.0.0.1:7000\"\ndrain-timeout = 20\nready-backends = \"all\"\n\
             [[backend]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\ntimeout = 3\n",
        )
        .unwrap();
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let path = config.to_str().unwrap();
        let from_file = run(&["--config", path], Some(&keys)).unwrap();
        assert_eq!(from_file.listen.port(), 7000);
        assert_eq!(from_file.config.drain.timeout, Duration::from_secs(20));
        assert_eq!(from_file.config.ready_rule, ReadyRule::All);
        assert_eq!(
            from_file.config.backends[0].timeout(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            from_file.config.drain.delay,
            Duration::from_secs(5),
            "the flag's default"
        );

        let overridden = run(
            &[
                "--config",
                path,
                "--listen",
                "127.0.0.1:7001",
                "--drain-timeout",
                "9",
                "--backend",
                "b=http://127.0.0.1:2/mcp",
            ],
            Some(&keys),
        )
        .unwrap();
        assert_eq!(overridden.listen.port(), 7001);
        assert_eq!(overridden.config.drain.timeout, Duration::from_secs(9));
        assert_eq!(
            overridden.config.ready_rule,
            ReadyRule::All,
            "not given: still the file's"
        );
        let names: Vec<&str> = overridden.config.backends.iter().map(Backend::name).collect();
        assert_eq!(names, ["b"]);

        std::fs::write(&config, "listen = \"127.0.0.1:7000\"\nlisten_port = 1\n").unwrap();
        let error = run(&["--config", path], Some(&keys)).unwrap_err();
        assert!(
            error.contains(&format!("{path}:2: listen_port: unknown field")),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn https_backends_load_their_tls_files_at_start() {
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let error = run(
            &[
                "--backend",
                "a=https://127.0.0.1:1/mcp",
                "--backend-ca",
                "/nonexistent/ca.pem",
            ],
            Some(&keys),
        )
        .unwrap_err();
        assert!(
            error.contains("backend \"a\"") && error.contains("/nonexistent/ca.pem"),
            "{error}"
        );
        let error = run(
            &["--backend", "a=http://127.0.0.1:1/mcp", "--tls-cert", "/x.pem"],
            Some(&keys),
        )
        .unwrap_err();
        assert!(error.contains("--tls-cert and --tls-key go together"), "{error}");
    }
}
