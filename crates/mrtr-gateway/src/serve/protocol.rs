//! One client connection, from its first byte to its end: the protocol it speaks is read within
//! the idle timeout ([`detect`]), and it is served until it ends, until the gateway tells it to
//! close, or (HTTP/2) once it has had no open request for the idle timeout.
//!
//! hyper-util reads the HTTP/2 preface itself, with no time limit: a client that sent `P` and
//! nothing more held its connection, and its place under `--max-connections`, for good. Reading
//! the preface here bounds that, and it tells which of hyper's two servers to hand the
//! connection to, with the bytes read so far put back in front ([`Prefixed`]). HTTP/1.1 idles
//! are hyper's header read timeout; HTTP/2 has none, so its open requests are counted
//! ([`Activity`]) and an idle connection is shut down gracefully (`GOAWAY`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower_service::Service;

/// What every HTTP/2 connection starts with (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The protocol a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http1,
    Http2,
}

/// Reads the start of `io` until it is HTTP/2's preface or cannot be: the protocol and the bytes
/// read. `None` when the connection ends before its first byte.
pub(crate) async fn detect<I: AsyncRead + Unpin>(io: &mut I) -> io::Result<Option<(Protocol, Prefix)>> {
    let mut bytes = [0; PREFIX_LEN];
    let mut end = 0;
    while end < H2_PREFACE.len() {
        let n = io.read(&mut bytes[end..]).await?;
        if n == 0 {
            // Ended inside what could have been the preface: hyper's HTTP/1 server answers or
            // closes what little came.
            return Ok((end > 0).then(|| (Protocol::Http1, Prefix::inline(bytes, end))));
        }
        end += n;
        if bytes[..end] != H2_PREFACE[..end] {
            return Ok(Some((Protocol::Http1, Prefix::inline(bytes, end))));
        }
    }
    Ok(Some((Protocol::Http2, Prefix::inline(bytes, end))))
}

/// A client connection whose next bytes can be waited for without reading them: a parked
/// HTTP/1.1 connection (one whose hyper connection was dropped while it was idle) is handed to a
/// new hyper connection only when its next request arrives, and hyper reads all of it at once.
pub(crate) trait ReadReady {
    /// Ready when a read would not block (data, the end, or an error).
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl ReadReady for TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }
}

impl<I: ReadReady> ReadReady for tokio_rustls::server::TlsStream<I> {
    // A connection is parked once hyper's read found nothing: the TLS layer had no plaintext
    // left, so the next bytes come from the socket.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_ref().0.poll_read_ready(cx)
    }
}

/// Most bytes read in place before hyper takes a connection on: HTTP/2's preface.
const PREFIX_LEN: usize = H2_PREFACE.len();

/// Bytes read from a connection that hyper must read first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Prefix {
    /// Read by [`detect`]: kept in place, no allocation.
    Inline {
        /// What is left is `bytes[start..end]`.
        bytes: [u8; PREFIX_LEN],
        start: u8,
        end: u8,
    },
    /// The part of a request head a hyper connection had read when it was dropped.
    Carried(Bytes),
}

impl Prefix {
    fn inline(bytes: [u8; PREFIX_LEN], end: usize) -> Self {
        let end = u8::try_from(end).expect("at most PREFIX_LEN");
        Self::Inline { bytes, start: 0, end }
    }

    /// What is left to read back.
    pub(crate) fn rest(&self) -> &[u8] {
        match self {
            Self::Inline { bytes, start, end } => &bytes[usize::from(*start)..usize::from(*end)],
            Self::Carried(bytes) => bytes,
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Self::Inline { start, .. } => *start += u8::try_from(n).expect("at most PREFIX_LEN"),
            Self::Carried(bytes) => bytes.advance(n),
        }
    }
}

pin_project! {
    /// `io` with a [`Prefix`] read back first.
    #[derive(Debug)]
    pub(crate) struct Prefixed<I> {
        // `None` once read back.
        prefix: Option<Prefix>,
        // An error of `io` met while the prefix was read back, kept for the next read.
        error: Option<io::Error>,
        // Whether anything was written: an answer went out.
        wrote: bool,
        #[pin]
        io: I,
    }
}

impl<I> Prefixed<I> {
    pub(crate) fn new(prefix: Option<Prefix>, io: I) -> Self {
        Self {
            prefix,
            error: None,
            wrote: false,
            io,
        }
    }

    /// `io`, and whether anything was written to it through this wrapper.
    pub(crate) fn into_inner(self) -> (I, bool) {
        (self.io, self.wrote)
    }
}

