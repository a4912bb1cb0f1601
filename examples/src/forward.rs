//! One backend reached over HTTP/1.1 with hyper-util's client, and the backend syntax of the
//! examples' command lines.
//!
//! [`HttpBackend`] sends each request to the backend's URL. Toward the backend it sets `Host` to
//! the backend's own authority and drops:
//!
//! * the client's credentials (`Authorization`, `Cookie`): MCP forbids passing a client's token
//!   through to another server; a backend that needs credentials gets the gateway's own;
//! * `Origin` (it names the client's page, not this proxy);
//! * `Accept-Encoding`: `MrtrLayer` must read answers in clear, and fails closed on an encoded
//!   answer that may hold an `input_required` result;
//! * hop-by-hop headers (`Connection`, `Keep-Alive`, `TE`, `Upgrade`, `Transfer-Encoding`,
//!   `Proxy-Authorization`).
//!
//! Answers come back as they are, streamed.
//!
//! ```
//! use mrtr_examples::forward::BackendSpec;
//!
//! let spec: BackendSpec = "beta=http://127.0.0.1:9002/mcp,archive_repo,migrate_database".parse().unwrap();
//! assert_eq!(spec.name, "beta");
//! assert_eq!(spec.url, "http://127.0.0.1:9002/mcp");
//! assert_eq!(spec.targets, ["archive_repo", "migrate_database"]);
//! assert!("beta".parse::<BackendSpec>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Uri};
use http_body::Body;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;
use tower_service::Service;

use crate::BoxError;
use crate::routing::McpRouter;

/// Headers never sent to a backend; see the [module docs](self).
const DROPPED: [HeaderName; 10] = [
    header::AUTHORIZATION,
    header::COOKIE,
    header::ORIGIN,
    header::ACCEPT_ENCODING,
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::UPGRADE,
    header::TRANSFER_ENCODING,
    header::PROXY_AUTHORIZATION,
];

/// The body type the client sends: whatever the stack hands the backend, boxed once so that
/// one client serves every body type (axum's, hyper's, tower-http's timeout body).
type ClientBody = UnsyncBoxBody<Bytes, BoxError>;

/// A backend reached over HTTP; see the [module docs](self). Cheap to clone: clones share the
/// connection pool.
#[derive(Clone, Debug)]
pub struct HttpBackend {
    client: Client<HttpConnector, ClientBody>,
    url: Uri,
    host: HeaderValue,
}

/// A backend URL without an authority.
#[derive(Debug)]
pub struct NoAuthority(Uri);

impl fmt::Display for NoAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backend URL {} has no host", self.0)
    }
}

impl std::error::Error for NoAuthority {}

impl HttpBackend {
    /// A backend at `url` (`http://host:port/path`), with a connection pool of its own.
    pub fn new(url: Uri) -> Result<Self, NoAuthority> {
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self::with_client(client, url)
    }

    /// A backend at `url` sharing `client`'s connection pool.
    pub fn with_client(client: Client<HttpConnector, ClientBody>, url: Uri) -> Result<Self, NoAuthority> {
        let host = url
            .authority()
            .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
            .ok_or_else(|| NoAuthority(url.clone()))?;
        Ok(Self { client, url, host })
    }
}

impl<B> Service<Request<B>> for HttpBackend
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Request<ClientBody>>::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        parts.uri = self.url.clone();
        for name in &DROPPED {
            parts.headers.remove(name);
        }
        parts.headers.insert(header::HOST, self.host.clone());
        let body = body.map_err(Into::into).boxed_unsync();
        self.client.call(Request::from_parts(parts, body))
    }
}

/// A backend on the command line: `name=url[,target...]`, where the targets are the tool and
/// prompt names and resource URIs routed to it (the first backend also gets everything else).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// The backend's name, sealed into envelopes as its route.
    pub name: String,
    /// Its MCP endpoint.
    pub url: Uri,
    /// What is routed to it.
    pub targets: Vec<String>,
}

impl FromStr for BackendSpec {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        let (name, rest) = spec
            .split_once('=')
            .filter(|(name, _)| !name.is_empty())
            .ok_or_else(|| format!("backend {spec:?} is not name=url[,target...]"))?;
        let mut parts = rest.split(',');
        let url: Uri = parts
            .next()
            .unwrap_or_default()
            .parse()
            .map_err(|e| format!("backend {name}: invalid URL: {e}"))?;
        if url.scheme_str() != Some("http") || url.authority().is_none() {
            return Err(format!("backend {name}: the URL must be http://host:port/path"));
        }
        Ok(Self {
            name: name.to_owned(),
            url,
            targets: parts.filter(|t| !t.is_empty()).map(str::to_owned).collect(),
        })
    }
}

/// A router over `specs` (at least one; the first is the default backend), every backend
/// reached over HTTP through one shared connection pool.
pub fn http_router(specs: &[BackendSpec]) -> Result<McpRouter<HttpBackend>, String> {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let backend = |spec: &BackendSpec| HttpBackend::with_client(client.clone(), spec.url.clone());
    let (first, rest) = specs.split_first().ok_or("at least one backend is required")?;
    let mut router = McpRouter::new(first.name.as_str(), backend(first).map_err(|e| e.to_string())?);
    for spec in rest {
        router = router.with_backend(
            spec.name.as_str(),
            backend(spec).map_err(|e| e.to_string())?,
            spec.targets.iter().cloned(),
        );
    }
    Ok(router)
}
