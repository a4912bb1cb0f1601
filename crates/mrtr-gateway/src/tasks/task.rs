//! One bridged task: its state ([`Task`]: status, the backend's outstanding requests, the
//! outcome) and the driver ([`drive`]) that reads the rest of the backend's answer while the
//! client polls. Imports [`super::wire`] of the room.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use http_body_util::BodyExt;
use serde_json::value::RawValue;
use tokio::sync::{Notify, mpsc, oneshot};
use tower_mrtr::Route;

use super::wire::{Status, TaskFields};
use crate::jsonrpc::RawObject;
use crate::upstream::body::ProxyBody;
use crate::upstream::sse::EventReader;
use crate::upstream::translate::Asked;

/// The client's answer to one of the backend's requests: a result, or an error object.
type Answered = Result<Box<RawValue>, Box<RawValue>>;

/// Where the client's answer to one of the backend's requests goes.
type AnswerTo = oneshot::Sender<Answered>;

/// One of the backend's requests waiting for the client: shown in `inputRequests` under its key.
#[derive(Debug)]
struct Input {
    method: String,
    params: Box<RawValue>,
    answer: AnswerTo,
}

/// What the task knows now.
#[derive(Debug)]
struct State {
    status: Status,
    message: Option<String>,
    updated: SystemTime,
    /// The backend's requests the client has not answered, by key.
    inputs: BTreeMap<String, Input>,
    /// Keys are never reused in a task's life (SEP-2663): the next one's number.
    next_key: u64,
    /// Since when the task has waited for the client, while it does.
    waiting_since: Option<Instant>,
    /// The member the outcome is shown under (`result` or `error`), and its raw JSON.
    outcome: Option<(&'static str, Box<RawValue>)>,
    /// When the task reached its terminal status.
    finished: Option<Instant>,
}

/// One bridged task; see the [module docs](self).
#[derive(Debug)]
pub(super) struct Task {
    pub(super) id: Box<str>,
    /// The principal the call was made for (`None` without a principal header or token).
    pub(super) principal: Option<Arc<str>>,
    /// The backend's route, which the client's task handle is sealed with.
    pub(super) route: Route,
    created: SystemTime,
    /// The end of its life (creation + `ttl`), whatever its status.
    pub(super) expires: Instant,
    ttl_ms: u64,
    state: Mutex<State>,
    /// Wakes the driver: the client cancelled, or answered every outstanding request.
    changed: Notify,
}

impl Task {
    /// A task created now for `principal` on `route`, living `ttl`, with the backend's `first`
    /// request outstanding.
    pub(super) fn new(
        id: String,
        principal: Option<Arc<str>>,
        route: Route,
        ttl: Duration,
        first: Asked,
    ) -> Self {
        let now = SystemTime::now();
        let task = Self {
            id: id.into(),
            principal,
            route,
            created: now,
            expires: Instant::now() + ttl,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            state: Mutex::new(State {
                status: Status::Working,
                message: None,
                updated: now,
                inputs: BTreeMap::new(),
                next_key: 1,
                waiting_since: None,
                outcome: None,
                finished: None,
            }),
            changed: Notify::new(),
        };
        task.ask(first);
        task
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task's fields now, for a result of `f`'s making.
    fn with_fields<T>(&self, f: impl FnOnce(&TaskFields<'_>, &State) -> T) -> T {
        let state = self.state();
        let fields = TaskFields {
            id: &self.id,
            status: state.status,
            message: state.message.as_deref(),
            created: self.created,
            updated: state.updated,
            ttl_ms: self.ttl_ms,
        };
        f(&fields, &state)
    }

    /// The `CreateTaskResult`, as the response to the client's request `id` (raw JSON).
    pub(super) fn created(&self, id: &str) -> String {
        self.with_fields(|fields, _| fields.created(id))
    }

    /// The `GetTaskResult`, as the response to `tasks/get` `id` (raw JSON): every outstanding
    /// request in `inputRequests` (MRTR's shape: `method` and `params`), or the outcome.
    pub(super) fn detailed(&self, id: &str) -> String {
        self.with_fields(|fields, state| {
            if let Some((member, outcome)) = &state.outcome {
                return fields.detailed(id, &[(member, outcome)]);
            }
            if state.inputs.is_empty() {
                return fields.detailed(id, &[]);
            }
            let mut requests = String::from("{");
            for (key, input) in &state.inputs {
                if requests.len() > 1 {
                    requests.push(',');
                }
                let method = serde_json::to_string(&input.method).unwrap_or_default();
                let key = serde_json::to_string(key).unwrap_or_default();
                requests.push_str(&format!(
                    r#"{key}:{{"method":{method},"params":{}}}"#,
                    input.params.get()
                ));
            }
            requests.push('}');
            match RawValue::from_string(requests) {
                Ok(raw) => fields.detailed(id, &[("inputRequests", &raw)]),
                Err(_) => fields.detailed(id, &[]),
            }
        })
    }

    /// The backend asked the client something: outstanding under a fresh key.
    pub(super) fn ask(&self, asked: Asked) {
        let mut state = self.state();
        if state.status.is_terminal() {
            return;
        }
        let short = asked.method.split('/').next().unwrap_or("request").to_owned();
        let key = format!("{short}-{}", state.next_key);
        state.next_key += 1;
        let input = Input {
            method: asked.method,
            params: asked.params,
            answer: asked.answer,
        };
        state.inputs.insert(key, input);
        state.status = Status::InputRequired;
        state.waiting_since.get_or_insert_with(Instant::now);
        state.updated = SystemTime::now();
    }

    /// The client's `inputResponses`: each outstanding one goes to the backend as the response
    /// to its request; unknown keys are ignored, a partial set leaves the rest outstanding.
    /// Returns how many were delivered.
    pub(super) fn answer(&self, responses: RawObject) -> usize {
        let mut state = self.state();
        let mut delivered = 0;
        for (key, value) in responses.0 {
            if let Some(input) = state.inputs.remove(&key) {
                // The backend's call may have ended meanwhile: then no one waits.
                let _ = input.answer.send(Ok(value));
                delivered += 1;
            }
        }
        if state.inputs.is_empty() && state.status == Status::InputRequired {
            state.status = Status::Working;
            state.waiting_since = None;
        }
        if delivered > 0 {
            state.updated = SystemTime::now();
        }
        delivered
    }

    /// Ends the task with `status` (terminal), `message` and `outcome`, unless it has ended
    /// already; `true` when this call ended it. The backend's outstanding requests are dropped
    /// (they go unanswered: the call is cancelled with them).
    pub(super) fn finish(
        &self,
        status: Status,
        message: Option<String>,
        outcome: Option<(&'static str, Box<RawValue>)>,
    ) -> bool {
        let mut state = self.state();
        if state.status.is_terminal() {
            return false;
        }
        state.status = status;
        state.message = message;
        state.outcome = outcome;
        state.inputs.clear();
        state.waiting_since = None;
        state.updated = SystemTime::now();
        state.finished = Some(Instant::now());
        drop(state);
        self.changed.notify_one();
        true
    }

    /// The client cancelled: the task ends `cancelled`, and its driver cancels the backend's call.
    pub(super) fn cancel(&self) {
        self.finish(
            Status::Cancelled,
            Some("cancelled by the client".to_owned()),
            None,
        );
    }

    pub(super) fn status(&self) -> Status {
        self.state().status
    }

    /// When the task's outcome may be forgotten: `result_ttl` after it finished, and never
    /// after its life ends.
    pub(super) fn forget_at(&self, result_ttl: Duration) -> Instant {
        let finished = self.state().finished.unwrap_or_else(Instant::now);
        (finished + result_ttl).min(self.expires)
    }

    /// When the driver must end the task: the end of its life, or earlier the end of the wait
    /// for the client (`answer_timeout`), with the reason.
    fn deadline(&self, answer_timeout: Duration) -> (Instant, String) {
        let state = self.state();
        match state.waiting_since {
            Some(since) if since + answer_timeout < self.expires => (
                since + answer_timeout,
                format!(
                    "the client did not answer the server's requests within {} s",
                    answer_timeout.as_secs()
                ),
            ),
            _ => (
                self.expires,
                format!("the task outlived its ttlMs ({})", self.ttl_ms),
            ),
        }
    }

    /// One whole message of the backend's answer (translated for a 2026-07-28 client): its
    /// response ends the task (`completed` with the result exactly as it is, `failed` with a
    /// JSON-RPC error); notifications are not shown on a task.
    fn read(&self, message: &[u8]) {
        let Ok(message) = serde_json::from_slice::<RawObject>(message) else {
            self.finish(
                Status::Failed,
                Some("the backend's answer could not be read".to_owned()),
                None,
            );
            return;
        };
        if message.get("method").is_some() {
            return;
        }
        if let Some(result) = message.get("result") {
            self.finish(Status::Completed, None, Some(("result", result.to_owned())));
        } else if let Some(error) = message.get("error") {
            // The error's own words: the backend's, or the gateway's when the backend's stream
            // broke off (`end_event`), which is what tells those apart.
            let said = serde_json::from_str::<RawObject>(error.get()).ok().and_then(|e| {
                e.get("message")
                    .and_then(|m| serde_json::from_str::<String>(m.get()).ok())
            });
            let reason = match said {
                Some(said) => format!("the call ended with an error: {said}"),
                None => "the call ended with an error".to_owned(),
            };
            self.finish(Status::Failed, Some(reason), Some(("error", error.to_owned())));
        }
    }
}

/// Reads the rest of the backend's answer `body` for `task`: the backend's further requests
/// (from `asked`) become outstanding, its response the outcome. Ends the task when the backend
/// ends its answer without a response, when an event outgrows `max_message`, when the client
/// does not answer within `answer_timeout` or the task's life ends; the task may also end
/// meanwhile by the client's `tasks/cancel`. Dropping the body then cancels the backend's call
/// (`notifications/cancelled` into its session) unless it answered.
pub(super) async fn drive(
    task: Arc<Task>,
    mut body: Pin<Box<ProxyBody>>,
    mut asked: mpsc::Receiver<Asked>,
    answer_timeout: Duration,
    max_message: usize,
) {
    let mut events = EventReader::new();
    while !task.status().is_terminal() {
        let (deadline, late) = task.deadline(answer_timeout);
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    events.push(&data);
                    while let Some(event) = events.next_event() {
                        task.read(&event);
                    }
                    if events.held() > max_message {
                        let reason = format!("the backend's answer is larger than {max_message} bytes");
                        task.finish(Status::Failed, Some(reason), None);
                    }
                }
                Some(Err(error)) => {
                    let reason = format!("the backend's answer failed: {error}");
                    task.finish(Status::Failed, Some(reason), None);
                }
                None => {
                    if let Some(event) = events.finish() {
                        task.read(&event);
                    }
                    let reason = "the backend ended the call without answering (its stream closed or it exited)";
                    task.finish(Status::Failed, Some(reason.to_owned()), None);
                }
            },
            Some(request) = asked.recv() => task.ask(request),
            () = task.changed.notified() => {}
            () = tokio::time::sleep_until(deadline.into()) => {
                task.finish(Status::Failed, Some(late), None);
            }
        }
    }
    drop(body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn asked(method: &str) -> (Asked, oneshot::Receiver<Answered>) {
        let (answer, answered) = oneshot::channel();
        let params = RawValue::from_string(r#"{"message":"Name?"}"#.to_owned()).unwrap();
        let asked = Asked {
            method: method.to_owned(),
            params,
            answer,
        };
        (asked, answered)
    }

    fn got(task: &Task) -> Value {
        serde_json::from_str::<Value>(&task.detailed("1")).unwrap()["result"].clone()
    }

    #[test]
    fn requests_are_outstanding_until_answered_and_keys_never_reused() {
        let (first, mut first_answer) = asked("elicitation/create");
        let task = Task::new("t".into(), None, Route::new("b"), Duration::from_secs(60), first);
        let (second, mut second_answer) = asked("roots/list");
        task.ask(second);
        let result = got(&task);
        assert_eq!(result["status"], "input_required");
        assert_eq!(
            result["inputRequests"]["elicitation-1"]["method"],
            "elicitation/create"
        );
        assert_eq!(
            result["inputRequests"]["elicitation-1"]["params"]["message"],
            "Name?"
        );
        assert_eq!(
            result["inputRequests"]["roots-2"],
            json!({"method":"roots/list","params":{"message":"Name?"}})
        );
        let partial: RawObject = serde_json::from_str(r#"{"roots-2":{"roots":[]},"nope":{}}"#).unwrap();
        assert_eq!(task.answer(partial), 1, "unknown keys ignored");
        assert_eq!(
            second_answer.try_recv().unwrap().unwrap().get(),
            r#"{"roots":[]}"#
        );
        assert!(first_answer.try_recv().is_err(), "still outstanding");
        assert_eq!(got(&task)["status"], "input_required");
        let rest: RawObject = serde_json::from_str(r#"{"elicitation-1":{"action":"decline"}}"#).unwrap();
        assert_eq!(task.answer(rest), 1);
        assert_eq!(got(&task)["status"], "working");
        let (third, _) = asked("elicitation/create");
        task.ask(third);
        assert!(got(&task)["inputRequests"].get("elicitation-3").is_some());
    }

    #[test]
    fn the_backends_response_is_the_outcome_exactly_and_terminal_states_stay() {
        let (first, _) = asked("sampling/createMessage");
        let task = Task::new("t".into(), None, Route::new("b"), Duration::from_secs(60), first);
        task.read(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#);
        assert_eq!(got(&task)["status"], "input_required");
        task.read(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}],"isError":true,"n":1.50}}"#);
        let result = got(&task);
        assert_eq!(result["status"], "completed");
        assert!(result.get("inputRequests").is_none());
        assert!(
            task.detailed("1")
                .contains(r#""result":{"content":[{"type":"text","text":"hi"}],"isError":true,"n":1.50}"#)
        );
        task.cancel();
        assert_eq!(
            got(&task)["status"],
            "completed",
            "a terminal status never changes"
        );
        let (first, _) = asked("roots/list");
        let failed = Task::new("u".into(), None, Route::new("b"), Duration::from_secs(60), first);
        failed.read(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}"#);
        let result = got(&failed);
        assert_eq!(
            (result["status"].as_str(), result["error"]["message"].as_str()),
            (Some("failed"), Some("boom"))
        );
    }
}
