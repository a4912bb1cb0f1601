//! The JSON of bridged tasks: what a `tools/call` declares (the Tasks extension and the
//! capabilities a backend's requests need), the `inputResponses` of a `tasks/update`, and the
//! Tasks extension's shapes the client reads (SEP-2663: `CreateTaskResult`, `GetTaskResult`).
//! Imports nothing of the room.

use std::time::SystemTime;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::jsonrpc::RawObject;

/// The Tasks extension's key in `clientCapabilities.extensions`.
pub(super) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether `body` names the Tasks extension anywhere: the searcher is built once, as building
/// it costs more than searching a call's body.
pub(super) fn names_tasks(body: &[u8]) -> bool {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(TASKS_EXTENSION));
    FINDER.find(body).is_some()
}

/// What a client's `tools/call` declared that the bridge needs: the Tasks extension, and which
/// of the backend's requests it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Declared {
    /// The capabilities its backend session declares at `initialize` (raw JSON): only
    /// `elicitation` (with its `form` and `url` modes, as declared), `sampling` and `roots`, so
    /// that the few sessions they key stay few.
    pub(super) capabilities: String,
    elicitation: bool,
    sampling: bool,
    roots: bool,
}

impl Declared {
    /// Whether the client takes the backend's request `method`.
    pub(super) fn takes(&self, method: &str) -> bool {
        match method {
            "elicitation/create" => self.elicitation,
            "sampling/createMessage" => self.sampling,
            "roots/list" => self.roots,
            _ => false,
        }
    }
}

/// What the `tools/call` `body` declares in `params._meta`, when it declares the Tasks extension
/// and at least one capability a backend's request needs; `None` otherwise (also for a body the
/// bridge cannot read: the call then goes on as any other). A body that never names the
/// extension is not parsed.
pub(super) fn declared(body: &[u8]) -> Option<Declared> {
    if !names_tasks(body) {
        return None;
    }
    let message: RawObject = serde_json::from_slice(body).ok()?;
    let params: RawObject = serde_json::from_str(message.get("params")?.get()).ok()?;
    let meta: Value = serde_json::from_str(params.get("_meta")?.get()).ok()?;
    let declared = meta.get("io.modelcontextprotocol/clientCapabilities")?;
    declared.get("extensions")?.get(TASKS_EXTENSION)?.as_object()?;
    let mut capabilities = Map::new();
    if let Some(elicitation) = declared.get("elicitation").and_then(Value::as_object) {
        let mut modes = Map::new();
        for mode in ["form", "url"] {
            if elicitation.get(mode).is_some_and(Value::is_object) {
                modes.insert(mode.to_owned(), Value::Object(Map::new()));
            }
        }
        capabilities.insert("elicitation".to_owned(), Value::Object(modes));
    }
    for key in ["sampling", "roots"] {
        if declared.get(key).is_some_and(Value::is_object) {
            capabilities.insert(key.to_owned(), Value::Object(Map::new()));
        }
    }
    if capabilities.is_empty() {
        return None;
    }
    Some(Declared {
        elicitation: capabilities.contains_key("elicitation"),
        sampling: capabilities.contains_key("sampling"),
        roots: capabilities.contains_key("roots"),
        capabilities: Value::Object(capabilities).to_string(),
    })
}

/// The `params.inputResponses` of a `tasks/update` `body`, member by member (raw JSON); `None`
/// when the body has none, or it is not an object.
pub(super) fn input_responses(body: &[u8]) -> Option<RawObject> {
    let message: RawObject = serde_json::from_slice(body).ok()?;
    let params: RawObject = serde_json::from_str(message.get("params")?.get()).ok()?;
    serde_json::from_str(params.get("inputResponses")?.get()).ok()
}

/// A task's status (SEP-2663).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Completed, failed and cancelled never change.
    pub(super) fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// The fields every task result carries (`Task`), as JSON object members.
#[derive(Debug)]
pub(super) struct TaskFields<'a> {
    pub(super) id: &'a str,
    pub(super) status: Status,
    pub(super) message: Option<&'a str>,
    pub(super) created: SystemTime,
    pub(super) updated: SystemTime,
    pub(super) ttl_ms: u64,
}

/// How often a client should poll, in milliseconds (the extension's `pollIntervalMs`).
const POLL_INTERVAL_MS: u64 = 1000;

