//! Graceful drain of a real gateway process on SIGTERM:
//!
//! * an SSE stream in flight finishes, `/readyz` says 503 at once, answers carry
//!   `Connection: close`, the listener closes after the drain delay, and the process exits 0;
//! * clients on keep-alive connections, behind a balancer that follows `/readyz` (as Kubernetes
//!   endpoints do), see no failure while both replicas are restarted one after the other.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post as route_post;
use bytes::Bytes;
use futures_util::StreamExt;
use mrtr_backends::{DemoBackend, ResponseMode, serve};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::mcp_post;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::json;
use tokio::sync::mpsc;

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

type Slot = Arc<Mutex<Option<mpsc::Sender<Result<Bytes, Infallible>>>>>;

/// A backend whose `tools/call` answers with an SSE stream held open until the test writes its
/// result through the sender left in the slot; anything else gets an empty tools list.
async fn backend(State(slot): State<Slot>, headers: HeaderMap, body: Bytes) -> Response {
    let id = serde_json::from_slice::<serde_json::Value>(&body)
        .map(|m| m["id"].clone())
        .unwrap_or_default();
    if headers.get("mcp-method").is_some_and(|m| m == "tools/call") {
        let (tx, rx) = mpsc::channel(4);
        let progress = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";
        tx.try_send(Ok(Bytes::from_static(progress.as_bytes()))).unwrap();
        *slot.lock().unwrap() = Some(tx);
        let stream =
            futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    let result =
        json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [], "ttlMs": 0, "cacheScope": "public"}});
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(result.to_string()))
        .unwrap()
}

async fn start_backend() -> (String, Slot) {
    let slot: Slot = Arc::default();
    let app = Router::new()
        .route("/mcp", route_post(backend))
        .with_state(slot.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, slot)
}

