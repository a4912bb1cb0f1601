//! Conformance fixture for the MRTR scenarios of
//! `@modelcontextprotocol/conformance` 0.2.0-alpha.12.
//!
//! [`ConformanceFixture`] implements exactly what the fourteen
//! `input-required-result-*` scenarios and `http-header-validation` call
//! (read from the scenario source in the npm bundle):
//!
//! | tool / prompt | round 1 `inputRequests` | final result |
//! |---|---|---|
//! | `test_input_required_result_elicitation` | `user_name` (elicitation, `name`) | `Hello, <name>!` |
//! | `test_input_required_result_sampling` | `capital_question` (sampling) | the sampled text |
//! | `test_input_required_result_list_roots` | `client_roots` (roots) | the root URIs |
//! | `test_input_required_result_request_state` | `confirm` (`ok`) + sealed state | text containing `state-ok` |
//! | `test_input_required_result_multiple_inputs` | `user_name` + `greeting` (sampling) + `client_roots` + state | summary |
//! | `test_input_required_result_multi_round` | `step1` (name), then `step2` (color), each with new state | summary |
//! | `test_input_required_result_tampered_state` | `confirm` (`ok`) + sealed state | `-32602` if the state was altered |
//! | `test_input_required_result_capabilities` | only what `clientCapabilities` declares | summary |
//! | prompt `test_input_required_result_prompt` | `user_context` (`context`) | a `GetPromptResult` |
//!
//! Behaviour the scenarios check, all provided by the shared flow engine:
//! a wrong or missing `inputResponses` key gets a new `InputRequiredResult`
//! (`missing-input-response`); unknown extra keys are ignored
//! (`ignore-extra-params`); a malformed answer such as `12345` is a `-32602`
//! error (`validate-input`); `tools/list` and `prompts/list` never return
//! `input_required` (`unsupported-methods`); `resultType` is always present
//! (`result-type`, done by rmcp).
//!
//! Tools whose scenario is about `requestState` (`request_state`,
//! `tampered_state`, `multi_round`) only advance when the retry carries a
//! state; answers sent without one are ignored and the round is asked again.
//! The others also accept answers on a fresh call, which the
//! `ignore-extra-params` scenario relies on.
//!
//! `http-header-validation` calls the *first* listed tool with `{}` and must
//! get a success, so the elicitation tool is listed first; the header checks
//! themselves (`Mcp-Method`/`Mcp-Name` vs. body, HTTP 400 + `-32020`) are done
//! by rmcp's Streamable HTTP service before the handler runs.

#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577 but still exercised.

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
        ElicitationCapability, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
        JsonObject, ListPromptsResult, ListToolsResult, PaginatedRequestParams, Prompt, PromptMessage,
        ProtocolVersion, Role, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};

use crate::{
    BackendError,
    flow::{Answers, Ask, Outcome, Retry, answer, drive, schema, unknown},
    state::StateSealer,
};

/// Name of the prompt used by `input-required-result-non-tool-request`.
pub const PROMPT_NAME: &str = "test_input_required_result_prompt";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FixtureTool {
    Elicitation,
    Sampling,
    ListRoots,
    RequestState,
    MultipleInputs,
    MultiRound,
    TamperedState,
    Capabilities,
}

impl FixtureTool {
    /// Listing order; the first tool must succeed when called with `{}`.
    const ALL: [FixtureTool; 8] = [
        FixtureTool::Elicitation,
        FixtureTool::Sampling,
        FixtureTool::ListRoots,
        FixtureTool::RequestState,
        FixtureTool::MultipleInputs,
        FixtureTool::MultiRound,
        FixtureTool::TamperedState,
        FixtureTool::Capabilities,
    ];

