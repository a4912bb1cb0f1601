//! What an audit event holds: a [`Record`] is filled on the request path with what is at hand
//! (the caller, the headers, the request's and the answer's bytes, reference-counted), and read
//! on the writer's thread into the event's fields ([`Record::event`]); a [`Changed`] is a
//! definition that differs from its pin. Both are written as one JSON object per line.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME};
use tower_mrtr::{Outcome, Route};

use super::note::CallNote;
use crate::auth::Caller;
use crate::observe::trace::TraceSlot;

/// The methods an event is written for: calls and task follow-ups.
const AUDITED: [&str; 6] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// The header naming a request's id (the HTTP layer sets one on every request).
const REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// The request's bytes as they pass to the MRTR layer, shared with the body that keeps them.
pub(crate) type Kept = Arc<Mutex<Vec<Bytes>>>;

/// How an answer's body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Read to its end.
    Complete,
    /// Dropped before its end (the client went away), or failed.
    Cut,
}

/// One call's event in the making; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Record {
    at: SystemTime,
    started: Instant,
    caller: Option<Caller>,
    method: Option<&'static str>,
    /// `Mcp-Name`, except on a task follow-up (where it is the task's handle, an envelope).
    target: Option<HeaderValue>,
    request_id: Option<HeaderValue>,
    pub(crate) trace: Option<Arc<TraceSlot>>,
    trace_id: Option<String>,
    pub(crate) request: Kept,
    status: u16,
    backend: Option<Route>,
    layer: Option<Outcome>,
    pub(crate) refusal: Option<&'static str>,
    note: Option<CallNote>,
    sse: bool,
    answer: Vec<Bytes>,
    answer_len: usize,
    /// The answer went beyond what is read of it (its first bytes were let go).
    answer_over: bool,
    end: End,
    latency: Duration,
}

impl Record {
    /// A record of `request` if its `Mcp-Method` is one audited; a request without the header
    /// is recorded only when `unnamed` (the front's refusals, which come before anything reads
    /// the body that names the method).
    pub(crate) fn start_with<B>(request: &Request<B>, unnamed: bool) -> Option<Self> {
        let headers = request.headers();
        let method = match headers.get(&MCP_METHOD) {
            Some(value) => Some(*AUDITED.iter().find(|m| value.as_bytes() == m.as_bytes())?),
            None if unnamed => None,
            None => return None,
        };
        let follow_up = method.is_some_and(|m| m.starts_with("tasks/"));
        Some(Self {
            at: SystemTime::now(),
            started: Instant::now(),
            caller: request.extensions().get::<Caller>().cloned(),
            method,
            target: headers.get(&MCP_NAME).filter(|_| !follow_up).cloned(),
            request_id: headers.get(&REQUEST_ID).cloned(),
            trace: request.extensions().get::<Arc<TraceSlot>>().cloned(),
            trace_id: None,
            request: Kept::default(),
            status: 0,
            backend: None,
            layer: None,
            refusal: None,
            note: None,
            sse: false,
            answer: Vec::new(),
            answer_len: 0,
            answer_over: false,
            end: End::Complete,
            latency: Duration::ZERO,
        })
    }

    /// [`start_with`](Self::start_with) for the front's refusals.
    pub(crate) fn start<B>(request: &Request<B>) -> Option<Self> {
        Self::start_with(request, true)
    }

    /// A refusal by the front: there is no answer to read.
    pub(crate) fn refused(&mut self, reason: &'static str, status: StatusCode) {
        self.refusal = Some(reason);
        self.status = status.as_u16();
        self.finish(End::Complete);
    }

    /// What the answer's head says.
    pub(crate) fn answered(
        &mut self,
        status: StatusCode,
        backend: Option<Route>,
        layer: Option<Outcome>,
        note: Option<CallNote>,
        refusal: Option<&'static str>,
        sse: bool,
    ) {
        self.status = status.as_u16();
        self.backend = backend;
        self.layer = layer;
        self.note = note;
        self.refusal = refusal;
        self.sse = sse;
    }

    /// Keeps a frame of the answer, up to `limit` bytes: an SSE stream's last bytes (where its
    /// final message is), a JSON answer's first (all of it, or it is not read).
    pub(crate) fn keep_answer(&mut self, data: &Bytes, limit: usize) {
        self.answer_len += data.len();
        if self.answer_over && !self.sse {
            return;
        }
        self.answer.push(data.clone());
        if self.answer_len > limit {
            self.answer_over = true;
            if self.sse {
                let mut held: usize = self.answer.iter().map(Bytes::len).sum();
                while held > limit && self.answer.len() > 1 {
                    held -= self.answer.remove(0).len();
                }
            } else {
                self.answer.clear();
            }
        }
    }

