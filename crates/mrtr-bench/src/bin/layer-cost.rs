//! The layer's own cost per request, in instructions: run it under callgrind.
//!
//! ```sh
//! cargo build --release --workspace --bins    # the README's build
//! for mode in call round1 round2 list; do
//!   for n in 1 1001; do
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!       target/release/layer-cost $mode $n 2>&1 | grep Collected
//!   done
//! done
//! # (Collected at 1001 - Collected at 1) / 1000 = instructions per request;
//! # add BARE=1 for the same loop without the layer (the harness alone).
//! ```
//!
//! Each iteration sends one request through `MrtrLayer` to a backend that answers at once
//! (driven with `now_or_never`, so no scheduler is counted) and reads the whole answer:
//!
//! * `call`: a 247-byte `tools/call` answered `complete` (about 300 bytes);
//! * `round1`: the same call answered `input_required` with a 256-byte `requestState`, sealed;
//! * `round2`: the retry carrying that envelope, opened, answered `complete`;
//! * `list`: a `tools/list`, whose answer the layer does not read.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Layer, Service, ServiceExt};
use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};

const CALL: &str = r#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world","size":256},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;

/// A backend answering every request with `answer`, reporting route `a`.
fn backend(
    answer: Bytes,
) -> impl Service<Request<RequestBody<Full<Bytes>>>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone
{
    tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
        let answer = answer.clone();
        async move {
            // A proxy reads the request body to forward it.
            let _ = req.into_body().collect().await;
            let mut response = Response::new(Full::new(answer));
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().expect("valid"));
            response.extensions_mut().insert(Route::new("a"));
            Ok(response)
        }
    })
}

/// Sends `body` through `svc` and returns the answer's length.
fn exchange<S>(svc: &mut S, body: &Bytes) -> usize
where
    S: Service<Request<Full<Bytes>>>,
    S::Response: Into<Response<tower_mrtr::ResponseBody<Full<Bytes>>>>,
    S::Error: std::fmt::Debug,
{
    let request = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .body(Full::new(body.clone()))
        .expect("valid request");
    let ready = svc.ready().now_or_never().expect("ready at once").expect("ready");
    let response: Response<_> = ready
        .call(request)
        .now_or_never()
        .expect("answers at once")
        .expect("answers")
        .into();
    let body = response
        .into_body()
        .collect()
        .now_or_never()
        .expect("whole body at once");
    body.expect("readable").to_bytes().len()
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "call".to_owned());
    let n: usize = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let complete = Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":17,"result":{{"resultType":"complete","content":[{{"type":"text","text":"{}"}}]}}}}"#,
        "x".repeat(200)
    ));
    let input_required = Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":17,"result":{{"resultType":"input_required","inputRequests":{{"k":{{"method":"elicitation/create","params":{{"message":"ok?","requestedSchema":{{"type":"object","properties":{{}}}}}}}}}},"requestState":"{}"}}}}"#,
        "s".repeat(256)
    ));
    let layer = MrtrLayer::new(Keyring::generate("k1").expect("a key"));
    let body = match mode.as_str() {
        "list" => Bytes::from_static(LIST.as_bytes()),
        "round2" => {
            // One round 1 for the envelope the retries carry.
            let mut minting = layer.layer(backend(input_required.clone()));
            let request = Request::post("/mcp").body(Full::new(Bytes::from_static(CALL.as_bytes())));
            let response = minting
                .call(request.expect("valid"))
                .now_or_never()
                .expect("answers at once")
                .expect("answers");
            let body = response.into_body().collect().now_or_never().expect("at once");
            let answer: serde_json::Value =
                serde_json::from_slice(&body.expect("readable").to_bytes()).expect("JSON");
            let envelope = answer["result"]["requestState"].as_str().expect("sealed");
            Bytes::from(CALL.replace(
                r#""_meta""#,
                &format!(
                    r#""requestState":"{envelope}","inputResponses":{{"k":{{"action":"accept"}}}},"_meta""#
                ),
            ))
        }
        _ => Bytes::from_static(CALL.as_bytes()),
    };
    let answer = if mode == "round1" {
        input_required
    } else {
        complete
    };
    let mut total = 0;
    if std::env::var_os("BARE").is_some() {
        let mut bare = backend(answer)
            .map_request(|r: Request<Full<Bytes>>| r.map(RequestBody::new))
            .map_response(|r: Response<Full<Bytes>>| r.map(tower_mrtr::ResponseBody::new));
        for _ in 0..n {
            total += exchange(&mut bare, &body);
        }
    } else {
        let mut svc = layer.layer(backend(answer));
        for _ in 0..n {
            total += exchange(&mut svc, &body);
        }
    }
    println!(
        "{mode}: {} bytes in, {} bytes out per request",
        body.len(),
        total / n.max(1)
    );
}
