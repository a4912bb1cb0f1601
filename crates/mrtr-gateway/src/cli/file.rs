//! `--config gateway.toml`: every setting the flags have, with the flags' names as keys, plus
//! per-backend sections (`[[backend]]`: URL, timeout, TLS, static headers). Flags given on the
//! command line override the file (see [`crate::cli`]). `docs/gateway.toml` is a complete,
//! commented example.
//!
//! Unknown keys and bad values are errors that name the file, the line, the section and the key.
//! Header values (credentials) come from the file itself, an environment variable or a file, and
//! never appear in an error message or in `Debug` output.
//!
//! ```
//! use mrtr_gateway::cli::file::parse;
//!
//! let env = |name: &str| (name == "JIRA_TOKEN").then(|| "t0ken".to_owned());
//! let text = r#"
//! listen = "0.0.0.0:8080"
//! drain-timeout = 20
//!
//! [[backend]]
//! name = "jira"
//! url = "https://jira.internal/mcp"
//! timeout = 15
//! headers.authorization = { env = "JIRA_TOKEN", prefix = "Bearer " }
//! "#;
//! let file = parse(text, "gateway.toml", env).unwrap();
//! assert_eq!(file.listen.unwrap().to_string(), "0.0.0.0:8080");
//! assert_eq!(file.backends[0].backend.headers()["authorization"], "Bearer t0ken");
//! assert!(!format!("{file:?}").contains("t0ken"));
//!
//! let error = parse("listen = \"0.0.0.0:8080\"\nlisten-port = 1\n", "gateway.toml", env).unwrap_err();
//! assert!(error.contains("gateway.toml:2") && error.contains("listen-port"), "{error}");
//! ```

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use toml::Spanned;

use crate::observe::logging::LogFormat;
use crate::ops::readiness::ReadyRule;
use crate::tls::BackendTls;
use crate::upstream::Backend;

/// The file as written: every key optional, flag names as keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Raw {
    listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
    keys_file: Option<PathBuf>,
    principal_header: Option<Spanned<String>>,
    allowed_origin: Option<Vec<String>>,
    no_loopback_origins: Option<bool>,
    allowed_host: Option<Vec<String>>,
    catalog_ttl: Option<u64>,
    envelope_ttl: Option<u64>,
    backend_timeout: Option<u64>,
    max_request_body: Option<usize>,
    reload_interval: Option<Spanned<u64>>,
    health_interval: Option<Spanned<u64>>,
    ready_backends: Option<ReadyRule>,
    drain_delay: Option<u64>,
    drain_timeout: Option<u64>,
    backend_idle_timeout: Option<Spanned<f64>>,
    backend_stall_timeout: Option<Spanned<f64>>,
    max_in_flight: Option<usize>,
    request_body_timeout: Option<Spanned<f64>>,
    client_idle_timeout: Option<Spanned<f64>>,
    max_header_bytes: Option<usize>,
    max_headers: Option<usize>,
    max_connections: Option<usize>,
    log_format: Option<LogFormat>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    backend_ca: Option<PathBuf>,
    #[serde(default)]
    backend: Vec<RawBackend>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawBackend {
    name: Spanned<String>,
    url: Spanned<String>,
    timeout: Option<u64>,
    idle_timeout: Option<Spanned<f64>>,
    stall_timeout: Option<Spanned<f64>>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    #[serde(default)]
    headers: toml::map::Map<String, toml::Value>,
}

/// Where a header's value comes from: exactly one of `value`, `env`, `file`, optionally after a
/// literal `prefix` (for `Bearer `).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderSource {
    value: Option<String>,
    env: Option<String>,
    file: Option<PathBuf>,
    prefix: Option<String>,
}

/// One backend from the file, with the TLS files still to be read (the command line may give a
/// default CA for every backend).
#[derive(Debug)]
pub struct BackendEntry {
    /// Name, URL, timeout and headers.
    pub backend: Backend,
    /// The backend's own TLS files.
    pub tls: BackendTls,
}

