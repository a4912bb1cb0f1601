//! A proxy's routing step under `MrtrLayer`: choose a backend for each request, send a retry
//! where its first round went, and say which backend answered.
//!
//! [`McpRouter`] holds named backends, each any tower service, and a table from targets (tool
//! and prompt names, resource URIs) to backends. For each request:
//!
//! 1. a [`PinnedRoute`] wins: `MrtrLayer` sets it on a retry whose envelope opened, and the retry
//!    must reach the backend that asked for input, whatever the table says today. A pinned
//!    backend that is no longer configured gets `-32602` with the request's id;
//! 2. otherwise the target in the [`McpRequestHead`] is looked up in the table;
//! 3. otherwise the request goes to the first (default) backend: catalog listings, discovery,
//!    targets nobody registered. (An aggregating gateway would fan listings out and merge them;
//!    `crates/mrtr-gateway` does.)
//!
//! Every answer from a backend carries its [`Route`] in the response's extensions, which
//! `MrtrLayer` seals into the envelope of an `input_required` result. A backend that cannot be
//! reached gets a 502 with a JSON-RPC error rather than an `Err`: under hyper an `Err` drops the
//! connection without an answer, and axum accepts only services that never fail.
//!
//! # Example
//!
//! Routing alone, without the layer, with the public [`McpRequestHead`] constructor standing in
//! for the head `MrtrLayer` would insert (the pattern of `tests/it/routing_with_mocks.rs`):
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use mrtr_examples::routing::McpRouter;
//! use tower::{ServiceExt, service_fn};
//! use tower_mrtr::{McpRequestHead, PinnedRoute, Route};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Each backend answers with its own name.
//! let backend = |name: &'static str| {
//!     service_fn(move |_: Request<()>| async move { Ok::<_, Infallible>(Response::new(name)) })
//! };
//! let router = McpRouter::new("alpha", backend("alpha")).with_backend("beta", backend("beta"), ["archive_repo"]);
//!
//! let call = |target: &str| {
//!     let mut request = Request::new(());
//!     request.extensions_mut().insert(McpRequestHead::new("tools/call").with_id_json("1").with_target(target));
//!     request
//! };
//! let answer = router.clone().oneshot(call("archive_repo")).await.unwrap();
//! assert_eq!(answer.extensions().get::<Route>(), Some(&Route::new("beta")));
//!
//! // A retry pinned to alpha goes to alpha, whatever the table says.
//! let mut retry = call("archive_repo");
//! retry.extensions_mut().insert(PinnedRoute(Route::new("alpha")));
//! let answer = router.oneshot(retry).await.unwrap();
//! assert_eq!(answer.extensions().get::<Route>(), Some(&Route::new("alpha")));
//! # }
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};
use tower::ServiceExt;
use tower_mrtr::error::{INTERNAL_ERROR, INVALID_PARAMS};
use tower_mrtr::{McpRequestHead, PinnedRoute, Route};
use tower_service::Service;

use crate::jsonrpc;

/// Routes MCP requests among named backends; see the [module docs](self). Cheap to clone.
pub struct McpRouter<S> {
    table: Arc<Table<S>>,
}

#[derive(Clone)]
struct Table<S> {
    /// Backends in order; the first is the default.
    backends: Vec<(Route, S)>,
    /// Target (tool or prompt name, resource URI) to index in `backends`.
    targets: HashMap<String, usize>,
}

impl<S: Clone> McpRouter<S> {
    /// A router whose default backend is `backend`, named `name`.
    pub fn new(name: impl Into<Route>, backend: S) -> Self {
        Self {
            table: Arc::new(Table {
                backends: vec![(name.into(), backend)],
                targets: HashMap::new(),
            }),
        }
    }

    /// Adds a backend serving `targets` (tool and prompt names, resource URIs). A target already
    /// registered moves to this backend.
    pub fn with_backend(
        mut self,
        name: impl Into<Route>,
        backend: S,
        targets: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let table = Arc::make_mut(&mut self.table);
        let index = table.backends.len();
        table.backends.push((name.into(), backend));
        table
            .targets
            .extend(targets.into_iter().map(|target| (target.into(), index)));
        self
    }
}

impl<S> McpRouter<S> {
    /// The names of the backends, the default first.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.table.backends.iter().map(|(route, _)| route)
    }
}

impl<S> Table<S> {
    /// The index of the backend for `request`, or the refusal of a pin to a backend that is gone.
    fn choose<B>(&self, request: &Request<B>) -> Result<usize, &'static str> {
        if let Some(PinnedRoute(pinned)) = request.extensions().get::<PinnedRoute>() {
            return self
                .backends
                .iter()
                .position(|(route, _)| route == pinned)
                .ok_or("The backend that began this request is no longer available");
        }
        let target = request
            .extensions()
            .get::<McpRequestHead>()
            .and_then(McpRequestHead::target);
        Ok(target
            .and_then(|target| self.targets.get(target).copied())
            .unwrap_or(0))
    }
}

impl<S> Clone for McpRouter<S> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
        }
    }
}

impl<S> fmt::Debug for McpRouter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpRouter")
            .field("backends", &self.routes().collect::<Vec<_>>())
            .field("targets", &self.table.targets.len())
            .finish()
    }
}

/// The body of a router's answer: a backend's own, or the router's JSON-RPC error.
pub type RouterBody<B> = Either<B, Full<Bytes>>;

impl<S, B, ResBody> Service<Request<B>> for McpRouter<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: fmt::Display,
    B: Send + 'static,
    ResBody: 'static,
{
    type Response = Response<RouterBody<ResBody>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The backend is known only once the request is: each call readies its backend
        // (`oneshot`), so the router itself is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let table = self.table.clone();
        Box::pin(async move {
            let id = request
                .extensions()
                .get::<McpRequestHead>()
                .and_then(|head| head.id_json().map(str::to_owned));
            let index = match table.choose(&request) {
                Ok(index) => index,
                Err(message) => {
                    let refusal =
                        jsonrpc::error_response(StatusCode::OK, id.as_deref(), INVALID_PARAMS, message);
                    return Ok(refusal.map(Either::Right));
                }
            };
            let (route, backend) = &table.backends[index];
            let mut response = match backend.clone().oneshot(request).await {
                Ok(response) => response.map(Either::Left),
                Err(error) => {
                    tracing::warn!(backend = %route, %error, "backend unavailable");
                    let status = StatusCode::BAD_GATEWAY;
                    jsonrpc::error_response(status, id.as_deref(), INTERNAL_ERROR, "Backend unavailable")
                        .map(Either::Right)
                }
            };
            response.extensions_mut().insert(route.clone());
            Ok(response)
        })
    }
}
