//! `examples/hyper_proxy.rs` against real demo backends on 127.0.0.1: the same relay as the axum
//! example, served by hyper alone.

#[allow(dead_code, unreachable_pub)]
#[path = "../../hyper_proxy.rs"]
mod example;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::common::Backends;

#[tokio::test]
async fn relays_principal_bound_rounds_to_the_backend_that_asked() {
    let backends = Backends::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(example::serve(listener, backends.settings(), async {
        stopped.await.ok();
    }));

    crate::common::relays_principal_bound_rounds(&url, &backends).await;

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    backends.stop().await;
}
