//! An HTTP/2 connection's writes gathered: what its streams send while the connection's task
//! runs is held ([`GatheringIo`]), and written in one go once that task has let the other ready
//! tasks run ([`Gathered`]).
//!
//! hyper runs each HTTP/2 answer's body in a task of its own. A stream's frame wakes the
//! connection's task, which tokio runs right after (its LIFO slot), and h2 writes at the end of
//! every poll, and before each data frame over 256 bytes: a notification fanned out to thousands
//! of listens was one `writev` per stream, each a few microseconds of kernel time. Held until the
//! connection's task has yielded once, the frames of every stream that ran meanwhile go out
//! together: one write per connection and round.
//!
//! What this costs a lone request is one more poll of the connection's task before its answer is
//! written; HTTP/1.1 connections (one answer at a time) are not wrapped. At most [`HELD_MAX`]
//! bytes are held: beyond, a write waits for what is held to reach the socket, so the socket's
//! backpressure reaches h2 as before.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes a connection holds before it writes (h2 writes at most 16 KiB frames).
pub(crate) const HELD_MAX: usize = 64 * 1024;

/// What the held buffer keeps between rounds; a larger one is given back once written.
const KEPT_CAPACITY: usize = 4 * 1024;

/// The socket and what is held for it, shared by hyper's side ([`GatheringIo`]) and the
/// connection's future ([`Gathered`]); both are polled by the connection's one task, so the lock
/// is never contended.
struct Shared<I> {
    io: I,
    held: Vec<u8>,
    /// How much of `held` has been written (a partial write keeps the rest in place).
    written: usize,
    /// The socket's flush is still owed after `held` was written.
    flush_owed: bool,
    /// An error the socket gave while what was held was written: the connection's next read or
    /// write returns it, so hyper ends the connection as it would have.
    error: Option<io::Error>,
}

impl<I: AsyncWrite + Unpin> Shared<I> {
    fn holds(&self) -> bool {
        self.written < self.held.len() || self.flush_owed
    }

    /// Writes what is held, then flushes the socket. A vectored write of one slice: the
    /// `writev` hyper's writes were, which `/proc/PID/io` counts (it does not count `send`).
    fn write_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let rest = [io::IoSlice::new(&self.held[self.written..])];
            let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
            self.flush_owed = true;
        }
        self.held.clear();
        self.written = 0;
        if self.held.capacity() > KEPT_CAPACITY {
            self.held = Vec::new();
        }
        if self.flush_owed {
            ready!(Pin::new(&mut self.io).poll_flush(cx))?;
            self.flush_owed = false;
        }
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes: what is held is written first when they would not fit.
    /// `false`: they are more than is ever held, and go straight to the socket.
    fn room_for(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if let Some(error) = self.error.take() {
            return Poll::Ready(Err(error));
        }
        if self.held.len() + len <= HELD_MAX {
            return Poll::Ready(Ok(true));
        }
        ready!(self.write_held(cx))?;
        Poll::Ready(Ok(len <= HELD_MAX))
    }
}

/// The socket as hyper's HTTP/2 server sees it: reads pass through; writes are held until the
/// connection's task has yielded once ([`Gathered`] writes them).
pub(crate) struct GatheringIo<I> {
    shared: Arc<Mutex<Shared<I>>>,
}

impl<I> GatheringIo<I> {
    fn new(io: I) -> Self {
        let shared = Shared {
            io,
            held: Vec::new(),
            written: 0,
            flush_owed: false,
            error: None,
        };
        Self {
            shared: Arc::new(Mutex::new(shared)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared<I>> {
        lock(&self.shared)
    }
}

/// The lock, even after a panic elsewhere held it: the state is bytes and offsets, consistent
/// at every step.
fn lock<I>(shared: &Mutex<Shared<I>>) -> MutexGuard<'_, Shared<I>> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for GatheringIo<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut shared = self.lock();
        if let Some(error) = shared.error.take() {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut shared.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for GatheringIo<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut shared = self.lock();
        if !ready!(shared.room_for(cx, buf.len()))? {
            return Pin::new(&mut shared.io).poll_write(cx, buf);
        }
        shared.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut shared = self.lock();
        let len = bufs.iter().map(|buf| buf.len()).sum();
        if !ready!(shared.room_for(cx, len))? {
            return Pin::new(&mut shared.io).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            shared.held.extend_from_slice(buf);
        }
        Poll::Ready(Ok(len))
    }

    // Vectored writes are copied into one buffer; saying so keeps h2 from copying each data
    // frame of up to 1 KiB into its own buffer first.
    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Ready at once while bytes are held: [`Gathered`] writes and flushes them after the
    /// connection's task has yielded.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = self.lock();
        if let Some(error) = shared.error.take() {
            return Poll::Ready(Err(error));
        }
        if shared.holds() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut shared.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = self.lock();
        ready!(shared.write_held(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}

pin_project! {
    /// An HTTP/2 connection's future whose writes are held by a [`GatheringIo`]: after a poll
    /// that left bytes held, the task wakes itself (tokio queues a task that does so behind the
    /// others ready), and the poll after writes them all.
    pub(crate) struct Gathered<C, I> {
        #[pin]
        connection: C,
        shared: Arc<Mutex<Shared<I>>>,
        // The task has yielded since bytes were first held.
        yielded: bool,
    }
}

impl<C, I> Gathered<C, I> {
    /// The connection `serve` makes of `io` (hyper's `serve_connection`), its writes gathered.
    pub(crate) fn around(io: I, serve: impl FnOnce(GatheringIo<I>) -> C) -> Self {
        let io = GatheringIo::new(io);
        let shared = Arc::clone(&io.shared);
        Self {
            connection: serve(io),
            shared,
            yielded: false,
        }
    }

    /// The connection itself (to shut it down gracefully).
    pub(crate) fn connection(self: Pin<&mut Self>) -> Pin<&mut C> {
        self.project().connection
    }
}

impl<C: Future, I: AsyncWrite + Unpin> Future for Gathered<C, I> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.project();
        let output = this.connection.poll(cx);
        let mut shared = lock(this.shared);
        if output.is_ready() {
            // h2 shuts the socket down as it ends, which writes what was held; should it end
            // otherwise, what is held gets one try, as the socket takes it now.
            if shared.holds() {
                let _ = shared.write_held(cx);
            }
        } else if shared.holds() {
            if !*this.yielded {
                *this.yielded = true;
                cx.waker().wake_by_ref();
            } else if let Poll::Ready(written) = shared.write_held(cx) {
                *this.yielded = false;
                if let Err(error) = written {
                    // The connection's next read returns it.
                    shared.error = Some(error);
                    cx.waker().wake_by_ref();
                }
            }
        }
        output
    }
}

#[cfg(test)]
mod tests;
