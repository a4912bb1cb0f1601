use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Wake, Waker};

use super::*;

/// A socket that keeps each write apart, and can be made to block or fail.
#[derive(Clone, Default)]
struct Socket {
    writes: Arc<Mutex<Vec<Vec<u8>>>>,
    flushes: Arc<AtomicUsize>,
    blocked: Arc<AtomicBool>,
    broken: Arc<AtomicBool>,
    shut: Arc<AtomicBool>,
}

impl Socket {
    fn writes(&self) -> Vec<Vec<u8>> {
        self.writes.lock().unwrap().clone()
    }
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.broken.load(Ordering::Relaxed) {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if self.blocked.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        self.writes.lock().unwrap().push(buf.to_vec());
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shut.store(true, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

/// A connection that, at each poll, writes its next round's chunks (each as h2 does: a write,
/// then a flush; a chunk not taken is tried again at the next poll) and waits; with no round
/// left it shuts the socket down and ends.
struct Script {
    io: GatheringIo<Socket>,
    rounds: VecDeque<VecDeque<Vec<u8>>>,
    /// What the last read gave (`None` before any).
    read: Option<io::Result<()>>,
    /// Ends without shutting the socket down.
    abrupt: bool,
}

impl Future for Script {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let mut buf = [0; 8];
        if let Poll::Ready(read) = Pin::new(&mut this.io).poll_read(cx, &mut ReadBuf::new(&mut buf)) {
            this.read = Some(read);
        }
        let Some(round) = this.rounds.front_mut() else {
            if this.abrupt {
                return Poll::Ready(Ok(()));
            }
            return Pin::new(&mut this.io).poll_shutdown(cx);
        };
        while let Some(chunk) = round.front() {
            let n = ready!(Pin::new(&mut this.io).poll_write(cx, chunk))?;
            assert_eq!(n, chunk.len());
            ready!(Pin::new(&mut this.io).poll_flush(cx))?;
            round.pop_front();
        }
        this.rounds.pop_front();
        Poll::Pending
    }
}

/// Counts its wake-ups.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn gathered(socket: &Socket, rounds: Vec<Vec<&[u8]>>) -> Pin<Box<Gathered<Script, Socket>>> {
    let rounds = rounds
        .into_iter()
        .map(|round| round.into_iter().map(<[u8]>::to_vec).collect())
        .collect();
    Box::pin(Gathered::around(socket.clone(), |io| Script {
        io,
        rounds,
        read: None,
        abrupt: false,
    }))
}

/// Polls once; whether the task woke itself.
fn poll(connection: &mut Pin<Box<Gathered<Script, Socket>>>) -> (Poll<io::Result<()>>, bool) {
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let polled = connection.as_mut().poll(&mut Context::from_waker(&waker));
    (polled, wakes.0.load(Ordering::Relaxed) > 0)
}

#[test]
fn what_a_poll_writes_goes_out_in_one_write_after_the_task_yields() {
    let socket = Socket::default();
    let mut connection = gathered(&socket, vec![vec![b"head", b"er"], vec![b"data"], vec![]]);
    // The first round is held, and the task wakes itself to let others run.
    let (polled, woke) = poll(&mut connection);
    assert!(polled.is_pending() && woke);
    assert!(socket.writes().is_empty());
    // The next poll's frames join them: one write, then the socket's flush.
    let (polled, woke) = poll(&mut connection);
    assert!(polled.is_pending() && !woke);
    assert_eq!(socket.writes(), vec![b"headerdata".to_vec()]);
    assert_eq!(socket.flushes.load(Ordering::Relaxed), 1);
    // A poll that writes nothing neither writes nor wakes.
    let (polled, woke) = poll(&mut connection);
    assert!(polled.is_pending() && !woke);
    assert_eq!(socket.writes().len(), 1);
    // The end shuts the socket down.
    assert!(matches!(poll(&mut connection).0, Poll::Ready(Ok(()))));
    assert!(socket.shut.load(Ordering::Relaxed));
}

#[test]
fn what_is_held_is_written_before_the_socket_shuts() {
    let socket = Socket::default();
    // One round, then the end within the same task's next poll.
    let mut connection = gathered(&socket, vec![vec![b"goaway"]]);
    assert!(poll(&mut connection).0.is_pending());
    assert!(socket.writes().is_empty());
    assert!(matches!(poll(&mut connection).0, Poll::Ready(Ok(()))));
    assert_eq!(socket.writes(), vec![b"goaway".to_vec()]);
    assert!(socket.shut.load(Ordering::Relaxed));
}

#[test]
fn a_connection_that_ends_without_a_shutdown_still_writes_what_was_held() {
    let socket = Socket::default();
    let mut connection = gathered(&socket, vec![vec![b"last"]]);
    connection.as_mut().connection().get_mut().abrupt = true;
    assert!(poll(&mut connection).0.is_pending());
    assert!(matches!(poll(&mut connection).0, Poll::Ready(Ok(()))));
    assert_eq!(socket.writes(), vec![b"last".to_vec()]);
    assert!(!socket.shut.load(Ordering::Relaxed));
}

#[test]
fn past_the_bound_what_is_held_goes_first_and_a_blocked_socket_holds_the_writer_back() {
    let socket = Socket::default();
    let most = vec![b'a'; HELD_MAX - 4];
    let mut connection = gathered(&socket, vec![vec![&most, b"12345678"]]);
    // The second chunk would pass the bound: the first is written before it is held.
    assert!(poll(&mut connection).0.is_pending());
    assert_eq!(socket.writes(), vec![most.clone()]);
    // With the socket blocked, a write past the bound waits (h2 keeps its frame).
    let blocked = Socket::default();
    blocked.blocked.store(true, Ordering::Relaxed);
    let mut connection = gathered(&blocked, vec![vec![&most, b"12345678"]]);
    assert!(poll(&mut connection).0.is_pending());
    let (polled, woke) = poll(&mut connection);
    assert!(polled.is_pending() && !woke, "waits for the socket, no busy loop");
    assert!(blocked.writes().is_empty());
    // Once the socket takes bytes again, the held ones go first, the waiting chunk after.
    blocked.blocked.store(false, Ordering::Relaxed);
    assert!(poll(&mut connection).0.is_pending());
    assert_eq!(blocked.writes(), vec![most, b"12345678".to_vec()]);
}

#[test]
fn a_chunk_larger_than_the_bound_goes_straight_to_the_socket() {
    let socket = Socket::default();
    let large = vec![b'x'; HELD_MAX + 1];
    let mut connection = gathered(&socket, vec![vec![b"small", &large]]);
    assert!(poll(&mut connection).0.is_pending());
    assert_eq!(socket.writes(), vec![b"small".to_vec(), large]);
}

#[test]
fn a_socket_error_while_held_bytes_are_written_reaches_the_connections_next_read() {
    let socket = Socket::default();
    let mut connection = gathered(&socket, vec![vec![b"frame"], vec![], vec![]]);
    assert!(poll(&mut connection).0.is_pending());
    socket.broken.store(true, Ordering::Relaxed);
    // The write fails: the task wakes itself so that the connection reads the error.
    let (polled, woke) = poll(&mut connection);
    assert!(polled.is_pending() && woke);
    assert!(poll(&mut connection).0.is_pending());
    let read = connection.as_mut().connection().get_mut().read.take();
    assert_eq!(
        read.map(|read| read.unwrap_err().kind()),
        Some(io::ErrorKind::BrokenPipe)
    );
}
