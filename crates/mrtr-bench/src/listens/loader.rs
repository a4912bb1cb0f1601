//! The loader side of `scale-bench --listens` (`--loader-listens`): opens its share of the
//! listens over HTTP/2 connections, checks every message of every stream, and times each
//! broadcast's arrival (see [`super`]).

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Command, MAX_STREAMS, Reply, meta, post};
use crate::backend::{self, META_SENT, META_SEQ, META_TRIGGERED, SUBSCRIPTION_ID};
use crate::load::Target;
use crate::scale;

/// How long a loader waits for one TCP connection and its HTTP/2 handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a loader waits for all its listens to be acknowledged.
const OPEN_TIMEOUT: Duration = Duration::from_secs(180);

/// Most bytes of a listen stream held without a complete event.
const MAX_EVENT: usize = 64 * 1024;

/// What a loader's listens found so far, shared by their tasks.
#[derive(Default)]
struct Tally {
    acknowledged: usize,
    /// Acknowledged listens whose stream ended or broke.
    ended: usize,
    failures: u64,
    samples: Vec<String>,
    /// Per broadcast number: (delivery µs, hop µs) of each listen that received it.
    got: HashMap<u64, Vec<(u32, u32)>>,
    /// Close was asked: streams that end now end on purpose.
    closing: bool,
}

impl Tally {
    fn fail(&mut self, reason: String) {
        self.failures += 1;
        if self.samples.len() < 3 {
            self.samples.push(reason);
        }
    }
}

type Shared = Arc<Mutex<Tally>>;

fn lock(tally: &Shared) -> MutexGuard<'_, Tally> {
    tally.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `subscriptions/listen` of id `id`, for `toolsListChanged`.
fn listen_request(uri: &Uri, host: &str, id: u64) -> Result<Request<Full<Bytes>>, String> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "subscriptions/listen",
        "params": { "notifications": { "toolsListChanged": true }, "_meta": meta() },
    });
    post(uri, host, "subscriptions/listen", None, body)
}

/// A loader of listens: opens `count` listens to `target` over connections of at most `streams`
/// each, at most `ramp` unacknowledged at once, and obeys [`Command`]s read from stdin until it
/// ends. Run by `scale-bench --loader URL --loader-listens`.
pub async fn loader(
    target: Target,
    count: usize,
    streams: usize,
    ramp: usize,
    index: usize,
) -> io::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let tally = Shared::default();
    let mut tasks = tokio::task::JoinSet::new();
    let mut connections = 0;
    while let Some(line) = rx.recv().await {
        let command: Command = serde_json::from_str(&line).map_err(io::Error::other)?;
        let mut reply = Reply::default();
        match command {
            Command::Open => {
                let plan = Opening {
                    target: &target,
                    count,
                    streams: streams.clamp(1, MAX_STREAMS),
                    ramp: ramp.max(1),
                    index,
                };
                connections = plan.open(&tally, &mut tasks).await;
            }
            Command::Collect { seq, wait_ms } => {
                reply = collect(&tally, seq, Duration::from_millis(wait_ms)).await;
            }
            Command::Close => {
                lock(&tally).closing = true;
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                connections = 0;
            }
        }
        {
            let tally = lock(&tally);
            reply.connections = connections;
            reply.acknowledged = tally.acknowledged;
            reply.open = tally.acknowledged - tally.ended.min(tally.acknowledged);
            reply.failures = tally.failures;
            reply.samples.clone_from(&tally.samples);
        }
        let mut out = io::stdout().lock();
        serde_json::to_writer(&mut out, &reply).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    Ok(())
}

/// One loader's share of the listens.
struct Opening<'a> {
    target: &'a Target,
    count: usize,
    streams: usize,
    ramp: usize,
    index: usize,
}

impl Opening<'_> {
    /// Opens the connections, then the listens, each a task of `tasks`; returns once every
    /// listen was acknowledged or refused (or [`OPEN_TIMEOUT`]), with the connections opened.
    async fn open(&self, tally: &Shared, tasks: &mut tokio::task::JoinSet<()>) -> usize {
        let host = self.target.addr.to_string();
        let uri: Uri = match format!("http://{host}{}", self.target.path).parse() {
            Ok(uri) => uri,
            Err(error) => {
                lock(tally).fail(format!("gateway URL: {error}"));
                return 0;
            }
        };
        let mut senders = Vec::new();
        for _ in 0..self.count.div_ceil(self.streams) {
            match connect(self.target.addr).await {
                Ok(sender) => senders.push(Some(sender)),
                Err(error) => {
                    lock(tally).fail(format!("connection: {error}"));
                    senders.push(None);
                }
            }
        }
        let opened = senders.iter().flatten().count();
        let ramp = Arc::new(Semaphore::new(self.ramp));
        for n in 0..self.count {
            let id = scale::first_id(self.index) + n as u64 + 1;
            let Some(sender) = senders[n / self.streams].clone() else {
                lock(tally).fail(format!("listen {id}: no connection"));
                continue;
            };
            let Ok(permit) = ramp.clone().acquire_owned().await else {
                break;
            };
            let listen = Listen {
                uri: uri.clone(),
                host: host.clone(),
                id,
                tally: tally.clone(),
            };
            tasks.spawn(listen.run(sender, permit));
        }
        // Every permit back: every listen acknowledged or refused.
        let all = u32::try_from(self.ramp).unwrap_or(u32::MAX);
        if tokio::time::timeout(OPEN_TIMEOUT, ramp.acquire_many(all))
            .await
            .is_err()
        {
            lock(tally).fail(format!(
                "not every listen was acknowledged within {} s",
                OPEN_TIMEOUT.as_secs()
            ));
        }
        opened
    }
}

