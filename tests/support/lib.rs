//! Shared helpers for the real-peer tests: an rmcp client that answers every elicitation, demo
//! backends behind in-process gateways, and a raw MCP-over-HTTP client for attacks.
#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use mrtr_backends::{DemoBackend, DemoCatalog, ResponseMode, ServedBackend, StateSealer, serve};
use mrtr_gateway::{Backend, GatewayConfig, RunningGateway, start_shared};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, JsonObject, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};
use tower_mrtr::Keyring;

/// Every test step is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// An rmcp client handler that accepts every form elicitation, filling each property with a
/// value of its type, and counts them.
#[derive(Clone, Debug, Default)]
pub struct Answerer {
    elicitations: Arc<AtomicUsize>,
}

impl Answerer {
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
        let schema = serde_json::to_value(&requested_schema)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(fill_form(&schema)))
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("mrtr-real-peer-tests", "0.1.0"),
        )
    }
}

/// Content answering a form with schema `schema`: `true`, `3` or `"<name>-value"` per property.
pub fn fill_form(schema: &Value) -> Value {
    let mut content = serde_json::Map::new();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let value = match property["type"].as_str() {
                Some("boolean") => json!(true),
                Some("integer" | "number") => json!(3),
                _ => json!(format!("{name}-value")),
            };
            content.insert(name.clone(), value);
        }
    }
    Value::Object(content)
}

/// An rmcp client on `url` using the 2026-07-28 `server/discover` lifecycle.
pub async fn connect(url: &str, handler: Answerer) -> anyhow::Result<RunningService<RoleClient, Answerer>> {
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url));
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    Ok(tokio::time::timeout(TIMEOUT, handler.serve_with_lifecycle(transport, lifecycle)).await??)
}

/// The text blocks of a tool result, joined.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `tools/call` through rmcp's automatic MRTR loop; returns the text.
pub async fn call(
    client: &RunningService<RoleClient, Answerer>,
    name: &str,
    arguments: Value,
) -> anyhow::Result<String> {
    let Value::Object(arguments) = arguments else {
        bail!("arguments must be an object")
    };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments as JsonObject);
    let result = tokio::time::timeout(TIMEOUT, client.call_tool(params)).await??;
    Ok(text(&result))
}

/// Two demo backends (`alpha`, `beta`) behind one or more gateways.
#[derive(Debug)]
pub struct Stack {
    pub alpha: ServedBackend,
    pub beta: ServedBackend,
    pub gateways: Vec<RunningGateway>,
}

impl Stack {
    /// `alpha` and `beta` in the given response modes, with independent state keys.
    pub async fn start(
        alpha_mode: ResponseMode,
        beta_mode: ResponseMode,
    ) -> anyhow::Result<(ServedBackend, ServedBackend)> {
        let alpha = serve(DemoBackend::alpha("alpha")?, alpha_mode).await?;
        let beta = serve(DemoBackend::beta("beta")?, beta_mode).await?;
        Ok((alpha, beta))
    }

    /// `alpha` and `beta` sharing one state key **and scope**, so each accepts the other's raw
    /// `requestState`: only the gateway can tell them apart.
    pub async fn start_shared_key() -> anyhow::Result<(ServedBackend, ServedBackend)> {
        let sealer = StateSealer::with_key("shared", vec![7u8; 32])?;
        let alpha = serve(
            DemoBackend::with_sealer("alpha", DemoCatalog::Alpha, sealer.clone()),
            ResponseMode::Json,
        )
        .await?;
        let beta = serve(
            DemoBackend::with_sealer("beta", DemoCatalog::Beta, sealer),
            ResponseMode::Json,
        )
        .await?;
        Ok((alpha, beta))
    }

    /// The backends alpha and beta as gateway configuration.
    pub fn backends(alpha: &ServedBackend, beta: &ServedBackend) -> Vec<Backend> {
        vec![
            Backend::new("alpha", &alpha.url()).unwrap(),
            Backend::new("beta", &beta.url()).unwrap(),
        ]
    }

    /// Default stack: alpha and beta (modes given) behind one gateway.
    pub async fn new(alpha_mode: ResponseMode, beta_mode: ResponseMode) -> anyhow::Result<Self> {
        let (alpha, beta) = Self::start(alpha_mode, beta_mode).await?;
        let config = GatewayConfig::new(Self::backends(&alpha, &beta));
        let gateway = gateway(config, Arc::new(Keyring::generate("k1")?)).await?;
        Ok(Self {
            alpha,
            beta,
            gateways: vec![gateway],
        })
    }

    pub fn url(&self) -> String {
        self.gateways[0].url()
    }

    /// Requests both backends received so far.
    pub fn backend_requests(&self) -> (u64, u64) {
        (self.alpha.requests(), self.beta.requests())
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        for gateway in self.gateways {
            gateway.shutdown().await?;
        }
        self.alpha.shutdown().await?;
        self.beta.shutdown().await?;
        Ok(())
    }
}

