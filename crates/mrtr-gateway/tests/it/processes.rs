//! The `mrtr-gateway` binary as real, separate processes: two replicas sharing `MRTR_KEYS` serve
//! the two rounds of one flow; the CLI refuses to start without keys and documents its options.

use std::process::Command;

use mrtr_backends::ResponseMode;
use mrtr_test_support::backends::{Stack, delete_branch, delete_branch_retry};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::call_tool;

const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

#[tokio::test]
async fn two_gateway_processes_share_one_keyring() {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await.unwrap();
    let backends = [format!("alpha={}", alpha.url()), format!("beta={}", beta.url())];
    let keys = tower_mrtr::keyring::generate_entry("k1").unwrap().to_string();
    let args = ["--backend", &backends[0], "--backend", &backends[1]];
    let first = Process::spawn(BIN, &args, &[("MRTR_KEYS", &keys)]);
    let second = Process::spawn(BIN, &args, &[("MRTR_KEYS", &keys)]);
    let client = reqwest::Client::new();

    let round1 = call_tool(&client, &first.url, 1, delete_branch("beta__delete_branch")).await;
    let state = round1["result"]["requestState"]
        .as_str()
        .expect("sealed state")
        .to_owned();
    assert!(state.starts_with("mrtr4."), "{round1}");

    let round2 = call_tool(
        &client,
        &second.url,
        2,
        delete_branch_retry("beta__delete_branch", &state),
    )
    .await;
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
