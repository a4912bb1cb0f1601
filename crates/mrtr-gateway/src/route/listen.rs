//! A modern client's `subscriptions/listen` across several backends: one listen stream per
//! backend that takes the filter, merged into the client's one stream.
//!
//! * **The filters.** Each backend gets the client's filter with `resourceSubscriptions`
//!   narrowed to its own resources (the catalog knows which); the list-changed categories go to
//!   every backend. A backend left with nothing to listen for is not asked.
//! * **The acknowledgement.** The client gets one `notifications/subscriptions/acknowledged`,
//!   once every asked backend has acknowledged (or within the response timeout): what any of them
//!   accepted (a category accepted by one is accepted; the resources are the union). A backend
//!   that refuses (an error, or no stream) is left out; when all do, the first refusal is the
//!   answer.
//! * **Then** every event of every stream is passed on as it comes, keep-alive comments
//!   included. The stream ends when every backend's has ended, with the last response sent.
//!   A client that goes away drops the merged body, and every backend's stream with it (MCP's
//!   cancellation).
//!
//! A listen whose filter is one backend's resources alone is routed to that backend alone
//! ([`listen`](Inner::listen), which decides). Each backend's stream, merged or not, is shared
//! with the clients that ask that backend the same (`upstream/listens.rs`): one backend listen
//! serves them all, each event carrying each client's own id.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::request::Parts;
use http::{Extensions, HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use tower_mrtr::McpRequestHead;

use super::{
    INTERNAL_ERROR, INVALID_PARAMS, Inner, Routed, URIS, error_response, invalid_params, request_params,
    unavailable,
};
use crate::jsonrpc;
use crate::upstream::Client;
use crate::upstream::body::ProxyBody;
use crate::upstream::sse::EventsBody;
use crate::upstream::sse::{EventReader, KEEP_ALIVE_COMMENT, is_sse, message_event, set_stream_headers};
use crate::upstream::translate::ClientAsks;

/// Events queued for the client before the merge waits for it to read.
const QUEUE: usize = 64;

/// `filter` (a `params.notifications` object) for a backend owning `resources` of the client's
/// `resourceSubscriptions`; `None` when it leaves the backend nothing to listen for.
pub(super) fn filter_for(filter: &Map<String, Value>, resources: &[String]) -> Option<Map<String, Value>> {
    let mut narrowed = Map::new();
    for (key, value) in filter {
        if key == "resourceSubscriptions" {
            if !resources.is_empty() {
                narrowed.insert(key.clone(), json!(resources));
            }
        } else if value != &Value::Bool(false) {
            narrowed.insert(key.clone(), value.clone());
        }
    }
    (!narrowed.is_empty()).then_some(narrowed)
}

/// What every acknowledgement accepted: a category any accepted, the union of the resources.
fn merge_acks(acks: &[Value]) -> Value {
    let mut accepted = Map::new();
    for ack in acks {
        let Some(filter) = ack.pointer("/params/notifications").and_then(Value::as_object) else {
            continue;
        };
        for (key, value) in filter {
            match (accepted.get_mut(key), value) {
                (Some(Value::Array(ours)), Value::Array(theirs)) => {
                    for item in theirs {
                        if !ours.contains(item) {
                            ours.push(item.clone());
                        }
                    }
                }
                (Some(ours @ Value::Bool(false)), Value::Bool(true)) => *ours = Value::Bool(true),
                (Some(_), _) => {}
                (None, _) => {
                    accepted.insert(key.clone(), value.clone());
                }
            }
        }
    }
    let mut merged = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "notifications": accepted },
    });
    if let Some(meta) = acks.iter().find_map(|a| a.pointer("/params/_meta")) {
        merged["params"]["_meta"] = meta.clone();
    }
    merged
}

/// What one backend's listen stream gives, as the merge reads it.
enum Read {
    /// An event's data.
    Message(Bytes),
    /// Keep-alive comments, to pass on.
    KeepAlive,
    End,
}

/// One backend's listen stream, read event by event.
struct Stream {
    body: ProxyBody,
    events: EventReader,
    /// The body ended (events it completed may still be read).
    ended: bool,
    /// Everything was read.
    done: bool,
}

impl Stream {
    async fn next(&mut self) -> Read {
        loop {
            if let Some(message) = self.events.next_event() {
                return Read::Message(message);
            }
            if self.ended {
                self.done = true;
                return Read::End;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    self.events.push(&data);
                    if self.events.held() == 0 && data.starts_with(b":") {
                        return Read::KeepAlive;
                    }
                    if self.events.held() > crate::upstream::MAX_MERGED_ANSWER {
                        self.ended = true;
                    }
                }
                Some(Err(_)) | None => self.ended = true,
            }
        }
    }
}

