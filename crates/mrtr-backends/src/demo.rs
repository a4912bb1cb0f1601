//! Built-in demo MRTR backends.
//!
//! A [`DemoBackend`] is an rmcp [`ServerHandler`] that speaks only MCP
//! `2026-07-28` and answers several requests with `resultType:
//! "input_required"`. It is constructed with an *identity* string (for
//! example `"alpha"` or `"beta"`) that appears, as `[identity]`, in every
//! final result and in every elicitation message, so tests can tell which
//! backend answered through a gateway.
//!
//! Two catalogs share some names and differ in others, so a gateway that
//! aggregates them has to resolve conflicts:
//!
//! | name | kind | rounds | [`DemoCatalog::Alpha`] | [`DemoCatalog::Beta`] |
//! |---|---|---|---|---|
//! | `whoami` | tool | 0 | yes | yes |
//! | `delete_branch` | tool | 1 (confirm) | yes | yes |
//! | `deploy` | tool | 2 (confirm, then change ticket) | yes | yes |
//! | `provision_cluster` | tool | 3 (region, node count, approval) | yes | no |
//! | `archive_repo` | tool | 1 (confirm) | no | yes |
//! | `migrate_database` | tool | 3 (target version, backup check, operator) | no | yes |
//! | `release_notes` | prompt | 1 (audience) | yes | yes |
//! | `demo://{identity}/audit-log` | resource | 1 (justification) | yes | yes |
//!
//! Every round is a form-mode elicitation, so the client must declare
//! `elicitation` in the request's `clientCapabilities`; otherwise the request
//! fails with `-32021`. Declining (or cancelling) an elicitation ends the
//! flow with a final result that says so.
//!
//! The backends keep **no** state between rounds: the round number and the
//! answers so far are sealed into `requestState` (see
//! [`StateSealer`]); a tampered or foreign state is rejected
//! with `-32602`.

use std::{borrow::Cow, fmt, sync::Arc};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
        GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation, JsonObject,
        ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt,
        PromptArgument, PromptMessage, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, Resource, ResourceContents, Role, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::{
    BackendError,
    flow::{Answers, Ask, Outcome, Retry, answer, drive, schema, unknown},
    state::StateSealer,
};

/// Which set of tools a [`DemoBackend`] exposes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DemoCatalog {
    /// `whoami`, `delete_branch`, `deploy`, `provision_cluster`.
    Alpha,
    /// `whoami`, `delete_branch`, `deploy`, `archive_repo`, `migrate_database`.
    Beta,
}

/// The demo tools, across both catalogs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DemoTool {
    WhoAmI,
    DeleteBranch,
    Deploy,
    ProvisionCluster,
    ArchiveRepo,
    MigrateDatabase,
}

impl DemoTool {
    const ALL: [DemoTool; 6] = [
        DemoTool::WhoAmI,
        DemoTool::DeleteBranch,
        DemoTool::Deploy,
        DemoTool::ProvisionCluster,
        DemoTool::ArchiveRepo,
        DemoTool::MigrateDatabase,
    ];

    fn name(self) -> &'static str {
        match self {
            DemoTool::WhoAmI => "whoami",
            DemoTool::DeleteBranch => "delete_branch",
            DemoTool::Deploy => "deploy",
            DemoTool::ProvisionCluster => "provision_cluster",
            DemoTool::ArchiveRepo => "archive_repo",
            DemoTool::MigrateDatabase => "migrate_database",
        }
    }

    fn in_catalog(self, catalog: DemoCatalog) -> bool {
        match self {
            DemoTool::WhoAmI | DemoTool::DeleteBranch | DemoTool::Deploy => true,
            DemoTool::ProvisionCluster => catalog == DemoCatalog::Alpha,
            DemoTool::ArchiveRepo | DemoTool::MigrateDatabase => catalog == DemoCatalog::Beta,
        }
    }

    /// Required string arguments, in schema order.
    fn arguments(self) -> &'static [(&'static str, &'static str)] {
        match self {
            DemoTool::WhoAmI => &[],
            DemoTool::DeleteBranch => &[
                ("repo", "Repository, e.g. acme/api"),
                ("branch", "Branch to delete"),
            ],
            DemoTool::Deploy => &[
                ("service", "Service to deploy"),
                ("environment", "Target environment"),
            ],
            DemoTool::ProvisionCluster => &[("name", "Cluster name")],
            DemoTool::ArchiveRepo => &[("repo", "Repository to archive")],
            DemoTool::MigrateDatabase => &[("database", "Database to migrate")],
        }
    }

    fn description(self) -> &'static str {
        match self {
            DemoTool::WhoAmI => "Returns the identity of this backend (no input rounds).",
            DemoTool::DeleteBranch => "Deletes a branch after one confirmation round.",
            DemoTool::Deploy => "Deploys a service after two rounds: confirmation, then a change ticket.",
            DemoTool::ProvisionCluster => {
                "Provisions a cluster after three rounds: region, node count, approval."
            }
            DemoTool::ArchiveRepo => "Archives a repository after one confirmation round.",
            DemoTool::MigrateDatabase => {
                "Migrates a database after three rounds: target version, backup check, operator."
            }
        }
    }

    fn definition(self) -> Tool {
        let mut properties = JsonObject::new();
        let mut required = Vec::new();
        for (name, description) in self.arguments() {
            properties.insert(
                (*name).to_owned(),
                json!({ "type": "string", "description": description }),
            );
            required.push(Value::String((*name).to_owned()));
        }
        let mut input_schema = JsonObject::new();
        input_schema.insert("type".into(), Value::String("object".into()));
        input_schema.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            input_schema.insert("required".into(), Value::Array(required));
        }
        Tool::new(self.name(), self.description(), Arc::new(input_schema))
    }
}

