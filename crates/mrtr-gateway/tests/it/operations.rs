//! The gateway as an operator runs it, with real processes: keys rotated through all three steps
//! by editing a keys file two running replicas share (rounds crossing them throughout, none
//! refused), and `/metrics`, `/healthz`, `/readyz` on the admin listener.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mrtr_backends::{DemoBackend, ResponseMode, serve};
use mrtr_test_support::backends::{Stack, delete_branch, delete_branch_retry};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::{EventStream, call_tool, mcp_post};
use mrtr_test_support::metrics::sample;
use mrtr_test_support::tls::TempDir;
use mrtr_test_support::wait::eventually;
use serde_json::Value;

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

const STEP: Duration = Duration::from_secs(15);

/// One MRTR flow started on `first` and finished on `second`; `Err` with the answer that broke it.
async fn crossing_round(
    client: &reqwest::Client,
    first: &str,
    second: &str,
    tool: &str,
    id: u64,
) -> Result<(), Value> {
    let round1 = call_tool(client, first, id, delete_branch(tool)).await;
    let Some(state) = round1["result"]["requestState"].as_str() else {
        return Err(round1);
    };
    let round2 = call_tool(client, second, id + 1, delete_branch_retry(tool, state)).await;
    match round2["result"]["content"][0]["text"].as_str() {
        Some(text) if text.contains("deleted branch old") => Ok(()),
        _ => Err(round2),
    }
}

async fn keyring_state(replica: &Process) -> (String, u64) {
    let (_, body) = replica.readyz().await;
    let active = body["keyring"]["active"].as_str().unwrap_or_default().to_owned();
    (active, body["keyring"]["keys"].as_u64().unwrap_or_default())
}

/// Waits until both replicas report `active` as the sealing key and `keys` keys.
async fn both_on(replicas: &[&Process], active: &str, keys: u64) {
    for replica in replicas {
        eventually(
            STEP,
            &format!("keyring {active}/{keys} on {}", replica.url),
            || async { keyring_state(replica).await == (active.to_owned(), keys) },
        )
        .await;
    }
}