/// The merged stream of `answers` (each backend's answer to its listen), acknowledged once all
/// asked backends have, or after `ack_timeout`. `None` when no backend answered with a stream:
/// then the first answer (a refusal) is given back.
pub(super) async fn merge(
    answers: Vec<Response<ProxyBody>>,
    ack_timeout: Duration,
) -> Result<Response<ProxyBody>, Option<Response<ProxyBody>>> {
    let mut refusal = None;
    let mut streams = Vec::new();
    for answer in answers {
        if answer.status() == StatusCode::OK && is_sse(answer.headers()) {
            streams.push(Stream {
                body: answer.into_body(),
                events: EventReader::new(),
                ended: false,
                done: false,
            });
        } else if refusal.is_none() {
            refusal = Some(answer);
        }
    }
    if streams.is_empty() {
        return Err(refusal);
    }
    let (sender, receiver) = mpsc::channel(QUEUE);
    tokio::spawn(run(streams, sender, ack_timeout));
    // Dropping the body (the client went away) closes the channel, which ends the merge and
    // every backend's stream.
    let merged = EventsBody::new(receiver, Box::new(()));
    let mut response = Response::new(crate::upstream::body::boxed(merged));
    set_stream_headers(response.headers_mut());
    Ok(response)
}

/// The merge: acknowledgements first, then every event as it comes, until every stream ended or
/// the client went away (the channel closed).
async fn run(mut streams: Vec<Stream>, out: mpsc::Sender<Bytes>, ack_timeout: Duration) {
    // The acknowledgement of each stream, or its end.
    let mut acks = Vec::new();
    let mut early = Vec::new();
    let deadline = tokio::time::Instant::now() + ack_timeout;
    let mut waiting: Vec<usize> = (0..streams.len()).collect();
    while !waiting.is_empty() {
        let reads = streams
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| waiting.contains(i))
            .map(|(i, s)| Box::pin(async move { (i, s.next().await) }));
        let next = tokio::time::timeout_at(deadline, futures_util::future::select_all(reads)).await;
        let Ok(((index, read), _, _)) = next else { break };
        match read {
            Read::Message(message) => {
                let parsed: Option<Value> = serde_json::from_slice(&message).ok();
                let is_ack = parsed
                    .as_ref()
                    .is_some_and(|m| m["method"] == "notifications/subscriptions/acknowledged");
                if is_ack {
                    acks.extend(parsed);
                    waiting.retain(|i| *i != index);
                } else {
                    early.push(message);
                }
            }
            Read::KeepAlive => {}
            Read::End => waiting.retain(|i| *i != index),
        }
    }
    let ack = merge_acks(&acks);
    if out.send(message_event(ack.to_string().as_bytes())).await.is_err() {
        return;
    }
    for message in early {
        if out.send(message_event(&message)).await.is_err() {
            return;
        }
    }
    let mut last_response = None;
    loop {
        let live: Vec<_> = streams
            .iter_mut()
            .filter(|s| !s.done)
            .map(|s| Box::pin(s.next()))
            .collect();
        if live.is_empty() {
            break;
        }
        let (read, _, _) = tokio::select! {
            read = futures_util::future::select_all(live) => read,
            () = out.closed() => return,
        };
        let sent = match read {
            Read::Message(message) if crate::upstream::sse::is_response(&message) => {
                last_response = Some(message);
                continue;
            }
            Read::Message(message) => out.send(message_event(&message)).await,
            Read::KeepAlive => out.send(Bytes::from_static(KEEP_ALIVE_COMMENT)).await,
            Read::End => continue,
        };
        if sent.is_err() {
            return;
        }
    }
    if let Some(response) = last_response {
        let _ = out.send(message_event(&response)).await;
    }
}

