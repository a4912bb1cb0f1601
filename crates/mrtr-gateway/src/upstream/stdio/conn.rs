//! One running process's side of the conversation ([`Conn`]): requests written under ids of the
//! gateway's own, and each line the process writes routed to the call it answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::jsonrpc::{self, INTERNAL_ERROR, METHOD_NOT_FOUND, RawObject};
use crate::upstream::body::Relayed;
use crate::upstream::forward::{Answer, ForwardError};
use crate::upstream::health::Found;
use crate::upstream::hub::Hub;
use crate::upstream::translate::{Reply, Translation, outgoing};

/// Most requests in flight per process; more wait for one to finish.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// Most notifications queued for one call that its client has not read yet; later progress is
/// dropped (the response always has room).
pub(super) const CALL_QUEUE: usize = 64;
/// One running process: where its messages go and which calls wait for answers.
pub(super) struct Conn {
    pub(super) writer: mpsc::Sender<Bytes>,
    /// The calls waiting, by the request id the gateway gave them (raw JSON); `None` once the
    /// process's stdout closed (no answer can come).
    pub(super) calls: Mutex<Option<HashMap<Box<str>, mpsc::Sender<Relayed>>>>,
    pub(super) next_id: AtomicU64,
    /// What its handshake found (set once, before the process is `Up`).
    pub(super) hello: std::sync::OnceLock<Hello>,
    /// A legacy process's list changes and resource updates, for the listens it serves.
    pub(super) hub: Arc<Hub>,
}

pub(super) struct Hello {
    pub(super) found: Found,
    /// For a legacy process: the `server/discover` result made from its `initialize` result.
    pub(super) discover: Option<Value>,
}

/// A call's place among those in flight: given back when the call ends.
pub(super) struct CallGuard {
    pub(super) conn: Arc<Conn>,
    pub(super) ours: Box<str>,
    pub(super) _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(calls) = self.conn.calls().as_mut() {
            calls.remove(&self.ours);
        }
    }
}

/// The `_meta` of a notification's params, as far as it names a listen.
#[derive(serde::Deserialize)]
struct ListenMeta<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<ListenId<'a>>,
}

#[derive(serde::Deserialize)]
struct ListenId<'a> {
    #[serde(rename = "io.modelcontextprotocol/subscriptionId", borrow)]
    subscription_id: Option<&'a RawValue>,
}

/// Why a request was not sent.
pub(super) enum Unsent {
    /// Not a JSON-RPC request object with object `params`.
    NotJsonRpc,
    /// The process's pipes are closed.
    Gone,
    /// The process does not read its stdin: requests are queued up to the bound.
    Stuck,
}

/// A request sent, its answer to come.
pub(super) struct Call {
    pub(super) messages: mpsc::Receiver<Relayed>,
    pub(super) translation: Translation,
    pub(super) guard: CallGuard,
}

impl Conn {
    pub(super) fn calls(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<HashMap<Box<str>, mpsc::Sender<Relayed>>>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No answer can come any more: every call waiting gets its error now, and no new one is
    /// taken.
    pub(super) fn close(&self) {
        *self.calls() = None;
        self.hub.close("The backend's process exited");
    }

    /// The call waiting for the id `ours` (raw JSON); with `remove`, taken out (its response came).
    pub(super) fn call(&self, ours: &str, remove: bool) -> Option<mpsc::Sender<Relayed>> {
        let mut calls = self.calls();
        let calls = calls.as_mut()?;
        if remove {
            calls.remove(ours)
        } else {
            calls.get(ours).cloned()
        }
    }

    pub(super) fn modern(&self) -> bool {
        self.hello.get().is_some_and(|h| h.found.modern)
    }

    /// Sends `body`, a `method` request, under an id of the gateway's own.
    pub(super) fn send(
        self: &Arc<Self>,
        body: &[u8],
        method: &str,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Call, Unsent> {
        let ours = format!("\"mrtr-{}\"", self.next_id.fetch_add(1, Ordering::Relaxed));
        // The handshake's own requests go as they are; after it, a legacy process's in legacy form.
        let legacy = !self.modern() && self.hello.get().is_some();
        let request = outgoing(body, &ours, legacy, true).ok_or(Unsent::NotJsonRpc)?;
        let (sender, messages) = mpsc::channel(CALL_QUEUE + 1);
        self.calls()
            .as_mut()
            .ok_or(Unsent::Gone)?
            .insert(ours.as_str().into(), sender);
        let guard = CallGuard {
            conn: self.clone(),
            ours: ours.as_str().into(),
            _permit: permit,
        };
        self.writer.try_send(request.body).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Unsent::Stuck,
            mpsc::error::TrySendError::Closed(_) => Unsent::Gone,
        })?;
        let writer = self.writer.clone();
        let reply: Reply = Arc::new(move |message| {
            // A full or closed pipe: the process is stuck or gone, and learns nothing more.
            let _ = writer.try_send(message);
        });
        let theirs = request.id.as_deref().unwrap_or("null");
        let mut translation = Translation::new(&ours, theirs, reply)
            .for_method(method)
            .with_progress(request.progress);
        if self.modern() {
            translation = translation.modern();
        }
        Ok(Call {
            messages,
            translation,
            guard,
        })
    }