/// Calls the backend's held tool through `url`; the answer's stream after its first event
/// (the progress notification).
async fn open_stream(
    client: &reqwest::Client,
    url: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<Bytes>> + Unpin + use<> {
    let response = mcp_post(
        client,
        url,
        1,
        "tools/call",
        json!({"name": "slow", "arguments": {}}),
    )
    .send()
    .await
    .unwrap();
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(TIMEOUT, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        std::str::from_utf8(&first)
            .unwrap()
            .contains("notifications/progress")
    );
    stream
}

fn keys() -> String {
    tower_mrtr::keyring::generate_entry("k1").unwrap().to_string()
}

#[tokio::test]
async fn sigterm_drains_a_stream_in_flight_and_exits_zero() {
    let (backend_url, slot) = start_backend().await;
    let keys = keys();
    let spec = format!("slow={backend_url}");
    let mut gateway = Process::spawn(
        BIN,
        &["--backend", &spec, "--drain-delay", "1", "--drain-timeout", "20"],
        &[("MRTR_KEYS", &keys)],
    );
    eventually(TIMEOUT, "ready", || async { gateway.readyz().await.0 == 200 }).await;
    let client = reqwest::Client::new();

    let mut stream = open_stream(&client, &gateway.url).await;

    gateway.signal("TERM");
    // Not ready at once, saying why.
    eventually(TIMEOUT, "/readyz 503 while draining", || async {
        let (status, body) = gateway.readyz().await;
        status == 503 && body["draining"] == true && body["reasons"].to_string().contains("draining")
    })
    .await;
    // Still serving during the delay, but every answer closes its connection.
    let answer = mcp_post(&client, &gateway.url, 2, "tools/list", json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["connection"], "close");
    // After the delay the listener is closed.
    let addr = gateway
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    eventually(TIMEOUT, "the listener closes", || async {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    // The admin listener still answers until the end.
    assert_eq!(gateway.readyz().await.0, 503);
    assert!(
        gateway.child.try_wait().unwrap().is_none(),
        "exited with a stream in flight"
    );

    let sender = slot.lock().unwrap().clone().expect("the backend got the call");
    let result = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n";
    sender
        .send(Ok(Bytes::from_static(result.as_bytes())))
        .await
        .unwrap();
    drop(sender);
    slot.lock().unwrap().take();
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(TIMEOUT, stream.next()).await.unwrap() {
        rest.extend_from_slice(&chunk.expect("the stream ends cleanly"));
    }
    assert!(String::from_utf8(rest).unwrap().contains("\"text\":\"done\""));

    let status = gateway.exited(TIMEOUT).await;
    assert!(status.success(), "{status:?}");
    let log = gateway.stderr.lock().unwrap().clone();
    assert!(log.contains("drained; exiting"), "{log}");
}

#[tokio::test]
async fn drain_timeout_ends_a_stream_that_does_not_finish() {
    let (backend_url, _slot) = start_backend().await;
    let keys = keys();
    let spec = format!("slow={backend_url}");
    let mut gateway = Process::spawn(
        BIN,
        &["--backend", &spec, "--drain-delay", "0", "--drain-timeout", "1"],
        &[("MRTR_KEYS", &keys)],
    );
    let client = reqwest::Client::new();
    let _stream = open_stream(&client, &gateway.url).await;
    gateway.signal("TERM");
    let status = gateway.exited(TIMEOUT).await;
    assert!(status.success(), "{status:?}");
    assert!(gateway.stderr.lock().unwrap().contains("drain timeout reached"));
}

/// A stand-in for a load balancer that follows readiness (Kubernetes endpoints, or a health
/// checking proxy): the replicas whose `/readyz` answered 200 at the last poll.
#[derive(Clone, Default)]
struct Balancer {
    ready: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicU64>,
}

impl Balancer {
    fn pick(&self) -> Option<String> {
        let ready = self.ready.lock().unwrap();
        (!ready.is_empty())
            .then(|| ready[self.next.fetch_add(1, Ordering::Relaxed) as usize % ready.len()].clone())
    }
}

#[tokio::test]
async fn keep_alive_clients_see_no_failure_through_a_rolling_restart() {
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let keys = keys();
    let spec = format!("alpha={}", alpha.url());
    let args = [
        "--backend",
        spec.as_str(),
        "--drain-delay",
        "2",
        "--drain-timeout",
        "10",
    ];
    let env = [("MRTR_KEYS", keys.as_str())];
    let replicas: Arc<Mutex<Vec<(String, String)>>> = Arc::default(); // (mcp url, admin url)
    let mut a = Process::spawn(BIN, &args, &env);
    let mut b = Process::spawn(BIN, &args, &env);
    replicas
        .lock()
        .unwrap()
        .extend([(a.url.clone(), a.admin.clone()), (b.url.clone(), b.admin.clone())]);

    let balancer = Balancer::default();
    let stop = Arc::new(AtomicBool::new(false));
    let polling = {
        let (balancer, replicas, stop) = (balancer.clone(), replicas.clone(), stop.clone());
        tokio::spawn(async move {
            let probe = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                let known = replicas.lock().unwrap().clone();
                let mut ready = Vec::new();
                for (url, admin) in known {
                    let answer = probe
                        .get(format!("{admin}/readyz"))
                        .timeout(Duration::from_secs(1))
                        .send()
                        .await;
                    if answer.is_ok_and(|r| r.status() == 200) {
                        ready.push(url);
                    }
                }
                *balancer.ready.lock().unwrap() = ready;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    eventually(TIMEOUT, "both replicas ready", || async {
        balancer.ready.lock().unwrap().len() == 2
    })
    .await;

    // Clients, each with its own keep-alive pool, calling as fast as they are answered.
    let served = Arc::new(AtomicU64::new(0));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let clients: Vec<_> = (0..4)
        .map(|n| {
            let (balancer, stop, served, failures) =
                (balancer.clone(), stop.clone(), served.clone(), failures.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut id = n * 1_000_000;
                while !stop.load(Ordering::SeqCst) {
                    let Some(url) = balancer.pick() else {
                        failures.lock().unwrap().push("no replica ready".to_owned());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    id += 1;
                    let outcome = mcp_post(
                        &client,
                        &url,
                        id,
                        "tools/call",
                        json!({"name": "whoami", "arguments": {}}),
                    )
                    .send()
                    .await;
                    match outcome {
                        Ok(response) if response.status() == 200 => match response.text().await {
                            Ok(text) if text.contains("alpha") => {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                            other => failures.lock().unwrap().push(format!("{url}: {other:?}")),
                        },
                        other => failures.lock().unwrap().push(format!("{url}: {other:?}")),
                    }
                }
            })
        })
        .collect();
    let more = |n: u64| {
        let served = served.clone();
        async move {
            let target = served.load(Ordering::Relaxed) + n;
            eventually(TIMEOUT, "requests being served", || async {
                served.load(Ordering::Relaxed) >= target
            })
            .await;
        }
    };
    more(50).await;

    // Restart A, then B: SIGTERM, drain, exit 0, and a new process takes its place.
    for old in [&mut a, &mut b] {
        old.signal("TERM");
        let status = old.exited(Duration::from_secs(20)).await;
        assert!(status.success(), "{status:?}");
        let fresh = Process::spawn(BIN, &args, &env);
        {
            let mut known = replicas.lock().unwrap();
            known.retain(|(url, _)| *url != old.url);
            known.push((fresh.url.clone(), fresh.admin.clone()));
        }
        let fresh_url = fresh.url.clone();
        eventually(TIMEOUT, "the new replica is in rotation", || async {
            balancer.ready.lock().unwrap().contains(&fresh_url)
        })
        .await;
        *old = fresh;
        more(50).await;
    }

    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    polling.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    let served = served.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} failures in {served} requests: {failures:?}",
        failures.len()
    );
    assert!(served >= 150, "{served}");
    drop((a, b));
    alpha.shutdown().await.unwrap();
}
