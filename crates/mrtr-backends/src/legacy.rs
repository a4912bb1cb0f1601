//! [`LegacyBackend`]: an `initialize`-era MCP server (2025-03-26 to 2025-11-25, with
//! `Mcp-Session-Id` sessions), as every official reference server still is, for tests of how a
//! gateway treats one. It answers `server/discover` as rmcp does for a server that supports no
//! 2026-07-28, and `initialize` with the newest revision both sides know.
//!
//! [`serve_legacy`] serves it with rmcp's in-memory session manager, so a request without a
//! session gets rmcp's own refusal, as a real legacy deployment would give it.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult, ContentBlock, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ListResourcesResult,
        ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
        ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, ServerRequest,
        SubscribeRequestParams, Tool, UnsubscribeRequestParams,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::serve::MCP_PATH;

/// The newest revision a [`LegacyBackend`] speaks.
pub const LEGACY_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// An `initialize`-era server with these tools: `echo` (answers its `text` argument), `session`
/// (answers the `Mcp-Session-Id` its request came in, so tests can tell sessions apart),
/// `progress` (two progress notifications, then `done`), `ask` (asks the client for a name, an
/// elicitation, and answers `hello NAME`), `roots` (asks the client for its
/// roots, a server-to-client request, and answers what came back), and for tests of a stdio
/// server's process: `environment` (the names of its environment variables, sorted), `pid`
/// (its process id), `sleep` (answers `slept` after `text` milliseconds, at most 10 000) and
/// `stderr` (writes a line of `text` bytes, at most 1 MiB, to its stderr, then answers
/// `written`).
///
/// For tests of notifications, as an initialize-era server sends them of its own (on the
/// session's `GET` stream, or stdout): it offers [`WATCHED`] and [`OTHER`] as resources one can
/// subscribe to, announces tool list changes, and has the tools `notify` (sends
/// `notifications/tools/list_changed` when `text` is `tools`, else `notifications/resources/updated`
/// for the URI `text` if the session subscribed to it; answers what it sent) and `subscriptions`
/// (answers the session's subscribed URIs, sorted, comma-separated).
#[derive(Clone, Debug)]
pub struct LegacyBackend {
    name: String,
    /// This session's resource subscriptions.
    subscribed: Arc<Mutex<BTreeSet<String>>>,
    /// Calls of `ask` cancelled (`notifications/cancelled`) while they waited, in every session.
    cancelled: Arc<AtomicUsize>,
}

/// A resource of [`LegacyBackend`]'s.
pub const WATCHED: &str = "test://legacy/watched";
/// Another resource of [`LegacyBackend`]'s.
pub const OTHER: &str = "test://legacy/other";