/// A gateway on an ephemeral loopback port.
pub async fn gateway(config: GatewayConfig, keyring: Arc<Keyring>) -> anyhow::Result<RunningGateway> {
    Ok(start_shared(config, keyring, "127.0.0.1:0".parse()?).await?)
}

/// One raw MCP 2026-07-28 POST, as a conformant client would send it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub params: Value,
    pub headers: Vec<(String, String)>,
}

impl Call {
    /// `method` with `params` (the `_meta` is added).
    pub fn new(method: &str, params: Value) -> Self {
        Self {
            method: method.to_owned(),
            params,
            headers: Vec::new(),
        }
    }

    /// `tools/call` of `name` with `arguments`.
    pub fn tool(name: &str, arguments: Value) -> Self {
        Self::new("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// The same request as a retry: answers and state.
    pub fn retry(&self, input_responses: Value, state: &str) -> Self {
        let mut next = self.clone();
        next.params["inputResponses"] = input_responses;
        next.params["requestState"] = json!(state);
        next
    }

    /// With an extra header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// The HTTP status and JSON-RPC message of an answer (JSON or SSE).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The sealed `requestState` of an `input_required` result.
    pub fn state(&self) -> anyhow::Result<String> {
        let result = &self.body["result"];
        if result["resultType"] != "input_required" {
            bail!("not input_required: {}", self.body);
        }
        Ok(result["requestState"]
            .as_str()
            .context("no requestState")?
            .to_owned())
    }

    /// Answers to every input request: accepted elicitations with filled-in forms.
    pub fn answers(&self) -> Value {
        let mut answers = serde_json::Map::new();
        if let Some(requests) = self.body["result"]["inputRequests"].as_object() {
            for (key, request) in requests {
                let content = fill_form(&request["params"]["requestedSchema"]);
                answers.insert(key.clone(), json!({ "action": "accept", "content": content }));
            }
        }
        Value::Object(answers)
    }

    /// The JSON-RPC error code, if an error.
    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }

    /// The first text content block of a complete tool result.
    pub fn text(&self) -> String {
        self.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// POSTs `call` to `url` with the 2026-07-28 headers and `_meta` (elicitation declared).
pub async fn send(url: &str, call: &Call) -> anyhow::Result<Reply> {
    let mut params = call.params.clone();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        "io.modelcontextprotocol/clientInfo": { "name": "raw-test-client", "version": "0" }
    });
    let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": call.method, "params": params });
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", &call.method);
    if let Some(name) = params["name"].as_str().or(params["uri"].as_str()) {
        request = request.header("mcp-name", name);
    }
    for (name, value) in &call.headers {
        request = request.header(name, value);
    }
    let response = tokio::time::timeout(TIMEOUT, request.json(&body).send()).await??;
    let status = response.status().as_u16();
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let text = tokio::time::timeout(TIMEOUT, response.text()).await??;
    let message = if sse {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .rfind(|m| m.get("result").is_some() || m.get("error").is_some())
            .with_context(|| format!("no response event in {text:?}"))?
    } else {
        serde_json::from_str(&text).with_context(|| format!("not JSON (HTTP {status}): {text:?}"))?
    };
    Ok(Reply {
        status,
        body: message,
    })
}

/// Drives `call` to completion through `urls` (round i goes to `urls[i % len]`), answering every
/// input request; returns the final reply and the number of input rounds.
pub async fn drive(urls: &[&str], call: &Call) -> anyhow::Result<(Reply, usize)> {
    let mut reply = send(urls[0], call).await?;
    let mut rounds = 0;
    while reply.body["result"]["resultType"] == "input_required" {
        rounds += 1;
        if rounds > 5 {
            bail!("too many rounds");
        }
        let next = call.retry(reply.answers(), &reply.state()?);
        reply = send(urls[rounds % urls.len()], &next).await?;
    }
    Ok((reply, rounds))
}

/// A raw POST (or other method) with exactly these headers and body; returns status, headers
/// and body text.
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, String)> {
    let (status, headers, body) = raw_bytes(method, url, headers, body.to_owned()).await?;
    Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
}

/// [`raw`] with any body (bytes that are not UTF-8, a stream) and the answer's bytes.
pub async fn raw_bytes(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Vec<u8>)> {
    let mut request = reqwest::Client::new().request(method, url).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(TIMEOUT, request.send()).await??;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = tokio::time::timeout(TIMEOUT, response.bytes()).await??;
    Ok((status, headers, body.to_vec()))
}

/// The headers a conformant 2026-07-28 client sends for `method`.
pub fn mcp_headers(method: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ]
}

/// A request body for `method` with `params` plus a conformant `_meta`.
pub fn body(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}
