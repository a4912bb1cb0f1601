//! MCP 2026-07-28 as a test client spells it: the `_meta` every request carries and its variants,
//! the headers a conformant client sends, JSON-RPC request bodies, the JSON-RPC message of a JSON
//! or SSE answer, and the content that fills in an elicitation's form. With the `gateway` feature,
//! also the HTTP client side (`Call`, `send`, `drive`, `raw`, …).

use anyhow::Context as _;
use serde_json::{Value, json};

#[cfg(feature = "gateway")]
mod client;
#[cfg(feature = "gateway")]
pub use client::*;

/// The protocol revision every test request declares.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// The Tasks extension (SEP-2663): its key in `clientCapabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The headers every 2026-07-28 request carries, whatever its method.
pub const HEADERS: [(&str, &str); 3] = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
    ("mcp-protocol-version", PROTOCOL_VERSION),
];

/// A request's `_meta`: the protocol version and `capabilities` as the client's capabilities.
pub fn meta_declaring(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// The `_meta` of a client that declares elicitation, the capability every MRTR flow needs.
pub fn meta() -> Value {
    meta_declaring(json!({ "elicitation": {} }))
}

/// The `_meta` of a client that declares the Tasks extension (and nothing else).
pub fn tasks_meta() -> Value {
    meta_declaring(json!({ "extensions": { TASKS_EXTENSION: {} } }))
}

/// `meta` with the client's name and version added (`io.modelcontextprotocol/clientInfo`).
pub fn with_client_info(mut meta: Value, name: &str, version: &str) -> Value {
    meta["io.modelcontextprotocol/clientInfo"] = json!({ "name": name, "version": version });
    meta
}

/// The headers a conformant 2026-07-28 client sends for `method`: [`HEADERS`] and `Mcp-Method`.
pub fn mcp_headers(method: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut headers = HEADERS.to_vec();
    headers.push(("mcp-method", method));
    headers
}

/// A JSON-RPC request body for `method` with `params` plus [`meta`].
pub fn body(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = meta();
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

/// The JSON-RPC message of an answer: the whole text if it is JSON, else (an SSE stream) the last
/// `data:` event that is a response (has a `result` or an `error`).
pub fn message(text: &str) -> anyhow::Result<Value> {
    if let Ok(message) = serde_json::from_str(text) {
        return Ok(message);
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|m| m.get("result").is_some() || m.get("error").is_some())
        .with_context(|| format!("neither JSON nor an SSE stream with a response: {text:?}"))
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
