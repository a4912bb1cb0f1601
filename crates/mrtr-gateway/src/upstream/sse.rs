//! The gateway's one reader of `text/event-stream` answers, and its writers of them.
//! [`EventReader`] takes a stream's bytes as they arrive and gives each complete event's data.
//! Everything of the gateway that reads a stream reads it through this: the merges of list and
//! discovery answers ([`super::http::forward`]), the whole-event relay of backend answers
//! ([`super::http::body`]) and the legacy front's reading of the modern stack's answers
//! ([`crate::legacy::stream`]). (The MRTR layer has a framer of its own, inside the library,
//! which rewrites events in place.) The writers: [`message_event`], the stream headers, and
//! [`EventsBody`], a stream of events the gateway sends itself, with keep-alive comments.
//!
//! It reads as the SSE specification says: a line ends with LF, CRLF or a lone CR (a CR that is
//! the last byte so far waits for the next one, which may be its LF); an empty line ends an
//! event; an event's data is its `data` lines, each without the one space that may follow the
//! colon, joined with LF; comments and the other fields (`event`, `id`, `retry`) are skipped.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http_body::{Body, Frame};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::time::{Instant, Sleep};
use tower_mrtr::BoxError;

/// Appends one SSE `message` event carrying `json` to `out`, each line of it (a trailing `\r`
/// removed) as a `data:` line: how the gateway writes every event of its own.
pub(crate) fn write_message_event(json: &[u8], out: &mut BytesMut) {
    out.reserve(json.len() + 24);
    out.extend_from_slice(b"event: message\n");
    for line in json.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.extend_from_slice(b"\n");
    }
    out.extend_from_slice(b"\n");
}

/// An SSE comment that keeps proxies from closing an idle stream: what every stream the
/// gateway writes sends when it has nothing else to send.
pub(crate) const KEEP_ALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// One SSE `message` event carrying `json` ([`write_message_event`]).
pub(crate) fn message_event(json: &[u8]) -> Bytes {
    let mut out = BytesMut::new();
    write_message_event(json, &mut out);
    out.freeze()
}

/// Marks `headers` as those of an SSE answer the gateway writes: `text/event-stream`, not to be
/// cached, nor buffered by a proxy in front (nginx's `X-Accel-Buffering`).
pub(crate) fn set_stream_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// Whether an answer is an SSE stream: its `Content-Type` names `text/event-stream` (parameters
/// and case aside).
pub(crate) fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The parts of a JSON-RPC response the gateway reads: a response has `result` or `error`, a
/// notification neither.
#[derive(Deserialize)]
pub(crate) struct ResponseMessage<'a> {
    #[serde(borrow)]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

/// Whether `message` is a JSON-RPC response (not a notification or a request).
pub(crate) fn is_response(message: &[u8]) -> bool {
    serde_json::from_slice::<ResponseMessage<'_>>(message)
        .is_ok_and(|m| m.result.is_some() || m.error.is_some())
}

/// Reads an SSE stream incrementally; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    /// Bytes not yet read, from the start of an incomplete line.
    buffer: BytesMut,
    /// The data of the event being read.
    data: Vec<u8>,
    has_data: bool,
    /// Bytes of the stream read as lines so far.
    read: usize,
    /// Bytes of the stream up to the end of the last complete event.
    complete: usize,
}

impl EventReader {
    /// A reader at the start of a stream.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds the next bytes of the stream.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The data of the next complete event that has data; `None` until more bytes arrive.
    pub(crate) fn next_event(&mut self) -> Option<Bytes> {
        while let Some(line) = self.next_line(false) {
            if let Some(data) = self.line(&line) {
                return Some(data);
            }
        }
        None
    }