#[tokio::test]
async fn keys_rotate_on_two_processes_by_editing_their_keys_file() {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await.unwrap();
    let dir = TempDir::new("rotation");
    let keys = dir.path("keys");
    let entry = |kid: &str| tower_mrtr::keyring::generate_entry(kid).unwrap().to_string();
    let (k1, k2) = (entry("k1"), entry("k2"));
    std::fs::write(&keys, format!("{k1}\n")).unwrap();
    let (alpha_spec, beta_spec) = (format!("alpha={}", alpha.url()), format!("beta={}", beta.url()));
    let args = [
        "--keys-file",
        keys.to_str().unwrap(),
        "--reload-interval",
        "1",
        "--backend",
        &alpha_spec,
        "--backend",
        &beta_spec,
    ];
    let a = Process::spawn(BIN, &args, &[]);
    let b = Process::spawn(BIN, &args, &[]);
    both_on(&[&a, &b], "k1", 1).await;

    // Rounds cross the replicas (A then B, B then A) from start to end of the rotation.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let looping = {
        let (stop, rounds) = (stop.clone(), rounds.clone());
        let (a, b) = (a.url.clone(), b.url.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut failures = Vec::new();
            let mut id = 10;
            while !stop.load(Ordering::SeqCst) {
                let (first, second, tool) = if id % 4 == 0 {
                    (&a, &b, "beta__delete_branch")
                } else {
                    (&b, &a, "alpha__delete_branch")
                };
                if let Err(answer) = crossing_round(&client, first, second, tool, id).await {
                    failures.push(answer);
                }
                rounds.fetch_add(1, Ordering::SeqCst);
                id += 2;
            }
            failures
        })
    };
    // Waits until `n` more rounds have completed.
    let more_rounds = |n: u64| {
        let rounds = rounds.clone();
        async move {
            let target = rounds.load(Ordering::SeqCst) + n;
            eventually(STEP, "rounds progressing", || async {
                rounds.load(Ordering::SeqCst) >= target
            })
            .await;
        }
    };
    more_rounds(2).await;

    // 1. Add k2, open-only.
    std::fs::write(&keys, format!("{k1}\n{k2}\n")).unwrap();
    both_on(&[&a, &b], "k1", 2).await;
    more_rounds(2).await;
    // 2. Activate k2 (only once step 1 reached every replica).
    std::fs::write(&keys, format!("{k2}\n{k1}\n")).unwrap();
    both_on(&[&a, &b], "k2", 2).await;
    // Every round from here on seals with k2; let the ones sealed with k1 finish.
    more_rounds(2).await;

    // A broken file changes nothing, is logged naming the file, and is counted.
    std::fs::write(&keys, "k3:this-is-not-a-key\n").unwrap();
    for replica in [&a, &b] {
        eventually(STEP, "the failed reload is counted", || async {
            sample(
                &replica.metrics().await,
                "mrtr_gateway_keyring_reloads_total",
                &[("result", "failed")],
            )
            .is_some_and(|n| n >= 1.0)
        })
        .await;
        // The log line is read from the process's stderr by another thread, and may arrive
        // after the counter: wait for the line itself.
        let logged = || {
            let log = replica.stderr.lock().unwrap();
            log.lines()
                .any(|line| line.contains("keyring reload failed") && line.contains(keys.to_str().unwrap()))
        };
        eventually(STEP, "the failed reload is logged naming the file", || {
            std::future::ready(logged())
        })
        .await;
        assert_eq!(keyring_state(replica).await, ("k2".to_owned(), 2));
    }
    more_rounds(2).await;

    // 3. Retire k1 (in production: once --envelope-ttl has passed since step 2).
    std::fs::write(&keys, format!("{k2}\n")).unwrap();
    both_on(&[&a, &b], "k2", 1).await;
    more_rounds(2).await;

    stop.store(true, Ordering::SeqCst);
    let failures = looping.await.unwrap();
    let completed = rounds.load(Ordering::SeqCst);
    assert!(
        failures.is_empty(),
        "{} of {completed} rounds failed: {failures:?}",
        failures.len()
    );
    assert!(completed >= 12, "{completed} rounds");
    for replica in [&a, &b] {
        let metrics = replica.metrics().await;
        assert_eq!(
            sample(
                &metrics,
                "mrtr_gateway_keyring_reloads_total",
                &[("result", "ok")]
            ),
            Some(3.0)
        );
        assert_eq!(
            sample(&metrics, "mrtr_gateway_keyring_active_key", &[("kid", "k2")]),
            Some(1.0)
        );
        assert_eq!(
            sample(&metrics, "mrtr_gateway_keyring_active_key", &[("kid", "k1")]),
            Some(0.0)
        );
        let log = replica.stderr.lock().unwrap().clone();
        assert!(
            !log.contains(&k1[3..]) && !log.contains(&k2[3..]),
            "a key reached the log"
        );
    }
    drop((a, b));
    alpha.shutdown().await.unwrap();
    beta.shutdown().await.unwrap();
}

