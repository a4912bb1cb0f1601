//! The bare reverse proxy: the physical limit of one HTTP/1.1 hop, to compare the gateway with.
//!
//! hyper 1.x server in, hyper-util's legacy client (with its connection pool) out; the request
//! and the answer stream through frame by frame and nothing is parsed. Per request it does only
//! what any reverse proxy must: point the URI and `Host` at the backend and drop the hop-by-hop
//! headers (RFC 9110 §7.6.1).
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let proxy = mrtr_bench::bare::BareProxy::new("http://127.0.0.1:9001/mcp".parse().unwrap()).unwrap();
//! proxy.serve(listener).await
//! # }
//! ```

use std::convert::Infallible;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// Hop-by-hop headers a proxy must not forward.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// The proxy: one backend URL, one pooled client.
#[derive(Clone, Debug)]
pub struct BareProxy {
    client: Client<HttpConnector, Incoming>,
    backend: Uri,
    host: HeaderValue,
}

type ProxyBody = Either<Incoming, Full<Bytes>>;

impl BareProxy {
    /// A proxy sending everything to `backend` (an `http://` URL). `None` without an authority.
    pub fn new(backend: Uri) -> Option<Self> {
        let host = HeaderValue::from_str(backend.authority()?.as_str()).ok()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Some(Self {
            client,
            backend,
            host,
        })
    }

    /// Serves on `listener` until the task is dropped.
    pub async fn serve(self, listener: TcpListener) -> io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let proxy = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(proxy.forward(request).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn forward(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let (mut parts, body) = request.into_parts();
        parts.uri = self.backend.clone();
        drop_hop_by_hop(&mut parts.headers);
        parts.headers.insert(header::HOST, self.host.clone());
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                drop_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Either::Left(body))
            }
            Err(_) => {
                let mut response =
                    Response::new(Either::Right(Full::new(Bytes::from_static(b"bad gateway"))));
                *response.status_mut() = StatusCode::BAD_GATEWAY;
                response
            }
        }
    }
}

fn drop_hop_by_hop(headers: &mut HeaderMap) {
    // Headers listed in `Connection` are hop-by-hop too; the benchmark's clients send none, so
    // looking for them costs one lookup.
    if let Some(listed) = headers.get(header::CONNECTION).and_then(|v| v.to_str().ok()) {
        let listed: Vec<HeaderName> = listed
            .split(',')
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in listed {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}
