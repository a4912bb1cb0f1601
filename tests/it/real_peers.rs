//! An rmcp 3.x client, with its automatic MRTR loop, through `mrtr-gateway` to two rmcp
//! backends: tools, prompts and resources complete through one, two and three rounds, and every
//! retry reaches the backend that minted its state (each final text names its backend).

use mrtr_backends::ResponseMode;
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::backends::Stack;
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, drive};
use mrtr_test_support::peers::{Answerer, call, connect, tool_params};
use mrtr_test_support::wait::TIMEOUT;
use rmcp::ServiceError;
use rmcp::model::{ErrorCode, GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
use serde_json::json;

async fn exercise(alpha_mode: ResponseMode, beta_mode: ResponseMode) -> anyhow::Result<()> {
    let stack = Stack::new(alpha_mode, beta_mode).await?;
    let answerer = Answerer::default();
    let client = connect(&stack.url(), answerer.clone()).await?;

    let tools: Vec<String> = client
        .list_all_tools()
        .await?
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        tools,
        [
            "alpha__whoami",
            "alpha__delete_branch",
            "alpha__deploy",
            "provision_cluster",
            "beta__whoami",
            "beta__delete_branch",
            "beta__deploy",
            "archive_repo",
            "migrate_database",
        ]
    );

    let branch = json!({"repo": "acme/api", "branch": "old"});
    let deploy = json!({"service": "api", "environment": "prod"});
    let cases = [
        ("alpha__whoami", json!({}), 0, "[alpha] whoami: backend alpha"),
        ("beta__whoami", json!({}), 0, "[beta] whoami: backend beta"),
        (
            "alpha__delete_branch",
            branch.clone(),
            1,
            "[alpha] delete_branch: deleted branch old in acme/api",
        ),
        (
            "beta__delete_branch",
            branch,
            1,
            "[beta] delete_branch: deleted branch old in acme/api",
        ),
        (
            "archive_repo",
            json!({"repo": "acme/old"}),
            1,
            "[beta] archive_repo",
        ),
        (
            "alpha__deploy",
            deploy.clone(),
            2,
            "[alpha] deploy: deployed api to prod",
        ),
        ("beta__deploy", deploy, 2, "[beta] deploy: deployed api to prod"),
        (
            "provision_cluster",
            json!({"name": "c1"}),
            3,
            "[alpha] provision_cluster: provisioned c1",
        ),
        (
            "migrate_database",
            json!({"database": "orders"}),
            3,
            "[beta] migrate_database",
        ),
    ];
    for (name, arguments, rounds, expected) in cases {
        let text = call(&client, name, arguments).await?;
        assert!(text.starts_with(expected), "{name}: {text:?}");
        assert_eq!(answerer.take_count(), rounds, "{name}: rounds");
    }

    let prompts: Vec<String> = client
        .list_all_prompts()
        .await?
        .into_iter()
        .map(|p| p.name.to_string())
        .collect();
    assert_eq!(prompts, ["alpha__release_notes", "beta__release_notes"]);
    for identity in ["alpha", "beta"] {
        let mut arguments = rmcp::model::JsonObject::new();
        arguments.insert("version".into(), json!("1.2.0"));
        let params =
            GetPromptRequestParams::new(format!("{identity}__release_notes")).with_arguments(arguments);
        let prompt = tokio::time::timeout(TIMEOUT, client.get_prompt(params)).await??;
        assert_eq!(answerer.take_count(), 1, "{identity} prompt rounds");
        let text = serde_json::to_value(&prompt.messages)?[0]["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            text.starts_with(&format!("[{identity}] Write release notes for version 1.2.0")),
            "{text}"
        );
    }

    let resources: Vec<String> = client
        .list_all_resources()
        .await?
        .into_iter()
        .map(|r| r.uri.to_string())
        .collect();
    assert_eq!(resources, ["demo://alpha/audit-log", "demo://beta/audit-log"]);
    for identity in ["alpha", "beta"] {
        let uri = format!("demo://{identity}/audit-log");
        let resource = tokio::time::timeout(
            TIMEOUT,
            client.read_resource(ReadResourceRequestParams::new(uri.clone())),
        )
        .await??;
        assert_eq!(answerer.take_count(), 1, "{identity} resource rounds");
        let [ResourceContents::TextResourceContents { text, uri: got, .. }] = resource.contents.as_slice()
        else {
            anyhow::bail!("unexpected contents {:?}", resource.contents);
        };
        assert_eq!(got, &uri);
        assert!(
            text.starts_with(&format!("[{identity}] audit log of {identity}")),
            "{text}"
        );
    }

    client.cancel().await?;
    stack.stop().await
}

#[tokio::test]
async fn rmcp_client_two_json_backends() -> anyhow::Result<()> {
    exercise(ResponseMode::Json, ResponseMode::Json).await
}

#[tokio::test]
async fn rmcp_client_one_sse_backend_one_json_backend() -> anyhow::Result<()> {
    exercise(ResponseMode::Json, ResponseMode::Sse).await
}

#[tokio::test]
async fn rmcp_client_two_sse_backends() -> anyhow::Result<()> {
    exercise(ResponseMode::Sse, ResponseMode::Sse).await
}

/// With one backend every name passes through unprefixed.
#[tokio::test]
async fn single_backend_passes_straight_through() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let config = GatewayConfig::new(vec![Backend::new("only", &alpha.url())?]);
    let gw = gateway(config, keyring()).await?;
    let answerer = Answerer::default();
    let client = connect(&gw.url(), answerer.clone()).await?;
    let tools: Vec<String> = client
        .list_all_tools()
        .await?
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(tools, ["whoami", "delete_branch", "deploy", "provision_cluster"]);
    let text = call(
        &client,
        "deploy",
        json!({"service": "api", "environment": "prod"}),
    )
    .await?;
    assert!(text.starts_with("[alpha] deploy"), "{text}");
    assert_eq!(answerer.take_count(), 2);
    client.cancel().await?;
    gw.shutdown().await?;
    alpha.shutdown().await?;
    beta.shutdown().await?;
    Ok(())
}

/// Per-request client capabilities reach the backend unchanged: without `elicitation` the
/// backend refuses with -32021 (HTTP 400), and the rmcp client sees that error.
#[tokio::test]
async fn client_capabilities_reach_the_backend_unchanged() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Json).await?;
    let call = Call::tool("alpha__delete_branch", json!({"repo": "a/b", "branch": "x"}));
    // The raw client always declares elicitation: a complete flow proves the declaration arrived.
    let (reply, rounds) = drive(&[&stack.url()], &call).await?;
    assert_eq!(
        (rounds, reply.text().starts_with("[alpha] delete_branch")),
        (1, true),
        "{:?}",
        reply.body
    );

    // An rmcp client declaring no capability at all.
    let client = connect(&stack.url(), Answerer::undeclared()).await?;
    let params = tool_params("beta__delete_branch", json!({"repo": "a/b", "branch": "x"}))?;
    match tokio::time::timeout(TIMEOUT, client.call_tool(params)).await? {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code, ErrorCode(-32021), "{error:?}"),
        other => anyhow::bail!("expected -32021, got {other:?}"),
    }
    client.cancel().await?;
    stack.stop().await
}
