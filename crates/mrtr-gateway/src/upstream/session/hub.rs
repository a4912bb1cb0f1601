//! The notifications an `initialize`-era session sends of its own (list changes, resource
//! updates), fanned out to the 2026-07-28 `subscriptions/listen` streams of the clients that
//! share the session ([`Hub`]).
//!
//! A legacy server sends these on one channel per session: a stdio process's stdout, a
//! Streamable HTTP session's `GET` stream. It sends each message once, so two listens in one
//! session must share that channel rather than each open one (two `GET` streams would split the
//! notifications between them). And it keeps one set of resource subscriptions per session, so
//! `resources/subscribe` and `resources/unsubscribe` are counted: the first listen of a resource
//! subscribes, the last one to go unsubscribes.
//!
//! * **A listen** ([`listen`]) gets what it asked for of what the session offers (its
//!   `listChanged` and `subscribe` capabilities; a resource whose `resources/subscribe` failed is
//!   left out, for every listen that waited for that answer), acknowledged first, as a 2026-07-28 server does; then each notification that
//!   matches, with the listen's id as `_meta["io.modelcontextprotocol/subscriptionId"]`.
//! * **Bounds**: [`MAX_LISTENS`] listens per session, [`MAX_RESOURCES`] resources per listen,
//!   [`QUEUE`] notifications queued for a client that does not read. A listen whose client
//!   falls that far behind is ended (its stream closes; a 2026-07-28 client listens again and
//!   reads the lists afresh) rather than silently missing a change.
//! * **Keep-alive**: a comment every 30 s without a notification, as the session's own channel
//!   sends none a client could see.
//! * **The end**: when the session's channel ends (the process exited, the `GET` stream closed),
//!   every listen ends with a JSON-RPC error for its request. A client that goes away drops its
//!   stream, and its resources are released.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Response, StatusCode};
use serde_json::{Map, Value, json};
use tokio::sync::{OnceCell, mpsc};
use tower_mrtr::error::{INTERNAL_ERROR, INVALID_PARAMS};

use crate::jsonrpc;
use crate::upstream::http::body::{ProxyBody, boxed, json as json_answer};
use crate::upstream::sse::{EventsBody, message_event, set_stream_headers};

/// Most listens one session serves at once.
pub(crate) const MAX_LISTENS: usize = 256;

/// Most resources one listen may subscribe to.
pub(crate) const MAX_RESOURCES: usize = 32;

/// Most notifications queued for one listen whose client has not read them.
pub(crate) const QUEUE: usize = 64;

/// The notifications a listen can ask for.
const LISTENABLE: [&str; 4] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
    "notifications/resources/updated",
];

/// The `_meta` key naming the listen a notification belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Sends a `resources/subscribe` or `resources/unsubscribe` (the method) for a URI in the
/// session; `true` when the backend took it.
pub(crate) type Subscriber = Arc<dyn Fn(&'static str, String) -> BoxFuture<'static, bool> + Send + Sync>;

/// One session's listens; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Hub {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    listens: HashMap<u64, Listener>,
    /// Each resource some listen holds: how many, and its `resources/subscribe`.
    resources: HashMap<String, Held>,
    /// The session's channel ended: no listen is taken any more.
    closed: bool,
}

/// A resource listens hold.
#[derive(Debug)]
struct Held {
    listens: usize,
    /// Whether the backend took the subscription, once its first listen asked: later listens
    /// wait for that answer rather than count on a subscription that may still fail.
    subscribed: Arc<OnceCell<bool>>,
}

#[derive(Debug)]
struct Listener {
    /// The listen request's id (raw JSON).
    id: Box<str>,
    wants: Wants,
    events: mpsc::Sender<Bytes>,
}

/// What a session offers a listen, from its `server/discover` result's `capabilities`: the
/// list changes it announces, and whether it takes resource subscriptions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Offers {
    tools: bool,
    prompts: bool,
    resources: bool,
    subscribe: bool,
}

impl Offers {
    pub(crate) fn of_discover(discover: &Value) -> Self {
        let capabilities = &discover["capabilities"];
        let flag = |feature: &str, key: &str| capabilities[feature][key].as_bool().unwrap_or(false);
        Self {
            tools: flag("tools", "listChanged"),
            prompts: flag("prompts", "listChanged"),
            resources: flag("resources", "listChanged"),
            subscribe: flag("resources", "subscribe"),
        }
    }
}

