//! Task-capable fixture for the Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`)
//! scenarios of `@modelcontextprotocol/conformance` 0.2.0-alpha.12.
//!
//! [`TasksFixture`] advertises the extension in `server/discover` and implements exactly the tools
//! the ten `tasks-*` scenarios call (read from the scenario sources in the npm bundle), on rmcp's
//! in-memory [`TaskManager`]:
//!
//! | tool | without the extension declared | with it declared |
//! |---|---|---|
//! | `greet` `{name}` | `Hello, <name>!` | the same (never a task) |
//! | `slow_compute` `{seconds, label}` | runs synchronously | `seconds: 0`: synchronous; else a task that sleeps, ends `cancelled` on `tasks/cancel` |
//! | `failing_job` | `-32021` (task required) | a task that completes after ~1 s with `isError: true` |
//! | `protocol_error_job` | `-32021` | a task that ends `failed` with a JSON-RPC `-32603` error |
//! | `confirm_delete` `{filename}` | `-32021` | a task parked on one elicitation (`confirm`) |
//! | `multi_input` | `-32021` | a task parked on two parallel elicitations (`name`, `confirm`) |
//! | `test_tool_with_task` | `-32021` | MRTR round asking for `user_name` (sealed `requestState`), then a task whose result contains the name |
//!
//! Every task result names the fixture's identity (`… on <identity>`), so tests behind a gateway
//! can tell which backend ran a task. `tasks/get`, `tasks/update` and `tasks/cancel` go straight
//! to the [`TaskManager`] (unknown ids: `-32602`); rmcp itself answers `-32021` to clients that did
//! not declare the extension, and `-32601` to `tasks/result` and `tasks/list`.
//!
//! Task state is **process-local**: a task id is only meaningful to the process that minted it,
//! which is why a gateway must route follow-ups to the backend that created the task.

use std::{borrow::Cow, sync::Arc, time::Duration};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
        ContentBlock, CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, JsonObject,
        ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
        UpdateTaskParams,
    },
    service::RequestContext,
    task_manager::{TaskContext, TaskExit, TaskFuture, TaskManager, TaskOptions},
};
use serde_json::{Value, json};

use crate::{
    BackendError,
    flow::{Ask, Outcome, Retry, answer, drive, schema, unknown},
    state::StateSealer,
};

/// Suggested polling interval of every task, in milliseconds.
pub const TASK_POLL_INTERVAL_MS: u64 = 200;

/// Longest `slow_compute` sleep honoured, in seconds.
const MAX_SECONDS: f64 = 600.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskTool {
    Greet,
    SlowCompute,
    FailingJob,
    ProtocolErrorJob,
    ConfirmDelete,
    MultiInput,
    ToolWithTask,
}

impl TaskTool {
    const ALL: [TaskTool; 7] = [
        TaskTool::Greet,
        TaskTool::SlowCompute,
        TaskTool::FailingJob,
        TaskTool::ProtocolErrorJob,
        TaskTool::ConfirmDelete,
        TaskTool::MultiInput,
        TaskTool::ToolWithTask,
    ];

    fn name(self) -> &'static str {
        match self {
            TaskTool::Greet => "greet",
            TaskTool::SlowCompute => "slow_compute",
            TaskTool::FailingJob => "failing_job",
            TaskTool::ProtocolErrorJob => "protocol_error_job",
            TaskTool::ConfirmDelete => "confirm_delete",
            TaskTool::MultiInput => "multi_input",
            TaskTool::ToolWithTask => "test_tool_with_task",
        }
    }

    fn description(self) -> &'static str {
        match self {
            TaskTool::Greet => "Synchronous: returns Hello, {name}!",
            TaskTool::SlowCompute => "Task-capable: sleeps `seconds` then reports `label`; cancellable.",
            TaskTool::FailingJob => "Task required: completes after ~1 s with a tool error (isError).",
            TaskTool::ProtocolErrorJob => "Task required: fails with a protocol error.",
            TaskTool::ConfirmDelete => "Task required: asks for one confirmation (elicitation).",
            TaskTool::MultiInput => "Task required: asks two elicitations in parallel.",
            TaskTool::ToolWithTask => {
                "Task required: one MRTR round (user_name), then a task greeting the user."
            }
        }
    }

    fn properties(self) -> Value {
        match self {
            TaskTool::Greet => json!({ "name": { "type": "string" } }),
            TaskTool::SlowCompute => json!({
                "seconds": { "type": "number", "minimum": 0 },
                "label": { "type": "string" }
            }),
            TaskTool::ConfirmDelete => json!({ "filename": { "type": "string" } }),
            _ => json!({}),
        }
    }

    fn definition(self) -> Tool {
        let mut schema = JsonObject::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), self.properties());
        Tool::new(self.name(), self.description(), Arc::new(schema))
    }

    fn find(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }
}