const PROMPT_NAME: &str = "release_notes";

/// A stateless demo MRTR backend (see the module docs).
///
/// Cheap to clone: clones share the identity and the `requestState` key.
#[derive(Debug, Clone)]
pub struct DemoBackend {
    identity: Arc<str>,
    catalog: DemoCatalog,
    sealer: StateSealer,
}

impl DemoBackend {
    /// Creates a backend with a random `requestState` key.
    pub fn new(identity: impl Into<Arc<str>>, catalog: DemoCatalog) -> Result<Self, BackendError> {
        let identity = identity.into();
        let sealer = StateSealer::random(identity.clone()).map_err(BackendError::Random)?;
        Ok(Self::with_sealer(identity, catalog, sealer))
    }

    /// Shorthand for `DemoBackend::new(identity, DemoCatalog::Alpha)`.
    pub fn alpha(identity: impl Into<Arc<str>>) -> Result<Self, BackendError> {
        Self::new(identity, DemoCatalog::Alpha)
    }

    /// Shorthand for `DemoBackend::new(identity, DemoCatalog::Beta)`.
    pub fn beta(identity: impl Into<Arc<str>>) -> Result<Self, BackendError> {
        Self::new(identity, DemoCatalog::Beta)
    }

    /// Creates a backend with an explicit sealer (e.g. a fixed key shared by
    /// several replicas of the same backend).
    pub fn with_sealer(identity: impl Into<Arc<str>>, catalog: DemoCatalog, sealer: StateSealer) -> Self {
        Self {
            identity: identity.into(),
            catalog,
            sealer,
        }
    }

    /// The identity string that appears in every final result.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The catalog this backend serves.
    pub fn catalog(&self) -> DemoCatalog {
        self.catalog
    }

