//! The accept loop: serves a tower HTTP service over HTTP/1.1 and HTTP/2 (plain, or TLS with a
//! [`ListenerTls`] whose certificate can be replaced while running), and drains as
//! [`drain`] describes.
//!
//! One loop serves both listeners: the MCP one (with a [`Lifecycle`]: it drains) and the admin
//! one (without: it serves until the process exits, so `/readyz` can say 503 during the drain).


mod connection;
pub(crate) mod drain;
use std::error::Error as _;
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
use hyper::rt::Timer as _;
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

use self::connection::{
    Activity, Prefix, Prefixed, Protocol, ReadReady, Tracked, serve_until_closed, serve_until_told,
};
use self::drain::{DrainConfig, Lifecycle};
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
    /// An HTTP/1.1 connection idle this long is parked: hyper's connection and its buffers
    /// (about 19 KiB) are dropped, and the next request's first bytes are read before a new
    /// one takes it on. Not configurable ([`PARK_AFTER`]); tests shorten it.
    pub(crate) park_after: Duration,
}

/// How long an HTTP/1.1 connection is idle before it is parked ([`ClientLimits`]): long enough
/// that a client sending request after request never is (re-creating hyper's connection costs
/// a few microseconds), short enough that clients that keep a connection open between calls
/// far apart hold about 2 KiB each instead of 17.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

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
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Unpin + 'static,
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
        // the connection (`connection.rs`), and `auto`'s connection holds room for both
        // protocols' state in every connection's task.
        let mut http1 = http1::Builder::new();
        // hyper's header read timer is also what tells that a connection has been idle long
        // enough to be parked (`serve_http1`).
        let header_timer = limits.park_after.min(limits.idle_timeout);
        http1
            .timer(CoarseTimer::new())
            .header_read_timeout(header_timer)
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
        let builders = Arc::new(Builders {
            http1,
            http2,
            header_timer,
            idle: limits.idle_timeout,
        });
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

/// The grain of HTTP/1.1 connections' timers ([`CoarseTimer`]).
const TIMER_GRAIN: Duration = Duration::from_millis(100);

/// tokio's timer for hyper's HTTP/1.1 connections, with every deadline rounded up to a multiple
/// of [`TIMER_GRAIN`]: the header read timers that park idle connections (`serve_http1`) then
/// fire together, a hundred to a wake-up at 1,000 requests a second, instead of one wake-up
/// each (which cost more than the parking itself). The idle timeout may run over by the grain.
#[derive(Clone, Copy, Debug)]
struct CoarseTimer {
    base: std::time::Instant,
}

impl CoarseTimer {
    fn new() -> Self {
        Self {
            base: TokioTimer::new().now(),
        }
    }

    fn round(&self, deadline: std::time::Instant) -> std::time::Instant {
        // Microseconds: u64 arithmetic (u128's division is a call), 584,000 years of range.
        let grain = TIMER_GRAIN.as_micros() as u64;
        let since =
            u64::try_from(deadline.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX);
        self.base + Duration::from_micros(since.div_ceil(grain).saturating_mul(grain))
    }
}

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(self.now() + duration)
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        TokioTimer::new().sleep_until(self.round(deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        TokioTimer::new().reset(sleep, self.round(new_deadline));
    }

    fn now(&self) -> std::time::Instant {
        TokioTimer::new().now()
    }
}

