//! `text/event-stream` answers: sealing inside streams, byte preservation, bounds, errors and
//! cancellation.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, StreamBody};
use proptest::prelude::*;
use serde_json::Value;
use tower::{Layer, ServiceExt};
use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};

use crate::common::{Backend, complete, post, send, tool_call};

/// A realistic backend stream: keep-alives, progress and log notifications (one mentioning
/// `input_required` in its text), mixed line ends, then the `input_required` result split over
/// two `data:` lines, with an id and a trailing comment kept around it.
const STREAM: &str = concat!(
    ": keep-alive\n\n",
    "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n",
    "retry: 1000\r\n\r\n",
    "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"input_required soon\"}}\r\n\r\n",
    ": keep-alive\r\r",
    "id: 2\nevent: message\n",
    "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{\"ok\":{\"method\":\"roots/list\"}},\n",
    "data: \"requestState\":\"backend-secret\"}}\n",
    ": trailing comment\n\n",
);

/// Everything before the result event passes through untouched.
const PREFIX_LEN: usize = STREAM.len() - 199;

fn chunked(stream: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut at = 0;
    for cut in cuts {
        chunks.push(Bytes::copy_from_slice(&stream[at..cut])); // may be empty: empty frames are legal
        at = cut;
    }
    chunks.push(Bytes::copy_from_slice(&stream[at..]));
    chunks
}

type ChunkBody = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn sse_body(chunks: Vec<Bytes>) -> ChunkBody {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> =
        chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

/// A backend answering every request with `chunks` as an SSE stream, reporting route `alpha`.
fn sse_backend(
    chunks: Vec<Bytes>,
) -> impl tower::Service<
    Request<RequestBody<Full<Bytes>>>,
    Response = Response<ChunkBody>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        let chunks = chunks.clone();
        async move {
            let mut response = Response::new(sse_body(chunks));
            let headers = response.headers_mut();
            headers.insert("content-type", "text/event-stream".parse().unwrap());
            headers.insert("x-accel-buffering", "no".parse().unwrap());
            headers.insert("cache-control", "no-cache".parse().unwrap());
            response.extensions_mut().insert(Route::new("alpha"));
            Ok::<_, Infallible>(response)
        }
    })
}

/// A `text/event-stream` answer reporting route `a`.
fn event_stream<B>(body: B) -> Response<B> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response.extensions_mut().insert(Route::new("a"));
    response
}

/// A `tools/call` through a fresh layer in front of `inner`.
async fn through_layer<S, B>(inner: S) -> Response<tower_mrtr::ResponseBody<B>>
where
    S: tower::Service<Request<RequestBody<Full<Bytes>>>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Body,
    B::Error: Into<tower::BoxError>,
{
    MrtrLayer::new(Keyring::generate("k").unwrap())
        .layer(inner)
        .oneshot(post(&tool_call(1, "t", None)))
        .await
        .unwrap()
}

fn envelope_in(text: &str) -> Option<String> {
    let start = text.find("mrtr4.")?;
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_owned())
}

async fn relay_stream(layer: &MrtrLayer, chunks: Vec<Bytes>) -> (http::response::Parts, Vec<Bytes>) {
    let response = layer
        .layer(sse_backend(chunks))
        .oneshot(post(&tool_call(1, "t", None)))
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let mut frames = Vec::new();
    let mut body = std::pin::pin!(body);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push(data);
        }
    }
    (parts, frames)
}

#[tokio::test]
async fn result_event_is_sealed_and_everything_else_is_byte_identical() {
    let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
    let (parts, frames) = relay_stream(&layer, vec![Bytes::from_static(STREAM.as_bytes())]).await;
    assert_eq!(parts.headers["content-type"], "text/event-stream");
    assert_eq!(parts.headers["x-accel-buffering"], "no");
    assert!(parts.headers.get("content-length").is_none());
    let out = frames.concat();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(!text.contains("backend-secret"), "{text}");
    assert_eq!(
        &text[..PREFIX_LEN],
        &STREAM[..PREFIX_LEN],
        "events before the result are untouched"
    );
    let envelope = envelope_in(text).expect("sealed");
    let expected_tail = format!(
        "id: 2\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"resultType\":\"input_required\",\"inputRequests\":{{\"ok\":{{\"method\":\"roots/list\"}}}}, \"requestState\":\"{envelope}\"}}}}\n: trailing comment\n\n"
    );
    assert_eq!(&text[PREFIX_LEN..], expected_tail);
}

