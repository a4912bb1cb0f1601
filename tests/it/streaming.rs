//! SSE answers stream through the gateway event by event (nothing waits for the end of the
//! stream), and a client that hangs up cancels the backend's stream.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{EventStream, body, mcp_headers};
use mrtr_test_support::wait::TIMEOUT;
use serde_json::json;
use tokio::sync::mpsc;

type Slot = Arc<Mutex<Option<mpsc::Sender<Result<Bytes, Infallible>>>>>;

/// A backend that answers every POST with an SSE stream whose first event is a progress
/// notification; the test writes the rest through the sender left in `slot`.
async fn held_stream(State(slot): State<Slot>) -> Response {
    let (tx, rx) = mpsc::channel(8);
    let progress = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";
    tx.try_send(Ok(Bytes::from_static(progress.as_bytes()))).unwrap();
    *slot.lock().unwrap() = Some(tx);
    sse_response(rx)
}

/// An SSE answer whose body is what arrives on `rx`.
fn sse_response(rx: mpsc::Receiver<Result<Bytes, Infallible>>) -> Response {
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Serves `app` on 127.0.0.1; its `/mcp` URL.
async fn serve_app(app: Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

async fn start_backend() -> anyhow::Result<(String, Slot)> {
    let slot: Slot = Arc::default();
    let app = Router::new()
        .route("/mcp", post(held_stream))
        .with_state(slot.clone());
    Ok((serve_app(app).await?, slot))
}

fn sender(slot: &Slot) -> mpsc::Sender<Result<Bytes, Infallible>> {
    slot.lock().unwrap().clone().expect("the backend was called")
}

async fn call(url: &str) -> anyhow::Result<reqwest::Response> {
    let mut request = reqwest::Client::new().post(url);
    for (name, value) in mcp_headers("tools/call") {
        request = request.header(name, value);
    }
    let body = body(9, "tools/call", json!({"name": "slow", "arguments": {}}));
    Ok(tokio::time::timeout(TIMEOUT, request.header("mcp-name", "slow").body(body).send()).await??)
}

#[tokio::test]
async fn sse_events_stream_through_before_the_result_exists() -> anyhow::Result<()> {
    let (backend_url, slot) = start_backend().await?;
    let config = GatewayConfig::new(vec![Backend::new("slow", &backend_url)?]);
    let gw = gateway(config, keyring()).await?;

    let response = call(&gw.url()).await?;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    // The progress event arrives while the backend has not produced a result yet.
    let first = tokio::time::timeout(TIMEOUT, stream.next())
        .await?
        .expect("an event")?;
    assert!(
        std::str::from_utf8(&first)?.contains("notifications/progress"),
        "{first:?}"
    );

    let result = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{\"ok\":{\"method\":\"elicitation/create\",\"params\":{\"mode\":\"form\",\"message\":\"Sure?\",\"requestedSchema\":{\"type\":\"object\",\"properties\":{}}}}},\"requestState\":\"backend-secret\"}}\n\n";
    let tx = sender(&slot);
    tx.send(Ok(Bytes::from_static(result.as_bytes()))).await?;
    drop(tx);
    slot.lock().unwrap().take();
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(TIMEOUT, stream.next()).await? {
        rest.extend_from_slice(&chunk?);
    }
    let rest = String::from_utf8(rest)?;
    assert!(rest.contains("\"requestState\":\"mrtr4."), "not sealed: {rest}");
    assert!(!rest.contains("backend-secret"), "backend state leaked: {rest}");
    gw.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_client_hanging_up_cancels_the_backend_stream() -> anyhow::Result<()> {
    let (backend_url, slot) = start_backend().await?;
    let config = GatewayConfig::new(vec![Backend::new("slow", &backend_url)?]);
    let gw = gateway(config, keyring()).await?;

    let response = call(&gw.url()).await?;
    let mut stream = response.bytes_stream();
    tokio::time::timeout(TIMEOUT, stream.next())
        .await?
        .expect("an event")?;
    let tx = sender(&slot);
    slot.lock().unwrap().take();
    drop(stream);
    // The gateway drops its backend request, so the backend's stream loses its reader.
    tokio::time::timeout(Duration::from_secs(5), tx.closed()).await?;
    gw.shutdown().await?;
    Ok(())
}

/// What a listening backend was asked, and the sender of each listen stream, in order.
type Listening = Arc<Mutex<Vec<(serde_json::Value, mpsc::Sender<Result<Bytes, Infallible>>)>>>;

/// A backend whose `subscriptions/listen` is acknowledged as taking list changes of tools
/// (under the listen's id, as `_meta`'s subscription id), and held open for the test to write
/// to (through `listening`, which also keeps the request); any other request gets `-32601` (so
/// catalog refreshes fail fast).
async fn listening_backend(State(listening): State<Listening>, body: Bytes) -> Response {
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if request["method"] != "subscriptions/listen" {
        let error = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "Method not found"}});
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(error.to_string()))
            .unwrap();
    }
    let (tx, rx) = mpsc::channel(8);
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"toolsListChanged": true},
            "_meta": {"io.modelcontextprotocol/subscriptionId": request["id"]}}});
    tx.try_send(Ok(Bytes::from(format!("event: message\ndata: {ack}\n\n"))))
        .unwrap();
    listening.lock().unwrap().push((request, tx));
    sse_response(rx)
}

