//! The gateway's HTTP layers over real HTTP on 127.0.0.1 (see `src/front/http_layers.rs`): gzip
//! request bodies are inspected and relayed, a gzip bomb is stopped at the body limit, and a
//! request id travels from the client to the backend and back.

use std::io::Write;
use std::sync::{Arc, Mutex};

use flate2::Compression;
use flate2::write::GzEncoder;
use http::HeaderMap;
use mrtr_backends::{DemoBackend, ResponseMode, serve};
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::backends::{Stack, delete_branch, delete_branch_retry};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{body, mcp_post, message};
use serde_json::{Value, json};

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// POSTs a `tools/call` with `params` (gzip-encoded if asked); returns the status, the headers
/// and the JSON-RPC message.
async fn post(
    url: &str,
    id: u64,
    params: Value,
    gzipped: bool,
    extra: &[(&str, &str)],
) -> (u16, HeaderMap, Value) {
    let mut request = mcp_post(&reqwest::Client::new(), url, id, "tools/call", params.clone());
    if gzipped {
        let body = gzip(body(id, "tools/call", params).as_bytes());
        request = request.header("content-encoding", "gzip").body(body);
    }
    for (header, value) in extra {
        request = request.header(*header, *value);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    (status, headers, message(&response.text().await.unwrap()).unwrap())
}

#[tokio::test]
async fn gzip_requests_are_inspected_and_relayed() {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await.unwrap();
    let config = GatewayConfig::new(vec![
        Backend::new("alpha", &alpha.url()).unwrap(),
        Backend::new("beta", &beta.url()).unwrap(),
    ]);
    let gateway = gateway(config, keyring()).await.unwrap();
    let url = gateway.url();

    let name = "beta__delete_branch";
    let (status, _, first) = post(&url, 1, delete_branch(name), true, &[]).await;
    assert_eq!(status, 200, "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert!(state.starts_with("mrtr4."), "{first}");

    // A tampered envelope in a gzip body is read and refused, not passed to beta unread.
    let before = beta.requests();
    let middle = state.len() / 2;
    let flipped = if &state[middle..=middle] == "A" { "B" } else { "A" };
    let tampered = format!("{}{flipped}{}", &state[..middle], &state[middle + 1..]);
    let retry = delete_branch_retry(name, &tampered);
    let (_, _, refused) = post(&url, 2, retry, true, &[]).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(beta.requests(), before);

    // The genuine retry, gzip-encoded: opened, restored and pinned to beta.
    let (_, _, done) = post(&url, 3, delete_branch_retry(name, &state), true, &[]).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[beta]")
    );

    gateway.shutdown().await.unwrap();
    alpha.shutdown().await.unwrap();
    beta.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_gzip_bomb_is_refused_at_the_body_limit() {
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let config = GatewayConfig::new(vec![Backend::new("alpha", &alpha.url()).unwrap()]);
    let limit = config.settings.max_request_body;
    let gateway = gateway(config, keyring()).await.unwrap();

    // 16 times the limit once decoded, a few KiB on the wire.
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder
        .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""#)
        .unwrap();
    let filler = vec![b'a'; limit];
    for _ in 0..16 {
        encoder.write_all(&filler).unwrap();
    }
    encoder.write_all(br#""}}"#).unwrap();
    let bomb = encoder.finish().unwrap();
    assert!(bomb.len() < limit / 16);

    let client = reqwest::Client::new();
    let request = mcp_post(&client, &gateway.url(), 1, "tools/call", json!({ "name": "" }));
    let response = request
        .header("content-encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let answer = message(&response.text().await.unwrap()).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(alpha.requests(), 0, "nothing reached the backend");

    gateway.shutdown().await.unwrap();
    alpha.shutdown().await.unwrap();
}

/// A backend that answers every `tools/call` at once and records the request ids it was sent.
async fn recording_backend() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let record = record.clone();
            async move {
                let id = headers
                    .get("x-request-id")
                    .map(|v| v.to_str().unwrap().to_owned());
                record.lock().unwrap().push(id.unwrap_or_default());
                let request: Value = serde_json::from_str(&body).unwrap();
                let answer = json!({ "jsonrpc": "2.0", "id": request["id"], "result": { "content": [] } });
                ([("content-type", "application/json")], answer.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test]
async fn a_request_id_travels_to_the_backend_and_back() {
    let (backend, seen) = recording_backend().await;
    let config = GatewayConfig::new(vec![Backend::new("only", &backend).unwrap()]);
    let gateway = gateway(config, keyring()).await.unwrap();
    let url = gateway.url();

    // The client's own id is kept.
    let call = || json!({ "name": "t" });
    let (status, headers, _) = post(&url, 1, call(), false, &[("x-request-id", "client-7")]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-request-id"], "client-7");

    // Without one, the gateway makes one: the same at the backend and in the answer.
    let (_, headers, _) = post(&url, 2, call(), false, &[]).await;
    let made = headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(
        made.len() == 32 && made.bytes().all(|b| b.is_ascii_hexdigit()),
        "32 hex digits: {made}"
    );
    // Another request, another id, from the same replica (the first half).
    let (_, headers, _) = post(&url, 3, call(), false, &[]).await;
    let next = headers["x-request-id"].to_str().unwrap().to_owned();
    assert_ne!(next, made);
    assert_eq!(next[..16], made[..16]);
    assert_eq!(*seen.lock().unwrap(), ["client-7".to_owned(), made, next]);

    gateway.shutdown().await.unwrap();
}
