//! Unit tests of a proxy's routing under `MrtrLayer`, with tower mock services for backends: no
//! network and no real backend, every round answered by the test itself. Copy this file next
//! to your own proxy and put your proxy where `McpRouter` is.
//!
//! The pattern (see also `tower_mrtr::testing`):
//!
//! * each backend is a `tower_test::mock::pair()`: the `Mock` goes into the proxy, the `Handle`
//!   stays with the test, which sees exactly what reached that backend and answers it;
//! * `MrtrLayer` runs as in production, with a keyring the test makes, so a round-one answer is
//!   really sealed and a retry really opened and pinned;
//! * routing alone is tested without the layer, with `McpRequestHead::new(..)` standing in for
//!   the head the layer would insert, and `tower::service_fn` backends.
//!
//! A backend that must not be reached is proven unreached by dropping the service stack and
//! checking that its handle's queue ends empty (`next_request()` is `None`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Full};
use mrtr_examples::routing::McpRouter;
use serde_json::{Value, json};
use tower::{Layer as _, ServiceExt, service_fn};
use tower_mrtr::{Keyring, McpRequestHead, MrtrLayer, PinnedRoute, RequestBody, Route};
use tower_test::mock::{self, Handle, Mock};

/// What a backend receives: the layer's request body around the client's.
type BackendRequest = Request<RequestBody<Full<Bytes>>>;
type BackendResponse = Response<Full<Bytes>>;
type Backend = Mock<BackendRequest, BackendResponse>;
type BackendHandle = Handle<BackendRequest, BackendResponse>;

/// The proxy under test, its table as deployed: `archive_repo` on `beta`, the rest on `alpha`.
fn proxy(alpha: Backend, beta: Backend) -> McpRouter<Backend> {
    McpRouter::new("alpha", alpha).with_backend("beta", beta, ["archive_repo"])
}

/// A client's `tools/call`, optionally a retry carrying `state`.
fn tool_call(id: u64, name: &str, state: Option<&str>) -> Request<Full<Bytes>> {
    let mut params = json!({ "name": name, "arguments": { "repo": "acme/api" } });
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({ "confirm": { "action": "accept", "content": { "confirm": true } } });
    }
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
    Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// A backend's JSON answer to `request`'s id with `result`.
fn answer(request: &Value, result: Value) -> BackendResponse {
    let body = json!({ "jsonrpc": "2.0", "id": request["id"], "result": result });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// Receives the next request at `backend`: its extensions and parsed body, and the handle to
/// answer it with.
async fn receive(
    backend: &mut BackendHandle,
) -> (http::Extensions, Value, mock::SendResponse<BackendResponse>) {
    let (request, respond) = backend
        .next_request()
        .await
        .expect("a request reached the backend");
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.extensions, serde_json::from_slice(&body).unwrap(), respond)
}