impl TaskFields<'_> {
    fn object(&self, result_type: &str) -> Map<String, Value> {
        let mut object = Map::new();
        object.insert("resultType".to_owned(), result_type.into());
        object.insert("taskId".to_owned(), self.id.into());
        object.insert("status".to_owned(), self.status.as_str().into());
        if let Some(message) = self.message {
            object.insert("statusMessage".to_owned(), message.into());
        }
        object.insert("createdAt".to_owned(), iso8601(self.created).into());
        object.insert("lastUpdatedAt".to_owned(), iso8601(self.updated).into());
        object.insert("ttlMs".to_owned(), self.ttl_ms.into());
        object.insert("pollIntervalMs".to_owned(), POLL_INTERVAL_MS.into());
        object
    }

    /// The `CreateTaskResult` (flat, `resultType: "task"`) as the JSON-RPC response to `id`.
    pub(super) fn created(&self, id: &str) -> String {
        let result = Value::Object(self.object("task"));
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
    }

    /// The `GetTaskResult` as the JSON-RPC response to `id`: with `extra` (raw JSON members:
    /// `inputRequests`, `result` or `error`) after the task's fields.
    pub(super) fn detailed(&self, id: &str, extra: &[(&str, &RawValue)]) -> String {
        let mut result = Value::Object(self.object("complete")).to_string();
        result.pop();
        for (key, value) in extra {
            result.push_str(&format!(r#","{key}":{}"#, value.get()));
        }
        result.push('}');
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
    }
}

/// The empty acknowledgement of `tasks/update` and `tasks/cancel`, as the response to `id`.
pub(super) fn acknowledged(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete"}}}}"#)
}

/// `time` as ISO 8601 in UTC, to the millisecond (`2026-08-01T10:00:00.000Z`).
pub(super) fn iso8601(time: SystemTime) -> String {
    let at = time::OffsetDateTime::from(time);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(meta: Value) -> Vec<u8> {
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","arguments":{},"_meta":meta}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_call_declares_tasks_and_the_capabilities_the_backend_may_ask_for() {
        let both = call(json!({"io.modelcontextprotocol/clientCapabilities":{
            "extensions":{"io.modelcontextprotocol/tasks":{}},
            "elicitation":{"form":{},"url":{},"other":1},"roots":{"listChanged":true},"experimental":{}}}));
        let declared = declared(&both).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&declared.capabilities).unwrap(),
            json!({"elicitation":{"form":{},"url":{}},"roots":{}})
        );
        assert!(declared.takes("elicitation/create") && declared.takes("roots/list"));
        assert!(!declared.takes("sampling/createMessage") && !declared.takes("ping"));
        for no in [
            json!({"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}),
            json!({"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}),
            json!({"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true},"elicitation":{}}}),
        ] {
            assert_eq!(declared_of(no.clone()), None, "{no}");
        }
        assert_eq!(super::declared(b"{\"io.modelcontextprotocol/tasks\""), None);
    }

    fn declared_of(meta: Value) -> Option<Declared> {
        declared(&call(meta))
    }

    #[test]
    fn results_have_the_extensions_shapes() {
        let created = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_785_000_000_123);
        let fields = TaskFields {
            id: "t",
            status: Status::InputRequired,
            message: None,
            created,
            updated: created,
            ttl_ms: 60_000,
        };
        let made: Value = serde_json::from_str(&fields.created("7")).unwrap();
        assert_eq!(made["id"], 7);
        assert_eq!(made["result"]["resultType"], "task");
        assert_eq!(made["result"]["status"], "input_required");
        assert_eq!(made["result"]["createdAt"], "2026-07-25T17:20:00.123Z");
        assert!(made["result"].get("requestState").is_none() && made["result"].get("task").is_none());
        let raw = RawValue::from_string(r#"{"a":{"method":"roots/list"}}"#.to_owned()).unwrap();
        let got: Value =
            serde_json::from_str(&fields.detailed(r#""g""#, &[("inputRequests", &raw)])).unwrap();
        assert_eq!(got["result"]["resultType"], "complete");
        assert_eq!(got["result"]["inputRequests"]["a"]["method"], "roots/list");
        assert_eq!(
            serde_json::from_str::<Value>(&acknowledged("3")).unwrap()["result"],
            json!({"resultType":"complete"})
        );
        let responses =
            input_responses(br#"{"params":{"taskId":"t","inputResponses":{"a":{"action":"accept"},"b":1}}}"#)
                .unwrap();
        assert_eq!(responses.0.len(), 2);
        assert!(input_responses(br#"{"params":{"inputResponses":[]}}"#).is_none());
    }
}