#[tokio::test]
async fn a_retry_after_an_sse_round_opens_like_after_a_json_round() {
    let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
    let (_, frames) = relay_stream(&layer, vec![Bytes::from_static(STREAM.as_bytes())]).await;
    let envelope = envelope_in(std::str::from_utf8(&frames.concat()).unwrap()).unwrap();
    let backend = Backend::new();
    let answer = send(
        layer.layer(backend.service(Some("alpha"), |r: &Value| complete(r, "alpha"))),
        post(&tool_call(2, "t", Some(&envelope))),
    )
    .await;
    assert_eq!(answer.json()["result"]["resultType"], "complete");
    let seen: Value = serde_json::from_slice(&backend.last().body).unwrap();
    assert_eq!(seen["params"]["requestState"], "backend-secret");
    assert_eq!(backend.last().pinned, Some(Route::new("alpha")));
}

#[tokio::test]
async fn an_unterminated_final_event_is_still_sealed() {
    let stream = STREAM
        .trim_end_matches('\n')
        .trim_end_matches(": trailing comment")
        .to_owned();
    let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
    let (_, frames) = relay_stream(&layer, vec![Bytes::from(stream.clone())]).await;
    let text = String::from_utf8(frames.concat().to_vec()).unwrap();
    assert!(!text.contains("backend-secret"), "{text}");
    assert!(envelope_in(&text).is_some());
    assert!(text.ends_with("}}\n"), "the tail stays unterminated: {text:?}");
}

#[tokio::test]
async fn an_oversized_event_ends_the_stream_with_a_json_rpc_error() {
    let layer = MrtrLayer::new(Keyring::generate("k1").unwrap()).max_sse_event(512);
    let big = format!(
        "data: {{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"resultType\":\"input_required\",\"requestState\":\"{}\"}}}}\n\n",
        "s".repeat(1000)
    );
    let stream = format!("{}{big}", &STREAM[..PREFIX_LEN]);
    let (_, frames) = relay_stream(&layer, chunked(stream.as_bytes(), &[100, 700])).await;
    let text = String::from_utf8(frames.concat().to_vec()).unwrap();
    assert!(
        text.starts_with(&STREAM[..PREFIX_LEN]),
        "what came before is delivered"
    );
    assert!(!text.contains("sss"), "no raw backend state");
    let events: Vec<_> =
        sse_stream::SseStream::from_bytes_stream(futures_util::stream::iter(vec![Ok::<_, Infallible>(
            Bytes::from(text),
        )]))
        .collect::<Vec<_>>()
        .await;
    let last = events.last().unwrap().as_ref().unwrap();
    let error: Value = serde_json::from_str(last.data.as_deref().unwrap()).unwrap();
    assert_eq!(
        (error["id"].as_i64(), error["error"]["code"].as_i64()),
        (Some(1), Some(-32603))
    );
}

#[tokio::test]
async fn a_result_that_cannot_be_sealed_ends_the_stream_with_an_error() {
    // No route reported, no default: the stream's result cannot be sealed.
    let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let mut response = Response::new(sse_body(vec![Bytes::from_static(STREAM.as_bytes())]));
        response.headers_mut().insert(
            "content-type",
            "text/event-stream; charset=utf-8".parse().unwrap(),
        );
        Ok::<_, Infallible>(response)
    });
    let response = layer
        .layer(inner)
        .oneshot(post(&tool_call(1, "t", None)))
        .await
        .unwrap();
    let out = response.into_body().collect().await.unwrap().to_bytes();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(!text.contains("backend-secret"));
    assert!(
        text.ends_with(
            "\"code\":-32603,\"message\":\"The backend's response could not be relayed safely\"}}\n\n"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_backend_error_mid_stream_is_a_body_error() {
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b": keep-alive\n\n"))),
            Err(std::io::Error::other("backend reset")),
        ];
        Ok::<_, Infallible>(event_stream(StreamBody::new(futures_util::stream::iter(frames))))
    });
    let response = through_layer(inner).await;
    let mut body = std::pin::pin!(response.into_body());
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, ": keep-alive\n\n");
    let err = body.frame().await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "backend reset");
}

/// A body that never ends and records when it is dropped.
struct Endless {
    dropped: Arc<AtomicBool>,
    sent: bool,
}

impl Body for Endless {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.sent {
            Poll::Pending
        } else {
            self.sent = true;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b": keep-alive\n\n")))))
        }
    }
}

impl Drop for Endless {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn dropping_the_response_drops_the_backend_stream() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let inner = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        let flag = flag.clone();
        async move {
            Ok::<_, Infallible>(event_stream(Endless {
                dropped: flag,
                sent: false,
            }))
        }
    });
    let response = through_layer(inner).await;
    let mut body = Box::pin(response.into_body());
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        ": keep-alive\n\n"
    );
    assert!(!dropped.load(Ordering::SeqCst));
    drop(body);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the backend body must be dropped with the client's"
    );
}

