//! One accepted client connection ([`Connection`]): its TLS handshake, its protocol read
//! (`protocol.rs`), then hyper's HTTP/1.1 server (parked while idle, `parking.rs`) or HTTP/2
//! server for its life (its writes gathered, `gather.rs`); while the gateway drains, every
//! HTTP/1.1 answer closes its connection ([`CloseWhenDraining`]).

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::Either;
use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tower_mrtr::BoxError;
use tower_service::Service;

use super::ClientLimits;
use super::drain::Lifecycle;
use super::gather::Gathered;
use super::parking::{CoarseTimer, Http1, serve_http1};
use super::protocol::{self, Activity, Prefixed, Protocol, ReadReady, Tracked, serve_until_closed};
use crate::tls::ListenerTls;

/// How long a TLS client may take to finish its handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an HTTP/2 keep-alive ping may go unanswered before the connection is closed.
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The most request header fields hyper's HTTP/1.1 server accepts when no limit is set (its
/// `DEFAULT_MAX_HEADERS`, private to hyper; `tests/it/overload.rs` checks that 101 fields are
/// refused with the default limits).
pub(super) const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// hyper's servers for a connection whose protocol is known.
pub(super) struct Builders {
    http1: Http1,
    http2: http2::Builder<TokioExecutor>,
}

impl Builders {
    /// hyper's own servers, not hyper-util's `auto` one: the protocol is read before hyper sees
    /// the connection (`protocol.rs`), and `auto`'s connection holds room for both protocols'
    /// state in every connection's task.
    pub(super) fn new(limits: &ClientLimits) -> Self {
        let mut http1 = http1::Builder::new();
        // hyper's header read timer is also what tells that a connection has been idle long
        // enough to be parked (`parking.rs`).
        let header_timer = limits.park_after.min(limits.idle_timeout);
        http1
            .timer(CoarseTimer::new())
            .header_read_timeout(header_timer)
            // hyper's floor for its read buffer is 8 KiB.
            .max_buf_size(limits.max_header_bytes.max(8192));
        // hyper enforces its default of 100 with arrays on the stack, left uninitialised; a
        // limit set explicitly, even 100, fills two arrays per request, so it is set only when it
        // differs.
        if limits.max_headers != HYPER_DEFAULT_MAX_HEADERS {
            http1.max_headers(limits.max_headers);
        }
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            // Pings find a peer that went away while a stream was open.
            .keep_alive_interval(Some(limits.idle_timeout))
            .keep_alive_timeout(H2_PING_TIMEOUT);
        let http1 = Http1 {
            builder: http1,
            header_timer,
            idle: limits.idle_timeout,
        };
        Self { http1, http2 }
    }
}

/// One accepted connection.
pub(super) struct Connection<S> {
    pub(super) builders: Arc<Builders>,
    pub(super) service: S,
    pub(super) lifecycle: Option<Lifecycle>,
    /// `None` for a connection taken from the backlog as the listener closes: it is told to
    /// close already, which would close it before its request is read.
    pub(super) close: Option<watch::Receiver<bool>>,
    /// How long it may send nothing: until its protocol is known, and (HTTP/2) with no request open.
    pub(super) idle: Duration,
}

impl<S, B> Connection<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Unpin + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// The future of the connection's task; `place` is held until it ends. A plain connection
    /// is served in the task itself; a TLS one in a box: its handshake and stream would make
    /// every connection's task as large as theirs.
    pub(super) fn run(
        self,
        stream: TcpStream,
        tls: Option<Arc<ListenerTls>>,
        place: Option<OwnedSemaphorePermit>,
    ) -> impl Future<Output = ()> + Send + 'static {
        match tls {
            None => Either::Left(self.serve(stream, place)),
            Some(tls) => Either::Right(Box::pin(async move {
                let acceptor = tls.acceptor();
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => self.serve(stream, place).await,
                    Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            })),
        }
    }

    async fn serve<I>(self, mut io: I, _place: Option<OwnedSemaphorePermit>)
    where
        I: AsyncRead + AsyncWrite + ReadReady + Unpin + Send + 'static,
    {
        let Self {
            builders,
            service,
            lifecycle,
            close,
            idle,
        } = self;
        let (protocol, prefix) = match tokio::time::timeout(idle, protocol::detect(&mut io)).await {
            Ok(Ok(Some(detected))) => detected,
            Ok(Ok(None)) => return tracing::debug!("a client connection closed before its first byte"),
            Ok(Err(error)) => {
                return tracing::debug!(%error, "a client connection failed before its first request");
            }
            Err(_) => return tracing::debug!("a client connection sent no request head in time; closed"),
        };
        let counted = lifecycle.is_some();
        let service = CloseWhenDraining {
            inner: service,
            lifecycle,
        };
        if counted {
            crate::observe::metrics::connection(1.0);
        }
        let served: Result<(), BoxError> = match protocol {
            Protocol::Http1 => {
                serve_http1(
                    &builders.http1,
                    TowerToHyperService::new(service),
                    io,
                    Some(prefix),
                    close,
                )
                .await
            }
            // In a box, as TLS: HTTP/2's state would make every connection's task as large.
            Protocol::Http2 => Box::pin(async move {
                let activity = Activity::new();
                let service = Tracked {
                    inner: service,
                    activity: activity.clone(),
                };
                // Its streams' frames written together (`gather.rs`).
                let connection = Gathered::around(Prefixed::new(Some(prefix), io), |io| {
                    builders
                        .http2
                        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
                });
                serve_until_closed(
                    pin!(connection),
                    |connection| http2::Connection::graceful_shutdown(connection.connection()),
                    close,
                    Some((activity, idle)),
                )
                .await
            })
            .await
            .map_err(Into::into),
        };
        if let Err(error) = served {
            tracing::debug!(%error, "connection ended with an error");
        }
        if counted {
            crate::observe::metrics::connection(-1.0);
        }
    }
}

/// While the gateway drains, adds `Connection: close` to every HTTP/1.1 answer: the client
/// reconnects (to another replica) instead of writing its next request onto a connection this
/// replica is about to close.
#[derive(Clone)]
pub(super) struct CloseWhenDraining<S> {
    inner: S,
    lifecycle: Option<Lifecycle>,
}

impl<S, B> Service<Request<Incoming>> for CloseWhenDraining<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = CloseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        CloseFuture {
            lifecycle: self
                .lifecycle
                .clone()
                .filter(|_| request.version() < Version::HTTP_2),
            inner: self.inner.call(request),
        }
    }
}

pin_project! {
    /// Response future of [`CloseWhenDraining`].
    pub(super) struct CloseFuture<F> {
        #[pin]
        inner: F,
        // `None` for HTTP/2 (no `Connection` header there) and for listeners that do not drain.
        lifecycle: Option<Lifecycle>,
    }
}

impl<F, B, E> Future for CloseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut output = ready!(this.inner.poll(cx));
        // Checked when the answer is ready, so requests in flight at SIGTERM close too.
        if let (Ok(response), Some(lifecycle)) = (&mut output, this.lifecycle.as_ref())
            && lifecycle.is_draining()
        {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        Poll::Ready(output)
    }
}
