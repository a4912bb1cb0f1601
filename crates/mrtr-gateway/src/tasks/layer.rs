//! The bridge in the stack ([`BridgeLayer`], [`Bridged`]), between the MRTR layer (which seals
//! the task ids it answers into the client's task handles, and opens them on `tasks/*`) and the
//! proxy. Every request but a `tools/call` that declares the Tasks extension and a `tasks/*` on a
//! bridged task's id passes after a look at its method. Imports every file of the room.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either};
use tower_layer::Layer;
use tower_mrtr::error::{INVALID_PARAMS, METHOD_NOT_FOUND};
use tower_mrtr::{Continuation, KeyringHandle, McpRequestHead, PinnedRoute, RequestBody, Route, TaskHandle};
use tower_service::Service;

use super::BridgeConfig;
use super::body::{Ticket, Watch};
use super::forward::{FORWARDED_BY, Owners};
use super::owner::OwnerSeal;
use super::registry::{Owner, Tasks};
use super::wire;
use crate::audit::CallNote;
use crate::jsonrpc::error_body;
use crate::observe::metrics;
use crate::policy;
use crate::route::{GATEWAY_ROUTE, Proxy};
use crate::upstream::body::{ProxyBody, json};
use crate::upstream::sse::is_sse;
use crate::upstream::translate::ClientAsks;

/// Most of the backend's requests queued for one watched call before the bridge reads them;
/// later ones are answered with an error by the backend's translation.
const ASKED_QUEUE: usize = 8;

/// Puts the bridge in front of a service (the proxy); see the [module docs](self).
#[derive(Clone, Debug)]
pub(crate) struct BridgeLayer {
    shared: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    tasks: Arc<Tasks>,
    principal_header: Option<HeaderName>,
    owners: Owners,
    /// The proxy in force (a config reload replaces it), whose rate limits count the
    /// follow-ups the bridge answers.
    proxies: Arc<ArcSwap<Proxy>>,
}

impl BridgeLayer {
    /// The bridge with `config`'s bounds (off when `config.max_tasks` is 0), reading the principal
    /// the way the proxy does (`principal_header`), sealing its URL in task ids with the keys
    /// behind `keys`, counting the follow-ups it answers against the limits of the proxy in
    /// `proxies`.
    pub(crate) fn new(
        config: BridgeConfig,
        principal_header: Option<HeaderName>,
        keys: KeyringHandle,
        proxies: Arc<ArcSwap<Proxy>>,
    ) -> Self {
        let shared = (config.max_tasks > 0).then(|| {
            Arc::new(Shared {
                owners: Owners::new(config.advertise.as_deref(), config.max_message),
                tasks: Arc::new(Tasks::new(config, OwnerSeal::new(keys))),
                principal_header,
                proxies,
            })
        });
        Self { shared }
    }
}

impl<S> Layer<S> for BridgeLayer {
    type Service = Bridged<S>;

    fn layer(&self, inner: S) -> Bridged<S> {
        Bridged {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The bridge around the proxy: a Tasks client's call to a legacy backend that asks it something
/// becomes a task owned by this replica, served here (`docs/gateway.md`, "Bridged tasks").
#[derive(Clone, Debug)]
pub struct Bridged<S> {
    inner: S,
    shared: Option<Arc<Shared>>,
}

/// What the bridge does with a request.
enum Turn {
    Pass,
    Watch,
    Serve,
}

fn turn(request: &Request<impl Sized>) -> Turn {
    let extensions = request.extensions();
    let Some(head) = extensions.get::<McpRequestHead>() else {
        return Turn::Pass;
    };
    match head.method() {
        // A legacy client's call through the legacy front takes the backend's requests itself.
        "tools/call" if extensions.get::<ClientAsks>().is_none() => Turn::Watch,
        "tasks/get" | "tasks/update" | "tasks/cancel"
            if head
                .target()
                .is_some_and(|id| id.starts_with(super::registry::ID_PREFIX)) =>
        {
            Turn::Serve
        }
        _ => Turn::Pass,
    }
}

/// Whether a `tools/call` may declare the Tasks extension: a body the MRTR layer buffered is
/// searched for the extension's name in place, so that a call without it goes on unboxed and
/// unread; a streaming body may, until read.
fn may_declare_tasks<B>(request: &Request<RequestBody<B>>) -> bool {
    request
        .body()
        .buffered_bytes()
        .is_none_or(|bytes| super::wire::names_tasks(bytes))
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

impl<S, B> Service<Request<RequestBody<B>>> for Bridged<S>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ProxyBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = futures_util::future::Either<S::Future, BoxFuture>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<RequestBody<B>>) -> Self::Future {
        let Some(shared) = self.shared.clone() else {
            return futures_util::future::Either::Left(self.inner.call(request));
        };
        let turn = turn(&request);
        if matches!(turn, Turn::Pass) || matches!(turn, Turn::Watch) && !may_declare_tasks(&request) {
            return futures_util::future::Either::Left(self.inner.call(request));
        }
        // The inner service is ready (polled above); its clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        futures_util::future::Either::Right(Box::pin(async move {
            Ok(match turn {
                Turn::Serve => shared.serve(request).await,
                _ => shared.watch(inner, request).await,
            })
        }))
    }
}

