//! The HTTP/1.1 server side: the accept loop, per-connection settings and graceful shutdown.
//!
//! Each accepted connection is served by hyper's HTTP/1.1 connection directly, in its own task,
//! with the gateway's tower service ([`Gateway`](crate::front::Gateway)) adapted by hyper-util.
//! What a request costs on the way in is therefore hyper's parsing and one clone of the service;
//! there is no router and no boxed body or future in between.
//!
//! Where the server-side limits go, when they are wanted:
//!
//! * TLS: wrap the accepted `TcpStream` before [`serve_connection`](hyper::server::conn::http1::Builder::serve_connection)
//!   (the accept loop is the only place that sees raw streams);
//! * header-size caps and header/idle timeouts: [`connection_settings`] (`max_buf_size`,
//!   `header_read_timeout`, which needs a timer);
//! * a concurrency limit: a tower layer around the service, or a semaphore permit held by each
//!   connection task;
//! * drain with a grace period: [`serve`]'s shutdown branch, where connections are already told
//!   to finish (hyper answers the in-flight request, then closes with `Connection: close`).

use std::future::Future;
use std::io;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower_service::Service;

use tower_mrtr::BoxError;

/// How every client connection is served: hyper's HTTP/1.1 defaults (keep-alive, 400 KiB
/// read buffer cap, no header timeout since no timer is set).
pub(crate) fn connection_settings() -> http1::Builder {
    http1::Builder::new()
}

/// Serves `service` on `listener` until `stop` completes, then stops accepting and waits for
/// the connections to finish their in-flight requests.
pub(crate) async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    stop: impl Future<Output = ()>,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let settings = connection_settings();
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Answers go out as soon as they are ready (SSE events one by one); Nagle's algorithm
        // would hold small writes back until the client's ACK.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let connection =
            settings.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A failed `accept`: a connection that died in the backlog is skipped; anything else (such as
/// running out of file descriptors) is logged and retried after a pause, as hyper 0.14 did.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