/// The Tasks conformance fixture (see the module docs). Clones share one task store.
#[derive(Clone)]
pub struct TasksFixture {
    identity: Arc<str>,
    tasks: TaskManager,
    sealer: StateSealer,
}

impl std::fmt::Debug for TasksFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TasksFixture")
            .field("identity", &self.identity)
            .field("running_tasks", &self.tasks.running_task_count())
            .finish_non_exhaustive()
    }
}

impl TasksFixture {
    /// A fixture named `identity` (it appears in every task result), with a random
    /// `requestState` key for `test_tool_with_task`.
    pub fn new(identity: impl Into<String>) -> Result<Self, BackendError> {
        let identity: String = identity.into();
        Ok(Self {
            sealer: StateSealer::random(format!("tasks-fixture-{identity}")).map_err(BackendError::Random)?,
            identity: identity.into(),
            tasks: TaskManager::new(),
        })
    }

    /// The identity given to [`TasksFixture::new`].
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Names of the listed tools, in listing order.
    pub fn tool_names() -> Vec<&'static str> {
        TaskTool::ALL.into_iter().map(TaskTool::name).collect()
    }

    /// Number of tasks not yet in a terminal state.
    pub fn running_tasks(&self) -> usize {
        self.tasks.running_task_count()
    }

    fn spawn(&self, run: impl FnOnce(TaskContext, Arc<str>) -> TaskFuture) -> CallToolResponse {
        let identity = self.identity.clone();
        let task = self.tasks.spawn(
            TaskOptions::new().with_poll_interval_ms(TASK_POLL_INTERVAL_MS),
            move |ctx| run(ctx, identity),
        );
        CallToolResponse::Task(CreateTaskResult::new(task))
    }
}

fn task_required() -> ErrorData {
    ErrorData::missing_required_client_capability(ClientCapabilities::builder().enable_tasks().build())
}

fn text(message: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(message)])
}

fn string_arg<'a>(request: &'a CallToolRequestParams, name: &str) -> Option<&'a str> {
    request.arguments.as_ref()?.get(name)?.as_str()
}

/// `seconds` as a bounded duration; a missing or invalid value counts as zero.
fn seconds_arg(request: &CallToolRequestParams) -> Duration {
    let seconds = request
        .arguments
        .as_ref()
        .and_then(|args| args.get("seconds"))
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(0.0);
    Duration::from_secs_f64(seconds.min(MAX_SECONDS))
}

fn elicit(
    key: &str,
    message: String,
    build: fn(rmcp::model::ElicitationSchemaBuilder) -> rmcp::model::ElicitationSchemaBuilder,
) -> Result<Ask, ErrorData> {
    Ok(Ask::elicit(key, message, schema(build)?))
}

