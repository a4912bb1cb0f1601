//! The shared listens' tests: keys, events rewritten per listen, and a backend stream shared,
//! refused and closed.

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::*;
use crate::upstream::sse::EventsBody;

fn key(principal: Option<&str>, headers: &[(&str, &str)], body: &Value) -> Option<Key> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    Key::of("lists", principal, &map, body.to_string().as_bytes())
}

fn listen(id: Value, filter: Value, meta: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": { "notifications": filter, "_meta": meta } })
}

#[test]
fn listens_share_when_the_backend_would_see_the_same_request() {
    let tools = json!({ "toolsListChanged": true });
    let meta = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28" });
    let traced =
        json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "traceparent": "00-ab-cd-01" });
    let headers = [
        ("mcp-method", "subscriptions/listen"),
        ("authorization", "Bearer a"),
    ];
    let first = key(
        Some("ann"),
        &headers,
        &listen(json!(1), tools.clone(), meta.clone()),
    );
    assert!(first.is_some());
    // Another id, trace context, credentials, proxy-added headers and header order: the same
    // request.
    let other_headers = [
        ("traceparent", "00-ef-01-01"),
        ("authorization", "Bearer b"),
        ("x-forwarded-for", "203.0.113.9"),
        ("mcp-method", "subscriptions/listen"),
    ];
    assert_eq!(
        first,
        key(
            Some("ann"),
            &other_headers,
            &listen(json!("x"), tools.clone(), traced)
        )
    );
    // Another principal, filter, header value or `_meta` member: not.
    assert_ne!(
        first,
        key(
            Some("bob"),
            &headers,
            &listen(json!(1), tools.clone(), meta.clone())
        )
    );
    assert_ne!(
        first,
        key(None, &headers, &listen(json!(1), tools.clone(), meta.clone()))
    );
    let prompts = json!({ "toolsListChanged": true, "promptsListChanged": true });
    assert_ne!(
        first,
        key(Some("ann"), &headers, &listen(json!(1), prompts, meta.clone()))
    );
    let tenant = [("mcp-method", "subscriptions/listen"), ("x-tenant", "t2")];
    assert_ne!(
        first,
        key(Some("ann"), &tenant, &listen(json!(1), tools.clone(), meta))
    );
    let level = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/logLevel": "debug" });
    assert_ne!(first, key(Some("ann"), &headers, &listen(json!(1), tools, level)));
    // Resource subscriptions and tasks: sent alone.
    let watched = json!({ "toolsListChanged": true, "resourceSubscriptions": ["a://1"] });
    assert_eq!(key(None, &headers, &listen(json!(1), watched, json!({}))), None);
    assert_eq!(
        key(
            None,
            &headers,
            &listen(json!(1), json!({ "taskIds": ["t"] }), json!({}))
        ),
        None
    );
    // Not a request this reads: sent alone.
    assert_eq!(key(None, &headers, &json!({ "id": 1 })), None);
    assert_eq!(key(None, &headers, &json!([1])), None);
}

fn text(event: &Bytes) -> Value {
    let text = std::str::from_utf8(event).unwrap();
    let data = text
        .strip_prefix("event: message\ndata: ")
        .and_then(|t| t.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("not one event: {text:?}"));
    assert!(!data.contains('\n'), "{text:?}");
    serde_json::from_str(data).unwrap()
}

