//! What a bridged task waiting for its client holds (`docs/gateway.md`, "Bridged tasks"),
//! measured as the live heap of the whole process (gateway, the `initialize`-era backend whose
//! call waits, and a raw Tasks client) across 100 tasks in `input_required`: the task's state
//! and the backend call the gateway keeps reading, with the backend's own side of that call.
//!
//! A test binary of its own: it counts every allocation of the process (a counting global
//! allocator), so no other test may run beside it.

use std::alloc::System;

use mrtr_backends::{LegacyBackend, serve_legacy};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, TASKS_EXTENSION, meta_declaring, send};
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The documented bound per waiting bridged task: gateway, backend and the HTTP connection
/// between them that carries the waiting call's answer, together.
const BOUND: usize = 128 * 1024;

/// Creates `n` bridged tasks that wait for an elicitation's answer.
async fn waiting_tasks(url: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let meta = meta_declaring(json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {} } }));
    let call = Call::tool("ask", json!({})).with_meta(meta);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let reply = send(url, &call).await?;
        anyhow::ensure!(reply.result()["status"] == "input_required", "{}", reply.body);
        tasks.push(reply.result()["taskId"].as_str().unwrap_or_default().to_owned());
    }
    Ok(tasks)
}

#[tokio::test]
async fn a_waiting_bridged_task_holds_a_bounded_heap() -> anyhow::Result<()> {
    let served = serve_legacy(LegacyBackend::new("old")).await?;
    let mut config = GatewayConfig::new(vec![Backend::new("old", served.url())?]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    config.settings.bridged_tasks_per_principal = 1000.try_into()?;
    let gateway = gateway(config, keyring()).await?;
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the backend found legacy", || async {
        readiness.check().1["backends"]["old"]["era"] == "legacy"
    })
    .await;
    let url = gateway.url();
    // Warm up first: the session, pools, buffers and caches that every task shares.
    let warm = waiting_tasks(&url, 10).await?;
    let region = Region::new(GLOBAL);
    let tasks = waiting_tasks(&url, 100).await?;
    let change = region.change();
    let per_task = change.bytes_allocated.saturating_sub(change.bytes_deallocated) / tasks.len();
    println!("{per_task} B of live heap per waiting bridged task (gateway and backend)");
    assert!(
        per_task <= BOUND,
        "{per_task} B per waiting bridged task, above {BOUND} B"
    );
    drop((warm, tasks));
    gateway.shutdown().await?;
    Ok(())
}
