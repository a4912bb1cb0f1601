//! Turning a legacy request into the modern one a 2026-07-28 backend expects.
//!
//! A legacy request carries its identity in the session; a modern one in every request. The
//! translation puts the session's protocol version, `clientInfo` and capabilities into
//! `params._meta` (with `io.modelcontextprotocol/protocolVersion: 2026-07-28`), adds the log
//! level the client chose, keeps every other member (notably `arguments` and
//! `_meta.progressToken`) with its raw text, and sets the mirrored headers: `MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name` and, for tools whose schema asks for them, `Mcp-Param-*`. An MRTR
//! retry is the same request with a new id, `inputResponses` and `requestState` added: the
//! `arguments` go to the backend byte for byte each round, as the envelope binding requires.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, header};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME, encode_header_value};

use super::session::Session;
use crate::jsonrpc::{RawObject, push_member};

/// The modern protocol version every translated request declares.
pub(super) const MODERN_VERSION: &str = "2026-07-28";

/// `_meta` keys of the modern protocol's own prefix.
const RESERVED_META_PREFIX: &str = "io.modelcontextprotocol/";

/// A legacy JSON-RPC message as the front reads it: a request, a notification, or the client's
/// answer to a server-to-client request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LegacyMessage {
    /// Must be `"2.0"`.
    pub jsonrpc: Option<String>,
    /// Raw id, absent for notifications.
    pub id: Option<Box<RawValue>>,
    /// The method, absent for answers.
    pub method: Option<String>,
    /// Raw params.
    pub params: Option<Box<RawValue>>,
    /// An answer's result.
    pub result: Option<Box<RawValue>>,
    /// An answer's error.
    pub error: Option<Box<RawValue>>,
}

impl LegacyMessage {
    /// Reads one JSON-RPC message; `None` for anything else (not JSON, a batch, duplicate or
    /// unknown members, wrong `jsonrpc`).
    pub(super) fn parse(body: &[u8]) -> Option<Self> {
        let message: Self = serde_json::from_slice(body).ok()?;
        (message.jsonrpc.as_deref() == Some("2.0")).then_some(message)
    }
}

/// A legacy request to relay: method, id, target and the params it came with.
#[derive(Debug)]
pub(super) struct LegacyRequest {
    id: Box<RawValue>,
    method: String,
    /// `params` without `_meta`, member order and raw text kept.
    params: RawObject,
    /// The client's `_meta`, without keys of the modern protocol's prefix.
    meta: RawObject,
    target: Option<String>,
}

impl LegacyRequest {
    /// Reads a request body; `None` if it is not a request with object (or no) params.
    pub(super) fn parse(body: &[u8]) -> Option<Self> {
        let message = LegacyMessage::parse(body)?;
        Self::from_message(message)
    }

    /// From a parsed message; `None` if it is not a request.
    pub(super) fn from_message(message: LegacyMessage) -> Option<Self> {
        let (Some(id), Some(method)) = (message.id, message.method) else {
            return None;
        };
        let mut params = match &message.params {
            Some(raw) if raw.get() != "null" => serde_json::from_str::<RawObject>(raw.get()).ok()?,
            _ => RawObject::default(),
        };
        let mut meta = match params.0.iter().position(|(k, _)| k == "_meta") {
            Some(at) => serde_json::from_str::<RawObject>(params.0.remove(at).1.get()).ok()?,
            None => RawObject::default(),
        };
        meta.0.retain(|(k, _)| !k.starts_with(RESERVED_META_PREFIX));
        // A retry's MRTR members are the gateway's to set, never the legacy client's.
        params
            .0
            .retain(|(k, _)| k != "inputResponses" && k != "requestState");
        let member = if method == "resources/read" { "uri" } else { "name" };
        let target = params
            .get(member)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
        Some(Self {
            id,
            method,
            params,
            meta,
            target,
        })
    }

    /// The client's raw id.
    pub(super) fn id(&self) -> &RawValue {
        &self.id
    }

