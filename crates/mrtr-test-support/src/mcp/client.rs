//! The HTTP client side of MCP 2026-07-28: one raw POST as a conformant client sends it ([`Call`],
//! [`send`]), a whole MRTR flow ([`drive`]), a request with exactly the bytes a test chooses
//! ([`raw`], [`raw_bytes`]), and the same requests as reqwest and hyper builders.

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use super::{HEADERS, body, fill_form, message, meta, with_client_info};
use crate::wait::TIMEOUT;

/// One raw MCP 2026-07-28 POST, as a conformant client would send it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The JSON-RPC method, also sent as `Mcp-Method`.
    pub method: String,
    /// The params, without `_meta` ([`send`] adds [`Call::meta`]).
    pub params: Value,
    /// The `_meta` sent with the params: by default [`meta`] with the client info
    /// `raw-test-client`.
    pub meta: Value,
    /// Extra headers, after the conformant ones.
    pub headers: Vec<(String, String)>,
}

impl Call {
    /// `method` with `params` (the `_meta` is added).
    pub fn new(method: &str, params: Value) -> Self {
        Self {
            method: method.to_owned(),
            params,
            meta: with_client_info(meta(), "raw-test-client", "0"),
            headers: Vec::new(),
        }
    }

    /// `tools/call` of `name` with `arguments`.
    pub fn tool(name: &str, arguments: Value) -> Self {
        Self::new("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// The same request as a retry: answers and state.
    pub fn retry(&self, input_responses: Value, state: &str) -> Self {
        let mut next = self.clone();
        next.params["inputResponses"] = input_responses;
        next.params["requestState"] = json!(state);
        next
    }

    /// With an extra header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// With `meta` as the `_meta` instead of the default.
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = meta;
        self
    }
}

/// The HTTP status and JSON-RPC message of an answer (JSON or SSE).
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON-RPC response (the last one, of an SSE stream).
    pub body: Value,
}

impl Reply {
    /// The JSON-RPC result (`null` for an error).
    pub fn result(&self) -> &Value {
        &self.body["result"]
    }

    /// The sealed `requestState` of an `input_required` result.
    pub fn state(&self) -> anyhow::Result<String> {
        let result = &self.body["result"];
        if result["resultType"] != "input_required" {
            bail!("not input_required: {}", self.body);
        }
        Ok(result["requestState"]
            .as_str()
            .context("no requestState")?
            .to_owned())
    }

    /// Answers to every input request: accepted elicitations with filled-in forms.
    pub fn answers(&self) -> Value {
        let mut answers = serde_json::Map::new();
        if let Some(requests) = self.body["result"]["inputRequests"].as_object() {
            for (key, request) in requests {
                let content = fill_form(&request["params"]["requestedSchema"]);
                answers.insert(key.clone(), json!({ "action": "accept", "content": content }));
            }
        }
        Value::Object(answers)
    }

    /// The JSON-RPC error code, if an error.
    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }

    /// The first text content block of a complete tool result.
    pub fn text(&self) -> String {
        self.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// A reqwest POST of `method` to `url` with [`HEADERS`] and `Mcp-Method`.
fn conformant_post(client: &reqwest::Client, url: &str, method: &str) -> reqwest::RequestBuilder {
    HEADERS
        .iter()
        .fold(client.post(url), |request, (header, value)| {
            request.header(*header, *value)
        })
        .header("mcp-method", method)
}

/// POSTs `call` to `url` with the 2026-07-28 headers and the call's `_meta`; `Mcp-Name` mirrors
/// `params.name`, `params.uri` or `params.taskId`.
pub async fn send(url: &str, call: &Call) -> anyhow::Result<Reply> {
    let mut params = call.params.clone();
    params["_meta"] = call.meta.clone();
    let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": call.method, "params": params });
    let mut request = conformant_post(&reqwest::Client::new(), url, &call.method);
    let name = params["name"]
        .as_str()
        .or(params["uri"].as_str())
        .or(params["taskId"].as_str());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    for (name, value) in &call.headers {
        request = request.header(name, value);
    }
    let response = tokio::time::timeout(TIMEOUT, request.json(&body).send()).await??;
    let status = response.status().as_u16();
    let text = tokio::time::timeout(TIMEOUT, response.text()).await??;
    let body = message(&text).with_context(|| format!("HTTP {status}"))?;
    Ok(Reply { status, body })
}

/// Drives `call` to completion through `urls` (round i goes to `urls[i % len]`), answering every
/// input request; returns the final reply and the number of input rounds.
pub async fn drive(urls: &[&str], call: &Call) -> anyhow::Result<(Reply, usize)> {
    let mut reply = send(urls[0], call).await?;
    let mut rounds = 0;
    while reply.body["result"]["resultType"] == "input_required" {
        rounds += 1;
        if rounds > 5 {
            bail!("too many rounds");
        }
        let next = call.retry(reply.answers(), &reply.state()?);
        reply = send(urls[rounds % urls.len()], &next).await?;
    }
    Ok((reply, rounds))
}

/// A raw POST (or other method) with exactly these headers and body; returns status, headers
/// and body text.
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, String)> {
    let (status, headers, body) = raw_bytes(method, url, headers, body.to_owned()).await?;
    Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
}

