//! A modern (2026-07-28) backend implementing what the conformance suite's *server* scenarios
//! call, in both eras: the 2026-07-28 scenarios run against it directly or through a gateway,
//! and the 2025-11-25 ones reach it through `mrtr-gateway`'s legacy front.
//!
//! The tools, prompts and resources are those the scenario sources of
//! `@modelcontextprotocol/conformance` 0.2.0-alpha.12 name (`test_simple_text`,
//! `test_prompt_with_arguments`, `test://static-text`, …). Where a legacy scenario expects the
//! server to send a request to the client (`test_elicitation`, `test_sampling`,
//! `test_elicitation_sep1034_defaults`, `test_elicitation_sep1330_enums`), this backend answers
//! `input_required` instead (MRTR, SEP-2322), through the stateless flow engine every backend of
//! this crate uses; the gateway turns that into the legacy server-to-client request.
//! `test_elicitation` asks **two** rounds of elicitation (the details, then a confirmation of
//! them), so a legacy client completing it has gone through the bridge twice.
//!
//! Resource subscriptions (`subscriptions/listen` with `resourceSubscriptions`, which the legacy
//! front turns a legacy `resources/subscribe` into): accepted for `test://watched-resource`,
//! which then "changes" once, right after the subscription starts, so that a test sees one
//! `notifications/resources/updated` arrive.
//!
//! Progress (`test_tool_with_progress`) and log notifications (`test_tool_with_logging`,
//! `test_logging_tool`, only when the request's `_meta` sets a `logLevel`) are sent on the
//! request's SSE stream, so serve this backend with [`ResponseMode::Sse`](crate::ResponseMode)
//! for them to arrive.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still exercised.

use std::{borrow::Cow, sync::Arc, time::Duration};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
        ElicitationSchema, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
        JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
        Prompt, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
        ResourceTemplate, ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerCapabilities,
        ServerConfig, ServerNotification, SubscriptionFilter, Tool,
    },
    service::{RequestContext, SubscriptionContext},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    BackendError, ConformanceFixture,
    fixture::PROMPT_NAME,
    flow::{Answers, Ask, Outcome, Retry, answer, drive, unknown},
    state::StateSealer,
};

/// The resource whose subscription sees an update.
const WATCHED: &str = "test://watched-resource";

/// A 1×1 red PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A 44-byte WAV header with no samples.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

fn parse<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(format!("fixture data: {e}"), None))
}

fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {} })
}

/// `(name, description, inputSchema)` of every tool.
fn tools() -> Vec<(&'static str, &'static str, Value)> {
    let string = |d: &str| json!({ "type": "string", "description": d });
    vec![
        ("test_simple_text", "Returns simple text", no_arguments()),
        ("test_image_content", "Returns a PNG image", no_arguments()),
        ("test_audio_content", "Returns a WAV clip", no_arguments()),
        (
            "test_embedded_resource",
            "Returns an embedded resource",
            no_arguments(),
        ),
        (
            "test_multiple_content_types",
            "Returns text, an image and a resource",
            no_arguments(),
        ),
        (
            "test_tool_with_logging",
            "Logs three messages while it runs",
            no_arguments(),
        ),
        (
            "test_logging_tool",
            "Logs one message (only if the request sets a logLevel)",
            no_arguments(),
        ),
        (
            "test_tool_with_progress",
            "Reports progress 0, 50, 100",
            no_arguments(),
        ),
        ("test_error_handling", "Always fails with isError", no_arguments()),
        (
            "test_sampling",
            "Asks the client's LLM (MRTR sampling)",
            json!({ "type": "object", "properties": { "prompt": string("The prompt") }, "required": ["prompt"] }),
        ),
        (
            "test_elicitation",
            "Asks the user for details, then for a confirmation (two MRTR elicitation rounds)",
            json!({ "type": "object", "properties": { "message": string("What to ask") }, "required": ["message"] }),
        ),
        (
            "test_elicitation_sep1034_defaults",
            "Elicitation with defaults (SEP-1034)",
            no_arguments(),
        ),
        (
            "test_elicitation_sep1330_enums",
            "Elicitation with every enum form (SEP-1330)",
            no_arguments(),
        ),
        (
            "test_streaming_elicitation",
            "Asks for one elicitation (MRTR)",
            no_arguments(),
        ),
        (
            "test_missing_capability",
            "Needs sampling: -32021 unless the request declares it",
            no_arguments(),
        ),
        ("test_reconnection", "Answers after a short pause", no_arguments()),
        (
            "test_custom_header",
            "Mirrors its region argument in Mcp-Param-Region (SEP-2243)",
            json!({ "type": "object", "properties": { "region": { "type": "string", "x-mcp-header": "Region" } }, "required": ["region"] }),
        ),
        (
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json_schema_2020_12(),
        ),
    ]
}

fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": { "address": { "$anchor": "addressDef", "type": "object",
            "properties": { "street": { "type": "string" }, "city": { "type": "string" } } } },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    })
}

fn details_schema() -> Value {
    json!({ "type": "object", "properties": {
        "username": { "type": "string", "description": "User's response" },
        "email": { "type": "string", "description": "User's email address" } },
        "required": ["username", "email"] })
}

fn defaults_schema() -> Value {
    json!({ "type": "object", "properties": {
        "name": { "type": "string", "default": "John Doe" },
        "age": { "type": "integer", "default": 30 },
        "score": { "type": "number", "default": 95.5 },
        "status": { "type": "string", "enum": ["active", "inactive", "pending"], "default": "active" },
        "verified": { "type": "boolean", "default": true } } })
}

fn enums_schema() -> Value {
    json!({ "type": "object", "properties": {
        "untitledSingle": { "type": "string", "enum": ["option1", "option2", "option3"] },
        "titledSingle": { "type": "string", "oneOf": [
            { "const": "value1", "title": "First Option" },
            { "const": "value2", "title": "Second Option" },
            { "const": "value3", "title": "Third Option" } ] },
        "legacyEnum": { "type": "string", "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"] },
        "untitledMulti": { "type": "array", "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
        "titledMulti": { "type": "array", "items": { "anyOf": [
            { "const": "value1", "title": "First Choice" },
            { "const": "value2", "title": "Second Choice" },
            { "const": "value3", "title": "Third Choice" } ] } } } })
}

fn ask(key: &str, message: &str, schema: Value) -> Result<Ask, ErrorData> {
    Ok(Ask::elicit(key, message, parse::<ElicitationSchema>(schema)?))
}

