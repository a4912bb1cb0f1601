//! The whole config file reloaded while the binary serves (`--config`, `cli/reload.rs`), with
//! real backends on loopback:
//! * an edit adds a backend and a deny rule: both hold without a restart, and the
//!   `initialize`-era backend the edit left alone keeps its session; a broken edit keeps the
//!   running config, logged naming the file and counted;
//! * a call in flight when its backend is removed finishes on that backend;
//! * a change of a setting only a restart changes is refused with one log line naming it,
//!   and the rest of the edit applies.

use std::time::Duration;

use mrtr_backends::{DemoBackend, LegacyBackend, ResponseMode, serve, serve_legacy};
use mrtr_test_support::backends::{Answer, start_counting_backend};
use mrtr_test_support::gateway::Process;
use mrtr_test_support::mcp::{Call, Reply, send};
use mrtr_test_support::metrics::sample;
use mrtr_test_support::tls::TempDir;
use mrtr_test_support::wait::eventually;
use serde_json::json;

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

const STEP: Duration = Duration::from_secs(15);

fn call(tool: &str) -> Call {
    Call::tool(tool, json!({})).header("x-user", "alice")
}

fn backend(name: &str, url: &str, extra: &str) -> String {
    format!("[[backend]]\nname = \"{name}\"\nurl = \"{url}\"\n{extra}\n")
}

/// Every caller may call every tool, except what the deny rule names.
const DENY_ALPHA_WHOAMI: &str = r#"
[[policy]]
principals = ["*"]
tools = ["*"]

[[policy]]
principals = ["*"]
tools = ["alpha__whoami"]
effect = "deny"
"#;

/// A gateway on `config`, reading it every second, principals from `x-user`.
fn gateway(config: &std::path::Path) -> Process {
    let keys = tower_mrtr::keyring::generate_entry("k1").unwrap().to_string();
    Process::spawn(
        BIN,
        &["--config", config.to_str().unwrap()],
        &[("MRTR_KEYS", &keys)],
    )
}

/// Waits until `gateway` has counted `n` config reloads with `result`.
async fn reloads(gateway: &Process, result: &str, n: f64) {
    eventually(STEP, &format!("{n} config reload(s) {result}"), || async {
        let metrics = gateway.metrics().await;
        sample(
            &metrics,
            "mrtr_gateway_config_reloads_total",
            &[("result", result)],
        ) == Some(n)
    })
    .await;
}

/// Waits until a line of `gateway`'s log holds every one of `parts`.
async fn logged(gateway: &Process, parts: &[&str]) {
    eventually(STEP, &format!("a log line with {parts:?}"), || {
        let log = gateway.stderr.lock().unwrap();
        std::future::ready(log.lines().any(|line| parts.iter().all(|p| line.contains(p))))
    })
    .await;
}

fn session_of(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.text()
}

