//! [`BackendSpec`]: a backend as an operator writes it, `--backend NAME=URL` (or
//! `NAME=stdio:COMMAND`) or a `[[backend]]` section of the config file (URL or command, era,
//! timeouts, TLS files, static headers, a command's environment), until
//! [`resolve`](BackendSpec::resolve) reads its files and environment and makes it a
//! [`Backend`].
//!
//! Names and URLs are checked as they are read, so a bad one in the file is reported at its
//! line. Header values are credentials: they come from the file itself, an environment variable
//! or a file, and never appear in an error message or in `Debug` output.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::values::PositiveSeconds;
use crate::tls::BackendTls;
use crate::upstream::era::Era;
use crate::upstream::stdio::{MAX_IN_FLIGHT, StdioCommand};
use crate::upstream::{Backend, BackendSpecError};

/// How many principals' processes a stdio backend run per principal keeps at once, by default.
pub(crate) const DEFAULT_MAX_PROCESSES: NonZeroUsize = NonZeroUsize::new(16).unwrap();

/// One backend as configured: `--backend NAME=URL`, or a `[[backend]]` section of the config
/// file; [`resolve`](Self::resolve) makes it a [`Backend`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BackendSpec {
    /// Its name: the route sealed into envelopes and the prefix of its shared names.
    pub name: BackendName,
    /// Its Streamable HTTP endpoint, `http://` or `https://` (or give `command`).
    pub url: Option<BackendUrl>,
    /// The command of a stdio server, program first, run without a shell (instead of `url`).
    pub command: Option<Vec<String>>,
    /// A stdio server's environment besides `PATH` and `HOME`: each a value, or `{ env = "VAR" }`
    /// or `{ file = "PATH" }` (the gateway's own environment is never passed on).
    #[serde(default)]
    pub env: BTreeMap<String, EnvSource>,
    /// The working directory of a stdio server.
    pub cwd: Option<PathBuf>,
    /// Start one process of a stdio server per principal (the `principal-header`'s value)
    /// instead of one that all clients share.
    #[serde(default)]
    pub process_per_principal: bool,
    /// With `process-per-principal`: the most principals' processes run at once per replica
    /// (default 16).
    pub max_processes: Option<NonZeroUsize>,
    /// Without `process-per-principal`: the most of the shared process's 64 places of requests
    /// in flight (waiting ones included) one principal may hold, 1 to 64 (default 16, a
    /// quarter); more are refused at once.
    pub max_calls_per_principal: Option<NonZeroUsize>,
    /// The MCP revision it speaks: `auto` (the default: the probe finds out), `modern`
    /// (2026-07-28) or `legacy` (`initialize` era).
    pub era: Option<Era>,
    /// What envelopes bind it by, instead of its URL: set it to the old URL when the backend
    /// moves, so that rounds in flight still reach it.
    pub identity: Option<String>,
    /// How long to wait for its response head (the gateway's `backend-timeout` otherwise).
    pub timeout: Option<PositiveSeconds>,
    /// How long an idle connection to it is kept (the gateway's `backend-idle-timeout` otherwise).
    pub idle_timeout: Option<PositiveSeconds>,
    /// How long its answer may send nothing (the gateway's `backend-stall-timeout` otherwise).
    pub stall_timeout: Option<PositiveSeconds>,
    /// PEM file of the CA certificate(s) to trust for it (`backend-ca`, else the system's roots).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain to present to it (mTLS); needs `client-key`.
    pub client_cert: Option<PathBuf>,
    /// The private key of `client-cert`.
    pub client_key: Option<PathBuf>,
    /// Static headers sent with every request to it (credentials), by name.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderSource>,
}

/// A backend's name, checked as it is read (ASCII letters, digits, `-` and `_`, 1 to 64 bytes,
/// no `__`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct BackendName(String);

impl TryFrom<String> for BackendName {
    type Error = BackendSpecError;

    fn try_from(name: String) -> Result<Self, BackendSpecError> {
        Backend::check_name(&name)?;
        Ok(Self(name))
    }
}

impl BackendName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A backend's URL, checked as it is read (`http://` or `https://`, with a host).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct BackendUrl(String);

impl TryFrom<String> for BackendUrl {
    type Error = BackendSpecError;

    fn try_from(url: String) -> Result<Self, BackendSpecError> {
        Backend::check_url(&url)?;
        Ok(Self(url))
    }
}

impl BackendUrl {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where a header's value comes from: exactly one of `value`, `env` or `file`, after an
/// optional literal `prefix` (for `Bearer `).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawHeaderSource")]
pub struct HeaderSource {
    from: Source,
    prefix: String,
}

#[derive(Clone)]
enum Source {
    Value(String),
    Env(String),
    File(PathBuf),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeaderSource {
    value: Option<String>,
    env: Option<String>,
    file: Option<PathBuf>,
    prefix: Option<String>,
}

impl TryFrom<RawHeaderSource> for HeaderSource {
    type Error = &'static str;

