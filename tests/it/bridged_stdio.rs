//! Bridged tasks from a stdio server (`crates/mrtr-gateway/src/upstream/stdio/conn.rs`): an
//! `initialize`-era server the gateway runs as a process (`legacy-stdio-server`, rmcp's
//! `LegacyBackend` on stdin and stdout) asks the client something mid-call.
//!
//! On stdio a server's request carries no link to the call it serves, so the gateway hands it to
//! a client only when the process is that client's principal's own (`process-per-principal`) and
//! that principal has one call in flight on it. What is checked: a Tasks client gets the
//! elicitation as a task and its answer reaches the process; a legacy client (rmcp, through the
//! legacy front) gets it in-request; a second call in flight makes the request nobody's (the
//! process gets an error naming why); a process every principal shares never hands its request
//! to anyone.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use anyhow::Context as _;
use mrtr_gateway::{Backend, Era, GatewayConfig, PositiveSeconds, RunningGateway, StdioCommand};
use mrtr_test_support::gateway::{gateway, keyring, workspace_binary};
use mrtr_test_support::mcp::{Call, TASKS_EXTENSION, send};
use mrtr_test_support::peers::{tool_params, tool_text};
use mrtr_test_support::wait::TIMEOUT;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _, ErrorData, RoleClient};
use serde_json::json;

use crate::bridged_tasks::{answered_saying, call, created, on_task, until_with};

const PRINCIPAL: &str = "x-principal";

/// A gateway in front of `legacy-stdio-server`, run per principal or shared by all.
async fn stdio_gateway(per_principal: bool) -> anyhow::Result<RunningGateway> {
    let binary = workspace_binary("legacy-stdio-server");
    let mut command = StdioCommand::new([binary.to_string_lossy().into_owned(), "stdio-old".to_owned()])?;
    if per_principal {
        command = command.per_principal(NonZeroUsize::new(4).context("not zero")?);
    }
    let backend = Backend::stdio("local", command)?.with_era(Era::Legacy);
    let mut config = GatewayConfig::new(vec![backend]);
    config.settings.health_interval = PositiveSeconds::from_secs(3600);
    config.settings.principal_header = Some(PRINCIPAL.parse()?);
    gateway(config, keyring()).await
}

/// `call` as `principal`.
fn of(call: Call, principal: &str) -> Call {
    call.header(PRINCIPAL, principal)
}

#[tokio::test]
async fn a_stdio_servers_request_reaches_the_tasks_client_whose_principals_process_it_is()
-> anyhow::Result<()> {
    let gateway = stdio_gateway(true).await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    // Clients that declare the extension only when it is offered find it.
    let discover = send(&url, &of(Call::new("server/discover", json!({})), "alice")).await?;
    let extensions = &discover.result()["capabilities"]["extensions"];
    assert_eq!(extensions[TASKS_EXTENSION], json!({}), "{}", discover.body);

    let reply = send(&url, &of(call("ask", elicits.clone()), "alice")).await?;
    let task = created(&reply)?;
    let poll = || of(on_task("tasks/get", &task, json!({}), elicits.clone()), "alice");
    let waiting = until_with(&url, "input_required", poll).await?;
    let requests = waiting["inputRequests"].as_object().context("inputRequests")?;
    let (key, request) = requests.iter().next().context("one request")?;
    assert_eq!(requests.len(), 1);
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "What is your name?");

    let answers = json!({ key: { "action": "accept", "content": { "name": "Ada" } } });
    let update = on_task(
        "tasks/update",
        &task,
        json!({ "inputResponses": answers }),
        elicits.clone(),
    );
    let ack = send(&url, &of(update, "alice")).await?;
    assert_eq!(ack.result(), &json!({ "resultType": "complete" }), "{}", ack.body);
    let done = until_with(&url, "completed", poll).await?;
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");

    // Another principal's poll finds no task of theirs.
    let theirs = of(on_task("tasks/get", &task, json!({}), elicits.clone()), "bob");
    assert!(send(&url, &theirs).await?.body.get("error").is_some());
    gateway.shutdown().await?;
    Ok(())
}

/// An rmcp client of 2025-11-25 that answers elicitations with the name "Grace".
#[derive(Clone, Debug)]
struct Grace;

impl ClientHandler for Grace {
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "name": "Grace" })))
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("rmcp-legacy-client", "0.1.0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

#[tokio::test]
async fn a_stdio_servers_request_reaches_a_legacy_client_of_the_principal_in_its_call() -> anyhow::Result<()>
{
    let gateway = stdio_gateway(true).await?;
    let headers = HashMap::from([(PRINCIPAL.parse()?, "carol".parse()?)]);
    let config = StreamableHttpClientTransportConfig::with_uri(gateway.url()).custom_headers(headers);
    let transport = StreamableHttpClientTransport::from_config(config);
    let client = tokio::time::timeout(
        TIMEOUT,
        Grace.serve_with_lifecycle(transport, ClientLifecycleMode::Initialize),
    )
    .await??;
    let result = tokio::time::timeout(TIMEOUT, client.call_tool(tool_params("ask", json!({}))?)).await??;
    assert_eq!(tool_text(&result), "hello Grace");
    client.cancel().await?;
    gateway.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_stdio_servers_request_during_two_calls_of_its_principal_is_nobodys() -> anyhow::Result<()> {
    let gateway = stdio_gateway(true).await?;
    let url = gateway.url();
    let elicits = json!({ "elicitation": {} });
    // Alice's process starts with her first call; then a slow call holds a second place.
    let first = send(&url, &of(Call::tool("echo", json!({ "text": "up" })), "alice")).await?;
    assert_eq!(first.text(), "up", "{}", first.body);
    let sleep = of(Call::tool("sleep", json!({ "text": "3000" })), "alice");
    let sleeping = tokio::spawn({
        let url = url.clone();
        async move { send(&url, &sleep).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let reply = send(&url, &of(call("ask", elicits), "alice")).await?;
    // The process is told why.
    answered_saying(&reply, "2 calls in flight");
    assert_eq!(sleeping.await??.text(), "slept");
    gateway.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_shared_stdio_process_hands_its_request_to_no_client() -> anyhow::Result<()> {
    let gateway = stdio_gateway(false).await?;
    let url = gateway.url();
    let discover = send(&url, &of(Call::new("server/discover", json!({})), "alice")).await?;
    let extensions = &discover.result()["capabilities"]["extensions"];
    assert!(extensions.get(TASKS_EXTENSION).is_none(), "{}", discover.body);
    let reply = send(&url, &of(call("ask", json!({ "elicitation": {} })), "alice")).await?;
    answered_saying(&reply, "shares this stdio server");
    gateway.shutdown().await?;
    Ok(())
}
