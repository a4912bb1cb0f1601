//! No input from either side makes the layer panic: arbitrary and mutated request bodies, and
//! arbitrary and mutated backend answers (JSON and SSE), through the whole service.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use tower::{Layer, ServiceExt};
use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};

use crate::common::{input_required, tool_call};

/// Seeds that reach the interesting paths: retries, task follow-ups, listens, batches, answers.
fn seeds() -> Vec<String> {
    let request: serde_json::Value = serde_json::from_str(&tool_call(1, "t", None)).unwrap();
    vec![
        tool_call(1, "t", None),
        tool_call(2, "t", Some("mrtr4.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_3l38z3APz2l8zF")),
        r#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"mrtr3.AAAA"}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["mrtr4.x"]}}}"#.to_owned(),
        format!("[{},{}]", tool_call(5, "t", None), tool_call(6, "u", None)),
        input_required(&request, Some(r#""state""#)),
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t","ttlMs":99999999999999999999}}"#.to_owned(),
        "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\",\"requestState\":\"s\"}}\r\n\r\n".to_owned(),
    ]
}

/// A seed with random bytes overwritten, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds();
    (
        0..seeds.len(),
        proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 0..8),
    )
        .prop_map(move |(i, edits)| {
            let mut bytes = seeds[i].clone().into_bytes();
            for (at, byte, kind) in edits {
                let at = usize::from(at) % (bytes.len() + 1);
                match kind {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => {}
                }
            }
            bytes
        })
}

fn run(request: Vec<u8>, answer: Vec<u8>, sse: bool) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async move {
        let answer = Bytes::from(answer);
        let inner = tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
            let answer = answer.clone();
            async move {
                let _ = req.into_body().collect().await;
                let mut response = Response::new(Full::new(answer));
                let content_type = if sse {
                    "text/event-stream"
                } else {
                    "application/json"
                };
                response
                    .headers_mut()
                    .insert("content-type", content_type.parse().unwrap());
                response.extensions_mut().insert(Route::new("r"));
                Ok::<_, Infallible>(response)
            }
        });
        let layer = MrtrLayer::new(Keyring::generate("k1").unwrap())
            .max_envelope_len(512)
            .max_sse_event(256);
        let mut req = Request::post("/mcp")
            .body(Full::new(Bytes::from(request)))
            .unwrap();
        req.headers_mut().insert("mcp-name", "t".parse().unwrap());
        let response = layer.layer(inner).oneshot(req).await.unwrap();
        let _ = response.into_body().collect().await;
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_requests_and_answers(request in mutated(), answer in mutated(), sse in any::<bool>()) {
        run(request, answer, sse);
    }

    #[test]
    fn arbitrary_bytes(request in proptest::collection::vec(any::<u8>(), 0..300), answer in proptest::collection::vec(any::<u8>(), 0..300), sse in any::<bool>()) {
        run(request, answer, sse);
    }
}
