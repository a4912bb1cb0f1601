//! The audit trail (`[audit]`) through the gateway, with real rmcp backends on 127.0.0.1: a
//! tasks backend (`a`, JSON), the demo backends `beta` (`b`, SSE) and `alpha` (`c`, JSON; the
//! tools both offer are exposed with their backend's prefix) and the suite's fixture (`s`, JSON). Every outcome a call can have is made to happen once, the gateway is shut down (which
//! flushes the trail), and the JSON-lines file is read back: one line per call, prompt, resource
//! read, task follow-up and refusal, with the fields `docs/operations.md` describes.

use anyhow::Context as _;
use mrtr_backends::{DemoBackend, ResponseMode, SuiteFixture, TasksFixture, serve};
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::backends::{delete_branch, delete_branch_retry};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, Reply, TASKS_EXTENSION, meta_declaring, send, with_client_info};
use mrtr_test_support::tls::TempDir;
use serde_json::{Value, json};

const EXTRA: &str = r#"
[audit]
output = "file"
record-arguments = ["repo"]

[[policy]]
principals = ["*"]
tools = ["*"]
prompts = ["*"]
resources = ["*"]

[[policy]]
principals = ["*"]
tools = ["archive_repo"]
effect = "deny"

[[rate-limit]]
per = "principal-and-tool"
tools = ["b__whoami"]
requests = 1
period = 3600
"#;

/// `method` with `params` as alice, from the client `audit-test` 1.2, declaring elicitation and
/// the tasks extension.
async fn call(url: &str, method: &str, params: Value) -> anyhow::Result<Reply> {
    let capabilities = json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {} } });
    let meta = with_client_info(meta_declaring(capabilities), "audit-test", "1.2");
    send(
        url,
        &Call::new(method, params)
            .with_meta(meta)
            .header("x-user", "alice"),
    )
    .await
}