/// The settings a config file gives; `None` where it says nothing.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct FileSettings {
    /// `listen`
    pub listen: Option<SocketAddr>,
    /// `admin-listen`
    pub admin_listen: Option<SocketAddr>,
    /// `keys-file`
    pub keys_file: Option<PathBuf>,
    /// `principal-header`
    pub principal_header: Option<HeaderName>,
    /// `allowed-origin`
    pub allowed_origins: Option<Vec<String>>,
    /// `no-loopback-origins`
    pub no_loopback_origins: Option<bool>,
    /// `allowed-host`
    pub allowed_hosts: Option<Vec<String>>,
    /// `catalog-ttl`
    pub catalog_ttl: Option<Duration>,
    /// `envelope-ttl`
    pub envelope_ttl: Option<Duration>,
    /// `backend-timeout`
    pub backend_timeout: Option<Duration>,
    /// `max-request-body`
    pub max_request_body: Option<usize>,
    /// `reload-interval`
    pub reload_interval: Option<Duration>,
    /// `health-interval`
    pub health_interval: Option<Duration>,
    /// `ready-backends`
    pub ready_backends: Option<ReadyRule>,
    /// `drain-delay`
    pub drain_delay: Option<Duration>,
    /// `drain-timeout`
    pub drain_timeout: Option<Duration>,
    /// `backend-idle-timeout`
    pub backend_idle_timeout: Option<Duration>,
    /// `backend-stall-timeout`
    pub backend_stall_timeout: Option<Duration>,
    /// `max-in-flight`
    pub max_in_flight: Option<usize>,
    /// `request-body-timeout`
    pub request_body_timeout: Option<Duration>,
    /// `client-idle-timeout`
    pub client_idle_timeout: Option<Duration>,
    /// `max-header-bytes`
    pub max_header_bytes: Option<usize>,
    /// `max-headers`
    pub max_headers: Option<usize>,
    /// `max-connections`
    pub max_connections: Option<usize>,
    /// `log-format`
    pub log_format: Option<LogFormat>,
    /// `tls-cert`
    pub tls_cert: Option<PathBuf>,
    /// `tls-key`
    pub tls_key: Option<PathBuf>,
    /// `backend-ca`
    pub backend_ca: Option<PathBuf>,
    /// `[[backend]]` sections, in order.
    pub backends: Vec<BackendEntry>,
}

/// A positive duration in seconds, decimals allowed (`4`, `0.5`): the form of the timeouts
/// that can usefully be shorter than a second.
///
/// ```
/// use mrtr_gateway::cli::file::parse_seconds;
///
/// assert_eq!(parse_seconds("0.5").unwrap().as_millis(), 500);
/// assert!(parse_seconds("0").is_err() && parse_seconds("-1").is_err() && parse_seconds("x").is_err());
/// ```
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("expected a positive number of seconds, got {text:?}"))
}

/// Reads and parses the file at `path`; `env` reads environment variables (header sources).
pub fn load(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<FileSettings, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    parse(&text, &path.display().to_string(), env)
}

/// Parses config text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str, env: impl Fn(&str) -> Option<String>) -> Result<FileSettings, String> {
    let located = Locator { text, origin };
    let raw: Raw = toml::from_str(text).map_err(|e| located.error(e.span(), e.message()))?;
    let seconds = |s: Option<u64>| s.map(Duration::from_secs);
    let positive = |value: Option<Spanned<u64>>| match value {
        Some(v) if *v.get_ref() == 0 => Err(located.error(Some(v.span()), "must be at least 1 (second)")),
        other => Ok(other.map(|v| Duration::from_secs(v.into_inner()))),
    };
    let principal_header = raw
        .principal_header
        .map(|h| {
            h.get_ref()
                .parse::<HeaderName>()
                .map_err(|e| located.error(Some(h.span()), &format!("not a header name: {e}")))
        })
        .transpose()?;
    let mut backends = Vec::with_capacity(raw.backend.len());
    for entry in raw.backend {
        backends.push(backend_entry(entry, &located, &env)?);
    }
    Ok(FileSettings {
        listen: raw.listen,
        admin_listen: raw.admin_listen,
        keys_file: raw.keys_file,
        principal_header,
        allowed_origins: raw.allowed_origin,
        no_loopback_origins: raw.no_loopback_origins,
        allowed_hosts: raw.allowed_host,
        catalog_ttl: seconds(raw.catalog_ttl),
        envelope_ttl: seconds(raw.envelope_ttl),
        backend_timeout: seconds(raw.backend_timeout),
        max_request_body: raw.max_request_body,
        reload_interval: positive(raw.reload_interval)?,
        health_interval: positive(raw.health_interval)?,
        ready_backends: raw.ready_backends,
        drain_delay: seconds(raw.drain_delay),
        drain_timeout: seconds(raw.drain_timeout),
        backend_idle_timeout: located.seconds(raw.backend_idle_timeout)?,
        backend_stall_timeout: located.seconds(raw.backend_stall_timeout)?,
        max_in_flight: raw.max_in_flight,
        request_body_timeout: located.seconds(raw.request_body_timeout)?,
        client_idle_timeout: located.seconds(raw.client_idle_timeout)?,
        max_header_bytes: raw.max_header_bytes,
        max_headers: raw.max_headers,
        max_connections: raw.max_connections,
        log_format: raw.log_format,
        tls_cert: raw.tls_cert,
        tls_key: raw.tls_key,
        backend_ca: raw.backend_ca,
        backends,
    })
}