/// An HTTP/2 connection with prior knowledge (cleartext, no upgrade), as the gateway serves it.
async fn connect(addr: SocketAddr) -> io::Result<http2::SendRequest<Full<Bytes>>> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::other("connect timed out"))??;
    tcp.set_nodelay(true)?;
    let handshake = http2::Builder::new(TokioExecutor::new()).handshake(TokioIo::new(tcp));
    let (sender, connection) = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| io::Error::other("HTTP/2 handshake timed out"))?
        .map_err(io::Error::other)?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One listen of a loader.
struct Listen {
    uri: Uri,
    host: String,
    id: u64,
    tally: Shared,
}

impl Listen {
    /// Opens the listen and reads its stream until it ends or the task is aborted; a failure is
    /// counted, and a stream that ends after its acknowledgement too.
    async fn run(self, sender: http2::SendRequest<Full<Bytes>>, permit: OwnedSemaphorePermit) {
        let mut acknowledged = false;
        let outcome = self.stream(sender, permit, &mut acknowledged).await;
        let mut tally = lock(&self.tally);
        if acknowledged {
            tally.ended += 1;
        }
        if !tally.closing {
            let reason = outcome.err().unwrap_or_else(|| "the stream ended".to_owned());
            tally.fail(format!("listen {}: {reason}", self.id));
        }
    }

    async fn stream(
        &self,
        mut sender: http2::SendRequest<Full<Bytes>>,
        permit: OwnedSemaphorePermit,
        acknowledged: &mut bool,
    ) -> Result<(), String> {
        let request = listen_request(&self.uri, &self.host, self.id)?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        let sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let status = response.status();
        if status != StatusCode::OK || !sse {
            let body = response.into_body().collect().await.map(|b| b.to_bytes());
            let text = body.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            return Err(format!("HTTP {status}, not a stream: {:.200}", text));
        }
        let mut body = response.into_body();
        let mut events = Events::default();
        let mut permit = Some(permit);
        let mut last_seq = 0;
        loop {
            let frame = body.frame().await;
            let arrived = backend::now_us();
            match frame {
                None => return Ok(()),
                Some(Err(error)) => return Err(error.to_string()),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        events.push(&data)?;
                    }
                }
            }
            while let Some(message) = events.next_event() {
                if !*acknowledged {
                    check_ack(&message, self.id)?;
                    *acknowledged = true;
                    lock(&self.tally).acknowledged += 1;
                    // The ramp lets the next listen open.
                    drop(permit.take());
                    continue;
                }
                match check_notification(&message, self.id, last_seq) {
                    Ok(note) => {
                        last_seq = note.seq;
                        let since = |t: u64| u32::try_from(arrived.saturating_sub(t)).unwrap_or(u32::MAX);
                        let mut tally = lock(&self.tally);
                        let got = tally.got.entry(note.seq).or_default();
                        got.push((since(note.triggered_us), since(note.sent_us)));
                    }
                    Err(reason) => lock(&self.tally).fail(format!("listen {}: {reason}", self.id)),
                }
            }
        }
    }
}

/// SSE events as they come in frames: the `data` of each complete event (keep-alive comments
/// and events without data are skipped).
#[derive(Default)]
struct Events {
    held: Vec<u8>,
}

impl Events {
    fn push(&mut self, data: &[u8]) -> Result<(), String> {
        self.held.extend_from_slice(data);
        if self.held.len() > MAX_EVENT {
            return Err(format!("more than {MAX_EVENT} bytes without a complete event"));
        }
        Ok(())
    }

    fn next_event(&mut self) -> Option<Vec<u8>> {
        loop {
            let end = event_end(&self.held)?;
            let event: Vec<u8> = self.held.drain(..end).collect();
            let mut data = Vec::new();
            for line in event.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if let Some(value) = line.strip_prefix(b"data:") {
                    if !data.is_empty() {
                        data.push(b'\n');
                    }
                    data.extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
                }
            }
            if !data.is_empty() {
                return Some(data);
            }
        }
    }
}