impl Inner {
    /// `subscriptions/listen` with several backends (one on task handles is pinned before this):
    /// a filter of one backend's resources alone goes to that backend and its stream is the
    /// answer; any other is asked of every backend it concerns (each in its kind and era) and
    /// their streams are merged (`route/listen.rs`).
    pub(super) async fn listen(&self, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let Some(filter) = request_params(&body)
            .and_then(|p| p.get("notifications").map(|n| n.get().to_owned()))
            .and_then(|n| serde_json::from_str::<serde_json::Map<String, Value>>(&n).ok())
        else {
            return self.own(invalid_params(id, "Missing params.notifications"));
        };
        let uris: Vec<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_owned))
            .collect();
        let all_owned = |proxy: &Inner| -> Option<Vec<usize>> {
            uris.iter().map(|uri| proxy.catalog.resolve_uri(uri)).collect()
        };
        let owners = self.catalog(&URIS, false, &parts, &body, all_owned).await;
        let unknown = uris
            .iter()
            .position(|uri| self.catalog.resolve_uri(uri).is_none());
        if let (None, Some(unknown)) = (&owners, unknown) {
            return self.own(error_response(
                StatusCode::OK,
                id,
                INVALID_PARAMS,
                "Resource not found",
                Some(serde_json::json!({ "uri": uris[unknown] })),
            ));
        }
        let owners: Vec<usize> = owners.into_iter().flatten().collect();
        if let Some(index) = owners.first()
            && resources_alone(&filter)
            && owners.iter().all(|o| o == index)
        {
            return self
                .forward_listen(*index, (parts.headers, parts.extensions), id, body)
                .await;
        }
        let mut asked = Vec::new();
        for index in 0..self.backends.len() {
            let mine: Vec<String> = uris
                .iter()
                .zip(&owners)
                .filter(|(_, owner)| **owner == index)
                .map(|(uri, _)| uri.clone())
                .collect();
            let Some(narrowed) = filter_for(&filter, &mine)
                .and_then(|f| serde_json::value::to_raw_value(&f).ok())
                .and_then(|f| jsonrpc::set_param(&body, "notifications", f))
            else {
                continue;
            };
            asked.push((index, narrowed));
        }
        if asked.is_empty() {
            return self.own(invalid_params(
                id,
                "No backend offers what this subscription asks for",
            ));
        }
        // Each backend in its kind and era; one that cannot be reached answers with an error,
        // which the merge leaves out as a refusal.
        let mut answers = join_all(asked.iter().map(|(index, narrowed)| {
            let head = (parts.headers.clone(), parts.extensions.clone());
            self.forward_listen(*index, head, id, narrowed.clone())
        }))
        .await;
        if answers.len() == 1 {
            return answers.remove(0);
        }
        let streams = answers.into_iter().map(|(_, answer)| answer).collect();
        match merge(streams, self.upstreams.response_timeout()).await {
            Ok(merged) => self.own(merged),
            Err(Some(refusal)) => self.own(refusal),
            Err(None) => self.own(error_response(
                StatusCode::BAD_GATEWAY,
                id,
                INTERNAL_ERROR,
                "No backend could answer",
                None,
            )),
        }
    }

    /// A listen sent to backend `index`, in its kind and era, shared with the clients that send
    /// it the same (`upstream/listens.rs`).
    pub(super) async fn forward_listen(
        &self,
        index: usize,
        (headers, extensions): (HeaderMap, Extensions),
        id: Option<&str>,
        body: Bytes,
    ) -> Routed {
        let backend = &self.backends[index];
        let principal = self.principal(&headers, &extensions);
        let client = Client {
            principal: principal.as_deref(),
            asks: extensions.get::<ClientAsks>(),
        };
        match self.upstreams.listen(backend, headers, id, body, client).await {
            Ok(stream) => (backend.route().clone(), stream),
            Err(error) => unavailable(backend, id, &error),
        }
    }
}

/// Whether a `subscriptions/listen` filter (`params.notifications`) asks for resource
/// subscriptions and nothing else (every other category absent or `false`).
fn resources_alone(filter: &serde_json::Map<String, Value>) -> bool {
    filter.iter().all(|(key, value)| match key.as_str() {
        "resourceSubscriptions" => value.as_array().is_some_and(|uris| !uris.is_empty()),
        _ => value == &Value::Bool(false),
    }) && filter.contains_key("resourceSubscriptions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_filter_of_resources_alone_is_told_from_any_other() {
        let filter = |text: &str| serde_json::from_str::<serde_json::Map<String, Value>>(text).unwrap();
        assert!(resources_alone(&filter(
            r#"{"resourceSubscriptions":["a://1","b://2"],"toolsListChanged":false}"#
        )));
        for other in [
            r#"{"resourceSubscriptions":["a://1"],"toolsListChanged":true}"#,
            r#"{"resourceSubscriptions":[]}"#,
            r#"{"taskIds":["t"]}"#,
            r#"{"toolsListChanged":false}"#,
            r#"{}"#,
        ] {
            assert!(!resources_alone(&filter(other)), "{other}");
        }
    }

    #[test]
    fn each_backend_gets_its_resources_and_the_categories() {
        let filter = json!({ "toolsListChanged": true, "promptsListChanged": false, "resourceSubscriptions": ["a://1", "b://1"] });
        let filter = filter.as_object().unwrap();
        assert_eq!(
            filter_for(filter, &["a://1".to_owned()]),
            json!({ "toolsListChanged": true, "resourceSubscriptions": ["a://1"] })
                .as_object()
                .cloned()
        );
        assert_eq!(
            filter_for(filter, &[]),
            json!({ "toolsListChanged": true }).as_object().cloned()
        );
        let only_resources = json!({ "resourceSubscriptions": ["a://1"] });
        assert_eq!(filter_for(only_resources.as_object().unwrap(), &[]), None);
    }

    #[test]
    fn acknowledgements_merge_into_what_any_accepted() {
        let acks = [
            json!({ "method": "notifications/subscriptions/acknowledged", "params": {
                "notifications": { "toolsListChanged": false, "resourceSubscriptions": ["a://1"] },
                "_meta": { "io.modelcontextprotocol/subscriptionId": 7 } } }),
            json!({ "method": "notifications/subscriptions/acknowledged", "params": {
                "notifications": { "toolsListChanged": true, "resourceSubscriptions": ["b://1", "a://1"] } } }),
        ];
        let merged = merge_acks(&acks);
        assert_eq!(
            merged["params"]["notifications"],
            json!({ "toolsListChanged": true, "resourceSubscriptions": ["a://1", "b://1"] })
        );
        assert_eq!(
            merged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            7
        );
    }
}
