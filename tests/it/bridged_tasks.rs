//! Bridged tasks (`crates/mrtr-gateway/src/tasks/`): a raw 2026-07-28 client that declares the
//! Tasks extension calls tools of a real `initialize`-era backend (rmcp's `LegacyBackend`, over
//! Streamable HTTP with sessions) that ask the client something mid-call. The gateway answers the
//! client a task and serves `tasks/get|update|cancel` for it while the backend's call runs.
//!
//! What is checked: the elicitation and roots shapes in `inputRequests`, answers reaching the
//! backend as the responses to its requests (unknown keys ignored), the tool result exactly as
//! the backend gave it; a client without Tasks gets today's error, naming the extension; a
//! handle bound to its principal; cancel (the backend sees `notifications/cancelled`); a client
//! that never answers (the task fails, the backend's call is cancelled); a backend that goes away
//! mid-task; the bound per principal; the audit trail of a task.

use anyhow::Context as _;
use mrtr_backends::LegacyBackend;
use mrtr_gateway::PositiveSeconds;
use mrtr_test_support::backends::legacy_behind;
use mrtr_test_support::mcp::{Call, Reply, TASKS_EXTENSION, meta_declaring, send, with_client_info};
use mrtr_test_support::tls::TempDir;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// The `_meta` of a client that declares the Tasks extension and `capabilities`.
fn tasks_client(mut capabilities: Value) -> Value {
    capabilities["extensions"] = json!({ TASKS_EXTENSION: {} });
    with_client_info(meta_declaring(capabilities), "raw-tasks-client", "0")
}

/// `tools/call` of `tool` by a Tasks client declaring `capabilities`.
pub(crate) fn call(tool: &str, capabilities: Value) -> Call {
    Call::tool(tool, json!({})).with_meta(tasks_client(capabilities))
}

/// `method` (`tasks/*`) on the task handle `task`, with `params` added.
pub(crate) fn on_task(method: &str, task: &str, mut params: Value, capabilities: Value) -> Call {
    params["taskId"] = json!(task);
    Call::new(method, params).with_meta(tasks_client(capabilities))
}

/// The task handle of a `CreateTaskResult`.
pub(crate) fn created(reply: &Reply) -> anyhow::Result<String> {
    let result = reply.result();
    anyhow::ensure!(result["resultType"] == "task", "not a task: {}", reply.body);
    Ok(result["taskId"].as_str().context("taskId")?.to_owned())
}

/// Checks that `reply` answers its call in full (`resultType: "complete"`, no task made) with a
/// text that contains `expected`.
#[track_caller]
pub(crate) fn answered_saying(reply: &Reply, expected: &str) {
    assert_eq!(
        reply.result()["resultType"],
        "complete",
        "no task: {}",
        reply.body
    );
    assert!(reply.text().contains(expected), "{}", reply.text());
}

/// Polls `tasks/get` until the task's status is `status`; its last result.
async fn until(url: &str, task: &str, status: &str, capabilities: &Value) -> anyhow::Result<Value> {
    until_with(url, status, || {
        on_task("tasks/get", task, json!({}), capabilities.clone())
    })
    .await
}