impl<I: AsyncRead> AsyncRead for Prefixed<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        // Every read after the first: one comparison (hyper reads at every wake-up).
        if this.prefix.is_none() {
            return this.io.poll_read(cx, buf);
        }
        if let Some(error) = this.error.take() {
            *this.prefix = None;
            return Poll::Ready(Err(error));
        }
        let Some(prefix) = this.prefix.as_mut() else {
            unreachable!("checked above")
        };
        let rest = prefix.rest();
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        prefix.advance(n);
        if !prefix.rest().is_empty() {
            return Poll::Ready(Ok(()));
        }
        // What has already arrived behind the prefix goes in the same read: hyper sizes its read
        // buffer by its reads, and a request head read in two parts doubles it to 16 KiB.
        if buf.remaining() > 0
            && let Poll::Ready(Err(error)) = this.io.poll_read(cx, buf)
        {
            // The prefix is read: the error is the next read's.
            *this.error = Some(error);
            return Poll::Ready(Ok(()));
        }
        *this.prefix = None;
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite> AsyncWrite for Prefixed<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.project();
        *this.wrote = true;
        this.io.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        *this.wrote = true;
        this.io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}

/// An HTTP/2 connection's requests: how many are open (until their answer's body ends) and
/// when the last one ended.
#[derive(Debug)]
pub(crate) struct Activity {
    open: AtomicUsize,
    since: Instant,
    /// Milliseconds from `since` to the end of the last request.
    last_end_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            since: Instant::now(),
            last_end_ms: AtomicU64::new(0),
        })
    }

    /// When the connection becomes idle for `idle` if nothing more happens; `None` while a
    /// request is open.
    fn idle_at(&self, idle: Duration) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_end_ms.load(Ordering::Acquire));
        Some(self.since + last + idle)
    }

    fn start(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        Open(self.clone())
    }
}

/// One open request of an [`Activity`]; it ends when dropped.
#[derive(Debug)]
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_end_ms.fetch_max(ms, Ordering::AcqRel);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts the requests of `S` in an [`Activity`], each until its answer's body ends.
#[derive(Clone, Debug)]
pub(crate) struct Tracked<S> {
    pub(crate) inner: S,
    pub(crate) activity: Arc<Activity>,
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for Tracked<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        TrackedFuture {
            open: Some(self.activity.start()),
            inner: self.inner.call(request),
        }
    }
}

pin_project! {
    /// Response future of [`Tracked`].
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        open: Option<Open>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.inner.poll(cx));
        let open = this.open.take();
        Poll::Ready(output.map(|response| response.map(|inner| TrackedBody { inner, _open: open })))
    }
}