/// The input rounds of an MRTR tool; `None` for tools that need no input.
fn rounds(
    tool: &str,
    arguments: &JsonObject,
    step: usize,
    answers: &Answers,
) -> Result<Option<Vec<Ask>>, ErrorData> {
    let text = |name: &str| {
        arguments
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(match (tool, step) {
        ("test_sampling" | "test_missing_capability", 0) => {
            let prompt = if tool == "test_sampling" {
                text("prompt")
            } else {
                "Say hello".to_owned()
            };
            Some(vec![Ask::sample("llm", prompt, 100)])
        }
        ("test_elicitation", 0) => Some(vec![ask("details", &text("message"), details_schema())?]),
        ("test_elicitation", 1) => {
            let field = |f: &str| {
                answer::text_field(answers.get("details"), f)
                    .unwrap_or("?")
                    .to_owned()
            };
            let message = format!("Please confirm: {} <{}>", field("username"), field("email"));
            Some(vec![ask("confirmation", &message, details_schema())?])
        }
        ("test_elicitation_sep1034_defaults", 0) => Some(vec![ask(
            "defaults",
            "Please review and update the form fields with defaults",
            defaults_schema(),
        )?]),
        ("test_elicitation_sep1330_enums", 0) => Some(vec![ask(
            "enums",
            "Please select options from the enum fields",
            enums_schema(),
        )?]),
        ("test_streaming_elicitation", 0) => Some(vec![ask("details", "Your details?", details_schema())?]),
        _ => None,
    })
}

fn elicitation_summary(answer: Option<&Value>) -> String {
    format!(
        "action={}, content={}",
        answer::action(answer).unwrap_or("none"),
        answer
            .and_then(|a| a.get("content"))
            .cloned()
            .unwrap_or(Value::Null)
    )
}

fn content(tool: &str, arguments: &JsonObject, answers: &Answers) -> Option<(Value, bool)> {
    let text = |t: String| json!({ "type": "text", "text": t });
    let blocks = match tool {
        "test_simple_text" => vec![text("This is a simple text response for testing.".into())],
        "test_image_content" => vec![json!({ "type": "image", "data": PNG, "mimeType": "image/png" })],
        "test_audio_content" => vec![json!({ "type": "audio", "data": WAV, "mimeType": "audio/wav" })],
        "test_embedded_resource" => vec![json!({ "type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content." } })],
        "test_multiple_content_types" => vec![
            text("Multiple content types test:".into()),
            json!({ "type": "image", "data": PNG, "mimeType": "image/png" }),
            json!({ "type": "resource", "resource": { "uri": "test://mixed-content-resource",
                "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}" } }),
        ],
        "test_tool_with_logging" | "test_logging_tool" => {
            vec![text("Tool with logging executed successfully".into())]
        }
        "test_tool_with_progress" => vec![text("Tool with progress executed successfully".into())],
        "test_error_handling" => {
            return Some((
                json!([text(
                    "This tool intentionally returns an error for testing".into()
                )]),
                true,
            ));
        }
        "test_sampling" | "test_missing_capability" => vec![text(format!(
            "LLM response: {}",
            answer::sampled_text(answers.get("llm")).unwrap_or("(no text)")
        ))],
        "test_elicitation" => vec![text(format!(
            "User response: {}; confirmation: {}",
            elicitation_summary(answers.get("details")),
            elicitation_summary(answers.get("confirmation"))
        ))],
        "test_elicitation_sep1034_defaults" => vec![text(format!(
            "Elicitation completed: {}",
            elicitation_summary(answers.get("defaults"))
        ))],
        "test_elicitation_sep1330_enums" => vec![text(format!(
            "Elicitation completed: {}",
            elicitation_summary(answers.get("enums"))
        ))],
        "test_streaming_elicitation" => vec![text(elicitation_summary(answers.get("details")))],
        "test_reconnection" => vec![text("Reconnection test completed".into())],
        "test_custom_header" => vec![text(format!(
            "region={}",
            arguments
                .get("region")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ))],
        "json_schema_2020_12_tool" => vec![text(format!("received {}", Value::Object(arguments.clone())))],
        _ => return None,
    };
    Some((Value::Array(blocks), false))
}

/// The suite fixture (see the module docs). It also serves everything [`ConformanceFixture`]
/// does (the `input-required-result-*` tools and prompt), so that all 2026-07-28 server
/// scenarios run against one backend.
#[derive(Debug, Clone)]
pub struct SuiteFixture {
    sealer: StateSealer,
    mrtr: ConformanceFixture,
}

impl SuiteFixture {
    /// Creates the fixture with random `requestState` keys.
    pub fn new() -> Result<Self, BackendError> {
        Ok(Self {
            sealer: StateSealer::random("suite-fixture").map_err(BackendError::Random)?,
            mrtr: ConformanceFixture::new()?,
        })
    }

    /// Names of the listed tools, in listing order (the MRTR scenarios' tools last).
    pub fn tool_names() -> Vec<&'static str> {
        tools()
            .into_iter()
            .map(|(name, ..)| name)
            .chain(ConformanceFixture::tool_names())
            .collect()
    }

    fn tool(name: &str) -> Option<Tool> {
        let (name, description, schema) = tools().into_iter().find(|(n, ..)| *n == name)?;
        let Value::Object(schema) = schema else {
            return None;
        };
        Some(Tool::new(name, description, Arc::new(schema)))
    }
}