    /// Names of the tools this backend lists, in listing order.
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.tools().map(DemoTool::name).collect()
    }

    /// Name of the demo prompt (`release_notes`).
    pub fn prompt_name(&self) -> &'static str {
        PROMPT_NAME
    }

    /// URI of the demo resource, `demo://{identity}/audit-log`.
    pub fn resource_uri(&self) -> String {
        format!("demo://{}/audit-log", self.identity)
    }

    fn tools(&self) -> impl Iterator<Item = DemoTool> + '_ {
        DemoTool::ALL
            .into_iter()
            .filter(|tool| tool.in_catalog(self.catalog))
    }

    fn find_tool(&self, name: &str) -> Option<DemoTool> {
        self.tools().find(|tool| tool.name() == name)
    }

    fn tag(&self, text: impl fmt::Display) -> String {
        format!("[{}] {text}", self.identity)
    }

    fn confirm(&self, key: &str, message: String) -> Result<Ask, ErrorData> {
        Ok(Ask::elicit(
            key,
            self.tag(message),
            schema(|b| b.required_bool("confirm").description("Confirm the operation"))?,
        ))
    }

    fn ask_text(&self, key: &str, field: &str, message: String) -> Result<Ask, ErrorData> {
        let field = field.to_owned();
        Ok(Ask::elicit(
            key,
            self.tag(message),
            schema(move |b| b.required_string(field))?,
        ))
    }

    /// The rounds of `tool`; `None` once the flow is finished (all rounds
    /// answered, or an earlier round was declined).
    fn tool_round(
        &self,
        tool: DemoTool,
        args: &ToolArgs,
        step: usize,
        answers: &Answers,
    ) -> Result<Option<Vec<Ask>>, ErrorData> {
        if answers.values().any(|a| !answer::accepted(Some(a))) {
            return Ok(None);
        }
        let ask = match (tool, step) {
            (DemoTool::DeleteBranch, 0) => self.confirm(
                "confirm_delete",
                format!("Delete branch {} in {}?", args.get("branch"), args.get("repo")),
            )?,
            (DemoTool::ArchiveRepo, 0) => self.confirm(
                "confirm_archive",
                format!("Archive repository {}?", args.get("repo")),
            )?,
            (DemoTool::Deploy, 0) => self.confirm(
                "confirm_deploy",
                format!("Deploy {} to {}?", args.get("service"), args.get("environment")),
            )?,
            (DemoTool::Deploy, 1) => self.ask_text(
                "change_ticket",
                "ticket",
                format!("Change ticket for deploying {}?", args.get("service")),
            )?,
            (DemoTool::ProvisionCluster, 0) => self.ask_text(
                "region",
                "region",
                format!("Region for cluster {}?", args.get("name")),
            )?,
            (DemoTool::ProvisionCluster, 1) => Ask::elicit(
                "node_count",
                self.tag(format!(
                    "How many nodes for cluster {} in {}?",
                    args.get("name"),
                    answer::text_field(answers.get("region"), "region").unwrap_or("?")
                )),
                schema(|b| b.required_integer("nodes", 1, 100))?,
            ),
            (DemoTool::ProvisionCluster, 2) => {
                self.confirm("approve", format!("Approve provisioning {}?", args.get("name")))?
            }
            (DemoTool::MigrateDatabase, 0) => self.ask_text(
                "target_version",
                "version",
                format!("Target schema version for {}?", args.get("database")),
            )?,
            (DemoTool::MigrateDatabase, 1) => self.confirm(
                "backup_taken",
                format!("Is there a fresh backup of {}?", args.get("database")),
            )?,
            (DemoTool::MigrateDatabase, 2) => self.ask_text(
                "operator",
                "name",
                format!("Who is running the migration of {}?", args.get("database")),
            )?,
            _ => return Ok(None),
        };
        Ok(Some(vec![ask]))
    }

    fn tool_result(&self, tool: DemoTool, args: &ToolArgs, answers: &Answers) -> CallToolResult {
        if let Some((key, declined)) = answers.iter().find(|(_, a)| !answer::accepted(Some(a))) {
            let action = answer::action(Some(declined)).unwrap_or("unknown");
            return CallToolResult::success(vec![ContentBlock::text(self.tag(format!(
                "{}: not performed, {key} was answered with {action}",
                tool.name()
            )))]);
        }
        let text_of = |key: &str, field: &str| {
            answer::field(answers.get(key), field)
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_else(|| "?".to_owned())
        };
        let confirmed =
            |key: &str| answer::field(answers.get(key), "confirm").and_then(Value::as_bool) == Some(true);
        let text = match tool {
            DemoTool::WhoAmI => format!("whoami: backend {}", self.identity),
            DemoTool::DeleteBranch if confirmed("confirm_delete") => format!(
                "delete_branch: deleted branch {} in {}",
                args.get("branch"),
                args.get("repo")
            ),
            DemoTool::ArchiveRepo if confirmed("confirm_archive") => {
                format!("archive_repo: archived {}", args.get("repo"))
            }
            DemoTool::Deploy if confirmed("confirm_deploy") => format!(
                "deploy: deployed {} to {} under ticket {}",
                args.get("service"),
                args.get("environment"),
                text_of("change_ticket", "ticket")
            ),
            DemoTool::ProvisionCluster if confirmed("approve") => format!(
                "provision_cluster: provisioned {} in {} with {} nodes",
                args.get("name"),
                text_of("region", "region"),
                text_of("node_count", "nodes")
            ),
            DemoTool::MigrateDatabase if confirmed("backup_taken") => format!(
                "migrate_database: migrated {} to {} (operator {})",
                args.get("database"),
                text_of("target_version", "version"),
                text_of("operator", "name")
            ),
            other => format!("{}: not performed, confirmation was false", other.name()),
        };
        CallToolResult::success(vec![ContentBlock::text(self.tag(text))])
    }
}

/// Validated string arguments of a demo tool or prompt.
struct ToolArgs(JsonObject);