/// hyper's servers for a connection whose protocol is known.
struct Builders {
    /// Its header read timeout is `header_timer`.
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// [`ClientLimits::park_after`], or the idle timeout if shorter.
    header_timer: Duration,
    /// [`ClientLimits::idle_timeout`].
    idle: Duration,
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
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Unpin + 'static,
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
        I: AsyncRead + AsyncWrite + ReadReady + Unpin + Send + 'static,
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
                    &builders,
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
                let connection = builders.http2.serve_connection(
                    TokioIo::new(Prefixed::new(Some(prefix), io)),
                    TowerToHyperService::new(service),
                );
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

/// Serves an HTTP/1.1 connection whose first bytes are `prefix`, parking it whenever it has been
/// idle for [`ClientLimits::park_after`]: hyper's connection (its 8 KiB read and write buffers,
/// the boxes it keeps for a request's future and answer body, the last answer's header map) is
/// dropped, and the next request's first bytes are read here, in place, before a new one takes
/// the connection on with them.
///
/// hyper's header read timer tells when: it runs from the end of an answer (or the start of a
/// hyper connection) until a request head is complete, and is set to the parking delay. When it
/// fires, the head's real deadline (the idle timeout after the last answer, or after the
/// connection's start) decides: past it, the connection closes as hyper would have closed it;
/// before it, the connection is parked, or, with part of a head already read, that part is
/// handed to a new hyper connection whose timer ends at the deadline.
async fn serve_http1<I, S, B>(
    builders: &Builders,
    mut service: TowerToHyperService<CloseWhenDraining<S>>,
    mut io: I,
    mut prefix: Option<Prefix>,
    mut close: Option<watch::Receiver<bool>>,
) -> Result<(), BoxError>
where
    I: AsyncRead + AsyncWrite + ReadReady + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Unpin + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    // When the request head hyper waits for must be complete.
    let mut due = deadline(Instant::now(), builders.idle);
    loop {
        let timer = builders
            .header_timer
            .min(due.saturating_duration_since(Instant::now()));
        let io_in = TokioIo::new(Prefixed::new(prefix, io));
        let mut connection = if timer == builders.header_timer {
            builders.http1.serve_connection(io_in, service)
        } else {
            let mut http1 = builders.http1.clone();
            http1.header_read_timeout(timer);
            http1.serve_connection(io_in, service)
        };
        let timed_out = match serve_until_told(
            Pin::new(&mut connection),
            http1::Connection::graceful_shutdown,
            close.as_mut(),
        )
        .await
        {
            // hyper's header read timeout is its only timeout without a cause.
            Err(error) if error.is_timeout() && error.source().is_none() => error,
            served => return served.map_err(Into::into),
        };
        let fired = Instant::now();
        let parts = connection.into_parts();
        let answered;
        (io, answered) = parts.io.into_inner().into_inner();
        service = parts.service;
        if answered {
            // The timer ran from the end of the last answer (up to a grain before it fired).
            due = deadline(fired.checked_sub(timer).unwrap_or(fired), builders.idle);
        }
        if fired >= due {
            return Err(timed_out.into());
        }
        if !parts.read_buf.is_empty() {
            // Part of a head: a new hyper connection reads it first, with the time left.
            prefix = Some(Prefix::Carried(parts.read_buf));
            continue;
        }
        // Parked: hyper's connection is gone (its read buffer too: `read_buf` kept it).
        drop(parts.read_buf);
        prefix = None;
        #[cfg(test)]
        tests::PARKED.fetch_add(1, Ordering::Relaxed);
        let next = tokio::time::timeout_at(due, std::future::poll_fn(|cx| io.poll_read_ready(cx)));
        let next = match close.as_mut() {
            Some(close) => tokio::select! {
                biased;
                next = next => next,
                _ = close.wait_for(|closing| *closing) => return Ok(()),
            },
            None => next.await,
        };
        match next {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error.into()),
            Err(_) => return Err(timed_out.into()),
        }
    }
}

