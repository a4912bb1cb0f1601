//! Key rotation without a restart: a [`KeyringHandle`] replaced while rounds are in flight.

use serde_json::Value;
use tokio::sync::oneshot;
use tower::Layer;
use tower_mrtr::{Keyring, KeyringHandle, MrtrLayer};

use crate::common::*;

const OLD: &str = "old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
const NEW: &str = "new:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";

fn ring(keys: &str) -> Keyring {
    keys.parse().unwrap()
}

/// The key id in an envelope's header (version byte, id length, id).
fn key_id(envelope: &str) -> String {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(envelope.strip_prefix("mrtr4.").unwrap())
        .unwrap();
    String::from_utf8(raw[2..2 + usize::from(raw[1])].to_vec()).unwrap()
}

#[tokio::test]
async fn rotating_through_the_three_steps_while_rounds_are_in_flight_refuses_nothing() {
    let handle = KeyringHandle::new(ring(OLD));
    let layer = MrtrLayer::with_keyring_handle(handle.clone());
    let backend = Backend::new();
    let mint = || layer.layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#))));
    let finish = || layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a")));

    // Rounds started at every stage are finished after the next step: sealed under `old`, opened
    // under `old,new` and `new,old`; sealed under `new`, opened under `new` alone. (Step 3 comes
    // only after the longest lifetime, so no round sealed under `old` is left by then.)
    let stages = [format!("{OLD},{NEW}"), format!("{NEW},{OLD}"), NEW.to_owned()];
    let mut pending: Vec<String> = Vec::new();
    let mut id = 0;
    for stage in stages {
        for _ in 0..3 {
            id += 1;
            pending.push(send(mint(), post(&tool_call(id, "t", None))).await.envelope());
        }
        handle.store(ring(&stage));
        for envelope in pending.drain(..) {
            id += 1;
            let answer = send(finish(), post(&tool_call(id, "t", Some(&envelope)))).await;
            assert_eq!(
                answer.json()["result"]["resultType"],
                "complete",
                "sealed with {}, opened after the switch to {stage}: {}",
                key_id(&envelope),
                answer.text()
            );
        }
    }
    // The new key seals now.
    id += 1;
    assert_eq!(
        key_id(&send(mint(), post(&tool_call(id, "t", None))).await.envelope()),
        "new"
    );
}

#[tokio::test]
async fn a_request_in_flight_finishes_with_the_keyring_it_arrived_under() {
    let handle = KeyringHandle::new(ring(OLD));
    let layer = MrtrLayer::with_keyring_handle(handle.clone());
    // A backend that answers only when told to, so the keyring changes while it works.
    let (release, released) = oneshot::channel::<()>();
    let released = std::sync::Arc::new(tokio::sync::Mutex::new(Some(released)));
    // The backend says when the request has reached it, so the keyring changes while it works
    // and not before (a fixed sleep is outlasted on a loaded machine).
    let (arrived, has_arrived) = oneshot::channel::<()>();
    let arrived = std::sync::Arc::new(std::sync::Mutex::new(Some(arrived)));
    let inner = tower::service_fn(
        move |req: http::Request<tower_mrtr::RequestBody<http_body_util::Full<bytes::Bytes>>>| {
            let released = released.clone();
            let arrived = arrived.clone();
            async move {
                if let Some(arrived) = arrived.lock().unwrap().take() {
                    let _ = arrived.send(());
                }
                if let Some(rx) = released.lock().await.take() {
                    let _ = rx.await;
                }
                let body = http_body_util::BodyExt::collect(req.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                let request: Value = serde_json::from_slice(&body).unwrap();
                let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(
                    input_required(&request, Some(r#""s""#)),
                )));
                response.extensions_mut().insert(tower_mrtr::Route::new("a"));
                Ok::<_, std::convert::Infallible>(response)
            }
        },
    );
    let svc = layer.layer(inner);
    let in_flight = tokio::spawn(send(svc, post(&tool_call(1, "t", None))));
    has_arrived.await.unwrap();
    handle.store(ring(&format!("{NEW},{OLD}")));
    release.send(()).unwrap();
    let envelope = in_flight.await.unwrap().envelope();
    assert_eq!(
        key_id(&envelope),
        "old",
        "sealed under the keyring the request arrived with"
    );
}