impl LegacyBackend {
    /// A server that names itself `name` in its `serverInfo`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            subscribed: Arc::default(),
            cancelled: Arc::default(),
        }
    }

    /// The same server for a new session: no subscriptions (the count of cancelled calls is
    /// the server's).
    fn for_session(&self) -> Self {
        Self {
            cancelled: self.cancelled.clone(),
            ..Self::new(&self.name)
        }
    }

    /// How many calls of `ask` were cancelled while they waited for the client's answer.
    pub fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// `ask`: asks the client for a name (form elicitation), and answers `hello NAME`, or the
    /// action the client took instead; counted in [`Self::cancelled`] when cancelled meanwhile.
    async fn ask(&self, context: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
        let params: ElicitRequestParams = serde_json::from_value(json!({
            "mode": "form",
            "message": "What is your name?",
            "requestedSchema": {
                "type": "object",
                "properties": { "name": { "type": "string" } },
                "required": ["name"]
            }
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        tokio::select! {
            biased;
            () = context.ct.cancelled() => {
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                Err(ErrorData::internal_error("cancelled", None))
            }
            answer = elicit(&context.peer, params) => Ok(match answer {
                Ok(answer) if answer.action == ElicitationAction::Accept => {
                    let name = answer.content.as_ref().and_then(|c| c.get("name")).and_then(|n| n.as_str());
                    format!("hello {}", name.unwrap_or("nobody"))
                }
                Ok(answer) => format!("{:?}", answer.action).to_lowercase(),
                Err(error) => format!("no answer: {error}"),
            }),
        }
    }

    fn subscriptions(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.subscribed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `params` sent to the client as `elicitation/create` (rmcp's `create_elicitation`, without
/// the crate feature that would build rmcp a second time with other features).
async fn elicit(peer: &rmcp::Peer<RoleServer>, params: ElicitRequestParams) -> Result<ElicitResult, String> {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match peer.send_request(request).await {
        Ok(ClientResult::ElicitResult(result)) => Ok(result),
        Ok(_) => Err("an answer that is not an elicitation result".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

impl ServerHandler for LegacyBackend {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        ServerConfig::new(capabilities)
            .with_protocol_version(LEGACY_VERSION)
            .with_server_info(Implementation::new(self.name.clone(), "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&LEGACY_VERSION))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({ "type": "object", "properties": { "text": { "type": "string" } } });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!("a literal object");
        };
        let schema = Arc::new(schema);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Answers its text argument.", schema.clone()),
            Tool::new(
                "session",
                "Answers the session its request came in.",
                schema.clone(),
            ),
            Tool::new(
                "progress",
                "Sends two progress notifications, then answers done.",
                schema.clone(),
            ),
            Tool::new(
                "ask",
                "Asks the client for a name (elicitation) and answers hello NAME.",
                schema.clone(),
            ),
            Tool::new(
                "roots",
                "Asks the client for its roots and answers what came back.",
                schema.clone(),
            ),
            Tool::new(
                "environment",
                "Answers the names of the server's environment variables.",
                schema.clone(),
            ),
            Tool::new("pid", "Answers the server's process id.", schema.clone()),
            Tool::new("sleep", "Answers slept after text milliseconds.", schema.clone()),
            Tool::new("stderr", "Writes a line of text bytes to stderr.", schema.clone()),
            Tool::new(
                "notify",
                "Sends a tool list change (text: tools) or an update of the resource text.",
                schema.clone(),
            ),
            Tool::new(
                "subscriptions",
                "Answers the session's subscribed resources.",
                schema,
            ),
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(WATCHED, "watched"),
            Resource::new(OTHER, "other"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != WATCHED && request.uri != OTHER {
            return Err(ErrorData::resource_not_found(request.uri, None));
        }
        let contents = ResourceContents::text("contents", request.uri);
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    #[allow(deprecated)] // resources/subscribe is of the initialize era, which this server is
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if request.uri != WATCHED && request.uri != OTHER {
            return Err(ErrorData::resource_not_found(request.uri, None));
        }
        self.subscriptions().insert(request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions().remove(&request.uri);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let argument = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_owned();
        let text = match request.name.as_ref() {
            "echo" => argument,
            "environment" => {
                let mut names: Vec<String> = std::env::vars_os()
                    .map(|(name, _)| name.to_string_lossy().into_owned())
                    .collect();
                names.sort_unstable();
                names.join(",")
            }
            "pid" => std::process::id().to_string(),
            "notify" if argument == "tools" => {
                let _ = context.peer.notify_tool_list_changed().await;
                "tools".to_owned()
            }
            "notify" => {
                let subscribed = self.subscriptions().contains(&argument);
                if subscribed {
                    let update = ResourceUpdatedNotificationParam::new(argument.clone());
                    let _ = context.peer.notify_resource_updated(update).await;
                    argument
                } else {
                    format!("not subscribed: {argument}")
                }
            }
            "subscriptions" => self.subscriptions().iter().cloned().collect::<Vec<_>>().join(","),
            "stderr" => {
                let len = argument.parse::<usize>().unwrap_or(0).min(1 << 20);
                eprintln!("{}", "x".repeat(len));
                "written".to_owned()
            }
            "sleep" => {
                let ms = argument.parse::<u64>().unwrap_or(0).min(10_000);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                "slept".to_owned()
            }
            "session" => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.headers.get("mcp-session-id"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned(),
            "progress" => {
                if let Some(token) = context.meta.get_progress_token() {
                    for step in [1.0, 2.0] {
                        let mut progress = ProgressNotificationParam::new(token.clone(), step);
                        progress.total = Some(2.0);
                        let _ = context.peer.notify_progress(progress).await;
                    }
                }
                "done".to_owned()
            }
            "ask" => self.ask(&context).await?,
            // Roots are of the initialize era, which this server is.
            #[allow(deprecated)]
            "roots" => match context.peer.list_roots().await {
                Ok(roots) => format!("{} roots", roots.roots.len()),
                Err(error) => format!("no roots: {error}"),
            },
            other => return Err(ErrorData::invalid_params(format!("unknown tool {other}"), None)),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// A served [`LegacyBackend`]: its URL, and a token that stops it.
#[derive(Debug)]
pub struct ServedLegacy {
    url: String,
    addr: SocketAddr,
    stop: CancellationToken,
}

impl ServedLegacy {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for ServedLegacy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves `backend` over this process's stdin and stdout (the MCP stdio transport) until stdin
/// closes.
pub async fn serve_legacy_stdio(backend: LegacyBackend) -> io::Result<()> {
    crate::serve::serve_stdio(backend).await
}

/// Serves `backend` on `127.0.0.1:0` at `/mcp` with sessions, until the returned value is dropped.
pub async fn serve_legacy(backend: LegacyBackend) -> io::Result<ServedLegacy> {
    serve_legacy_at(backend, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// Serves `backend` at `addr` (a server started again where another one was, with none of its
/// sessions).
pub async fn serve_legacy_at(backend: LegacyBackend, addr: SocketAddr) -> io::Result<ServedLegacy> {
    let listener = TcpListener::bind(addr).await?;
    let url = format!("http://{}{MCP_PATH}", listener.local_addr()?);
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_cancellation_token(stop.child_token());
    let service = StreamableHttpService::new(
        move || Ok(backend.for_session()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = Router::new().route_service(MCP_PATH, service);
    let until = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { until.cancelled_owned().await })
            .await
    });
    Ok(ServedLegacy { url, addr, stop })
}