#[tokio::test]
async fn streams_of_methods_that_never_need_sealing_pass_untouched() {
    let stream = STREAM.replace("backend-secret", "not-an-mrtr-method");
    let inner = sse_backend(vec![Bytes::from(stream.clone())]);
    let request = post(r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}}"#);
    let response = MrtrLayer::new(Keyring::generate("k").unwrap())
        .layer(inner)
        .oneshot(request)
        .await
        .unwrap();
    let out = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(out, stream.as_bytes());
}

/// Results per chunking, with the (random) envelope replaced by a placeholder.
fn normalised(frames: &[Bytes]) -> String {
    let text = String::from_utf8(frames.concat().to_vec()).unwrap();
    match envelope_in(&text) {
        Some(envelope) => text.replace(&envelope, "ENVELOPE"),
        None => text,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any chunking of the same stream, empty frames included, gives byte-identical output, and the
    /// events it carries are those of the input (checked with the sse-stream parser as oracle).
    #[test]
    fn any_chunking_gives_identical_output(cuts in proptest::collection::vec(0usize..2000, 0..40)) {
        let rt = runtime();
        let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
        let whole = rt.block_on(relay_stream(&layer, vec![Bytes::from_static(STREAM.as_bytes())])).1;
        let split = rt.block_on(relay_stream(&layer, chunked(STREAM.as_bytes(), &cuts))).1;
        prop_assert_eq!(normalised(&whole), normalised(&split));

        let decode = |bytes: Vec<Bytes>| rt.block_on(async move {
            sse_stream::SseStream::from_bytes_stream(futures_util::stream::iter(bytes.into_iter().map(Ok::<_, Infallible>)))
                .map(|e| e.unwrap())
                .collect::<Vec<_>>()
                .await
        });
        let input = decode(vec![Bytes::from_static(STREAM.as_bytes())]);
        let output = decode(split);
        prop_assert_eq!(input.len(), output.len());
        for (a, b) in input.iter().zip(&output) {
            prop_assert_eq!((&a.id, &a.event, &a.retry), (&b.id, &b.event, &b.retry));
            if a.data != b.data {
                let a: Value = serde_json::from_str(a.data.as_deref().unwrap()).unwrap();
                let mut b: Value = serde_json::from_str(b.data.as_deref().unwrap()).unwrap();
                prop_assert!(b["result"]["requestState"].as_str().unwrap().starts_with("mrtr4."));
                b["result"]["requestState"] = "backend-secret".into();
                prop_assert_eq!(a, b);
            }
        }
    }

    /// One byte per frame, with empty frames between: the extreme chunking.
    #[test]
    fn byte_by_byte_with_empty_frames(seed in 0u8..4) {
        let rt = runtime();
        let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
        let mut chunks = Vec::new();
        for (i, b) in STREAM.bytes().enumerate() {
            chunks.push(Bytes::copy_from_slice(&[b]));
            if i % (usize::from(seed) + 2) == 0 {
                chunks.push(Bytes::new());
            }
        }
        let whole = rt.block_on(relay_stream(&layer, vec![Bytes::from_static(STREAM.as_bytes())])).1;
        let split = rt.block_on(relay_stream(&layer, chunks)).1;
        prop_assert_eq!(normalised(&whole), normalised(&split));
    }
}

#[tokio::test]
async fn keep_alives_are_forwarded_as_they_arrive() {
    // The layer must not hold back complete events waiting for more input.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    let rx = Arc::new(Mutex::new(Some(rx)));
    let inner = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        let rx = rx.lock().unwrap().take().unwrap();
        async move {
            let stream =
                futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
            Ok::<_, Infallible>(event_stream(StreamBody::new(stream)))
        }
    });
    let response = through_layer(inner).await;
    let mut body = Box::pin(response.into_body());
    tx.send(Ok(Frame::data(Bytes::from_static(
        b": ping\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n",
    ))))
    .await
    .unwrap();
    let frame = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame())
        .await
        .expect("forwarded without waiting");
    assert_eq!(
        frame.unwrap().unwrap().into_data().unwrap(),
        &b": ping\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"[..]
    );
}

#[tokio::test]
async fn trailers_follow_the_flushed_stream() {
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", "abc".parse().unwrap());
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(STREAM.as_bytes()))),
            // An unterminated tail must be flushed before the trailers.
            Ok(Frame::data(Bytes::from_static(b": tail without end"))),
            Ok(Frame::trailers(trailers)),
        ];
        Ok::<_, Infallible>(event_stream(StreamBody::new(futures_util::stream::iter(frames))))
    });
    let response = through_layer(inner).await;
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["x-checksum"], "abc");
    let text = String::from_utf8(collected.to_bytes().to_vec()).unwrap();
    assert!(
        text.ends_with(": trailing comment\n\n: tail without end"),
        "{text}"
    );
    assert!(envelope_in(&text).is_some() && !text.contains("backend-secret"));
}
