//! End-to-end: an rmcp client (Streamable HTTP, reqwest, `Discover`
//! lifecycle) drives every demo tool, prompt and resource through rmcp's
//! automatic MRTR loop, against a demo backend served directly, in JSON and
//! in SSE response mode.

use mrtr_backends::{ConformanceFixture, DemoBackend, ResponseMode, serve};
use mrtr_test_support::mcp::{meta, with_client_info};
use mrtr_test_support::peers::{Answerer, call, connect};
use mrtr_test_support::wait::TIMEOUT;
use rmcp::{
    ServiceError,
    model::{
        CallToolRequestParams, ErrorCode, GetPromptRequestParams, JsonObject, ReadResourceRequestParams,
        ResourceContents,
    },
};
use serde_json::{Value, json};

fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

async fn exercise_demo(mode: ResponseMode) -> anyhow::Result<()> {
    let served = serve(DemoBackend::alpha("alpha")?, mode).await?;
    let answerer = Answerer::default();
    let client = connect(&served.url(), answerer.clone()).await?;

    let tools: Vec<String> = client
        .list_all_tools()
        .await?
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(tools, ["whoami", "delete_branch", "deploy", "provision_cluster"]);

    let cases = [
        ("whoami", json!({}), 0, "[alpha] whoami: backend alpha"),
        (
            "delete_branch",
            json!({"repo": "acme/api", "branch": "old-feature"}),
            1,
            "[alpha] delete_branch: deleted branch old-feature in acme/api",
        ),
        (
            "deploy",
            json!({"service": "api", "environment": "prod"}),
            2,
            "[alpha] deploy: deployed api to prod under ticket ticket-value",
        ),
        (
            "provision_cluster",
            json!({"name": "c1"}),
            3,
            "[alpha] provision_cluster: provisioned c1 in region-value with 3 nodes",
        ),
    ];
    for (name, arguments, rounds, expected) in cases {
        let got = call(&client, name, arguments).await?;
        assert_eq!(got, expected, "{mode:?} {name}");
        assert_eq!(answerer.take_count(), rounds, "{mode:?} {name} rounds");
    }

    let prompt = tokio::time::timeout(
        TIMEOUT,
        client.get_prompt(
            GetPromptRequestParams::new("release_notes").with_arguments(args(json!({"version": "1.2.0"}))),
        ),
    )
    .await??;
    assert_eq!(answerer.take_count(), 1, "{mode:?} prompt rounds");
    let message = serde_json::to_value(&prompt.messages)?;
    let prompt_text = message[0]["content"]["text"].as_str().unwrap_or_default();
    assert_eq!(
        prompt_text,
        "[alpha] Write release notes for version 1.2.0 aimed at audience-value."
    );

    let uri = "demo://alpha/audit-log";
    let resource =
        tokio::time::timeout(TIMEOUT, client.read_resource(ReadResourceRequestParams::new(uri))).await??;
    assert_eq!(answerer.take_count(), 1, "{mode:?} resource rounds");
    let [
        ResourceContents::TextResourceContents {
            text, uri: got_uri, ..
        },
    ] = resource.contents.as_slice()
    else {
        anyhow::bail!("unexpected resource contents: {:?}", resource.contents);
    };
    assert_eq!(got_uri, uri);
    assert_eq!(
        text,
        "[alpha] audit log of alpha: 3 entries (reason: reason-value)"
    );

    client.cancel().await?;
    served.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn demo_alpha_json() -> anyhow::Result<()> {
    exercise_demo(ResponseMode::Json).await
}

#[tokio::test]
async fn demo_alpha_sse() -> anyhow::Result<()> {
    exercise_demo(ResponseMode::Sse).await
}

#[tokio::test]
async fn demo_beta_catalog_and_decline() -> anyhow::Result<()> {
    let served = serve(DemoBackend::beta("beta")?, ResponseMode::Sse).await?;
    let answerer = Answerer::declining();
    let client = connect(&served.url(), answerer.clone()).await?;

    let tools: Vec<String> = client
        .list_all_tools()
        .await?
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        tools,
        [
            "whoami",
            "delete_branch",
            "deploy",
            "archive_repo",
            "migrate_database"
        ]
    );
    let got = call(&client, "migrate_database", json!({"database": "orders"})).await?;
    assert_eq!(
        got,
        "[beta] migrate_database: not performed, target_version was answered with decline"
    );
    assert_eq!(answerer.take_count(), 1);

    client.cancel().await?;
    served.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn missing_capability_surfaces_as_jsonrpc_error() -> anyhow::Result<()> {
    let served = serve(DemoBackend::alpha("alpha")?, ResponseMode::Json).await?;
    let answerer = Answerer::undeclared();
    let client = connect(&served.url(), answerer).await?;

    // The backend answers HTTP 400 with a JSON-RPC -32021 body; rmcp's client
    // surfaces it as ServiceError::McpError, not as a transport error.
    let error = tokio::time::timeout(
        TIMEOUT,
        client.call_tool(
            CallToolRequestParams::new("delete_branch")
                .with_arguments(args(json!({"repo": "r", "branch": "b"}))),
        ),
    )
    .await?
    .expect_err("elicitation was not declared");
    let ServiceError::McpError(data) = error else {
        anyhow::bail!("expected a JSON-RPC error, got {error:?}");
    };
    assert_eq!(data.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);

    client.cancel().await?;
    served.shutdown().await?;
    Ok(())
}

/// Raw HTTP checks: content types per mode, and tampered state rejection.
#[tokio::test]
async fn raw_http_modes_and_tampering() -> anyhow::Result<()> {
    for (mode, content_type) in [
        (ResponseMode::Json, "application/json"),
        (ResponseMode::Sse, "text/event-stream"),
    ] {
        let served = serve(ConformanceFixture::new()?, mode).await?;
        let http = reqwest::Client::new();
        let post = |id: u64, params: Value| {
            let mut params = params;
            params["_meta"] = with_client_info(meta(), "raw", "1");
            http.post(served.url())
                .header("Accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "tools/call")
                .header("Mcp-Name", "test_input_required_result_tampered_state")
                .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
                .send()
        };
        let first = tokio::time::timeout(
            TIMEOUT,
            post(
                1,
                json!({"name": "test_input_required_result_tampered_state", "arguments": {}}),
            ),
        )
        .await??;
        assert_eq!(first.status(), 200);
        let got_type = first
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(got_type.starts_with(content_type), "{mode:?}: {got_type}");
        let body = first.text().await?;
        let message: Value = match mode {
            ResponseMode::Json => serde_json::from_str(&body)?,
            ResponseMode::Sse => body
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .ok_or_else(|| anyhow::anyhow!("no data event in {body:?}"))?,
        };
        assert_eq!(message["result"]["resultType"], "input_required");
        let state = message["result"]["requestState"].as_str().unwrap_or_default();
        assert!(!state.is_empty());

        let tampered = tokio::time::timeout(
            TIMEOUT,
            post(
                2,
                json!({
                    "name": "test_input_required_result_tampered_state",
                    "arguments": {},
                    "inputResponses": {"confirm": {"action": "accept", "content": {"ok": true}}},
                    "requestState": format!("{state}-TAMPERED"),
                }),
            ),
        )
        .await??;
        let body = tampered.text().await?;
        assert!(body.contains("-32602"), "{mode:?}: {body}");
        served.shutdown().await?;
    }
    Ok(())
}