pin_project! {
    /// An answer body that keeps its request open until it ends or is dropped.
    pub(crate) struct TrackedBody<B> {
        #[pin]
        inner: B,
        _open: Option<Open>,
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Drives an HTTP/1.1 `connection` to its end, shut down gracefully with `shutdown` when
/// `close` turns true: [`serve_until_closed`] without its idle timer, which HTTP/1.1 does not
/// need (hyper's header read timeout closes idle connections), and which would take room in
/// every connection's task.
pub(crate) async fn serve_until_told<C, E>(
    mut connection: Pin<&mut C>,
    shutdown: impl FnOnce(Pin<&mut C>),
    close: Option<&mut watch::Receiver<bool>>,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    if let Some(close) = close {
        tokio::select! {
            // The connection first, and without `select!`'s random start: it is what is ready
            // almost every time this task wakes.
            biased;
            served = connection.as_mut() => return served,
            _ = close.wait_for(|closing| *closing) => shutdown(connection.as_mut()),
        }
    }
    connection.await
}

/// Drives `connection` to its end. When `close` turns true (a drain or a stop), or once
/// `idle` says the connection has had no open request for its timeout, it is shut down
/// gracefully with `shutdown` (the answers in flight finish; nothing new is accepted). An idle
/// connection's client then gets one more timeout to go: HTTP/2's graceful shutdown waits for
/// the client to acknowledge a ping, which a client that only holds a socket never does.
pub(crate) async fn serve_until_closed<C, E>(
    mut connection: Pin<&mut C>,
    shutdown: impl Fn(Pin<&mut C>),
    mut close: Option<watch::Receiver<bool>>,
    idle: Option<(Arc<Activity>, Duration)>,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    let mut shut = false;
    let mut gone_by: Option<Instant> = None;
    loop {
        let closing = async {
            match &mut close {
                Some(close) => {
                    let _ = close.wait_for(|closing| *closing).await;
                }
                None => std::future::pending().await,
            }
        };
        let idled = async {
            let Some((activity, timeout)) = &idle else {
                return std::future::pending().await;
            };
            loop {
                match activity.idle_at(*timeout) {
                    Some(at) if at <= Instant::now() => return,
                    Some(at) => tokio::time::sleep_until(at).await,
                    // A request is open: look again after a timeout (its end moves `at` on).
                    None => tokio::time::sleep(*timeout).await,
                }
            }
        };
        let dropped = async {
            match gone_by {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // In this order, and without the random start `select!` draws at every poll: the
            // connection is what is ready almost every time this task wakes.
            biased;
            served = connection.as_mut() => return served,
            () = dropped => {
                tracing::debug!("an idle connection did not close after its shutdown; dropped");
                return Ok(());
            }
            () = closing, if !shut => {}
            () = idled, if !shut => {
                tracing::debug!("an HTTP/2 connection was idle; closing it");
                gone_by = idle.as_ref().map(|(_, timeout)| Instant::now() + *timeout);
            }
        }
        shutdown(connection.as_mut());
        shut = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn detected(chunks: &[&[u8]]) -> Option<(Protocol, Vec<u8>)> {
        let mut builder = tokio_test::io::Builder::new();
        for chunk in chunks {
            builder.read(chunk);
        }
        detect(&mut builder.build())
            .await
            .unwrap()
            .map(|(protocol, prefix)| (protocol, prefix.rest().to_vec()))
    }

    #[tokio::test]
    async fn the_preface_is_read_to_its_end_or_its_first_difference() {
        assert_eq!(
            detected(&[b"PRI * HTTP/2.0\r\n", b"\r\nSM\r\n\r\n"]).await,
            Some((Protocol::Http2, H2_PREFACE.to_vec()))
        );
        assert_eq!(
            detected(&[b"POST /mcp HTTP/1.1\r\n"]).await,
            Some((Protocol::Http1, b"POST /mcp HTTP/1.1\r\n".to_vec()))
        );
        assert_eq!(
            detected(&[b"P", b"R", b"X"]).await.map(|(p, b)| (p, b.len())),
            Some((Protocol::Http1, 3))
        );
        assert_eq!(detected(&[b"PR"]).await, Some((Protocol::Http1, b"PR".to_vec())));
        assert_eq!(detected(&[]).await, None);
    }

    #[tokio::test]
    async fn the_prefix_is_read_back_first_with_what_follows_it() {
        let mut client = tokio_test::io::Builder::new()
            .read(b"GET ")
            .read(b"/ HTTP/1.1\r\n")
            .read(b"host: x\r\n")
            .build();
        let (_, prefix) = detect(&mut client).await.unwrap().unwrap();
        let mut io = Prefixed::new(Some(prefix), client);
        // The first read gives the prefix and what had arrived after it, in one.
        let mut first = [0u8; 64];
        let n = io.read(&mut first).await.unwrap();
        assert_eq!(&first[..n], b"GET / HTTP/1.1\r\n");
        let mut rest = String::new();
        io.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "host: x\r\n");
    }

    #[tokio::test]
    async fn an_error_behind_the_prefix_comes_with_the_next_read() {
        let mut client = tokio_test::io::Builder::new()
            .read(b"GET ")
            .read_error(io::Error::new(io::ErrorKind::ConnectionReset, "reset"))
            .build();
        let (_, prefix) = detect(&mut client).await.unwrap().unwrap();
        let mut io = Prefixed::new(Some(prefix), client);
        let mut buf = [0u8; 64];
        assert_eq!(io.read(&mut buf).await.unwrap(), 4);
        let error = io.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_shut_down_and_an_open_request_holds_it() {
        let activity = Activity::new();
        let shut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A "connection" that ends once shut down.
        struct Connection(Arc<std::sync::atomic::AtomicBool>);
        impl Future for Connection {
            type Output = Result<(), ()>;
            fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
                if self.0.load(Ordering::SeqCst) {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                }
            }
        }
        let open = activity.start();
        let served = tokio::spawn({
            let (shut, activity) = (shut.clone(), activity.clone());
            async move {
                serve_until_closed(
                    std::pin::pin!(Connection(shut.clone())),
                    move |_| shut.store(true, Ordering::SeqCst),
                    None,
                    Some((activity, Duration::from_secs(30))),
                )
                .await
            }
        });
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert!(!shut.load(Ordering::SeqCst), "a request is open");
        drop(open);
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(!shut.load(Ordering::SeqCst), "idle for less than the timeout");
        tokio::time::sleep(Duration::from_secs(32)).await;
        assert!(shut.load(Ordering::SeqCst), "idle for the timeout");
        served.await.unwrap().unwrap();
    }
}