    /// The answer ended (or was let go): the latency and the trace id are taken now.
    pub(crate) fn finish(&mut self, end: End) {
        self.end = end;
        self.latency = self.started.elapsed();
        self.trace_id = self.trace.take().and_then(|slot| slot.trace_id());
    }

    /// The bytes it holds, for the queue's budget.
    pub(crate) fn bytes(&self) -> usize {
        let request: usize = self
            .request
            .lock()
            .map_or(0, |kept| kept.iter().map(Bytes::len).sum());
        request + self.answer.iter().map(Bytes::len).sum::<usize>()
    }

    /// The event, read from what was kept (on the writer's thread): `record` lists the argument
    /// names whose values are written.
    pub(crate) fn event(&self, record: &[String], dropped: u64) -> Event<'_> {
        let request = joined(&self.request.lock().map(|kept| kept.clone()).unwrap_or_default());
        let read = Read::of(&request, record);
        let (outcome, reason, error_code) = self.outcome();
        // A refused request reached no backend, whatever the route its answer carries.
        let sent = outcome != "refused";
        let continued = self.note.as_ref().and_then(|n| n.continued.as_ref());
        let target = match (self.method, continued) {
            (Some(m), Some((_, tool))) if m.starts_with("tasks/") => tool.as_deref().map(str::to_owned),
            _ => self.target.as_ref().map(text),
        };
        Event {
            time: rfc3339(self.at),
            event: "call",
            request_id: self.request_id.as_ref().map(text),
            trace_id: self.trace_id.clone(),
            principal: self.caller.as_ref().map(|c| &*c.principal),
            groups: self
                .caller
                .as_ref()
                .map(|c| c.groups.iter().map(|g| &**g).collect())
                .unwrap_or_default(),
            client: read.client,
            method: self.method,
            target,
            backend: self.backend.as_ref().filter(|_| sent).map(Route::as_str),
            backend_target: self
                .note
                .as_ref()
                .filter(|_| sent)
                .and_then(|n| n.backend_target.as_deref()),
            arguments_digest: read.digest,
            arguments: read.arguments,
            retry: read.retry,
            round: continued.map(|(round, _)| *round),
            state_opened: continued.is_some(),
            outcome,
            reason,
            status: self.status,
            error_code,
            latency_ms: (self.latency.as_secs_f64() * 1e6).round() / 1e3,
            dropped,
        }
    }

    /// What became of the call: the outcome, the refusal's reason, the JSON-RPC error's code.
    fn outcome(&self) -> (&'static str, Option<&'static str>, Option<i64>) {
        let answer = joined(&self.answer);
        let message = if self.sse {
            crate::upstream::sse::last_response(answer)
        } else {
            (!self.answer_over && !answer.is_empty()).then_some(answer)
        };
        let answer = message.and_then(|m| serde_json::from_slice::<AnswerPart>(&m).ok());
        let code = answer
            .as_ref()
            .and_then(|a| a.error.as_ref())
            .and_then(|e| e.code);
        let refused = match self.layer {
            Some(Outcome::Refused { reason }) => Some(reason),
            _ => None,
        };
        if let Some(reason) = self.refusal.or(refused) {
            return ("refused", Some(reason), code);
        }
        let Some(answer) = answer else {
            return match self.end {
                End::Cut => ("cancelled", None, None),
                End::Complete if self.status >= 400 => ("failed", None, None),
                End::Complete => ("unread", None, None),
            };
        };
        if answer.error.is_some() {
            return ("failed", None, code);
        }
        match answer.result {
            Some(result) if result.result_type.as_deref() == Some("input_required") => {
                ("input_required", None, None)
            }
            Some(result) if result.result_type.as_deref() == Some("task") => ("task", None, None),
            Some(result) if result.is_error == Some(true) => ("is_error", None, None),
            Some(_) => ("completed", None, None),
            None => ("unread", None, None),
        }
    }
}

/// Frames as one buffer (copied only when there are several).
fn joined(frames: &[Bytes]) -> Bytes {
    match frames {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => {
            let mut all = BytesMut::with_capacity(many.iter().map(Bytes::len).sum());
            for frame in many {
                all.extend_from_slice(frame);
            }
            all.freeze()
        }
    }
}