    /// Routes one line of the process's stdout.
    pub(super) fn dispatch(&self, backend: &str, line: String) {
        let Ok(message) = serde_json::from_str::<RawObject>(&line) else {
            if !line.trim().is_empty() {
                tracing::warn!(
                    backend,
                    "stdio backend wrote a line that is not a JSON-RPC message; dropped"
                );
            }
            return;
        };
        let id = message.get("id").map(RawValue::get).filter(|id| *id != "null");
        match (message.get("method"), id) {
            (None, Some(id)) => {
                match self.call(id, true) {
                    // The queue keeps a place for the response.
                    Some(call) => {
                        let _ = call.try_send(Relayed {
                            message: Bytes::from(line),
                            response: true,
                        });
                    }
                    None => tracing::debug!(backend, id, "stdio backend answered a call no one waits for"),
                }
            }
            (Some(method), Some(id)) => {
                let method: String = serde_json::from_str(method.get()).unwrap_or_default();
                let _ = self.writer.try_send(answer_process_request(id, &method));
            }
            (Some(method), None) if method.get() == r#""notifications/progress""# => {
                let token = message
                    .get("params")
                    .and_then(|p| serde_json::from_str::<RawObject>(p.get()).ok())
                    .and_then(|p| p.get("progressToken").map(|t| t.get().to_owned()));
                let call = token.and_then(|t| self.call(&t, false));
                if let Some(call) = call
                    && call.capacity() > 1
                {
                    let _ = call.try_send(Relayed {
                        message: Bytes::from(line),
                        response: false,
                    });
                }
            }
            (Some(method), None) => {
                // A modern process names the listen a notification is for; a legacy one's
                // notifications of its own are the hub's to fan out.
                let listen = message
                    .get("params")
                    .and_then(|p| serde_json::from_str::<ListenMeta<'_>>(p.get()).ok())
                    .and_then(|p| p.meta?.subscription_id)
                    .and_then(|id| self.call(id.get(), false).map(|call| (id.get().to_owned(), call)));
                if let Some((ours, call)) = listen {
                    if call.capacity() > 1 {
                        let _ = call.try_send(Relayed {
                            message: Bytes::from(line),
                            response: false,
                        });
                    } else {
                        // A client that fell this far behind has its listen ended, with an error
                        // in the place kept for the response, rather than miss a change unaware
                        // (as for a legacy session's listens, `upstream/hub.rs`).
                        tracing::debug!(
                            backend,
                            "a listen's client fell behind its notifications; ending its stream"
                        );
                        self.call(&ours, true);
                        let message = "The client fell behind the listen's notifications";
                        let _ = call.try_send(Relayed {
                            message: jsonrpc::error_body(Some(&ours), INTERNAL_ERROR, message, None),
                            response: true,
                        });
                        // The process's side of the listen ends too (the translation, answered
                        // by this error, sends no cancellation of its own).
                        let cancelled = format!(
                            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{ours},"reason":"the client fell behind"}}}}"#
                        );
                        let _ = self.writer.try_send(Bytes::from(cancelled));
                    }
                } else if self.modern() || !self.hub.deliver(line.as_bytes()) {
                    tracing::debug!(backend, method = method.get(), message = %line, "stdio backend notification (not relayed)");
                }
            }
            (None, None) => {
                tracing::warn!(backend, message = %line, "stdio backend sent an error about no request");
            }
        }
    }

    /// Sends `body` (a `method` request) and waits up to `timeout` for the response, translated.
    pub(super) async fn request(
        self: &Arc<Self>,
        body: &[u8],
        method: &str,
        permit: Option<OwnedSemaphorePermit>,
        timeout: Duration,
    ) -> Result<Answer, ForwardError> {
        let mut call = self.send(body, method, permit).map_err(|unsent| match unsent {
            Unsent::NotJsonRpc => ForwardError::Unreachable("not a JSON-RPC request".to_owned()),
            Unsent::Gone => exited(),
            Unsent::Stuck => stuck(),
        })?;
        let message = response(&mut call, timeout).await?;
        Ok(Answer {
            status: StatusCode::OK,
            message: Some(call.translation.one(message)),
        })
    }
}

