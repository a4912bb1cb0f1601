//! [`Gateway`]: the tower service every HTTP request meets first.
//!
//! In order: [load shedding](shed) (503 over the in-flight limit), the [`Guard`](origin)
//! (`Origin`, `Host`, POST media types; 403, 415, 406), then the path: every request to
//! [`MCP_PATH`] goes to the MCP stack, any other path gets 404.
//! The MCP stack is the [legacy front](crate::legacy::DualEra) (a modern POST passes it after
//! one header comparison; it answers GET, and DELETE without a legacy session, with 405 and
//! `Allow: POST`) around [`MrtrLayer`](tower_mrtr::MrtrLayer) around the [`Proxy`]. Request
//! bodies get a [deadline]; every answer gets an [access log](crate::observe::access) line.
//!
//! Written by hand rather than with a router because it is the hot path of every request: the
//! checks read headers in place, and the MCP stack's future and body are used as they are (no
//! boxing). A new front door (another path) is one more arm in [`Gateway::call`].
//!
//! ```
//! # use std::sync::Arc;
//! use mrtr_gateway::{Backend, GatewayConfig};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = GatewayConfig::new(vec![Backend::new("alpha", "http://127.0.0.1:9/mcp")?]);
//! let keyring = Arc::new(tower_mrtr::Keyring::generate("k1")?);
//! let gateway = mrtr_gateway::service(&config, keyring, "127.0.0.1:8080".parse()?);
//! let request = http::Request::get("/mcp")
//!     .header("host", "127.0.0.1:8080")
//!     .body(http_body_util::Empty::<bytes::Bytes>::new())?;
//! let response = gateway.oneshot(request).await?;
//! assert_eq!(response.status(), 405);
//! assert_eq!(response.headers()["allow"], "POST");
//! # Ok(()) }
//! ```

pub mod deadline;
pub mod drain;
pub mod http_layers;
pub mod metrics;
pub mod origin;
pub mod server;
pub mod shed;

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryFutureExt;
use futures_util::future::{Either as EitherFuture, MapOk};
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tower_mrtr::{BoxError, Mrtr, ResponseBody};
use tower_service::Service;

use crate::front::deadline::BodyDeadline;
use crate::front::metrics::RequestMetrics;
use crate::front::origin::Guard;
use crate::front::shed::{Admission, LoadShed};
use crate::legacy::DualEra;
use crate::legacy::bridge::LegacyBody;
use crate::observe::access;
use crate::route::Proxy;
use crate::upstream::body::ProxyBody;

/// The path the gateway serves MCP at.
pub const MCP_PATH: &str = "/mcp";

/// The MCP stack behind the front: the legacy front around the request metrics around the MRTR
/// layer around the proxy.
pub type McpStack = DualEra<RequestMetrics<Mrtr<Proxy>>>;

/// The body of an answer of the MCP stack: the modern stack's (the backend's, possibly
/// rewritten by the layer) or the legacy front's.
pub type McpBody = Either<ResponseBody<ProxyBody>, LegacyBody>;

/// The body of every gateway answer: from the MCP stack, or the front's own refusal.
pub type GatewayBody = Either<McpBody, Full<Bytes>>;

/// The whole gateway as one tower service; see the [module docs](self). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Gateway {
    guard: Arc<Guard>,
    shed: LoadShed,
    body_timeout: Duration,
    mcp: McpStack,
}

impl Gateway {
    pub(crate) fn new(guard: Guard, shed: LoadShed, body_timeout: Duration, mcp: McpStack) -> Self {
        Self {
            guard: Arc::new(guard),
            shed,
            body_timeout,
            mcp,
        }
    }
}

type Answered<B> = EitherFuture<
    Ready<Result<Response<GatewayBody>, Infallible>>,
    MapOk<
        <McpStack as Service<Request<BodyDeadline<B>>>>::Future,
        fn(Response<McpBody>) -> Response<GatewayBody>,
    >,
>;

pin_project! {
    /// The future of [`Gateway`]: an answer of the front's own, or the MCP stack's; it writes
    /// the access log line and frees the request's place ([`crate::front::shed`]) when it is ready.
    pub struct GatewayFuture<B>
    where
        B: http_body::Body<Data = Bytes>,
        B: Send,
        B: 'static,
        B::Error: Into<BoxError>,
        B::Error: std::fmt::Display,
        B::Error: Send,
    {
        #[pin]
        answer: Answered<B>,
        admission: Option<Admission>,
        entry: access::Entry,
    }
}

impl<B> Future for GatewayFuture<B>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError> + std::fmt::Display + Send,
{
    type Output = Result<Response<GatewayBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.answer.poll(cx));
        if let Ok(response) = &output {
            this.entry.finish(response);
        }
        this.admission.take();
        Poll::Ready(output)
    }
}

impl<B> Service<Request<B>> for Gateway
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError> + std::fmt::Display + Send,
{
    type Response = Response<GatewayBody>;
    type Error = Infallible;
    type Future = GatewayFuture<B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Always ready today (the proxy applies no backpressure; overload is shed in `call`),
        // but the layer's contract is that `call` follows a ready `poll_ready`.
        Service::<Request<BodyDeadline<B>>>::poll_ready(&mut self.mcp, cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let entry = access::Entry::start(&request);
        let own = |response: Response<Full<Bytes>>, admission, entry| GatewayFuture {
            answer: EitherFuture::Left(ready(Ok(response.map(Either::Right)))),
            admission,
            entry,
        };
        let Some(admission) = self.shed.admit() else {
            crate::observe::metrics::shed();
            return own(crate::front::shed::overloaded(), None, entry);
        };
        if let Err(refusal) = self.guard.check(&request) {
            return own(refusal.into_response(), None, entry);
        }
        if request.uri().path() != MCP_PATH {
            let mut not_found = Response::new(Full::new(Bytes::new()));
            *not_found.status_mut() = StatusCode::NOT_FOUND;
            return own(not_found, None, entry);
        }
        let to_gateway: fn(Response<McpBody>) -> Response<GatewayBody> =
            |response| response.map(Either::Left);
        let timeout = self.body_timeout;
        let request = request.map(|body| BodyDeadline::new(body, timeout));
        GatewayFuture {
            answer: EitherFuture::Right(self.mcp.call(request).map_ok(to_gateway)),
            admission: Some(admission),
            entry,
        }
    }
}
