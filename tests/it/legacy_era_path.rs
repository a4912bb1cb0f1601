//! The legacy-era path (`legacy-era-path`): a second MCP path on which 2026-07-28 requests are
//! declined, so that a client negotiating the era by itself (rmcp's `Auto` mode here; the Python
//! SDK 2.x in `scripts/reference-servers.sh`) falls back to `initialize` and gets a legacy
//! backend's own requests (an elicitation) inside its call, as any legacy client does. `/mcp`
//! is unchanged for the same client.

use mrtr_backends::{LegacyBackend, ServedLegacy};
use mrtr_gateway::{GatewayConfig, RunningGateway};
use mrtr_test_support::backends::legacy_behind;
use mrtr_test_support::peers::{Answerer, connect_with, tool_params, tool_text};
use mrtr_test_support::wait::TIMEOUT;
use rmcp::ClientLifecycleMode;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};

const LEGACY_PATH: &str = "/mcp-legacy";

/// rmcp's automatic negotiation: `server/discover` first, `initialize` if the server says it is
/// not modern.
fn auto() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// A gateway serving the legacy-era path in front of an `initialize`-era backend.
async fn legacy_era_gateway() -> anyhow::Result<(ServedLegacy, RunningGateway)> {
    let path: mrtr_gateway::LegacyEraPath = LEGACY_PATH.parse().map_err(anyhow::Error::msg)?;
    legacy_behind(&LegacyBackend::new("old"), |config| {
        config.settings.legacy_era_path = Some(path);
    })
    .await
}

#[tokio::test]
async fn a_client_negotiating_the_era_falls_back_there_and_gets_the_backends_elicitation()
-> anyhow::Result<()> {
    let (_backend, gateway) = legacy_era_gateway().await?;
    let legacy_url = gateway.url().replace("/mcp", LEGACY_PATH);

    // Declares elicitation and fills every form field with `<name>-value`.
    let user = Answerer::default();
    let client = connect_with(&legacy_url, user.clone(), auto()).await?;
    let version = client.peer_info().map(|info| info.protocol_version.clone());
    assert_eq!(
        version,
        Some(ProtocolVersion::V_2025_11_25),
        "fell back to initialize"
    );
    let result = tokio::time::timeout(TIMEOUT, client.call_tool(tool_params("ask", json!({}))?)).await??;
    assert_eq!(
        tool_text(&result),
        "hello name-value",
        "the backend's elicitation reached the client"
    );
    assert_eq!(user.take_count(), 1);
    client.cancel().await?;

    // The same client on /mcp is served in the 2026-07-28 revision.
    let modern = connect_with(&gateway.url(), Answerer::default(), auto()).await?;
    let version = modern.peer_info().map(|info| info.protocol_version.clone());
    assert_eq!(version, Some(ProtocolVersion::V_2026_07_28));
    modern.cancel().await?;
    gateway.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_modern_request_there_is_declined_with_its_id_and_other_paths_stay_unknown() -> anyhow::Result<()> {
    let (_backend, gateway) = legacy_era_gateway().await?;
    let legacy_url = gateway.url().replace("/mcp", LEGACY_PATH);
    let http = reqwest::Client::new();
    let discover = json!({
        "jsonrpc": "2.0", "id": 7, "method": "server/discover",
        "params": { "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        } }
    });
    let post = |url: &str| {
        http.post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .json(&discover)
    };
    let declined = post(&legacy_url).send().await?;
    assert_eq!(declined.status(), 400);
    let body: Value = declined.json().await?;
    assert_eq!(body["id"], 7, "{body}");
    // Not one of the codes that mark a modern server (-32020 to -32022): clients fall back.
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(LEGACY_PATH) && message.contains("/mcp"),
        "{message}"
    );

    let served = post(&gateway.url()).send().await?;
    assert_eq!(served.status(), 200, "/mcp serves the same request");
    let other = post(&gateway.url().replace("/mcp", "/mcp-other")).send().await?;
    assert_eq!(other.status(), 404);
    gateway.shutdown().await?;
    Ok(())
}

#[test]
fn the_path_is_checked_as_it_is_read() {
    for bad in ["mcp-legacy", "/mcp", "/", "/.well-known/x", "/a b", "/a?b"] {
        assert!(bad.parse::<mrtr_gateway::LegacyEraPath>().is_err(), "{bad:?}");
    }
    assert!("/mcp-legacy".parse::<mrtr_gateway::LegacyEraPath>().is_ok());
    let mut config = GatewayConfig::new(Vec::new());
    config.settings.legacy_era_path = "/mcp-legacy".parse().ok();
    config.settings.no_legacy_clients = true;
    let refused = config.resolve_settings().map(drop).unwrap_err();
    assert!(refused.contains("no-legacy-clients"), "{refused}");
}
