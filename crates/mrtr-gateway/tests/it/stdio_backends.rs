//! stdio backends: an `initialize`-era MCP server (rmcp limited to 2025-11-25, the
//! `legacy-stdio-server` of `mrtr-backends`) started by the gateway as a process and served to
//! 2026-07-28 clients. Calls come back in modern form under the client's id, progress under the
//! client's token; a stderr line too long to log is dropped, the process unharmed; clients
//! sharing the process with the same ids get their own answers; the
//! process sees only `PATH`, `HOME` and what the config gives it; a process killed mid-call fails
//! those calls at once and is started again; a gateway that stops ends its process; a command
//! that cannot start is a backend reported down; a principal holds at most its share of the
//! shared process's places, other principals still answered; a silent call ends after the stdio
//! stall timeout.

use std::time::Duration;

use mrtr_backends::legacy::{OTHER, WATCHED};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway, StdioCommand};
use mrtr_test_support::gateway::{Process, gateway, keyring, workspace_binary};
use mrtr_test_support::mcp::{call_tool_raw, listen, mcp_post};
use mrtr_test_support::metrics::sample;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// The gateway binary under test (Cargo builds it for these tests).
const BIN: &str = env!("CARGO_BIN_EXE_mrtr-gateway");

fn server() -> StdioCommand {
    let binary = workspace_binary("legacy-stdio-server");
    StdioCommand::new([binary.to_string_lossy().into_owned(), "legacy-stdio".to_owned()]).unwrap()
}

/// A gateway over the stdio backend `command`, once the probe found what it is (`era`, or down).
async fn gateway_over(command: StdioCommand, ready: &str) -> RunningGateway {
    let config = GatewayConfig::new(vec![Backend::stdio("local", command).unwrap()]);
    gateway_of(config, ready).await
}

/// A gateway of `config`, whose one backend is `local`, once the probe found what it is.
async fn gateway_of(mut config: GatewayConfig, ready: &str) -> RunningGateway {
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the probe found the backend", || async {
        let backend = &readiness.check().1["backends"]["local"];
        backend["era"] == ready || backend["reason"] == ready
    })
    .await;
    gateway
}

/// `tools/call` of `tool` with the argument `text` under the id `id`, `_meta` extended by
/// `extra`: the HTTP status, the raw text and the JSON-RPC response (`Null` when there is none).
async fn call(
    gateway: &RunningGateway,
    id: u64,
    tool: &str,
    text: &str,
    extra: Value,
) -> (u16, String, Value) {
    call_tool_raw(&gateway.url(), id, tool, json!({ "text": text }), extra, &[])
        .await
        .unwrap()
}