/// What a listen asks for (a `params.notifications` filter), or what it got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Wants {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Wants {
    /// The filter of a `subscriptions/listen` request (its `params.notifications`); `None` when
    /// it is not one.
    fn of_filter(filter: &Value) -> Option<Self> {
        let filter = filter.as_object()?;
        let flag = |key: &str| filter.get(key).and_then(Value::as_bool).unwrap_or(false);
        let mut uris: Vec<String> = Vec::new();
        for uri in filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let uri = uri.as_str()?;
            if !uris.iter().any(|u| u == uri) {
                uris.push(uri.to_owned());
            }
        }
        Some(Self {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris,
        })
    }

    /// The filter of an acknowledgement: what was accepted.
    fn to_filter(&self) -> Value {
        let mut filter = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                filter.insert(key.to_owned(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            filter.insert("resourceSubscriptions".to_owned(), json!(self.uris));
        }
        Value::Object(filter)
    }

    /// Whether a notification of `method` (and `uri`, for an update) is one this asks for.
    fn matches(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => uri.is_some_and(|uri| self.uris.iter().any(|u| u == uri)),
            _ => false,
        }
    }
}

/// `message` (a notification, parsed) for the listen `id` (raw JSON): its `_meta` names the
/// listen.
fn for_listen(mut message: Value, id: &str) -> Option<Bytes> {
    let id: Value = serde_json::from_str(id).ok()?;
    let params = message
        .as_object_mut()?
        .entry("params")
        .or_insert_with(|| json!({}));
    let meta = params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta.as_object_mut()?.insert(SUBSCRIPTION_ID.to_owned(), id);
    Some(message_event(message.to_string().as_bytes()))
}

impl Hub {
    /// Passes `message` (one JSON-RPC notification of the session's own) to every listen that
    /// asked for it; `false` when it is none of the notifications a listen can ask for.
    pub(crate) fn deliver(&self, message: &[u8]) -> bool {
        let Ok(parsed) = serde_json::from_slice::<Value>(message) else {
            return false;
        };
        let Some(method) = parsed["method"].as_str() else {
            return false;
        };
        if !LISTENABLE.contains(&method) {
            return false;
        }
        let uri = parsed.pointer("/params/uri").and_then(Value::as_str);
        // Each client's copy names its own listen.
        let mut state = self.lock();
        let mut behind = Vec::new();
        for (key, listener) in &state.listens {
            if !listener.wants.matches(method, uri) {
                continue;
            }
            let Some(event) = for_listen(parsed.clone(), &listener.id) else {
                continue;
            };
            if listener.events.try_send(event).is_err() {
                behind.push(*key);
            }
        }
        for key in behind {
            tracing::debug!("a listen's client fell behind its notifications; ending its stream");
            state.remove(key);
        }
        true
    }

    /// The session's channel ended: every listen ends with an error naming `reason`, and no
    /// new one is taken.
    pub(crate) fn close(&self, reason: &str) {
        let mut state = self.lock();
        state.closed = true;
        for (_, listener) in state.listens.drain() {
            let error = jsonrpc::error_body(Some(&listener.id), INTERNAL_ERROR, reason, None);
            let _ = listener.events.try_send(message_event(&error));
        }
        state.resources.clear();
    }

    /// How many listens are served.
    #[cfg(test)]
    fn listens(&self) -> usize {
        self.lock().listens.len()
    }

    /// Whether the session's channel ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more listen of `uri`; the answer to its subscription, to be had (the first
    /// listen's `resources/subscribe`) or awaited.
    fn hold(&self, uri: &str) -> Arc<OnceCell<bool>> {
        let mut state = self.lock();
        let held = state.resources.entry(uri.to_owned()).or_insert_with(|| Held {
            listens: 0,
            subscribed: Arc::default(),
        });
        held.listens += 1;
        held.subscribed.clone()
    }

    /// Counts one listen fewer of each of `uris`; those no listen holds any more.
    fn release(&self, uris: &[String]) -> Vec<String> {
        let mut state = self.lock();
        state.release(uris)
    }
}

impl State {
    fn release(&mut self, uris: &[String]) -> Vec<String> {
        let mut unheld = Vec::new();
        for uri in uris {
            if let Some(held) = self.resources.get_mut(uri) {
                held.listens -= 1;
                if held.listens == 0 {
                    self.resources.remove(uri);
                    unheld.push(uri.clone());
                }
            }
        }
        unheld
    }

