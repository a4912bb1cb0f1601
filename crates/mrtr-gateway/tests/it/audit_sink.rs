//! The audit trail's sink as an operator meets it, with the binary: a sink that blocks (a FIFO
//! nobody reads yet) never delays a call; what the bounded queue cannot hold is dropped, counted
//! in `mrtr_gateway_audit_dropped_total`, and said in the next line written once the sink reads
//! again.

use std::io::{BufRead as _, BufReader};

use mrtr_backends::{DemoBackend, ResponseMode, serve};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::call_tool;
use mrtr_test_support::metrics::sample;
use mrtr_test_support::tls::TempDir;
use serde_json::{Value, json};

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

#[tokio::test]
async fn a_sink_that_blocks_drops_counts_and_says_so_without_delaying_a_call() {
    let backend = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let dir = TempDir::new("audit-fifo");
    let fifo = dir.path("audit.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let config = dir.path("gateway.toml");
    let text = format!(
        "[audit]\noutput = \"file\"\nfile = {:?}\nqueue = 2\n\n[[backend]]\nname = \"alpha\"\nurl = {:?}\n",
        fifo.display().to_string(),
        backend.url()
    );
    std::fs::write(&config, text).unwrap();
    let keys = tower_mrtr::keyring::generate_entry("k1").unwrap().to_string();
    let gateway = Process::spawn(
        BIN,
        &["--config", config.to_str().unwrap()],
        &[("MRTR_KEYS", &keys)],
    );
    let client = reqwest::Client::new();

    // Nobody reads the FIFO: the writer's thread is stuck opening it, the queue holds two events.
    for id in 1..=5 {
        let answer = call_tool(
            &client,
            &gateway.url,
            id,
            json!({ "name": "whoami", "arguments": {} }),
        )
        .await;
        assert!(
            answer["result"]["content"].is_array(),
            "answered while the sink blocks: {answer}"
        );
    }
    let metrics = gateway.metrics().await;
    assert_eq!(
        sample(&metrics, "mrtr_gateway_audit_dropped_total", &[]),
        Some(3.0),
        "{metrics}"
    );

    // Reading the FIFO frees the writer: the two queued events, the first saying what was dropped.
    let lines = tokio::task::spawn_blocking(move || {
        let reader = BufReader::new(std::fs::File::open(&fifo).unwrap());
        reader
            .lines()
            .take(2)
            .map(|line| serde_json::from_str::<Value>(&line.unwrap()).unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(lines[0]["dropped"], 3, "{lines:?}");
    assert_eq!(lines[1]["dropped"], 0, "{lines:?}");
    for line in &lines {
        assert_eq!(
            (&line["target"], &line["outcome"]),
            (&json!("whoami"), &json!("completed"))
        );
    }
    drop(gateway);
    backend.shutdown().await.unwrap();
}
