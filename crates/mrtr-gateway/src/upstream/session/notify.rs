//! `subscriptions/listen` on an `initialize`-era backend ([`listen`]): served from its
//! session's `GET` stream, one per session however many listen, read into a hub that fans its
//! notifications out and counts `resources/subscribe` (`upstream/session/hub.rs`); the session is kept
//! open while a listen uses it.

use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use tower_mrtr::error::METHOD_NOT_FOUND;

use super::pool::{Lease, Notifications, Session, reply_sink};
use super::wire::{self, identity_headers};
use crate::jsonrpc;
use crate::upstream::answer::UpstreamError;
use crate::upstream::backend::Backend;
use crate::upstream::http::body::{ProxyBody, json};
use crate::upstream::http::forward::{Forwarder, MAX_MERGED_ANSWER};
use crate::upstream::session::hub::{self, Hub, Offers, Subscriber};
use crate::upstream::sse::{EventReader, is_sse};
use crate::upstream::translate::{Reply, answer_backend_request};

/// A `subscriptions/listen`, served in the key's session from its `GET` stream, with
/// `resources/subscribe` for the resources it asks for (`upstream/session/hub.rs`).
pub(super) async fn listen(
    forwarder: &Forwarder,
    backend: &Backend,
    lease: Lease,
    headers: &HeaderMap,
    id: &str,
    body: &Bytes,
) -> Result<Response<ProxyBody>, UpstreamError> {
    let Some(session) = lease.session() else {
        return Err(UpstreamError::Unreachable("no session".to_owned()));
    };
    let (Some(session_id), version) = (session.id.clone(), session.version.clone()) else {
        // A backend without sessions has no stream to send notifications on.
        return Ok(no_stream(backend, id));
    };
    let offers = Offers::of_discover(&session.discover);
    let identity = identity_headers(headers);
    let notifications = {
        let mut held = lease.slot.notifications.lock().await;
        match held.upgrade().filter(|n| !n.hub.is_closed()) {
            Some(notifications) => notifications,
            None => {
                let stream =
                    wire::stream(forwarder, backend, identity.clone(), &version, &session_id).await?;
                if stream.status() != StatusCode::OK || !is_sse(stream.headers()) {
                    tracing::debug!(backend = backend.name(), status = %stream.status(), "no GET stream for a listen");
                    return Ok(no_stream(backend, id));
                }
                let hub = Arc::new(Hub::default());
                let reply = reply_sink(forwarder.clone(), backend.clone(), Lease::new(lease.slot.clone()));
                let reader = tokio::spawn(read_stream(stream.into_body(), hub.clone(), reply));
                let notifications = Arc::new(Notifications {
                    hub,
                    reader,
                    _lease: Lease::new(lease.slot.clone()),
                });
                *held = Arc::downgrade(&notifications);
                notifications
            }
        }
    };
    let subscriber: Subscriber = {
        let (forwarder, backend, slot) = (forwarder.clone(), backend.clone(), lease.slot.clone());
        Arc::new(move |method, uri| {
            let (forwarder, backend) = (forwarder.clone(), backend.clone());
            let (identity, version, session_id) = (identity.clone(), version.clone(), session_id.clone());
            // Under an id of the session's, as every request in it.
            let id = slot.session.get().map(Session::next_id);
            Box::pin(async move {
                let Some(id) = id else { return false };
                let uri = Value::String(uri);
                let request =
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"uri":{uri}}}}}"#);
                let answer = wire::exchange(
                    &forwarder,
                    &backend,
                    identity,
                    Some(&version),
                    Some(&session_id),
                    Bytes::from(request),
                )
                .await;
                answer.is_ok_and(|(a, _)| a.result().is_some())
            })
        })
    };
    let hub = notifications.hub.clone();
    Ok(hub::listen(&hub, offers, id, body, subscriber, Box::new(notifications)).await)
}

/// The refusal of a listen by a backend that has no stream for its notifications.
fn no_stream(backend: &Backend, id: &str) -> Response<ProxyBody> {
    let message = format!(
        "The initialize-era backend {:?} offers no stream for its notifications",
        backend.name()
    );
    json(
        StatusCode::NOT_FOUND,
        jsonrpc::error_body(Some(id), METHOD_NOT_FOUND, &message, None),
    )
}

/// Reads a session's `GET` stream into `hub` until it ends; the backend's requests on it are
/// answered through `reply` (`ping`; the others refused, as no one client owns the stream).
async fn read_stream(mut body: Incoming, hub: Arc<Hub>, reply: Reply) {
    use http_body_util::BodyExt;
    let mut events = EventReader::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else { continue };
        events.push(&data);
        while let Some(event) = events.next_event() {
            if hub.deliver(&event) {
                continue;
            }
            if let Ok(request) = serde_json::from_slice::<Value>(&event)
                && let (Some(method), Some(id)) = (request["method"].as_str(), request.get("id"))
            {
                reply(answer_backend_request(&id.to_string(), method));
            }
        }
        if events.held() > MAX_MERGED_ANSWER {
            break;
        }
    }
    hub.close("The backend's notification stream ended");
}