/// Waits up to `timeout` for `call`'s response (its notifications skipped), as it came.
pub(super) async fn response(call: &mut Call, timeout: Duration) -> Result<Bytes, ForwardError> {
    let wait = async {
        while let Some(relayed) = call.messages.recv().await {
            if relayed.response {
                return Ok(relayed.message);
            }
        }
        Err(exited())
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| ForwardError::Timeout)?
}

pub(super) fn exited() -> ForwardError {
    ForwardError::Unreachable("the process exited before answering".to_owned())
}

pub(super) fn stuck() -> ForwardError {
    ForwardError::Unreachable("the process does not read its input".to_owned())
}

/// The gateway's answer to a request a shared process sent: no one client can answer it.
pub(super) fn answer_process_request(id: &str, method: &str) -> Bytes {
    if method == "ping" {
        return Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
    }
    let message = format!(
        "mrtr-gateway shares this stdio server among all its clients, so no one client can answer {method} (see docs/gateway.md, stdio backends)"
    );
    jsonrpc::error_body(Some(id), METHOD_NOT_FOUND, &message, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's side with one listen waiting under `"mrtr-1"`, whose client reads nothing.
    fn listening() -> (Conn, mpsc::Receiver<Bytes>, mpsc::Receiver<Relayed>) {
        let (writer, written) = mpsc::channel(8);
        let (call, messages) = mpsc::channel(CALL_QUEUE + 1);
        let conn = Conn {
            writer,
            calls: Mutex::new(Some(HashMap::from([(Box::from(r#""mrtr-1""#), call)]))),
            next_id: AtomicU64::new(2),
            hello: std::sync::OnceLock::new(),
            hub: Arc::default(),
        };
        (conn, written, messages)
    }

    #[test]
    fn a_listen_whose_client_falls_behind_is_ended_with_an_error_and_cancelled() {
        let (conn, mut written, mut messages) = listening();
        let change = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"mrtr-1"}}}"#;
        for _ in 0..CALL_QUEUE + 1 {
            conn.dispatch("local", change.to_owned());
        }
        let relayed: Vec<Relayed> = std::iter::from_fn(|| messages.try_recv().ok()).collect();
        assert_eq!(
            relayed.len(),
            CALL_QUEUE + 1,
            "the queue, then the response's place"
        );
        assert!(relayed[..CALL_QUEUE].iter().all(|r| !r.response));
        let last = relayed.last().unwrap();
        let error: Value = serde_json::from_slice(&last.message).unwrap();
        assert!(
            last.response
                && error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("fell behind")
        );
        assert!(conn.call(r#""mrtr-1""#, false).is_none(), "no longer waited for");
        let cancelled: Value = serde_json::from_slice(&written.try_recv().unwrap()).unwrap();
        assert_eq!(
            (cancelled["method"].as_str(), &cancelled["params"]["requestId"]),
            (Some("notifications/cancelled"), &Value::from("mrtr-1"))
        );
        // Later notifications of the ended listen go nowhere.
        conn.dispatch("local", change.to_owned());
        assert!(messages.try_recv().is_err());
    }
}
