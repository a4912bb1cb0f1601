//! How to unit-test a proxy under [`MrtrLayer`](crate::MrtrLayer) with tower mock services, no
//! network and no real backend. (This module holds documentation only.)
//!
//! A proxy under the layer has three duties, each testable on its own:
//!
//! * **Route a first round** by the [`McpRequestHead`](crate::McpRequestHead) the layer inserts,
//!   and report the backend that answered as a [`Route`](crate::Route) in the response.
//! * **Send a retry where [`PinnedRoute`](crate::PinnedRoute) says**, whatever its routing table
//!   says today.
//! * **Never see a refused retry**: a tampered, expired or misbound envelope is answered by the
//!   layer, and no backend is called.
//!
//! The pattern:
//!
//! * **Routing alone**, without the layer: build the request the layer would hand the proxy by
//!   inserting [`McpRequestHead::new`](crate::McpRequestHead::new)`(method).with_id_json(..)
//!   .with_target(..)` (and a `PinnedRoute` for a retry) into its extensions; give the proxy
//!   `tower::service_fn` backends that answer with their own name; assert who answered and which
//!   `Route` the proxy reported.
//! * **Round trips under the layer**: make each backend a `tower_test::mock::pair()`, the `Mock`
//!   inside the proxy, the `Handle` in the test. Run the layer for real, with a keyring the test
//!   generates. Answer round one from the handle with an `input_required` result: the client's
//!   answer holds an envelope, never the backend's state. Send the retry: the handle of the
//!   backend that asked receives it, with `PinnedRoute` set and its own state restored.
//! * **Refusals**: send a retry with a tampered envelope: the answer is JSON-RPC `-32602`, and
//!   no handle receives anything. To prove a handle received nothing, drop the service (every
//!   `Mock` clone with it) and check that `Handle::next_request()` is `None`.
//!
//! A complete file to copy, with a two-backend router, a routing table that changes between the
//! rounds and a tampered retry, is `examples/tests/it/routing_with_mocks.rs` in this repository.
//!
//! # Example
//!
//! One mock backend (so the layer seals a [default route](crate::MrtrLayer::default_route)),
//! one round trip:
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use serde_json::{Value, json};
//! use tower::{Layer, ServiceExt};
//! use tower_mrtr::{Keyring, MrtrLayer, PinnedRoute, RequestBody, Route};
//! use tower_test::mock;
//!
//! type BackendRequest = Request<RequestBody<Full<Bytes>>>;
//!
//! fn call(id: u64, state: Option<&str>) -> Request<Full<Bytes>> {
//!     let mut params = json!({ "name": "deploy" });
//!     if let Some(state) = state {
//!         params["requestState"] = json!(state);
//!     }
//!     let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
//!     Request::post("/mcp")
//!         .header("content-type", "application/json")
//!         .body(Full::new(Bytes::from(body.to_string())))
//!         .unwrap()
//! }
//!
//! async fn body_json(body: impl http_body::Body<Error: std::fmt::Debug>) -> Value {
//!     serde_json::from_slice(&body.collect().await.unwrap().to_bytes()).unwrap()
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (backend, mut handle) = mock::pair::<BackendRequest, Response<Full<Bytes>>>();
//! let layer = MrtrLayer::new(Keyring::generate("k1").unwrap()).default_route("backend");
//! let relay = layer.layer(backend);
//!
//! // Round one: the test, as the backend, asks for input.
//! let client = tokio::spawn(relay.clone().oneshot(call(1, None)));
//! let (_request, respond) = handle.next_request().await.unwrap();
//! respond.send_response(Response::new(Full::new(Bytes::from(
//!     json!({ "jsonrpc": "2.0", "id": 1, "result": { "resultType": "input_required",
//!         "inputRequests": {}, "requestState": "backend-state" } }).to_string(),
//! ))));
//! let answer = body_json(client.await.unwrap().unwrap().into_body()).await;
//! let envelope = answer["result"]["requestState"].as_str().unwrap().to_owned();
//! assert!(envelope.starts_with("mrtr4."), "sealed, not {envelope}");
//!
//! // The retry: pinned, and the backend's own state restored.
//! let client = tokio::spawn(relay.oneshot(call(2, Some(&envelope))));
//! let (request, respond) = handle.next_request().await.unwrap();
//! assert_eq!(request.extensions().get::<PinnedRoute>(), Some(&PinnedRoute(Route::new("backend"))));
//! assert_eq!(body_json(request.into_body()).await["params"]["requestState"], "backend-state");
//! respond.send_response(Response::new(Full::new(Bytes::from_static(
//!     br#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","content":[]}}"#,
//! ))));
//! assert_eq!(body_json(client.await.unwrap().unwrap().into_body()).await["result"]["resultType"], "complete");
//! # }
//! ```