/// A [`listening_backend`] on 127.0.0.1: what it is asked, and its `/mcp` URL.
async fn start_listening_backend() -> anyhow::Result<(Listening, String)> {
    let listening: Listening = Arc::default();
    let app = Router::new()
        .route("/mcp", post(listening_backend))
        .with_state(listening.clone());
    Ok((listening, serve_app(app).await?))
}

#[tokio::test]
async fn a_listen_across_two_backends_is_one_stream_with_one_acknowledgement() -> anyhow::Result<()> {
    use mrtr_backends::{ResponseMode, SuiteFixture, serve};
    let fixture = serve(SuiteFixture::new()?, ResponseMode::Sse).await?;
    let (listening, listening_url) = start_listening_backend().await?;
    let gateway = gateway(
        GatewayConfig::new(vec![
            Backend::new("fixture", &fixture.url())?,
            Backend::new("lists", &listening_url)?,
        ]),
        keyring(),
    )
    .await?;
    // List changes go to both backends, the resource to the one owning it (the fixture): two
    // streams, merged.
    let listen = body(
        7,
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true, "resourceSubscriptions": ["test://watched-resource"] } }),
    );
    let mut request = reqwest::Client::new().post(gateway.url());
    for (name, value) in mcp_headers("subscriptions/listen") {
        request = request.header(name, value);
    }
    let response = request.body(listen).send().await?;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()?
            .starts_with("text/event-stream"),
        "{:?}",
        response.headers()
    );
    let mut events = EventStream::of(response);
    // One acknowledgement of what either accepted: the fixture the resource, the other backend
    // the list changes (neither accepted both).
    let ack = events.next().await?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://watched-resource"]),
        "{ack}"
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true, "{ack}");
    // The second backend was asked for what concerns it alone: no resource it does not own.
    let (asked, sender) = listening.lock().unwrap()[0].clone();
    assert_eq!(
        asked["params"]["notifications"],
        json!({ "toolsListChanged": true })
    );
    // Then both backends' events, the next acknowledgement never among them.
    let update = events.next().await?;
    assert_eq!(update["method"], "notifications/resources/updated", "{update}");
    assert_eq!(update["params"]["uri"], "test://watched-resource");
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    sender
        .send(Ok(Bytes::from(format!("event: message\ndata: {changed}\n\n"))))
        .await?;
    let next = events.next().await?;
    assert_eq!(next, changed);
    drop(events);
    gateway.shutdown().await?;
    fixture.shutdown().await?;
    Ok(())
}

