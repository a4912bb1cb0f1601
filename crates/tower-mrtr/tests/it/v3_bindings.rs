//! What envelope format v3 added, seen through the layer: a route's identity (a retry never
//! reaches a backend of the same name that is another backend), the deployment's audience and
//! the cap on rounds.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::Layer;
use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
use tower_mrtr::{Keyring, MrtrLayer, PinnedRoute, RequestBody, Route, RouteIdentity};

use crate::common::*;

/// One backend behind the mock proxy: its route (name and identity), its calls, the states it
/// received on retries.
#[derive(Clone)]
struct MockBackend {
    route: Route,
    calls: Arc<AtomicUsize>,
    states: Arc<Mutex<Vec<String>>>,
}

impl MockBackend {
    fn new(route: Route) -> Self {
        Self {
            route,
            calls: Arc::default(),
            states: Arc::default(),
        }
    }

    /// Names the backend in its states: the first bytes of its identity.
    fn label(&self) -> String {
        let identity = self.route.identity().map(|i| i.as_bytes()[..4].to_vec());
        format!("{}-{:02x?}", self.route, identity.unwrap_or_default()).replace(['[', ']', ',', ' '], "")
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// A proxy that honours `PinnedRoute` as the contract says: by whole-route equality (name and
/// identity). A retry whose pinned route equals none of its routes is answered by the proxy
/// itself, and no backend is called. A first round goes to the backend named `alpha`. Every
/// backend asks for input on a first round and completes a retry.
fn proxy(
    backends: Vec<MockBackend>,
) -> impl tower::Service<
    Request<RequestBody<Full<Bytes>>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
        let backends = backends.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body: Value = serde_json::from_slice(&body.collect().await.unwrap().to_bytes()).unwrap();
            let id = body["id"].clone();
            let pinned = parts.extensions.get::<PinnedRoute>().map(|p| p.0.clone());
            let chosen = match &pinned {
                Some(pinned) => backends.iter().find(|b| b.route == *pinned),
                None => backends.iter().find(|b| b.route.as_str() == "alpha"),
            };
            let Some(backend) = chosen else {
                let answer = json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,
                    "message":"the backend that started this request is not configured here"}});
                return Ok(Response::new(Full::new(Bytes::from(answer.to_string()))));
            };
            backend.calls.fetch_add(1, Ordering::SeqCst);
            let answer = match body["params"]["requestState"].as_str() {
                None => input_required(&body, Some(&format!("\"state-of-{}\"", backend.label()))),
                Some(state) => {
                    backend.states.lock().unwrap().push(state.to_owned());
                    complete(&body, backend.route.as_str())
                }
            };
            let mut response = Response::new(Full::new(Bytes::from(answer)));
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            response.extensions_mut().insert(backend.route.clone());
            Ok(response)
        }
    })
}

fn alpha(url: &str) -> Route {
    Route::new("alpha").with_identity(RouteIdentity::digest(url))
}

#[tokio::test]
async fn a_retry_pinned_to_another_identity_never_reaches_the_backend_of_that_name() {
    // Two gateways share a keyring; each has an `alpha`, which is a different backend.
    let keys = Arc::new(Keyring::generate("shared").unwrap());
    let layer = MrtrLayer::with_shared_keyring(keys);
    let x = MockBackend::new(alpha("https://alpha.one.internal/mcp"));
    let y = MockBackend::new(alpha("https://alpha.two.internal/mcp"));
    let unnamed = MockBackend::new(Route::new("alpha"));
    let gateway_x = layer.clone().layer(proxy(vec![x.clone()]));
    let gateway_y = layer.clone().layer(proxy(vec![y.clone()]));
    let gateway_unnamed = layer.layer(proxy(vec![unnamed.clone()]));

    let envelope = send(gateway_x.clone(), post(&tool_call(1, "deploy", None)))
        .await
        .envelope();
    assert_eq!(x.calls(), 1);

    // Presented where `alpha` carries identity Y, or none: the proxy finds no route equal to the
    // pinned one, and neither backend is called.
    for (gateway, backend) in [(gateway_y, &y), (gateway_unnamed, &unnamed)] {
        let answer = send(gateway, post(&tool_call(2, "deploy", Some(&envelope)))).await;
        assert_eq!(answer.error_code(), Some(-32602), "{}", answer.text());
        assert_eq!(backend.calls(), 0, "the other alpha was called");
        assert!(backend.states.lock().unwrap().is_empty());
    }

    // Presented where alpha is the same backend (same identity): it opens and reaches it, with
    // its own state restored.
    let answer = send(gateway_x, post(&tool_call(3, "deploy", Some(&envelope)))).await;
    assert_eq!(
        answer.json()["result"]["resultType"],
        "complete",
        "{}",
        answer.text()
    );
    assert_eq!(x.calls(), 2);
    assert_eq!(*x.states.lock().unwrap(), vec![format!("state-of-{}", x.label())]);
}