fn text_of(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// Whether a process `pid` exists (`kill -0`).
fn alive(pid: &str) -> bool {
    std::process::Command::new("kill")
        .args(["-0", pid])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test]
async fn a_stdio_server_serves_modern_clients_with_their_ids_tokens_and_nothing_of_the_gateways_environment()
{
    let gateway = gateway_over(server().with_env("GREETING", "hello"), "legacy").await;
    let (_, body) = gateway.readiness().check();
    assert_eq!(
        body["backends"]["local"]["protocol_version"], "2025-11-25",
        "{body}"
    );

    let (status, _, response) = call(&gateway, 41, "echo", "hi", json!({})).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["id"], 41,
        "the client's id, not the gateway's: {response}"
    );
    assert_eq!(response["result"]["resultType"], "complete", "{response}");
    assert_eq!(text_of(&response), "hi");

    // The test process has CARGO_*, RUST_* and more: the child sees none of them.
    let (_, _, response) = call(&gateway, 42, "environment", "", json!({})).await;
    assert_eq!(text_of(&response), "GREETING,HOME,PATH", "{response}");

    let (status, text, response) = call(
        &gateway,
        43,
        "progress",
        "",
        json!({ "progressToken": { "mine": 7 } }),
    )
    .await;
    assert_eq!((status, text_of(&response)), (200, "done"), "{text}");
    let progress: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{text}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == json!({ "mine": 7 })),
        "the client's own token: {text}"
    );

    // The process's own request to a client: answered by the gateway with the reason.
    let (_, _, response) = call(&gateway, 44, "roots", "", json!({})).await;
    assert!(
        text_of(&response).contains("no one client can answer roots/list"),
        "{response}"
    );
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_line_too_long_to_log_is_dropped_and_the_process_goes_on() {
    let gateway = gateway_over(server(), "legacy").await;
    // 200 KB on one stderr line: past the logged line's bound, and past a pipe's buffer, so a
    // gateway that stopped reading stderr at the long line would leave the process blocked.
    for id in 1..=3 {
        let (status, text, response) = call(&gateway, id, "stderr", "200000", json!({})).await;
        assert_eq!((status, text_of(&response)), (200, "written"), "{text}");
    }
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn clients_sharing_the_process_with_the_same_ids_get_their_own_answers() {
    let gateway = gateway_over(server(), "legacy").await;
    let calls = (0..24).map(|n| {
        let gateway = &gateway;
        async move {
            let text = format!("client-{n}");
            let (status, _, response) = call(gateway, 1, "echo", &text, json!({})).await;
            (
                status,
                response["id"].clone(),
                text_of(&response).to_owned(),
                text,
            )
        }
    });
    for (status, id, answered, sent) in futures_util::future::join_all(calls).await {
        assert_eq!((status, id, answered), (200, json!(1), sent));
    }
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_killed_process_fails_its_calls_at_once_and_is_started_again() {
    let gateway = gateway_over(server(), "legacy").await;
    let (_, _, response) = call(&gateway, 1, "pid", "", json!({})).await;
    let pid = text_of(&response).to_owned();
    assert!(alive(&pid), "{response}");

    // Three calls in flight for 5 s each; the process is killed after 300 ms.
    let sleeping = (0..3).map(|n| call(&gateway, 10 + n, "sleep", "5000", json!({})));
    let kill = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap();
        assert!(killed.success());
    };
    let started = tokio::time::Instant::now();
    let (answers, ()) = tokio::join!(futures_util::future::join_all(sleeping), kill);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the calls were answered when the process died, not when they would have ended: {:?}",
        started.elapsed()
    );
    for (n, (status, text, response)) in answers.into_iter().enumerate() {
        assert_eq!(response["id"], 10 + n as u64, "{text}");
        assert!(
            response["error"]["message"].is_string(),
            "an error, not a result: {status} {text}"
        );
    }

    // Started again: later calls succeed, in another process.
    eventually(TIMEOUT, "the process started again", || async {
        let (status, _, response) = call(&gateway, 2, "pid", "", json!({})).await;
        status == 200 && !text_of(&response).is_empty()
    })
    .await;
    let (_, _, response) = call(&gateway, 3, "pid", "", json!({})).await;
    let again = text_of(&response).to_owned();
    assert!(!again.is_empty() && again != pid, "{response}");

    // A gateway that stops ends its process.
    gateway.shutdown().await.unwrap();
    assert!(!alive(&again), "the process outlived the gateway");
}

#[tokio::test]
async fn a_command_that_cannot_start_is_a_backend_down_and_calls_fail_without_waiting() {
    let missing = StdioCommand::new(["/nonexistent/mcp-server"]).unwrap();
    // Its own reason, not the `unreachable` of a process between runs (issue 38).
    let gateway = gateway_over(missing, "not_found").await;
    let started = tokio::time::Instant::now();
    let (status, text, response) = call(&gateway, 5, "echo", "hi", json!({})).await;
    assert_eq!(status, 502, "{text}");
    assert_eq!(response["id"], 5, "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "bounded by the next start attempt, not the response timeout: {:?}",
        started.elapsed()
    );
    gateway.shutdown().await.unwrap();
}

/// A server that keeps exiting fails a call at once (unavailable, 502); the call does
/// not wait through the backoff for another run (which a list fanning out to every backend
/// would wait for too). Each run appends a line to a file, so the test sees that no run was
/// started for the call: after the fourth failure in a row the next run is 2 s away.
#[tokio::test]
async fn a_server_that_keeps_exiting_fails_calls_at_once_without_another_run() {
    let dir = mrtr_test_support::tls::TempDir::new("stdio-crash-loop");
    let runs = dir.path("runs");
    let script = format!("echo run >> '{}'; exit 3", runs.display());
    let dying = StdioCommand::new(["sh", "-c", script.as_str()]).unwrap();
    let mut config = GatewayConfig::new(vec![Backend::stdio("local", dying).unwrap()]);
    config.settings.backend_timeout = mrtr_gateway::Seconds::from_secs(120);
    let gateway = gateway_of(config, "exited").await;
    let count = || std::fs::read_to_string(&runs).map_or(0, |text| text.lines().count());
    eventually(TIMEOUT, "four runs failed in a row", || async { count() >= 4 }).await;
    let before = count();
    let (status, text, response) = call(&gateway, 7, "echo", "hi", json!({})).await;
    assert_eq!(status, 502, "{text}");
    assert_eq!(response["id"], 7, "{text}");
    assert_eq!(count(), before, "no run was started for the call");
    gateway.shutdown().await.unwrap();
}

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

