//! The scripted backend of the request target: it answers what it reads, as a lenient backend
//! would read it, and writes markers ([`crate::MARKERS`]) into every state and task id it hands
//! out, so that a parser differential between relay and backend shows as a leaked marker.
//!
//! * `tools/call`, `prompts/get`, `resources/read`: `input_required` with state
//!   [`NEW_STATE`] (or a task result with id [`NEW_TASK`] for `tools/call` in task style);
//! * task follow-ups: the task, with the id the backend received echoed;
//! * `subscriptions/listen`: a stream with a status notification naming the first task id;
//! * anything else: an empty result; a request that is not a POST: `input_required`.
//!
//! ```
//! use tower_mrtr_fuzz::backend::{Style, answer_message};
//! use tower_mrtr_fuzz::lenient::json_readings;
//!
//! let request = &json_readings(br#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"g"}}"#)[0];
//! let answer = answer_message(request, br#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"g"}}"#, Style::default()).unwrap();
//! assert!(answer.contains(r#""requestState":"BKSTATE-NEW.""#));
//! ```

use bytes::Bytes;
use http::{HeaderValue, Method, Response, header};
use tower_mrtr::Route;

use crate::lenient::{Node, json_readings, raw_members};
use crate::oracle::{TASK_METHODS, messages};
use crate::relay::{Seen, Step, StepBody};

/// The state the backend hands out with every `input_required`.
pub const NEW_STATE: &str = "BKSTATE-NEW.";

/// The task id the backend hands out for a `tools/call` answered with a task.
pub const NEW_TASK: &str = "BKTASK-NEW.";

/// How the backend answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Answer as an SSE stream.
    pub sse: bool,
    /// Answer `tools/call` with a task.
    pub task: bool,
    /// Send `input_required` without a `requestState`.
    pub no_state: bool,
    /// Report no route.
    pub no_route: bool,
    /// Report another route than the pinned one (a proxy bug).
    pub misroute: bool,
}

/// The backend's answer to what it saw.
pub fn answer(seen: &Seen, style: Style) -> Response<StepBody> {
    let body: Option<String> = if seen.method != Method::POST {
        Some(input_required("null", style))
    } else {
        json_readings(&seen.body)
            .first()
            .and_then(|reading| match reading {
                Node::Array(_) => {
                    let raw: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&seen.body).ok()?;
                    let answers: Vec<String> = messages(reading)
                        .into_iter()
                        .zip(raw)
                        .filter_map(|(message, raw)| answer_message(message, raw.get().as_bytes(), style))
                        .collect();
                    Some(format!("[{}]", answers.join(",")))
                }
                message => answer_message(message, &seen.body, style),
            })
    };
    let listen = json_readings(&seen.body)
        .first()
        .is_some_and(|r| method_of(r).as_deref() == Some("subscriptions/listen"));
    let body = body.unwrap_or_default();
    let (content_type, bytes) = if style.sse || listen {
        let mut stream = String::from(": keep-alive\n\n");
        if listen {
            stream.push_str(&format!(
                "event: message\ndata: {}\n\n",
                listen_notification(seen)
            ));
        }
        if !body.is_empty() {
            stream.push_str(&format!("id: 1\nevent: message\ndata: {body}\n\n"));
        }
        ("text/event-stream", stream)
    } else {
        ("application/json", body)
    };
    let mut response = Response::new(StepBody::new([Step::Data(Bytes::from(bytes))]));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let route = if style.misroute {
        Some(Route::new("gamma"))
    } else if style.no_route {
        None
    } else {
        Some(seen.pinned.clone().unwrap_or_else(|| Route::new("alpha")))
    };
    if let Some(route) = route {
        response.extensions_mut().insert(route);
    }
    response
}

/// The method a lenient backend reads.
fn method_of(message: &Node) -> Option<String> {
    message
        .members("method")
        .find_map(Node::as_str)
        .map(str::to_owned)
}

/// The answer to one request message (`raw` is its text, for the id), `None` for a notification
/// or a response.
pub fn answer_message(message: &Node, raw: &[u8], style: Style) -> Option<String> {
    let method = method_of(message)?;
    let text = std::str::from_utf8(raw).ok()?;
    let members = raw_members(text).unwrap_or_default();
    let id = members
        .iter()
        .find(|(n, _)| n == "id")
        .map(|(_, v)| v.get().to_owned())?;
    let param = |name: &str| -> Option<String> {
        let params = members.iter().find(|(n, _)| n == "params")?.1;
        let params = raw_members(params.get())?;
        params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.get().to_owned())
    };
    Some(match method.as_str() {
        "tools/call" if style.task => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"task","taskId":"{NEW_TASK}","status":"working","ttlMs":60000}}}}"#
        ),
        "tools/call" | "prompts/get" | "resources/read" => input_required(&id, style),
        m if TASK_METHODS.contains(&m) => {
            let task_id = param("taskId").unwrap_or_else(|| "null".to_owned());
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"taskId":{task_id},"status":"working"}}}}"#)
        }
        _ => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#),
    })
}

fn input_required(id: &str, style: Style) -> String {
    let state = if style.no_state {
        String::new()
    } else {
        format!(r#","requestState":"{NEW_STATE}""#)
    };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"ok":{{"method":"elicitation/create","params":{{"message":"Sure?","requestedSchema":{{"type":"object","properties":{{}}}}}}}}}}{state}}}}}"#
    )
}

/// A task status notification naming the first task id of a listen filter, as the backend read
/// it.
fn listen_notification(seen: &Seen) -> String {
    let first = serde_json::from_slice::<serde_json::Value>(&seen.body)
        .ok()
        .and_then(|v| v.pointer("/params/notifications/taskIds/0").cloned())
        .unwrap_or(serde_json::Value::Null);
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{{"taskId":{first},"status":"completed"}}}}"#
    )
}