    fn name(self) -> &'static str {
        match self {
            FixtureTool::Elicitation => "test_input_required_result_elicitation",
            FixtureTool::Sampling => "test_input_required_result_sampling",
            FixtureTool::ListRoots => "test_input_required_result_list_roots",
            FixtureTool::RequestState => "test_input_required_result_request_state",
            FixtureTool::MultipleInputs => "test_input_required_result_multiple_inputs",
            FixtureTool::MultiRound => "test_input_required_result_multi_round",
            FixtureTool::TamperedState => "test_input_required_result_tampered_state",
            FixtureTool::Capabilities => "test_input_required_result_capabilities",
        }
    }

    fn description(self) -> &'static str {
        match self {
            FixtureTool::Elicitation => "MRTR: one elicitation round (user_name).",
            FixtureTool::Sampling => "MRTR: one sampling round (capital_question).",
            FixtureTool::ListRoots => "MRTR: one roots/list round (client_roots).",
            FixtureTool::RequestState => "MRTR: elicitation plus integrity-protected requestState.",
            FixtureTool::MultipleInputs => "MRTR: elicitation, sampling and roots in one round.",
            FixtureTool::MultiRound => "MRTR: two elicitation rounds, each with a new requestState.",
            FixtureTool::TamperedState => "MRTR: rejects a tampered requestState with -32602.",
            FixtureTool::Capabilities => "MRTR: only asks for inputs the client declared.",
        }
    }

    /// Whether answers only count when the retry carries a `requestState`.
    fn requires_state(self) -> bool {
        matches!(
            self,
            FixtureTool::RequestState | FixtureTool::TamperedState | FixtureTool::MultiRound
        )
    }

    fn definition(self) -> Tool {
        let mut schema = JsonObject::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), JsonObject::new().into());
        Tool::new(self.name(), self.description(), Arc::new(schema))
    }

    fn find(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }
}

fn ask_name(key: &str, message: &str) -> Result<Ask, ErrorData> {
    Ok(Ask::elicit(key, message, schema(|b| b.required_string("name"))?))
}

fn ask_ok(key: &str) -> Result<Ask, ErrorData> {
    Ok(Ask::elicit(
        key,
        "Please confirm",
        schema(|b| b.required_bool("ok"))?,
    ))
}

/// Whether `caps` declares form-mode elicitation.
fn declares_elicitation(caps: &ClientCapabilities) -> bool {
    caps.elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The conformance fixture server (see the module docs).
#[derive(Debug, Clone)]
pub struct ConformanceFixture {
    sealer: StateSealer,
}

impl ConformanceFixture {
    /// Creates the fixture with a random `requestState` key.
    pub fn new() -> Result<Self, BackendError> {
        Ok(Self {
            sealer: StateSealer::random("conformance-fixture").map_err(BackendError::Random)?,
        })
    }

    /// Creates the fixture with an explicit sealer.
    pub fn with_sealer(sealer: StateSealer) -> Self {
        Self { sealer }
    }

    /// Names of the listed tools, in listing order.
    pub fn tool_names() -> Vec<&'static str> {
        FixtureTool::ALL.into_iter().map(FixtureTool::name).collect()
    }

    fn round(
        tool: FixtureTool,
        caps: &ClientCapabilities,
        step: usize,
        answers: &Answers,
    ) -> Result<Option<Vec<Ask>>, ErrorData> {
        let _ = answers;
        let asks = match (tool, step) {
            (FixtureTool::Elicitation, 0) => vec![ask_name("user_name", "What is your name?")?],
            (FixtureTool::Sampling, 0) => {
                vec![Ask::sample(
                    "capital_question",
                    "What is the capital of France?",
                    100,
                )]
            }
            (FixtureTool::ListRoots, 0) => vec![Ask::roots("client_roots")],
            (FixtureTool::RequestState | FixtureTool::TamperedState, 0) => vec![ask_ok("confirm")?],
            (FixtureTool::MultipleInputs, 0) => vec![
                ask_name("user_name", "What is your name?")?,
                Ask::sample("greeting", "Generate a greeting", 50),
                Ask::roots("client_roots"),
            ],
            (FixtureTool::MultiRound, 0) => vec![ask_name("step1", "Step 1: What is your name?")?],
            (FixtureTool::MultiRound, 1) => vec![Ask::elicit(
                "step2",
                "Step 2: What is your favorite color?",
                schema(|b| b.required_string("color"))?,
            )],
            (FixtureTool::Capabilities, 0) => {
                let mut asks = Vec::new();
                if declares_elicitation(caps) {
                    asks.push(ask_name("user_name", "What is your name?")?);
                }
                if caps.sampling.is_some() {
                    asks.push(Ask::sample(
                        "capital_question",
                        "What is the capital of France?",
                        100,
                    ));
                }
                if caps.roots.is_some() {
                    asks.push(Ask::roots("client_roots"));
                }
                if asks.is_empty() {
                    let mut required = ClientCapabilities::default();
                    required.elicitation = Some(ElicitationCapability::default());
                    return Err(ErrorData::missing_required_client_capability(required));
                }
                asks
            }
            _ => return Ok(None),
        };
        Ok(Some(asks))
    }

    fn result(tool: FixtureTool, answers: &Answers) -> String {
        let name = || {
            let user = answers.get("user_name");
            match answer::text_field(user, "name") {
                Some(name) if answer::accepted(user) => name.to_owned(),
                _ => "anonymous".to_owned(),
            }
        };
        let roots = |key: &str| answer::root_uris(answers.get(key)).join(", ");
        match tool {
            FixtureTool::Elicitation => format!("Hello, {}!", name()),
            FixtureTool::Sampling => format!(
                "Sampling response: {}",
                answer::sampled_text(answers.get("capital_question")).unwrap_or("(no text)")
            ),
            FixtureTool::ListRoots => format!("Client roots: [{}]", roots("client_roots")),
            FixtureTool::RequestState | FixtureTool::TamperedState => {
                let ok = answer::field(answers.get("confirm"), "ok")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false);
                format!("state-ok: requestState verified; confirmed={ok}")
            }
            FixtureTool::MultipleInputs => format!(
                "Hello, {}! Greeting: {}. Roots: [{}]",
                name(),
                answer::sampled_text(answers.get("greeting")).unwrap_or("(no text)"),
                roots("client_roots")
            ),
            FixtureTool::MultiRound => format!(
                "Multi-round complete: name={}, color={}",
                answer::text_field(answers.get("step1"), "name").unwrap_or("?"),
                answer::text_field(answers.get("step2"), "color").unwrap_or("?")
            ),
            FixtureTool::Capabilities => {
                let received: Vec<&str> = answers.keys().map(String::as_str).collect();
                format!("Capabilities respected; received: {}", received.join(", "))
            }
        }
    }
}