fn text(value: &HeaderValue) -> String {
    tower_mrtr::mcp_headers::decode_header_value(value)
        .unwrap_or_else(|| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// What is read of a request's body.
#[derive(Debug, Default)]
struct Read {
    client: Option<Client>,
    digest: Option<String>,
    arguments: Option<Map<String, Value>>,
    retry: bool,
}

#[derive(Deserialize)]
struct MessagePart<'a> {
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ParamsPart<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow)]
    request_state: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MetaPart {
    #[serde(rename = "io.modelcontextprotocol/clientInfo")]
    client: Option<Client>,
}

/// The client's self-reported name and version (`_meta`'s `clientInfo`).
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct Client {
    name: Option<String>,
    version: Option<String>,
}

impl Read {
    /// Reads `body` (a JSON-RPC request): its client, the digest of its arguments (and the
    /// values of the names in `record`, the others redacted), whether it carried a state.
    fn of(body: &[u8], record: &[String]) -> Self {
        let Some(params) = serde_json::from_slice::<MessagePart<'_>>(body)
            .ok()
            .and_then(|m| m.params)
            .and_then(|p| serde_json::from_str::<ParamsPart<'_>>(p.get()).ok())
        else {
            return Self::default();
        };
        let client = params
            .meta
            .and_then(|m| serde_json::from_str::<MetaPart>(m.get()).ok())
            .and_then(|m| m.client);
        let raw = params.arguments.map(RawValue::get);
        let digest = crate::jsonrpc::canonical_digest(raw.unwrap_or("{}"));
        let arguments = (!record.is_empty())
            .then(|| raw.and_then(|raw| serde_json::from_str::<Map<String, Value>>(raw).ok()))
            .flatten()
            .map(|arguments| {
                arguments
                    .into_iter()
                    .map(|(name, value)| {
                        let kept = record.contains(&name);
                        (name, if kept { value } else { Value::from("[redacted]") })
                    })
                    .collect()
            });
        Self {
            client,
            digest,
            arguments,
            retry: params.request_state.is_some(),
        }
    }
}

#[derive(Deserialize)]
struct AnswerPart {
    result: Option<ResultPart>,
    error: Option<ErrorPart>,
}

#[derive(Deserialize)]
struct ResultPart {
    #[serde(rename = "resultType")]
    result_type: Option<String>,
    #[serde(rename = "isError")]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct ErrorPart {
    code: Option<i64>,
}

/// One call's event, as written (`docs/operations.md` describes every field).
#[derive(Debug, Serialize)]
pub(crate) struct Event<'a> {
    pub(crate) time: String,
    pub(crate) event: &'static str,
    pub(crate) request_id: Option<String>,
    pub(crate) trace_id: Option<String>,
    pub(crate) principal: Option<&'a str>,
    pub(crate) groups: Vec<&'a str>,
    pub(crate) client: Option<Client>,
    pub(crate) method: Option<&'static str>,
    pub(crate) target: Option<String>,
    pub(crate) backend: Option<&'a str>,
    pub(crate) backend_target: Option<&'a str>,
    pub(crate) arguments_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) arguments: Option<Map<String, Value>>,
    pub(crate) retry: bool,
    pub(crate) round: Option<u16>,
    pub(crate) state_opened: bool,
    pub(crate) outcome: &'static str,
    pub(crate) reason: Option<&'static str>,
    pub(crate) status: u16,
    pub(crate) error_code: Option<i64>,
    pub(crate) latency_ms: f64,
    pub(crate) dropped: u64,
}

/// A definition that differs from its pin (`route/pins.rs`), as an event.
#[derive(Debug, Serialize)]
pub(crate) struct Changed {
    pub(crate) time: String,
    pub(crate) event: &'static str,
    pub(crate) backend: String,
    /// `tool`, `prompt` or `resource_template`.
    pub(crate) kind: &'static str,
    pub(crate) target: String,
    /// The pinned digest and the one the backend lists now.
    pub(crate) before: String,
    pub(crate) after: String,
    /// `withheld` (left out of lists and refused: `enforce`) or `served` (`warn`).
    pub(crate) action: &'static str,
    pub(crate) dropped: u64,
}

