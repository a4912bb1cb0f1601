//! The body of every answer the proxy gives ([`ProxyBody`]): a backend's body streamed through as
//! a [`BackendBody`], or one the gateway wrote itself (errors, merged lists; boxed, rarer: a
//! stdio process's messages as SSE events, a merged listen stream). A concrete type rather than
//! a boxed one, so that no forwarded answer pays an allocation and a virtual call per frame for
//! the choice.
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
use tower_mrtr::error::INTERNAL_ERROR;

use crate::jsonrpc;
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
enum BodyCut {
    Connection(hyper::Error),
    Stalled(Duration),
}

impl BodyCut {
    fn reason(&self) -> &'static str {
        match self {
            Self::Connection(_) => "the connection failed",
            Self::Stalled(_) => "it stalled",
        }
    }
}

impl From<BodyCut> for BoxError {
    fn from(cut: BodyCut) -> Self {
        match cut {
            BodyCut::Connection(error) => error.into(),
            BodyCut::Stalled(timeout) => {
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
            let cut = match this.inner.as_mut().poll_frame(cx) {
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
                Poll::Ready(Some(Err(error))) => BodyCut::Connection(error),
                Poll::Pending => {
                    if !this.stall.expired(cx) {
                        return Poll::Pending;
                    }
                    BodyCut::Stalled(this.stall.timeout)
                }
            };
            *this.finished = true;
            let ended = this.sse.as_mut().and_then(|sse| sse.end(cut.reason()));
            return match ended {
                None => Poll::Ready(Some(Err(cut.into()))),
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