#[tokio::test]
async fn an_edit_adds_a_backend_and_a_deny_rule_and_a_broken_edit_keeps_them() {
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let beta = serve(DemoBackend::beta("beta").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let old = serve_legacy(LegacyBackend::new("old")).await.unwrap();
    let dir = TempDir::new("config-reload");
    let path = dir.path("gateway.toml");
    let head = "reload-interval = 1\nprincipal-header = \"x-user\"\n\n";
    let v1 = format!(
        "{head}{}{}",
        backend("alpha", &alpha.url(), ""),
        backend("old", old.url(), "era = \"legacy\"")
    );
    std::fs::write(&path, &v1).unwrap();
    let gateway = gateway(&path);

    let whoami = send(&gateway.url, &call("whoami")).await.unwrap();
    assert!(whoami.text().starts_with("[alpha]"), "{}", whoami.body);
    let before = session_of(&send(&gateway.url, &call("session")).await.unwrap());
    let beta_whoami = send(&gateway.url, &call("beta__whoami")).await.unwrap();
    assert!(
        !beta_whoami.text().starts_with("[beta]"),
        "no beta yet: {}",
        beta_whoami.body
    );

    // The edit: beta added, alpha's whoami denied.
    let v2 = format!("{v1}{}{DENY_ALPHA_WHOAMI}", backend("beta", &beta.url(), ""));
    std::fs::write(&path, &v2).unwrap();
    reloads(&gateway, "ok", 1.0).await;
    logged(&gateway, &["config reloaded", "added", "beta"]).await;
    let served = send(&gateway.url, &call("beta__whoami")).await.unwrap();
    assert!(served.text().starts_with("[beta]"), "{}", served.body);
    let denied = send(&gateway.url, &call("alpha__whoami")).await.unwrap();
    assert_eq!(denied.status, 403, "{}", denied.body);
    // The backend the edit left alone kept its session with the gateway.
    let after = session_of(&send(&gateway.url, &call("session")).await.unwrap());
    assert_eq!(after, before, "the legacy backend's session survives the reload");

    // A broken edit: logged naming the file, counted, and the running config stays.
    std::fs::write(&path, format!("{v2}\n[[backend]]\nname = \"gamma\"\nurl = 7\n")).unwrap();
    reloads(&gateway, "failed", 1.0).await;
    logged(&gateway, &["config reload failed", path.to_str().unwrap()]).await;
    let still = send(&gateway.url, &call("beta__whoami")).await.unwrap();
    assert!(still.text().starts_with("[beta]"), "{}", still.body);
    assert_eq!(
        send(&gateway.url, &call("alpha__whoami")).await.unwrap().status,
        403
    );
    // Reported once, not at every read of the same content.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let metrics = gateway.metrics().await;
    let failed = sample(
        &metrics,
        "mrtr_gateway_config_reloads_total",
        &[("result", "failed")],
    );
    assert_eq!(failed, Some(1.0));

    // Back to the first file, with a setting only a restart changes (SIGHUP reads it at once):
    // beta and the deny rule go, the reload interval stays, and the log says so.
    std::fs::write(&path, v1.replace("reload-interval = 1", "reload-interval = 3600")).unwrap();
    gateway.signal("HUP");
    reloads(&gateway, "partial", 1.0).await;
    logged(&gateway, &["need a restart", "reload-interval"]).await;
    let whoami = send(&gateway.url, &call("whoami")).await.unwrap();
    assert!(whoami.text().starts_with("[alpha]"), "{}", whoami.body);
    drop(gateway);
    alpha.shutdown().await.unwrap();
    beta.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_call_in_flight_finishes_on_the_backend_a_reload_removed() {
    // The slow backend answers every request after 8 s and counts calls as they arrive.
    let (slow, _, calls) = start_counting_backend(Answer::JsonAfter(Duration::from_secs(8)), None).await;
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let dir = TempDir::new("config-reload-flight");
    let path = dir.path("gateway.toml");
    let head = "reload-interval = 1\nprincipal-header = \"x-user\"\n\n";
    std::fs::write(
        &path,
        format!("{head}{}", backend("slow", &slow, "era = \"modern\"")),
    )
    .unwrap();
    let gateway = gateway(&path);

    let url = gateway.url.clone();
    let in_flight = tokio::spawn(async move { send(&url, &call("anything")).await });
    eventually(STEP, "the call reached the slow backend", || {
        std::future::ready(calls.load(std::sync::atomic::Ordering::SeqCst) == 1)
    })
    .await;
    // The slow backend replaced by alpha while the call waits for its answer.
    std::fs::write(&path, format!("{head}{}", backend("alpha", &alpha.url(), ""))).unwrap();
    reloads(&gateway, "ok", 1.0).await;
    logged(&gateway, &["config reloaded", "removed", "slow"]).await;
    assert!(!in_flight.is_finished(), "the reload came before the slow answer");
    // New requests go to alpha; the call in flight still gets the slow backend's answer.
    let whoami = send(&gateway.url, &call("whoami")).await.unwrap();
    assert!(whoami.text().starts_with("[alpha]"), "{}", whoami.body);
    let finished = in_flight.await.unwrap().unwrap();
    assert_eq!(finished.status, 200, "{}", finished.body);
    assert_eq!(
        finished.body["result"]["resultType"], "complete",
        "{}",
        finished.body
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(gateway);
    alpha.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restart_only_change_is_refused_naming_it_and_the_rest_applies() {
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let dir = TempDir::new("config-reload-restart");
    let path = dir.path("gateway.toml");
    let head = "reload-interval = 1\nprincipal-header = \"x-user\"\n";
    let alpha_table = backend("alpha", &alpha.url(), "");
    std::fs::write(&path, format!("{head}\n{alpha_table}")).unwrap();
    let gateway = gateway(&path);
    for _ in 0..3 {
        let whoami = send(&gateway.url, &call("whoami")).await.unwrap();
        assert!(whoami.text().starts_with("[alpha]"), "{}", whoami.body);
    }

    // max-in-flight and envelope-ttl need a restart; the rate limit applies.
    let limit = "[[rate-limit]]\nper = \"principal\"\nrequests = 1\nperiod = 3600\n";
    let edit = format!("{head}max-in-flight = 7\nenvelope-ttl = 60\n\n{alpha_table}{limit}");
    std::fs::write(&path, edit).unwrap();
    reloads(&gateway, "partial", 1.0).await;
    logged(
        &gateway,
        &[
            "need a restart",
            "envelope-ttl, max-in-flight",
            "the rest of the file applies",
        ],
    )
    .await;
    let first = send(&gateway.url, &call("whoami")).await.unwrap();
    assert!(first.text().starts_with("[alpha]"), "{}", first.body);
    let second = send(&gateway.url, &call("whoami")).await.unwrap();
    assert_eq!(second.status, 429, "the new limit holds: {}", second.body);
    let log = gateway.stderr.lock().unwrap().clone();
    assert_eq!(
        log.lines().filter(|line| line.contains("need a restart")).count(),
        1,
        "one line: {log}"
    );
    drop(gateway);
    alpha.shutdown().await.unwrap();
}
