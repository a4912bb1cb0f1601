//! The MCP 2026-07-28 messages a soak client sends, and how it reads an answer, JSON or SSE.
//!
//! Every request carries the per-request `_meta` of 2026-07-28 (protocol version, client
//! capabilities declaring elicitation and the Tasks extension) and the mirrored headers
//! (`Mcp-Method`, and `Mcp-Name` for a named tool or a task handle).
//!
//! ```
//! use mrtr_soak::mcp::{self, Answer, Call};
//! use serde_json::json;
//!
//! let call = Call::tool("whoami", json!({}));
//! let request = mcp::request("127.0.0.1:8080", 7, &call);
//! assert_eq!(request.headers()["mcp-name"], "whoami");
//!
//! let sse = b"id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[]}}\n\n";
//! let answer = mcp::read_answer(Some("text/event-stream"), sse, 7).unwrap();
//! assert!(matches!(answer, Answer::Result(result) if result["content"] == json!([])));
//! ```

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

/// The protocol revision every request declares.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// One JSON-RPC request, without its id.
#[derive(Clone, Debug)]
pub struct Call {
    /// `tools/call`, `tasks/get`, ...
    pub method: &'static str,
    /// The value mirrored in `Mcp-Name`: the tool name or the task handle.
    pub name: Option<String>,
    /// `params`, without `_meta` (added when the request is built).
    pub params: Value,
}

impl Call {
    /// `tools/call` of `tool` with `arguments`.
    pub fn tool(tool: &str, arguments: Value) -> Self {
        Self {
            method: "tools/call",
            name: Some(tool.to_owned()),
            params: json!({ "name": tool, "arguments": arguments }),
        }
    }

    /// The retry of a `tools/call` round: the same tool and arguments, the answers to the
    /// round's input requests and the `requestState` it carried.
    pub fn retry(tool: &str, arguments: Value, input_responses: Value, request_state: &str) -> Self {
        let mut call = Self::tool(tool, arguments);
        call.params["inputResponses"] = input_responses;
        call.params["requestState"] = Value::String(request_state.to_owned());
        call
    }

    /// `tasks/get`, `tasks/update` or `tasks/cancel` of the task behind `handle`.
    pub fn task(method: &'static str, handle: &str, mut params: Value) -> Self {
        params["taskId"] = Value::String(handle.to_owned());
        Self {
            method,
            name: Some(handle.to_owned()),
            params,
        }
    }

    /// `tools/list`.
    pub fn list_tools() -> Self {
        Self {
            method: "tools/list",
            name: None,
            params: json!({}),
        }
    }
}

/// The JSON-RPC body of `call` with `id`.
pub fn body(id: u64, call: &Call) -> Bytes {
    let mut params = call.params.clone();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": { "io.modelcontextprotocol/tasks": {} }
        },
        "io.modelcontextprotocol/clientInfo": { "name": "mrtr-soak", "version": env!("CARGO_PKG_VERSION") }
    });
    let message = json!({ "jsonrpc": "2.0", "id": id, "method": call.method, "params": params });
    Bytes::from(message.to_string())
}

/// The HTTP request for `call` with `id`, to `POST http://{authority}/mcp`.
pub fn request(authority: &str, id: u64, call: &Call) -> http::Request<Full<Bytes>> {
    let mut builder = http::Request::post(format!("http://{authority}/mcp"))
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .header("mcp-method", call.method);
    if let Some(name) = &call.name {
        builder = builder.header("mcp-name", name.as_str());
    }
    builder
        .body(Full::new(body(id, call)))
        .expect("a method, names and handles are valid header values")
}

/// A JSON-RPC answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// `result`.
    Result(Value),
    /// `error`.
    Error {
        /// `error.code`.
        code: i64,
        /// `error.message`.
        message: String,
    },
}

/// Reads the answer to request `id` from a response body: a JSON message, or the SSE event
/// carrying it (notifications and comments before it are skipped). `Err` says what was wrong.
pub fn read_answer(content_type: Option<&str>, body: &[u8], id: u64) -> Result<Answer, String> {
    let is_sse = content_type.is_some_and(|t| t.starts_with("text/event-stream"));
    let message = if is_sse {
        sse_messages(body)
            .into_iter()
            .find(|m| {
                m.get("id") == Some(&json!(id)) && (m.get("result").is_some() || m.get("error").is_some())
            })
            .ok_or_else(|| format!("SSE stream of {} bytes ended without the answer", body.len()))?
    } else {
        let message: Value = serde_json::from_slice(body)
            .map_err(|e| format!("answer is not JSON ({e}): {}", excerpt(body)))?;
        message
    };
    if let Some(error) = message.get("error") {
        return Ok(Answer::Error {
            code: error["code"].as_i64().unwrap_or(0),
            message: error["message"].as_str().unwrap_or("").to_owned(),
        });
    }
    match message.get("result") {
        Some(result) if message.get("id") == Some(&json!(id)) => Ok(Answer::Result(result.clone())),
        Some(_) => Err(format!("answer for another id: {}", excerpt(body))),
        None => Err(format!("neither result nor error: {}", excerpt(body))),
    }
}

/// The JSON messages of every complete SSE event in `body` (multi-line `data` joined with `\n`).
fn sse_messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let mut messages = Vec::new();
    let mut data = String::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if let Ok(message) = serde_json::from_str(&data) {
                messages.push(message);
            }
            data.clear();
        } else if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    messages
}

/// The start of a body, for messages.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(160)]);
    text.replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_mirror_method_and_name() {
        let call = Call::task("tasks/get", "mrtr2.abc", json!({}));
        let request = request("127.0.0.1:1", 3, &call);
        assert_eq!(request.headers()["mcp-method"], "tasks/get");
        assert_eq!(request.headers()["mcp-name"], "mrtr2.abc");
        let body: Value = serde_json::from_slice(&body(3, &call)).unwrap();
        assert_eq!(body["params"]["taskId"], "mrtr2.abc");
        assert_eq!(body["id"], 3);
        assert_eq!(
            body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            PROTOCOL_VERSION
        );
        let list = body_of(Call::list_tools());
        assert_eq!(list["method"], "tools/list");
        let retry = body_of(Call::retry(
            "deploy",
            json!({"a": "b"}),
            json!({"k": {}}),
            "mrtr2.s",
        ));
        assert_eq!(retry["params"]["requestState"], "mrtr2.s");
        assert_eq!(retry["params"]["arguments"]["a"], "b");
    }

    fn body_of(call: Call) -> Value {
        serde_json::from_slice(&body(1, &call)).unwrap()
    }

    #[test]
    fn reads_json_and_sse_answers() {
        let json = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"bad"}}"#;
        assert_eq!(
            read_answer(Some("application/json"), json, 5).unwrap(),
            Answer::Error {
                code: -32602,
                message: "bad".into()
            }
        );
        let sse =
            b": keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n\
            data: {\"jsonrpc\":\"2.0\",\"id\":5,\ndata: \"result\":{\"x\":1}}\n\n";
        assert_eq!(
            read_answer(Some("text/event-stream"), sse, 5).unwrap(),
            Answer::Result(json!({"x": 1}))
        );
        // A stream cut before its answer, an unterminated last event, another id, not JSON.
        assert!(read_answer(Some("text/event-stream"), b": ka\n\n", 5).is_err());
        assert!(read_answer(Some("text/event-stream"), b"data: {\"id\":5,\"result\":{}}", 5).is_err());
        assert!(read_answer(None, br#"{"jsonrpc":"2.0","id":6,"result":{}}"#, 5).is_err());
        assert!(read_answer(None, b"<html>502</html>", 5).is_err());
    }
}