impl ToolArgs {
    fn parse(
        arguments: Option<&JsonObject>,
        required: &[(&'static str, &'static str)],
    ) -> Result<Self, ErrorData> {
        let arguments = arguments.cloned().unwrap_or_default();
        for (name, _) in required {
            match arguments.get(*name) {
                Some(Value::String(_)) => {}
                Some(_) => {
                    return Err(ErrorData::invalid_params(
                        format!("argument {name:?} must be a string"),
                        None,
                    ));
                }
                None => {
                    return Err(ErrorData::invalid_params(
                        format!("missing required argument {name:?}"),
                        None,
                    ));
                }
            }
        }
        Ok(Self(arguments))
    }

    fn get(&self, name: &str) -> &str {
        self.0.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

fn capabilities(context: &RequestContext<RoleServer>) -> ClientCapabilities {
    context.client_capabilities().unwrap_or_default()
}

impl ServerHandler for DemoBackend {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
        .with_server_info(Implementation::new(
            format!("mrtr-demo-{}", self.identity),
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(format!(
            "Demo MRTR backend {:?}; every final result is tagged [{}].",
            self.identity, self.identity
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
            self.tools().map(DemoTool::definition).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.find_tool(name).map(DemoTool::definition)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.find_tool(&request.name) else {
            return Err(unknown("tool", &request.name));
        };
        let args = ToolArgs::parse(request.arguments.as_ref(), tool.arguments())?;
        let binding = self
            .sealer
            .binding("tools/call", &request.name, request.arguments.as_ref());
        let retry = Retry {
            input_responses: request.input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
        };
        match drive(
            &self.sealer,
            &binding,
            retry,
            &capabilities(&context),
            |step, answers| self.tool_round(tool, &args, step, answers),
        )? {
            Outcome::InputRequired(result) => Ok(result.into()),
            Outcome::Complete(answers) => Ok(self.tool_result(tool, &args, &answers).into()),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            PROMPT_NAME,
            Some("Release notes prompt; asks for the target audience (one input round)."),
            Some(vec![
                PromptArgument::new("version")
                    .with_description("Version being released")
                    .with_required(true),
            ]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != PROMPT_NAME {
            return Err(unknown("prompt", &request.name));
        }
        let args = ToolArgs::parse(request.arguments.as_ref(), &[("version", "")])?;
        let binding = self
            .sealer
            .binding("prompts/get", &request.name, request.arguments.as_ref());
        let retry = Retry {
            input_responses: request.input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
        };
        let outcome = drive(
            &self.sealer,
            &binding,
            retry,
            &capabilities(&context),
            |step, _| {
                Ok(match step {
                    0 => Some(vec![self.ask_text(
                        "audience",
                        "audience",
                        format!("Audience for the {} release notes?", args.get("version")),
                    )?]),
                    _ => None,
                })
            },
        )?;
        match outcome {
            Outcome::InputRequired(result) => Ok(result.into()),
            Outcome::Complete(answers) => {
                let audience = answer::text_field(answers.get("audience"), "audience");
                let text = match audience {
                    Some(audience) if answer::accepted(answers.get("audience")) => self.tag(format!(
                        "Write release notes for version {} aimed at {audience}.",
                        args.get("version")
                    )),
                    _ => self.tag(format!(
                        "Write release notes for version {} for a general audience.",
                        args.get("version")
                    )),
                };
                Ok(
                    GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                        .with_description(self.tag("release notes prompt"))
                        .into(),
                )
            }
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(self.resource_uri(), "audit-log")
                .with_description("Audit log; reading it requires a justification (one input round).")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = self.resource_uri();
        if request.uri != uri {
            return Err(ErrorData::resource_not_found(
                format!("unknown resource {:?}", request.uri),
                Some(json!({ "uri": request.uri })),
            ));
        }
        let binding = self.sealer.binding("resources/read", &request.uri, None);
        let retry = Retry {
            input_responses: request.input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
        };
        let outcome = drive(
            &self.sealer,
            &binding,
            retry,
            &capabilities(&context),
            |step, _| {
                Ok(match step {
                    0 => Some(vec![self.ask_text(
                        "justification",
                        "reason",
                        format!("Why do you need to read {uri}?"),
                    )?]),
                    _ => None,
                })
            },
        )?;
        match outcome {
            Outcome::InputRequired(result) => Ok(result.into()),
            Outcome::Complete(answers) => {
                let justification = answers.get("justification");
                let text = match answer::text_field(justification, "reason") {
                    Some(reason) if answer::accepted(justification) => self.tag(format!(
                        "audit log of {}: 3 entries (reason: {reason})",
                        self.identity
                    )),
                    _ => self.tag("audit log withheld: no justification given"),
                };
                Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]).into())
            }
        }
    }
}