impl Shared {
    /// A `tools/call`: when it declares the Tasks extension and what the backend may ask, it
    /// goes on with a [`ClientAsks`], and a streamed answer is watched ([`Watch`]).
    async fn watch<S, B>(&self, mut inner: S, request: Request<RequestBody<B>>) -> Response<ProxyBody>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ProxyBody>, Error = Infallible>,
        B: http_body::Body<Data = Bytes> + Send + 'static,
    {
        let (mut parts, body) = request.into_parts();
        // The MRTR layer hands on a body it buffered: one frame, taken as it is.
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => Bytes::new(),
        };
        let declared = wire::declared(&bytes);
        let Some(declared) = declared else {
            let request = Request::from_parts(parts, RequestBody::buffered(bytes));
            return match inner.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
        };
        let id = parts
            .extensions
            .get::<McpRequestHead>()
            .and_then(McpRequestHead::id_json)
            .map(Box::from);
        let principal = policy::caller_of(&parts.extensions, &parts.headers, self.principal_header.as_ref())
            .map(|caller| caller.principal);
        let (asks, asked) = tokio::sync::mpsc::channel(ASKED_QUEUE);
        let capabilities: Arc<str> = declared.capabilities.as_str().into();
        parts.extensions.insert(ClientAsks { capabilities, asks });
        let request = Request::from_parts(parts, RequestBody::buffered(bytes));
        let response = match inner.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (Some(id), Some(route)) = (id, response.extensions().get::<Route>().cloned()) else {
            return response;
        };
        if !is_sse(response.headers()) {
            return response;
        }
        self.watched(
            response,
            Ticket {
                id,
                principal,
                route,
                declared,
                tasks: self.tasks.clone(),
            },
            asked,
        )
    }

    fn watched(
        &self,
        response: Response<ProxyBody>,
        ticket: Ticket,
        asked: tokio::sync::mpsc::Receiver<crate::upstream::translate::Asked>,
    ) -> Response<ProxyBody> {
        let (parts, body) = response.into_parts();
        let watched = Watch::new(body, asked, ticket);
        Response::from_parts(parts, Either::Right(Either::Right(watched.boxed())))
    }

    /// A `tasks/*` on a bridged task's id, answered from this replica's task; an id of another
    /// replica, an expired one, or one bound to another route or principal is unknown (`-32602`).
    async fn serve<B>(&self, request: Request<RequestBody<B>>) -> Response<ProxyBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
    {
        let (parts, body) = request.into_parts();
        let head = parts.extensions.get::<McpRequestHead>();
        let method = head.map_or("", McpRequestHead::method).to_owned();
        let id = head
            .and_then(McpRequestHead::id_json)
            .unwrap_or("null")
            .to_owned();
        let task_id = head
            .and_then(McpRequestHead::target)
            .unwrap_or_default()
            .to_owned();
        let pinned = parts.extensions.get::<PinnedRoute>().map(|p| p.0.clone());
        let route = pinned.clone().unwrap_or_else(|| Route::new(GATEWAY_ROUTE));
        // The audit trail's note, as the proxy leaves it on a follow-up it forwards: the handle
        // opened, and the call's tool (`audit/note.rs`). No backend request is made.
        let note = CallNote {
            backend_target: None,
            continued: parts
                .extensions
                .get::<Continuation>()
                .map(|c| (c.round(), c.call_target().map(Arc::from))),
        };
        // The bridge's own JSON answer, reported under `route` (a pinned request's answer must
        // come from its route).
        let answer = |body: Bytes| {
            let mut response = json(StatusCode::OK, body);
            response.extensions_mut().insert(route.clone());
            response.extensions_mut().insert(note.clone());
            response
        };
        let principal = policy::caller_of(&parts.extensions, &parts.headers, self.principal_header.as_ref())
            .map(|caller| caller.principal);
        let task = self
            .tasks
            .get(&task_id)
            .filter(|task| Some(&task.route) == pinned.as_ref() && task.principal == principal);
        let Some(task) = task else {
            let elsewhere = Elsewhere {
                parts: &parts,
                method: &method,
                id: &id,
                task_id: &task_id,
            };
            return match self.elsewhere(elsewhere, body).await {
                Ok(mut response) => {
                    response.extensions_mut().insert(route.clone());
                    response.extensions_mut().insert(note.clone());
                    response
                }
                Err(text) => answer(text),
            };
        };
        // Counted where it is served: a request forwarded to the owner is counted there, once.
        if let Some(head) = parts.extensions.get::<McpRequestHead>()
            && let Err(mut refused) = self.proxies.load().admit_answered_here(&parts, head).await
        {
            refused.extensions_mut().insert(route.clone());
            refused.extensions_mut().insert(note.clone());
            return refused;
        }
        let text = match method.as_str() {
            "tasks/get" => task.detailed(&id),
            "tasks/cancel" => {
                task.cancel();
                wire::acknowledged(&id)
            }
            "tasks/update" => {
                let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                let Some(responses) = wire::input_responses(&bytes) else {
                    let message = "tasks/update needs params.inputResponses, an object";
                    return answer(error_body(Some(&id), INVALID_PARAMS, message, None));
                };
                task.answer(responses);
                wire::acknowledged(&id)
            }
            _ => {
                return answer(error_body(Some(&id), METHOD_NOT_FOUND, "Method not found", None));
            }
        };
        answer(Bytes::from(text))
    }
}

