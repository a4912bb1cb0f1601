//! A three-round MRTR flow over real HTTP on 127.0.0.1, every backend round an SSE stream:
//! client → hyper server [MrtrLayer → forwarding proxy] → hyper client → hyper SSE backend.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use tokio::net::TcpListener;
use tower::{BoxError, ServiceBuilder};
use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};

/// Serves a tower service over HTTP/1 on an ephemeral loopback port until the test ends.
async fn serve<S, B>(service: S) -> SocketAddr
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The backend: asks for input twice (states `s1`, `s2`), then completes. Every answer is an SSE
/// stream of several chunks: a keep-alive, a progress notification, then the result.
#[derive(Clone, Default)]
struct SseBackend {
    seen_states: Arc<Mutex<Vec<Option<String>>>>,
}

type SseResponse =
    Response<StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>>;

impl SseBackend {
    async fn handle(self, req: Request<Incoming>) -> Result<SseResponse, Infallible> {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let request: Value = serde_json::from_slice(&body).unwrap();
        let state = request["params"]["requestState"].as_str().map(str::to_owned);
        self.seen_states.lock().unwrap().push(state.clone());
        let id = &request["id"];
        let result = match state.as_deref() {
            None => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"a":{{"method":"roots/list"}}}},"requestState":"s1"}}}}"#
            ),
            Some("s1") => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"b":{{"method":"roots/list"}}}},"requestState":"s2"}}}}"#
            ),
            Some(other) => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"finished after {other}"}}]}}}}"#
            ),
        };
        let chunks = vec![
            ": keep-alive\n\n".to_owned(),
            r#"data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}"#.to_owned() + "\n\n",
            format!("event: message\ndata: {}", &result[..20]),
            format!("{}\n\n", &result[20..]),
        ];
        let frames: Vec<_> = chunks
            .into_iter()
            .map(|c| Ok(Frame::data(Bytes::from(c))))
            .collect();
        let mut response = Response::new(StreamBody::new(futures_util::stream::iter(frames)));
        response
            .headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        Ok(response)
    }
}

#[tokio::test]
async fn three_sse_rounds_through_real_http() {
    let backend = SseBackend::default();
    let backend_addr = {
        let backend = backend.clone();
        serve(tower::service_fn(move |req| backend.clone().handle(req))).await
    };

    // The proxy: forwards to the one backend and reports its route.
    let client: Client<_, RequestBody<Incoming>> = Client::builder(TokioExecutor::new()).build_http();
    let proxy = tower::service_fn(move |req: Request<RequestBody<Incoming>>| {
        let client = client.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            parts.uri = format!("http://{backend_addr}/mcp").parse().unwrap();
            parts.headers.remove(http::header::HOST);
            let mut response = client.request(Request::from_parts(parts, body)).await?;
            response.extensions_mut().insert(Route::new("sse-backend"));
            Ok::<_, BoxError>(response)
        }
    });
    let gateway = ServiceBuilder::new()
        .layer(MrtrLayer::new(Keyring::generate("k1").unwrap()))
        .service(proxy);
    let gateway_addr = serve(gateway).await;

    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut state: Option<String> = None;
    let mut final_text = None;
    for round in 0..3 {
        let mut params = serde_json::json!({"name": "deploy", "arguments": {}});
        if let Some(s) = &state {
            params["requestState"] = s.clone().into();
            params["inputResponses"] = serde_json::json!({});
        }
        let body =
            serde_json::json!({"jsonrpc":"2.0","id": round + 1,"method":"tools/call","params": params})
                .to_string();
        let request = Request::post(format!("http://{gateway_addr}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "deploy")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let text =
            String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
        assert!(
            text.starts_with(
                ": keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\""
            ),
            "{text}"
        );
        assert!(
            !text.contains("\"s1\"") && !text.contains("\"s2\""),
            "raw backend state leaked: {text}"
        );
        let result_line = text.lines().find(|l| l.contains("\"result\"")).unwrap();
        let result: Value = serde_json::from_str(result_line.trim_start_matches("data: ")).unwrap();
        assert_eq!(result["id"], round + 1);
        match result["result"]["resultType"].as_str().unwrap() {
            "input_required" => state = Some(result["result"]["requestState"].as_str().unwrap().to_owned()),
            _ => {
                final_text = Some(
                    result["result"]["content"][0]["text"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
            }
        }
    }
    assert_eq!(final_text.as_deref(), Some("finished after s2"));
    assert_eq!(
        *backend.seen_states.lock().unwrap(),
        vec![None, Some("s1".to_owned()), Some("s2".to_owned())]
    );
}