/// `from` plus `duration`, or 100 years from `from` if the clock cannot hold that: the config
/// refuses longer durations, but settings built in code can hold any `Duration`.
fn deadline(from: Instant, duration: Duration) -> Instant {
    from.checked_add(duration)
        .unwrap_or_else(|| from + Duration::from_secs(100 * 365 * 24 * 3600))
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicUsize;

    use http_body_util::{BodyExt, Full};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// HTTP/1.1 connections parked so far, by every test of this module.
    pub(super) static PARKED: AtomicUsize = AtomicUsize::new(0);

    /// Tests that count parkings run one at a time.
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    const PARK_AFTER: Duration = Duration::from_millis(30);

    /// A server that echoes request bodies, parking connections idle for [`PARK_AFTER`].
    async fn echo_server(
        idle: Duration,
        tls: Option<Arc<ListenerTls>>,
    ) -> (
        SocketAddr,
        watch::Sender<bool>,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = tower::service_fn(|request: Request<Incoming>| async move {
            let body = request
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, Infallible>(Response::new(Full::new(body)))
        });
        let (stop, stopped) = watch::channel(false);
        let server = Server {
            listener,
            service,
            tls,
            drain: None,
            stop: stopped,
            accepting: Arc::new(AtomicBool::new(true)),
            limits: ClientLimits {
                idle_timeout: idle,
                max_header_bytes: 8192,
                max_headers: HYPER_DEFAULT_MAX_HEADERS,
                max_connections: 16,
                park_after: PARK_AFTER,
            },
        };
        (addr, stop, tokio::spawn(server.run()))
    }

    fn request(body: &str) -> String {
        format!(
            "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// A client connection, with what it has read beyond the last answer.
    struct Client {
        stream: TcpStream,
        seen: Vec<u8>,
    }

    impl Client {
        async fn connect(addr: SocketAddr) -> Self {
            Self {
                stream: TcpStream::connect(addr).await.unwrap(),
                seen: Vec::new(),
            }
        }

        async fn send(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).await.unwrap();
        }

        /// The next answer's body (answers have a `content-length`).
        async fn answer(&mut self) -> String {
            loop {
                if let Some(end) = self.seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&self.seen[..end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .expect("a content-length")
                        .parse()
                        .unwrap();
                    if self.seen.len() >= end + 4 + length {
                        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                        let body = String::from_utf8_lossy(&self.seen[end + 4..end + 4 + length]).to_string();
                        self.seen.drain(..end + 4 + length);
                        return body;
                    }
                }
                let mut chunk = [0u8; 1024];
                let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
                    .await
                    .expect("an answer in time")
                    .unwrap();
                assert!(
                    n > 0,
                    "closed before the answer: {:?}",
                    String::from_utf8_lossy(&self.seen)
                );
                self.seen.extend_from_slice(&chunk[..n]);
            }
        }

        /// Reads until the server closes the connection: what came after the last answer.
        async fn closed(mut self) -> Vec<u8> {
            tokio::time::timeout(Duration::from_secs(10), self.stream.read_to_end(&mut self.seen))
                .await
                .expect("closed in time")
                .unwrap();
            self.seen
        }
    }

    async fn parked_after(before: usize) -> usize {
        // Parking is due after PARK_AFTER; give it ample time.
        for _ in 0..100 {
            tokio::time::sleep(PARK_AFTER).await;
            let now = PARKED.load(Ordering::Relaxed);
            if now > before {
                return now;
            }
        }
        panic!("the connection was not parked");
    }

    #[tokio::test]
    async fn a_parked_connection_serves_what_comes_next_whole_split_or_pipelined() {
        let _serial = SERIAL.lock().await;
        let (addr, stop, server) = echo_server(Duration::from_secs(30), None).await;
        let mut client = Client::connect(addr).await;
        let parked = PARKED.load(Ordering::Relaxed);
        client.send(request("one").as_bytes()).await;
        assert_eq!(client.answer().await, "one");
        let parked = parked_after(parked).await;

        client.send(request("two").as_bytes()).await;
        assert_eq!(client.answer().await, "two");
        let parked = parked_after(parked).await;

        // A head that stops half-way across the parking delay, then the rest.
        let three = request("three");
        client.send(&three.as_bytes()[..20]).await;
        tokio::time::sleep(PARK_AFTER * 4).await;
        client.send(&three.as_bytes()[20..]).await;
        assert_eq!(client.answer().await, "three");
        parked_after(parked).await;

        // Two requests in one write.
        client
            .send(format!("{}{}", request("four"), request("five")).as_bytes())
            .await;
        assert_eq!(client.answer().await, "four");
        assert_eq!(client.answer().await, "five");

        stop.send(true).unwrap();
        assert!(client.closed().await.is_empty());
        server.await.unwrap().unwrap();
    }

    /// An idle timeout longer than the clock can add to now (settings built in code can hold
    /// any `Duration`) is a deadline far away, not a panic in every connection's task.
    #[tokio::test]
    async fn an_idle_timeout_beyond_the_clock_still_serves_and_parks() {
        let _serial = SERIAL.lock().await;
        let (addr, stop, server) = echo_server(Duration::MAX, None).await;
        let mut client = Client::connect(addr).await;
        let parked = PARKED.load(Ordering::Relaxed);
        client.send(request("one").as_bytes()).await;
        assert_eq!(client.answer().await, "one");
        parked_after(parked).await;
        client.send(request("two").as_bytes()).await;
        assert_eq!(client.answer().await, "two");
        stop.send(true).unwrap();
        assert!(client.closed().await.is_empty());
        server.await.unwrap().unwrap();
    }

    /// A TLS connection parks as a plain one does (its socket waited on under the TLS session:
    /// `ReadReady` for `TlsStream`) and serves its next request on the same session.
    #[tokio::test]
    async fn a_parked_tls_connection_serves_its_next_request() {
        let _serial = SERIAL.lock().await;
        let dir = mrtr_test_support::tls::TempDir::new("parked-tls");
        let ca = mrtr_test_support::tls::Ca::new(&dir.0, "parked");
        let (cert, key) = ca.leaf("listener", &["127.0.0.1"]);
        let tls = Arc::new(ListenerTls::load(&cert, &key).unwrap());
        let (addr, stop, server) = echo_server(Duration::from_secs(30), Some(tls)).await;

        let backend_tls = crate::tls::BackendTls {
            ca_file: Some(ca.cert_file()),
            ..crate::tls::BackendTls::default()
        };
        let mut client_tls = Arc::unwrap_or_clone(backend_tls.client_config().unwrap());
        client_tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let stream = tokio_rustls::TlsConnector::from(Arc::new(client_tls))
            .connect(
                "127.0.0.1".try_into().unwrap(),
                TcpStream::connect(addr).await.unwrap(),
            )
            .await
            .unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let connection = tokio::spawn(connection);
        let mut parked = PARKED.load(Ordering::Relaxed);
        for text in ["one", "two"] {
            let request = Request::post("/")
                .header("host", "x")
                .body(text.to_owned())
                .unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
                .await
                .expect("an answer in time")
                .unwrap();
            assert_eq!(answer.into_body().collect().await.unwrap().to_bytes(), text);
            parked = parked_after(parked).await;
        }
        assert!(!connection.is_finished(), "one connection served both");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_parked_connection_closes_at_its_idle_timeout_or_when_the_server_stops() {
        let _serial = SERIAL.lock().await;
        let (addr, stop, server) = echo_server(Duration::from_millis(400), None).await;
        let before = PARKED.load(Ordering::Relaxed);
        // Parked after its answer, then closed once idle for the timeout: parking does not
        // restart it.
        let mut idle = Client::connect(addr).await;
        idle.send(request("one").as_bytes()).await;
        assert_eq!(idle.answer().await, "one");
        assert!(idle.closed().await.is_empty());
        assert!(PARKED.load(Ordering::Relaxed) > before);

        // A head that never completes, a byte every 20 ms: each time hyper's timer hands what
        // came to a new hyper connection, the head's deadline stays: closed, unanswered.
        let mut slow = Client::connect(addr).await;
        let trickle = async {
            for byte in b"POST / HTTP/1.1\r\nhost: x\r\nx-padding: ".iter().cycle() {
                if slow.stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(PARK_AFTER * 2 / 3).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), trickle)
            .await
            .expect("the slow head is cut off");
        let answered = slow.closed().await;
        assert!(answered.is_empty(), "{:?}", String::from_utf8_lossy(&answered));

        // Parked, then the server stops: closed at once.
        let mut parked = Client::connect(addr).await;
        let before = PARKED.load(Ordering::Relaxed);
        parked.send(request("two").as_bytes()).await;
        assert_eq!(parked.answer().await, "two");
        parked_after(before).await;
        stop.send(true).unwrap();
        assert!(parked.closed().await.is_empty());
        server.await.unwrap().unwrap();
    }
}
