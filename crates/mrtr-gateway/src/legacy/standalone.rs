//! A legacy session's standalone `GET` stream and the resource subscriptions served on it: the
//! stream's keep-alives, a listen started per subscribed URI while the stream is held, and
//! `resources/subscribe` waiting briefly for its backend to take the listen
//! (`subscriptions.rs` keeps the record, `listen.rs` runs one listen).

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode, header};
use serde_json::json;
use tower_mrtr::error::{INTERNAL_ERROR, INVALID_PARAMS, SESSION_NOT_FOUND};

use super::layer::DualEraLayer;
use super::listen::Listen;
use super::modern::{ModernAnswer, ModernStack};
use super::reply::{LegacyBody, error, result, sse_answer, status};
use super::request::LegacyRequest;
use super::session::{OpenedSession, SessionDigest};
use super::stream::{CallBody, Events, KEEP_ALIVE};
use super::subscriptions::{Full as SubscriptionsFull, MAX_URIS as MAX_SUBSCRIBED_URIS};

/// How long a `resources/subscribe` waits for the backend to acknowledge its listen.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(10);

/// A session's `GET` stream while it is held: detached when dropped.
struct Attached {
    front: DualEraLayer,
    digest: SessionDigest,
    number: u64,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.front.inner.subscriptions.detach(self.digest, self.number);
    }
}

/// `params.uri` of a subscription request.
pub(super) fn resource_uri(request: &LegacyRequest) -> Option<String> {
    serde_json::from_str(request.param("uri")?.get()).ok()
}

impl DualEraLayer {
    /// The session's standalone `GET` stream: keep-alive comments and its resource updates, for
    /// as long as the client holds it; its subscriptions' listens run meanwhile.
    pub(super) fn standalone<S, B, RB>(&self, inner: S, parts: Parts) -> Response<LegacyBody>
    where
        S: ModernStack<B, Answer = RB>,
        B: Send + 'static,
        RB: ModernAnswer,
    {
        let Some(session) = self.open_session(&parts) else {
            return error(
                StatusCode::NOT_FOUND,
                None,
                SESSION_NOT_FOUND,
                "Session not found",
            );
        };
        let accepts_sse = parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !accepts_sse {
            return status(StatusCode::NOT_ACCEPTABLE);
        }
        let front = self.clone();
        let number = self.inner.streams.fetch_add(1, Ordering::Relaxed);
        sse_answer(CallBody::new(move |events| async move {
            let digest = session.digest();
            let start = match front.inner.subscriptions.attach(digest, number, events.clone()) {
                Ok(start) => start,
                Err(_) => {
                    tracing::warn!("no room for another legacy session's stream on this replica");
                    return;
                }
            };
            // The stream ends when the client lets go of it: this future is dropped with its body.
            let _attached = Attached {
                front: front.clone(),
                digest,
                number,
            };
            for uri in start.uris {
                front.start_listen(inner.clone(), &session, &parts, number, uri, events.clone(), None);
            }
            let mut ticks =
                tokio::time::interval(front.inner.config.keep_alive.max(Duration::from_millis(100)));
            ticks.tick().await;
            loop {
                ticks.tick().await;
                if events.send(Bytes::from_static(KEEP_ALIVE)).await.is_err() {
                    break;
                }
            }
        }))
    }

    /// Starts the listen of `resource` for `session`'s stream number `number`.
    #[allow(clippy::too_many_arguments)] // the session's client, its stream, and the ack
    pub(super) fn start_listen<S, B, RB>(
        &self,
        inner: S,
        session: &OpenedSession,
        parts: &Parts,
        number: u64,
        resource: String,
        events: Events,
        acknowledged: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    ) where
        S: ModernStack<B, Answer = RB>,
        B: Send + 'static,
        RB: ModernAnswer,
    {
        let listen = Listen {
            inner,
            session: session.clone(),
            client_headers: parts.headers.clone(),
            uri: parts.uri.clone(),
            max_message: self.inner.config.max_message,
        };
        let task = tokio::spawn(listen.run(resource.clone(), events, acknowledged));
        self.inner
            .subscriptions
            .listening(session.digest(), number, &resource, task.abort_handle());
    }

    /// `resources/subscribe`: recorded for the session; with its stream open, the listen starts
    /// and the answer waits (briefly) for the backend to take it, so a refusal reaches the client.
    pub(super) async fn subscribe<S, B, RB>(
        &self,
        inner: S,
        parts: &Parts,
        session: &OpenedSession,
        request: &LegacyRequest,
    ) -> Response<LegacyBody>
    where
        S: ModernStack<B, Answer = RB>,
        B: Send + 'static,
        RB: ModernAnswer,
    {
        let Some(uri) = resource_uri(request) else {
            return error(
                StatusCode::OK,
                Some(request.id()),
                INVALID_PARAMS,
                "Missing params.uri",
            );
        };
        let start = match self.inner.subscriptions.subscribe(session.digest(), &uri) {
            Ok(start) => start,
            Err(SubscriptionsFull::Session) => {
                return error(
                    StatusCode::OK,
                    Some(request.id()),
                    INVALID_PARAMS,
                    &format!(
                        "This session already subscribes to {MAX_SUBSCRIBED_URIS} resources; unsubscribe first"
                    ),
                );
            }
            Err(SubscriptionsFull::Replica) => {
                return error(
                    StatusCode::OK,
                    Some(request.id()),
                    INTERNAL_ERROR,
                    "This gateway replica cannot hold more subscriptions right now",
                );
            }
        };
        let Some(start) = start else {
            // Already subscribed, or no stream yet: its listen starts when the stream opens.
            return result(request.id(), &json!({}));
        };
        let (acknowledged, taken) = tokio::sync::oneshot::channel();
        self.start_listen(
            inner,
            session,
            parts,
            start.stream,
            uri.clone(),
            start.events,
            Some(acknowledged),
        );
        match tokio::time::timeout(SUBSCRIBE_WAIT, taken).await {
            Ok(Ok(Err(refusal))) => {
                self.inner.subscriptions.unsubscribe(session.digest(), &uri);
                error(StatusCode::OK, Some(request.id()), INVALID_PARAMS, &refusal)
            }
            // Taken, or the backend is slow to say: the listen goes on either way.
            _ => result(request.id(), &json!({})),
        }
    }
}