/// A listen of `filter` through `gateway` as request `id`, sent by `client`: its stream,
/// acknowledged.
async fn listen_through(
    client: &reqwest::Client,
    gateway: &str,
    id: u64,
    filter: serde_json::Value,
) -> anyhow::Result<EventStream> {
    let mut request = client.post(gateway);
    for (name, value) in mcp_headers("subscriptions/listen") {
        request = request.header(name, value);
    }
    let listen = body(id, "subscriptions/listen", json!({ "notifications": filter }));
    let response = tokio::time::timeout(TIMEOUT, request.body(listen).send()).await??;
    assert_eq!(response.status(), 200);
    let mut events = EventStream::of(response);
    let ack = events.next().await?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], id,
        "{ack}"
    );
    Ok(events)
}

#[tokio::test]
async fn clients_that_listen_alike_share_one_backend_listen_each_under_its_own_id() -> anyhow::Result<()> {
    let (listening, backend_url) = start_listening_backend().await?;
    let gateway = gateway(
        GatewayConfig::new(vec![Backend::new("lists", &backend_url)?]),
        keyring(),
    )
    .await?;
    let tools = json!({ "toolsListChanged": true });
    let client = reqwest::Client::new();
    let mut clients = Vec::new();
    for id in [7, 8, 9] {
        clients.push((
            id,
            listen_through(&client, &gateway.url(), id, tools.clone()).await?,
        ));
    }
    // Three clients, one listen of the backend's.
    assert_eq!(listening.lock().unwrap().len(), 1);
    // Another filter is another request: a listen of its own.
    let prompts = listen_through(&client, &gateway.url(), 10, json!({ "promptsListChanged": true })).await?;
    assert_eq!(listening.lock().unwrap().len(), 2);
    let (asked, sender) = listening.lock().unwrap()[0].clone();
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": asked["id"]}}});
    sender
        .send(Ok(Bytes::from(format!("event: message\ndata: {changed}\n\n"))))
        .await?;
    for (id, events) in &mut clients {
        let event = events.next().await?;
        assert_eq!(event["method"], "notifications/tools/list_changed", "{event}");
        assert_eq!(
            event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], *id,
            "{event}"
        );
    }
    // The backend's stream stays open while one client listens, and closes with the last.
    clients.truncate(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!sender.is_closed(), "a client still listens");
    clients.clear();
    tokio::time::timeout(Duration::from_secs(5), sender.closed()).await?;
    drop(prompts);
    gateway.shutdown().await?;
    Ok(())
}

/// Listens on one HTTP/2 connection (whose streams' frames the gateway writes together,
/// `serve/gather.rs`): each notification reaches every listen, whole, under its own id, in order.
#[tokio::test]
async fn listens_sharing_one_http2_connection_each_get_every_notification() -> anyhow::Result<()> {
    let (listening, backend_url) = start_listening_backend().await?;
    let gateway = gateway(
        GatewayConfig::new(vec![Backend::new("lists", &backend_url)?]),
        keyring(),
    )
    .await?;
    // Prior knowledge: this client speaks nothing but HTTP/2, over one connection.
    let client = reqwest::Client::builder().http2_prior_knowledge().build()?;
    let tools = json!({ "toolsListChanged": true });
    let mut clients = Vec::new();
    for id in 1..=32 {
        clients.push((
            id,
            listen_through(&client, &gateway.url(), id, tools.clone()).await?,
        ));
    }
    let (asked, sender) = listening.lock().unwrap()[0].clone();
    for round in 0..3 {
        // Long enough that h2 sends each as a frame of its own, not copied into its buffer.
        let padding = "x".repeat(300 + round);
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": asked["id"]}, "padding": padding}});
        sender
            .send(Ok(Bytes::from(format!("event: message\ndata: {changed}\n\n"))))
            .await?;
        for (id, events) in &mut clients {
            let event = events.next().await?;
            assert_eq!(
                event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], *id,
                "{event}"
            );
            assert_eq!(event["params"]["padding"], padding, "round {round}: {event}");
        }
    }
    clients.clear();
    tokio::time::timeout(Duration::from_secs(5), sender.closed()).await?;
    gateway.shutdown().await?;
    Ok(())
}