#[tokio::test]
async fn listens_share_the_process_its_notifications_and_counted_subscriptions_and_end_with_it() {
    let gateway = gateway_over(server(), "legacy").await;
    let filter = json!({ "toolsListChanged": true, "resourceSubscriptions": [WATCHED, OTHER] });
    let (status, mut first) = listen(&gateway.url(), 71, filter, &[]).await.unwrap();
    assert_eq!(status, 200);
    let ack = first.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "toolsListChanged": true, "resourceSubscriptions": [WATCHED, OTHER] }),
        "{ack}"
    );
    let filter = json!({ "resourceSubscriptions": [WATCHED] });
    let (_, mut second) = listen(&gateway.url(), 72, filter, &[]).await.unwrap();
    assert_eq!(
        second.next().await.unwrap()["params"]["_meta"][SUBSCRIPTION_ID],
        72
    );
    let (_, _, subscribed) = call(&gateway, 73, "subscriptions", "", json!({})).await;
    assert_eq!(text_of(&subscribed), format!("{OTHER},{WATCHED}"), "{subscribed}");

    // The process writes each update once; both listens of the resource get it, under their ids.
    call(&gateway, 74, "notify", WATCHED, json!({})).await;
    for (listen, id) in [(&mut first, 71), (&mut second, 72)] {
        let update = listen.next().await.unwrap();
        assert_eq!(update["method"], "notifications/resources/updated", "{update}");
        assert_eq!(
            (
                &update["params"]["uri"],
                &update["params"]["_meta"][SUBSCRIPTION_ID]
            ),
            (&json!(WATCHED), &json!(id))
        );
    }
    call(&gateway, 75, "notify", "tools", json!({})).await;
    assert_eq!(
        first.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );

    // The first listen going releases OTHER, which only it held.
    drop(first);
    eventually(TIMEOUT, "OTHER unsubscribed", || async {
        let (_, _, subscribed) = call(&gateway, 76, "subscriptions", "", json!({})).await;
        text_of(&subscribed) == WATCHED
    })
    .await;

    // The process exits: the listen still open ends with an error for its request.
    let (_, _, response) = call(&gateway, 77, "pid", "", json!({})).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", text_of(&response)])
        .status()
        .unwrap();
    assert!(killed.success());
    let end = second.next().await.unwrap();
    assert_eq!(end["id"], 72, "{end}");
    assert!(end["error"]["message"].is_string(), "{end}");
    assert!(second.next().await.is_err(), "the stream ends after the error");
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_modern_stdio_servers_listens_are_routed_by_subscription_id_and_take_no_call_places() {
    let binary = workspace_binary("fixture-server");
    let binary = binary.to_string_lossy().into_owned();
    let command = StdioCommand::new([binary.as_str(), "--suite", "--stdio"]).unwrap();
    let gateway = gateway_over(command, "modern").await;

    // More listens than a process has places for calls in flight (64), all open at once.
    let filter = json!({ "resourceSubscriptions": ["test://watched-resource"] });
    let mut listens = Vec::new();
    for id in 100..165 {
        let (status, mut events) = listen(&gateway.url(), id, filter.clone(), &[]).await.unwrap();
        assert_eq!(status, 200);
        // The process named the listen by the gateway's id; the client gets its own back, on the
        // acknowledgement and on the update the fixture sends as a subscription starts.
        let ack = events.next().await.unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
        assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], id, "{ack}");
        let update = events.next().await.unwrap();
        assert_eq!(update["method"], "notifications/resources/updated", "{update}");
        assert_eq!(update["params"]["_meta"][SUBSCRIPTION_ID], id, "{update}");
        listens.push(events);
    }
    let (status, _, response) = call(&gateway, 200, "test_simple_text", "", json!({})).await;
    assert_eq!(status, 200, "{response}");
    assert!(
        text_of(&response).starts_with("This is a simple text"),
        "{response}"
    );
    drop(listens);
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_backend_run_per_principal_gives_each_principal_a_process_of_its_own_within_the_bound() {
    let command = server().per_principal(std::num::NonZeroUsize::new(2).unwrap());
    let mut config = GatewayConfig::new(vec![Backend::stdio("local", command).unwrap()]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    config.settings.principal_header = Some("x-user".parse().unwrap());
    let gateway = gateway(config, keyring()).await.unwrap();
    let pid = |user: &'static str| {
        let url = gateway.url();
        async move {
            let headers = [("x-user", user)];
            let (status, text, response) = call_tool_raw(&url, 1, "pid", json!({}), json!({}), &headers)
                .await
                .unwrap();
            assert_eq!(status, 200, "{text}");
            text_of(&response).to_owned()
        }
    };
    let (alice, bob) = (pid("alice").await, pid("bob").await);
    assert_ne!(alice, bob);
    assert_eq!(pid("alice").await, alice, "alice's process is kept for her");

    // A third principal, with two processes running: the idlest (bob's, as alice was last)
    // is stopped for carol's.
    let carol = pid("carol").await;
    assert!(carol != alice && carol != bob);
    eventually(TIMEOUT, "bob's process stopped", || async { !alive(&bob) }).await;
    assert!(alive(&alice));
    gateway.shutdown().await.unwrap();
    for pid in [alice, carol] {
        assert!(!alive(&pid), "process {pid} outlived the gateway");
    }
}

