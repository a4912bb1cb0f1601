//! The accept loop: serves a tower HTTP service over HTTP/1.1 and HTTP/2 (plain, or TLS with a
//! [`ListenerTls`] whose certificate can be replaced while running), and drains as
//! [`crate::front::drain`] describes.
//!
//! One loop serves both listeners: the MCP one (with a [`Lifecycle`]: it drains) and the admin
//! one (without: it serves until the process exits, so `/readyz` can say 503 during the drain).

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower_mrtr::BoxError;
use tower_service::Service;

use super::connection::{self, Activity, Prefixed, Protocol, Tracked, serve_until_closed, serve_until_told};
use crate::front::drain::{DrainConfig, Lifecycle};
use crate::tls::ListenerTls;

/// How long an HTTP/2 keep-alive ping may go unanswered before the connection is closed.
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Longest a client may take to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most request header fields hyper's HTTP/1.1 server accepts when no limit is set (its
/// `DEFAULT_MAX_HEADERS`, private to hyper; `tests/overload.rs` checks that 101 fields are
/// refused with the default limits).
const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// What a client connection may hold: the size and number of its request headers, and how
/// long it may stay idle ([`Settings::client_limits`](crate::Settings::client_limits) gives the
/// configured ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientLimits {
    /// An HTTP/1.1 connection must send a complete request head within this time of opening,
    /// and of its previous answer: it bounds both idle keep-alive connections and slow request
    /// heads. (Keep a load balancer's upstream keep-alive timeout below it.)
    pub idle_timeout: Duration,
    /// Largest request head (HTTP/1.1: the read buffer, at least 8 KiB; HTTP/2: the header
    /// list). Over it, HTTP/1.1 answers 431 and closes.
    pub max_header_bytes: usize,
    /// Most request header fields (HTTP/1.1); over it, 431.
    pub max_headers: usize,
    /// Most client connections open at once. At the limit the listener stops accepting, so
    /// further connections wait in the kernel's backlog: what the gateway holds per connection
    /// (buffers, a task) stays bounded however many clients come, which the in-flight limit
    /// alone does not ensure when the gateway falls behind.
    pub max_connections: usize,
}

/// What the accept loop serves and how it stops.
pub(crate) struct Server<S> {
    pub(crate) listener: TcpListener,
    pub(crate) service: S,
    pub(crate) tls: Option<Arc<ListenerTls>>,
    /// `None`: no drain (the admin listener), stop at once when `stop` fires.
    pub(crate) drain: Option<(Lifecycle, DrainConfig)>,
    /// Fires for a shutdown without the drain delay ([`crate::RunningGateway::shutdown`]).
    pub(crate) stop: watch::Receiver<bool>,
    /// True while the listener accepts connections.
    pub(crate) accepting: Arc<AtomicBool>,
    /// What each connection may hold.
    pub(crate) limits: ClientLimits,
}

impl<S, B> Server<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// Accepts until stopped or drained, then lets the open connections finish (within the
    /// drain timeout, if any).
    pub(crate) async fn run(self) -> io::Result<()> {
        let Self {
            listener,
            service,
            tls,
            drain,
            stop,
            accepting,
            limits,
        } = self;
        // hyper's own servers, not hyper-util's `auto` one: the protocol is read before hyper sees
        // the connection (`front/connection.rs`), and `auto`'s connection holds room for both
        // protocols' state in every connection's task.
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(limits.idle_timeout)
            // hyper's floor for its read buffer is 8 KiB.
            .max_buf_size(limits.max_header_bytes.max(8192));
        // hyper enforces its default of 100 with arrays on the stack, left uninitialised; a limit
        // set explicitly, even 100, fills two arrays per request, so it is set only when it
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
        let builders = Arc::new(Builders { http1, http2 });
        // The connections being served, and the signal that tells them to close.
        let connections = TaskTracker::new();
        let (close, closing) = watch::channel(false);

        // When to stop accepting, and the deadline for what is still open then.
        let stop_requested = |mut stop: watch::Receiver<bool>| async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let stop_accepting = async {
            match &drain {
                None => {
                    stop_requested(stop.clone()).await;
                    None
                }
                Some((lifecycle, config)) => {
                    tokio::select! {
                        biased;
                        () = stop_requested(stop.clone()) => {}
                        () = lifecycle.drain_started() => {}
                    }
                    let started = Instant::now();
                    // A stop request cuts the delay short (`RunningGateway::shutdown`).
                    tokio::select! {
                        biased;
                        () = stop_requested(stop.clone()) => {}
                        () = tokio::time::sleep(config.delay) => {}
                    }
                    Some(started + config.timeout)
                }
            }
        };
        tokio::pin!(stop_accepting);
        // What serving one accepted connection takes; `place` is its share of
        // `--max-connections` (none for the backlog taken as the listener closes).
        let open = |stream: TcpStream, place: Option<OwnedSemaphorePermit>, close| {
            // Answers go out as soon as they are ready (SSE events one by one); Nagle's
            // algorithm would hold small writes back until the client's ACK.
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY");
            }
            let connection = Connection {
                builders: builders.clone(),
                service: service.clone(),
                lifecycle: drain.as_ref().map(|(l, _)| l.clone()),
                close,
                idle: limits.idle_timeout,
            };
            connection.run(stream, tls.clone(), place)
        };
        let places = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let deadline = loop {
            // A place first, then a connection: at the limit, new ones wait in the backlog.
            let next = async {
                let place = places.clone().acquire_owned().await.expect("never closed");
                (place, listener.accept().await)
            };
            tokio::select! {
                deadline = &mut stop_accepting => break deadline,
                (place, accepted) = next => match accepted {
                    Ok((stream, _peer)) => {
                        connections.spawn(open(stream, Some(place), Some(closing.clone())));
                    }
                    Err(error) => accept_failed(error).await,
                },
            }
        };
        accepting.store(false, Ordering::SeqCst);
        // Connections queued in the kernel may already hold a request, which closing the
        // listener would reset (a load balancer does not resend a POST): take and answer them,
        // outside the graceful shutdown, which would close them before their request is read.
        let mut backlog = tokio::task::JoinSet::new();
        for stream in take_backlog(listener) {
            backlog.spawn(open(stream, None, None));
        }
        connections.close();
        let open = connections.len();
        if open > 0 && drain.is_some() {
            tracing::info!(open, "listener closed; waiting for open connections");
        }
        match deadline {
            // A stop without drain: idle connections close at once.
            None => {
                let _ = close.send(true);
                connections.wait().await;
                while backlog.join_next().await.is_some() {}
            }
            // A drain lets connections end on their own for a moment first (every answer now
            // closes its connection): hyper's graceful shutdown at once would also close, and so
            // reset, a connection whose request is still unread in its socket. Then idle ones close.
            Some(deadline) => {
                let settle_until = deadline.min(Instant::now() + LISTENER_SETTLE);
                let _ = tokio::time::timeout_at(settle_until, connections.wait()).await;
                let finished = async {
                    let _ = close.send(true);
                    connections.wait().await;
                    while backlog.join_next().await.is_some() {}
                };
                if tokio::time::timeout_at(deadline, finished).await.is_err() {
                    tracing::warn!("drain timeout reached; dropping the connections still open");
                }
            }
        }
        Ok(())
    }
}