    /// The JSON-RPC method.
    pub(super) fn method(&self) -> &str {
        &self.method
    }

    /// `params.name` (`params.uri` for `resources/read`), if a string.
    pub(super) fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// A params member, raw.
    pub(super) fn param(&self, name: &str) -> Option<&RawValue> {
        self.params.get(name)
    }

    /// The modern body, with `id` (raw JSON) and the session's `_meta`; `retry` adds
    /// `inputResponses` (a raw JSON object) and `requestState` (a raw JSON string). Written
    /// member by member from raw texts, each read as JSON already; the session's own members
    /// are written once per session.
    pub(super) fn modern_body(
        &self,
        id: &str,
        session: &Session,
        log_level: Option<&str>,
        retry: Option<(&RawValue, &RawValue)>,
    ) -> Bytes {
        let quoted = |text: &str| Value::from(text).to_string();
        let session_meta = session.modern_meta(|session| {
            let version = quoted(MODERN_VERSION);
            let mut text = String::new();
            for (key, value) in [
                ("protocolVersion", version.as_str()),
                ("clientInfo", session.client_info().get()),
                ("clientCapabilities", session.capabilities().get()),
            ] {
                if !text.is_empty() {
                    text.push(',');
                }
                push_member(&mut text, &format!("{RESERVED_META_PREFIX}{key}"), value);
            }
            text
        });
        let mut params: Vec<(&str, &str)> =
            self.params.0.iter().map(|(k, v)| (k.as_str(), v.get())).collect();
        if let Some((responses, state)) = retry {
            params.extend([("inputResponses", responses.get()), ("requestState", state.get())]);
        }
        let method = quoted(&self.method);
        let level = log_level.map(quoted);
        let meta = || self.meta.0.iter().map(|(k, v)| (k.as_str(), v.get()));
        let mut body = String::with_capacity(
            64 + id.len()
                + method.len()
                + written_len(params.iter().copied())
                + written_len(meta())
                + session_meta.len()
                + level.as_ref().map_or(0, |l| l.len() + 40),
        );
        body.push_str(r#"{"jsonrpc":"2.0","id":"#);
        body.push_str(id);
        body.push_str(r#","method":"#);
        body.push_str(&method);
        body.push_str(r#","params":{"#);
        for (key, value) in &params {
            push_member(&mut body, key, value);
            body.push(',');
        }
        body.push_str(r#""_meta":{"#);
        for (key, value) in meta() {
            push_member(&mut body, key, value);
            body.push(',');
        }
        body.push_str(session_meta);
        if let Some(level) = &level {
            body.push(',');
            push_member(&mut body, &format!("{RESERVED_META_PREFIX}logLevel"), level);
        }
        body.push_str("}}}");
        Bytes::from(body)
    }

    /// The modern request's headers: the client's own (credentials, principal, trace context…)
    /// without the legacy session ones, plus the mirrored MCP headers of this request and the
    /// `Mcp-Param-*` headers `params` calls for.
    pub(super) fn modern_headers(&self, client: &HeaderMap, params: &[ParamHeader]) -> HeaderMap {
        let mut headers = client.clone();
        headers.remove("mcp-session-id");
        headers.remove("last-event-id");
        headers.remove(header::CONTENT_LENGTH);
        let stale: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("mcp-param-"))
            .cloned()
            .collect();
        for name in stale {
            headers.remove(name);
        }
        headers.insert(
            crate::route::headers::MCP_PROTOCOL_VERSION,
            HeaderValue::from_static(MODERN_VERSION),
        );
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(method) = encode_header_value(&self.method) {
            headers.insert(MCP_METHOD, method);
        }
        headers.remove(MCP_NAME);
        if matches!(
            self.method.as_str(),
            "tools/call" | "prompts/get" | "resources/read"
        ) && let Some(name) = self.target.as_deref().and_then(encode_header_value)
        {
            headers.insert(MCP_NAME, name);
        }
        if self.method == "tools/call"
            && let Some(arguments) = self.params.get("arguments")
        {
            for (name, value) in param_headers(arguments, params) {
                headers.insert(name, value);
            }
        }
        headers
    }
}

/// A tool parameter annotated `x-mcp-header: Name`: its `Mcp-Param-Name` header mirrors the
/// argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ParamHeader {
    /// The argument (property) name.
    pub property: String,
    /// The header name after `Mcp-Param-`.
    pub header: String,
}

/// About the bytes `members` take written as `"key":value,` (escapes aside).
fn written_len<'a>(members: impl Iterator<Item = (&'a str, &'a str)>) -> usize {
    members.map(|(key, value)| key.len() + value.len() + 4).sum()
}

/// The `Mcp-Param-*` headers for `arguments` (SEP-2243): strings as they are (base64 form when
/// needed), numbers as written, booleans as `true`/`false`; absent and `null` arguments get no
/// header.
fn param_headers(arguments: &RawValue, params: &[ParamHeader]) -> Vec<(HeaderName, HeaderValue)> {
    let Ok(arguments) = serde_json::from_str::<RawObject>(arguments.get()) else {
        return Vec::new();
    };
    params
        .iter()
        .filter_map(|p| {
            let raw = arguments.get(&p.property)?;
            let text = match serde_json::from_str::<Value>(raw.get()).ok()? {
                Value::String(s) => s,
                Value::Number(_) => raw.get().to_owned(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            let name = HeaderName::from_bytes(format!("mcp-param-{}", p.header).as_bytes()).ok()?;
            Some((name, encode_header_value(&text)?))
        })
        .collect()
}

/// The `x-mcp-header` annotations of the tools this replica has seen listed, so legacy calls
/// (whose clients know nothing of `Mcp-Param-*`) can be sent with the headers the backend checks.
#[derive(Debug, Default)]
pub(super) struct ToolHeaders {
    tools: Mutex<HashMap<String, Vec<ParamHeader>>>,
}

/// Most tools whose annotations are remembered.
const MAX_TOOLS: usize = 10_000;

impl ToolHeaders {
    /// The annotations of `tool`, as last listed.
    pub(super) fn get(&self, tool: &str) -> Vec<ParamHeader> {
        self.lock().get(tool).cloned().unwrap_or_default()
    }

    /// Records the annotations of every tool in a `tools/list` result; whether any tool has one.
    pub(super) fn record(&self, list_result: &RawValue) -> bool {
        #[derive(Deserialize)]
        struct ListResult {
            tools: Vec<Tool>,
        }
        #[derive(Deserialize)]
        struct Tool {
            name: String,
            #[serde(rename = "inputSchema")]
            input_schema: Option<Value>,
        }
        let Ok(list) = serde_json::from_str::<ListResult>(list_result.get()) else {
            return false;
        };
        let mut tools = self.lock();
        let mut any = false;
        for tool in list.tools {
            let annotated: Vec<ParamHeader> = tool
                .input_schema
                .as_ref()
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(property, schema)| {
                    Some(ParamHeader {
                        property: property.clone(),
                        header: schema.get("x-mcp-header")?.as_str()?.to_owned(),
                    })
                })
                .collect();
            if annotated.is_empty() {
                tools.remove(&tool.name);
            } else if tools.len() < MAX_TOOLS || tools.contains_key(&tool.name) {
                any = true;
                tools.insert(tool.name, annotated);
            }
        }
        any
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<ParamHeader>>> {
        self.tools.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_cannot_smuggle_modern_meta_or_mrtr_members() {
        let body = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","requestState":"forged","inputResponses":{},"_meta":{"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}}"#;
        let request = LegacyRequest::parse(body).unwrap();
        let session = Session::new("2025-11-25", "{}", "{}").unwrap();
        let state = RawValue::from_string(r#""s1""#.into()).unwrap();
        let answers = RawValue::from_string(r#"{"k":{"action":"accept"}}"#.into()).unwrap();
        let body = request.modern_body("7", &session, None, Some((&answers, &state)));
        let text = std::str::from_utf8(&body).unwrap();
        assert!(!text.contains("forged") && !text.contains("sampling"), "{text}");
        assert!(text.contains(r#""inputResponses":{"k":{"action":"accept"}},"requestState":"s1""#));
    }

    #[test]
    fn headers_mirror_the_body_and_annotated_arguments() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"geo","arguments":{"region":"eu west","n":10,"flag":true,"none":null,"x":1.5}}}"#;
        let request = LegacyRequest::parse(body).unwrap();
        let mut client = HeaderMap::new();
        client.insert("mcp-session-id", HeaderValue::from_static("s"));
        client.insert("mcp-protocol-version", HeaderValue::from_static("2025-11-25"));
        client.insert("mcp-param-stale", HeaderValue::from_static("1"));
        client.insert("x-user", HeaderValue::from_static("alice"));
        let params: Vec<ParamHeader> = [
            ("region", "Region"),
            ("n", "N"),
            ("flag", "Flag"),
            ("none", "None"),
        ]
        .map(|(p, h)| ParamHeader {
            property: p.into(),
            header: h.into(),
        })
        .to_vec();
        let headers = request.modern_headers(&client, &params);
        assert_eq!(headers["mcp-protocol-version"], "2026-07-28");
        assert_eq!(headers["mcp-method"], "tools/call");
        assert_eq!(headers["mcp-name"], "geo");
        assert_eq!(headers["mcp-param-region"], "eu west");
        assert_eq!(headers["mcp-param-n"], "10");
        assert_eq!(headers["mcp-param-flag"], "true");
        assert_eq!(headers["x-user"], "alice");
        for gone in ["mcp-param-none", "mcp-param-stale", "mcp-session-id"] {
            assert!(!headers.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn tool_annotations_are_recorded_from_lists() {
        let tools = ToolHeaders::default();
        let list = RawValue::from_string(
            r#"{"tools":[{"name":"a","inputSchema":{"properties":{"r":{"type":"string","x-mcp-header":"Region"}}}},{"name":"b","inputSchema":{}}]}"#.into(),
        )
        .unwrap();
        assert!(tools.record(&list));
        assert_eq!(tools.get("a")[0].header, "Region");
        assert!(tools.get("b").is_empty());
    }

    #[test]
    fn only_requests_parse() {
        assert!(LegacyRequest::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_none());
        assert!(LegacyRequest::parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_none());
        assert!(LegacyRequest::parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).is_none());
        assert!(LegacyMessage::parse(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).is_none());
        assert!(LegacyMessage::parse(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#).is_none());
        let ping = LegacyRequest::parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert_eq!((ping.method(), ping.target()), ("ping", None));
    }

    #[test]
    fn a_legacy_call_becomes_modern_with_the_sessions_meta() {
        let body = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"deploy","arguments":{"b":1.50,"a":"x"},"_meta":{"progressToken":"p1"}}}"#;
        let request = LegacyRequest::parse(body).unwrap();
        let session = Session::new(
            "2025-11-25",
            r#"{"name":"old-client","version":"1"}"#,
            r#"{"elicitation":{}}"#,
        )
        .unwrap();
        let modern = request.modern_body("\"gw-1\"", &session, Some("info"), None);
        assert_eq!(
            std::str::from_utf8(&modern).unwrap(),
            concat!(
                r#"{"jsonrpc":"2.0","id":"gw-1","method":"tools/call","params":{"name":"deploy","arguments":{"b":1.50,"a":"x"},"#,
                r#""_meta":{"progressToken":"p1","io.modelcontextprotocol/protocolVersion":"2026-07-28","#,
                r#""io.modelcontextprotocol/clientInfo":{"name":"old-client","version":"1"},"#,
                r#""io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"io.modelcontextprotocol/logLevel":"info"}}}"#,
            )
        );
    }
}