fn backend_entry(
    raw: RawBackend,
    located: &Locator<'_>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<BackendEntry, String> {
    let mut backend = Backend::new(raw.name.get_ref(), raw.url.get_ref()).map_err(|e| {
        let span = if e.to_string().contains("name") {
            raw.name.span()
        } else {
            raw.url.span()
        };
        located.error(Some(span), &e.to_string())
    })?;
    let name = raw.name.into_inner();
    if let Some(timeout) = raw.timeout {
        backend = backend.with_timeout(Duration::from_secs(timeout));
    }
    if let Some(idle) = located.seconds(raw.idle_timeout)? {
        backend = backend.with_idle_timeout(idle);
    }
    if let Some(stall) = located.seconds(raw.stall_timeout)? {
        backend = backend.with_stall_timeout(stall);
    }
    for (header, source) in raw.headers {
        let what = format!("backend {name:?}, header {header:?}");
        let header_name = header
            .parse::<HeaderName>()
            .map_err(|e| located.error_in(&what, &format!("not a header name: {e}")))?;
        let source = source.try_into::<HeaderSource>().map_err(|e| {
            located.error_in(
                &what,
                &format!("expected {{ value | env | file = …, prefix = … }}: {e}"),
            )
        })?;
        let value = source
            .resolve(env)
            .map_err(|problem| located.error_in(&what, &problem))?;
        // The message never includes the value: it is a credential.
        let value = HeaderValue::from_str(&value)
            .map_err(|_| located.error_in(&what, "the value contains characters a header cannot carry"))?;
        backend = backend.with_header(header_name, value);
    }
    let tls = BackendTls {
        ca_file: raw.ca_file,
        client_cert: raw.client_cert,
        client_key: raw.client_key,
    };
    Ok(BackendEntry { backend, tls })
}

impl HeaderSource {
    fn resolve(self, env: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
        let value = match (self.value, self.env, self.file) {
            (Some(value), None, None) => value,
            (None, Some(var), None) => env(&var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("the environment variable {var} is not set or empty"))?,
            (None, None, Some(path)) => std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                .trim()
                .to_owned(),
            _ => return Err("give exactly one of value, env or file".to_owned()),
        };
        Ok(self.prefix.unwrap_or_default() + &value)
    }
}

