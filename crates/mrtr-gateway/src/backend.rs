//! Backends: a name (which is also the [`Route`] sealed into envelopes) and a Streamable HTTP URL.
//!
//! ```
//! use mrtr_gateway::Backend;
//!
//! let backend: Backend = "github=http://127.0.0.1:9001/mcp".parse().unwrap();
//! assert_eq!(backend.name(), "github");
//! assert_eq!(backend.url().to_string(), "http://127.0.0.1:9001/mcp");
//! assert!("git hub=http://x/mcp".parse::<Backend>().is_err());
//! assert!("github=https://x/mcp".parse::<Backend>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use http::{HeaderValue, Uri};
use tower_mrtr::Route;

/// One backend MCP server the gateway forwards to.
#[derive(Clone, Debug)]
pub struct Backend {
    route: Route,
    url: Uri,
    host: HeaderValue,
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

impl Backend {
    /// A backend named `name` (ASCII letters, digits, `-` and `_`, at most 64 bytes, no `__`)
    /// at `url` (`http://host:port/path`).
    pub fn new(name: &str, url: &str) -> Result<Self, BackendSpecError> {
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !name.contains(crate::catalog::SEPARATOR);
        if !valid_name {
            return Err(BackendSpecError(format!(
                "invalid backend name {name:?}: use 1-64 ASCII letters, digits, '-' or '_' (and no {:?})",
                crate::catalog::SEPARATOR
            )));
        }
        let url: Uri = url
            .parse()
            .map_err(|e| BackendSpecError(format!("invalid URL for backend {name:?}: {e}")))?;
        if url.scheme_str() != Some("http") {
            return Err(BackendSpecError(format!(
                "backend {name:?}: only http:// URLs are supported (terminate TLS in a sidecar)"
            )));
        }
        let authority = url
            .authority()
            .ok_or_else(|| BackendSpecError(format!("backend {name:?}: the URL has no host")))?;
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| BackendSpecError(format!("backend {name:?}: {e}")))?;
        Ok(Self {
            route: Route::new(name),
            url,
            host,
        })
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        self.route.as_str()
    }

    /// The route reported to (and pinned by) the MRTR layer: the name.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The backend's MCP endpoint.
    pub fn url(&self) -> &Uri {
        &self.url
    }

    /// The `Host` header the backend expects: its own authority.
    pub fn host(&self) -> &HeaderValue {
        &self.host
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