/// [`raw`] with any body (bytes that are not UTF-8, a stream) and the answer's bytes.
pub async fn raw_bytes(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Vec<u8>)> {
    let mut request = reqwest::Client::new().request(method, url).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(TIMEOUT, request.send()).await??;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = tokio::time::timeout(TIMEOUT, response.bytes()).await??;
    Ok((status, headers, body.to_vec()))
}

/// A reqwest POST of `method` with `params` (as [`body`] writes it) and the headers every
/// 2026-07-28 request carries (`Mcp-Name` from `params.name`), timing out after [`TIMEOUT`].
pub fn mcp_post(
    client: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
) -> reqwest::RequestBuilder {
    let mut request = conformant_post(client, url, method).timeout(TIMEOUT);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name.to_owned());
    }
    request.body(body(id, method, params))
}

/// A `tools/call` with reqwest (plain HTTP), returning the JSON-RPC response.
pub async fn call_tool(client: &reqwest::Client, url: &str, id: u64, params: Value) -> Value {
    let response = mcp_post(client, url, id, "tools/call", params)
        .send()
        .await
        .expect("the gateway answers");
    message(&response.text().await.expect("an answer")).unwrap()
}

/// A hyper POST of `body` to `url` with the headers every 2026-07-28 request carries, and
/// `Mcp-Name` if `name` is given.
pub fn mcp_request(url: &str, method: &str, name: Option<&str>, body: String) -> Request<Full<Bytes>> {
    let mut request = HEADERS
        .iter()
        .fold(Request::post(url), |request, (header, value)| {
            request.header(*header, *value)
        })
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request.body(Full::new(Bytes::from(body))).unwrap()
}

/// The whole body of a hyper response as text, read within [`TIMEOUT`].
pub async fn response_text(response: Response<hyper::body::Incoming>) -> String {
    let bytes = tokio::time::timeout(TIMEOUT, response.into_body().collect())
        .await
        .expect("the body ends in time")
        .expect("a readable body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A 2026-07-28 `tools/call` of `tool` with `arguments` under the id `id`, its `_meta` extended
/// by `extra_meta` (an object: a `progressToken`) and its headers by `extra_headers` (a
/// principal): the HTTP status, the answer's text, and its JSON-RPC response (`Null` when there
/// is none), for tests that look at all three.
pub async fn call_tool_raw(
    url: &str,
    id: u64,
    tool: &str,
    arguments: Value,
    extra_meta: Value,
    extra_headers: &[(&str, &str)],
) -> anyhow::Result<(u16, String, Value)> {
    let mut meta = meta();
    if let Value::Object(extra) = extra_meta {
        for (k, v) in extra {
            meta[k] = v;
        }
    }
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": { "name": tool, "arguments": arguments, "_meta": meta },
    });
    let mut request = conformant_post(&reqwest::Client::new(), url, "tools/call")
        .header("mcp-name", tool)
        .timeout(TIMEOUT)
        .body(body.to_string());
    for (name, value) in extra_headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    let response = message(&text).unwrap_or(Value::Null);
    Ok((status, text, response))
}

/// An SSE answer read one event's JSON-RPC message at a time, each within [`TIMEOUT`].
#[derive(Debug)]
pub struct EventStream {
    response: reqwest::Response,
    /// Bytes read and not yet taken as events (a chunk may end inside an event, or a character).
    buffer: Vec<u8>,
}

impl EventStream {
    /// The events of `response`'s body.
    pub fn of(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next event's message (comments and events without data skipped); an error when the
    /// stream ends or nothing comes within [`TIMEOUT`].
    pub async fn next(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let event = std::str::from_utf8(&event)?;
                let data: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
                if !data.is_empty() {
                    return Ok(serde_json::from_str(&data.join("\n"))?);
                }
                continue;
            }
            match tokio::time::timeout(TIMEOUT, self.response.chunk()).await?? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => bail!("stream ended"),
            }
        }
    }
}

/// A `subscriptions/listen` of `notifications` (the filter) with the id `id`, sent to `url` with
/// `headers` besides the 2026-07-28 ones: its answer's HTTP status and its stream of events (no
/// timeout on the whole answer, which stays open).
pub async fn listen(
    url: &str,
    id: u64,
    notifications: Value,
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, EventStream)> {
    let client = reqwest::Client::new();
    let mut request = conformant_post(&client, url, "subscriptions/listen");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let params = json!({ "notifications": notifications });
    let response = request
        .body(body(id, "subscriptions/listen", params))
        .send()
        .await?;
    Ok((response.status().as_u16(), EventStream::of(response)))
}
