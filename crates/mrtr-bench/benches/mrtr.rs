//! Micro-benchmarks of tower-mrtr, each measured side by side with its baseline in one run.
//!
//! `cargo bench -p mrtr-bench --bench mrtr` (figures and how to read them: `docs/benchmarks.md`).
//!
//! Every service here answers at once, so futures are driven with `now_or_never` instead of a
//! runtime: what is measured is the layer's work, not a scheduler's.

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::FutureExt;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, StreamBody};
use tower::{Layer, Service, ServiceExt};
use tower_mrtr::envelope::{ArgumentsDigest, Binding, Purpose, Sealed, Sealer};
use tower_mrtr::{Keyring, MrtrLayer, Route};

const SIZES: [usize; 3] = [256, 4 * 1024, 64 * 1024];

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

fn keyring() -> Arc<Keyring> {
    Arc::new(Keyring::generate("k1").unwrap())
}

/// Drives a future that is ready without waiting (all services here answer at once).
fn now<F: std::future::Future>(future: F) -> F::Output {
    future
        .now_or_never()
        .expect("benchmark futures complete without waiting")
}

/// Reads a whole body, as a server writing it out would.
fn drain<B: Body<Data = Bytes>>(body: B) -> usize
where
    B::Error: std::fmt::Debug,
{
    now(body.collect()).unwrap().to_bytes().len()
}

