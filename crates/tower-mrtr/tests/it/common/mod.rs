//! The library's own mocks for its behaviour tests: scripted backends built with
//! `tower::service_fn`, request builders and response readers, a clock moved by hand. What every
//! test crate shares (MCP's `_meta` and headers) comes from `mrtr-test-support`.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use mrtr_test_support::mcp::{HEADERS, meta};
use serde_json::Value;
use tower::{BoxError, Service, ServiceExt};
use tower_mrtr::{Clock, Continuation, McpRequestHead, PinnedRoute, RequestBody, Route, TaskHandle};

/// What the backend saw of one request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub pinned: Option<Route>,
    pub head: Option<McpRequestHead>,
    /// What the layer said the request continues (a retry, a task follow-up).
    pub continuation: Option<Continuation>,
    /// The task handle a task follow-up presented.
    pub handle: Option<TaskHandle>,
}

/// A backend whose answers are produced by a closure of the request body, reporting `route`.
#[derive(Clone)]
pub struct Backend {
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Backend {
    pub fn new() -> Self {
        Self {
            seen: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn last(&self) -> Seen {
        self.seen().pop().expect("backend was called")
    }

    /// A service answering with `answer(body)` as `application/json`, reporting `route`.
    pub fn service<F>(
        &self,
        route: Option<&'static str>,
        answer: F,
    ) -> impl Service<
        Request<RequestBody<Full<Bytes>>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static
    where
        F: Fn(&Value) -> String + Clone + Send + Sync + 'static,
    {
        let seen = self.seen.clone();
        tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
            let seen = seen.clone();
            let answer = answer.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                seen.lock().unwrap().push(Seen {
                    headers: parts.headers.clone(),
                    body: body.clone(),
                    pinned: parts.extensions.get::<PinnedRoute>().map(|p| p.0.clone()),
                    head: parts.extensions.get::<McpRequestHead>().cloned(),
                    continuation: parts.extensions.get::<Continuation>().cloned(),
                    handle: parts.extensions.get::<TaskHandle>().cloned(),
                });
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let mut response = Response::new(Full::new(Bytes::from(answer(&request))));
                response
                    .headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                if let Some(route) = route {
                    response.extensions_mut().insert(Route::new(route));
                }
                Ok::<_, Infallible>(response)
            }
        })
    }
}

/// An inner service that must never be called: proves a short-circuit.
pub fn must_not_be_called() -> impl Service<
    Request<RequestBody<Full<Bytes>>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        panic!("inner service should not be called");
        #[allow(unreachable_code)]
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
    })
}

/// A POST to `/mcp` with MCP's headers mirrored from the body.
pub fn post(body: &str) -> Request<Full<Bytes>> {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let mut builder = HEADERS
        .iter()
        .fold(Request::post("/mcp"), |builder, (name, value)| {
            builder.header(*name, *value)
        })
        .header("content-length", body.len());
    if let Some(method) = value["method"].as_str() {
        builder = builder.header("mcp-method", method);
        let name = value["params"]["name"]
            .as_str()
            .or(value["params"]["uri"].as_str());
        if let Some(name) = name {
            builder = builder.header("mcp-name", name);
        }
    }
    builder
        .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
        .unwrap()
}

/// A `tools/call` with the given id, name and optional requestState / inputResponses.
pub fn tool_call(id: u64, name: &str, state: Option<&str>) -> String {
    let mut params = serde_json::json!({
        "name": name,
        "arguments": {"repo": "acme/api"},
        "_meta": meta(),
    });
    if let Some(state) = state {
        params["requestState"] = Value::String(state.to_owned());
        params["inputResponses"] =
            serde_json::json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    }
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// An `input_required` answer to `request`, with `state` as the raw JSON of `requestState`
/// (`None` leaves it out).
pub fn input_required(request: &Value, state_json: Option<&str>) -> String {
    let state = state_json
        .map(|s| format!(r#","requestState":{s}"#))
        .unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"input_required","inputRequests":{{"confirm":{{"method":"elicitation/create","params":{{"message":"Sure?","requestedSchema":{{"type":"object","properties":{{}}}}}}}}}}{state}}}}}"#,
        request["id"]
    )
}

/// A complete answer to `request` whose text says which backend answered.
pub fn complete(request: &Value, who: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","content":[{{"type":"text","text":"done by {who}"}}]}}}}"#,
        request["id"]
    )
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// What the layer said it did ([`tower_mrtr::Outcome`]).
    pub outcome: Option<tower_mrtr::Outcome>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }

    /// The envelope handed to the client.
    pub fn envelope(&self) -> String {
        let v = self.json();
        v["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("no requestState in {v}"))
            .to_owned()
    }

    pub fn error_code(&self) -> Option<i64> {
        self.json()["error"]["code"].as_i64()
    }
}

/// Sends one request through `svc` and reads the whole answer.
pub async fn send<S, B>(svc: S, req: Request<B>) -> Answer
where
    S: Service<Request<B>, Response = Response<tower_mrtr::ResponseBody<Full<Bytes>>>>,
    S::Error: std::fmt::Debug,
{
    let response = svc.oneshot(req).await.expect("service error");
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e: BoxError| e)
        .expect("body error")
        .to_bytes();
    if let Some(len) = parts.headers.get("content-length") {
        assert_eq!(
            len.to_str().unwrap(),
            body.len().to_string(),
            "Content-Length must match the body"
        );
    }
    Answer {
        status: parts.status,
        outcome: parts.extensions.get::<tower_mrtr::Outcome>().copied(),
        headers: parts.headers,
        body,
    }
}

/// A clock the test moves by hand.
#[derive(Debug)]
pub struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        )))
    }

    pub fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
}
