//! Real-peer tests of the Tasks extension (SEP-2663) through mrtr-gateway: two task-capable rmcp
//! backends (`a` = identity `task-a`, `b` = identity `task-b`, offering the same tools, so the
//! gateway exposes them as `a__…` and `b__…`) behind the gateway, driven by an rmcp client that
//! declares the extension, and by raw HTTP for the refusals.
//!
//! What is checked:
//! * a task's id reaches the client only as a sealed handle, and `tasks/get|update|cancel` with
//!   that handle reach the backend that minted the task (its identity is in the result);
//! * create → poll → answer the task's input through `tasks/update` → complete;
//! * create → cancel → `cancelled`;
//! * MRTR rounds, then a task (`test_tool_with_task`), with the round pinned and the task handle
//!   pinned to the same backend;
//! * refusals that never reach a backend: a forged or tampered handle, a `requestState` used as a
//!   handle, a handle used as a `requestState`, a handle presented to a gateway that does not
//!   have the backend it names, handles of two backends in one `subscriptions/listen` filter.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use mrtr_backends::{DemoBackend, ResponseMode, ServedBackend, TasksFixture, serve};
use mrtr_gateway::{Backend, GatewayConfig, RunningGateway};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, Reply, TASKS_EXTENSION, meta_declaring, with_client_info};
use mrtr_test_support::peers::{connect, tool_params};
use mrtr_test_support::wait::TIMEOUT;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams, GetTaskResult,
    Implementation, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RunningService;
use serde_json::{Value, json};
use tower_mrtr::Keyring;

/// Two task backends behind one gateway.
struct TaskStack {
    a: ServedBackend,
    b: ServedBackend,
    fixture_a: TasksFixture,
    fixture_b: TasksFixture,
    keyring: Arc<Keyring>,
    gateway: RunningGateway,
}

impl TaskStack {
    async fn new() -> anyhow::Result<Self> {
        let fixture_a = TasksFixture::new("task-a")?;
        let fixture_b = TasksFixture::new("task-b")?;
        let a = serve(fixture_a.clone(), ResponseMode::Json).await?;
        let b = serve(fixture_b.clone(), ResponseMode::Sse).await?;
        let keyring = keyring();
        let backends = vec![Backend::new("a", &a.url())?, Backend::new("b", &b.url())?];
        let gateway = gateway(GatewayConfig::new(backends), keyring.clone()).await?;
        Ok(Self {
            a,
            b,
            fixture_a,
            fixture_b,
            keyring,
            gateway,
        })
    }

    fn url(&self) -> String {
        self.gateway.url()
    }

    /// Requests both backends received so far.
    fn requests(&self) -> (u64, u64) {
        (self.a.requests(), self.b.requests())
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.gateway.shutdown().await?;
        self.a.shutdown().await?;
        self.b.shutdown().await?;
        Ok(())
    }
}

/// An rmcp client declaring elicitation and the tasks extension, on the 2026-07-28 lifecycle.
async fn connect_tasks_client(url: &str) -> anyhow::Result<RunningService<RoleClient, ClientConfig>> {
    let info = ClientConfig::new(
        ClientCapabilities::builder()
            .enable_elicitation()
            .enable_tasks()
            .build(),
        Implementation::new("mrtr-tasks-tests", "0.1.0"),
    );
    connect(url, info).await
}

