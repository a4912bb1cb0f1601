//! An MCP gateway for several backends on axum, with the layers a production gateway puts
//! around `MrtrLayer`: tracing, JWT authentication, a per-principal rate limit, and envelopes
//! bound to the authenticated caller.
//!
//! ```sh
//! export MRTR_KEYS="$(cargo run -q -p mrtr-gateway -- --generate-key k1)"
//! export JWT_SECRET="$(head -c32 /dev/urandom | base64)"
//! cargo run -p mrtr-backends --bin fixture-server -- --demo alpha --listen 127.0.0.1:9001 &
//! cargo run -p mrtr-backends --bin fixture-server -- --demo beta --sse --listen 127.0.0.1:9002 &
//! cargo run -p mrtr-examples --example axum_gateway -- 127.0.0.1:8080 \
//!     alpha=http://127.0.0.1:9001/mcp beta=http://127.0.0.1:9002/mcp,archive_repo,migrate_database
//! TOKEN="$(cargo run -q -p mrtr-examples --example axum_gateway -- --mint-token alice)"
//! # then: curl ... -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/mcp
//! ```
//!
//! The stack, outermost first ([`app`]):
//!
//! ```text
//!  SetSensitiveRequestHeaders   marks Authorization sensitive before anything can log it
//!  TraceLayer                   one span per request, refusals included; MCP fields filled in
//!    │                          later by RecordMcpHead (mrtr_examples::observe)
//!  JWT authentication           401 without a valid token; the token's subject into the
//!    │                          request's extensions (mrtr_examples::auth)
//!  rate limit per subject       429 with a JSON-RPC error (tower_governor, keyed on the subject)
//!    │
//!  ── Router: /mcp ──
//!  RequestBodyTimeout           a slow client cannot hold the relay while MrtrLayer reads
//!  MrtrLayer                    bind_principal(subject): an envelope opens only for its caller
//!  RecordMcpHead                mcp.method.name, gen_ai.tool.name, mcp.route into the span
//!  McpRouter                    PinnedRoute first, then the target table, then the default
//!    │                          backend; reports Route (mrtr_examples::routing)
//!  backends over HTTP
//! ```
//!
//! Why this order:
//!
//! * Authentication goes **outside** `MrtrLayer`, because the layer reads the principal from the
//!   extensions authentication wrote. Inside, the principal would be missing, and since
//!   `bind_principal` requires one, every call would get 403.
//! * The rate limit goes **after** authentication, because it is keyed on the verified subject:
//!   keyed on anything the client chooses (a token it made up, an id in the body), a client would
//!   get a fresh bucket per request. Unauthenticated requests are refused before they cost a
//!   bucket. (A per-address limit in front of authentication, against floods of bad tokens,
//!   would go outermost.)
//! * Why `tower_governor` and not tower's own `RateLimitLayer`: tower's is one bucket for the
//!   whole service, and it waits (backpressure) rather than answering 429. `tower_governor`
//!   keeps a bucket per key and answers at once; its `error_handler` writes the JSON-RPC body.
//!   It needs the stack's response type to implement `From<GovernorError>`, which holds for
//!   axum's `Response<Body>` only. That is why the rate limit, and with it authentication and
//!   tracing, are layered on the `Router`, where every response has axum's body; `MrtrLayer` and
//!   the proxy are the route's service. (Without axum, see `hyper_proxy.rs`.)
//! * Every layer outside `MrtrLayer` that answers early (401, 429) never reaches it: the body
//!   of a refused request is never read or parsed.
//!
//! The governor's buckets live in memory, one per subject seen; [`main`] drops idle ones every
//! minute.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use governor::middleware::NoOpMiddleware;
use http::{HeaderValue, Response, StatusCode, header};
use mrtr_examples::auth::{self, JwtAuth, Subject};
use mrtr_examples::forward::http_router;
use mrtr_examples::observe::{RecordMcpHeadLayer, trace_layer};
use mrtr_examples::{BoxError, cli, jsonrpc};
use tower::ServiceBuilder;
use tower_governor::governor::{GovernorConfig, GovernorConfigBuilder};
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::validate_request::ValidateRequestHeaderLayer;
use tower_mrtr::MrtrLayer;
use tower_mrtr::error::{INTERNAL_ERROR, INVALID_REQUEST};

/// How long a client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The rate limiter's configuration: buckets keyed by [`Subject`].
pub type RateLimit = Arc<GovernorConfig<SubjectKey, NoOpMiddleware>>;

/// A rate limit of `burst` requests per subject, one more allowed every `replenish`.
pub fn rate_limit(burst: u32, replenish: Duration) -> RateLimit {
    let config = GovernorConfigBuilder::default()
        .key_extractor(SubjectKey)
        .period(replenish)
        .burst_size(burst)
        .finish()
        .expect("a burst above zero and a non-zero period");
    Arc::new(config)
}

/// The gateway: everything in the [module docs](self)' diagram, serving MCP at `/mcp`.
pub fn app(settings: cli::Settings, rate_limit: RateLimit) -> Result<Router, String> {
    let mcp = ServiceBuilder::new()
        .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
        .layer(MrtrLayer::new(settings.keyring).bind_principal(auth::principal))
        .layer(RecordMcpHeadLayer)
        .service(http_router(&settings.backends)?);
    let outer = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([header::AUTHORIZATION]))
        .layer(trace_layer())
        .layer(ValidateRequestHeaderLayer::custom(
            JwtAuth::<Body>::hs256(&settings.jwt_secret.0, cli::AUDIENCE).map_err(|e| e.to_string())?,
        ))
        .layer(GovernorLayer::new(rate_limit).error_handler(rate_limited));
    Ok(Router::new().route_service("/mcp", mcp).layer(outer))
}

/// Rate-limit buckets are keyed by the authenticated [`Subject`].
#[derive(Clone, Copy, Debug)]
pub struct SubjectKey;

impl KeyExtractor for SubjectKey {
    type Key = Subject;

    fn extract<T>(&self, request: &http::Request<T>) -> Result<Subject, GovernorError> {
        // No subject means authentication is not outside the limiter: a wiring mistake,
        // answered 500 below rather than one shared bucket for everybody.
        request
            .extensions()
            .get::<Subject>()
            .cloned()
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// The limiter's refusals as JSON-RPC errors: 429 with `Retry-After`, or 500 for a request that
/// reached it without a subject.
fn rate_limited(error: GovernorError) -> Response<Body> {
    match error {
        GovernorError::TooManyRequests { wait_time, headers } => {
            let mut response = jsonrpc::error_response(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                INVALID_REQUEST,
                "Rate limit exceeded",
            );
            response.headers_mut().extend(headers.unwrap_or_default());
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(wait_time.max(1)));
            response
        }
        other => {
            tracing::error!(error = %other, "rate limiter without a subject: is authentication outside it?");
            jsonrpc::error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                INTERNAL_ERROR,
                "Internal error",
            )
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    cli::init_tracing();
    let Some(settings) = cli::from_process()? else {
        return Ok(());
    };
    let limit = rate_limit(20, Duration::from_secs(1));
    let limiter = limit.limiter().clone();
    tokio::spawn(async move {
        let mut every_minute = tokio::time::interval(Duration::from_secs(60));
        loop {
            every_minute.tick().await;
            limiter.retain_recent();
        }
    });
    let listen = settings.listen;
    let app = app(settings, limit)?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving MCP at /mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok::<_, BoxError>(())
}
