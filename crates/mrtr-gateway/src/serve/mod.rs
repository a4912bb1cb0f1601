//! The accept loop: serves a tower HTTP service over HTTP/1.1 and HTTP/2 (plain, or TLS with a
//! [`ListenerTls`] whose certificate can be replaced while running), and drains as
//! [`drain`] describes.
//!
//! One loop serves both listeners: the MCP one (with a [`Lifecycle`]: it drains) and the admin
//! one (without: it serves until the process exits, so `/readyz` can say 503 during the drain).

mod connection;
pub(crate) mod drain;
mod gather;
mod parking;
mod protocol;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower_mrtr::BoxError;
use tower_service::Service;

use self::connection::{Builders, Connection};
use self::drain::{DrainConfig, Lifecycle};
use crate::tls::ListenerTls;

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

impl<S> Server<S> {
    /// The same server for another service (the stack is chosen after the listener is set up).
    pub(crate) fn serving<T>(self, service: T) -> Server<T> {
        Server {
            listener: self.listener,
            service,
            tls: self.tls,
            drain: self.drain,
            stop: self.stop,
            accepting: self.accepting,
            limits: self.limits,
        }
    }
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
        let lifecycle = drain.as_ref().map(|(lifecycle, _)| lifecycle.clone());
        let opener = Opener {
            builders: Arc::new(Builders::new(&limits)),
            service,
            tls,
            lifecycle,
            idle: limits.idle_timeout,
        };
        // The connections being served, and the signal that tells them to close.
        let connections = TaskTracker::new();
        let (close, closing) = watch::channel(false);
        let stop_accepting = stop_accepting(stop, drain.as_ref().map(|(l, c)| (l.clone(), *c)));
        let places = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let deadline = accept(&listener, &opener, &connections, &closing, places, stop_accepting).await;
        accepting.store(false, Ordering::SeqCst);
        // Connections queued in the kernel may already hold a request, which closing the
        // listener would reset (a load balancer does not resend a POST): take and answer them,
        // outside the graceful shutdown, which would close them before their request is read.
        let mut backlog = tokio::task::JoinSet::new();
        for stream in take_backlog(listener) {
            backlog.spawn(opener.open(stream, None, None));
        }
        connections.close();
        let open = connections.len();
        if open > 0 && drain.is_some() {
            tracing::info!(open, "listener closed; waiting for open connections");
        }
        finish(connections, backlog, close, deadline).await;
        Ok(())
    }
}

/// What serving one accepted connection takes.
struct Opener<S> {
    builders: Arc<Builders>,
    service: S,
    tls: Option<Arc<ListenerTls>>,
    lifecycle: Option<Lifecycle>,
    idle: Duration,
}

impl<S, B> Opener<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Unpin + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// The task serving `stream`; `place` is its share of `--max-connections` (none for the
    /// backlog taken as the listener closes), `close` what tells it to close (none for the
    /// backlog: it is closing already).
    fn open(
        &self,
        stream: TcpStream,
        place: Option<OwnedSemaphorePermit>,
        close: Option<watch::Receiver<bool>>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        // Answers go out as soon as they are ready (SSE events one by one); Nagle's algorithm
        // would hold small writes back until the client's ACK.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let connection = Connection {
            builders: self.builders.clone(),
            service: self.service.clone(),
            lifecycle: self.lifecycle.clone(),
            close,
            idle: self.idle,
        };
        connection.run(stream, self.tls.clone(), place)
    }
}

/// Resolves when the listener must stop accepting: at a stop request, or, for a listener that
/// drains, once the drain delay has passed since the drain began (a stop request cuts it short,
/// `RunningGateway::shutdown`). Gives the deadline for the connections still open then (`None`:
/// none, close them at once).
async fn stop_accepting(
    stop: watch::Receiver<bool>,
    drain: Option<(Lifecycle, DrainConfig)>,
) -> Option<Instant> {
    let stop_requested = || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    };
    let (lifecycle, config) = match drain {
        None => {
            stop_requested().await;
            return None;
        }
        Some(drain) => drain,
    };
    tokio::select! {
        biased;
        () = stop_requested() => {}
        () = lifecycle.drain_started() => {}
    }
    let started = Instant::now();
    tokio::select! {
        biased;
        () = stop_requested() => {}
        () = tokio::time::sleep(config.delay) => {}
    }
    Some(started + config.timeout)
}

/// Accepts connections into `connections` until `stop` resolves; returns its deadline. A place
/// among `places` first, then a connection: at the limit, new ones wait in the backlog.
async fn accept<S, B>(
    listener: &TcpListener,
    opener: &Opener<S>,
    connections: &TaskTracker,
    closing: &watch::Receiver<bool>,
    places: Arc<Semaphore>,
    stop: impl std::future::Future<Output = Option<Instant>>,
) -> Option<Instant>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Unpin + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    tokio::pin!(stop);
    loop {
        let next = async {
            let place = places.clone().acquire_owned().await.expect("never closed");
            (place, listener.accept().await)
        };
        tokio::select! {
            deadline = &mut stop => return deadline,
            (place, accepted) = next => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(opener.open(stream, Some(place), Some(closing.clone())));
                }
                Err(error) => accept_failed(error).await,
            },
        }
    }
}