    fn try_from(raw: RawHeaderSource) -> Result<Self, &'static str> {
        let from = match (raw.value, raw.env, raw.file) {
            (Some(value), None, None) => Source::Value(value),
            (None, Some(var), None) => Source::Env(var),
            (None, None, Some(path)) => Source::File(path),
            _ => return Err("give exactly one of value, env or file"),
        };
        Ok(Self {
            from,
            prefix: raw.prefix.unwrap_or_default(),
        })
    }
}

impl fmt::Debug for HeaderSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A literal value is a credential: only where it comes from is shown.
        match &self.from {
            Source::Value(_) => f.write_str("HeaderSource::Value(..)"),
            Source::Env(var) => write!(f, "HeaderSource::Env({var:?})"),
            Source::File(path) => write!(f, "HeaderSource::File({path:?})"),
        }
    }
}

impl HeaderSource {
    fn resolve(&self, env: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
        let value = match &self.from {
            Source::Value(value) => value.clone(),
            Source::Env(var) => env(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("the environment variable {var} is not set or empty"))?,
            Source::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                .trim()
                .to_owned(),
        };
        Ok(format!("{}{value}", self.prefix))
    }
}

/// A stdio server's environment variable: a literal value, or where it comes from (as for a
/// header, without `prefix`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum EnvSource {
    /// The value itself.
    Value(String),
    /// `{ env = "VAR" }`, `{ file = "PATH" }` or `{ value = "…" }`.
    From(HeaderSource),
}

impl EnvSource {
    fn resolve(&self, env: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
        match self {
            Self::Value(value) => Ok(value.clone()),
            Self::From(source) => source.resolve(env),
        }
    }
}

/// The prefix of a stdio backend's command in `--backend NAME=stdio:COMMAND`.
const STDIO_PREFIX: &str = "stdio:";

impl FromStr for BackendSpec {
    type Err = BackendSpecError;

    /// `NAME=URL` or `NAME=stdio:COMMAND` (split as a shell splits words), as `--backend` gives
    /// it.
    fn from_str(spec: &str) -> Result<Self, BackendSpecError> {
        let (name, target) = spec.split_once('=').ok_or_else(|| {
            BackendSpecError::new(format!("expected NAME=URL or NAME=stdio:COMMAND, got {spec:?}"))
        })?;
        let target = target.trim();
        let (url, command) = match target.strip_prefix(STDIO_PREFIX) {
            Some(line) => {
                let words = shlex::split(line).filter(|w| !w.is_empty()).ok_or_else(|| {
                    BackendSpecError::new(format!(
                        "cannot split the command of backend {:?}: empty, or an unclosed quote",
                        name.trim()
                    ))
                })?;
                (None, Some(words))
            }
            None => (Some(BackendUrl::try_from(target.to_owned())?), None),
        };
        Ok(Self {
            name: BackendName::try_from(name.trim().to_owned())?,
            url,
            command,
            env: BTreeMap::new(),
            cwd: None,
            process_per_principal: false,
            max_processes: None,
            max_calls_per_principal: None,
            era: None,
            identity: None,
            timeout: None,
            idle_timeout: None,
            stall_timeout: None,
            ca_file: None,
            client_cert: None,
            client_key: None,
            headers: BTreeMap::new(),
        })
    }
}