/// `tools/call` once; the task id (the client's handle) of the `CreateTaskResult`.
async fn create_task(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<String> {
    let params = tool_params(tool, arguments)?;
    match tokio::time::timeout(TIMEOUT, client.call_tool_once(params)).await?? {
        CallToolResponse::Task(created) => {
            ensure!(
                created.task.status == TaskStatus::Working,
                "new task not working: {created:?}"
            );
            Ok(created.task.task_id)
        }
        other => bail!("{tool} did not create a task: {other:?}"),
    }
}

/// Polls `tasks/get` until the task is in `wanted` or terminal.
async fn poll(
    client: &RunningService<RoleClient, ClientConfig>,
    handle: &str,
    wanted: TaskStatus,
) -> anyhow::Result<GetTaskResult> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let got = tokio::time::timeout(TIMEOUT, client.get_task(GetTaskParams::new(handle))).await??;
        ensure!(
            got.task.task.task_id == handle,
            "tasks/get must name the task by the client's handle"
        );
        let status = got.task.task.status;
        if status == wanted || status.is_terminal() {
            return Ok(got);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "task {handle} stuck in {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first text block of a completed task's result.
fn completed_text(got: &GetTaskResult) -> anyhow::Result<String> {
    let TaskPayload::Completed { result } = &got.task.payload else {
        bail!("not completed: {got:?}")
    };
    Ok(result["content"][0]["text"]
        .as_str()
        .context("no text")?
        .to_owned())
}

#[tokio::test]
async fn a_task_is_created_polled_answered_through_tasks_update_and_completed_on_its_backend()
-> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let client = connect_tasks_client(&stack.url()).await?;

    let handle = create_task(&client, "b__confirm_delete", json!({ "filename": "report.txt" })).await?;
    assert!(
        handle.starts_with("mrtr4."),
        "the client sees a sealed handle, not the backend's id: {handle}"
    );
    assert_eq!(stack.fixture_b.running_tasks(), 1, "the task runs on b");
    assert_eq!(stack.fixture_a.running_tasks(), 0);

    let parked = poll(&client, &handle, TaskStatus::InputRequired).await?;
    let TaskPayload::InputRequired { input_requests } = &parked.task.payload else {
        bail!("expected input_required, got {parked:?}");
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["confirm"]);

    let (a_before, _) = stack.requests();
    let answers = [(
        "confirm".to_owned(),
        json!({ "action": "accept", "content": { "confirm": true } }),
    )];
    tokio::time::timeout(
        TIMEOUT,
        client.update_task(UpdateTaskParams::new(&handle, answers.into_iter().collect())),
    )
    .await??;
    let done = poll(&client, &handle, TaskStatus::Completed).await?;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    assert_eq!(completed_text(&done)?, "report.txt deleted on task-b");
    assert_eq!(stack.requests().0, a_before, "no follow-up went to a");

    client.cancel().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_task_is_cancelled_on_its_backend() -> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let client = connect_tasks_client(&stack.url()).await?;

    let handle = create_task(
        &client,
        "a__slow_compute",
        json!({ "seconds": 30, "label": "long" }),
    )
    .await?;
    assert_eq!(stack.fixture_a.running_tasks(), 1, "the task runs on a");
    let working = tokio::time::timeout(TIMEOUT, client.get_task(GetTaskParams::new(&handle))).await??;
    assert_eq!(working.task.task.status, TaskStatus::Working);

    tokio::time::timeout(TIMEOUT, client.cancel_task(CancelTaskParams::new(&handle))).await??;
    let cancelled = poll(&client, &handle, TaskStatus::Cancelled).await?;
    assert_eq!(cancelled.task.task.status, TaskStatus::Cancelled);
    assert_eq!(stack.fixture_a.running_tasks(), 0);
    // Cancelling a terminal task is still acknowledged.
    tokio::time::timeout(TIMEOUT, client.cancel_task(CancelTaskParams::new(&handle))).await??;

    client.cancel().await?;
    stack.stop().await
}

// --- raw HTTP -------------------------------------------------------------------------------------

/// POSTs one 2026-07-28 request declaring elicitation and the tasks extension, with `Mcp-Name`
/// mirroring `params.name` or `params.taskId`.
async fn send(url: &str, method: &str, params: Value) -> anyhow::Result<Reply> {
    let capabilities = json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {} } });
    let meta = with_client_info(meta_declaring(capabilities), "raw-tasks-client", "0");
    mrtr_test_support::mcp::send(url, &Call::new(method, params).with_meta(meta)).await
}

/// Creates a long `slow_compute` task on `backend` (`a` or `b`); returns the client's handle.
async fn raw_task(url: &str, backend: &str) -> anyhow::Result<String> {
    let tool = format!("{backend}__slow_compute");
    let reply = send(
        url,
        "tools/call",
        json!({ "name": tool, "arguments": { "seconds": 30 } }),
    )
    .await?;
    ensure!(reply.result()["resultType"] == "task", "no task: {reply:?}");
    Ok(reply.result()["taskId"].as_str().context("no taskId")?.to_owned())
}