impl ServerHandler for TasksFixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
        .with_server_info(Implementation::new(
            format!("mrtr-tasks-fixture-{}", self.identity),
            env!("CARGO_PKG_VERSION"),
        ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            TaskTool::ALL.into_iter().map(TaskTool::definition).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        TaskTool::find(name).map(TaskTool::definition)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = TaskTool::find(&request.name) else {
            return Err(unknown("tool", &request.name));
        };
        let caps = context.client_capabilities().unwrap_or_default();
        let tasks = caps.supports_tasks();
        if !tasks && !matches!(tool, TaskTool::Greet | TaskTool::SlowCompute) {
            return Err(task_required());
        }
        match tool {
            TaskTool::Greet => {
                let name = string_arg(&request, "name").unwrap_or("World");
                Ok(text(format!("Hello, {name}!")).into())
            }
            TaskTool::SlowCompute => {
                let seconds = seconds_arg(&request);
                let label = string_arg(&request, "label").unwrap_or("").to_owned();
                let identity = self.identity.clone();
                let done = move |identity: &str| {
                    text(format!(
                        "slow_compute {label:?} finished after {:.1}s on {identity}",
                        seconds.as_secs_f64()
                    ))
                };
                if !tasks || seconds.is_zero() {
                    // The synchronous path: no task for a non-declaring client, and the
                    // immediate-result shortcut for `seconds: 0`.
                    tokio::time::sleep(seconds).await;
                    return Ok(done(&identity).into());
                }
                Ok(self.spawn(move |ctx, identity| {
                    Box::pin(async move {
                        tokio::select! {
                            _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                            _ = tokio::time::sleep(seconds) => Ok(done(&identity)),
                        }
                    })
                }))
            }
            TaskTool::FailingJob => Ok(self.spawn(|ctx, identity| {
                Box::pin(async move {
                    tokio::select! {
                        _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                        _ = tokio::time::sleep(Duration::from_secs(1)) => Ok(CallToolResult::error(vec![
                            ContentBlock::text(format!("failing_job failed on {identity}")),
                        ])),
                    }
                })
            })),
            TaskTool::ProtocolErrorJob => Ok(self.spawn(|_ctx, identity| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(TaskExit::Error(ErrorData::internal_error(
                        format!("protocol_error_job: simulated internal failure on {identity}"),
                        None,
                    )))
                })
            })),
            TaskTool::ConfirmDelete => {
                let filename = string_arg(&request, "filename").unwrap_or("file.txt").to_owned();
                let ask = elicit("confirm", format!("Delete {filename}?"), |b| {
                    b.required_bool("confirm")
                })?;
                Ok(self.spawn(move |ctx, identity| {
                    Box::pin(async move {
                        let answer = ctx.request_input(ask.key, ask.request).await?;
                        let confirmed = answer::accepted(Some(&answer))
                            && answer::field(Some(&answer), "confirm") == Some(&Value::Bool(true));
                        let verb = if confirmed { "deleted" } else { "kept" };
                        Ok(text(format!("{filename} {verb} on {identity}")))
                    })
                }))
            }
            TaskTool::MultiInput => {
                let name = elicit("name", "What is your name?".into(), |b| b.required_string("name"))?;
                let confirm = elicit("confirm", "Please confirm".into(), |b| b.required_bool("confirm"))?;
                Ok(self.spawn(move |ctx, identity| {
                    Box::pin(async move {
                        let (name, confirm) = tokio::join!(
                            ctx.request_input(name.key, name.request),
                            ctx.request_input(confirm.key, confirm.request),
                        );
                        let (name, confirm) = (name?, confirm?);
                        Ok(text(format!(
                            "multi_input: name={}, confirm={} on {identity}",
                            answer::text_field(Some(&name), "name").unwrap_or("?"),
                            answer::field(Some(&confirm), "confirm").unwrap_or(&Value::Null),
                        )))
                    })
                }))
            }
            TaskTool::ToolWithTask => {
                let binding = self
                    .sealer
                    .binding("tools/call", &request.name, request.arguments.as_ref());
                let retry = Retry {
                    input_responses: request.input_responses.as_ref(),
                    request_state: request.request_state.as_deref(),
                };
                let outcome = drive(&self.sealer, &binding, retry, &caps, |step, _| {
                    Ok(match step {
                        0 => Some(vec![elicit("user_name", "What is your name?".into(), |b| {
                            b.required_string("name")
                        })?]),
                        _ => None,
                    })
                })?;
                let answers = match outcome {
                    Outcome::InputRequired(result) => return Ok(result.into()),
                    Outcome::Complete(answers) => answers,
                };
                let name = answer::text_field(answers.get("user_name"), "name")
                    .unwrap_or("anonymous")
                    .to_owned();
                Ok(self.spawn(move |ctx, identity| {
                    Box::pin(async move {
                        tokio::select! {
                            _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                            _ = tokio::time::sleep(Duration::from_millis(300)) => {
                                Ok(text(format!("Hello, {name}! (from a task on {identity})")))
                            }
                        }
                    })
                }))
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }
}