#[tokio::test]
async fn every_outcome_of_a_call_is_one_line_of_the_trail() -> anyhow::Result<()> {
    let dir = TempDir::new("audit-outcomes");
    let file = dir.path("audit.jsonl");
    let a = serve(TasksFixture::new("task-a")?, ResponseMode::Json).await?;
    let b = serve(DemoBackend::beta("beta")?, ResponseMode::Sse).await?;
    let c = serve(DemoBackend::alpha("alpha")?, ResponseMode::Json).await?;
    let s = serve(SuiteFixture::new()?, ResponseMode::Json).await?;
    let backends = vec![
        Backend::new("a", &a.url())?,
        Backend::new("b", &b.url())?,
        Backend::new("c", &c.url())?,
        Backend::new("s", &s.url())?,
    ];
    let mut config = GatewayConfig::new(backends);
    config.settings.principal_header = Some("x-user".parse()?);
    let mut extra: toml::Table = toml::from_str(EXTRA)?;
    extra["audit"]
        .as_table_mut()
        .context("[audit]")?
        .insert("file".into(), file.display().to_string().into());
    config.settings.audit = Some(extra["audit"].clone().try_into()?);
    config.settings.policy = extra["policy"].clone().try_into()?;
    config.settings.rate_limit = extra["rate-limit"].clone().try_into()?;
    let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
    let gateway = gateway(config, keyring()).await?;
    let url = gateway.url();

    // completed and is_error
    let simple = call(
        &url,
        "tools/call",
        json!({ "name": "test_simple_text", "arguments": {} }),
    )
    .await?;
    assert!(simple.result()["content"].is_array(), "{simple:?}");
    let failing = call(
        &url,
        "tools/call",
        json!({ "name": "test_error_handling", "arguments": {} }),
    )
    .await?;
    assert_eq!(failing.result()["isError"], true, "{failing:?}");
    // input_required, then the retry's round, completed (arguments: `repo` recorded, `branch` redacted)
    let first = call(&url, "tools/call", delete_branch("b__delete_branch")).await?;
    let state = first.state()?;
    let done = call(
        &url,
        "tools/call",
        delete_branch_retry("b__delete_branch", &state),
    )
    .await?;
    assert!(done.error_code().is_none(), "{done:?}");
    // refused by the layer: a tampered state
    let tampered = call(
        &url,
        "tools/call",
        delete_branch_retry("b__delete_branch", &format!("{state}x")),
    )
    .await?;
    assert_eq!(tampered.error_code(), Some(-32602));
    // refused by the policy, and by a rate limit (the second whoami)
    let denied = call(
        &url,
        "tools/call",
        json!({ "name": "archive_repo", "arguments": { "repo": "r" } }),
    )
    .await?;
    assert!(denied.error_code().is_some(), "{denied:?}");
    call(
        &url,
        "tools/call",
        json!({ "name": "b__whoami", "arguments": {} }),
    )
    .await?;
    let limited = call(
        &url,
        "tools/call",
        json!({ "name": "b__whoami", "arguments": {} }),
    )
    .await?;
    assert_eq!(limited.status, 429, "{limited:?}");
    // refused by the front: no principal
    let anonymous = send(&url, &Call::tool("b__whoami", json!({}))).await?;
    assert_eq!(anonymous.status, 403);
    // a prompt, a resource
    let prompt = call(&url, "prompts/get", json!({ "name": "test_simple_prompt" })).await?;
    assert!(prompt.error_code().is_none(), "{prompt:?}");
    let read = call(&url, "resources/read", json!({ "uri": "test://static-text" })).await?;
    assert!(read.error_code().is_none(), "{read:?}");
    // a task, and its follow-up
    let asked = call(
        &url,
        "tools/call",
        json!({ "name": "test_tool_with_task", "arguments": {} }),
    )
    .await?;
    let mut retry = json!({ "name": "test_tool_with_task", "arguments": {} });
    retry["inputResponses"] = json!({ "user_name": { "action": "accept", "content": { "name": "Alice" } } });
    retry["requestState"] = json!(asked.state()?);
    let task = call(&url, "tools/call", retry).await?;
    assert_eq!(task.result()["resultType"], "task", "{task:?}");
    let handle = task.result()["taskId"].as_str().context("taskId")?.to_owned();
    call(&url, "tasks/get", json!({ "taskId": handle })).await?;
    gateway.shutdown().await?; // writes and flushes the trail

    let text = std::fs::read_to_string(&file)?;
    let lines: Vec<Value> = text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 14, "one line per request above:\n{text}");
    let find = |target: &str, outcome: &str| {
        lines
            .iter()
            .find(|l| l["target"] == target && l["outcome"] == outcome)
            .unwrap_or_else(|| panic!("no {outcome} line for {target}:\n{text}"))
    };
    for line in &lines {
        assert_eq!(line["event"], "call");
        assert!(line["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
        assert!(line["request_id"].is_string(), "{line}");
        assert!(line["latency_ms"].as_f64().is_some(), "{line}");
        assert_eq!(line["dropped"], 0);
    }
    let simple = find("test_simple_text", "completed");
    assert_eq!(simple["principal"], "alice");
    assert_eq!(
        simple["client"],
        json!({ "name": "audit-test", "version": "1.2" })
    );
    assert_eq!(
        (&simple["backend"], &simple["backend_target"]),
        (&json!("s"), &json!("test_simple_text"))
    );
    let renamed = find("b__whoami", "completed");
    assert_eq!(
        (&renamed["backend"], &renamed["backend_target"]),
        (&json!("b"), &json!("whoami"))
    );
    assert_eq!(simple["method"], "tools/call");
    assert!(
        simple["arguments_digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    assert_eq!(
        simple["arguments"],
        json!({}),
        "with record-arguments, every call says its arguments"
    );
    find("test_error_handling", "is_error");
    let asked = lines
        .iter()
        .find(|l| l["target"] == "b__delete_branch" && l["outcome"] == "input_required")
        .context("input_required")?;
    assert_eq!(
        (&asked["retry"], &asked["state_opened"], &asked["round"]),
        (&json!(false), &json!(false), &Value::Null)
    );
    assert_eq!(
        asked["arguments"],
        json!({ "repo": "acme/api", "branch": "[redacted]" })
    );
    let done = find("b__delete_branch", "completed");
    assert_eq!(
        (&done["retry"], &done["state_opened"], &done["round"]),
        (&json!(true), &json!(true), &json!(1))
    );
    assert_eq!(
        done["arguments_digest"], asked["arguments_digest"],
        "the same arguments, the same digest"
    );
    let tampered = lines
        .iter()
        .find(|l| l["reason"] == "invalid_envelope")
        .context("the tampered retry")?;
    assert_eq!(
        (&tampered["outcome"], &tampered["state_opened"]),
        (&json!("refused"), &json!(false))
    );
    assert_eq!(find("archive_repo", "refused")["reason"], "denied");
    let limited = find("b__whoami", "refused");
    assert_eq!(
        (&limited["reason"], &limited["status"]),
        (&json!("rate_limited"), &json!(429))
    );
    assert_eq!(
        (&limited["backend"], &limited["backend_target"]),
        (&Value::Null, &Value::Null),
        "not sent to a backend"
    );
    let anonymous = lines
        .iter()
        .find(|l| l["reason"] == "principal_missing")
        .context("the front's refusal")?;
    assert_eq!(
        (&anonymous["principal"], &anonymous["status"]),
        (&Value::Null, &json!(403))
    );
    assert_eq!(find("test_simple_prompt", "completed")["method"], "prompts/get");
    assert_eq!(find("test://static-text", "completed")["backend"], "s");
    find("test_tool_with_task", "task");
    let follow_up = lines
        .iter()
        .find(|l| l["method"] == "tasks/get")
        .context("the follow-up")?;
    assert_eq!(
        follow_up["target"], "test_tool_with_task",
        "the task's tool, from its handle"
    );
    assert_eq!(
        (&follow_up["backend"], &follow_up["state_opened"]),
        (&json!("a"), &json!(true))
    );
    Ok(())
}

/// An OTLP/HTTP receiver of log records on 127.0.0.1: each record's body, trace id and
/// attributes.
async fn logs_receiver() -> anyhow::Result<(String, LogRecords)> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;
    let records = LogRecords::default();
    let kept = records.clone();
    let app = axum::Router::new().route(
        "/v1/logs",
        axum::routing::post(move |body: bytes::Bytes| {
            let kept = kept.clone();
            async move {
                let request = ExportLogsServiceRequest::decode(body).expect("OTLP protobuf");
                let records = request
                    .resource_logs
                    .iter()
                    .flat_map(|r| &r.scope_logs)
                    .flat_map(|s| &s.log_records);
                for record in records {
                    let text = |value: Option<&Any>| match value {
                        Some(Any::StringValue(s)) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    let body = text(record.body.as_ref().and_then(|b| b.value.as_ref()));
                    let trace: String = record.trace_id.iter().map(|b| format!("{b:02x}")).collect();
                    let attributes = record
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect();
                    kept.lock().unwrap().push((body, trace, attributes));
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, records))
}

type LogRecords =
    std::sync::Arc<std::sync::Mutex<Vec<(String, String, std::collections::HashMap<String, String>)>>>;

#[tokio::test]
async fn the_trail_goes_out_as_otlp_log_records_in_the_calls_trace() -> anyhow::Result<()> {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (collector, records) = logs_receiver().await?;
    let backend = serve(DemoBackend::alpha("alpha")?, ResponseMode::Json).await?;
    let mut config = GatewayConfig::new(vec![Backend::new("alpha", &backend.url())?]);
    config.settings.otlp_endpoint = Some(collector);
    let audit: toml::Table = toml::from_str("output = \"none\"\notlp = true\n")?;
    config.settings.audit = Some(audit.try_into()?);
    let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
    let gateway = gateway(config, keyring()).await?;
    let whoami =
        Call::tool("whoami", json!({})).header("traceparent", &format!("00-{TRACE}-00f067aa0ba902b7-01"));
    let answer = send(&gateway.url(), &whoami).await?;
    assert!(answer.error_code().is_none(), "{answer:?}");
    gateway.shutdown().await?; // flushes the trail, and its exporter

    let records = records.lock().unwrap().clone();
    assert_eq!(records.len(), 1, "{records:?}");
    let (body, trace, attributes) = &records[0];
    let event: Value = serde_json::from_str(body)?;
    assert_eq!(
        (&event["target"], &event["outcome"]),
        (&json!("whoami"), &json!("completed"))
    );
    assert_eq!(event["trace_id"], TRACE);
    assert_eq!(trace, TRACE, "the record is in the call's trace");
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["mrtr.backend"], "alpha");
    assert_eq!(attributes["mrtr.audit.outcome"], "completed");
    backend.shutdown().await?;
    Ok(())
}

/// A sink that blocks (a FIFO nobody reads yet) holds up no request: the queue fills, what does
/// not fit is dropped and counted, and once the FIFO is read the next event says how many were
/// dropped. Every call is accounted for: written, or counted in a `dropped`.
#[tokio::test]
async fn a_sink_that_blocks_drops_what_does_not_fit_and_the_next_event_says_so() -> anyhow::Result<()> {
    const QUEUE: usize = 4;
    const CALLS: usize = 20;
    let dir = TempDir::new("audit-blocked");
    let fifo = dir.path("audit.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
    anyhow::ensure!(made.success(), "mkfifo failed");
    let s = serve(SuiteFixture::new()?, ResponseMode::Json).await?;
    let mut config = GatewayConfig::new(vec![Backend::new("s", &s.url())?]);
    let audit: toml::Table = toml::from_str(&format!(
        "output = \"file\"\nfile = {:?}\nqueue = {QUEUE}\n",
        fifo.display().to_string()
    ))?;
    config.settings.audit = Some(audit.try_into()?);
    let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
    let gateway = gateway(config, keyring()).await?;
    let url = gateway.url();
    let simple = json!({ "name": "test_simple_text", "arguments": {} });
    for _ in 0..CALLS {
        let answer = call(&url, "tools/call", simple.clone()).await?;
        assert!(answer.result()["content"].is_array(), "{answer:?}");
    }
    // The writer is blocked opening the FIFO; reading it lets it on.
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || -> std::io::Result<()> {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(std::fs::File::open(&fifo)?).lines() {
            let _ = lines_tx.send(line?);
        }
        Ok(())
    });
    let wait = std::time::Duration::from_secs(10);
    let mut lines: Vec<Value> = Vec::new();
    for _ in 0..QUEUE {
        lines.push(serde_json::from_str(&lines_rx.recv_timeout(wait)?)?);
    }
    // The queue is drained: this call's event is written.
    let last = call(&url, "tools/call", simple).await?;
    assert!(last.error_code().is_none(), "{last:?}");
    gateway.shutdown().await?;
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reader panicked"))??;
    lines.extend(
        lines_rx
            .try_iter()
            .map(|l| serde_json::from_str::<Value>(&l))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let dropped: Vec<u64> = lines.iter().map(|l| l["dropped"].as_u64().unwrap_or(0)).collect();
    // The queue's places were written, the rest dropped, and the first event written after the
    // drops says how many.
    assert_eq!(lines.len(), QUEUE + 1, "{lines:?}");
    assert_eq!(dropped[0], (CALLS - QUEUE) as u64, "{lines:?}");
    assert!(dropped[1..].iter().all(|&d| d == 0), "{lines:?}");
    s.shutdown().await?;
    Ok(())
}