impl ServerHandler for ConformanceFixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
        .with_server_info(Implementation::new(
            "mrtr-conformance-fixture",
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
            FixtureTool::ALL
                .into_iter()
                .map(FixtureTool::definition)
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        FixtureTool::find(name).map(FixtureTool::definition)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = FixtureTool::find(&request.name) else {
            return Err(unknown("tool", &request.name));
        };
        let caps = context.client_capabilities().unwrap_or_default();
        let binding = self
            .sealer
            .binding("tools/call", &request.name, request.arguments.as_ref());
        let request_state = request.request_state.as_deref();
        let input_responses = if tool.requires_state() && request_state.is_none() {
            None
        } else {
            request.input_responses.as_ref()
        };
        let retry = Retry {
            input_responses,
            request_state,
        };
        match drive(&self.sealer, &binding, retry, &caps, |step, answers| {
            Self::round(tool, &caps, step, answers)
        })? {
            Outcome::InputRequired(result) => Ok(result.into()),
            Outcome::Complete(answers) => {
                Ok(CallToolResult::success(vec![ContentBlock::text(Self::result(tool, &answers))]).into())
            }
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            PROMPT_NAME,
            Some("MRTR: prompts/get asks for user_context before returning the prompt."),
            None,
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
        let caps = context.client_capabilities().unwrap_or_default();
        let binding = self
            .sealer
            .binding("prompts/get", &request.name, request.arguments.as_ref());
        let retry = Retry {
            input_responses: request.input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
        };
        let outcome = drive(&self.sealer, &binding, retry, &caps, |step, _| {
            Ok(match step {
                0 => Some(vec![Ask::elicit(
                    "user_context",
                    "What context should the prompt use?",
                    schema(|b| b.required_string("context"))?,
                )]),
                _ => None,
            })
        })?;
        match outcome {
            Outcome::InputRequired(result) => Ok(result.into()),
            Outcome::Complete(answers) => {
                let context = answer::text_field(answers.get("user_context"), "context").unwrap_or("(none)");
                Ok(GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    format!("Answer using this context: {context}"),
                )])
                .with_description("Prompt built from MRTR-provided context")
                .into())
            }
        }
    }
}