/// Sends `poll` (a `tasks/get`) until the task's status is `status`; its last result.
pub(crate) async fn until_with(url: &str, status: &str, poll: impl Fn() -> Call) -> anyhow::Result<Value> {
    let mut last = Value::Null;
    for _ in 0..100 {
        let reply = send(url, &poll()).await?;
        last = reply.result().clone();
        if last["status"] == status {
            return Ok(last);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!("the task never became {status}: {last}")
}

#[tokio::test]
async fn a_legacy_backends_elicitation_and_roots_reach_a_tasks_client_as_a_task() -> anyhow::Result<()> {
    let backend = LegacyBackend::new("old");
    let (_served, gateway) = legacy_behind(&backend, |_| {}).await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });

    let reply = send(&url, &call("ask", elicits.clone())).await?;
    let task = created(&reply)?;
    assert!(
        !task.starts_with("mrtr-bridged."),
        "the client holds a sealed handle: {task}"
    );
    assert_eq!(reply.result()["status"], "input_required", "{}", reply.body);
    assert_eq!(reply.result()["ttlMs"], 3_600_000);

    // Durable creation: the id answers tasks/get at once, with the backend's request in MRTR's shape.
    let got = send(&url, &on_task("tasks/get", &task, json!({}), elicits.clone())).await?;
    let result = got.result();
    assert_eq!(
        (result["resultType"].as_str(), result["status"].as_str()),
        (Some("complete"), Some("input_required"))
    );
    assert_eq!(
        result["taskId"],
        task.as_str(),
        "the answer names the client's handle"
    );
    let requests = result["inputRequests"].as_object().context("inputRequests")?;
    let (key, request) = requests.iter().next().context("one request")?;
    assert_eq!(requests.len(), 1);
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["name"]["type"],
        "string"
    );
    assert!(request.get("id").is_none() && request.get("jsonrpc").is_none());

    let answers = json!({ key: { "action": "accept", "content": { "name": "Ada" } }, "not-asked": { "action": "decline" } });
    let ack = send(
        &url,
        &on_task(
            "tasks/update",
            &task,
            json!({ "inputResponses": answers }),
            elicits.clone(),
        ),
    )
    .await?;
    assert_eq!(ack.result(), &json!({ "resultType": "complete" }));
    let done = until(&url, &task, "completed", &elicits).await?;
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");
    assert!(done.get("inputRequests").is_none());

    // roots/list, the other shape, answered through the same path.
    let roots = json!({ "roots": {} });
    let task = created(&send(&url, &call("roots", roots.clone())).await?)?;
    let waiting = until(&url, &task, "input_required", &roots).await?;
    let (key, request) = waiting["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next())
        .context("a request")?;
    assert_eq!(request["method"], "roots/list");
    let answers = json!({ key: { "roots": [{ "uri": "file:///srv/project" }] } });
    send(
        &url,
        &on_task(
            "tasks/update",
            &task,
            json!({ "inputResponses": answers }),
            roots.clone(),
        ),
    )
    .await?;
    let done = until(&url, &task, "completed", &roots).await?;
    assert_eq!(done["result"]["content"][0]["text"], "1 roots");

    // A client that does not declare Tasks gets what it got before, told how to get more.
    let plain = send(&url, &Call::tool("ask", json!({}))).await?;
    answered_saying(&plain, "io.modelcontextprotocol/tasks");
    gateway.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_bridged_task_is_its_principals_and_cancel_cancels_the_backends_call() -> anyhow::Result<()> {
    let backend = LegacyBackend::new("old");
    let (_served, gateway) = legacy_behind(&backend, |config| {
        config.settings.principal_header = Some("x-principal".parse().expect("a header name"));
    })
    .await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    let task = created(&send(&url, &call("ask", elicits.clone()).header("x-principal", "alice")).await?)?;

    let theirs = on_task("tasks/get", &task, json!({}), elicits.clone()).header("x-principal", "bob");
    let refused = send(&url, &theirs).await?;
    assert!(
        refused.body.get("error").is_some(),
        "another principal's poll: {}",
        refused.body
    );
    let cancel = on_task("tasks/cancel", &task, json!({}), elicits.clone()).header("x-principal", "alice");
    assert_eq!(
        send(&url, &cancel).await?.result(),
        &json!({ "resultType": "complete" })
    );
    let mine = on_task("tasks/get", &task, json!({}), elicits.clone()).header("x-principal", "alice");
    let got = send(&url, &mine).await?;
    assert_eq!(got.result()["status"], "cancelled", "{}", got.body);
    eventually(TIMEOUT, "the backend's call cancelled", || async {
        backend.cancelled() == 1
    })
    .await;
    gateway.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_task_fails_when_its_client_never_answers_or_its_backend_goes_away() -> anyhow::Result<()> {
    let backend = LegacyBackend::new("old");
    let (served, gateway) = legacy_behind(&backend, |config| {
        config.settings.bridged_task_answer_timeout = PositiveSeconds::from_secs(1).expect("not zero");
    })
    .await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    let task = created(&send(&url, &call("ask", elicits.clone())).await?)?;
    let failed = until(&url, &task, "failed", &elicits).await?;
    let message = failed["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer"), "{failed}");
    eventually(TIMEOUT, "the backend's call cancelled", || async {
        backend.cancelled() == 1
    })
    .await;

    gateway.shutdown().await?;
    drop(served);

    // A backend that goes away while its task waits for the client.
    let (served, gateway) = legacy_behind(&backend, |_| {}).await?;
    let url = gateway.url();
    let task = created(&send(&url, &call("ask", elicits.clone())).await?)?;
    drop(served);
    let failed = until(&url, &task, "failed", &elicits).await?;
    let message = failed["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("without answering"), "{failed}");
    gateway.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_principal_holds_at_most_its_share_of_tasks() -> anyhow::Result<()> {
    let backend = LegacyBackend::new("old");
    let (_served, gateway) = legacy_behind(&backend, |config| {
        config.settings.bridged_tasks_per_principal = 1.try_into().expect("not zero");
    })
    .await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    created(&send(&url, &call("ask", elicits.clone())).await?)?;
    let second = send(&url, &call("ask", elicits)).await?;
    answered_saying(&second, "bridged-tasks-per-principal");
    gateway.shutdown().await?;
    Ok(())
}

/// A bridged task in the audit trail (`[audit]`), as any task: the call whose answer made it
/// (outcome `task`), and each follow-up with the tool and backend its handle names.
#[tokio::test]
async fn a_bridged_task_is_in_the_audit_trail() -> anyhow::Result<()> {
    let dir = TempDir::new("bridged-audit");
    let file = dir.path("audit.jsonl");
    let audit: toml::Table = toml::from_str(&format!(
        "output = \"file\"\nfile = {:?}\n",
        file.display().to_string()
    ))?;
    let backend = LegacyBackend::new("old");
    let (_served, gateway) = legacy_behind(&backend, |config| {
        config.settings.audit = Some(audit.try_into().expect("an [audit] table"));
    })
    .await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    let task = created(&send(&url, &call("ask", elicits.clone())).await?)?;
    let waiting = until(&url, &task, "input_required", &elicits).await?;
    let key = waiting["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next())
        .context("a request")?
        .clone();
    let answers = json!({ key: { "action": "accept", "content": { "name": "Ada" } } });
    let update = on_task(
        "tasks/update",
        &task,
        json!({ "inputResponses": answers }),
        elicits.clone(),
    );
    send(&url, &update).await?;
    until(&url, &task, "completed", &elicits).await?;
    gateway.shutdown().await?; // writes and flushes the trail

    let text = std::fs::read_to_string(&file)?;
    let lines: Vec<Value> = text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    let call_line = lines
        .iter()
        .find(|l| l["method"] == "tools/call")
        .context("the call's line")?;
    assert_eq!(
        (&call_line["target"], &call_line["backend"], &call_line["outcome"]),
        (&json!("ask"), &json!("old"), &json!("task")),
        "{text}"
    );
    for method in ["tasks/get", "tasks/update"] {
        let follow_up = lines
            .iter()
            .find(|l| l["method"] == method)
            .with_context(|| format!("a {method} line:\n{text}"))?;
        assert_eq!(
            (
                &follow_up["target"],
                &follow_up["backend"],
                &follow_up["state_opened"]
            ),
            (&json!("ask"), &json!("old"), &json!(true)),
            "{follow_up}"
        );
    }
    Ok(())
}

/// A legacy HTTP backend's `server/discover` through the gateway offers the Tasks extension
/// while the bridge is on, so that clients which declare the extension only when it is offered
/// find it; its own `serverInfo` is kept. With the bridge off it is not offered.
#[tokio::test]
async fn discover_offers_tasks_for_a_legacy_backend_while_the_bridge_is_on() -> anyhow::Result<()> {
    let backend = LegacyBackend::new("old");
    let discover = Call::new("server/discover", json!({}));
    let (_served, on) = legacy_behind(&backend, |_| {}).await?;
    let reply = send(&on.url(), &discover).await?;
    let result = reply.result();
    assert_eq!(
        result["capabilities"]["extensions"][TASKS_EXTENSION],
        json!({}),
        "{}",
        reply.body
    );
    assert!(result["capabilities"]["tools"].is_object(), "{}", reply.body);
    assert_ne!(result["serverInfo"]["name"], "mrtr-gateway", "the backend's own");
    on.shutdown().await?;

    let (_served, off) = legacy_behind(&backend, |config| config.settings.bridged_tasks_max = 0).await?;
    let reply = send(&off.url(), &discover).await?;
    assert!(
        reply.result()["capabilities"]["extensions"]
            .get(TASKS_EXTENSION)
            .is_none(),
        "{}",
        reply.body
    );
    off.shutdown().await?;
    Ok(())
}

/// A bridged task's follow-ups are requests of their principal, counted by `[[rate-limit]]` as
/// every other task follow-up is, though the bridge answers them from memory.
#[tokio::test]
async fn a_bridged_tasks_follow_ups_count_against_the_principals_limit() -> anyhow::Result<()> {
    let limit: toml::Table = toml::from_str(
        "[[rate-limit]]\nname = \"requests\"\nper = \"principal\"\nrequests = 3\nperiod = 3600\n",
    )?;
    let backend = LegacyBackend::new("old");
    let (_served, gateway) = legacy_behind(&backend, |config| {
        config.settings.principal_header = Some("x-principal".parse().expect("a header name"));
        config.settings.rate_limit = limit["rate-limit"].clone().try_into().expect("a [[rate-limit]]");
    })
    .await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    let ada = |method: &str, task: &str| {
        on_task(method, task, json!({}), elicits.clone()).header("x-principal", "ada")
    };
    // The call is the first request of three, two polls the others; the third poll is one too many.
    let task = created(&send(&url, &call("ask", elicits.clone()).header("x-principal", "ada")).await?)?;
    for poll in 1..=2 {
        let got = send(&url, &ada("tasks/get", &task)).await?;
        assert_eq!(
            got.result()["status"],
            "input_required",
            "poll {poll}: {}",
            got.body
        );
    }
    let over = send(&url, &ada("tasks/get", &task)).await?;
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(
        over.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Rate limit"),
        "{}",
        over.body
    );
    // Another principal's budget is its own: its poll reaches the bridge, which knows no such task.
    let bob = on_task("tasks/get", &task, json!({}), elicits.clone()).header("x-principal", "bob");
    assert_ne!(send(&url, &bob).await?.status, 429);
    gateway.shutdown().await?;
    Ok(())
}
