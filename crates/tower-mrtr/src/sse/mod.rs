//! Sealing inside `text/event-stream` answers, incrementally and byte for byte.
//!
//! A backend may answer `tools/call`, `prompts/get` or `resources/read` with a stream:
//! progress and log notifications first, the JSON-RPC response last (the official Rust SDK does
//! this by default). [`SseBody`] wraps such a stream. A hand-written [`framer`] cuts it into
//! events without decoding them; an event whose bytes cannot hold an `input_required` result
//! (a cheap substring search) is forwarded as is, often as a zero-copy slice of the backend's
//! chunk. Only candidate events are parsed, and only the one carrying the `input_required`
//! response is rewritten: its `data:` lines become one line holding the sealed message, and its
//! other lines (`id:`, `event:`, `retry:`, comments) stay where they were.
//!
//! Memory is bounded by one event (`max_sse_event`) plus the chunk in hand. An event over the
//! limit, or one that cannot be sealed, ends the stream with a JSON-RPC error event for the
//! request and drops the backend's body: the client never sees a raw backend state. Dropping the
//! client's response drops the backend's body too, which MCP treats as cancellation.
//!
//! Streams are not re-chunked: what a backend chunk completes is forwarded at once (consecutive
//! untouched events as one slice), so keep-alives and progress reach the client without delay.

pub(crate) mod framer;

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use self::framer::{SseFramer, SseItem};
use crate::BoxError;
use crate::error::Rejection;
use crate::response::{Rewriter, Unrelayable};

