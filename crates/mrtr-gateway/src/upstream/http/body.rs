//! The body of every answer the proxy gives ([`ProxyBody`]): a backend's body streamed through as
//! a [`BackendBody`], one the gateway wrote itself (errors, merged lists), or the messages of a
//! stdio backend as SSE events ([`ChannelBody`]). A concrete type rather than a boxed one, so that
//! no answer pays an allocation and a virtual call per frame for the choice.
//!
//! [`BackendBody`] is a backend's answer body on its way to the client, so that a backend that
//! dies or stalls mid-answer never leaves the client with a cut stream:
//!
//! * **Stall**: when the backend sends nothing for the stall timeout, the answer is ended as if
//!   the backend had failed. The timer is armed only once the body has to wait for the backend
//!   (an answer that is already complete never creates one), and it is not reset per frame:
//!   when it fires after data arrived, it is armed again, so a stall is detected between one and
//!   two stall timeouts after the last byte.
//! * **SSE answers** (`text/event-stream`) are passed on in whole events only: a frame that ends
//!   inside an event is held back until the event is complete (at most [`MAX_HELD`] bytes, past
//!   which the stream is passed on as it comes). When the backend's connection then fails, or
//!   it stalls, the client's stream ends with one more event, a JSON-RPC error for the pending
//!   request's id (`-32603`), and a clean end of the body, instead of a truncated chunk. If the
//!   last event already was the response, the stream just ends.
//! * **Other answers** end with the error: a truncated JSON body cannot be repaired, and the
//!   aborted connection is what tells the client so.
//!
//! The answer passes through the MRTR layer after this, which sees a well-formed stream either
//! way (the error event is an ordinary event to it).

use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_mrtr::BoxError;

use http_body_util::combinators::BoxBody;
use http_body_util::{Either, Full};

use crate::jsonrpc::{self, INTERNAL_ERROR};
use crate::upstream::sse::KEEP_ALIVE_COMMENT;
use crate::upstream::translate::Translation;

/// A backend's streamed body (`Left`), or the gateway's own (`Right`): fixed bytes, or a rarer
/// kind boxed (a stdio backend's answer, a merged listen stream), which is large and would
/// otherwise make every answer's body larger to move through the layers.
pub(crate) type ProxyBody = Either<BackendBody, Either<Full<Bytes>, BoxBody<Bytes, BoxError>>>;

/// The gateway's own body of `bytes`.
pub(crate) fn full(bytes: Bytes) -> ProxyBody {
    Either::Right(Either::Left(Full::new(bytes)))
}