async fn json_body<B: http_body::Body>(response: Response<B>) -> Value
where
    B::Error: std::fmt::Debug,
{
    serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

/// Round one through the relay: `beta` asks for confirmation with its own state. Returns the
/// client's envelope.
async fn round_one(
    keyring: &Arc<Keyring>,
    beta_handle: &mut BackendHandle,
    alpha: Backend,
    beta: Backend,
) -> String {
    let relay = MrtrLayer::with_shared_keyring(keyring.clone()).layer(proxy(alpha, beta));
    let client = tokio::spawn(relay.oneshot(tool_call(1, "archive_repo", None)));
    let (_, request, respond) = receive(beta_handle).await;
    respond.send_response(answer(
        &request,
        json!({
            "resultType": "input_required",
            "inputRequests": { "confirm": { "method": "elicitation/create", "params": {
                "message": "Archive acme/api?", "requestedSchema": { "type": "object", "properties": {} } } } },
            "requestState": "beta-own-state"
        }),
    ));
    let result = json_body(client.await.unwrap().unwrap()).await["result"].clone();
    assert_eq!(result["resultType"], "input_required");
    result["requestState"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_round_one_answer_is_sealed_and_the_other_backend_not_called() {
    let keyring = Arc::new(Keyring::generate("k1").unwrap());
    let (alpha, mut alpha_handle) = mock::pair();
    let (beta, mut beta_handle) = mock::pair();

    let envelope = round_one(&keyring, &mut beta_handle, alpha, beta).await;

    assert!(envelope.starts_with("mrtr4."), "{envelope}");
    assert!(!envelope.contains("beta-own-state"));
    assert!(
        alpha_handle.next_request().await.is_none(),
        "alpha was never called"
    );
}

#[tokio::test]
async fn a_retry_is_pinned_to_the_backend_that_asked_even_after_the_table_changed() {
    let keyring = Arc::new(Keyring::generate("k1").unwrap());
    let (alpha, mut alpha_handle) = mock::pair();
    let (beta, mut beta_handle) = mock::pair();
    let envelope = round_one(&keyring, &mut beta_handle, alpha.clone(), beta.clone()).await;

    // A redeploy moved archive_repo to alpha; a retry must still reach beta, which holds the flow.
    let moved = McpRouter::new("alpha", alpha).with_backend("beta", beta, ["migrate_database"]);
    let relay = MrtrLayer::with_shared_keyring(keyring).layer(moved);
    let client = tokio::spawn(relay.oneshot(tool_call(2, "archive_repo", Some(&envelope))));

    let (extensions, request, respond) = receive(&mut beta_handle).await;
    assert_eq!(
        extensions.get::<PinnedRoute>(),
        Some(&PinnedRoute(Route::new("beta")))
    );
    assert_eq!(
        request["params"]["requestState"], "beta-own-state",
        "beta's own state restored"
    );
    let head = extensions.get::<McpRequestHead>().unwrap();
    assert!(head.is_retry());
    assert_eq!(head.target(), Some("archive_repo"));
    respond.send_response(answer(
        &request,
        json!({ "resultType": "complete", "content": [] }),
    ));

    let done = json_body(client.await.unwrap().unwrap()).await;
    assert_eq!(done["result"]["resultType"], "complete");
    assert!(
        alpha_handle.next_request().await.is_none(),
        "alpha was never called"
    );
}

#[tokio::test]
async fn a_tampered_retry_reaches_no_backend() {
    let keyring = Arc::new(Keyring::generate("k1").unwrap());
    let (alpha, mut alpha_handle) = mock::pair();
    let (beta, mut beta_handle) = mock::pair();
    let envelope = round_one(&keyring, &mut beta_handle, alpha.clone(), beta.clone()).await;

    let middle = envelope.len() / 2;
    let flipped = if &envelope[middle..=middle] == "A" {
        "B"
    } else {
        "A"
    };
    let tampered = format!("{}{flipped}{}", &envelope[..middle], &envelope[middle + 1..]);
    let relay = MrtrLayer::with_shared_keyring(keyring).layer(proxy(alpha, beta));
    let refused = json_body(
        relay
            .oneshot(tool_call(2, "archive_repo", Some(&tampered)))
            .await
            .unwrap(),
    )
    .await;

    assert_eq!(refused["id"], 2);
    assert_eq!(refused["error"]["code"], -32602);
    assert!(
        alpha_handle.next_request().await.is_none(),
        "alpha was never called"
    );
    assert!(
        beta_handle.next_request().await.is_none(),
        "beta saw round one only"
    );
}

/// Routing alone: `service_fn` backends that answer with their own name, and heads built with
/// `McpRequestHead::new` where the layer would have inserted them.
#[tokio::test]
async fn routing_follows_the_pin_then_the_table_then_the_default() {
    let named = |name: &'static str| {
        service_fn(move |_: Request<()>| async move {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(name))))
        })
    };
    let router =
        McpRouter::new("alpha", named("alpha")).with_backend("beta", named("beta"), ["archive_repo"]);
    let request = |head: Option<McpRequestHead>, pin: Option<&str>| {
        let mut request = Request::new(());
        if let Some(head) = head {
            request.extensions_mut().insert(head);
        }
        if let Some(pin) = pin {
            request.extensions_mut().insert(PinnedRoute(Route::new(pin)));
        }
        request
    };
    let served_by = |request: Request<()>| {
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let route = response.extensions().get::<Route>().cloned();
            (route, response.into_body().collect().await.unwrap().to_bytes())
        }
    };
    let call = |target: &str| {
        McpRequestHead::new("tools/call")
            .with_id_json("7")
            .with_target(target)
    };

    let (route, body) = served_by(request(Some(call("archive_repo")), None)).await;
    assert_eq!((route, &body[..]), (Some(Route::new("beta")), &b"beta"[..]));
    let (route, _) = served_by(request(Some(call("whoami")), None)).await;
    assert_eq!(route, Some(Route::new("alpha")), "not in the table: the default");
    let (route, _) = served_by(request(None, None)).await;
    assert_eq!(
        route,
        Some(Route::new("alpha")),
        "no head (not a POST, a batch): the default"
    );
    let (route, _) = served_by(request(
        Some(call("archive_repo").with_retry(true)),
        Some("alpha"),
    ))
    .await;
    assert_eq!(route, Some(Route::new("alpha")), "the pin wins over the table");

    // A pin to a backend no longer configured: refused with the request's id, no route reported.
    let (route, body) = served_by(request(Some(call("archive_repo")), Some("gamma"))).await;
    assert_eq!(route, None);
    let refusal: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (refusal["id"].clone(), refusal["error"]["code"].clone()),
        (json!(7), json!(-32602))
    );
}