/// Lets the open connections and the backlog finish: at once for a stop without drain (idle
/// connections close), by `deadline` for a drain.
async fn finish(
    connections: TaskTracker,
    mut backlog: tokio::task::JoinSet<()>,
    close: watch::Sender<bool>,
    deadline: Option<Instant>,
) {
    let Some(deadline) = deadline else {
        let _ = close.send(true);
        connections.wait().await;
        while backlog.join_next().await.is_some() {}
        return;
    };
    // A drain lets connections end on their own for a moment first (every answer now closes
    // its connection): hyper's graceful shutdown at once would also close, and so reset, a
    // connection whose request is still unread in its socket. Then idle ones close.
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

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::connection::HYPER_DEFAULT_MAX_HEADERS;
    use super::*;

    /// Connections parked so far, as the test's own recorder counted them: each test installs
    /// one for its thread, where its server's connections run (`#[tokio::test]` is
    /// single-threaded), so tests that count parkings run side by side. A snapshot takes the
    /// counts since the last one; `seen` adds them up.
    struct Parkings {
        snapshotter: Snapshotter,
        seen: std::cell::Cell<u64>,
    }

    impl Parkings {
        fn of(recorder: &DebuggingRecorder) -> Self {
            Self {
                snapshotter: recorder.snapshotter(),
                seen: std::cell::Cell::new(0),
            }
        }
    }

    fn count(parkings: &Parkings) -> u64 {
        let since = parkings
            .snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n)
                    if key.key().name() == crate::observe::metrics::CONNECTIONS_PARKED_TOTAL =>
                {
                    Some(n)
                }
                _ => None,
            })
            .unwrap_or(0);
        parkings.seen.set(parkings.seen.get() + since);
        parkings.seen.get()
    }

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

    async fn parked_after(parkings: &Parkings, before: u64) -> u64 {
        // Parking is due after PARK_AFTER; give it ample time.
        for _ in 0..100 {
            tokio::time::sleep(PARK_AFTER).await;
            let now = count(parkings);
            if now > before {
                return now;
            }
        }
        panic!("the connection was not parked");
    }

    #[tokio::test]
    async fn a_parked_connection_serves_what_comes_next_whole_split_or_pipelined() {
        let recorder = DebuggingRecorder::new();
        let parkings = Parkings::of(&recorder);
        let _counted = metrics::set_default_local_recorder(&recorder);
        let (addr, stop, server) = echo_server(Duration::from_secs(30), None).await;
        let mut client = Client::connect(addr).await;
        let parked = count(&parkings);
        client.send(request("one").as_bytes()).await;
        assert_eq!(client.answer().await, "one");
        let parked = parked_after(&parkings, parked).await;

        client.send(request("two").as_bytes()).await;
        assert_eq!(client.answer().await, "two");
        let parked = parked_after(&parkings, parked).await;

        // A head that stops half-way across the parking delay, then the rest.
        let three = request("three");
        client.send(&three.as_bytes()[..20]).await;
        tokio::time::sleep(PARK_AFTER * 4).await;
        client.send(&three.as_bytes()[20..]).await;
        assert_eq!(client.answer().await, "three");
        parked_after(&parkings, parked).await;

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
        let recorder = DebuggingRecorder::new();
        let parkings = Parkings::of(&recorder);
        let _counted = metrics::set_default_local_recorder(&recorder);
        let (addr, stop, server) = echo_server(Duration::MAX, None).await;
        let mut client = Client::connect(addr).await;
        let parked = count(&parkings);
        client.send(request("one").as_bytes()).await;
        assert_eq!(client.answer().await, "one");
        parked_after(&parkings, parked).await;
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
        let recorder = DebuggingRecorder::new();
        let parkings = Parkings::of(&recorder);
        let _counted = metrics::set_default_local_recorder(&recorder);
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
        let mut parked = count(&parkings);
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
            parked = parked_after(&parkings, parked).await;
        }
        assert!(!connection.is_finished(), "one connection served both");
        stop.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_parked_connection_closes_at_its_idle_timeout_or_when_the_server_stops() {
        let recorder = DebuggingRecorder::new();
        let parkings = Parkings::of(&recorder);
        let _counted = metrics::set_default_local_recorder(&recorder);
        let (addr, stop, server) = echo_server(Duration::from_millis(400), None).await;
        let before = count(&parkings);
        // Parked after its answer, then closed once idle for the timeout: parking does not
        // restart it.
        let mut idle = Client::connect(addr).await;
        idle.send(request("one").as_bytes()).await;
        assert_eq!(idle.answer().await, "one");
        assert!(idle.closed().await.is_empty());
        assert!(count(&parkings) > before);

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
        let before = count(&parkings);
        parked.send(request("two").as_bytes()).await;
        assert_eq!(parked.answer().await, "two");
        parked_after(&parkings, before).await;
        stop.send(true).unwrap();
        assert!(parked.closed().await.is_empty());
        server.await.unwrap().unwrap();
    }
}