#[test]
fn each_listen_gets_each_event_with_its_own_id() {
    let changed = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}"#;
    let (event, kind) = Event::of(changed);
    assert_eq!(kind, Kind::Other);
    let mine = text(&event.for_listen(r#""b-7""#));
    assert_eq!(mine["params"]["_meta"][SUBSCRIPTION_ID], "b-7");
    assert_eq!(mine["method"], "notifications/tools/list_changed");
    assert_eq!(
        text(&event.for_listen("1")),
        serde_json::from_slice::<Value>(changed).unwrap()
    );
    // Written over several lines: one line, the same message.
    let ack = "{\"jsonrpc\":\"2.0\",\r\n\"method\":\"notifications/subscriptions/acknowledged\",\n\"params\":{\"notifications\":{\"toolsListChanged\":true},\"_meta\":{\"io.modelcontextprotocol/subscriptionId\" : 1}}}";
    let (event, kind) = Event::of(ack.as_bytes());
    assert_eq!(kind, Kind::Ack);
    let mine = text(&event.for_listen("42"));
    assert_eq!(mine["params"]["_meta"][SUBSCRIPTION_ID], 42);
    assert_eq!(
        mine["params"]["notifications"],
        json!({ "toolsListChanged": true })
    );
    // The last response, by its id.
    let (event, kind) = Event::of(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    assert_eq!(kind, Kind::Response);
    assert_eq!(text(&event.for_listen(r#""z""#))["id"], "z");
    // Without an id of the listen's, or not JSON: as it came.
    let (event, kind) = Event::of(br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
    assert_eq!(kind, Kind::Other);
    assert_eq!(event.for_listen("5"), event.for_listen("6"));
    let (event, _) = Event::of(b"not json");
    assert_eq!(&event.for_listen("5")[..], b"event: message\ndata: not json\n\n");
}

/// A backend's answer: an SSE stream of what the test sends on the returned sender.
fn backend_stream() -> (mpsc::Sender<Bytes>, Response<ProxyBody>) {
    let (sender, receiver) = mpsc::channel(8);
    let mut answer = Response::new(boxed(EventsBody::new(receiver, Box::new(()))));
    crate::upstream::sse::set_stream_headers(answer.headers_mut());
    answer
        .headers_mut()
        .insert("x-request-id", HeaderValue::from_static("the-first-clients"));
    (sender, answer)
}

fn sse(json: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {json}\n\n"))
}

async fn next(body: &mut ProxyBody) -> Value {
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
    let frame = frame.expect("an event in time").expect("an event").unwrap();
    text(&frame.into_data().unwrap())
}

/// The key of a listen of `filter`, with no principal and no headers.
fn plain_key(filter: Value) -> Key {
    key(None, &[], &listen(json!(1), filter, json!({}))).unwrap()
}

/// `key` joined as listen `1`, the first: its lead.
async fn lead_of(listens: &Listens, key: &Key) -> Lead {
    match listens.join(key.clone(), "1", Duration::from_secs(5)).await {
        Joined::Lead(lead) => lead,
        _ => panic!("the first leads"),
    }
}

async fn ended(body: &mut ProxyBody) -> bool {
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
    frame.expect("the end in time").is_none()
}

#[tokio::test]
async fn one_backend_listen_serves_every_client_that_asks_alike() {
    let listens = Arc::new(Listens::default());
    let key = plain_key(json!({ "toolsListChanged": true }));
    let lead = lead_of(&listens, &key).await;
    // A second client waits for the backend's answer to the first.
    let waiting = tokio::spawn({
        let (listens, key) = (listens.clone(), key.clone());
        async move { listens.join(key, r#""two""#, Duration::from_secs(5)).await }
    });
    tokio::task::yield_now().await;
    let (backend, answer) = backend_stream();
    let mut first = lead.opened(answer).into_body();
    let Joined::Stream(second) = waiting.await.unwrap() else {
        panic!("the second shares")
    };
    // The backend's headers, but not the first request's id.
    assert_eq!(second.headers()["content-type"], "text/event-stream");
    assert_eq!(second.headers().get("x-request-id"), None);
    let mut second = second.into_body();
    assert_eq!(listens.len(), 1);
    let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}"#;
    backend.send(sse(ack)).await.unwrap();
    assert_eq!(next(&mut first).await["params"]["_meta"][SUBSCRIPTION_ID], 1);
    assert_eq!(next(&mut second).await["params"]["_meta"][SUBSCRIPTION_ID], "two");
    // A later client gets the acknowledgement first, then what comes after.
    let Joined::Stream(third) = listens.join(key.clone(), "3", Duration::from_secs(5)).await else {
        panic!("the third shares")
    };
    let mut third = third.into_body();
    let third_ack = next(&mut third).await;
    assert_eq!(third_ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(third_ack["params"]["_meta"][SUBSCRIPTION_ID], 3);
    let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}"#;
    backend.send(sse(changed)).await.unwrap();
    for (body, id) in [
        (&mut first, json!(1)),
        (&mut second, json!("two")),
        (&mut third, json!(3)),
    ] {
        let event = next(body).await;
        assert_eq!(event["method"], "notifications/tools/list_changed");
        assert_eq!(event["params"]["_meta"][SUBSCRIPTION_ID], id);
    }
    // The backend's last response goes to each with its id, and every stream ends.
    backend
        .send(sse(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#))
        .await
        .unwrap();
    for (body, id) in [
        (&mut first, json!(1)),
        (&mut second, json!("two")),
        (&mut third, json!(3)),
    ] {
        assert_eq!(next(body).await["id"], id);
        assert!(ended(body).await);
    }
    // The next listen opens afresh.
    assert!(matches!(
        listens.join(key, "4", Duration::from_secs(5)).await,
        Joined::Lead(_)
    ));
}

#[tokio::test]
async fn the_last_client_going_away_closes_the_backend_stream() {
    let listens = Listens::default();
    let key = plain_key(json!({ "toolsListChanged": true }));
    let lead = lead_of(&listens, &key).await;
    let (backend, answer) = backend_stream();
    let first = lead.opened(answer);
    let Joined::Stream(second) = listens.join(key.clone(), "2", Duration::from_secs(5)).await else {
        panic!("the second shares")
    };
    drop(first);
    tokio::task::yield_now().await;
    assert!(!backend.is_closed(), "one client still listens");
    drop(second);
    tokio::time::timeout(Duration::from_secs(5), backend.closed())
        .await
        .expect("the backend's stream dropped");
    // Its key went with it (a gateway sees many keys over its life).
    assert_eq!(listens.len(), 0);
    assert!(matches!(
        listens.join(key, "3", Duration::from_secs(5)).await,
        Joined::Lead(_)
    ));
}

#[tokio::test]
async fn a_refusal_is_the_first_clients_and_the_others_are_sent_alone() {
    let listens = Arc::new(Listens::default());
    let key = plain_key(json!({ "promptsListChanged": true }));
    let lead = lead_of(&listens, &key).await;
    let waiting = tokio::spawn({
        let (listens, key) = (listens.clone(), key.clone());
        async move { listens.join(key, "2", Duration::from_secs(5)).await }
    });
    tokio::task::yield_now().await;
    let refusal = crate::upstream::http::body::json(
        StatusCode::BAD_REQUEST,
        jsonrpc::error_body(Some("1"), -32021, "no", None),
    );
    let answer = lead.opened(refusal);
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert!(matches!(waiting.await.unwrap(), Joined::Alone));
    // A lead dropped before any answer (its client went away) is no refusal of the next.
    let Joined::Lead(lead) = listens.join(key.clone(), "3", Duration::from_secs(5)).await else {
        panic!("the next leads afresh")
    };
    drop(lead);
    assert!(matches!(
        listens.join(key, "4", Duration::from_secs(5)).await,
        Joined::Lead(_)
    ));
}

#[tokio::test]
async fn a_client_queue_events_behind_is_ended_and_the_others_go_on() {
    let shared = Shared {
        backend: "b".into(),
        state: Mutex::new(State::default()),
        phase: watch::channel(Phase::Open).0,
        _gone: oneshot::channel().0,
    };
    let mut reading = shared.add("1");
    let mut behind = shared.add("2");
    let changed = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":0}}}"#;
    for _ in 0..QUEUE {
        assert!(shared.deliver(changed));
        assert!(reading.next().await.is_some());
    }
    // One more than the second client has room for: it is let go, the first gets it.
    assert!(shared.deliver(changed));
    assert_eq!(lock(&shared.state).listeners.len(), 1);
    assert!(reading.next().await.is_some());
    // What was queued for the one let go is still its to read, then its stream ends.
    for _ in 0..QUEUE {
        let event = behind.next().await.expect("a queued event");
        assert_eq!(text(&event)["params"]["_meta"][SUBSCRIPTION_ID], 2);
    }
    assert_eq!(behind.next().await, None);
}