/// How long a drain lets connections end on their own after the listener closes, before idle
/// ones are closed.
const LISTENER_SETTLE: Duration = Duration::from_secs(1);

/// Accepts every connection already queued on `listener`, without waiting, and closes it.
/// Done on the underlying socket: tokio's readiness may not yet know of the last arrivals.
fn take_backlog(listener: TcpListener) -> Vec<TcpStream> {
    let listener = match listener.into_std() {
        Ok(listener) => listener,
        Err(error) => {
            tracing::debug!(%error, "cannot take the listener's backlog");
            return Vec::new();
        }
    };
    let mut streams = Vec::new();
    // Non-blocking (tokio's `into_std` keeps it so): `WouldBlock` ends the backlog. A
    // connection that died in the backlog is skipped, not taken for its end.
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        match stream
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(stream))
        {
            Ok(stream) => streams.push(stream),
            Err(error) => tracing::debug!(%error, "a connection from the backlog is dropped"),
        }
    }
    if !streams.is_empty() {
        tracing::info!(
            connections = streams.len(),
            "answering connections queued as the listener closed"
        );
    }
    streams
}

/// A failed `accept`: a connection that died in the backlog is skipped quietly; anything else
/// (such as running out of file descriptors) is logged and retried after a pause instead of
/// spinning.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::warn!(%error, "accept failed; retrying in 50 ms");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// hyper's servers for a connection whose protocol is known.
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

/// One accepted connection.
struct Connection<S> {
    builders: Arc<Builders>,
    service: S,
    lifecycle: Option<Lifecycle>,
    /// `None` for a connection taken from the backlog as the listener closes: it is told to
    /// close already, which would close it before its request is read.
    close: Option<watch::Receiver<bool>>,
    /// How long it may send nothing: until its protocol is known, and (HTTP/2) with no request open.
    idle: Duration,
}

impl<S, B> Connection<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// The future of the connection's task; `place` is held until it ends. A plain connection
    /// is served in the task itself; a TLS one in a box: its handshake and stream would make
    /// every connection's task as large as theirs.
    fn run(
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
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Self {
            builders,
            service,
            lifecycle,
            close,
            idle,
        } = self;
        let (protocol, prefix) = match tokio::time::timeout(idle, connection::detect(&mut io)).await {
            Ok(Ok(Some(detected))) => detected,
            Ok(Ok(None)) => return tracing::debug!("a client connection closed before its first byte"),
            Ok(Err(error)) => {
                return tracing::debug!(%error, "a client connection failed before its first request");
            }
            Err(_) => return tracing::debug!("a client connection sent no request head in time; closed"),
        };
        let io = TokioIo::new(Prefixed::new(prefix, io));
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
                let connection = builders
                    .http1
                    .serve_connection(io, TowerToHyperService::new(service));
                serve_until_told(pin!(connection), http1::Connection::graceful_shutdown, close)
                    .await
                    .map_err(Into::into)
            }
            // In a box, as TLS: HTTP/2's state would make every connection's task as large.
            Protocol::Http2 => Box::pin(async move {
                let activity = Activity::new();
                let service = Tracked {
                    inner: service,
                    activity: activity.clone(),
                };
                let connection = builders
                    .http2
                    .serve_connection(io, TowerToHyperService::new(service));
                serve_until_closed(
                    pin!(connection),
                    http2::Connection::graceful_shutdown,
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
struct CloseWhenDraining<S> {
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
    struct CloseFuture<F> {
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
