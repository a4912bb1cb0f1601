//! Real MCP clients (rmcp): [`Answerer`], a handler that fills in every form it is asked (or
//! declines, or declares no elicitation at all), [`connect`] on the 2026-07-28 `server/discover`
//! lifecycle, and [`call`], a `tools/call` through rmcp's automatic MRTR loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::bail;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, JsonObject, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::Value;

use crate::mcp::fill_form;
use crate::wait::TIMEOUT;

/// An rmcp client handler that accepts every form elicitation, filling each property with a
/// value of its type ([`fill_form`]), and counts them. URL elicitations are declined.
#[derive(Clone, Debug)]
pub struct Answerer {
    elicitations: Arc<AtomicUsize>,
    action: ElicitationAction,
    declare_elicitation: bool,
}

impl Default for Answerer {
    fn default() -> Self {
        Self {
            elicitations: Arc::default(),
            action: ElicitationAction::Accept,
            declare_elicitation: true,
        }
    }
}

impl Answerer {
    /// Answers every form elicitation with `decline` instead (still counting them).
    pub fn declining() -> Self {
        Self {
            action: ElicitationAction::Decline,
            ..Self::default()
        }
    }

    /// Declares no client capability at all, so a server must not ask it for input.
    pub fn undeclared() -> Self {
        Self {
            declare_elicitation: false,
            ..Self::default()
        }
    }

    /// Elicitations answered since the last call.
    pub fn take_count(&self) -> usize {
        self.elicitations.swap(0, Ordering::SeqCst)
    }
}

impl ClientHandler for Answerer {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.elicitations.fetch_add(1, Ordering::SeqCst);
        let ElicitRequestParams::FormElicitationParams { requested_schema, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        if self.action != ElicitationAction::Accept {
            return Ok(ElicitResult::new(self.action.clone()));
        }
        let schema = serde_json::to_value(&requested_schema)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(fill_form(&schema)))
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.declare_elicitation {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("mrtr-real-peer-tests", "0.1.0"))
    }
}

/// An rmcp client with `handler` on `url`, using the 2026-07-28 `server/discover` lifecycle.
pub async fn connect<H: ClientHandler>(
    url: &str,
    handler: H,
) -> anyhow::Result<RunningService<RoleClient, H>> {
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    connect_with(url, handler, lifecycle).await
}

/// An rmcp client with `handler` on `url`, opening with `lifecycle` (`Initialize` for a client
/// of the `initialize` era).
pub async fn connect_with<H: ClientHandler>(
    url: &str,
    handler: H,
    lifecycle: ClientLifecycleMode,
) -> anyhow::Result<RunningService<RoleClient, H>> {
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url));
    Ok(tokio::time::timeout(TIMEOUT, handler.serve_with_lifecycle(transport, lifecycle)).await??)
}

/// The params of a `tools/call` of `name` with `arguments` (a JSON object).
pub fn tool_params(name: &str, arguments: Value) -> anyhow::Result<CallToolRequestParams> {
    let Value::Object(arguments) = arguments else {
        bail!("arguments must be an object")
    };
    Ok(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments as JsonObject))
}

/// The text blocks of a tool result, joined by newlines.
pub fn tool_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `tools/call` through rmcp's automatic MRTR loop; returns the text ([`tool_text`]).
pub async fn call<H: ClientHandler>(
    client: &RunningService<RoleClient, H>,
    name: &str,
    arguments: Value,
) -> anyhow::Result<String> {
    let params = tool_params(name, arguments)?;
    let result = tokio::time::timeout(TIMEOUT, client.call_tool(params)).await??;
    Ok(tool_text(&result))
}
