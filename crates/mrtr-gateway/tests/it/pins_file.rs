//! Pinning as an operator runs it, with the binary: `mrtr-gateway pin --config FILE` prints the
//! pins of a real backend's definitions; a gateway under `enforce` with `unpinned = "hold"` and a
//! pins file that has one digest wrong and one pin missing withholds both (left out of the list,
//! refused when called, the wrong one counted); the operator writes the pins file `pin` printed,
//! sends SIGHUP, and both are served.

use mrtr_backends::{DemoBackend, ResponseMode, serve};
use mrtr_gateway::{PinKind, PinsFile};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::{call_tool, mcp_post, message};
use mrtr_test_support::metrics::sample;
use mrtr_test_support::tls::TempDir;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

async fn listed(client: &reqwest::Client, url: &str) -> Vec<String> {
    let answer = mcp_post(client, url, 1, "tools/list", json!({}))
        .send()
        .await
        .unwrap();
    let answer = message(&answer.text().await.unwrap()).unwrap();
    let mut names: Vec<String> = answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {answer}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_pin_command_writes_the_file_that_enforce_serves_and_sighup_reloads() {
    let backend = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let dir = TempDir::new("pins-file");
    let plain = dir.path("plain.toml");
    std::fs::write(
        &plain,
        format!("[[backend]]\nname = \"alpha\"\nurl = {:?}\n", backend.url()),
    )
    .unwrap();
    let output = tokio::process::Command::new(BIN)
        .args(["pin", "--config", plain.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).unwrap();
    let pins = PinsFile::parse(&printed).unwrap();
    let mut tools: Vec<&str> = pins
        .pin
        .iter()
        .filter(|p| p.kind == PinKind::Tool)
        .map(|p| p.name.as_str())
        .collect();
    tools.sort_unstable();
    assert_eq!(
        tools,
        ["delete_branch", "deploy", "provision_cluster", "whoami"],
        "{printed}"
    );
    assert!(
        pins.pin
            .iter()
            .all(|p| p.backend == "alpha" && p.digest.starts_with("sha256:"))
    );

    // One digest wrong (as if the backend had changed whoami since), one pin missing.
    let mut doctored = PinsFile::parse(&printed).unwrap();
    doctored
        .pin
        .retain(|p| (p.kind, p.name.as_str()) != (PinKind::Tool, "deploy"));
    for pin in doctored
        .pin
        .iter_mut()
        .filter(|p| (p.kind, p.name.as_str()) == (PinKind::Tool, "whoami"))
    {
        pin.digest = format!("sha256:{}", "0".repeat(64));
    }
    let pins_path = dir.path("pins.toml");
    std::fs::write(&pins_path, doctored.to_toml().unwrap()).unwrap();
    let config = dir.path("gateway.toml");
    let text = format!(
        "reload-interval = 3600\n\n[pinning]\nmode = \"enforce\"\nunpinned = \"hold\"\nfile = {:?}\n\n[[backend]]\nname = \"alpha\"\nurl = {:?}\n",
        pins_path.display().to_string(),
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

    assert_eq!(
        listed(&client, &gateway.url).await,
        ["delete_branch", "provision_cluster"]
    );
    for (tool, why) in [
        ("whoami", "changed since it was pinned"),
        ("deploy", "not pinned yet"),
    ] {
        let refused: Value =
            call_tool(&client, &gateway.url, 2, json!({ "name": tool, "arguments": {} })).await;
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(tool) && message.contains(why), "{refused}");
    }
    let metrics = gateway.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            "mrtr_gateway_tool_definition_changed_total",
            &[("backend", "alpha")]
        ),
        Some(1.0),
        "{metrics}"
    );

    // Re-pinned: the file as `pin` printed it, read again on SIGHUP (the interval is an hour).
    std::fs::write(&pins_path, &printed).unwrap();
    gateway.signal("HUP");
    eventually(TIMEOUT, "the pins reloaded", || async {
        listed(&client, &gateway.url).await.len() == 4
    })
    .await;
    let whoami = call_tool(
        &client,
        &gateway.url,
        3,
        json!({ "name": "whoami", "arguments": {} }),
    )
    .await;
    assert!(whoami["result"]["content"].is_array(), "{whoami}");
    drop(gateway);
    backend.shutdown().await.unwrap();
}
