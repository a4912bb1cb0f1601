//! The HTTP layers of the gateway: request ids, tracing, sensitive headers, and request
//! decompression in front of the MRTR layer.
//!
//! Two pieces, each a [`Layer`] with a nameable service type, so they wrap the gateway's
//! services whatever serves them (the gateway's own front; an axum router would do as well):
//!
//! * [`HttpLayer`], outermost, around everything the gateway answers (refusals included), one
//!   hand-written layer in tower-http's layer/service/future/body shape:
//!   1. `Authorization`, `Proxy-Authorization` and `Cookie` are marked sensitive before any
//!      layer can log them (`Debug` then prints `Sensitive`). The forwarder never sends them to
//!      a backend either.
//!   2. A request without `x-request-id` gets one ([`RequestIds`]: 32 hex digits, unique per
//!      process and replica, costing no system call). The forwarder passes the header on to the
//!      backend, so one id ties the client's request, the gateway's log lines (the span below
//!      carries it) and the backend's. A client's own id is kept.
//!   3. One debug-level span per request, `request` (`method`, `uri`, `request_id`), entered
//!      while the inner service is called, while its future is polled and while the answer's
//!      body is read, so every log line of the MRTR layer and the proxy is written in it; the
//!      debug events "started processing request" and "finished processing request" (`latency`,
//!      `status`). With debug logging off, a request pays a level check.
//!   4. The answer carries the same `x-request-id`, unless it has one of its own.
//! * [`DecompressRequestLayer`], inside [`HttpLayer`] and outside the gateway's front: a
//!   request body with `Content-Encoding: gzip` or `deflate` is decoded on the fly, so the MRTR
//!   layer reads and checks it instead of refusing it with 415. Decoded size is what counts
//!   against the layer's `max_request_body`: the layer reads through a length limit, and the
//!   decoder yields at most 4 KiB per read, so a gzip bomb is stopped a few KiB past the limit,
//!   having consumed only as much compressed input as that took (413, nothing forwarded). Any
//!   other encoding (`br`, `zstd`, a list like `gzip, gzip`) is passed through still encoded
//!   and refused by the MRTR layer (415, JSON-RPC `-32600`), as before. A request **without**
//!   `Content-Encoding` goes straight to the inner service: no wrapper body, no boxed answer.

use std::future::Future;
use std::hash::BuildHasher as _;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Bytes;
use futures_util::TryFutureExt;
use futures_util::future::{Either as EitherFuture, MapOk};
use http::header::Entry;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Either;
use pin_project_lite::pin_project;
use tower::Layer;
use tower_http::body::UnsyncBoxBody;
use tower_http::decompression::{DecompressionBody, RequestDecompression, RequestDecompressionLayer};
use tower_mrtr::BoxError;
use tower_service::Service;
use tracing::{Level, Span};

/// The request-id header, set on requests without one and copied onto answers.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Marks the credentials in `headers` sensitive: `Authorization`, `Proxy-Authorization` and
/// `Cookie`, every value of each.
fn mark_sensitive(headers: &mut HeaderMap) {
    // One pass comparing standard names is cheaper than hashing three names into the map.
    for (name, value) in headers.iter_mut() {
        if name == header::AUTHORIZATION || name == header::PROXY_AUTHORIZATION || name == header::COOKIE {
            value.set_sensitive(true);
        }
    }
}

/// The outermost layer; see the [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HttpLayer;

impl<S> Layer<S> for HttpLayer {
    type Service = Http<S>;

    fn layer(&self, inner: S) -> Http<S> {
        Http { inner }
    }
}

/// The service of [`HttpLayer`] around `S`.
#[derive(Clone, Debug)]
pub struct Http<S> {
    inner: S,
}

impl<S, B, ResBody> Service<Request<B>> for Http<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<HttpBody<ResBody>>;
    type Error = S::Error;
    type Future = HttpFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let headers = request.headers_mut();
        mark_sensitive(headers);
        let id = match headers.entry(REQUEST_ID) {
            Entry::Occupied(client) => client.get().clone(),
            Entry::Vacant(place) => place.insert(RequestIds::next()).clone(),
        };
        let span = request_span(&request, &id);
        let started = tracing::enabled!(Level::DEBUG).then(Instant::now);
        let inner = {
            let _entered = span.enter();
            tracing::debug!(parent: &span, "started processing request");
            self.inner.call(request)
        };
        HttpFuture {
            inner,
            span,
            id: Some(id),
            started,
        }
    }
}

