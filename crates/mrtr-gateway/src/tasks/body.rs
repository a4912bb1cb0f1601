//! The answer to a Tasks client's `tools/call` as the bridge watches it ([`Watch`]): passed on
//! frame by frame until the backend sends a request of its own for the client; then the task is
//! created and registered, the rest of the answer goes to its driver, and the client's stream
//! ends with the `CreateTaskResult`. Imports [`super::registry`] and [`super::wire`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tower_mrtr::error::{INTERNAL_ERROR, METHOD_NOT_FOUND};
use tower_mrtr::{BoxError, Route};

use super::registry::{Full, Tasks};
use super::wire::Declared;
use crate::upstream::body::ProxyBody;
use crate::upstream::sse::write_message_event;
use crate::upstream::translate::Asked;

/// Whose call it is: what the task is created with.
#[derive(Debug)]
pub(super) struct Ticket {
    /// The client's request id (raw JSON).
    pub(super) id: Box<str>,
    pub(super) principal: Option<Arc<str>>,
    /// The backend that answers (the proxy's [`Route`] on the answer).
    pub(super) route: Route,
    pub(super) declared: Declared,
    pub(super) tasks: Arc<Tasks>,
}

/// See the [module docs](self). Ends after the `CreateTaskResult`, or with the backend's
/// answer when the backend asks nothing.
pub(super) struct Watch {
    inner: Option<Pin<Box<ProxyBody>>>,
    asked: Option<mpsc::Receiver<Asked>>,
    ticket: Ticket,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl Watch {
    pub(super) fn new(inner: ProxyBody, asked: mpsc::Receiver<Asked>, ticket: Ticket) -> Self {
        Self {
            inner: Some(Box::pin(inner)),
            asked: Some(asked),
            ticket,
        }
    }

    /// The backend's `request` for the client: the task's creation (its result as the stream's
    /// last event), or the request answered with an error and the answer passed on as before.
    fn take(&mut self, request: Asked) -> Option<Frame<Bytes>> {
        if !self.ticket.declared.takes(&request.method) {
            let message = format!(
                "the client did not declare the capability {} needs in this request's clientCapabilities",
                request.method
            );
            refuse(request, METHOD_NOT_FOUND, &message);
            return None;
        }
        let Ticket { principal, route, .. } = &self.ticket;
        let task = match self
            .ticket
            .tasks
            .create(principal.clone(), route.clone(), request)
        {
            Ok(task) => task,
            Err((full, request)) => {
                let message = match full {
                    Full::Replica => {
                        "mrtr-gateway holds as many bridged tasks as it may (bridged-tasks-max); try again later"
                    }
                    Full::Principal => {
                        "this principal holds as many bridged tasks as it may (bridged-tasks-per-principal); finish or cancel one"
                    }
                };
                refuse(request, INTERNAL_ERROR, message);
                return None;
            }
        };
        let (Some(body), Some(asked)) = (self.inner.take(), self.asked.take()) else {
            return None;
        };
        let created = task.created(&self.ticket.id);
        self.ticket.tasks.run(task, body, asked);
        let mut event = BytesMut::new();
        write_message_event(created.as_bytes(), &mut event);
        Some(Frame::data(event.freeze()))
    }
}

/// Answers the backend's `request` with the JSON-RPC error `code`, `message`.
fn refuse(request: Asked, code: i64, message: &str) {
    let error = serde_json::json!({ "code": code, "message": message }).to_string();
    if let Ok(error) = RawValue::from_string(error) {
        let _ = request.answer.send(Err(error));
    }
}

impl Body for Watch {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.inner.is_none() {
                return Poll::Ready(None);
            }
            // The backend's requests arrive while its answer is read (the translation hands
            // them over from inside the inner body's poll), so the channel is looked at first.
            if let Some(asked) = this.asked.as_mut() {
                match asked.poll_recv(cx) {
                    Poll::Ready(Some(request)) => match this.take(request) {
                        Some(created) => return Poll::Ready(Some(Ok(created))),
                        None => continue,
                    },
                    Poll::Ready(None) => this.asked = None,
                    Poll::Pending => {}
                }
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            return inner.as_mut().poll_frame(cx);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_none()
    }
}