/// A `tasks/*` whose task is not on this replica.
#[derive(Clone, Copy)]
struct Elsewhere<'a> {
    parts: &'a http::request::Parts,
    method: &'a str,
    /// The request's JSON-RPC id (raw JSON).
    id: &'a str,
    /// The task's id on the bridge's side (in the body where the client wrote its handle).
    task_id: &'a str,
}

impl Shared {
    /// A `tasks/*` for a task this replica does not hold: forwarded to the replica that owns it
    /// when its id names a URL; else, or when that replica is gone, answered here (`Err`: the
    /// JSON-RPC answer's bytes).
    async fn elsewhere<B>(
        &self,
        request: Elsewhere<'_>,
        body: RequestBody<B>,
    ) -> Result<Response<ProxyBody>, Bytes>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
    {
        let Elsewhere {
            parts, method, id, ..
        } = request;
        let unknown = |message: &str| error_body(Some(id), INVALID_PARAMS, message, None);
        let url = match self.tasks.owner(request.task_id) {
            Owner::Elsewhere { url: Some(url), .. } => url,
            Owner::Elsewhere { replica, url: None } => {
                return Err(unknown(&format!(
                    "Unknown task: it was made on another replica of the gateway ({replica}), which advertised no URL to reach it at (--advertise-url)"
                )));
            }
            Owner::Restarted => {
                metrics::bridged_task_forward("restarted");
                let why = "the gateway replica that owned it restarted, and a bridged task lives in its owner's memory only";
                return Err(self.gone(request, why));
            }
            Owner::Here | Owner::None => return Err(unknown("Unknown or expired task")),
        };
        if parts.headers.contains_key(FORWARDED_BY) {
            metrics::bridged_task_forward("looped");
            let why = format!(
                "it was handed here by another replica, but this replica is not its owner ({url}): each replica's --advertise-url must name that replica itself, not a load balancer"
            );
            return Err(self.gone(request, &why));
        }
        let Some(handle) = parts.extensions.get::<TaskHandle>() else {
            return Err(unknown("Unknown or expired task"));
        };
        let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        match self
            .owners
            .forward(&url, parts, &bytes, request.task_id, handle.as_str())
            .await
        {
            Ok(response) => {
                metrics::bridged_task_forward("forwarded");
                tracing::debug!(method, owner = %url, "bridged task request forwarded to its owner");
                Ok(response)
            }
            Err(why) => {
                metrics::bridged_task_forward("unreachable");
                tracing::warn!(method, owner = %url, %why, "the owner of a bridged task did not answer");
                Err(self.gone(
                    request,
                    &format!("the gateway replica that owned it ({url}) did not answer: {why}"),
                ))
            }
        }
    }

    /// The answer for a task whose owner is gone, `why`: `tasks/get` sees it `failed`; an update
    /// or a cancel is refused with the same reason.
    fn gone(&self, request: Elsewhere<'_>, why: &str) -> Bytes {
        let message = format!("The task is lost: {why}");
        if request.method != "tasks/get" {
            return error_body(Some(request.id), INVALID_PARAMS, &message, None);
        }
        let ttl = self.tasks.config.ttl;
        let now = SystemTime::now();
        // The handle lives as long as the task (`ttlMs`): its expiry dates the task's creation.
        let created = request
            .parts
            .extensions
            .get::<Continuation>()
            .and_then(|c| c.expires_at().checked_sub(ttl))
            .unwrap_or(now);
        let fields = wire::TaskFields {
            id: request.task_id,
            status: wire::Status::Failed,
            message: Some(&message),
            created,
            updated: now,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        Bytes::from(fields.detailed(request.id, &[]))
    }
}
