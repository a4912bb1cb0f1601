//! Backend connections under the faults of issue 15, with real hyper backends on 127.0.0.1:
//!
//! * a backend that closes idle connections after 1 s: a request series whose pauses span the
//!   close gets no 502 (the backend's idle timeout is set below the backend's, as documented);
//! * a backend that dies mid-SSE-stream, or stalls: the client's stream ends with a JSON-RPC
//!   error event for its request and a clean end of the body, through the MRTR layer
//!   (`tools/call`) and around it (`ping`).
//!
//! The restart under continuous keep-alive load is `tests/drain.rs`.

mod common;

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{TIMEOUT, mcp_post};
use futures_util::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use mrtr_gateway::{Backend, GatewayConfig, RunningGateway};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// How the test backend answers `tools/call` and `ping`.
#[derive(Clone, Copy)]
enum Answer {
    /// A JSON result.
    Json,
    /// An SSE stream: a progress notification, then the connection is cut.
    SseThenDie,
    /// An SSE stream: a progress notification, then nothing.
    SseThenStall,
}

type BackendBody =
    Either<Full<Bytes>, StreamBody<futures_util::stream::BoxStream<'static, io::Result<Frame<Bytes>>>>>;

async fn answer(request: Request<Incoming>, answer: Answer) -> Result<Response<BackendBody>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let id = serde_json::from_slice::<Value>(&body)
        .map(|m| m["id"].clone())
        .unwrap_or_default();
    let progress = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";
    let stream = match answer {
        Answer::Json => {
            let result =
                json!({"jsonrpc": "2.0", "id": id, "result": {"content": [], "resultType": "complete"}});
            return Ok(Response::builder()
                .header("content-type", "application/json")
                .body(Either::Left(Full::new(Bytes::from(result.to_string()))))
                .unwrap());
        }
        Answer::SseThenDie => {
            futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(progress.as_bytes())))])
                .chain(futures_util::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(io::Error::other("the backend process died"))
                }))
                .boxed()
        }
        Answer::SseThenStall => {
            futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(progress.as_bytes())))])
                .chain(futures_util::stream::pending())
                .boxed()
        }
    };
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(Either::Right(StreamBody::new(stream)))
        .unwrap())
}

/// Serves `answer` on 127.0.0.1; with `idle_close`, a connection that sends no request head
/// for that long is closed (hyper's header read timeout, which runs while a connection idles).
/// Counts accepted connections.
async fn start_backend(mode: Answer, idle_close: Option<Duration>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(idle_close);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| answer(request, mode));
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (url, connections)
}

async fn gateway(backend: Backend, configure: impl FnOnce(&mut GatewayConfig)) -> RunningGateway {
    let mut config = GatewayConfig::new(vec![backend]);
    configure(&mut config);
    let keyring = tower_mrtr::Keyring::generate("k1").unwrap();
    mrtr_gateway::start(config, keyring, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_backend_closing_idle_connections_after_1_s_causes_no_502() {
    let (url, connections) = start_backend(Answer::Json, Some(Duration::from_secs(1))).await;
    // The remedy the docs give: the gateway's idle timeout for this backend below its own.
    let backend = Backend::new("alpha", &url)
        .unwrap()
        .with_idle_timeout(Duration::from_millis(500));
    let gateway = gateway(backend, |_| {}).await;
    let client = reqwest::Client::new();
    // Pauses on both sides of the gateway's 0.5 s and the backend's 1 s, and right at them.
    let pauses_ms = [0, 100, 450, 550, 950, 1000, 1050, 300, 1300, 200, 990, 1010, 700];
    for (id, pause) in pauses_ms.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let response = mcp_post(
            &client,
            &gateway.url(),
            id as u64,
            "tools/call",
            json!({"name": "echo"}),
        )
        .send()
        .await
        .expect("the gateway answers");
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "request {id} after a {pause} ms pause: {text}");
        assert_eq!(common::message(&text)["id"], id, "{text}");
    }
    // Pauses over 0.5 s opened new connections; shorter ones reused the kept one.
    let opened = connections.load(Ordering::SeqCst);
    assert!(
        (6..pauses_ms.len()).contains(&opened),
        "{opened} backend connections"
    );
    gateway.shutdown().await.unwrap();
}

/// Reads a whole answer through reqwest, which fails on a cut chunked body.
async fn whole_answer(url: &str, id: u64, method: &str, params: Value) -> String {
    let response = mcp_post(&reqwest::Client::new(), url, id, method, params)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(TIMEOUT, body.next())
        .await
        .expect("the stream ends in time")
    {
        let chunk = chunk.expect("the body ends cleanly, not with a cut chunk");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text
}

/// The stream has the backend's progress event, then an error for `id` as its last event.
fn assert_ends_with_error(text: &str, id: u64) {
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 2, "{text:?}");
    assert!(events[0].contains("notifications/progress"), "{text:?}");
    let error: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(error["id"], id, "{text:?}");
    assert_eq!(error["error"]["code"], -32603, "{text:?}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("\"alpha\""),
        "{text:?}"
    );
}

#[tokio::test]
async fn a_backend_dying_mid_stream_ends_the_stream_with_an_error_event() {
    let (url, _) = start_backend(Answer::SseThenDie, None).await;
    let gateway = gateway(Backend::new("alpha", &url).unwrap(), |_| {}).await;
    // Through the MRTR layer's SSE rewriting...
    let text = whole_answer(&gateway.url(), 7, "tools/call", json!({"name": "work"})).await;
    assert_ends_with_error(&text, 7);
    assert!(text.contains("the connection failed"), "{text:?}");
    // ...and a method the layer passes through.
    let text = whole_answer(&gateway.url(), 8, "ping", json!({})).await;
    assert_ends_with_error(&text, 8);
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stalled_backend_stream_ends_with_an_error_event() {
    let (url, _) = start_backend(Answer::SseThenStall, None).await;
    let gateway = gateway(Backend::new("alpha", &url).unwrap(), |config| {
        config.backend_stall_timeout = Duration::from_millis(300);
    })
    .await;
    let text = whole_answer(&gateway.url(), 9, "tools/call", json!({"name": "work"})).await;
    assert_ends_with_error(&text, 9);
    assert!(text.contains("it stalled"), "{text:?}");
    gateway.shutdown().await.unwrap();
}