/// Sends the tool's notifications: logs (if the request asked for them at that level) and
/// progress (if it carries a token), 50 ms apart.
async fn notify(tool: &str, context: &RequestContext<RoleServer>) {
    let pause = || tokio::time::sleep(Duration::from_millis(50));
    // Info-level messages go out only if the request asked for info or more detail.
    let wants_info = matches!(
        context.meta.log_level(),
        Some(LoggingLevel::Debug | LoggingLevel::Info)
    );
    let logs: &[&str] = match tool {
        "test_tool_with_logging" => &[
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ],
        "test_logging_tool" => &["Logging tool ran"],
        _ => &[],
    };
    if wants_info {
        for (i, text) in logs.iter().enumerate() {
            if i > 0 {
                pause().await;
            }
            if let Ok(param) =
                parse::<LoggingMessageNotificationParam>(json!({ "level": "info", "data": text }))
            {
                let _ = context.peer.notify_logging_message(param).await;
            }
        }
    }
    if tool == "test_tool_with_progress"
        && let Some(token) = context.meta.get_progress_token()
    {
        for (i, progress) in [0, 50, 100].into_iter().enumerate() {
            if i > 0 {
                pause().await;
            }
            let param = json!({ "progressToken": token, "progress": progress, "total": 100 });
            if let Ok(param) = parse::<ProgressNotificationParam>(param) {
                let _ = context.peer.notify_progress(param).await;
            }
        }
    }
    if tool == "test_reconnection" {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn prompts() -> Value {
    let arg = |name: &str, d: &str| json!({ "name": name, "description": d, "required": true });
    json!([
        { "name": "test_simple_prompt", "description": "A simple prompt without arguments" },
        { "name": "test_prompt_with_arguments", "description": "A prompt with two arguments",
          "arguments": [arg("arg1", "First test argument"), arg("arg2", "Second test argument")] },
        { "name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource",
          "arguments": [arg("resourceUri", "URI of the resource to embed")] },
        { "name": "test_prompt_with_image", "description": "A prompt with an image" }
    ])
}

fn prompt(name: &str, arguments: Option<&JsonObject>) -> Option<Value> {
    let argument = |n: &str| {
        arguments
            .and_then(|a| a.get(n))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let user = |content: Value| json!({ "role": "user", "content": content });
    let text = |t: String| json!({ "type": "text", "text": t });
    let messages = match name {
        "test_simple_prompt" => vec![user(text("This is a simple prompt for testing.".into()))],
        "test_prompt_with_arguments" => vec![user(text(format!(
            "Prompt with arguments: arg1='{}', arg2='{}'",
            argument("arg1"),
            argument("arg2")
        )))],
        "test_prompt_with_embedded_resource" => vec![
            user(
                json!({ "type": "resource", "resource": { "uri": argument("resourceUri"),
                "mimeType": "text/plain", "text": "Embedded resource content for testing." } }),
            ),
            user(text("Please process the embedded resource above.".into())),
        ],
        "test_prompt_with_image" => vec![
            user(json!({ "type": "image", "data": PNG, "mimeType": "image/png" })),
            user(text("Please analyze the image above.".into())),
        ],
        _ => return None,
    };
    Some(json!({ "resultType": "complete", "messages": messages }))
}

fn resource(uri: &str) -> Option<Value> {
    let contents = match uri {
        "test://static-text" => json!({ "uri": uri, "mimeType": "text/plain",
            "text": "This is the content of the static text resource." }),
        "test://static-binary" => json!({ "uri": uri, "mimeType": "image/png", "blob": PNG }),
        "test://watched-resource" => {
            json!({ "uri": uri, "mimeType": "text/plain", "text": "Watched resource content." })
        }
        _ => {
            let id = uri.strip_prefix("test://template/")?.strip_suffix("/data")?;
            if id.is_empty() || id.contains('/') {
                return None;
            }
            let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            json!({ "uri": uri, "mimeType": "application/json", "text": text.to_string() })
        }
    };
    Some(json!({ "resultType": "complete", "contents": [contents] }))
}

impl ServerHandler for SuiteFixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_completions()
                .enable_logging()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
        .with_server_info(Implementation::new(
            "mrtr-suite-fixture",
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
            Self::tool_names()
                .into_iter()
                .filter_map(|name| self.get_tool(name))
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Self::tool(name).or_else(|| self.mrtr.get_tool(name))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if Self::tool(&name).is_none() {
            return self.mrtr.call_tool(request, context).await;
        }
        let arguments = request.arguments.clone().unwrap_or_default();
        let caps = context.client_capabilities().unwrap_or_default();
        let binding = self
            .sealer
            .binding("tools/call", &name, request.arguments.as_ref());
        let retry = Retry {
            input_responses: request.input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
        };
        let outcome = drive(&self.sealer, &binding, retry, &caps, |step, answers| {
            rounds(&name, &arguments, step, answers)
        })?;
        let answers = match outcome {
            Outcome::InputRequired(result) => return Ok(result.into()),
            Outcome::Complete(answers) => answers,
        };
        notify(&name, &context).await;
        let Some((blocks, is_error)) = content(&name, &arguments, &answers) else {
            return Err(unknown("tool", &name));
        };
        let result: CallToolResult =
            parse(json!({ "resultType": "complete", "content": blocks, "isError": is_error }))?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut all = parse::<Vec<Prompt>>(prompts())?;
        all.push(Prompt::new(
            PROMPT_NAME,
            Some("MRTR: prompts/get asks for user_context before returning the prompt."),
            None,
        ));
        Ok(ListPromptsResult::with_all_items(all))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        match prompt(&request.name, request.arguments.as_ref()) {
            Some(result) => Ok(parse::<GetPromptResult>(result)?.into()),
            None => self.mrtr.get_prompt(request, context).await,
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = json!([
            { "uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain" },
            { "uri": "test://static-binary", "name": "static-binary", "description": "A static PNG", "mimeType": "image/png" },
            { "uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to subscribe to", "mimeType": "text/plain" }
        ]);
        Ok(ListResourcesResult::with_all_items(parse(resources)?))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = json!([{ "uriTemplate": "test://template/{id}/data", "name": "template",
            "description": "A templated resource", "mimeType": "application/json" }]);
        Ok(ListResourceTemplatesResult::with_all_items(parse::<
            Vec<ResourceTemplate>,
        >(templates)?))
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let watched: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| *uri == WATCHED)
            .cloned()
            .collect();
        Some(
            SubscriptionFilter::builder()
                .resource_subscriptions(watched)
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let watched = context
            .accepted()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.iter().any(|uri| uri == WATCHED));
        if watched {
            let update = ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(WATCHED));
            let _ = context
                .sink()
                .send(ServerNotification::ResourceUpdatedNotification(update))
                .await;
        }
        context.cancelled().await;
        Ok(())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match resource(&request.uri) {
            Some(result) => Ok(parse::<ReadResourceResult>(result)?.into()),
            // SEP-2164: -32602 with the URI.
            None => Err(ErrorData::invalid_params(
                "Resource not found",
                Some(json!({ "uri": request.uri })),
            )),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let typed = request.argument.value.to_lowercase();
        let values: Vec<&str> = ["paris", "park", "party", "test", "testing"]
            .into_iter()
            .filter(|v| v.starts_with(&typed))
            .collect();
        parse(
            json!({ "resultType": "complete", "completion": { "values": values, "total": values.len(), "hasMore": false } }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_tool_has_a_definition_and_the_schemas_parse() {
        let fixture = SuiteFixture::new().unwrap();
        for name in SuiteFixture::tool_names() {
            assert!(fixture.get_tool(name).is_some(), "{name}");
        }
        for schema in [details_schema(), defaults_schema(), enums_schema()] {
            let parsed = parse::<ElicitationSchema>(schema.clone()).unwrap();
            // Every property the scenarios check survives the typed round trip.
            let back = serde_json::to_value(parsed).unwrap();
            for (name, property) in schema["properties"].as_object().unwrap() {
                for key in property.as_object().unwrap().keys() {
                    assert!(
                        back["properties"][name].get(key).is_some(),
                        "{name}.{key} lost: {back}"
                    );
                }
            }
        }
        parse::<Vec<Prompt>>(prompts()).unwrap();
    }

    #[test]
    fn resources_and_templates() {
        assert!(
            resource("test://template/123/data").unwrap()["contents"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Data for ID: 123")
        );
        assert!(resource("test://template//data").is_none());
        assert!(resource("test://nonexistent").is_none());
        parse::<ReadResourceResult>(resource("test://static-binary").unwrap()).unwrap();
    }
}