/// The gateway's own `application/json` answer of `body` with `status`.
pub(crate) fn json(status: http::StatusCode, body: Bytes) -> http::Response<ProxyBody> {
    let mut response = http::Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// `202 Accepted` with no body: what a notification gets.
pub(crate) fn accepted() -> http::Response<ProxyBody> {
    let mut response = http::Response::new(full(Bytes::new()));
    *response.status_mut() = http::StatusCode::ACCEPTED;
    response
}

/// A rarer body of the gateway's own, boxed.
pub(crate) fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes, Error = BoxError> + Send + Sync + 'static,
{
    Either::Right(Either::Right(BoxBody::new(body)))
}

/// Most bytes of an unfinished SSE event held back; a longer event is passed on as it comes
/// (and a failure inside it then cuts the stream, as without this module).
pub(crate) const MAX_HELD: usize = 1024 * 1024;

pin_project! {
    /// A backend's answer body; see the [module docs](self).
    #[derive(Debug)]
    pub struct BackendBody {
        #[pin]
        inner: Incoming,
        stall: Stall,
        // Only for SSE answers: what ending cleanly needs.
        sse: Option<Box<SseEnd>>,
        // Only for an initialize-era backend's answer (`upstream/translate.rs`).
        translation: Option<Box<Translation>>,
        finished: bool,
    }
}

#[derive(Debug)]
struct Stall {
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The waker the timer last registered: while the body is polled with the same one and the
    /// timer has not fired, polling the timer again would only register it again (the body
    /// waits once per event of a stream, so this is per event).
    registered: Option<Waker>,
    frames: u64,
    frames_when_armed: u64,
}

#[derive(Debug)]
struct SseEnd {
    /// The request's JSON-RPC id as raw JSON; `None` for a notification (nothing to answer).
    id: Option<Box<str>>,
    backend: tower_mrtr::Route,
    /// Bytes of an event not yet complete.
    held: BytesMut,
    /// Once an event outgrew [`MAX_HELD`]: pass everything on, end by cutting.
    passing: bool,
    /// The last bytes passed on (they end with a complete event unless `passing`).
    last: Bytes,
}

impl BackendBody {
    /// `body` of an answer from `backend` to the request `id` (raw JSON); `sse` when the
    /// answer is `text/event-stream`.
    pub(crate) fn new(
        body: Incoming,
        stall_timeout: Duration,
        sse: bool,
        id: Option<&str>,
        backend: &tower_mrtr::Route,
    ) -> Self {
        Self {
            inner: body,
            stall: Stall {
                timeout: stall_timeout,
                sleep: None,
                registered: None,
                frames: 0,
                frames_when_armed: 0,
            },
            sse: sse.then(|| {
                Box::new(SseEnd {
                    id: id.map(Box::from),
                    backend: backend.clone(),
                    held: BytesMut::new(),
                    passing: false,
                    last: Bytes::new(),
                })
            }),
            translation: None,
            finished: false,
        }
    }

    /// Applies `translation` to every message of the answer (an `initialize`-era backend's
    /// answer to a 2026-07-28 client). A JSON answer is then read whole, up to
    /// [`MAX_TRANSLATED`] bytes.
    pub(crate) fn translated(mut self, translation: Translation) -> Self {
        self.translation = Some(Box::new(translation));
        self
    }
}

/// Largest JSON answer of an `initialize`-era backend the gateway reads whole to translate (as
/// much as it reads of an answer it merges).
pub(crate) const MAX_TRANSLATED: usize = 8 * 1024 * 1024;

impl Stall {
    /// Whether the backend has sent nothing for a whole timeout; registers the waker otherwise.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            let sleep = self.sleep.get_or_insert_with(|| {
                self.frames_when_armed = self.frames;
                Box::pin(tokio::time::sleep(self.timeout))
            });
            let known = self.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
            if known && !sleep.is_elapsed() {
                return false;
            }
            if sleep.as_mut().poll(cx).is_pending() {
                if !known {
                    self.registered = Some(cx.waker().clone());
                }
                return false;
            }
            // Whether a timer that fired still holds a waker once re-armed is tokio's detail
            // (today it does): poll the re-armed timer once more rather than rely on it.
            self.registered = None;
            if self.frames == self.frames_when_armed {
                return true;
            }
            self.frames_when_armed = self.frames;
            sleep.as_mut().reset(Instant::now() + self.timeout);
        }
    }
}

/// The event that ends a stream whose backend failed: a JSON-RPC error for `id` (raw JSON).
pub(crate) fn end_event(id: Option<&str>, backend: &str, reason: &str) -> Bytes {
    let message = format!("Backend {backend:?} failed before answering: {reason}");
    let error = jsonrpc::error_body(id, INTERNAL_ERROR, &message, None);
    let mut event = BytesMut::with_capacity(error.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(&error);
    event.extend_from_slice(b"\n\n");
    event.freeze()
}

/// Whether `data` ends with a blank line, i.e. with a complete event.
fn ends_an_event(data: &[u8]) -> bool {
    data.ends_with(b"\n\n") || data.ends_with(b"\r\r") || data.ends_with(b"\r\n\r\n")
}

impl SseEnd {
    /// Takes a data frame; returns what can be passed on now (complete events only).
    fn pass(&mut self, data: Bytes) -> Option<Bytes> {
        if self.passing {
            self.last = data.clone();
            return Some(data);
        }
        let out = if self.held.is_empty() && ends_an_event(&data) {
            // The usual case: backends write whole events.
            data
        } else {
            self.held.extend_from_slice(&data);
            let complete = crate::upstream::sse::complete_len(&self.held);
            if complete == 0 {
                if self.held.len() <= MAX_HELD {
                    return None;
                }
                self.passing = true;
                self.held.split().freeze()
            } else {
                self.held.split_to(complete).freeze()
            }
        };
        self.last = out.clone();
        Some(out)
    }

    /// What the client gets after the backend failed for `reason`: the error event, unless the
    /// response already went out; `None` when the stream can only be cut.
    fn end(&mut self, reason: &str) -> Option<Bytes> {
        if self.passing {
            return None;
        }
        self.held.clear();
        if self.id.is_none() || crate::upstream::sse::last_response(&self.last[..]).is_some() {
            return Some(Bytes::new());
        }
        tracing::warn!(backend = %self.backend, reason, "backend failed mid-stream; ending the client's stream with an error");
        Some(end_event(self.id.as_deref(), self.backend.as_str(), reason))
    }
}

/// Why a backend's answer could not be relayed to its end.
#[derive(Debug)]
enum Failure {
    Connection(hyper::Error),
    Stalled(Duration),
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Self::Connection(_) => "the connection failed",
            Self::Stalled(_) => "it stalled",
        }
    }
}