/// The `request` span of `request`: method, URI and request id (never headers or bodies).
fn request_span<B>(request: &Request<B>, id: &HeaderValue) -> Span {
    tracing::debug_span!(
        "request",
        method = %request.method(),
        uri = %request.uri(),
        request_id = id.to_str().unwrap_or_default()
    )
}

pin_project! {
    /// The future of [`Http`]: the inner service's, polled in the request's span; it
    /// copies the request id onto the answer.
    pub struct HttpFuture<F> {
        #[pin]
        inner: F,
        span: Span,
        id: Option<HeaderValue>,
        // When the request arrived, for the "finished" event; `None` when debug logging is off.
        started: Option<Instant>,
    }
}

impl<F, ResBody, E> Future for HttpFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<HttpBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let span: &mut Span = this.span;
        let output = {
            let _entered = span.enter();
            ready!(this.inner.poll(cx))
        };
        let mut response = output?;
        if let (Entry::Vacant(place), Some(id)) = (response.headers_mut().entry(REQUEST_ID), this.id.take()) {
            place.insert(id);
        }
        if let Some(started) = *this.started {
            tracing::debug!(
                parent: &*span,
                latency = %format_args!("{} ms", started.elapsed().as_millis()),
                status = response.status().as_u16(),
                "finished processing request"
            );
        }
        let span = std::mem::replace(span, Span::none());
        Poll::Ready(Ok(response.map(|inner| HttpBody { inner, span })))
    }
}

pin_project! {
    /// The answer body of [`Http`]: the inner service's, read in the request's span.
    pub struct HttpBody<B> {
        #[pin]
        inner: B,
        span: Span,
    }
}

impl<B: Body> Body for HttpBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let _entered = this.span.enter();
        this.inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Makes request ids: 32 hex digits, the first 16 drawn at random once per process (so
/// replicas differ), the last 16 a per-process counter offset by a random key and scrambled by
/// a bijective mix (so ids within a process never repeat, and do not show at a glance how many
/// requests it served; they are not secret, and nothing trusts them).
///
/// Cheaper than tower-http's UUID v4, which asks the operating system for 16 random bytes per
/// request (a system call): these cost an atomic add, a few multiplications and a small write.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RequestIds;

impl RequestIds {
    /// The next id of this process.
    pub(crate) fn next() -> HeaderValue {
        static PROCESS: OnceLock<[u64; 2]> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let [prefix, offset] = *PROCESS.get_or_init(|| {
            let mut bytes = [0u8; 16];
            match getrandom::fill(&mut bytes) {
                Ok(()) => [0, 8].map(|at| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))),
                // Without the OS's randomness, std's hash keys (random themselves, seeded
                // once per process) still tell replicas apart.
                Err(_) => [0u64, 1].map(|n| std::hash::RandomState::new().hash_one((std::process::id(), n))),
            }
        });
        let serial = scramble(COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_add(offset));
        let mut text = [0u8; 32];
        text[..16].copy_from_slice(&hex(prefix));
        text[16..].copy_from_slice(&hex(serial));
        HeaderValue::from_bytes(&text).expect("hex digits are a valid header value")
    }
}

/// SplitMix64's finaliser: a bijection on `u64` (xor-shifts and odd multipliers), so distinct
/// counters give distinct ids.
fn scramble(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `value` as 16 lowercase hex digits.
fn hex(value: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    std::array::from_fn(|i| DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize])
}

/// Decodes compressed request bodies for the service it wraps; see the [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DecompressRequestLayer;

impl<S> Layer<S> for DecompressRequestLayer {
    type Service = DecompressRequest<S>;