#[tokio::test]
async fn metrics_count_an_mrtr_round_and_a_refused_tampered_retry() {
    let beta = serve(DemoBackend::beta("beta").unwrap(), ResponseMode::Sse)
        .await
        .unwrap();
    let keys = tower_mrtr::keyring::generate_entry("k1").unwrap().to_string();
    let backend = format!("beta={}", beta.url());
    let gateway = Process::spawn(BIN, &["--backend", &backend], &[("MRTR_KEYS", &keys)]);
    let client = reqwest::Client::new();

    let health = client
        .get(format!("{}/healthz", gateway.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    eventually(STEP, "ready once the probe reached beta", || async {
        gateway.readyz().await.0 == 200
    })
    .await;
    let (_, ready) = gateway.readyz().await;
    assert_eq!(ready["backends"]["beta"]["state"], "up", "{ready}");
    assert_eq!(ready["keyring"]["active"], "k1", "{ready}");

    let round1 = call_tool(&client, &gateway.url, 1, delete_branch("delete_branch")).await;
    let state = round1["result"]["requestState"]
        .as_str()
        .expect("sealed")
        .to_owned();
    let round2 = call_tool(
        &client,
        &gateway.url,
        2,
        delete_branch_retry("delete_branch", &state),
    )
    .await;
    assert!(
        round2["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("deleted branch old"),
        "{round2}"
    );
    // One character changed in the envelope: refused before any backend sees it.
    let mut tampered = state.into_bytes();
    // A character in the middle: every base64url character there carries six whole bits, so the
    // edit always decodes and fails authentication. (The last one may carry unused bits, and
    // an edit there can fail as a non-canonical encoding instead, depending on the length.)
    let middle = tampered.len() / 2;
    tampered[middle] = if tampered[middle] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let before = beta.requests();
    let refused = call_tool(
        &client,
        &gateway.url,
        3,
        delete_branch_retry("delete_branch", &tampered),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(beta.requests(), before, "the tampered retry reached the backend");

    let metrics = gateway.metrics().await;
    let calls = |answered_by| {
        sample(
            &metrics,
            "mrtr_gateway_requests_total",
            &[
                ("method", "tools/call"),
                ("status", "200"),
                ("answered_by", answered_by),
            ],
        )
    };
    assert_eq!(calls("backend"), Some(2.0), "{metrics}");
    assert_eq!(calls("mrtr_layer"), Some(1.0), "{metrics}");
    let to_beta = [("backend", "beta"), ("method", "tools/call")];
    assert_eq!(
        sample(&metrics, "mrtr_gateway_backend_requests_total", &to_beta),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "mrtr_gateway_backend_request_duration_seconds_count",
            &to_beta
        ),
        Some(2.0),
        "{metrics}"
    );
    assert!(
        sample(
            &metrics,
            "mrtr_gateway_backend_request_duration_seconds_bucket",
            &[("le", "+Inf")]
        )
        .is_some()
    );
    assert!(
        metrics.contains("# TYPE mrtr_gateway_request_duration_seconds histogram"),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "mrtr_gateway_backend_up", &[("backend", "beta")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "mrtr_gateway_keyring_active_key", &[("kid", "k1")]),
        Some(1.0)
    );
    assert!(
        sample(&metrics, "mrtr_gateway_backend_errors_total", &[]).is_none(),
        "{metrics}"
    );
    // The MRTR layer's own counters (tower-mrtr's `metrics` feature).
    let state = [("kind", "request_state")];
    assert_eq!(
        sample(&metrics, "mrtr_envelopes_sealed_total", &state),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "mrtr_envelopes_opened_total", &state), Some(1.0));
    assert_eq!(
        sample(
            &metrics,
            "mrtr_envelopes_refused_total",
            &[("kind", "request_state"), ("reason", "authentication")]
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "mrtr_requests_refused_total",
            &[("reason", "invalid_envelope")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "mrtr_envelope_size_bytes_count", &state),
        Some(1.0)
    );
    assert!(
        metrics.contains("# TYPE mrtr_envelope_size_bytes histogram"),
        "{metrics}"
    );
    drop(gateway);
    beta.shutdown().await.unwrap();
}

/// Listens shared, as `/metrics` shows them: two clients' listens alike, one backend listen;
/// both gauges back to 0 once the clients have gone.
#[tokio::test]
async fn shared_listens_and_their_clients_are_counted_while_open() {
    let fixture = serve(mrtr_backends::SuiteFixture::new().unwrap(), ResponseMode::Sse)
        .await
        .unwrap();
    let keys = tower_mrtr::Keyring::generate("k1").unwrap().to_config_string();
    let gateway = Process::spawn(
        BIN,
        &["--backend", &format!("lists={}", fixture.url())],
        &[("MRTR_KEYS", keys.as_str())],
    );
    let client = reqwest::Client::new();
    let mut listens = Vec::new();
    for id in [1, 2] {
        let filter = serde_json::json!({ "notifications": { "toolsListChanged": true } });
        let response = mcp_post(&client, &gateway.url, id, "subscriptions/listen", filter)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut events = EventStream::of(response);
        let ack = events.next().await.unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
        listens.push(events);
    }
    let gauge = |metrics: &str, name: &str| sample(metrics, name, &[("backend", "lists")]);
    let metrics = gateway.metrics().await;
    assert_eq!(
        gauge(&metrics, "mrtr_gateway_shared_listens"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        gauge(&metrics, "mrtr_gateway_shared_listen_clients"),
        Some(2.0),
        "{metrics}"
    );
    drop(listens);
    eventually(STEP, "both gauges back to 0", || async {
        let metrics = gateway.metrics().await;
        gauge(&metrics, "mrtr_gateway_shared_listens") == Some(0.0)
            && gauge(&metrics, "mrtr_gateway_shared_listen_clients") == Some(0.0)
    })
    .await;
}
