//! Readiness and the clone-and-swap rule, with tower-test's mock service (tower style).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tokio_test::{assert_pending, assert_ready_ok};
use tower_mrtr::{Keyring, MrtrLayer, PinnedRoute, RequestBody};
use tower_test::mock;

use crate::common::{post, tool_call};

type Req = Request<RequestBody<Full<Bytes>>>;
type Res = Response<Full<Bytes>>;

/// The next request the mock received. If the layer called a service that `poll_ready` did not
/// ready, the mock panics inside the spawned call; this then fails instead of hanging.
async fn next_request(handle: &mut mock::Handle<Req, Res>) -> (Req, mock::SendResponse<Res>) {
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), handle.next_request());
    next.await
        .expect("the call panicked or stalled")
        .expect("the mock is open")
}

fn layer() -> MrtrLayer {
    MrtrLayer::new(Keyring::generate("k1").unwrap()).default_route("only")
}

#[tokio::test]
async fn not_ready_inner_means_not_ready_layer() {
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    handle.allow(0);
    assert_pending!(svc.poll_ready());
    handle.allow(1);
    assert!(
        svc.is_woken(),
        "readiness of the inner service must wake the caller"
    );
    assert_ready_ok!(svc.poll_ready());
}

#[tokio::test]
async fn inner_errors_from_poll_ready_propagate() {
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    handle.send_error("backend pool closed");
    let err = svc.poll_ready().map(|r| r.unwrap_err().to_string());
    assert_eq!(err, std::task::Poll::Ready("backend pool closed".to_owned()));
}

/// The body is read before the inner service is called, so the future owns a service. It must be
/// the one `poll_ready` readied: the mock panics ("service not ready") if a fresh clone is called.
#[tokio::test]
async fn the_readied_service_is_the_one_called_after_the_body_is_read() {
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Res, _>(layer());
    handle.allow(1);
    assert_ready_ok!(svc.poll_ready());
    let body = tool_call(1, "t", None);
    let call = tokio::spawn(svc.call(post(&body)));

    let (request, reply) = next_request(&mut handle).await;
    let seen = request.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(seen, body.as_bytes());
    reply.send_response(Response::new(Full::new(Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"st"}}"#,
    ))));
    let response = call.await.unwrap().unwrap();
    let text = response.into_body().collect().await.unwrap().to_bytes();
    assert!(std::str::from_utf8(&text).unwrap().contains("mrtr4."));

    // The service left behind (the fresh clone) behaves as an unready service would.
    handle.allow(0);
    assert_pending!(svc.poll_ready());
}

#[tokio::test]
async fn a_retry_reaches_the_mock_with_the_pinned_route() {
    let layer = layer();
    let (mut svc, mut handle) = mock::spawn_layer::<Req, Res, _>(layer.clone());
    handle.allow(2);
    assert_ready_ok!(svc.poll_ready());
    let first = tokio::spawn(svc.call(post(&tool_call(1, "t", None))));
    let (_, reply) = next_request(&mut handle).await;
    reply.send_response(Response::new(Full::new(Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"st"}}"#,
    ))));
    let first = first
        .await
        .unwrap()
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    let envelope: serde_json::Value = serde_json::from_slice(&first).unwrap();
    let envelope = envelope["result"]["requestState"].as_str().unwrap().to_owned();

    assert_ready_ok!(svc.poll_ready());
    let _second = tokio::spawn(svc.call(post(&tool_call(2, "t", Some(&envelope)))));
    let (request, _reply) = next_request(&mut handle).await;
    assert_eq!(
        request.extensions().get::<PinnedRoute>().map(|p| p.0.as_str()),
        Some("only")
    );
}