#[tokio::test]
async fn the_pinned_route_carries_the_identity_and_an_answer_of_another_identity_fails_closed() {
    let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
    let x = alpha("https://alpha.one.internal/mcp");
    let y = alpha("https://alpha.two.internal/mcp");
    let minter = Backend::new();
    let envelope = {
        let service = {
            let seen = minter.clone();
            let x = x.clone();
            tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
                let (x, seen) = (x.clone(), seen.clone());
                async move {
                    let body: Value =
                        serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
                    seen.seen.lock().unwrap().push(crate::common::Seen {
                        headers: Default::default(),
                        body: Bytes::new(),
                        pinned: None,
                        head: None,
                        continuation: None,
                        handle: None,
                    });
                    let mut response =
                        Response::new(Full::new(Bytes::from(input_required(&body, Some(r#""s1""#)))));
                    response.extensions_mut().insert(x);
                    Ok::<_, Infallible>(response)
                }
            })
        };
        send(layer.clone().layer(service), post(&tool_call(1, "t", None)))
            .await
            .envelope()
    };
    // A proxy that ignores the pin and answers from the other `alpha`: the layer compares the
    // whole route and refuses the answer; the client gets no raw state.
    for (reported, pinned_seen) in [(y.clone(), x.clone()), (Route::new("alpha"), x.clone())] {
        let backend = Backend::new();
        let service = {
            let seen = backend.clone();
            tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
                let (reported, seen) = (reported.clone(), seen.clone());
                async move {
                    let pinned = req.extensions().get::<PinnedRoute>().map(|p| p.0.clone());
                    let body: Value =
                        serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
                    seen.seen.lock().unwrap().push(crate::common::Seen {
                        headers: Default::default(),
                        body: Bytes::new(),
                        pinned,
                        head: None,
                        continuation: None,
                        handle: None,
                    });
                    let mut response =
                        Response::new(Full::new(Bytes::from(input_required(&body, Some(r#""raw-s2""#)))));
                    response.extensions_mut().insert(reported);
                    Ok::<_, Infallible>(response)
                }
            })
        };
        let answer = send(
            layer.clone().layer(service),
            post(&tool_call(2, "t", Some(&envelope))),
        )
        .await;
        assert_eq!(
            backend.last().pinned,
            Some(pinned_seen),
            "pinned with its identity"
        );
        assert_eq!(answer.error_code(), Some(-32603), "{}", answer.text());
        assert!(!answer.text().contains("raw-s2"));
    }
}

#[tokio::test]
async fn envelopes_of_one_audience_never_open_in_another() {
    let keys = Arc::new(Keyring::generate("shared").unwrap());
    let deployment = |audience: Option<&str>| {
        let layer = MrtrLayer::with_shared_keyring(keys.clone());
        match audience {
            Some(name) => layer.audience(name),
            None => layer,
        }
    };
    let audiences = [Some("prod"), Some("staging"), None];
    for minted in audiences {
        let backend = Backend::new();
        let envelope = send(
            deployment(minted)
                .layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#)))),
            post(&tool_call(1, "t", None)),
        )
        .await
        .envelope();
        for opener in audiences {
            if opener == minted {
                let answer = send(
                    deployment(opener).layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
                    post(&tool_call(2, "t", Some(&envelope))),
                )
                .await;
                assert_eq!(answer.json()["result"]["resultType"], "complete");
            } else {
                let answer = send(
                    deployment(opener).layer(must_not_be_called()),
                    post(&tool_call(2, "t", Some(&envelope))),
                )
                .await;
                assert_eq!(answer.error_code(), Some(-32602), "{minted:?} at {opener:?}");
                assert_eq!(
                    answer.json()["error"]["message"],
                    "Invalid or expired requestState"
                );
            }
        }
    }
}

/// The round sealed in an envelope, read with the layer's keyring.
fn round_of(keys: &Arc<Keyring>, envelope: &str, audience: Option<&str>) -> u16 {
    let binding = Binding::new("tools/call", Some("t"), None)
        .with_audience(audience)
        .with_arguments(tower_mrtr::envelope::ArgumentsDigest::of(Some(r#"{"repo":"acme/api"}"#)).unwrap());
    Sealer::new(keys.clone())
        .open(
            Purpose::REQUEST_STATE,
            &binding,
            envelope,
            std::time::SystemTime::now(),
        )
        .unwrap()
        .round
}

#[tokio::test]
async fn each_round_is_one_more_and_the_cap_refuses_before_the_backend() {
    for (limit, layer) in [(16u16, None), (3, Some(3u16)), (2, Some(2))] {
        let keys = Arc::new(Keyring::generate("k1").unwrap());
        let mut layer_config = MrtrLayer::with_shared_keyring(keys.clone()).audience("prod");
        if let Some(n) = layer {
            layer_config = layer_config.max_rounds(n);
        }
        let backend = Backend::new();
        // A backend that asks for input forever.
        let asker = layer_config
            .clone()
            .layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""again""#))));
        let mut envelope = send(asker.clone(), post(&tool_call(1, "t", None)))
            .await
            .envelope();
        assert_eq!(round_of(&keys, &envelope, Some("prod")), 1);
        for round in 1..limit {
            let answer = send(
                asker.clone(),
                post(&tool_call(u64::from(round) + 1, "t", Some(&envelope))),
            )
            .await;
            envelope = answer.envelope();
            assert_eq!(round_of(&keys, &envelope, Some("prod")), round + 1);
        }
        assert_eq!(
            backend.seen().len(),
            usize::from(limit),
            "the first request and limit - 1 retries"
        );
        // The envelope of round `limit`: refused, and the backend is not asked again.
        let answer = send(
            layer_config.layer(must_not_be_called()),
            post(&tool_call(99, "t", Some(&envelope))),
        )
        .await;
        assert_eq!(answer.status, http::StatusCode::OK);
        assert_eq!(answer.error_code(), Some(-32602), "{}", answer.text());
        assert_eq!(answer.json()["id"], 99);
        let message = answer.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.starts_with("The request took too many rounds"),
            "{message}"
        );
        assert!(message.contains(&format!("limit is {limit}")), "{message}");
    }
}

#[tokio::test]
async fn a_v2_envelope_opens_as_round_one_and_its_next_round_is_sealed_as_v4_round_two() {
    let keys = Arc::new(Keyring::generate("k1").unwrap());
    let arguments = r#"{"repo":"acme/api"}"#;
    let binding = Binding::new("tools/call", Some("t"), None)
        .with_arguments(tower_mrtr::envelope::ArgumentsDigest::of_with_v2(Some(arguments)).unwrap());
    let sealed = Sealed {
        route: Route::new("a"),
        state: Some("v2-state".into()),
        expires_at: UNIX_EPOCH + Duration::from_secs(4_000_000_000),
        round: 1,
        call_target: None,
    };
    let v2 = Sealer::new(keys.clone())
        .seal_v2_with_nonce(Purpose::REQUEST_STATE, &binding, &sealed, [9; 24])
        .unwrap();
    assert!(v2.starts_with("mrtr2."));

    let layer = MrtrLayer::with_shared_keyring(keys.clone());
    let backend = Backend::new();
    let answer = send(
        layer.clone().layer(backend.service(Some("a"), |r: &Value| {
            input_required(r, Some(r#""round-2-state""#))
        })),
        post(&tool_call(2, "t", Some(&v2))),
    )
    .await;
    let restored: Value = serde_json::from_slice(&backend.last().body).unwrap();
    assert_eq!(restored["params"]["requestState"], "v2-state");
    let next = answer.envelope();
    assert!(next.starts_with("mrtr4."), "{next}");
    assert_eq!(round_of(&keys, &next, None), 2);

    // Round 1 has reached a cap of 1; and a v2 envelope has no audience.
    for layer in [layer.clone().max_rounds(1), layer.audience("prod")] {
        let answer = send(
            layer.layer(must_not_be_called()),
            post(&tool_call(3, "t", Some(&v2))),
        )
        .await;
        assert_eq!(answer.error_code(), Some(-32602), "{}", answer.text());
    }
}

/// An envelope of format v3 (sealed before the upgrade to v4) still opens, in its round, with its
/// audience and route identity; the next round is sealed as v4.
#[tokio::test]
async fn a_v3_envelope_opens_in_its_round_and_its_next_round_is_sealed_as_v4() {
    let keys = Arc::new(Keyring::generate("k1").unwrap());
    let binding = Binding::new("tools/call", Some("t"), None)
        .with_audience(Some("prod"))
        .with_arguments(tower_mrtr::envelope::ArgumentsDigest::of(Some(r#"{"repo":"acme/api"}"#)).unwrap());
    let route = alpha("https://alpha.one.internal/mcp");
    let sealed = Sealed {
        route: route.clone(),
        state: Some("v3-state".into()),
        expires_at: UNIX_EPOCH + Duration::from_secs(4_000_000_000),
        round: 2,
        call_target: None,
    };
    let v3 = Sealer::new(keys.clone())
        .seal_v3_with_nonce(Purpose::REQUEST_STATE, &binding, &sealed, [9; 24])
        .unwrap();
    assert!(v3.starts_with("mrtr3."));

    // A backend that answers from the pinned route, asking for input once more.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let backend = {
        let seen = seen.clone();
        tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
            let seen = seen.clone();
            async move {
                let pinned = req.extensions().get::<PinnedRoute>().map(|p| p.0.clone());
                let body: Value =
                    serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
                seen.lock()
                    .unwrap()
                    .push((pinned.clone(), body["params"]["requestState"].clone()));
                let mut response = Response::new(Full::new(Bytes::from(input_required(
                    &body,
                    Some(r#""v4-state""#),
                ))));
                response.extensions_mut().insert(pinned.unwrap());
                Ok::<_, Infallible>(response)
            }
        })
    };
    let layer = MrtrLayer::with_shared_keyring(keys.clone()).audience("prod");
    let answer = send(layer.clone().layer(backend), post(&tool_call(2, "t", Some(&v3)))).await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(Some(route), Value::from("v3-state"))],
        "pinned to the route and identity sealed, its state restored"
    );
    let next = answer.envelope();
    assert!(next.starts_with("mrtr4."), "{next}");
    assert_eq!(round_of(&keys, &next, Some("prod")), 3);

    // Round 2 has reached a cap of 2; and the v3 envelope's audience is bound as v4's is.
    for layer in [layer.max_rounds(2), MrtrLayer::with_shared_keyring(keys.clone())] {
        let answer = send(
            layer.layer(must_not_be_called()),
            post(&tool_call(3, "t", Some(&v3))),
        )
        .await;
        assert_eq!(answer.error_code(), Some(-32602), "{}", answer.text());
    }
}