    fn layer(&self, inner: S) -> DecompressRequest<S> {
        // gzip and deflate (the features compiled in); anything else reaches the MRTR layer
        // still encoded, which refuses it with a JSON-RPC error rather than tower-http's empty 415.
        let decompress = RequestDecompressionLayer::new().pass_through_unaccepted(true);
        DecompressRequest {
            inner: decompress.layer(inner),
        }
    }
}

/// The service of [`DecompressRequestLayer`]. Its inner service takes both the client's body
/// and the decoding one (the MRTR layer is generic over its request body).
#[derive(Clone, Debug)]
pub struct DecompressRequest<S> {
    inner: RequestDecompression<S>,
}

/// The answer body of [`DecompressRequest`]: the inner service's own (`Left`), or, for a request
/// that was decoded, tower-http's boxed one (`Right`).
pub(crate) type DecompressBody<B> = Either<B, UnsyncBoxBody<Bytes, BoxError>>;

type ToAnswer<B, R> = fn(Response<R>) -> Response<DecompressBody<B>>;

/// The future of [`DecompressRequest`].
pub(crate) type DecompressFuture<S, B, ResBody> = EitherFuture<
    MapOk<<S as Service<Request<B>>>::Future, ToAnswer<ResBody, ResBody>>,
    MapOk<
        <RequestDecompression<S> as Service<Request<B>>>::Future,
        ToAnswer<ResBody, UnsyncBoxBody<Bytes, BoxError>>,
    >,
>;

