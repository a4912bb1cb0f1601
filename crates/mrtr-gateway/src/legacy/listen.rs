//! One legacy resource subscription served: the modern `subscriptions/listen` for its URI, sent
//! through the modern stack as the session's client, whose `notifications/resources/updated`
//! go to the session's `GET` stream in legacy form (`subscriptions.rs` decides when one runs).

use bytes::Bytes;
use http::{HeaderMap, Request, Uri};
use http_body_util::{Either, Full};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::answer::Modern;
use super::bridge::asks_for;
use super::modern::{ModernAnswer, ModernStack};
use super::request::LegacyRequest;
use super::session::OpenedSession;
use super::stream::{Events, Messages, sse_event};
use crate::upstream::sse::is_sse;

/// What one listen needs: the modern stack, and the session's client.
pub(super) struct Listen<S> {
    pub(super) inner: S,
    pub(super) session: OpenedSession,
    pub(super) client_headers: HeaderMap,
    pub(super) uri: Uri,
    /// Largest message read from the modern stack.
    pub(super) max_message: usize,
}

impl<S> Listen<S> {
    /// Listens for updates of `resource` and sends each to `events`, until the listen ends, the
    /// stream is gone or the task is aborted. `acknowledged` learns whether the backend took the
    /// subscription: its acknowledgement naming the resource, or why not.
    pub(super) async fn run<B, RB>(
        self,
        resource: String,
        events: Events,
        mut acknowledged: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    ) where
        S: ModernStack<B, Answer = RB>,
        B: Send + 'static,
        RB: ModernAnswer,
    {
        let mut answer = |outcome: Result<(), String>| {
            if let Some(acknowledged) = acknowledged.take() {
                let _ = acknowledged.send(outcome);
            }
        };
        let listen = json!({ "jsonrpc": "2.0", "id": 0, "method": "subscriptions/listen",
            "params": { "notifications": { "resourceSubscriptions": [resource] } } });
        let Some(request) = LegacyRequest::parse(listen.to_string().as_bytes()) else {
            return;
        };
        let mut modern = Request::new(Either::Right(Full::new(request.modern_body(
            r#""legacy-subscription""#,
            &self.session,
            None,
            None,
        ))));
        *modern.method_mut() = http::Method::POST;
        *modern.uri_mut() = self.uri;
        *modern.headers_mut() = request.modern_headers(&self.client_headers, &[]);
        // The subscription belongs in the backend session of the client's other requests (an
        // initialize-era backend keeps subscriptions per session), which is keyed by the
        // capabilities the client declared: those go with it. Its own requests on that
        // session's stream are the gateway's to refuse, so nothing takes them here.
        modern.extensions_mut().insert(asks_for(&self.session).0);
        let response = match self.inner.oneshot(modern).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, "modern service failed a subscription");
                answer(Err("The gateway could not relay the subscription".to_owned()));
                return;
            }
        };
        let (parts, body) = response.into_parts();
        let mut messages = Messages::new(is_sse(&parts.headers), Box::pin(body), self.max_message);
        loop {
            let message = match messages.next().await {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%error, resource, "subscription stream unreadable");
                    break;
                }
            };
            match Modern::parse(&message) {
                Some(Modern::Notification { method, message })
                    if method == "notifications/resources/updated" =>
                {
                    let Some(update) = legacy_update(&message) else {
                        continue;
                    };
                    if events.send(sse_event(&update)).await.is_err() {
                        return; // the stream is gone
                    }
                }
                Some(Modern::Notification { method, message })
                    if method == "notifications/subscriptions/acknowledged" =>
                {
                    answer(if acknowledges(&message, &resource) {
                        Ok(())
                    } else {
                        Err("The backend does not offer updates of this resource".to_owned())
                    });
                }
                Some(Modern::Response(response)) => {
                    // A refusal (no backend owns the resource) or the backend's end of it.
                    let refusal = response
                        .error
                        .as_ref()
                        .and_then(|e| serde_json::from_str::<Value>(e.get()).ok())
                        .and_then(|e| e["message"].as_str().map(str::to_owned));
                    tracing::debug!(resource, refusal, "subscription ended");
                    answer(Err(
                        refusal.unwrap_or_else(|| "The backend ended the subscription".to_owned())
                    ));
                    break;
                }
                _ => {}
            }
        }
        answer(Err("The backend's subscription stream ended".to_owned()));
    }
}

/// Whether an acknowledgement's accepted filter names `resource`.
fn acknowledges(message: &[u8], resource: &str) -> bool {
    serde_json::from_slice::<Value>(message)
        .ok()
        .and_then(|m| m.pointer("/params/notifications/resourceSubscriptions").cloned())
        .and_then(|uris| uris.as_array().cloned())
        .is_some_and(|uris| uris.iter().any(|u| u == resource))
}

/// A 2026-07-28 `notifications/resources/updated` in legacy form: its `uri` only (the
/// `subscriptionId` in `_meta` means nothing to a legacy client).
fn legacy_update(message: &[u8]) -> Option<Bytes> {
    let message: Value = serde_json::from_slice(message).ok()?;
    let uri = message.pointer("/params/uri")?.as_str()?;
    let update =
        json!({ "jsonrpc": "2.0", "method": "notifications/resources/updated", "params": { "uri": uri } });
    Some(Bytes::from(update.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_lose_the_subscription_id() {
        let modern = br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://watched-resource","_meta":{"io.modelcontextprotocol/subscriptionId":"legacy-subscription"}}}"#;
        assert_eq!(
            legacy_update(modern).as_deref(),
            Some(&br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://watched-resource"}}"#[..])
        );
        assert_eq!(legacy_update(br#"{"jsonrpc":"2.0","method":"x"}"#), None);
        let ack = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"resourceSubscriptions":["a://1"]}}}"#;
        assert!(acknowledges(ack, "a://1"));
        assert!(!acknowledges(ack, "a://2"));
    }
}