    /// Ends one listen's stream (its sender dropped); its resources stay counted until its
    /// [`Listening`] goes.
    fn remove(&mut self, key: u64) {
        self.listens.remove(&key);
    }
}

/// The key of a [`Listening`] not yet among the hub's listens (keys start at 1).
const NOT_LISTENING: u64 = 0;

/// A listen's place in its hub, held by its stream: dropping it (the client went away, or the
/// stream ended) releases its resources, unsubscribing those no other listen holds.
struct Listening {
    hub: Arc<Hub>,
    key: u64,
    uris: Vec<String>,
    subscriber: Subscriber,
    _holds: Box<dyn Send + Sync>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let unheld = {
            let mut state = self.hub.lock();
            state.remove(self.key);
            state.release(&self.uris)
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for uri in unheld {
            runtime.spawn((self.subscriber)("resources/unsubscribe", uri));
        }
    }
}

/// Serves the `subscriptions/listen` request `id` (raw JSON), whose body is `request` (its
/// filter is `params.notifications`), from `hub`, whose session `offers` what [`Offers::of_discover`] says and
/// takes subscriptions through `subscriber`; the stream keeps `holds` (what keeps the session
/// open) until it ends.
pub(crate) async fn listen(
    hub: &Arc<Hub>,
    offers: Offers,
    id: &str,
    request: &[u8],
    subscriber: Subscriber,
    holds: Box<dyn Send + Sync>,
) -> Response<ProxyBody> {
    let refuse = |code: i64, message: &str| {
        json_answer(StatusCode::OK, jsonrpc::error_body(Some(id), code, message, None))
    };
    let filter = serde_json::from_slice::<Value>(request)
        .ok()
        .and_then(|mut r| r.pointer_mut("/params/notifications").map(Value::take));
    let Some(wants) = filter.as_ref().and_then(Wants::of_filter) else {
        return refuse(INVALID_PARAMS, "params.notifications must be an object");
    };
    if wants.uris.len() > MAX_RESOURCES {
        let message = format!("At most {MAX_RESOURCES} resources per subscription");
        return refuse(INVALID_PARAMS, &message);
    }
    let mut accepted = Wants {
        tools: wants.tools && offers.tools,
        prompts: wants.prompts && offers.prompts,
        resources: wants.resources && offers.resources,
        uris: Vec::new(),
    };
    // Held from the first subscription on, so that whatever ends this listen (a refusal below,
    // the client going away mid-subscribe, its stream's end) releases what it holds.
    let mut listening = Listening {
        hub: hub.clone(),
        key: NOT_LISTENING,
        uris: Vec::new(),
        subscriber,
        _holds: holds,
    };
    if offers.subscribe {
        for uri in wants.uris {
            let subscribed = hub.hold(&uri);
            listening.uris.push(uri.clone());
            let subscribe = || (listening.subscriber)("resources/subscribe", uri.clone());
            if !*subscribed.get_or_init(subscribe).await {
                listening.uris.pop();
                hub.release(std::slice::from_ref(&uri));
            }
        }
    }
    accepted.uris = listening.uris.clone();
    let (events, receiver) = mpsc::channel(QUEUE + 1);
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "notifications": accepted.to_filter() },
    });
    let Some(ack) = for_listen(ack, id) else {
        return refuse(INVALID_PARAMS, "Invalid request id");
    };
    let _ = events.try_send(ack);
    {
        let mut state = hub.lock();
        let refused = if state.closed {
            Some("The backend's session ended")
        } else if state.listens.len() >= MAX_LISTENS {
            Some("Too many subscriptions in this backend session")
        } else {
            None
        };
        if let Some(message) = refused {
            drop(state);
            return refuse(INTERNAL_ERROR, message);
        }
        state.next += 1;
        listening.key = state.next;
        state.listens.insert(
            listening.key,
            Listener {
                id: id.into(),
                wants: accepted,
                events,
            },
        );
    }
    let body = EventsBody::new(receiver, Box::new(listening)).keep_alive();
    let mut response = Response::new(boxed(body));
    set_stream_headers(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt;

    use super::*;

    /// A subscriber that takes every URI but `refused://`, counting what it was sent.
    fn counting() -> (Subscriber, Arc<Mutex<Vec<String>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        let subscriber: Subscriber = Arc::new(move |method, uri: String| {
            log.lock().unwrap().push(format!("{method} {uri}"));
            Box::pin(async move { !uri.starts_with("refused://") })
        });
        (subscriber, sent)
    }

    async fn next_event(body: &mut ProxyBody) -> Option<Value> {
        let frame = body.frame().await?.ok()?.into_data().ok()?;
        let text = std::str::from_utf8(&frame).ok()?;
        let data: String = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
        serde_json::from_str(&data).ok()
    }

    /// A `subscriptions/listen` request body with `filter` as its `params.notifications`.
    fn request(filter: Value) -> Vec<u8> {
        let request = json!({ "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": { "notifications": filter } });
        request.to_string().into_bytes()
    }

    fn offers() -> Offers {
        Offers::of_discover(&json!({ "capabilities": {
            "tools": { "listChanged": true }, "resources": { "subscribe": true } } }))
    }

    #[tokio::test]
    async fn a_listen_is_acknowledged_with_what_was_accepted_then_gets_what_it_asked_for() {
        let hub = Arc::new(Hub::default());
        let (subscriber, sent) = counting();
        let filter = request(json!({ "toolsListChanged": true, "promptsListChanged": true,
            "resourceSubscriptions": ["a://1", "refused://2"] }));
        let answer = listen(&hub, offers(), "7", &filter, subscriber, Box::new(())).await;
        let mut body = answer.into_body();
        let ack = next_event(&mut body).await.unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(
            ack["params"],
            json!({ "notifications": { "toolsListChanged": true, "resourceSubscriptions": ["a://1"] },
                "_meta": { SUBSCRIPTION_ID: 7 } })
        );
        // Neither a prompt change (not offered), nor another resource's update, nor a log line.
        for message in [
            r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"b://1"}}"#,
        ] {
            assert!(hub.deliver(message.as_bytes()));
        }
        assert!(!hub.deliver(br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#));
        assert!(hub.deliver(
            br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://1"}}"#
        ));
        let update = next_event(&mut body).await.unwrap();
        assert_eq!(
            update["params"],
            json!({ "uri": "a://1", "_meta": { SUBSCRIPTION_ID: 7 } })
        );
        assert!(hub.deliver(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#));
        let change = next_event(&mut body).await.unwrap();
        assert_eq!(change["method"], "notifications/tools/list_changed");
        assert_eq!(
            *sent.lock().unwrap(),
            ["resources/subscribe a://1", "resources/subscribe refused://2"]
        );
    }

    #[tokio::test]
    async fn subscriptions_are_counted_across_listens_and_released_by_the_last() {
        let hub = Arc::new(Hub::default());
        let (subscriber, sent) = counting();
        let filter = request(json!({ "resourceSubscriptions": ["a://1"] }));
        let first = listen(&hub, offers(), "1", &filter, subscriber.clone(), Box::new(())).await;
        let second = listen(&hub, offers(), "\"two\"", &filter, subscriber, Box::new(())).await;
        let (mut first, mut second) = (first.into_body(), second.into_body());
        next_event(&mut first).await.unwrap();
        let ack = next_event(&mut second).await.unwrap();
        assert_eq!(
            ack["params"]["notifications"]["resourceSubscriptions"],
            json!(["a://1"])
        );
        assert_eq!(*sent.lock().unwrap(), ["resources/subscribe a://1"]);
        // Each listen's copy names its own request.
        hub.deliver(
            br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://1"}}"#,
        );
        assert_eq!(
            next_event(&mut first).await.unwrap()["params"]["_meta"][SUBSCRIPTION_ID],
            1
        );
        assert_eq!(
            next_event(&mut second).await.unwrap()["params"]["_meta"][SUBSCRIPTION_ID],
            "two"
        );
        drop(first);
        tokio::task::yield_now().await;
        assert_eq!(sent.lock().unwrap().len(), 1, "another listen still holds it");
        drop(second);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            *sent.lock().unwrap(),
            ["resources/subscribe a://1", "resources/unsubscribe a://1"]
        );
        assert_eq!(hub.listens(), 0);
    }

    #[tokio::test]
    async fn a_closed_session_ends_every_listen_with_an_error_and_takes_no_new_one() {
        let hub = Arc::new(Hub::default());
        let (subscriber, _) = counting();
        let filter = request(json!({ "toolsListChanged": true }));
        let answer = listen(&hub, offers(), "3", &filter, subscriber.clone(), Box::new(())).await;
        let mut body = answer.into_body();
        next_event(&mut body).await.unwrap();
        hub.close("The backend's notification stream ended");
        let end = next_event(&mut body).await.unwrap();
        assert_eq!(
            (end["id"].clone(), end["error"]["code"].clone()),
            (json!(3), json!(INTERNAL_ERROR))
        );
        assert!(body.frame().await.is_none(), "the stream ends after the error");
        let refused = listen(&hub, offers(), "4", &filter, subscriber, Box::new(())).await;
        let refused: Value =
            serde_json::from_slice(&refused.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(refused["error"]["message"], "The backend's session ended");
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_is_ended_not_skipped() {
        let hub = Arc::new(Hub::default());
        let (subscriber, _) = counting();
        let filter = request(json!({ "toolsListChanged": true }));
        let answer = listen(&hub, offers(), "5", &filter, subscriber, Box::new(())).await;
        let change = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        for _ in 0..QUEUE + 1 {
            hub.deliver(change);
        }
        assert_eq!(hub.listens(), 0, "ended once its queue was full");
        let events = answer.into_body().collect().await.unwrap().to_bytes();
        let count = events.windows(6).filter(|w| w == b"data: ").count();
        assert_eq!(count, QUEUE + 1, "the acknowledgement and what fit, then the end");
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_listen_waits_for_the_first_ones_subscription_and_a_dropped_one_lets_go() {
        // The backend answers the first resources/subscribe only when told, and refuses it.
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let subscriber: Subscriber = {
            let (gate, calls) = (gate.clone(), calls.clone());
            Arc::new(move |method, uri: String| {
                calls.lock().unwrap().push(format!("{method} {uri}"));
                let gate = gate.clone();
                Box::pin(async move {
                    // Each permit answers one request.
                    if let Ok(permit) = gate.acquire().await {
                        permit.forget();
                    }
                    false
                })
            })
        };
        let hub = Arc::new(Hub::default());
        let filter = request(json!({ "resourceSubscriptions": ["a://1"] }));
        let start = |id: &'static str| {
            let (hub, filter, subscriber) = (hub.clone(), filter.clone(), subscriber.clone());
            tokio::spawn(async move { listen(&hub, offers(), id, &filter, subscriber, Box::new(())).await })
        };
        let (first, second) = (start("1"), start("2"));
        tokio::time::sleep(Duration::from_millis(10)).await;
        gate.add_permits(1);
        for answer in [first.await.unwrap(), second.await.unwrap()] {
            let ack = next_event(&mut answer.into_body()).await.unwrap();
            assert_eq!(
                ack["params"]["notifications"],
                json!({}),
                "refused for both: {ack}"
            );
        }
        assert_eq!(
            *calls.lock().unwrap(),
            ["resources/subscribe a://1"],
            "asked once"
        );
        assert!(hub.lock().resources.is_empty());

        // A listen whose client goes away while its subscription is asked holds nothing after.
        let waiting = listen(&hub, offers(), "3", &filter, subscriber, Box::new(()));
        assert!(
            tokio::time::timeout(Duration::from_millis(10), waiting)
                .await
                .is_err()
        );
        assert!(hub.lock().resources.is_empty(), "released when dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_listen_gets_keep_alive_comments() {
        let hub = Arc::new(Hub::default());
        let (subscriber, _) = counting();
        let filter = request(json!({ "toolsListChanged": true }));
        let mut body = listen(&hub, offers(), "8", &filter, subscriber, Box::new(()))
            .await
            .into_body();
        next_event(&mut body).await.unwrap();
        // The paused clock moves on by itself once nothing else can run.
        let comment = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&comment[..], b": keep-alive\n\n");
        hub.deliver(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#);
        assert_eq!(
            next_event(&mut body).await.unwrap()["method"],
            "notifications/tools/list_changed"
        );
    }

    #[test]
    fn filters_and_offers_are_read_as_the_schema_names_them() {
        let filter = json!({ "toolsListChanged": true, "resourcesListChanged": false,
            "resourceSubscriptions": ["a://1", "a://1", "b://2"] });
        assert_eq!(
            Wants::of_filter(&filter),
            Some(Wants {
                tools: true,
                prompts: false,
                resources: false,
                uris: vec!["a://1".into(), "b://2".into()]
            })
        );
        assert_eq!(Wants::of_filter(&json!({ "resourceSubscriptions": [1] })), None);
        assert_eq!(Wants::of_filter(&json!([])), None);
        assert!(!Offers::of_discover(&json!({ "capabilities": { "resources": {} } })).subscribe);
    }
}