    /// At the end of the stream: the data of an event the stream ended inside (its last line
    /// unterminated, or no blank line after it), if it has data.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        while let Some(line) = self.next_line(true) {
            if let Some(data) = self.line(&line) {
                return Some(data);
            }
        }
        if !self.buffer.is_empty() {
            let line = self.buffer.split();
            self.read += line.len();
            self.field(&line);
        }
        self.dispatch()
    }

    /// How many bytes from the start of the stream hold complete events (up to the blank line
    /// that ended the last one read).
    pub(crate) fn complete_len(&self) -> usize {
        self.complete
    }

    /// Bytes held: an incomplete line and the data of an unfinished event.
    pub(crate) fn held(&self) -> usize {
        self.buffer.len() + self.data.len()
    }

    /// The next complete line, without its terminator; at the end of the stream a final CR
    /// counts as a terminator.
    fn next_line(&mut self, at_end: bool) -> Option<BytesMut> {
        let end = memchr::memchr2(b'\n', b'\r', &self.buffer)?;
        let cr = self.buffer[end] == b'\r';
        if cr && end + 1 == self.buffer.len() && !at_end {
            return None;
        }
        let terminator = if cr && self.buffer.get(end + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        let mut line = self.buffer.split_to(end + terminator);
        self.read += line.len();
        line.truncate(end);
        Some(line)
    }

    /// Takes one complete line; the event's data when the line ended an event that has data.
    fn line(&mut self, line: &[u8]) -> Option<Bytes> {
        if line.is_empty() {
            self.complete = self.read;
            return self.dispatch();
        }
        self.field(line);
        None
    }

    fn field(&mut self, line: &[u8]) {
        let Some(value) = line.strip_prefix(b"data") else {
            return; // a comment, `event`, `id` or `retry`
        };
        let value = match value {
            [] => value,
            [b':', rest @ ..] => rest.strip_prefix(b" ").unwrap_or(rest),
            _ => return, // another field whose name starts with "data"
        };
        if self.has_data {
            self.data.push(b'\n');
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
    }

    fn dispatch(&mut self) -> Option<Bytes> {
        let had = std::mem::take(&mut self.has_data);
        let data = std::mem::take(&mut self.data);
        (had && !data.is_empty()).then(|| Bytes::from(data))
    }
}

/// How many bytes of `stream` hold complete events.
pub(crate) fn complete_len(stream: &[u8]) -> usize {
    let mut reader = EventReader::new();
    reader.push(stream);
    while reader.next_event().is_some() {}
    reader.complete_len()
}

/// The data of the last event of a whole `stream` that holds a JSON-RPC response.
pub(crate) fn last_response(mut stream: impl Buf) -> Option<Bytes> {
    let mut reader = EventReader::new();
    while stream.has_remaining() {
        let chunk = stream.chunk();
        reader.push(chunk);
        let len = chunk.len();
        stream.advance(len);
    }
    let mut found = None;
    while let Some(data) = reader.next_event() {
        if is_response(&data) {
            found = Some(data);
        }
    }
    reader.finish().filter(|data| is_response(data)).or(found)
}

/// A stream of SSE events the gateway writes itself (a merged listen, a listen served from a
/// legacy session's notifications, a shared listen's client): the events sent on its channel,
/// until the channel closes. Dropping it (the client went away) closes the channel, which tells
/// the sender, and drops what it `holds`.
pub(crate) struct EventsBody<R = tokio::sync::mpsc::Receiver<Bytes>> {
    events: R,
    /// With [`keep_alive`](Self::keep_alive): when the next comment goes out if no event does.
    keep_alive: Option<Pin<Box<Sleep>>>,
    _holds: Box<dyn Send + Sync>,
}

/// The receiving end of an [`EventsBody`]'s channel: tokio's, where the sender waits for room;
/// futures', whose channel allocates nothing up front (thousands of shared listens' clients).
pub(crate) trait EventSource: Unpin {
    /// The next event; `None` once every sender is gone and every event taken.
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;
}

impl EventSource for tokio::sync::mpsc::Receiver<Bytes> {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.poll_recv(cx)
    }
}

