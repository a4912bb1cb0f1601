//! [`ResponseFuture`]: read the request, call the inner service, inspect the answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{HeaderValue, Request, Response, header};
use http_body::Body;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::BoxError;
use crate::body::{self, ReadBody, ReadBodyError, RequestBody, ResponseBody};
use crate::config::Config;
use crate::envelope::Sealer;
use crate::error::Rejection;
use crate::metrics;
use crate::request::{self, ResponsePlan};
use crate::response::{Rewriter, Unrelayable};
use crate::route::Route;
use crate::sse::{self, SseBody};

pin_project! {
    /// Response future of [`Mrtr`](crate::Mrtr).
    pub struct ResponseFuture<S, ReqBody, ResBody>
    where
        S: Service<Request<RequestBody<ReqBody>>>,
        ReqBody: Body,
        ReqBody::Error: Into<BoxError>,
        ResBody: Body,
        ResBody::Error: Into<BoxError>,
    {
        #[pin]
        state: State<S, ReqBody, ResBody>,
        config: Arc<Config>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody, ResBody>
    where
        S: Service<Request<RequestBody<ReqBody>>>,
        ReqBody: Body,
        ReqBody::Error: Into<BoxError>,
        ResBody: Body,
        ResBody::Error: Into<BoxError>,
    {
        /// Buffering the request body (bounded) before the inner service is called.
        ReadingRequest {
            #[pin]
            collect: ReadBody<ReqBody>,
            parts: Option<http::request::Parts>,
            service: Option<S>,
            sealer: Option<Sealer>,
        },
        /// Waiting for the inner service.
        Calling {
            #[pin]
            future: S::Future,
            plan: Option<ResponsePlan>,
            sealer: Option<Sealer>,
        },
        /// Buffering a JSON answer (bounded) to look for `input_required`.
        ReadingResponse {
            #[pin]
            collect: ReadBody<ResBody>,
            parts: Option<http::response::Parts>,
            rewriter: Option<Rewriter>,
        },
        /// An answer of the layer's own.
        Ready {
            response: Option<Response<ResponseBody<ResBody>>>,
        },
    }
}

impl<S, ReqBody, ResBody> ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body,
    ResBody::Error: Into<BoxError>,
{
    /// The answer to a request the layer did not read (not a POST): checked, since the layer
    /// cannot know what it may carry, and failed closed if it holds anything to seal.
    pub(crate) fn inspecting(future: S::Future, sealer: Sealer, config: Arc<Config>) -> Self {
        let state = State::Calling {
            future,
            plan: Some(ResponsePlan::Inspect),
            sealer: Some(sealer),
        };
        Self { state, config }
    }

    pub(crate) fn rejected(rejection: Rejection, config: Arc<Config>) -> Self {
        Self {
            state: State::Ready {
                response: Some(reject(rejection)),
            },
            config,
        }
    }

    pub(crate) fn collecting(
        collect: ReadBody<ReqBody>,
        parts: http::request::Parts,
        service: S,
        sealer: Sealer,
        config: Arc<Config>,
    ) -> Self {
        let state = State::ReadingRequest {
            collect,
            parts: Some(parts),
            service: Some(service),
            sealer: Some(sealer),
        };
        Self { state, config }
    }
}

impl<S, ReqBody, ResBody> fmt::Debug for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body,
    ResBody::Error: Into<BoxError>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

const POLLED_AFTER_COMPLETION: &str = "ResponseFuture polled after completion";

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body,
    ResBody::Error: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::ReadingRequest {
                    collect,
                    parts,
                    service,
                    sealer,
                } => {
                    let collected = ready!(collect.poll(cx));
                    let mut parts = parts.take().expect(POLLED_AFTER_COMPLETION);
                    let mut service = service.take().expect(POLLED_AFTER_COMPLETION);
                    let sealer = sealer.take().expect(POLLED_AFTER_COMPLETION);
                    let outcome = match collected {
                        Ok(body) => request::process(this.config, &sealer, &mut parts, body),
                        Err(ReadBodyError::TooLarge) => Err((
                            Rejection::TooLarge {
                                limit: this.config.max_request_body,
                            },
                            None,
                        )),
                        Err(ReadBodyError::Body(err)) => {
                            tracing::debug!(error = %err, "request body could not be read");
                            Err((Rejection::BodyUnreadable, None))
                        }
                    };
                    match outcome {
                        Ok((body, plan)) => {
                            let future =
                                service.call(Request::from_parts(parts, RequestBody::buffered(body)));
                            this.state.set(State::Calling {
                                future,
                                plan: Some(plan),
                                sealer: Some(sealer),
                            });
                        }
                        Err((rejection, head)) => {
                            let mut response = reject(rejection);
                            // What was refused, for observers outside the layer (a span).
                            if let Some(head) = head {
                                response.extensions_mut().insert(*head);
                            }
                            this.state.set(State::Ready {
                                response: Some(response),
                            })
                        }
                    }
                }
                StateProj::Calling { future, plan, sealer } => {
                    let response = ready!(future.poll(cx))?;
                    let plan = plan.take().expect(POLLED_AFTER_COMPLETION);
                    // Only requests whose body was read carry a keyring snapshot; the others are
                    // passed through.
                    let Some(sealer) = sealer
                        .take()
                        .filter(|_| !matches!(plan, ResponsePlan::Passthrough))
                    else {
                        return Poll::Ready(Ok(response.map(ResponseBody::passthrough)));
                    };
                    let (mut parts, body) = response.into_parts();
                    let rewriter =
                        Rewriter::new(this.config.clone(), sealer, plan, parts.extensions.get::<Route>());
                    let readable = check_readable(&parts.headers);
                    let event_stream =
                        match readable.and_then(|sse| rewriter.route_mismatch().map_or(Ok(sse), Err)) {
                            Ok(event_stream) => event_stream,
                            Err(reason) => return Poll::Ready(Ok(fail_closed(reason, rewriter.id()))),
                        };
                    if event_stream {
                        // Rewritten event by event as it streams; its length may change.
                        parts.headers.remove(header::CONTENT_LENGTH);
                        let body = ResponseBody::sse(SseBody::new(body, rewriter));
                        return Poll::Ready(Ok(Response::from_parts(parts, body)));
                    }
                    let collect = ReadBody::new(body, this.config.max_response_body);
                    this.state.set(State::ReadingResponse {
                        collect,
                        parts: Some(parts),
                        rewriter: Some(rewriter),
                    });
                }
                StateProj::ReadingResponse {
                    collect,
                    parts,
                    rewriter,
                } => {
                    let collected = ready!(collect.poll(cx));
                    let mut parts = parts.take().expect(POLLED_AFTER_COMPLETION);
                    let rewriter = rewriter.take().expect(POLLED_AFTER_COMPLETION);
                    let body = match collected {
                        Ok(body) => body,
                        Err(err) => {
                            let reason = match err {
                                ReadBodyError::TooLarge => Unrelayable::TooLarge,
                                ReadBodyError::Body(_) => Unrelayable::BodyError,
                            };
                            return Poll::Ready(Ok(fail_closed(reason, rewriter.id())));
                        }
                    };
                    let original_len = body.len();
                    return Poll::Ready(Ok(match rewriter.rewrite(body) {
                        Ok(body) => {
                            if body.len() != original_len
                                || parts.headers.contains_key(header::TRANSFER_ENCODING)
                            {
                                parts.headers.remove(header::TRANSFER_ENCODING);
                                parts
                                    .headers
                                    .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
                            }
                            if rewriter.sealed() {
                                parts.extensions.insert(crate::Outcome::Sealed);
                            }
                            Response::from_parts(parts, ResponseBody::full(body))
                        }
                        Err(reason) => fail_closed(reason, rewriter.id()),
                    }));
                }
                StateProj::Ready { response } => {
                    return Poll::Ready(Ok(response.take().expect(POLLED_AFTER_COMPLETION)));
                }
            }
        }
    }
}

