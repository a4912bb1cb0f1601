//! [`Mrtr`]: the middleware service.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response, header};
use http_body::Body;
use tower_service::Service;

use crate::BoxError;
use crate::body::{ReadBody, RequestBody, ResponseBody, is_identity_encoded};
use crate::config::Config;
use crate::envelope::Sealer;
use crate::error::Rejection;
use crate::future::ResponseFuture;
use crate::layer::MrtrLayer;

/// The middleware: seals `input_required` answers and opens retries. Built by [`MrtrLayer`].
///
/// See the [crate docs](crate) for the contract and an example.
#[derive(Clone, Debug)]
pub struct Mrtr<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> Mrtr<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// A layer building this service; the same as [`MrtrLayer::new`].
    pub fn layer(keyring: crate::Keyring) -> MrtrLayer {
        MrtrLayer::new(keyring)
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Mrtr<S>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Clone,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // MCP requests are POSTs. Anything else (the 405s for GET and DELETE, a legacy GET
        // stream) carries nothing to open and is forwarded without being read; its answer is
        // still checked, since the layer cannot know what it may carry.
        if req.method() != Method::POST {
            let sealer = Sealer::new(self.config.keys.load());
            let future = self.inner.call(req.map(RequestBody::new));
            return ResponseFuture::inspecting(future, sealer, self.config.clone());
        }

        let limit = self.config.max_request_body;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let too_large = |n: u64| usize::try_from(n).map_or(true, |n| n > limit);
        if declared.is_some_and(too_large) || too_large(req.body().size_hint().lower()) {
            return ResponseFuture::rejected(Rejection::TooLarge { limit }, self.config.clone());
        }
        // A compressed body cannot be inspected, so it could smuggle an unverified state past the
        // layer. Decompress first (tower-http's RequestDecompressionLayer) or refuse, as here.
        if !is_identity_encoded(req.headers()) {
            return ResponseFuture::rejected(Rejection::Encoded, self.config.clone());
        }

        // The body must be read before the inner service is called, so the future owns the
        // service. `poll_ready` readied `self.inner`, not a clone of it: move the ready one into
        // the future and keep the fresh clone (tower's "be careful when cloning inner services").
        let clone = self.inner.clone();
        let ready = mem::replace(&mut self.inner, clone);
        let (parts, body) = req.into_parts();
        let collect = ReadBody::new(body, limit);
        // The keyring of this request, from arrival to the end of its answer.
        let sealer = Sealer::new(self.config.keys.load());
        ResponseFuture::collecting(collect, parts, ready, sealer, self.config.clone())
    }
}
