//! [`AuditLayer`]: the audit trail's one collection point in the stack, right outside the MRTR
//! layer, where every modern request passes (a legacy client's too, as the modern requests the
//! legacy front makes of it) and every refusal of the layer and the proxy comes back.
//!
//! For an audited request (its `Mcp-Method` a call or a task follow-up) it starts a [`Record`],
//! keeps the request's bytes as they pass to the layer ([`KeptBody`], reference-counted frames),
//! reads the answer's head (status, backend, the layer's [`Outcome`], the proxy's [`CallNote`]
//! and [`Refusal`]) and keeps the answer's bytes as they pass to the client ([`AuditedBody`], up to
//! `max-answer-bytes`). When the answer ends, or is dropped before its end, the record goes to
//! the queue. Without `[audit]`, or for any other method, the request and its answer pass with
//! one check each and a `None` per body frame.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_mrtr::{Outcome, Route};
use tower_service::Service;

use super::Audit;
use super::note::{CallNote, Refusal};
use super::record::{End, Kept, Record};

/// Puts the audit trail's collection point around a service (see the [module docs](self)).
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditLayer {
    audit: Option<Arc<Audit>>,
}

impl AuditLayer {
    /// Records calls into `audit`; with `None`, records nothing.
    pub(crate) fn new(audit: Option<Arc<Audit>>) -> Self {
        Self { audit }
    }
}

impl<S> Layer<S> for AuditLayer {
    type Service = Audited<S>;

    fn layer(&self, inner: S) -> Audited<S> {
        Audited {
            inner,
            audit: self.audit.clone(),
        }
    }
}

/// The service of [`AuditLayer`].
#[derive(Clone, Debug)]
pub struct Audited<S> {
    inner: S,
    audit: Option<Arc<Audit>>,
}

impl<S, B, RB> Service<Request<B>> for Audited<S>
where
    S: Service<Request<KeptBody<B>>, Response = Response<RB>>,
    RB: Body,
{
    type Response = Response<AuditedBody<RB>>;
    type Error = S::Error;
    type Future = AuditFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let started = self
            .audit
            .as_ref()
            .and_then(|audit| Some((audit.clone(), Record::start_with(&request, false)?)));
        let Some((audit, record)) = started else {
            return AuditFuture {
                inner: self.inner.call(request.map(|body| KeptBody { body, kept: None })),
                pending: None,
            };
        };
        let kept = (record.request.clone(), audit.settings().queue_bytes);
        AuditFuture {
            inner: self.inner.call(request.map(|body| KeptBody {
                body,
                kept: Some(kept),
            })),
            pending: Some(Box::new((audit, record))),
        }
    }
}

pin_project! {
    /// The future of [`Audited`].
    #[derive(Debug)]
    pub struct AuditFuture<F> {
        #[pin]
        inner: F,
        pending: Option<Box<(Arc<Audit>, Record)>>,
    }
}

impl<F, RB, E> Future for AuditFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
    RB: Body,
{
    type Output = Result<Response<AuditedBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        let Some(mut pending) = this.pending.take() else {
            return Poll::Ready(Ok(response.map(|body| AuditedBody {
                body,
                recording: None,
            })));
        };
        let (_, record) = &mut *pending;
        let extensions = response.extensions_mut();
        let note = extensions.remove::<CallNote>();
        let refusal = extensions.remove::<Refusal>().map(|r| r.0);
        let backend = extensions.get::<Route>().cloned();
        let layer = extensions.get::<Outcome>().copied();
        let sse = crate::upstream::sse::is_sse(response.headers());
        record.answered(response.status(), backend, layer, note, refusal, sse);
        let mut recording = Recording(Some(pending));
        if response.body().is_end_stream() {
            // An empty answer is never polled: it has ended already.
            recording.finish(End::Complete);
        }
        Poll::Ready(Ok(response.map(|body| AuditedBody {
            body,
            recording: Some(recording),
        })))
    }
}

pin_project! {
    /// A request body on its way to the MRTR layer, its frames kept for an audited request.
    #[derive(Debug)]
    pub struct KeptBody<B> {
        #[pin]
        body: B,
        kept: Option<(Kept, usize)>,
    }
}

impl<B> Body for KeptBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.body.poll_frame(cx));
        if let (Some((kept, limit)), Some(Ok(frame))) = (this.kept.as_ref(), &frame)
            && let Some(data) = frame.data_ref()
            && let Ok(mut kept) = kept.lock()
        {
            // Past the queue's byte budget the event would be dropped anyway.
            if kept.iter().map(Bytes::len).sum::<usize>() + data.len() <= *limit {
                kept.push(data.clone());
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An audited answer's record, queued when the answer ends or is dropped.
#[derive(Debug)]
pub(super) struct Recording(Option<Box<(Arc<Audit>, Record)>>);

impl Recording {
    fn finish(&mut self, end: End) {
        if let Some(pending) = self.0.take() {
            let (audit, mut record) = *pending;
            record.finish(end);
            audit.submit(record);
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        // Dropped before its end: the client went away (or the server stopped).
        self.finish(End::Cut);
    }
}

pin_project! {
    /// An answer on its way to the client, its bytes kept for an audited request.
    #[derive(Debug)]
    pub struct AuditedBody<B> {
        #[pin]
        body: B,
        recording: Option<Recording>,
    }
}

impl<B> Body for AuditedBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.body.as_mut().poll_frame(cx));
        let Some(recording) = this.recording.as_mut() else {
            return Poll::Ready(frame);
        };
        match &frame {
            Some(Ok(frame)) => {
                if let (Some(data), Some(pending)) = (frame.data_ref(), recording.0.as_mut()) {
                    let limit = pending.0.settings().max_answer_bytes;
                    pending.1.keep_answer(data, limit);
                }
                if this.body.is_end_stream() {
                    recording.finish(End::Complete);
                }
            }
            Some(Err(_)) => recording.finish(End::Cut),
            None => recording.finish(End::Complete),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
