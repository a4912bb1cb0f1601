//! Scale-out: gateways that share a keyring serve each other's rounds, and keys rotate with
//! rounds in flight. (Real separate processes: `crates/mrtr-gateway/tests/processes.rs`.)

use std::sync::Arc;

use mrtr_backends::ResponseMode;
use mrtr_gateway::GatewayConfig;
use mrtr_test_support::backends::Stack;
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, drive, send};
use serde_json::json;
use tower_mrtr::Keyring;

#[tokio::test]
async fn rounds_alternate_between_two_gateways_with_one_keyring() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await?;
    let keys = Keyring::generate("k1")?.to_config_string();
    // Each gateway parses the keyring itself, as separate replicas would.
    let first = gateway(
        GatewayConfig::new(Stack::backends(&alpha, &beta)),
        Arc::new(keys.parse()?),
    )
    .await?;
    let second = gateway(
        GatewayConfig::new(Stack::backends(&alpha, &beta)),
        Arc::new(keys.parse()?),
    )
    .await?;
    let stack = Stack {
        alpha,
        beta,
        gateways: vec![first, second],
    };
    let urls = [stack.gateways[0].url(), stack.gateways[1].url()];
    let urls = [urls[0].as_str(), urls[1].as_str()];

    for (name, arguments, backend) in [
        ("provision_cluster", json!({"name": "c1"}), "alpha"),
        ("migrate_database", json!({"database": "orders"}), "beta"),
        (
            "beta__deploy",
            json!({"service": "api", "environment": "prod"}),
            "beta",
        ),
    ] {
        let (done, rounds) = drive(&urls, &Call::tool(name, arguments)).await?;
        assert!(rounds >= 2, "{name}: {rounds} rounds");
        assert!(
            done.text().starts_with(&format!("[{backend}] ")),
            "{name}: {}",
            done.body
        );
    }
    // A gateway with a different keyring cannot open them.
    let foreign = gateway(
        GatewayConfig::new(Stack::backends(&stack.alpha, &stack.beta)),
        keyring(),
    )
    .await?;
    let call = Call::tool("provision_cluster", json!({"name": "c1"}));
    let round1 = send(urls[0], &call).await?;
    let refused = send(&foreign.url(), &call.retry(round1.answers(), &round1.state()?)).await?;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.body);
    foreign.shutdown().await?;
    stack.stop().await
}

/// The documented rotation: add the new key everywhere (open-only), make it active, retire the
/// old one; a flow started before the rotation finishes across all four configurations.
#[tokio::test]
async fn key_rotation_with_rounds_in_flight() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let old = Keyring::generate("old")?.to_config_string();
    let new = Keyring::generate("new")?.to_config_string();
    let rings = [
        old.to_string(),              // before: old only
        format!("{},{}", *old, *new), // step 1: new added, old still active
        format!("{},{}", *new, *old), // step 2: new active, old still opens
        new.to_string(),              // step 3: old retired
    ];
    let mut gateways = Vec::new();
    for ring in &rings {
        gateways.push(
            gateway(
                GatewayConfig::new(Stack::backends(&alpha, &beta)),
                Arc::new(ring.parse()?),
            )
            .await?,
        );
    }
    let stack = Stack {
        alpha,
        beta,
        gateways,
    };
    let url = |i: usize| stack.gateways[i].url();

    // provision_cluster takes three input rounds: one request per configuration.
    let call = Call::tool("provision_cluster", json!({"name": "c1"}));
    let r1 = send(&url(0), &call).await?; // sealed with old
    let r2 = send(&url(1), &call.retry(r1.answers(), &r1.state()?)).await?; // opened with old, sealed with old
    let r3 = send(&url(2), &call.retry(r2.answers(), &r2.state()?)).await?; // opened with old, sealed with new
    let done = send(&url(3), &call.retry(r3.answers(), &r3.state()?)).await?; // opened with new
    assert!(
        done.text().starts_with("[alpha] provision_cluster"),
        "{}",
        done.body
    );

    // After retirement an envelope sealed with the old key no longer opens.
    let stale = send(&url(0), &call).await?;
    let refused = send(&url(3), &call.retry(stale.answers(), &stale.state()?)).await?;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.body);
    stack.stop().await
}

/// A rolling change (review 3, finding 4): replicas whose configurations differ by a backend
/// expose alpha's `deploy` as `deploy` (alone) or `alpha__deploy` (beside beta's): a retry
/// minted under either name is sent to alpha's own `deploy` by a replica of the other kind,
/// whose catalog alone says which of alpha's tools the name is.
#[tokio::test]
async fn a_retry_finds_its_tool_when_a_prefix_came_or_went_between_rounds() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let keys = Keyring::generate("k1")?.to_config_string();
    let alone = gateway(
        GatewayConfig::new(Stack::backends(&alpha, &beta)[..1].to_vec()),
        Arc::new(keys.parse()?),
    )
    .await?;
    let beside = gateway(
        GatewayConfig::new(Stack::backends(&alpha, &beta)),
        Arc::new(keys.parse()?),
    )
    .await?;
    let stack = Stack {
        alpha,
        beta,
        gateways: vec![alone, beside],
    };
    let (alone, beside) = (stack.gateways[0].url(), stack.gateways[1].url());
    let arguments = json!({"service": "api", "environment": "prod"});
    for (name, first, then) in [("deploy", &alone, &beside), ("alpha__deploy", &beside, &alone)] {
        let call = Call::tool(name, arguments.clone());
        let mut reply = send(first, &call).await?;
        let mut rounds = 0;
        while reply.body["result"]["resultType"] == "input_required" {
            rounds += 1;
            anyhow::ensure!(rounds <= 5, "{name}: too many rounds");
            reply = send(then, &call.retry(reply.answers(), &reply.state()?)).await?;
        }
        assert!(rounds >= 1, "{name}: {}", reply.body);
        assert!(
            reply.text().starts_with("[alpha] deploy"),
            "{name} retried across the change: {}",
            reply.body
        );
    }
    stack.stop().await
}