impl Changed {
    /// The event of `backend`'s `kind` `target`, pinned as `before` and listed as `after`.
    pub(crate) fn new(
        backend: &str,
        kind: &'static str,
        target: &str,
        (before, after): (&str, &str),
        enforced: bool,
    ) -> Self {
        Self {
            time: rfc3339(SystemTime::now()),
            event: "definition_changed",
            backend: backend.to_owned(),
            kind,
            target: target.to_owned(),
            before: before.to_owned(),
            after: after.to_owned(),
            action: if enforced { "withheld" } else { "served" },
            dropped: 0,
        }
    }
}

/// `at` as RFC 3339 in UTC with microseconds.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let time = i64::try_from(since.as_secs())
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let mut out = String::with_capacity(27);
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        time.year(),
        u8::from(time.month()),
        time.day(),
        time.hour(),
        time.minute(),
        time.second(),
        since.subsec_micros()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(method: &str) -> Record {
        let request = Request::builder()
            .header("mcp-method", method)
            .header("mcp-name", "deploy")
            .body(())
            .unwrap();
        Record::start_with(&request, false).unwrap()
    }

    fn answered(record: &mut Record, body: &str, sse: bool) {
        record.answered(StatusCode::OK, Some(Route::new("alpha")), None, None, None, sse);
        record.keep_answer(&Bytes::from(body.to_owned()), 1 << 20);
        record.finish(End::Complete);
    }

    #[test]
    fn only_calls_and_task_follow_ups_are_recorded() {
        let request = |method: &str| Request::builder().header("mcp-method", method).body(()).unwrap();
        assert!(Record::start_with(&request("tools/list"), true).is_none());
        assert!(Record::start_with(&request("tasks/get"), false).is_some());
        assert!(Record::start_with(&Request::new(()), false).is_none());
        assert!(Record::start_with(&Request::new(()), true).is_some());
    }

    #[test]
    fn outcomes_are_read_from_the_final_message() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#,
                false,
                "completed",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\"isError\":true"}],"isError":true}}"#,
                false,
                "is_error",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"mrtr4.x"}}"#,
                false,
                "input_required",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","task":{}}}"#,
                false,
                "task",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#,
                false,
                "failed",
            ),
            (
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":true}}\n\n",
                true,
                "is_error",
            ),
        ];
        for (body, sse, expected) in cases {
            let mut r = record("tools/call");
            answered(&mut r, body, sse);
            assert_eq!(r.outcome().0, expected, "{body}");
        }
        let mut r = record("tools/call");
        answered(
            &mut r,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#,
            false,
        );
        assert_eq!(r.outcome().2, Some(-32602));
    }

    #[test]
    fn arguments_are_digested_and_only_listed_names_are_written() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"repo":"acme","token":"s3cret"},"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"cli","version":"1.2"}}}}"#;
        let read = Read::of(body, &["repo".to_owned()]);
        let reordered = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"token":"s3cret","repo":"acme"},"name":"t"}}"#;
        assert_eq!(read.digest, Read::of(reordered, &[]).digest);
        assert!(read.digest.as_deref().unwrap().starts_with("sha256:"));
        let arguments = serde_json::to_string(&read.arguments).unwrap();
        assert_eq!(arguments, r#"{"repo":"acme","token":"[redacted]"}"#);
        assert_eq!(read.client.as_ref().and_then(|c| c.name.as_deref()), Some("cli"));
        assert!(Read::of(reordered, &[]).arguments.is_none());
    }

    #[test]
    fn an_sse_answer_keeps_its_last_bytes_and_a_json_answer_past_the_limit_is_unread() {
        let mut sse = record("tools/call");
        sse.answered(StatusCode::OK, None, None, None, None, true);
        for _ in 0..10 {
            sse.keep_answer(&Bytes::from_static(b": keep-alive padding padding\n\n"), 64);
        }
        sse.keep_answer(
            &Bytes::from_static(b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
            64,
        );
        sse.finish(End::Complete);
        assert_eq!(sse.outcome().0, "completed");
        assert!(sse.bytes() <= 64 + 48);
        let mut json = record("tools/call");
        json.answered(StatusCode::OK, None, None, None, None, false);
        json.keep_answer(&Bytes::from(vec![b' '; 100]), 64);
        json.finish(End::Complete);
        assert_eq!((json.outcome().0, json.bytes()), ("unread", 0));
    }

    #[test]
    fn times_are_rfc3339_with_microseconds() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_000_000_123_456);
        assert_eq!(rfc3339(at), "2025-11-24T16:00:00.123456Z");
    }
}