impl BackendSpec {
    /// The [`Backend`]: its headers read (from `env` where the file says so) and, for an
    /// `https://` URL, its TLS files read now (`default_ca` for one that names no CA), so that a
    /// bad one stops the start, naming the backend.
    pub fn resolve(
        &self,
        default_ca: Option<&Path>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Backend, String> {
        let name = self.name.as_str();
        let mut backend = match (&self.url, &self.command) {
            (Some(url), None) => {
                if !self.env.is_empty()
                    || self.cwd.is_some()
                    || self.process_per_principal
                    || self.max_processes.is_some()
                    || self.max_calls_per_principal.is_some()
                {
                    return Err(format!(
                        "backend {name:?}: env, cwd, process-per-principal, max-processes and max-calls-per-principal are for a stdio backend (command), not a URL"
                    ));
                }
                Backend::new(name, url.as_str()).map_err(|e| e.to_string())?
            }
            (None, Some(command)) => self.stdio(command, env)?,
            _ => return Err(format!("backend {name:?}: give exactly one of url or command")),
        };
        if let Some(era) = self.era {
            backend = backend.with_era(era);
        }
        if let Some(identity) = &self.identity {
            backend = backend.with_identity(identity);
        }
        if let Some(timeout) = self.timeout {
            backend = backend.with_timeout(timeout.0);
        }
        if let Some(idle) = self.idle_timeout {
            backend = backend.with_idle_timeout(idle.0);
        }
        if let Some(stall) = self.stall_timeout {
            backend = backend.with_stall_timeout(stall.0);
        }
        for (header_name, value) in self.header_values(env)? {
            backend = backend.with_header(header_name, value);
        }
        let mut tls = BackendTls {
            ca_file: self.ca_file.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        };
        if backend.url().and_then(http::Uri::scheme_str) != Some("https") {
            if !tls.is_default() {
                return Err(format!(
                    "backend {name:?}: TLS files are set but it is not an https:// backend"
                ));
            }
            return Ok(backend);
        }
        if tls.ca_file.is_none() {
            tls.ca_file = default_ca.map(Path::to_owned);
        }
        let config = tls
            .client_config()
            .map_err(|e| format!("backend {name:?}: {e}"))?;
        Ok(backend.with_tls(config))
    }

    /// The stdio backend `name` running `command`, with its environment (read from `env` where
    /// the file says so), working directory and per-principal settings.
    fn stdio(&self, command: &[String], env: &impl Fn(&str) -> Option<String>) -> Result<Backend, String> {
        let name = self.name.as_str();
        if !self.headers.is_empty() || self.idle_timeout.is_some() {
            return Err(format!(
                "backend {name:?}: headers and idle-timeout are for an HTTP backend (url), not a command"
            ));
        }
        let mut command =
            StdioCommand::new(command.iter().cloned()).map_err(|e| format!("backend {name:?}: {e}"))?;
        for (var, source) in &self.env {
            let value = source
                .resolve(env)
                .map_err(|problem| format!("backend {name:?}, env {var:?}: {problem}"))?;
            command = command.with_env(var, &value);
        }
        if let Some(cwd) = &self.cwd {
            command = command.with_cwd(cwd);
        }
        if self.process_per_principal {
            command = command.per_principal(self.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES));
        } else if self.max_processes.is_some() {
            return Err(format!(
                "backend {name:?}: max-processes goes with process-per-principal = true"
            ));
        }
        if let Some(max) = self.max_calls_per_principal {
            if self.process_per_principal {
                return Err(format!(
                    "backend {name:?}: max-calls-per-principal is for a process all principals share, not with process-per-principal = true (each principal's process is its own)"
                ));
            }
            if max.get() > MAX_IN_FLIGHT {
                return Err(format!(
                    "backend {name:?}: max-calls-per-principal is at most {MAX_IN_FLIGHT} (a process's places), got {max}"
                ));
            }
            command = command.with_max_calls_per_principal(max);
        }
        Backend::stdio(name, command).map_err(|e| e.to_string())
    }

    /// The static headers, their values read (from `env` where the file says so). An error
    /// never includes a value: it is a credential.
    fn header_values(
        &self,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let name = self.name.as_str();
        self.headers
            .iter()
            .map(|(header, source)| {
                let what = format!("backend {name:?}, header {header:?}");
                let header_name = header
                    .parse::<HeaderName>()
                    .map_err(|e| format!("{what}: not a header name: {e}"))?;
                let value = source
                    .resolve(env)
                    .map_err(|problem| format!("{what}: {problem}"))?;
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| format!("{what}: the value contains characters a header cannot carry"))?;
                Ok((header_name, value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio_spec(extra: &str) -> Result<BackendSpec, toml::de::Error> {
        toml::from_str(&format!("name = \"local\"\ncommand = [\"server\"]\n{extra}"))
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn max_calls_per_principal_is_a_stdio_backends_share_of_its_shared_process_from_1_to_64() {
        let resolved = |extra: &str| stdio_spec(extra).unwrap().resolve(None, &no_env);
        let share = |extra: &str| {
            resolved(extra)
                .unwrap()
                .command()
                .and_then(StdioCommand::max_calls_per_principal)
                .map(NonZeroUsize::get)
        };
        assert_eq!(share(""), None, "unset: the default, a quarter");
        assert_eq!(share("max-calls-per-principal = 8"), Some(8));
        assert_eq!(share("max-calls-per-principal = 64"), Some(64));
        let error = resolved("max-calls-per-principal = 65").unwrap_err();
        assert!(error.contains("at most 64"), "{error}");
        assert!(stdio_spec("max-calls-per-principal = 0").is_err());
        let error = resolved("max-calls-per-principal = 4\nprocess-per-principal = true").unwrap_err();
        assert!(error.contains("not with process-per-principal"), "{error}");
        let url: BackendSpec =
            toml::from_str("name = \"b\"\nurl = \"http://b/mcp\"\nmax-calls-per-principal = 4\n").unwrap();
        let error = url.resolve(None, &no_env).unwrap_err();
        assert!(
            error.contains("max-calls-per-principal are for a stdio backend"),
            "{error}"
        );
        // The command line's form has no per-backend settings: the default.
        let spec: BackendSpec = "local=stdio:server --flag".parse().unwrap();
        assert_eq!(spec.max_calls_per_principal, None);
    }
}