impl From<Failure> for BoxError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Connection(error) => error.into(),
            Failure::Stalled(timeout) => {
                format!("the backend sent nothing for {} s", timeout.as_secs_f64()).into()
            }
        }
    }
}

impl Body for BackendBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if *this.finished {
                return Poll::Ready(None);
            }
            let failure = match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    this.stall.frames += 1;
                    let Some(sse) = this.sse.as_mut() else {
                        let Some(translation) = this.translation.as_mut() else {
                            return Poll::Ready(Some(Ok(frame)));
                        };
                        if let Ok(data) = frame.into_data()
                            && !translation.push_json(&data, MAX_TRANSLATED)
                        {
                            *this.finished = true;
                            return Poll::Ready(Some(Err(
                                "the backend's answer is too large to translate".into()
                            )));
                        }
                        continue;
                    };
                    match frame.into_data() {
                        Ok(data) => match sse.pass(data) {
                            Some(data) => match this.translation.as_mut() {
                                None => return Poll::Ready(Some(Ok(Frame::data(data)))),
                                Some(translation) => match translation.events(&data, MAX_TRANSLATED) {
                                    Some(data) if data.is_empty() => continue,
                                    Some(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                                    None => {
                                        *this.finished = true;
                                        return Poll::Ready(Some(Err(
                                            "an event of the backend's answer is too large to translate"
                                                .into(),
                                        )));
                                    }
                                },
                            },
                            None => continue,
                        },
                        Err(frame) => return Poll::Ready(Some(Ok(frame))),
                    }
                }
                Poll::Ready(None) => {
                    *this.finished = true;
                    // A stream that ends cleanly inside an event is passed on as it ended.
                    let rest = match (this.sse.as_mut(), this.translation.as_mut()) {
                        (Some(sse), None) => sse.held.split().freeze(),
                        (Some(sse), Some(translation)) => {
                            // What the body held back, then what the translation still holds.
                            let held = sse.held.split();
                            let mut rest = BytesMut::from(
                                &translation.events(&held, MAX_TRANSLATED).unwrap_or_default()[..],
                            );
                            rest.extend_from_slice(&translation.finish_events());
                            rest.freeze()
                        }
                        (None, Some(translation)) => translation.finish_json(),
                        (None, None) => Bytes::new(),
                    };
                    return match rest.is_empty() {
                        false => Poll::Ready(Some(Ok(Frame::data(rest)))),
                        true => Poll::Ready(None),
                    };
                }
                Poll::Ready(Some(Err(error))) => Failure::Connection(error),
                Poll::Pending => {
                    if !this.stall.expired(cx) {
                        return Poll::Pending;
                    }
                    Failure::Stalled(this.stall.timeout)
                }
            };
            *this.finished = true;
            let ended = this.sse.as_mut().and_then(|sse| sse.end(failure.reason()));
            return match ended {
                None => Poll::Ready(Some(Err(failure.into()))),
                Some(event) if event.is_empty() => Poll::Ready(None),
                Some(event) => Poll::Ready(Some(Ok(Frame::data(event)))),
            };
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished || (self.sse.is_none() && self.translation.is_none() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match self.sse {
            // Held-back bytes and an error event may change the length.
            Some(_) => SizeHint::default(),
            None if self.translation.is_some() => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(id: Option<&str>) -> SseEnd {
        SseEnd {
            id: id.map(Box::from),
            backend: tower_mrtr::Route::new("alpha"),
            held: BytesMut::new(),
            passing: false,
            last: Bytes::new(),
        }
    }

    /// A waker that counts its wake-ups.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_stall_timer_wakes_the_body_after_rearming() {
        let wakes = std::sync::Arc::new(Wakes(Default::default()));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);
        let mut stall = Stall {
            timeout: Duration::from_secs(1),
            sleep: None,
            registered: None,
            frames: 0,
            frames_when_armed: 0,
        };
        assert!(!stall.expired(&mut cx));
        // Polled again and again while waiting, with the same waker: no wake-up of its own.
        for _ in 0..3 {
            assert!(!stall.expired(&mut cx));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(woken(), 0);

        // Data arrives; the timer fires, finds it, and is armed again.
        stall.frames += 1;
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(woken(), 1);
        assert!(!stall.expired(&mut cx));
        assert!(!stall.expired(&mut cx));

        // Then nothing: the re-armed timer must wake the body, which then sees the stall.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(woken(), 2);
        assert!(stall.expired(&mut cx));
    }

    #[test]
    fn only_whole_events_pass() {
        let mut end = sse(Some("1"));
        assert_eq!(
            end.pass(Bytes::from_static(b"data: a\n\n")).unwrap(),
            "data: a\n\n"
        );
        assert!(end.pass(Bytes::from_static(b"data: {\"b\":")).is_none());
        assert_eq!(
            end.pass(Bytes::from_static(b"1}\n\ndata: c")).unwrap(),
            "data: {\"b\":1}\n\n"
        );
        // Failing now drops the unfinished `data: c` and answers the request.
        let event = end.end("the connection failed").unwrap();
        assert!(
            event.starts_with(b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\""),
            "{event:?}"
        );
    }

    #[test]
    fn a_stream_that_already_answered_just_ends() {
        let mut end = sse(Some("1"));
        end.pass(Bytes::from_static(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
        ));
        assert_eq!(end.end("the connection failed").unwrap(), "");
        let mut notification = sse(None);
        assert_eq!(notification.end("it stalled").unwrap(), "");
    }

    #[test]
    fn an_oversized_event_is_passed_on_and_then_cut() {
        let mut end = sse(Some("1"));
        let big = Bytes::from(vec![b'x'; MAX_HELD + 1]);
        assert_eq!(end.pass(big).unwrap().len(), MAX_HELD + 1);
        assert!(end.end("the connection failed").is_none());
    }

    #[test]
    fn the_end_event_answers_the_pending_request() {
        let event = end_event(Some("7"), "alpha", "the connection failed");
        assert!(event.starts_with(b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32603,"));
        assert!(event.ends_with(b"}}\n\n"));
    }
}

/// A stream of SSE events the gateway writes itself (a merged listen, a listen served from a
/// legacy session's notifications): the events sent on its channel, until the channel closes.
/// Dropping it (the client went away) closes the channel, which tells the sender, and drops
/// what it `holds`.
pub(crate) struct EventsBody {
    events: tokio::sync::mpsc::Receiver<Bytes>,
    /// With [`keep_alive`](Self::keep_alive): when the next comment goes out if no event does.
    keep_alive: Option<Pin<Box<Sleep>>>,
    _holds: Box<dyn Send + Sync>,
}

impl EventsBody {
    /// The stream of what `events` receives, holding `holds` until it is dropped.
    pub(crate) fn new(events: tokio::sync::mpsc::Receiver<Bytes>, holds: Box<dyn Send + Sync>) -> Self {
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

impl Body for EventsBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(event) = this.events.poll_recv(cx) {
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
/// the stream ends with a JSON-RPC error for the request, as a [`BackendBody`] ends.
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
