//! The answer to one call to a stdio process, as the client's SSE stream ([`ChannelBody`]): the
//! messages the process's reader routes to the call ([`Relayed`]), translated on their way.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::time::{Instant, Sleep};
use tower_mrtr::BoxError;

use crate::upstream::http::body::end_event;
use crate::upstream::sse::{KEEP_ALIVE, KEEP_ALIVE_COMMENT};
use crate::upstream::translate::Translation;

/// One message for a call a [`ChannelBody`] answers: a notification, or (`response`) the
/// response that ends it.
#[derive(Debug)]
pub(crate) struct Relayed {
    pub(crate) message: Bytes,
    pub(crate) response: bool,
}

/// The answer to one call to a stdio backend (`upstream/stdio/`), as the client's SSE stream:
/// every message the process sends for the call, translated, then the end after the response.
/// When the process exits first (the channel closes) or sends nothing for the stall timeout,
/// the stream ends with a JSON-RPC error for the request, as a
/// [`BackendBody`](crate::upstream::http::body::BackendBody) ends.
///
/// Dropping it (the client went away) drops the translation, which tells the backend with
/// `notifications/cancelled`, and what it `holds` (the call's place among those in flight).
pub(crate) struct ChannelBody {
    messages: tokio::sync::mpsc::Receiver<Relayed>,
    /// A message received before the answer's head went out.
    first: Option<Relayed>,
    translation: Translation,
    id: Box<str>,
    backend: tower_mrtr::Route,
    stall_timeout: Duration,
    stall: Pin<Box<Sleep>>,
    /// A listen's stream: waiting long is normal, so a keep-alive comment goes out instead of
    /// the stall's end.
    keep_alive: bool,
    finished: bool,
    _holds: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for ChannelBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelBody")
            .field("id", &self.id)
            .field("backend", &self.backend)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl ChannelBody {
    /// The answer to the request `id` (raw JSON) sent to `backend`, made of `first` (if any) and
    /// then `messages`.
    pub(crate) fn new(
        messages: tokio::sync::mpsc::Receiver<Relayed>,
        first: Option<Relayed>,
        translation: Translation,
        id: &str,
        backend: &tower_mrtr::Route,
        stall_timeout: Duration,
        holds: Box<dyn Send + Sync>,
    ) -> Self {
        Self {
            messages,
            first,
            translation,
            id: id.into(),
            backend: backend.clone(),
            stall_timeout,
            stall: Box::pin(tokio::time::sleep(stall_timeout)),
            keep_alive: false,
            finished: false,
            _holds: holds,
        }
    }

    /// The stream of a `subscriptions/listen`, which may wait for ever: a keep-alive comment
    /// every [`KEEP_ALIVE`] without a message, and no stall.
    pub(crate) fn listening(mut self) -> Self {
        self.keep_alive = true;
        self.stall_timeout = KEEP_ALIVE;
        self.stall.as_mut().reset(Instant::now() + KEEP_ALIVE);
        self
    }

    /// The end of a stream whose process failed for `reason`.
    fn fail(&mut self, reason: &str) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.finished = true;
        tracing::warn!(backend = %self.backend, reason, "stdio backend failed mid-answer; ending the client's stream with an error");
        Poll::Ready(Some(Ok(Frame::data(end_event(
            Some(&self.id),
            self.backend.as_str(),
            reason,
        )))))
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.finished {
                return Poll::Ready(None);
            }
            let next = match this.first.take() {
                Some(first) => Poll::Ready(Some(first)),
                None => this.messages.poll_recv(cx),
            };
            match next {
                Poll::Ready(Some(relayed)) => {
                    this.stall.as_mut().reset(Instant::now() + this.stall_timeout);
                    let event = this.translation.event(relayed.message);
                    if relayed.response {
                        this.finished = true;
                    }
                    if !event.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(event))));
                    }
                }
                Poll::Ready(None) => return this.fail("the process exited"),
                Poll::Pending => {
                    if this.stall.as_mut().poll(cx).is_ready() {
                        if this.keep_alive {
                            this.stall.as_mut().reset(Instant::now() + this.stall_timeout);
                            let comment = Bytes::from_static(KEEP_ALIVE_COMMENT);
                            return Poll::Ready(Some(Ok(Frame::data(comment))));
                        }
                        return this.fail("it stalled");
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }
}
