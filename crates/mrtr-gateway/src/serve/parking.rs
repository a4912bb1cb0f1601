//! HTTP/1.1 connections served by hyper and parked while idle ([`serve_http1`]), on a timer
//! whose deadlines are rounded so that idle connections' timers fire together
//! ([`CoarseTimer`]).

use std::error::Error as _;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::rt::Timer as _;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tower_mrtr::BoxError;
use tower_service::Service;

use super::protocol::{Prefix, Prefixed, ReadReady, serve_until_told};

/// hyper's HTTP/1.1 server as parking uses it.
pub(super) struct Http1 {
    pub(super) builder: http1::Builder,
    /// Its header read timeout: [`ClientLimits::park_after`](super::ClientLimits::park_after),
    /// or the idle timeout if shorter.
    pub(super) header_timer: Duration,
    /// [`ClientLimits::idle_timeout`](super::ClientLimits::idle_timeout).
    pub(super) idle: Duration,
}

/// Serves an HTTP/1.1 connection whose first bytes are `prefix`, parking it whenever it has been
/// idle for [`ClientLimits::park_after`](super::ClientLimits::park_after): hyper's connection (its 8 KiB read and write buffers,
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
pub(super) async fn serve_http1<I, S, B>(
    server: &Http1,
    mut service: TowerToHyperService<S>,
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
    let mut due = deadline(Instant::now(), server.idle);
    loop {
        let timer = server
            .header_timer
            .min(due.saturating_duration_since(Instant::now()));
        let io_in = TokioIo::new(Prefixed::new(prefix, io));
        let mut connection = if timer == server.header_timer {
            server.builder.serve_connection(io_in, service)
        } else {
            let mut http1 = server.builder.clone();
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
            due = deadline(fired.checked_sub(timer).unwrap_or(fired), server.idle);
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
        crate::observe::metrics::parked();
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

/// The grain of HTTP/1.1 connections' timers ([`CoarseTimer`]).
const TIMER_GRAIN: Duration = Duration::from_millis(100);

/// tokio's timer for hyper's HTTP/1.1 connections, with every deadline rounded up to a multiple
/// of [`TIMER_GRAIN`]: the header read timers that park idle connections (`serve_http1`) then
/// fire together, a hundred to a wake-up at 1,000 requests a second, instead of one wake-up
/// each (which cost more than the parking itself). The idle timeout may run over by the grain.
#[derive(Clone, Copy, Debug)]
pub(super) struct CoarseTimer {
    base: std::time::Instant,
}

impl CoarseTimer {
    pub(super) fn new() -> Self {
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