impl EventSource for futures_channel::mpsc::Receiver<Bytes> {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        futures_util::StreamExt::poll_next_unpin(self, cx)
    }
}

impl<R: EventSource> EventsBody<R> {
    /// The stream of what `events` receives, holding `holds` until it is dropped.
    pub(crate) fn new(events: R, holds: Box<dyn Send + Sync>) -> Self {
        Self {
            events,
            keep_alive: None,
            _holds: holds,
        }
    }

    /// A keep-alive comment every [`KEEP_ALIVE`] without an event (for a stream whose source
    /// sends none of its own), so that proxies in front do not take it for dead.
    pub(crate) fn keep_alive(mut self) -> Self {
        self.keep_alive = Some(Box::pin(tokio::time::sleep(KEEP_ALIVE)));
        self
    }
}

impl<R: EventSource> Body for EventsBody<R> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(event) = this.events.poll_event(cx) {
            if let Some(timer) = &mut this.keep_alive {
                timer.as_mut().reset(Instant::now() + KEEP_ALIVE);
            }
            return Poll::Ready(event.map(|e| Ok(Frame::data(e))));
        }
        let Some(timer) = &mut this.keep_alive else {
            return Poll::Pending;
        };
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        timer.as_mut().reset(Instant::now() + KEEP_ALIVE);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE_COMMENT)))))
    }
}

/// How often a listen's stream the gateway serves (from a stdio backend, or a legacy session's
/// notifications) gets a keep-alive comment when no message came, so that proxies in front do
/// not take it for dead.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event's data, the stream given in chunks of `size` bytes.
    fn events(stream: &[u8], size: usize) -> Vec<Vec<u8>> {
        let mut reader = EventReader::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(size) {
            reader.push(chunk);
            while let Some(data) = reader.next_event() {
                out.push(data.to_vec());
            }
        }
        out.extend(reader.finish().map(|d| d.to_vec()));
        out
    }

    #[test]
    fn events_read_alike_however_the_stream_is_cut() {
        let stream = b": comment\n\nid: 7\nevent: message\ndata: a\ndata:b\n\ndata: c\r\n\r\ndata: d\r\rdata:  e\n\ndatax: no\ndata\n\ndata: last";
        let expected: Vec<Vec<u8>> = vec![
            b"a\nb".to_vec(),
            b"c".to_vec(),
            b"d".to_vec(),
            b" e".to_vec(),
            b"last".to_vec(),
        ];
        for size in 1..=stream.len() {
            assert_eq!(events(stream, size), expected, "chunks of {size}");
        }
    }

    #[test]
    fn complete_events_end_at_their_blank_line() {
        let partial =
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,";
        assert_eq!(complete_len(partial), 44);
        assert_eq!(complete_len(b"data: x"), 0);
        assert_eq!(complete_len(b"data: x\r\n\r\n: ka\n\n"), 11 + 6);
        // A final CR may still become a CRLF: the event it would end is not complete yet.
        assert_eq!(complete_len(b"data: x\r\n\r"), 0);
    }

    #[test]
    fn the_response_event_is_found_among_notifications() {
        let stream = b": keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
            event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{}}\r\n\r\n";
        let message = last_response(&stream[..]).unwrap();
        assert_eq!(&message[..], b"{\"jsonrpc\":\"2.0\",\"id\":1,\n\"result\":{}}");
        assert!(last_response(&b": only a comment\n\n"[..]).is_none());
        assert!(
            last_response(&b"data: {\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{}}"[..]).is_some(),
            "unterminated"
        );
    }

    #[test]
    fn media_types_are_compared_whole() {
        let headers = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, http::HeaderValue::from_static(value));
            headers
        };
        assert!(is_sse(&headers("text/event-stream")));
        assert!(is_sse(&headers("Text/Event-Stream; charset=utf-8")));
        assert!(!is_sse(&headers("text/event-streamx")));
        assert!(!is_sse(&headers("application/json")));
    }
}