#[tokio::test]
async fn mrtr_rounds_then_a_task_on_the_same_backend() -> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let url = stack.url();
    let call = json!({ "name": "a__test_tool_with_task", "arguments": {} });

    let round1 = send(&url, "tools/call", call.clone()).await?;
    assert_eq!(round1.result()["resultType"], "input_required", "{round1:?}");
    assert!(round1.result().get("taskId").is_none());
    let state = round1.result()["requestState"]
        .as_str()
        .context("no requestState")?;
    assert!(state.starts_with("mrtr4."), "the backend's state is sealed");

    let mut retry = call.clone();
    retry["inputResponses"] = json!({ "user_name": { "action": "accept", "content": { "name": "Alice" } } });
    retry["requestState"] = json!(state);
    let round2 = send(&url, "tools/call", retry).await?;
    assert_eq!(round2.result()["resultType"], "task", "{round2:?}");
    assert!(round2.result().get("requestState").is_none() && round2.result().get("inputRequests").is_none());
    let handle = round2.result()["taskId"]
        .as_str()
        .context("no taskId")?
        .to_owned();
    assert!(handle.starts_with("mrtr4.") && handle != state);

    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let done = loop {
        let got = send(&url, "tasks/get", json!({ "taskId": handle })).await?;
        assert_eq!(got.result()["taskId"], handle.as_str(), "{got:?}");
        if got.result()["status"] == "completed" {
            break got;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "task never completed: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        done.result()["result"]["content"][0]["text"],
        "Hello, Alice! (from a task on task-a)"
    );
    assert_eq!(stack.fixture_b.running_tasks(), 0);
    stack.stop().await
}

#[tokio::test]
async fn forged_misused_and_misrouted_handles_never_reach_a_backend() -> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let url = stack.url();
    let handle_a = raw_task(&url, "a").await?;
    let handle_b = raw_task(&url, "b").await?;
    // A sealed requestState of a, from the first MRTR round of test_tool_with_task.
    let call = json!({ "name": "a__test_tool_with_task", "arguments": {} });
    let round1 = send(&url, "tools/call", call.clone()).await?;
    let state = round1.result()["requestState"]
        .as_str()
        .context("no requestState")?
        .to_owned();

    // A second gateway with the same keys whose backends have other names: the handle's route
    // (`a`) does not exist there.
    let renamed = vec![
        Backend::new("x", &stack.a.url())?,
        Backend::new("y", &stack.b.url())?,
    ];
    let other = gateway(GatewayConfig::new(renamed), stack.keyring.clone()).await?;
    let other_url = other.url();

    let mut tampered = handle_a.clone().into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered)?;
    let mut misused_state = call.clone();
    misused_state["inputResponses"] =
        json!({ "user_name": { "action": "accept", "content": { "name": "Eve" } } });
    misused_state["requestState"] = json!(handle_a);

    let refusals: Vec<(&str, &str, &str, Value)> = vec![
        (
            "forged handle",
            &url,
            "tasks/get",
            json!({ "taskId": "6c9a7f52-3b1e-4c8e-9a51-2f1d0e7b8c44" }),
        ),
        (
            "forged envelope",
            &url,
            "tasks/cancel",
            json!({ "taskId": "mrtr2.AAAAAAAAAAAAAAAAAAAAAAAAAAAA" }),
        ),
        (
            "tampered handle",
            &url,
            "tasks/get",
            json!({ "taskId": tampered }),
        ),
        (
            "requestState as handle",
            &url,
            "tasks/get",
            json!({ "taskId": state }),
        ),
        (
            "requestState as handle (update)",
            &url,
            "tasks/update",
            json!({ "taskId": state, "inputResponses": {} }),
        ),
        ("handle as requestState", &url, "tools/call", misused_state),
        (
            "handle on a gateway without its backend",
            &other_url,
            "tasks/get",
            json!({ "taskId": handle_a }),
        ),
        (
            "handles of two backends in one listen filter",
            &url,
            "subscriptions/listen",
            json!({ "notifications": { "taskIds": [handle_a, handle_b] } }),
        ),
    ];
    for (what, target, method, params) in refusals {
        let before = stack.requests();
        let reply = send(target, method, params).await?;
        assert_eq!(reply.error_code(), Some(-32602), "{what}: {reply:?}");
        assert_eq!(stack.requests(), before, "{what}: a backend was reached");
    }

    // The genuine handles still work, each on its own backend.
    for (handle, fixture) in [(&handle_a, &stack.fixture_a), (&handle_b, &stack.fixture_b)] {
        assert_eq!(fixture.running_tasks(), 1);
        let reply = send(&url, "tasks/cancel", json!({ "taskId": handle })).await?;
        assert_eq!(
            (reply.status, reply.result()["resultType"].as_str()),
            (200, Some("complete")),
            "{reply:?}"
        );
    }
    other.shutdown().await?;
    stack.stop().await
}