fn envelope(c: &mut Criterion) {
    let sealer = Sealer::new(keyring());
    let binding = Binding::new("tools/call", Some("delete_branch"), Some("alice"));
    let now_time = SystemTime::now();
    let mut group = c.benchmark_group("envelope");
    for size in [256usize, 1024, 4 * 1024, 64 * 1024] {
        let sealed = Sealed {
            route: Route::new("backend-a"),
            state: Some("s".repeat(size)),
            expires_at: now_time + Duration::from_secs(600),
            round: 1,
            call_target: None,
        };
        let wire = sealer.seal(Purpose::REQUEST_STATE, &binding, &sealed).unwrap();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("seal", size), &sealed, |b, sealed| {
            b.iter(|| {
                sealer
                    .seal(Purpose::REQUEST_STATE, black_box(&binding), black_box(sealed))
                    .unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("open", size), &wire, |b, wire| {
            b.iter(|| {
                sealer
                    .open(
                        Purpose::REQUEST_STATE,
                        black_box(&binding),
                        black_box(wire),
                        now_time,
                    )
                    .unwrap()
            })
        });
    }
    group.finish();
}

/// The baseline inner service: reads the request body (as a forwarding proxy would) and answers
/// with a fixed JSON body, reporting a route.
/// Tool arguments of about `size` bytes: an object of mixed members (strings with escapes,
/// numbers, nested objects and arrays), as real tool calls carry.
fn arguments_json(size: usize) -> String {
    let mut members = Vec::new();
    let mut len = 2;
    let mut i = 0;
    while len < size {
        let member = match i % 4 {
            0 => format!(r#""name_{i}":"value \"{i}\" caf\u00e9""#),
            1 => format!(r#""count_{i}":{}"#, i * 37),
            2 => format!(r#""ratio_{i}":{}.25"#, i),
            _ => format!(r#""nested_{i}":{{"z":[1,2,3],"a":true,"m":null}}"#),
        };
        len += member.len() + 1;
        members.push(member);
        i += 1;
    }
    // Written in reverse order, so canonicalisation has sorting to do.
    members.reverse();
    format!("{{{}}}", members.join(","))
}

/// The digest binding an envelope to the call's arguments, against what reading the same bytes
/// costs anyway: a JSON validation (the layer parses every body) and a plain SHA-256 of them.
fn arguments_digest(c: &mut Criterion) {
    use sha2::Digest;
    let mut group = c.benchmark_group("arguments_digest");
    for size in [256usize, 1024, 4 * 1024, 64 * 1024] {
        let json = arguments_json(size);
        group.throughput(Throughput::Bytes(json.len() as u64));
        group.bench_with_input(BenchmarkId::new("canonical_sha256", size), &json, |b, json| {
            b.iter(|| ArgumentsDigest::of(Some(black_box(json))).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("validate_only", size), &json, |b, json| {
            b.iter(|| serde_json::from_str::<&serde_json::value::RawValue>(black_box(json)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("sha256_raw", size), &json, |b, json| {
            b.iter(|| sha2::Sha256::digest(black_box(json.as_bytes())))
        });
        // What the digest uses: ring's SHA-256, against the `sha2` crate's above.
        group.bench_with_input(BenchmarkId::new("ring_sha256_raw", size), &json, |b, json| {
            b.iter(|| ring::digest::digest(&ring::digest::SHA256, black_box(json.as_bytes())))
        });
    }
    group.finish();
}

fn inner<B>(
    answer: Bytes,
) -> impl Service<Request<B>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone
where
    B: Body + Send + 'static,
    B::Error: std::fmt::Debug,
{
    tower::service_fn(move |req: Request<B>| {
        let answer = answer.clone();
        async move {
            black_box(req.into_body().collect().await.unwrap());
            let mut response = Response::new(Full::new(answer));
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            response.extensions_mut().insert(Route::new("backend-a"));
            Ok(response)
        }
    })
}

fn post(body: &Bytes) -> Request<Full<Bytes>> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Full::new(body.clone()))
        .unwrap()
}

/// A `tools/call` whose arguments pad it to `size` bytes, with an optional requestState.
fn tool_call(size: usize, state: Option<&str>) -> Bytes {
    let state = state
        .map(|s| format!(r#","requestState":"{s}""#))
        .unwrap_or_default();
    let head = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t"{state},"arguments":{{"pad":""#
    );
    let tail = r#""}}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    Bytes::from(format!("{head}{}{tail}", "x".repeat(pad)))
}

fn complete_answer(size: usize) -> Bytes {
    let head =
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[{"type":"text","text":""#;
    let tail = r#""}]}}"#;
    Bytes::from(format!(
        "{head}{}{tail}",
        "y".repeat(size.saturating_sub(head.len() + tail.len()))
    ))
}

fn input_required_answer(size: usize) -> Bytes {
    let head = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}},"requestState":""#;
    let tail = r#""}}"#;
    Bytes::from(format!(
        "{head}{}{tail}",
        "s".repeat(size.saturating_sub(head.len() + tail.len()).min(4096))
    ))
}

/// Pass-through (nothing to open, nothing to seal) and the two rewriting paths, each against the
/// bare inner service in the same group.
fn service_paths(c: &mut Criterion) {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    for size in SIZES {
        let mut group = c.benchmark_group(format!("service/{size}B"));
        group.throughput(Throughput::Bytes(size as u64));

        // A request with nothing to change and a complete answer (the common case).
        let request = tool_call(size, None);
        let answer = complete_answer(size);
        let bare = inner::<Full<Bytes>>(answer.clone());
        let layered = layer.layer(inner(answer.clone()));
        group.bench_function("bare: tools/call, complete", |b| {
            b.iter(|| drain(now(bare.clone().oneshot(post(&request))).unwrap().into_body()))
        });
        group.bench_function("layer: tools/call, complete", |b| {
            b.iter(|| drain(now(layered.clone().oneshot(post(&request))).unwrap().into_body()))
        });

        // A method the layer only parses (tools/list): the answer is never read.
        let list = Bytes::from(
            String::from_utf8(tool_call(size, None).to_vec())
                .unwrap()
                .replace("tools/call", "tools/list"),
        );
        group.bench_function("bare: tools/list", |b| {
            b.iter(|| drain(now(bare.clone().oneshot(post(&list))).unwrap().into_body()))
        });
        group.bench_function("layer: tools/list", |b| {
            b.iter(|| drain(now(layered.clone().oneshot(post(&list))).unwrap().into_body()))
        });

        // Response path: an input_required answer sealed.
        let sealing = layer.layer(inner(input_required_answer(size)));
        let bare_sealing = inner::<Full<Bytes>>(input_required_answer(size));
        let first = tool_call(size, None);
        group.bench_function("bare: input_required answer", |b| {
            b.iter(|| {
                drain(
                    now(bare_sealing.clone().oneshot(post(&first)))
                        .unwrap()
                        .into_body(),
                )
            })
        });
        group.bench_function("layer: input_required answer sealed", |b| {
            b.iter(|| drain(now(sealing.clone().oneshot(post(&first))).unwrap().into_body()))
        });

        // Request path: a retry whose envelope is opened and whose body is rewritten.
        let answer = now(sealing.clone().oneshot(post(&first))).unwrap().into_body();
        let answer = now(answer.collect()).unwrap().to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        let envelope = value["result"]["requestState"].as_str().unwrap().to_owned();
        let retry = tool_call(size, Some(&envelope));
        group.bench_function("bare: retry", |b| {
            b.iter(|| drain(now(bare.clone().oneshot(post(&retry))).unwrap().into_body()))
        });
        group.bench_function("layer: retry opened", |b| {
            b.iter(|| drain(now(layered.clone().oneshot(post(&retry))).unwrap().into_body()))
        });
        group.finish();
    }
}

type Chunks = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn chunked_body(chunks: &[Bytes]) -> Chunks {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> =
        chunks.iter().cloned().map(|c| Ok(Frame::data(c))).collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

/// An SSE stream of `events` progress notifications cut into 16 KiB chunks, optionally ending with
/// an `input_required` result.
fn sse_stream(events: usize, with_result: bool) -> (Vec<Bytes>, usize) {
    let mut text = String::new();
    for i in 0..events {
        text.push_str(&format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"tok\",\"progress\":{i},\"total\":{events},\"message\":\"step {i} of the job\"}}}}\n\n"
        ));
        if i % 100 == 0 {
            text.push_str(": keep-alive\n\n");
        }
    }
    if with_result {
        text.push_str("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\",\"requestState\":\"st\"}}\n\n");
    }
    let bytes = Bytes::from(text);
    let chunks = bytes.chunks(16 * 1024).map(Bytes::copy_from_slice).collect();
    (chunks, bytes.len())
}

fn sse_service(
    chunks: Vec<Bytes>,
) -> impl Service<Request<tower_mrtr::RequestBody<Full<Bytes>>>, Response = Response<Chunks>, Error = Infallible>
+ Clone {
    tower::service_fn(move |_req: Request<tower_mrtr::RequestBody<Full<Bytes>>>| {
        let mut response = Response::new(chunked_body(&chunks));
        response
            .headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        response.extensions_mut().insert(Route::new("backend-a"));
        std::future::ready(Ok(response))
    })
}

/// Forwards a stream frame by frame, copying each into an output buffer as a server writing to
/// its socket does. The buffer is reused across iterations, like a connection's write buffer.
fn forward<B: Body<Data = Bytes>>(body: B, out: &mut Vec<u8>) -> usize
where
    B::Error: std::fmt::Debug,
{
    out.clear();
    let mut body = std::pin::pin!(body);
    while let Some(frame) = now(body.frame()) {
        if let Ok(data) = frame.unwrap().into_data() {
            out.extend_from_slice(&data);
        }
    }
    black_box(out.len())
}

fn sse(c: &mut Criterion) {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    let events = 2000;
    let mut group = c.benchmark_group("sse");
    for (name, with_result) in [
        ("passthrough stream", false),
        ("stream ending in input_required", true),
    ] {
        let (chunks, len) = sse_stream(events, with_result);
        let layered = layer.layer(sse_service(chunks.clone()));
        let request = tool_call(256, None);
        // Bytes per second; events per second = 2000 / time per iteration.
        group.throughput(Throughput::Bytes(len as u64));
        let mut out = Vec::with_capacity(len);
        group.bench_function(format!("{name}: plain forwarding"), |b| {
            b.iter(|| forward(chunked_body(&chunks), &mut out))
        });
        group.bench_function(format!("{name}: through the layer"), |b| {
            b.iter(|| {
                forward(
                    now(layered.clone().oneshot(post(&request))).unwrap().into_body(),
                    &mut out,
                )
            })
        });
    }
    group.finish();
}

criterion_group! { name = benches; config = config(); targets = envelope, arguments_digest, service_paths, sse }
criterion_main!(benches);
