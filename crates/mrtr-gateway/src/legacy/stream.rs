//! Reading the modern stack's answer as a sequence of JSON-RPC messages, and writing the legacy
//! client's SSE stream.
//!
//! The modern answer is either one `application/json` message or a `text/event-stream` of them
//! (notifications, then the response). [`Messages`] yields them one by one as they arrive, each
//! bounded in size, so progress and log notifications can be relayed while a tool still runs.
//! [`CallBody`] is the legacy response body: SSE events from a channel, together with the future
//! that produces them, so dropping the body (the client went away) drops the call.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tower_mrtr::BoxError;

use crate::upstream::sse::EventReader;

/// Why the modern answer could not be read.
#[derive(Debug)]
pub(crate) enum StreamError {
    /// A message (or an SSE event) is larger than the limit.
    TooLarge,
    /// The body failed.
    Body(BoxError),
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge => f.write_str("message larger than the limit"),
            Self::Body(e) => write!(f, "reading the answer: {e}"),
        }
    }
}

/// The JSON-RPC messages of a modern answer, in order.
#[derive(Debug)]
pub(crate) struct Messages<B> {
    body: B,
    max: usize,
    /// `Some` for an SSE answer: its events are read by the gateway's one SSE reader.
    events: Option<EventReader>,
    /// A JSON answer's bytes.
    buffer: BytesMut,
    ended: bool,
}

impl<B> Messages<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// Messages of `body`, an SSE stream if `sse`, else one JSON message; each at most `max`
    /// bytes.
    pub(crate) fn new(sse: bool, body: B, max: usize) -> Self {
        Self {
            body,
            max,
            events: sse.then(EventReader::new),
            buffer: BytesMut::new(),
            ended: false,
        }
    }

    /// The next message; `None` at the end of the answer.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, StreamError> {
        loop {
            if let Some(message) = self.events.as_mut().and_then(EventReader::next_event) {
                return Ok(Some(message));
            }
            if self.ended {
                return Ok(self.finish());
            }
            match self.body.frame().await {
                None => self.ended = true,
                Some(Err(e)) => return Err(StreamError::Body(e.into())),
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    let held = match &mut self.events {
                        Some(events) => {
                            events.push(&data);
                            events.held()
                        }
                        None => {
                            self.buffer.extend_from_slice(&data);
                            self.buffer.len()
                        }
                    };
                    if held > self.max {
                        return Err(StreamError::TooLarge);
                    }
                }
            }
        }
    }

    fn finish(&mut self) -> Option<Bytes> {
        match &mut self.events {
            // An unterminated last line and event still count.
            Some(events) => events.finish(),
            None => {
                let body = std::mem::take(&mut self.buffer);
                (!body.is_empty()).then(|| body.freeze())
            }
        }
    }
}

/// One SSE `message` event carrying `json` (each line of it as a `data:` line).
pub(crate) fn sse_event(json: &[u8]) -> Bytes {
    crate::upstream::sse::message_event(json)
}

pub(crate) use crate::upstream::sse::KEEP_ALIVE_COMMENT as KEEP_ALIVE;

/// The future producing a call's events.
pub(crate) type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The body of a legacy call's SSE answer: the events its driver sends, as they come. The
/// driver runs only while the body is polled, and is dropped with it.
pub(crate) struct CallBody {
    events: mpsc::Receiver<Bytes>,
    driver: Option<Driver>,
}

impl fmt::Debug for CallBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallBody")
            .field("running", &self.driver.is_some())
            .finish()
    }
}

/// Where a call's driver sends its events.
pub(crate) type Events = mpsc::Sender<Bytes>;

impl CallBody {
    /// A body whose events come from the future `drive` builds around the sender it is given.
    pub(crate) fn new<F, Fut>(drive: F) -> Self
    where
        F: FnOnce(Events) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (sender, events) = mpsc::channel(16);
        Self {
            events,
            driver: Some(Box::pin(drive(sender))),
        }
    }
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(driver) = self.driver.as_mut()
            && driver.as_mut().poll(cx).is_ready()
        {
            self.driver = None; // its sender is gone: the channel ends once drained
        }
        match self.events.poll_recv(cx) {
            Poll::Ready(Some(event)) => Poll::Ready(Some(Ok(Frame::data(event)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{Full, StreamBody};

    use super::*;

    async fn all(chunks: Vec<&'static str>, max: usize) -> Result<Vec<String>, StreamError> {
        let frames = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Infallible>(Frame::data(Bytes::from(c)))),
        );
        let mut messages = Messages::new(true, StreamBody::new(frames), max);
        let mut out = Vec::new();
        while let Some(m) = messages.next().await? {
            out.push(String::from_utf8(m.to_vec()).unwrap());
        }
        Ok(out)
    }

    #[tokio::test]
    async fn events_split_anywhere_are_read_whole() {
        let stream = "data: a\r\n\r\nid: 7\ndata:b\ndata: c\n\n: comment\n\ndata: d\r\rdata: tail";
        let expected = ["a", "b\nc", "d", "tail"];
        for cut in 0..stream.len() {
            let (x, y) = stream.split_at(cut);
            assert_eq!(all(vec![x, y], 1024).await.unwrap(), expected, "cut at {cut}");
        }
        let single: Vec<&'static str> = stream.split_inclusive(|_| true).collect();
        assert_eq!(all(single, 1024).await.unwrap(), expected);
    }

    #[tokio::test]
    async fn oversized_events_and_bodies_fail() {
        assert!(matches!(
            all(vec!["data: 0123456789\n\n"], 8).await,
            Err(StreamError::TooLarge)
        ));
        let mut json = Messages::new(false, Full::new(Bytes::from_static(b"{\"x\":12345}")), 4);
        assert!(matches!(json.next().await, Err(StreamError::TooLarge)));
    }

    #[tokio::test]
    async fn the_body_ends_with_its_driver() {
        let mut body = CallBody::new(|events| async move {
            events.send(Bytes::from_static(b"one")).await.unwrap();
            events.send(Bytes::from_static(b"two")).await.unwrap();
        });
        let mut seen = Vec::new();
        while let Some(frame) = body.frame().await {
            seen.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(seen, [Bytes::from_static(b"one"), Bytes::from_static(b"two")]);
    }

    #[tokio::test]
    async fn messages_come_one_by_one_and_events_are_written_line_by_line() {
        use http_body_util::Full;
        let stream = "data: {\"method\":\"notifications/progress\"}\n\n: keep-alive\n\nevent: message\r\ndata: {\"id\":1,\r\ndata: \"result\":{}}\r\n\r\n";
        let mut messages = Messages::new(true, Full::new(Bytes::from(stream)), 1024);
        assert_eq!(
            &messages.next().await.unwrap().unwrap()[..],
            br#"{"method":"notifications/progress"}"#
        );
        assert_eq!(
            &messages.next().await.unwrap().unwrap()[..],
            b"{\"id\":1,\n\"result\":{}}"
        );
        assert!(messages.next().await.unwrap().is_none());

        assert_eq!(
            &sse_event(b"{\"a\":\n1}")[..],
            b"event: message\ndata: {\"a\":\ndata: 1}\n\n"
        );
    }
}