/// Whether a `Content-Type` value is `text/event-stream` (parameters and case aside).
pub(crate) fn names_event_stream(value: &http::HeaderValue) -> bool {
    value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Whether every `Content-Type` header of an answer names the same media type (parameters and
/// case aside). With two different ones the layer could read the answer as a stream and a client
/// as JSON, or the reverse: such an answer cannot be read unambiguously.
#[cfg(test)]
pub(crate) fn has_one_media_type(headers: &HeaderMap) -> bool {
    let mut types = headers.get_all(http::header::CONTENT_TYPE).iter();
    let Some(first) = types.next() else { return true };
    types.all(|other| same_media_type(first, other))
}

/// Whether two `Content-Type` values name the same media type (parameters and case aside),
/// compared in place: this runs for every answer the layer reads.
pub(crate) fn same_media_type(a: &http::HeaderValue, b: &http::HeaderValue) -> bool {
    fn media_type(value: &http::HeaderValue) -> &[u8] {
        let essence = value.as_bytes().split(|&b| b == b';').next().unwrap_or_default();
        essence.trim_ascii()
    }
    media_type(a).eq_ignore_ascii_case(media_type(b))
}

/// The rewritten form of one event's data, `None` if it needs no change.
fn rewrite_event_data(rewriter: &Rewriter, data: &[u8]) -> Result<Option<Bytes>, Unrelayable> {
    let data = Bytes::copy_from_slice(data);
    let rewritten = rewriter.rewrite(data.clone())?;
    if rewritten == data {
        return Ok(None);
    }
    // The data of a multi-line event was joined with LF; in valid JSON a raw line break can only
    // be whitespace, so it becomes a space and the message fits on one `data:` line.
    let one_line: Vec<u8> = rewritten
        .iter()
        .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
        .collect();
    Ok(Some(Bytes::from(one_line)))
}

pin_project! {
    /// A `text/event-stream` body rewritten event by event; see the [module docs](self).
    pub(crate) struct SseBody<B> {
        // `None` once the backend's body is finished or dropped (fail closed).
        #[pin]
        inner: Option<B>,
        framer: SseFramer,
        rewriter: Rewriter,
        out: VecDeque<Bytes>,
        trailers: Option<HeaderMap>,
        done: bool,
    }
}

impl<B> SseBody<B> {
    pub(crate) fn new(inner: B, rewriter: Rewriter) -> Self {
        let framer = SseFramer::new(rewriter.config().max_sse_event, rewriter.needles());
        Self {
            inner: Some(inner),
            framer,
            rewriter,
            out: VecDeque::new(),
            trailers: None,
            done: false,
        }
    }
}

/// Moves every ready item from the framer to the output, sealing candidates; with `at_end`, the
/// framer's tail too. On failure the stream must end with the error event.
fn drain(
    framer: &mut SseFramer,
    rewriter: &Rewriter,
    out: &mut VecDeque<Bytes>,
    at_end: bool,
) -> Result<(), Unrelayable> {
    let mut emit = |item: SseItem| -> Result<(), Unrelayable> {
        let bytes = match item {
            SseItem::Raw(bytes) => bytes,
            SseItem::Candidate(event) => match event.data() {
                None => event.into_raw(),
                Some(data) => match rewrite_event_data(rewriter, &data)? {
                    None => event.into_raw(),
                    Some(sealed) => event.with_data(&sealed).map_err(|_| Unrelayable::Unreadable)?,
                },
            },
        };
        if !bytes.is_empty() {
            out.push_back(bytes);
        }
        Ok(())
    };
    while let Some(item) = framer.next_item() {
        emit(item)?;
    }
    if at_end {
        // `finish` queues the tail and hands out its first item; the rest follows as usual.
        if let Some(item) = framer.finish() {
            emit(item)?;
        }
        while let Some(item) = framer.next_item() {
            emit(item)?;
        }
    }
    Ok(())
}

/// The event that ends a stream that failed closed. The leading line break ends any line the
/// client may be in the middle of; an extra blank line dispatches nothing.
fn error_event(id: Option<&str>) -> Bytes {
    let error = Rejection::Unrelayable {
        id: id.map(str::to_owned),
    }
    .body();
    let mut event = Vec::with_capacity(error.len() + 16);
    event.extend_from_slice(b"\nevent: message\ndata: ");
    event.extend_from_slice(&error);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

impl<B> Body for SseBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if let Some(bytes) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if let Some(trailers) = this.trailers.take() {
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            let Some(inner) = this.inner.as_mut().as_pin_mut() else {
                *this.done = true;
                continue;
            };
            let result = match ready!(inner.poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(mut data) => {
                        let chunk = data.copy_to_bytes(data.remaining());
                        match this.framer.push(chunk) {
                            Ok(()) => drain(this.framer, this.rewriter, this.out, false),
                            Err(too_large) => {
                                tracing::debug!(limit = too_large.limit, "SSE event over the limit");
                                // Whatever came before the oversized event is still delivered.
                                drain(this.framer, this.rewriter, this.out, false)
                                    .and(Err(Unrelayable::EventTooLarge))
                            }
                        }
                    }
                    Err(frame) => {
                        // Trailers end the body: flush the framer first.
                        *this.trailers = frame.into_trailers().ok();
                        this.inner.set(None);
                        drain(this.framer, this.rewriter, this.out, true)
                    }
                },
                Some(Err(err)) => {
                    // A backend failure mid-stream is the client's failure too: it must not look
                    // like a clean end of the stream.
                    this.inner.set(None);
                    *this.done = true;
                    return Poll::Ready(Some(Err(err.into())));
                }
                None => {
                    this.inner.set(None);
                    drain(this.framer, this.rewriter, this.out, true)
                }
            };
            if let Err(reason) = result {
                crate::metrics::failed_closed(reason.label());
                tracing::debug!(
                    reason = reason.label(),
                    detail = reason.reason(),
                    "SSE answer failed closed"
                );
                this.out.push_back(error_event(this.rewriter.id()));
                this.trailers.take();
                this.inner.set(None);
                *this.done = true;
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.out.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content_types(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(http::header::CONTENT_TYPE, http::HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn one_media_type_ignores_parameters_case_and_spaces() {
        assert!(has_one_media_type(&content_types(&[])));
        assert!(has_one_media_type(&content_types(&["application/json"])));
        assert!(has_one_media_type(&content_types(&[
            "text/event-stream",
            " Text/Event-Stream ; charset=utf-8"
        ])));
        assert!(!has_one_media_type(&content_types(&[
            "text/event-stream",
            "application/json"
        ])));
        assert!(!has_one_media_type(&content_types(&[
            "application/json",
            "application/jsonx"
        ])));
    }
}