/// Where the first event of `held` ends: after its blank line (LF or CRLF line ends).
fn event_end(held: &[u8]) -> Option<usize> {
    held.iter()
        .enumerate()
        .find_map(|(i, &b)| match (b, &held[i + 1..]) {
            (b'\n', [b'\n', ..]) => Some(i + 2),
            (b'\n', [b'\r', b'\n', ..]) => Some(i + 3),
            _ => None,
        })
}

/// Checks that `message` acknowledges listen `id` for `toolsListChanged`.
fn check_ack(message: &[u8], id: u64) -> Result<(), String> {
    let message: Value =
        serde_json::from_slice(message).map_err(|e| format!("an event that is not JSON: {e}"))?;
    if message["method"] != "notifications/subscriptions/acknowledged" {
        return Err(format!("first event not an acknowledgement: {message:.200}"));
    }
    if message["params"]["_meta"][SUBSCRIPTION_ID].as_u64() != Some(id) {
        return Err(format!("acknowledgement of another listen: {message:.200}"));
    }
    if message["params"]["notifications"]["toolsListChanged"] != true {
        return Err(format!("toolsListChanged not accepted: {message:.200}"));
    }
    Ok(())
}

/// A broadcast as one listen received it.
#[derive(Debug, PartialEq, Eq)]
struct Note {
    seq: u64,
    triggered_us: u64,
    sent_us: u64,
}

/// Checks that `message` is a broadcast for listen `id`, newer than `last_seq`.
fn check_notification(message: &[u8], id: u64, last_seq: u64) -> Result<Note, String> {
    let message: Value =
        serde_json::from_slice(message).map_err(|e| format!("an event that is not JSON: {e}"))?;
    if message["method"] != "notifications/tools/list_changed" {
        return Err(format!("not the notification listened for: {message:.200}"));
    }
    let meta = &message["params"]["_meta"];
    if meta[SUBSCRIPTION_ID].as_u64() != Some(id) {
        return Err(format!("a notification of another listen: {message:.200}"));
    }
    let field = |key: &str| {
        meta[key]
            .as_u64()
            .ok_or_else(|| format!("no {key}: {message:.200}"))
    };
    let note = Note {
        seq: field(META_SEQ)?,
        triggered_us: field(META_TRIGGERED)?,
        sent_us: field(META_SENT)?,
    };
    if note.seq <= last_seq {
        return Err(format!(
            "broadcast {} again or out of order (after {last_seq})",
            note.seq
        ));
    }
    Ok(note)
}

/// Waits until every open listen has received broadcast `seq`, or `wait` is over: the
/// listens that did and their latencies.
async fn collect(tally: &Shared, seq: u64, wait: Duration) -> Reply {
    let deadline = Instant::now() + wait;
    loop {
        {
            let mut tally = lock(tally);
            let open = tally.acknowledged - tally.ended.min(tally.acknowledged);
            let have = tally.got.get(&seq).map_or(0, Vec::len);
            if have >= open || Instant::now() >= deadline {
                let got = tally.got.remove(&seq).unwrap_or_default();
                return Reply {
                    received: got.len(),
                    delivery_us: got.iter().map(|g| g.0).collect(),
                    hop_us: got.iter().map(|g| g.1).collect(),
                    ..Reply::default()
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_across_frames_and_comments_skipped() {
        let mut events = Events::default();
        events
            .push(b": keep-alive\n\nevent: message\ndata: {\"a\":")
            .unwrap();
        assert_eq!(events.next_event(), None);
        events.push(b"1}\n\ndata: 2\r\n\r\n").unwrap();
        assert_eq!(events.next_event().as_deref(), Some(b"{\"a\":1}".as_slice()));
        assert_eq!(events.next_event().as_deref(), Some(b"2".as_slice()));
        assert_eq!(events.next_event(), None);
    }

    #[test]
    fn every_message_of_a_listen_is_checked() {
        let data = |frame: Vec<u8>| {
            let mut events = Events::default();
            events.push(&frame).unwrap();
            events.next_event().unwrap()
        };
        check_ack(&data(backend::listen_ack("9")), 9).unwrap();
        assert!(check_ack(&data(backend::listen_ack("8")), 9).is_err());
        let note = data(backend::list_changed("9", 2, 100, 150));
        assert_eq!(
            check_notification(&note, 9, 1),
            Ok(Note {
                seq: 2,
                triggered_us: 100,
                sent_us: 150
            })
        );
        assert!(check_notification(&note, 9, 2).is_err(), "a broadcast twice");
        assert!(check_notification(&note, 8, 1).is_err(), "another listen's");
        assert!(check_notification(&data(backend::listen_ack("9")), 9, 0).is_err());
    }
}