impl<S, B, ResBody> Service<Request<B>> for DecompressRequest<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>
        + Service<
            Request<DecompressionBody<B>>,
            Response = Response<ResBody>,
            Error = <S as Service<Request<B>>>::Error,
        >,
    B: Body,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<DecompressBody<ResBody>>;
    type Error = <S as Service<Request<B>>>::Error;
    type Future = DecompressFuture<S, B, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Either request type may come next; both are the same inner service.
        ready!(Service::<Request<B>>::poll_ready(self.inner.get_mut(), cx))?;
        Service::<Request<DecompressionBody<B>>>::poll_ready(self.inner.get_mut(), cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.headers().contains_key(header::CONTENT_ENCODING) {
            let decoded: ToAnswer<ResBody, _> = |answer| answer.map(Either::Right);
            EitherFuture::Right(self.inner.call(request).map_ok(decoded))
        } else {
            let plain: ToAnswer<ResBody, ResBody> = |answer| answer.map(Either::Left);
            EitherFuture::Left(self.inner.get_mut().call(request).map_ok(plain))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use flate2::Compression;
    use flate2::write::GzEncoder;
    use http::StatusCode;
    use http_body_util::{BodyExt, Full};
    use tower::ServiceExt;
    use tower_mrtr::{Keyring, MrtrLayer};

    use super::*;

    /// A request body of compressed chunks that counts how many bytes were pulled from it.
    struct Counted {
        chunks: std::vec::IntoIter<Bytes>,
        pulled: Arc<AtomicUsize>,
    }

    impl Body for Counted {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.chunks.next().map(|chunk| {
                self.pulled.fetch_add(chunk.len(), Ordering::SeqCst);
                Ok(Frame::data(chunk))
            }))
        }
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    /// A backend that records the bodies it receives, whatever their type (the decoded path
    /// and the plain one hand it different ones), and answers an empty tool list.
    #[derive(Clone, Default)]
    struct Recorder(Arc<std::sync::Mutex<Vec<Bytes>>>);

    impl<B> Service<Request<B>> for Recorder
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Debug,
    {
        type Response = Response<Full<Bytes>>;
        type Error = Infallible;
        type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<B>) -> Self::Future {
            let seen = self.0.clone();
            Box::pin(async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                seen.lock().unwrap().push(body);
                let answer = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
                Ok(Response::new(Full::new(Bytes::from_static(answer.as_bytes()))))
            })
        }
    }

    /// `MrtrLayer` (1 MiB limit) over `backend`, behind request decompression.
    fn relay(backend: Recorder) -> DecompressRequest<tower_mrtr::Mrtr<Recorder>> {
        let mrtr = MrtrLayer::new(Keyring::generate("k1").unwrap()).max_request_body(1 << 20);
        DecompressRequestLayer.layer(mrtr.layer(backend))
    }

    fn post(body: Counted, encoding: Option<&str>) -> Request<Counted> {
        let mut request = Request::post("/mcp").header(header::CONTENT_TYPE, "application/json");
        if let Some(encoding) = encoding {
            request = request.header(header::CONTENT_ENCODING, encoding);
        }
        request.body(body).unwrap()
    }

    fn chunks(data: &[u8], size: usize) -> (Counted, Arc<AtomicUsize>) {
        let pulled = Arc::new(AtomicUsize::new(0));
        let chunks: Vec<Bytes> = data.chunks(size).map(Bytes::copy_from_slice).collect();
        let body = Counted {
            chunks: chunks.into_iter(),
            pulled: pulled.clone(),
        };
        (body, pulled)
    }

    #[tokio::test]
    async fn a_gzip_body_reaches_the_layer_decoded() {
        let seen = Recorder::default();
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
        let (body, _) = chunks(&gzip(call), 7);
        let answer = relay(seen.clone())
            .oneshot(post(body, Some("gzip")))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert!(matches!(answer.body(), Either::Right(_)));
        assert_eq!(seen.0.lock().unwrap().as_slice(), [Bytes::from_static(call)]);
    }

    #[tokio::test]
    async fn a_plain_body_is_not_wrapped() {
        let seen = Recorder::default();
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
        let (body, _) = chunks(call, 1024);
        let answer = relay(seen.clone()).oneshot(post(body, None)).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert!(
            matches!(answer.body(), Either::Left(_)),
            "no decoder, no boxed answer"
        );
        assert_eq!(seen.0.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_unknown_encoding_is_refused_by_the_layer() {
        let seen = Recorder::default();
        let (body, _) = chunks(b"\x28\xb5\x2f\xfd", 4);
        let answer = relay(seen.clone())
            .oneshot(post(body, Some("zstd")))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let text = answer.into_body().collect().await.unwrap().to_bytes();
        assert!(std::str::from_utf8(&text).unwrap().contains("-32600"), "{text:?}");
        assert!(seen.0.lock().unwrap().is_empty());
    }

    /// A gzip bomb: 32 MiB of JSON whitespace in ~32 KiB. The layer's limit (1 MiB) applies to
    /// the decoded bytes, and decoding stops there: only a sliver of the compressed input is read.
    #[tokio::test]
    async fn a_gzip_bomb_stops_at_the_body_limit() {
        let seen = Recorder::default();
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        encoder
            .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}"#)
            .unwrap();
        let spaces = vec![b' '; 1 << 20];
        for _ in 0..32 {
            encoder.write_all(&spaces).unwrap();
        }
        encoder.write_all(b"}").unwrap();
        let compressed = encoder.finish().unwrap();
        let total = compressed.len();
        let (body, pulled) = chunks(&compressed, 4096);

        let answer = relay(seen.clone())
            .oneshot(post(body, Some("gzip")))
            .await
            .unwrap();

        assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(seen.0.lock().unwrap().is_empty(), "nothing forwarded");
        let pulled = pulled.load(Ordering::SeqCst);
        // 1 MiB decoded needs ~1 KiB of this input; allow a few chunks of read-ahead.
        assert!(pulled <= 4 * 4096, "read {pulled} of {total} compressed bytes");
    }

    /// A backend that checks what it would be sent (a request id; credentials no logger can
    /// print) and answers with a body of the id it got.
    async fn echo_id(request: Request<String>) -> Result<Response<String>, Infallible> {
        let headers = request.headers();
        for name in [header::AUTHORIZATION, header::PROXY_AUTHORIZATION, header::COOKIE] {
            assert!(
                headers.get_all(&name).iter().all(HeaderValue::is_sensitive),
                "{name}"
            );
        }
        assert!(!headers[header::CONTENT_TYPE].is_sensitive());
        let id = headers[&REQUEST_ID].to_str().unwrap().to_owned();
        Ok(Response::new(id))
    }

    fn credentialed(id: Option<&str>) -> Request<String> {
        let mut request = Request::post("/mcp")
            .header(header::AUTHORIZATION, "Bearer t")
            .header(header::PROXY_AUTHORIZATION, "Basic p")
            .header(header::COOKIE, "a=1")
            .header(header::COOKIE, "b=2")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(id) = id {
            request = request.header(&REQUEST_ID, id);
        }
        request.body(String::new()).unwrap()
    }

    #[tokio::test]
    async fn a_request_without_an_id_gets_one_at_the_backend_and_on_the_answer() {
        let service = HttpLayer.layer(tower::service_fn(echo_id));
        let answer = service.oneshot(credentialed(None)).await.unwrap();
        let made = answer.headers()[&REQUEST_ID].to_str().unwrap().to_owned();
        assert!(
            made.len() == 32 && made.bytes().all(|b| b.is_ascii_hexdigit()),
            "{made}"
        );
        let seen = answer.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(seen, made.as_bytes(), "the backend got the id the answer carries");
    }

    #[tokio::test]
    async fn a_clients_own_id_is_kept_and_an_answers_own_id_too() {
        let service = HttpLayer.layer(tower::service_fn(echo_id));
        let answer = service.oneshot(credentialed(Some("client-7"))).await.unwrap();
        assert_eq!(answer.headers()[&REQUEST_ID], "client-7");
        assert_eq!(answer.into_body().collect().await.unwrap().to_bytes(), "client-7");

        let backend = tower::service_fn(|_: Request<String>| async {
            let answer = Response::builder().header(&REQUEST_ID, "backend-9");
            Ok::<_, Infallible>(answer.body(String::new()).unwrap())
        });
        let answer = HttpLayer
            .layer(backend)
            .oneshot(credentialed(Some("client-7")))
            .await
            .unwrap();
        assert_eq!(
            answer.headers().get_all(&REQUEST_ID).iter().collect::<Vec<_>>(),
            ["backend-9"]
        );
    }

    /// A body that logs when it is read.
    struct Logging(Option<Bytes>);

    impl Body for Logging {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            tracing::debug!("reading the body");
            Poll::Ready(self.0.take().map(|data| Ok(Frame::data(data))))
        }
    }

    #[tokio::test]
    async fn inner_lines_are_written_in_the_request_span() {
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);

        let backend = tower::service_fn(|_: Request<String>| {
            tracing::debug!("calling the backend");
            async {
                tracing::debug!("awaiting the backend");
                Ok::<_, Infallible>(Response::new(Logging(Some(Bytes::from_static(b"done")))))
            }
        });
        let answer = HttpLayer
            .layer(backend)
            .oneshot(credentialed(Some("client-7")))
            .await
            .unwrap();
        assert_eq!(answer.into_body().collect().await.unwrap().to_bytes(), "done");

        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let span = r#"request{method=POST uri=/mcp request_id="client-7"}:"#;
        for line in [
            "started processing request",
            "calling the backend",
            "awaiting the backend",
            "finished processing request",
            "reading the body",
        ] {
            assert!(
                text.lines().any(|l| l.contains(span) && l.contains(line)),
                "{line:?} in the span:\n{text}"
            );
        }
        assert!(text.contains("status=200"), "{text}");
        assert!(!text.contains("Bearer"), "{text}");
    }

    #[tokio::test]
    async fn without_debug_logging_there_is_no_span_and_no_line() {
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::INFO)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let backend = tower::service_fn(|_: Request<String>| async {
            assert!(Span::current().is_none());
            Ok::<_, Infallible>(Response::new(String::new()))
        });
        let answer = HttpLayer
            .layer(backend)
            .oneshot(credentialed(None))
            .await
            .unwrap();
        assert!(answer.headers().contains_key(&REQUEST_ID));
        assert!(out.lock().unwrap().is_empty());
    }

    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn request_ids_differ_within_a_process_and_share_its_prefix() {
        let (first, second) = (RequestIds::next(), RequestIds::next());
        let (first, second) = (first.to_str().unwrap(), second.to_str().unwrap());
        assert_eq!(first.len(), 32);
        assert_ne!(first, second);
        assert_eq!(first[..16], second[..16]);
    }
}