/// Turns byte spans into `file:line: [section] key: message`.
struct Locator<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Locator<'_> {
    fn error(&self, span: Option<Range<usize>>, message: &str) -> String {
        let Some(span) = span else {
            return format!("{}: {message}", self.origin);
        };
        let start = span.start.min(self.text.len());
        let line = self.text[..start].matches('\n').count() + 1;
        let line_text = self.text.lines().nth(line - 1).unwrap_or_default();
        // The key is what stands before `=` on that line; the section is the last header above.
        let key = line_text
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| !k.is_empty());
        let section = self.text[..start]
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| l.starts_with('['))
            .map(|s| format!("{s} "))
            .unwrap_or_default();
        let message = message.trim();
        match key {
            Some(key) => format!("{}:{line}: {section}{key}: {message}", self.origin),
            None => format!("{}:{line}: {section}{message}", self.origin),
        }
    }

    /// A positive number of seconds (decimals allowed), or an error at its place.
    fn seconds(&self, value: Option<Spanned<f64>>) -> Result<Option<Duration>, String> {
        value
            .map(|v| parse_seconds(&v.get_ref().to_string()).map_err(|e| self.error(Some(v.span()), &e)))
            .transpose()
    }

    /// An error about `what`, for values whose position `toml` does not keep (header tables).
    fn error_in(&self, what: &str, message: &str) -> String {
        format!("{}: {what}: {message}", self.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn every_flag_has_a_key() {
        let text = r#"
listen = "0.0.0.0:8080"
admin-listen = "0.0.0.0:9090"
keys-file = "/etc/mrtr/keys"
principal-header = "x-user"
allowed-origin = ["https://app.example.com"]
no-loopback-origins = true
allowed-host = ["mcp.example.com"]
catalog-ttl = 31
envelope-ttl = 601
backend-timeout = 61
max-request-body = 1000
reload-interval = 2
health-interval = 3
ready-backends = "all"
drain-delay = 4
drain-timeout = 25
backend-idle-timeout = 2.5
backend-stall-timeout = 120
max-in-flight = 64
request-body-timeout = 10
client-idle-timeout = 20
max-header-bytes = 16384
max-headers = 50
max-connections = 2000
log-format = "json"
tls-cert = "/etc/mrtr/tls.crt"
tls-key = "/etc/mrtr/tls.key"
backend-ca = "/etc/mrtr/ca.pem"

[[backend]]
name = "a"
url = "http://127.0.0.1:9001/mcp"

[[backend]]
name = "b"
url = "https://b.internal/mcp"
timeout = 5
idle-timeout = 0.5
stall-timeout = 30
ca-file = "/etc/mrtr/b-ca.pem"
client-cert = "/etc/mrtr/b.crt"
client-key = "/etc/mrtr/b.key"
headers.x-tenant = { value = "acme" }
"#;
        let file = parse(text, "t.toml", no_env).unwrap();
        assert_eq!(file.admin_listen.unwrap().port(), 9090);
        assert_eq!(file.ready_backends, Some(ReadyRule::All));
        assert_eq!(file.drain_timeout, Some(Duration::from_secs(25)));
        assert_eq!(file.backends.len(), 2);
        let b = &file.backends[1];
        assert_eq!(b.backend.timeout(), Some(Duration::from_secs(5)));
        assert_eq!(b.tls.client_key.as_deref(), Some(Path::new("/etc/mrtr/b.key")));
        assert_eq!(b.backend.headers()["x-tenant"], "acme");
        assert_eq!(b.backend.idle_timeout(), Some(Duration::from_millis(500)));
        assert_eq!(b.backend.stall_timeout(), Some(Duration::from_secs(30)));
        assert_eq!(file.backend_idle_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(file.backend_stall_timeout, Some(Duration::from_secs(120)));
        assert_eq!(
            (file.max_in_flight, file.max_header_bytes, file.max_headers),
            (Some(64), Some(16384), Some(50))
        );
        assert_eq!(file.max_connections, Some(2000));
        assert_eq!(file.request_body_timeout, Some(Duration::from_secs(10)));
        assert_eq!(file.client_idle_timeout, Some(Duration::from_secs(20)));
        assert_eq!(file.log_format, Some(LogFormat::Json));
        let zero = parse("backend-idle-timeout = 0\n", "t.toml", no_env).unwrap_err();
        assert!(zero.contains("t.toml:1") && zero.contains("positive"), "{zero}");
    }

    /// The documented example stays valid: every key it shows parses.
    #[test]
    fn the_documented_example_parses() {
        let env = |name: &str| (name == "JIRA_MCP_TOKEN").then(|| "t".to_owned());
        let file = parse(
            include_str!("../../../../docs/gateway.toml"),
            "docs/gateway.toml",
            env,
        )
        .unwrap();
        assert_eq!(file.backends.len(), 3);
        assert_eq!(file.keys_file.as_deref(), Some(Path::new("/etc/mrtr/keys/keys")));
        assert!(file.backends[2].tls.client_cert.is_some());
    }

    #[test]
    fn errors_name_the_line_and_the_key() {
        let cases = [
            ("listen = \"nowhere\"\n", "t.toml:1: listen:"),
            ("\n\ndrain-timeout = \"30s\"\n", "t.toml:3: drain-timeout:"),
            ("ready-backends = \"most\"\n", "t.toml:1: ready-backends:"),
            (
                "reload-interval = 0\n",
                "t.toml:1: reload-interval: must be at least 1",
            ),
            (
                "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\ntimout = 3\n",
                "t.toml:4: [[backend]] timout: unknown field `timout`",
            ),
            (
                "[[backend]]\nname = \"a b\"\nurl = \"http://x/mcp\"\n",
                "t.toml:2: [[backend]] name:",
            ),
            (
                "[[backend]]\nname = \"a\"\nurl = \"ftp://x/mcp\"\n",
                "t.toml:3: [[backend]] url:",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text, "t.toml", no_env).unwrap_err();
            assert!(
                error.starts_with(expected),
                "{text:?} gave {error:?}, expected {expected:?}"
            );
        }
    }

    #[test]
    fn header_sources_and_their_errors_never_show_values() {
        let dir = std::env::temp_dir().join(format!("mrtr-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "from-file-secret\n").unwrap();
        let text = format!(
            "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\n\
             headers.authorization = {{ file = {:?}, prefix = \"Bearer \" }}\n\
             headers.x-api-key = {{ env = \"API_KEY\" }}\n",
            token.display().to_string()
        );
        let env = |name: &str| (name == "API_KEY").then(|| "from-env-secret".to_owned());
        let file = parse(&text, "t.toml", env).unwrap();
        let headers = file.backends[0].backend.headers();
        assert_eq!(headers["authorization"], "Bearer from-file-secret");
        assert_eq!(headers["x-api-key"], "from-env-secret");
        assert!(headers["authorization"].is_sensitive());
        let debug = format!("{file:?}");
        assert!(!debug.contains("secret"), "{debug}");

        let error = parse(&text, "t.toml", no_env).unwrap_err();
        assert!(error.contains("API_KEY is not set"), "{error}");
        let both =
            "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\nheaders.x = { value = \"v\", env = \"E\" }\n";
        assert!(parse(both, "t.toml", no_env).unwrap_err().contains("exactly one"));
        let bad =
            "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\nheaders.x = { value = \"se\\ncret\" }\n";
        let error = parse(bad, "t.toml", no_env).unwrap_err();
        assert!(
            error.contains("cannot carry") && !error.contains("cret"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