#[tokio::test]
async fn discover_through_the_gateway_advertises_tasks_when_one_backend_does() -> anyhow::Result<()> {
    let tasks = serve(TasksFixture::new("task-a")?, ResponseMode::Json).await?;
    let plain = serve(DemoBackend::beta("beta")?, ResponseMode::Json).await?;
    let backends = vec![
        Backend::new("a", &tasks.url())?,
        Backend::new("beta", &plain.url())?,
    ];
    let mixed = gateway(GatewayConfig::new(backends), keyring()).await?;
    let reply = send(&mixed.url(), "server/discover", json!({})).await?;
    assert_eq!(
        reply.result()["capabilities"]["extensions"],
        json!({ "io.modelcontextprotocol/tasks": {} }),
        "{reply:?}"
    );

    let backends = vec![Backend::new("beta", &plain.url())?];
    let without = gateway(GatewayConfig::new(backends), keyring()).await?;
    let reply = send(&without.url(), "server/discover", json!({})).await?;
    assert!(
        reply.result()["capabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_none(),
        "{reply:?}"
    );

    mixed.shutdown().await?;
    without.shutdown().await?;
    tasks.shutdown().await?;
    plain.shutdown().await?;
    Ok(())
}

/// SEP-2663: a client that does not declare the extension gets `-32021` on `tasks/*`, whatever the
/// task id (conformance check `sep-2663-tasks-methods-non-declaring`); the layer answers it before
/// opening the handle, so no backend is asked.
#[tokio::test]
async fn a_client_without_the_extension_gets_missing_capability_on_tasks_methods() -> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let handle = raw_task(&stack.url(), "a").await?;
    for task_id in ["gate-test", handle.as_str()] {
        // Declares no capability at all, so not the extension.
        let meta = with_client_info(meta_declaring(json!({})), "raw", "0");
        let call = Call::new("tasks/get", json!({ "taskId": task_id })).with_meta(meta);
        let reply = mrtr_test_support::mcp::send(&stack.url(), &call).await?;
        assert_eq!(reply.status, 400);
        let answer = reply.body;
        assert_eq!(answer["error"]["code"], -32021, "{answer}");
        assert_eq!(
            answer["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
            json!({})
        );
    }
    stack.stop().await
}

/// A gateway over `stack`'s backends sharing its keyring, with `extra` config (policy, limits)
/// in TOML and `x-user` as the principal header.
async fn gateway_with(stack: &TaskStack, extra: &str) -> anyhow::Result<RunningGateway> {
    let backends = vec![
        Backend::new("a", &stack.a.url())?,
        Backend::new("b", &stack.b.url())?,
    ];
    let mut config = GatewayConfig::new(backends);
    config.settings.principal_header = Some("x-user".parse()?);
    let file: toml::Table = toml::from_str(extra)?;
    if let Some(policy) = file.get("policy") {
        config.settings.policy = policy.clone().try_into()?;
    }
    if let Some(limits) = file.get("rate-limit") {
        config.settings.rate_limit = limits.clone().try_into()?;
    }
    let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
    gateway(config, stack.keyring.clone()).await
}

/// [`send`] as the principal `user`.
async fn send_as(url: &str, user: &str, method: &str, params: Value) -> anyhow::Result<Reply> {
    let capabilities = json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {} } });
    let meta = with_client_info(meta_declaring(capabilities), "raw-tasks-client", "0");
    let call = Call::new(method, params).with_meta(meta).header("x-user", user);
    mrtr_test_support::mcp::send(url, &call).await
}