/// The legacy server as the backend `local`, whose calls answer as streams after 0.5 s.
fn streaming_soon() -> GatewayConfig {
    let backend = Backend::stdio("local", server())
        .unwrap()
        .with_timeout(Duration::from_millis(500));
    GatewayConfig::new(vec![backend])
}

#[tokio::test]
async fn a_principal_beyond_its_share_of_the_shared_process_is_refused_at_once_while_others_are_answered() {
    let mut config = streaming_soon();
    config.settings.principal_header = Some("x-user".parse().unwrap());
    let gateway = gateway_of(config, "legacy").await;
    let url = gateway.url();
    let call_as = |user: &'static str, id: u64, tool: &'static str, text: &'static str| {
        let url = url.clone();
        async move {
            let headers = [("x-user", user)];
            call_tool_raw(&url, id, tool, json!({ "text": text }), json!({}), &headers)
                .await
                .unwrap()
        }
    };
    // Alice's slow calls, a quarter of the process's 64 places: each has its answer's head (a
    // stream, after 0.5 s), so each holds its place.
    let client = reqwest::Client::new();
    let sleep = json!({ "name": "sleep", "arguments": { "text": "10000" } });
    let slow = (0..16).map(|n| {
        mcp_post(&client, &url, 100 + n, "tools/call", sleep.clone())
            .header("x-user", "alice")
            .send()
    });
    let slow = futures_util::future::try_join_all(slow).await.unwrap();
    assert!(slow.iter().all(|r| r.status() == 200));

    // Her next one is refused at once, naming the limit.
    let started = tokio::time::Instant::now();
    let (status, text, response) = call_as("alice", 200, "sleep", "10000").await;
    // (Queued, it would stream after 0.5 s and answer after 10.)
    assert!(
        started.elapsed() < Duration::from_secs(2) && text.starts_with('{'),
        "refused, not queued: {:?} {text}",
        started.elapsed()
    );
    assert_eq!((status, &response["id"]), (200, &json!(200)), "{text}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("already has 16 requests in flight") && message.contains("max-calls-per-principal"),
        "{text}"
    );
    // Another principal still gets answers.
    let bob = (0..4).map(|n| call_as("bob", 300 + n, "echo", "hi"));
    for (status, text, response) in futures_util::future::join_all(bob).await {
        assert_eq!((status, text_of(&response)), (200, "hi"), "{text}");
    }

    // Alice's clients go away mid-stream: their places come back, and she is answered again.
    drop(slow);
    eventually(TIMEOUT, "alice's share given back", || async {
        let (_, _, response) = call_as("alice", 400, "echo", "back").await;
        text_of(&response) == "back"
    })
    .await;
    gateway.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_silent_stdio_call_ends_after_the_stdio_stall_timeout() {
    let mut config = streaming_soon();
    config.settings.stdio_stall_timeout = "1".parse().unwrap();
    let gateway = gateway_of(config, "legacy").await;
    // A call the process says nothing about for 10 s: a stream after 0.5 s, ended 1 s later.
    let started = tokio::time::Instant::now();
    let (status, text, response) = call(&gateway, 9, "sleep", "10000", json!({})).await;
    let elapsed = started.elapsed();
    assert_eq!((status, &response["id"]), (200, &json!(9)), "{text}");
    assert!(
        response["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("stalled")),
        "{text}"
    );
    assert!(
        elapsed >= Duration::from_millis(1400) && elapsed < Duration::from_secs(5),
        "the head after 0.5 s, then 1 s of silence: {elapsed:?}"
    );
    gateway.shutdown().await.unwrap();
}

/// Issue 38, finding 4, through the binary: a variable of the gateway's environment reaches a
/// stdio server when `--stdio-pass-env` names it (and the others still do not); a program that is
/// not there is `not_found` in `/readyz` and an `error` in the log; a process that exits during
/// its handshake is `exited`, with its last stderr lines in the log at `warn`, where each
/// stderr line is otherwise at `debug` (not in an `info` log).
#[tokio::test]
async fn stdio_servers_get_the_variables_passed_on_and_say_why_they_do_not_start() {
    let server = workspace_binary("legacy-stdio-server");
    let keys = tower_mrtr::Keyring::generate("k1").unwrap().to_config_string();
    let gateway = Process::spawn(
        BIN,
        &[
            "--backend",
            &format!("local=stdio:{} legacy-stdio", server.display()),
            "--backend",
            "gone=stdio:/nonexistent/mcp-server",
            "--backend",
            "dying=stdio:sh -c 'echo chatty-line >&2; echo the-last-words >&2; exit 3'",
            "--stdio-pass-env",
            "MRTR_TEST_CA_FILE",
            "--log-format",
            "json",
        ],
        &[
            ("MRTR_KEYS", keys.as_str()),
            ("MRTR_TEST_CA_FILE", "/etc/ssl/test.pem"),
            ("MRTR_TEST_NOT_PASSED", "x"),
        ],
    );
    eventually(TIMEOUT, "every backend probed", || async {
        let backends = gateway.readyz().await.1["backends"].clone();
        backends["local"]["era"] == "legacy"
            && backends["gone"]["reason"] == "not_found"
            && backends["dying"]["reason"] == "exited"
    })
    .await;
    let (status, _, response) = call_tool_raw(&gateway.url, 1, "environment", json!({}), json!({}), &[])
        .await
        .unwrap();
    assert_eq!(status, 200, "{response}");
    assert_eq!(text_of(&response), "HOME,MRTR_TEST_CA_FILE,PATH", "{response}");

    let lines = || -> Vec<Value> {
        let stderr = gateway.stderr.lock().unwrap().clone();
        stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .collect()
    };
    eventually(TIMEOUT, "the last stderr lines at warn", || async {
        lines().iter().any(|l| {
            l["level"] == "WARN"
                && l["fields"]["backend"] == "dying"
                && l["fields"]["stderr"] == "chatty-line\nthe-last-words"
        })
    })
    .await;
    let lines = lines();
    assert!(
        lines.iter().any(|l| l["level"] == "ERROR"
            && l["fields"]["backend"] == "gone"
            && l["fields"]["reason"] == "not_found"),
        "{lines:#?}"
    );
    // Each stderr line is a debug line, not in this info log.
    assert!(
        !lines
            .iter()
            .any(|l| l["fields"]["message"] == "stdio backend" && l["level"] == "INFO"),
        "{lines:#?}"
    );
    // The processes running and those gone down, by reason, in /metrics.
    let metrics = gateway.metrics().await;
    let count = |metric: &str, labels: &[(&str, &str)]| sample(&metrics, metric, labels);
    assert_eq!(
        count("mrtr_gateway_stdio_processes", &[("backend", "local")]),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        count("mrtr_gateway_stdio_processes", &[("backend", "gone")]),
        None,
        "{metrics}"
    );
    let down = |backend, reason| {
        count(
            "mrtr_gateway_stdio_down_total",
            &[("backend", backend), ("reason", reason)],
        )
    };
    assert!(down("gone", "not_found").is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(down("dying", "exited").is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(
        count("mrtr_gateway_stdio_down_total", &[("backend", "local")]),
        None,
        "{metrics}"
    );
}

/// Issue 38, finding 4: with `--require-backends` a backend that cannot start stops the start,
/// named with its reason; one that starts lets the gateway serve.
#[tokio::test]
async fn require_backends_refuses_to_start_without_them() {
    let keys = tower_mrtr::Keyring::generate("k1").unwrap().to_config_string();
    let refused = tokio::process::Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--require-backends"])
        .args(["--backend", "gone=stdio:/nonexistent/mcp-server"])
        .env("MRTR_KEYS", &keys)
        .kill_on_drop(true)
        .output();
    let refused = tokio::time::timeout(Duration::from_secs(150), refused)
        .await
        .expect("the gateway exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("gone (not_found)"), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&refused.stdout).contains("listening on"),
        "it never said it serves"
    );

    let server = workspace_binary("legacy-stdio-server");
    let gateway = Process::spawn(
        BIN,
        &[
            "--require-backends",
            "--backend",
            &format!("local=stdio:{} legacy-stdio", server.display()),
        ],
        &[("MRTR_KEYS", keys.as_str())],
    );
    assert_eq!(gateway.readyz().await.1["backends"]["local"]["era"], "legacy");
}
