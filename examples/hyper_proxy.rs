//! The relay of `axum_gateway.rs` on plain hyper 1.x and hyper-util, without axum: `MrtrLayer`
//! needs nothing but tower and `http`.
//!
//! ```sh
//! # MRTR_KEYS, JWT_SECRET and the two backends as in axum_gateway.rs, then:
//! cargo run -p mrtr-examples --example hyper_proxy -- 127.0.0.1:8080 \
//!     alpha=http://127.0.0.1:9001/mcp beta=http://127.0.0.1:9002/mcp,archive_repo,migrate_database
//! ```
//!
//! The stack, outermost first ([`service`]): `SetSensitiveRequestHeaders` (Authorization),
//! `TraceLayer` with MCP fields, JWT authentication (401), `RequestBodyTimeout`, `MrtrLayer`
//! bound to the token's subject, `RecordMcpHead`, `McpRouter` over HTTP backends; hyper serves
//! it through hyper-util's `TowerToHyperService` ([`serve`]). There is no router: every request,
//! whatever its path, goes to the MCP stack.
//!
//! What differs from axum:
//!
//! * A layer that answers early outside `MrtrLayer` answers with the layer's body type,
//!   `tower_mrtr::ResponseBody`: `JwtAuth` builds its 401 through `From<Bytes>`, which
//!   `ResponseBody` implements, so it stacks with no adapter. (Under axum, layers on the
//!   `Router` see axum's body instead.)
//! * No rate limit here: `tower_governor` answers through `From<GovernorError>`, implemented for
//!   axum's response type only, and tower's own `RateLimitLayer` is one bucket for everybody.
//!   A per-principal limit here would be a small layer over the `governor` crate's keyed
//!   limiter, after authentication.
//! * Serving is an accept loop with one task per connection, and hyper-util's
//!   `GracefulShutdown` to let in-flight requests finish.

use std::future::Future;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use mrtr_examples::auth::{self, JwtAuth};
use mrtr_examples::forward::http_router;
use mrtr_examples::observe::{RecordMcpHeadLayer, trace_layer};
use mrtr_examples::routing::RouterBody;
use mrtr_examples::{BoxError, cli};
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::validate_request::ValidateRequestHeaderLayer;
use tower_mrtr::{MrtrLayer, ResponseBody};
use tower_service::Service;

/// How long a client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The body `MrtrLayer` answers with around the router's, and so every layer outside it.
type RelayBody = ResponseBody<RouterBody<Incoming>>;

/// The relay as one tower service of hyper's requests; see the [module docs](self).
pub fn service(
    settings: cli::Settings,
) -> Result<
    impl Service<
        Request<Incoming>,
        Response = Response<impl Body<Data = Bytes, Error = impl Into<BoxError>> + Send + 'static>,
        Error = impl Into<BoxError>,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static,
    String,
> {
    let router = http_router(&settings.backends)?;
    Ok(ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([header::AUTHORIZATION]))
        .layer(trace_layer())
        .layer(ValidateRequestHeaderLayer::custom(
            JwtAuth::<RelayBody>::hs256(&settings.jwt_secret.0, cli::AUDIENCE).map_err(|e| e.to_string())?,
        ))
        .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
        .layer(MrtrLayer::new(settings.keyring).bind_principal(auth::principal))
        .layer(RecordMcpHeadLayer)
        .service(router))
}

/// Serves [`service`] on `listener` until `shutdown` completes, then waits for in-flight
/// requests.
pub async fn serve(
    listener: TcpListener,
    settings: cli::Settings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let service = service(settings)?;
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// A connection that died in the backlog is skipped; anything else (out of file descriptors) is
/// logged and retried after a pause rather than spinning.
async fn accept_failed(error: io::Error) {
    if !matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        tracing::error!(%error, "accept failed; retrying in 1 s");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    cli::init_tracing();
    let Some(settings) = cli::from_process()? else {
        return Ok(());
    };
    let listener = TcpListener::bind(settings.listen).await?;
    tracing::info!(listen = %settings.listen, "serving MCP");
    serve(listener, settings, async {
        tokio::signal::ctrl_c().await.ok();
    })
    .await
}