/// Review 3, finding 5: a follow-up is checked as the call that created its task, against the
/// policy of the replica it reaches: a caller no longer permitted the tool cannot drive the task
/// on. (Two replicas with one keyring and two policies stand for a policy changed in between.)
#[tokio::test]
async fn a_task_follow_up_is_checked_against_the_current_policy_for_its_tool() -> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let before = gateway_with(&stack, "[[policy]]\nprincipals = [\"*\"]\ntools = [\"*\"]\n").await?;
    let after = gateway_with(
        &stack,
        "[[policy]]\nprincipals = [\"*\"]\ntools = [\"*\"]\n\n[[policy]]\nprincipals = [\"alice\"]\ntools = [\"slow_compute\"]\neffect = \"deny\"\n",
    )
    .await?;
    let created = send_as(
        &before.url(),
        "alice",
        "tools/call",
        json!({ "name": "b__slow_compute", "arguments": { "seconds": 30 } }),
    )
    .await?;
    ensure!(created.result()["resultType"] == "task", "no task: {created:?}");
    let handle = created.result()["taskId"]
        .as_str()
        .context("no taskId")?
        .to_owned();

    let polled = send_as(&before.url(), "alice", "tasks/get", json!({ "taskId": handle })).await?;
    assert_eq!(polled.status, 200, "{}", polled.body);
    // `after` lists the tools once (as a client would), so that what follows counts follow-ups
    // only, not its catalog's first fill.
    send_as(&after.url(), "bob", "tools/list", json!({})).await?;
    let requests = stack.requests();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let mut params = json!({ "taskId": handle });
        if method == "tasks/update" {
            params["inputResponses"] = json!({});
        }
        let refused = send_as(&after.url(), "alice", method, params).await?;
        assert_eq!(refused.status, 403, "{method}: {}", refused.body);
        assert_eq!(refused.error_code(), Some(-32600), "{method}: {}", refused.body);
    }
    assert_eq!(
        stack.requests(),
        requests,
        "no refused follow-up reached a backend"
    );
    // Bob is not denied: his task goes on there.
    let bobs = send_as(
        &before.url(),
        "bob",
        "tools/call",
        json!({ "name": "b__slow_compute", "arguments": { "seconds": 30 } }),
    )
    .await?;
    let bobs = bobs.result()["taskId"].as_str().context("no taskId")?.to_owned();
    let polled = send_as(&after.url(), "bob", "tasks/get", json!({ "taskId": bobs })).await?;
    assert_eq!(polled.status, 200, "{}", polled.body);
    before.shutdown().await?;
    after.shutdown().await?;
    stack.stop().await
}

/// Review 3, finding 1: task follow-ups reach a backend, and count as requests of their
/// principal (a task runs its tool once, paid for by its `tools/call`).
#[tokio::test]
async fn task_follow_ups_count_against_the_principals_limit() -> anyhow::Result<()> {
    let stack = TaskStack::new().await?;
    let limited = gateway_with(
        &stack,
        "[[rate-limit]]\nper = \"principal\"\nrequests = 3\nperiod = 3600\n",
    )
    .await?;
    let url = limited.url();
    let created = send_as(
        &url,
        "alice",
        "tools/call",
        json!({ "name": "a__slow_compute", "arguments": { "seconds": 30 } }),
    )
    .await?;
    let handle = created.result()["taskId"]
        .as_str()
        .context("no taskId")?
        .to_owned();
    for _ in 0..2 {
        let polled = send_as(&url, "alice", "tasks/get", json!({ "taskId": handle })).await?;
        assert_eq!(polled.status, 200, "{}", polled.body);
    }
    let limited_poll = send_as(&url, "alice", "tasks/get", json!({ "taskId": handle })).await?;
    assert_eq!(limited_poll.status, 429, "{}", limited_poll.body);
    let bob = send_as(&url, "bob", "tools/list", json!({})).await?;
    assert_eq!(bob.status, 200, "bob has his own bucket: {}", bob.body);
    limited.shutdown().await?;
    stack.stop().await
}