/// Refuses answers the layer cannot inspect: a compressed body could hide an unsealed state, and
/// conflicting content types could make the layer and a client frame the body differently.
/// Otherwise says whether the answer is an event stream. One pass over the headers: this runs
/// for every answer the layer reads.
fn check_readable(headers: &http::HeaderMap) -> Result<bool, Unrelayable> {
    let mut encoded = false;
    let mut conflict = false;
    let mut content_type: Option<&HeaderValue> = None;
    for (name, value) in headers {
        if *name == header::CONTENT_ENCODING {
            encoded |= !body::is_identity(value);
        } else if *name == header::CONTENT_TYPE {
            match content_type {
                None => content_type = Some(value),
                Some(first) => conflict |= !sse::same_media_type(first, value),
            }
        }
    }
    if encoded {
        Err(Unrelayable::ContentEncoding)
    } else if conflict {
        Err(Unrelayable::ContentTypeConflict)
    } else {
        Ok(content_type.is_some_and(sse::names_event_stream))
    }
}

fn reject<B>(rejection: Rejection) -> Response<ResponseBody<B>> {
    if !matches!(rejection, Rejection::Unrelayable { .. }) {
        metrics::request_refused(rejection.reason());
        tracing::debug!(reason = rejection.reason(), "answered by the layer");
    }
    rejection.into_response().map(ResponseBody::full)
}

fn fail_closed<B>(reason: Unrelayable, id: Option<&str>) -> Response<ResponseBody<B>> {
    metrics::failed_closed(reason.label());
    tracing::debug!(
        reason = reason.label(),
        detail = reason.reason(),
        "backend answer failed closed"
    );
    reject(Rejection::Unrelayable {
        id: id.map(str::to_owned),
    })
}
