//! The `mrtr-gateway` binary as real, separate processes: two replicas sharing `MRTR_KEYS` serve
//! the two rounds of one flow; the CLI refuses to start without keys and documents its options.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mrtr_backends::{DemoBackend, ResponseMode, serve};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

/// A gateway process, killed on drop.
struct Replica {
    child: Child,
    url: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on a free port and waits for its "listening on" line.
fn spawn(keys: &str, backends: &[String]) -> Replica {
    let mut command = Command::new(BIN);
    command
        .args(["--listen", "127.0.0.1:0"])
        .env("MRTR_KEYS", keys)
        .env("RUST_LOG", "warn");
    for backend in backends {
        command.args(["--backend", backend]);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mrtr-gateway");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("mrtr-gateway listening on ") {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("gateway did not start");
    Replica { child, url }
}

async fn post(url: &str, id: u64, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
    });
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .json(&body)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("gateway answers");
    // beta answers in SSE, which the gateway streams through: take the response event.
    let text = response.text().await.expect("an answer");
    let message = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .next_back()
        .unwrap_or(&text);
    serde_json::from_str(message).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

#[tokio::test]
async fn two_gateway_processes_share_one_keyring() {
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let beta = serve(DemoBackend::beta("beta").unwrap(), ResponseMode::Sse)
        .await
        .unwrap();
    let backends = [format!("alpha={}", alpha.url()), format!("beta={}", beta.url())];
    let keys = tower_mrtr::keyring::generate_entry("k1").unwrap();
    let first = spawn(&keys, &backends);
    let second = spawn(&keys, &backends);

    let params =
        json!({ "name": "beta__delete_branch", "arguments": { "repo": "acme/api", "branch": "old" } });
    let round1 = post(&first.url, 1, params.clone()).await;
    let state = round1["result"]["requestState"]
        .as_str()
        .expect("sealed state")
        .to_owned();
    assert!(state.starts_with("mrtr1."), "{round1}");

    let mut retry = params;
    retry["requestState"] = json!(state);
    retry["inputResponses"] =
        json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } });
    let round2 = post(&second.url, 2, retry).await;
    let text = round2["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("[beta] delete_branch: deleted branch old"),
        "{round2}"
    );

    drop((first, second));
    alpha.shutdown().await.unwrap();
    beta.shutdown().await.unwrap();
}

#[test]
fn refuses_to_start_without_keys() {
    let output = Command::new(BIN)
        .args(["--backend", "a=http://127.0.0.1:9/mcp"])
        .env_remove("MRTR_KEYS")
        .output()
        .expect("run mrtr-gateway");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no keys: set MRTR_KEYS"), "{stderr}");
}

#[test]
fn help_documents_every_option() {
    let output = Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run mrtr-gateway");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for option in [
        "--listen",
        "--backend",
        "--demo",
        "--keys-file",
        "--generate-key",
        "--principal-header",
        "--allowed-origin",
        "--no-loopback-origins",
        "--allowed-host",
        "--catalog-ttl",
        "--envelope-ttl",
        "--backend-timeout",
        "--max-request-body",
        "--config",
        "--admin-listen",
        "--backend-ca",
        "--reload-interval",
        "--tls-cert",
        "--tls-key",
        "--health-interval",
        "--ready-backends",
        "--drain-delay",
        "--drain-timeout",
        "SIGTERM",
        "SIGHUP",
        "MRTR_KEYS",
    ] {
        assert!(help.contains(option), "--help does not mention {option}");
    }
}

#[test]
fn generated_keys_start_a_gateway() {
    let output = Command::new(BIN)
        .args(["--generate-key", "k7"])
        .output()
        .expect("run mrtr-gateway");
    let entry = String::from_utf8(output.stdout).unwrap();
    let keyring: tower_mrtr::Keyring = entry.trim().parse().expect("a valid keyring entry");
    assert_eq!(keyring.active_key_id().as_str(), "k7");
}
