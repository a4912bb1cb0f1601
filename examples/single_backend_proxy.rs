//! The smallest useful deployment: an MCP reverse proxy for **one** backend, made a sealed MRTR
//! relay by stacking `MrtrLayer` in front of the forwarding service.
//!
//! ```sh
//! MRTR_KEYS="k1:$(head -c32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')" \
//!   cargo run -p mrtr-examples --example single_backend_proxy -- 127.0.0.1:8080 http://127.0.0.1:9000/mcp
//! ```
//!
//! With a single backend there is nothing to choose, so the proxy reports no route and the layer
//! seals the default route instead. A multi-backend gateway inserts a `tower_mrtr::Route` into
//! each response and honours `tower_mrtr::PinnedRoute` on requests: see `axum_gateway.rs` and
//! `hyper_proxy.rs` beside this file, and `crates/mrtr-gateway`.

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use http::{Request, Uri, header};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::ServiceBuilder;
use tower_mrtr::{Keyring, MrtrLayer, RequestBody};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter("info,tower_mrtr=debug")
        .init();
    let mut args = std::env::args().skip(1);
    let listen: SocketAddr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into()).parse()?;
    let backend: Uri = args
        .next()
        .ok_or("usage: single_backend_proxy LISTEN_ADDR BACKEND_URL")?
        .parse()?;
    let keyring: Keyring = std::env::var("MRTR_KEYS")
        .map_err(|_| "set MRTR_KEYS to `kid:base64url-key[,...]` (32-byte keys)")?
        .parse()?;

    let client: Client<_, RequestBody<Body>> = Client::builder(TokioExecutor::new()).build_http();
    let forward = tower::service_fn(move |req: Request<RequestBody<Body>>| {
        let client = client.clone();
        let backend = backend.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            parts.uri = backend.clone();
            // The backend's own Host; the client's Origin and Accept-Encoding stay here (the
            // layer cannot read compressed answers, and a relay is not the browser's origin).
            parts.headers.remove(header::HOST);
            parts.headers.remove(header::ORIGIN);
            parts.headers.remove(header::ACCEPT_ENCODING);
            // Answer, don't fail: an `Err` would make the server drop the connection.
            let response = match client.request(Request::from_parts(parts, body)).await {
                Ok(response) => response.map(Body::new),
                Err(err) => {
                    tracing::warn!(error = %err, "backend unreachable");
                    let mut response = http::Response::new(Body::from("backend unreachable"));
                    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
                    response
                }
            };
            Ok::<_, Infallible>(response)
        }
    });
    let relay = ServiceBuilder::new()
        .layer(MrtrLayer::new(keyring).default_route("backend"))
        .service(forward);

    let app = Router::new().route_service("/mcp", relay);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "relaying MCP at /mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
