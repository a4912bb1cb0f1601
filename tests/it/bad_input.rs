//! The bad-input table of `docs/reliability.md`, from both sides, through the real gateway on
//! 127.0.0.1: clients that send what no conformant client sends, and backends that answer what no
//! conformant server answers. The backends here are raw TCP servers scripted byte by byte (so
//! they can send what an HTTP library would refuse to: resets mid-body, header floods), one per
//! test, behind a single-backend gateway.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mrtr_gateway::{Backend, GatewayConfig, RunningGateway};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{body, mcp_headers, message, raw, raw_bytes};
use mrtr_test_support::wait::TIMEOUT;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a scripted backend does on a connection, in order.
#[derive(Clone, Debug)]
enum Act {
    /// Write these bytes.
    Send(Vec<u8>),
    /// Wait this long.
    Wait(Duration),
    /// Close the connection, whatever the response framing still promised.
    Reset,
}

type Script = Arc<dyn Fn(&Value) -> Vec<Act> + Send + Sync>;

/// A backend on 127.0.0.1 that reads each request (head and `Content-Length` body) and plays the
/// script for it; it records the JSON-RPC requests it received.
struct ScriptedBackend {
    url: String,
    seen: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedBackend {
    async fn start(script: impl Fn(&Value) -> Vec<Act> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let script: Script = Arc::new(script);
        let record = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, script.clone(), record.clone()));
            }
        });
        Self { url, seen, task }
    }

    fn requests(&self) -> Vec<Value> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

impl Drop for ScriptedBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut socket: TcpStream, script: Script, seen: Arc<Mutex<Vec<Value>>>) {
    loop {
        let Some(request) = read_request(&mut socket).await else {
            return;
        };
        seen.lock().expect("not poisoned").push(request.clone());
        for act in script(&request) {
            match act {
                Act::Send(bytes) => {
                    if socket.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Act::Wait(duration) => tokio::time::sleep(duration).await,
                Act::Reset => return,
            }
        }
    }
}

/// One HTTP/1.1 request's JSON body (`Value::Null` if it is not JSON); `None` at end of stream.
async fn read_request(socket: &mut TcpStream) -> Option<Value> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    Some(serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or(Value::Null))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A complete HTTP/1.1 response with a `Content-Length`.
fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len()).into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

fn json_answer(body: &str) -> Vec<Act> {
    vec![Act::Send(response(
        "200 OK",
        &[("content-type", "application/json")],
        body.as_bytes(),
    ))]
}

/// The head of a chunked `text/event-stream` answer.
const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// One chunk of a chunked body.
fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// The request's id, raw, for answers.
fn id(request: &Value) -> String {
    request["id"].to_string()
}

/// An `input_required` answer to `request` whose state is `state` (raw JSON).
fn input_required(request: &Value, state: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"input_required","inputRequests":{{"ok":{{"method":"elicitation/create","params":{{"message":"Sure?","requestedSchema":{{"type":"object","properties":{{}}}}}}}}}},"requestState":{state}}}}}"#,
        id(request)
    )
}

/// A progress notification as a complete SSE event.
const PROGRESS_EVENT: &[u8] =
    b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";

/// Request headers, as the client helpers take them.
type Headers = Vec<(&'static str, &'static str)>;

/// The secret a backend puts in its state: no client may ever see it.
const SECRET: &str = "backend-secret-state";

/// A gateway in front of `backend` alone, answering within `timeout`.
async fn gateway_for(backend: &ScriptedBackend, timeout: Duration) -> RunningGateway {
    let mut config = GatewayConfig::new(vec![Backend::new("solo", &backend.url).expect("backend")]);
    config.settings.backend_timeout = mrtr_gateway::Seconds(timeout);
    gateway(config, keyring()).await.expect("gateway")
}

/// A conformant `tools/call` of `deploy`: headers and body.
fn deploy(id: u64) -> (Headers, String) {
    let mut headers = mcp_headers("tools/call");
    headers.push(("mcp-name", "deploy"));
    (
        headers,
        body(
            id,
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": "prod"}}),
        ),
    )
}

/// The JSON-RPC error code of an answer, JSON or SSE (the last message with an error or result).
fn error_code(body: &[u8]) -> Option<i64> {
    last_message(body)["error"]["code"].as_i64()
}

/// The JSON-RPC message of an answer's bytes; `null` if there is none.
fn last_message(body: &[u8]) -> Value {
    message(&String::from_utf8_lossy(body)).unwrap_or(Value::Null)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    find(haystack, needle.as_bytes()).is_some()
}

// ---------------------------------------------------------------------------------------------
// The client side.
// ---------------------------------------------------------------------------------------------

/// Bodies the relay cannot read as exactly one JSON-RPC request are refused before any backend
/// sees them: a parser more lenient than the relay's could otherwise read a raw `requestState`.
#[tokio::test]
async fn bodies_the_relay_cannot_read_never_reach_the_backend() {
    let backend = ScriptedBackend::start(|r| {
        json_answer(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id(r)))
    })
    .await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (headers, good) = deploy(1);
    let retry = good.replacen(
        r#""name":"deploy""#,
        r#""name":"deploy","requestState":"raw-state""#,
        1,
    );
    let utf16: Vec<u8> = good.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let mut invalid_utf8 = good.clone().into_bytes();
    let at = find(&invalid_utf8, b"\"deploy\"").expect("the tool name");
    invalid_utf8[at + 1] = 0xFF;
    let cases: Vec<(&str, Vec<u8>, u16, i64)> = vec![
        ("malformed JSON", b"{\"jsonrpc\":\"2.0\",".to_vec(), 400, -32700),
        ("invalid UTF-8", invalid_utf8, 400, -32700),
        (
            "UTF-8 byte-order mark",
            [b"\xEF\xBB\xBF".as_slice(), good.as_bytes()].concat(),
            400,
            -32700,
        ),
        ("UTF-16", utf16, 400, -32700),
        ("trailing bytes", format!("{good} {{}}").into_bytes(), 400, -32700),
        ("empty body", Vec::new(), 400, -32700),
        // An array is a batch; one of no requests carries nothing to open: the relay lets it
        // by and the gateway refuses batches.
        (
            "an array nested 100 000 deep",
            format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            400,
            -32600,
        ),
        (
            "a JSON value that is no request",
            b"\"tools/call\"".to_vec(),
            400,
            -32600,
        ),
        (
            "duplicate member",
            good.replacen(r#""jsonrpc":"2.0""#, r#""method":"ping","jsonrpc":"2.0""#, 1)
                .into_bytes(),
            400,
            -32600,
        ),
        (
            "case-variant member",
            retry.replace("requestState", "RequestState").into_bytes(),
            400,
            -32600,
        ),
        (
            "Unicode case-variant member",
            retry.replace("requestState", "reque\u{17F}tState").into_bytes(),
            400,
            -32600,
        ),
        (
            "method not a string",
            good.replacen(r#""method":"tools/call""#, r#""method":7"#, 1)
                .into_bytes(),
            400,
            -32600,
        ),
        ("raw requestState", retry.clone().into_bytes(), 200, -32602),
        (
            "requestState on tools/list",
            body(2, "tools/list", json!({"requestState": "x"})).into_bytes(),
            200,
            -32602,
        ),
        (
            "batch carrying a requestState",
            format!("[{retry}]").into_bytes(),
            400,
            -32600,
        ),
    ];
    for (case, bytes, status, code) in cases {
        let headers = if case == "requestState on tools/list" {
            mcp_headers("tools/list")
        } else {
            headers.clone()
        };
        let (got_status, _, answer) = raw_bytes(Method::POST, &gateway.url(), &headers, bytes)
            .await
            .unwrap();
        assert_eq!(
            (got_status, error_code(&answer)),
            (status, Some(code)),
            "{case}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    assert!(
        backend.requests().is_empty(),
        "a backend saw {:?}",
        backend.requests()
    );
    // The same gateway relays a well-formed request.
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &good).await.unwrap();
    assert_eq!((status, error_code(answer.as_bytes())), (200, None), "{answer}");
    assert_eq!(backend.requests().len(), 1);
    gateway.shutdown().await.unwrap();
}

/// Arguments nested deeper than the canonical form allows (128 levels) are the backend's to
/// judge on a first round; an `input_required` answer to them cannot be bound to them and fails
/// closed, and a retry carrying them is refused before any backend.
#[tokio::test]
async fn deeply_nested_arguments() {
    let backend = confirming_backend().await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (headers, _) = deploy(1);
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let call = body(
        1,
        "tools/call",
        json!({"name": "deploy", "arguments": {"deep": 0}}),
    )
    .replace("0}", &format!("{deep}}}"));
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &call).await.unwrap();
    assert!(!answer.contains(SECRET));
    assert_eq!(
        (status, error_code(answer.as_bytes())),
        (200, Some(-32603)),
        "{answer}"
    );
    assert_eq!(backend.requests().len(), 1, "the first round reached the backend");
    let retry = call.replacen(
        r#""name":"deploy""#,
        r#""name":"deploy","requestState":"mrtr2.AAAA""#,
        1,
    );
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &retry).await.unwrap();
    assert_eq!(
        (status, error_code(answer.as_bytes())),
        (200, Some(-32602)),
        "{answer}"
    );
    assert!(answer.contains("nested deeper"), "the refusal says why: {answer}");
    assert_eq!(backend.requests().len(), 1);
    gateway.shutdown().await.unwrap();
}

/// Sends raw request bytes (a head the test writes itself) and reads until the server closes:
/// the status and the rest of the answer, as sent (chunked framing included).
async fn raw_http(gateway: &RunningGateway, request: &[u8]) -> (u16, Vec<u8>) {
    let exchange = async {
        let mut socket = TcpStream::connect(gateway.addr()).await.expect("connect");
        // A server may answer and close before it read everything: a failed write is fine.
        let _ = socket.write_all(request).await;
        let mut answer = Vec::new();
        let _ = socket.read_to_end(&mut answer).await;
        answer
    };
    let answer = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .expect("answer in time");
    let status = String::from_utf8_lossy(answer.get(9..12).unwrap_or_default())
        .parse()
        .unwrap_or(0);
    (status, answer)
}

/// The head of a POST to the gateway with the conformant headers of `tools/call deploy`.
fn post_head(gateway: &RunningGateway, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: deploy\r\n{extra}\r\n",
        gateway.addr()
    )
}

/// A body over the limit gets 413 whether it declares its length or streams chunked; a
/// compressed body gets 415. None reaches the backend.
#[tokio::test]
async fn oversized_and_compressed_bodies_are_refused() {
    let backend = ScriptedBackend::start(|r| {
        json_answer(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id(r)))
    })
    .await;
    let mut config = GatewayConfig::new(vec![Backend::new("solo", &backend.url).unwrap()]);
    config.settings.max_request_body = 64 * 1024;
    let gateway = gateway(config, keyring()).await.unwrap();
    let (headers, _) = deploy(1);
    let big = body(
        1,
        "tools/call",
        json!({"name": "deploy", "arguments": {"blob": "x".repeat(100_000)}}),
    );

    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &big).await.unwrap();
    assert_eq!(
        (status, error_code(answer.as_bytes())),
        (413, Some(-32600)),
        "{answer}"
    );

    let mut chunked = post_head(&gateway, "transfer-encoding: chunked\r\n").into_bytes();
    for piece in big.as_bytes().chunks(8192) {
        chunked.extend_from_slice(&chunk(piece));
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let (status, answer) = raw_http(&gateway, &chunked).await;
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&answer));
    assert!(contains(&answer, "-32600"));

    let (_, small) = deploy(2);
    // gzip and deflate are decoded before the relay (mrtr-gateway's `middleware`): a body that
    // does not decode is unreadable (400). Other codings are refused unread (415).
    for (encoding, status_expected) in [("gzip", 400), ("identity, br", 415), ("x-unknown", 415)] {
        let mut compressed = headers.clone();
        compressed.push(("content-encoding", encoding));
        let (status, _, answer) = raw(Method::POST, &gateway.url(), &compressed, &small)
            .await
            .unwrap();
        assert_eq!(
            (status, error_code(answer.as_bytes())),
            (status_expected, Some(-32600)),
            "{encoding}: {answer}"
        );
    }
    assert!(backend.requests().is_empty());
    gateway.shutdown().await.unwrap();
}

/// Header floods are refused by the HTTP server before the relay reads anything: today by
/// hyper's own limits (431). A configurable cap on header size and count is issue 11's overload
/// work.
#[tokio::test]
async fn header_floods_are_refused_before_the_relay() {
    let backend = ScriptedBackend::start(|r| {
        json_answer(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id(r)))
    })
    .await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (_, small) = deploy(1);
    let many: String = (0..500).map(|i| format!("x-flood-{i}: {i}\r\n")).collect();
    let long = format!("x-long: {}\r\n", "v".repeat(1024 * 1024));
    for (case, extra) in [("500 headers", many), ("a 1 MiB header", long)] {
        let mut request =
            post_head(&gateway, &format!("{extra}content-length: {}\r\n", small.len())).into_bytes();
        request.extend_from_slice(small.as_bytes());
        let (status, answer) = raw_http(&gateway, &request).await;
        assert_eq!(
            status,
            431,
            "{case}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
    }
    assert!(backend.requests().is_empty());
    gateway.shutdown().await.unwrap();
}

/// A backend that asks for confirmation once (state [`SECRET`]), then completes; a retry's
/// restored state is recorded with the request.
async fn confirming_backend() -> ScriptedBackend {
    ScriptedBackend::start(|r| {
        if r["params"]["requestState"].is_null() {
            json_answer(&input_required(r, &format!("\"{SECRET}\"")))
        } else {
            json_answer(&format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","content":[]}}}}"#,
                id(r)
            ))
        }
    })
    .await
}

/// Round one through `gateway`: the envelope the client holds.
async fn first_round(gateway: &RunningGateway) -> String {
    let (headers, call) = deploy(1);
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &call).await.unwrap();
    assert!(status == 200 && !answer.contains(SECRET), "{answer}");
    last_message(answer.as_bytes())["result"]["requestState"]
        .as_str()
        .expect("an envelope")
        .to_owned()
}

/// `tools/call deploy` as a retry carrying `state` (raw JSON).
fn retry_body(id: u64, state: &str) -> String {
    let mut call: Value = serde_json::from_str(&deploy(id).1).unwrap();
    call["params"]["requestState"] = serde_json::from_str(state).unwrap();
    call["params"]["inputResponses"] = json!({"ok": {"action": "accept", "content": {}}});
    call.to_string()
}

/// Envelopes a client forged, cut short, edited, padded or swapped for another type never reach
/// the backend: each gets the same -32602.
#[tokio::test]
async fn forged_truncated_and_malformed_envelopes() {
    let backend = confirming_backend().await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let envelope = first_round(&gateway).await;
    let (headers, _) = deploy(2);
    let mut tampered = envelope.clone().into_bytes();
    let last = tampered.len() - 5;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let bad: Vec<(&str, String)> = vec![
        (
            "forged",
            json!(format!("mrtr2.{}", "QUJD".repeat(20))).to_string(),
        ),
        ("truncated", json!(&envelope[..envelope.len() - 10]).to_string()),
        ("one character changed", json!(tampered).to_string()),
        ("padded", json!(format!("{envelope}=")).to_string()),
        (
            "old version prefix",
            json!(envelope.replacen("mrtr4.", "mrtr1.", 1)).to_string(),
        ),
        (
            "over the length limit",
            json!(format!("mrtr2.{}", "A".repeat(70 * 1024))).to_string(),
        ),
        ("a number", "5".to_owned()),
        ("null", "null".to_owned()),
        ("an object", json!({"state": envelope}).to_string()),
    ];
    for (case, state) in bad {
        let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &retry_body(2, &state))
            .await
            .unwrap();
        assert_eq!(
            (status, error_code(answer.as_bytes())),
            (200, Some(-32602)),
            "{case}: {answer}"
        );
    }
    assert_eq!(backend.requests().len(), 1, "only round one reached the backend");
    // The genuine envelope still opens, and the backend gets its own state back.
    let (status, _, answer) = raw(
        Method::POST,
        &gateway.url(),
        &headers,
        &retry_body(3, &json!(envelope).to_string()),
    )
    .await
    .unwrap();
    assert_eq!((status, error_code(answer.as_bytes())), (200, None), "{answer}");
    assert_eq!(backend.requests()[1]["params"]["requestState"], SECRET);
    gateway.shutdown().await.unwrap();
}

/// Headers a conformant client sends, or must mirror from the body: missing, wrong or
/// repeated. The gateway checks them on every request (a first round here: 400 with its own
/// error); on a retry, which the relay rewrites, the relay checks every value of `Mcp-Method`
/// and `Mcp-Name` itself, before opening anything.
#[tokio::test]
async fn wrong_missing_and_repeated_mcp_headers() {
    let backend = confirming_backend().await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let envelope = first_round(&gateway).await;
    let (headers, call) = deploy(2);
    let retry = retry_body(2, &json!(envelope).to_string());
    let without = |name: &str| -> Headers { headers.iter().filter(|(n, _)| *n != name).copied().collect() };
    let with = |extra: (&'static str, &'static str)| {
        let mut h = headers.clone();
        h.push(extra);
        h
    };
    let replaced = |name: &'static str, value: &'static str| -> Headers {
        headers
            .iter()
            .map(|(n, v)| if *n == name { (name, value) } else { (*n, *v) })
            .collect()
    };
    let cases: Vec<(&str, Headers, &String, i64)> = vec![
        (
            "no MCP-Protocol-Version",
            without("mcp-protocol-version"),
            &call,
            -32020,
        ),
        (
            "an unsupported version",
            replaced("mcp-protocol-version", "2024-11-05"),
            &call,
            -32022,
        ),
        ("no Mcp-Method", without("mcp-method"), &call, -32020),
        ("no Mcp-Name", without("mcp-name"), &call, -32020),
        (
            "Mcp-Method disagreeing",
            replaced("mcp-method", "prompts/get"),
            &call,
            -32020,
        ),
        (
            "Mcp-Name disagreeing",
            replaced("mcp-name", "drop_database"),
            &call,
            -32020,
        ),
        (
            "a retry, Mcp-Method disagreeing",
            replaced("mcp-method", "prompts/get"),
            &retry,
            -32020,
        ),
        (
            "a retry, Mcp-Name disagreeing",
            replaced("mcp-name", "drop_database"),
            &retry,
            -32020,
        ),
        (
            "a retry, Mcp-Name repeated, the second disagreeing",
            with(("mcp-name", "drop_database")),
            &retry,
            -32020,
        ),
        (
            "a retry, Mcp-Method repeated, the second disagreeing",
            with(("mcp-method", "tools/list")),
            &retry,
            -32020,
        ),
    ];
    for (case, headers, body, code) in cases {
        let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, body).await.unwrap();
        assert_eq!(
            (status, error_code(answer.as_bytes())),
            (400, Some(code)),
            "{case}: {answer}"
        );
    }
    assert_eq!(backend.requests().len(), 1, "only round one reached the backend");
    gateway.shutdown().await.unwrap();
}

/// A first round (which the relay forwards unchanged) with `Mcp-Method` repeated, the second
/// value disagreeing, is refused: checking one value and forwarding both would let a backend
/// read the other one.
#[tokio::test]
async fn repeated_mcp_headers_on_a_first_round_are_refused() {
    let backend = confirming_backend().await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (mut headers, call) = deploy(1);
    headers.push(("mcp-method", "tools/list"));
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &call).await.unwrap();
    assert_eq!(
        (status, error_code(answer.as_bytes())),
        (400, Some(-32020)),
        "{answer}"
    );
    assert!(backend.requests().is_empty());
    gateway.shutdown().await.unwrap();
}

/// A retry whose `MCP-Protocol-Version` is missing gets the gateway's 400 with -32020, saying
/// what to fix, not the relay's generic -32603 (the gateway reports its refusal of a pinned
/// request under the pinned route, which the relay requires of every answer to a retry).
#[tokio::test]
async fn a_retry_with_a_bad_protocol_version_is_told_so() {
    let backend = confirming_backend().await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let envelope = first_round(&gateway).await;
    let (headers, _) = deploy(2);
    let headers: Vec<_> = headers
        .into_iter()
        .filter(|(n, _)| *n != "mcp-protocol-version")
        .collect();
    let retry = retry_body(2, &json!(envelope).to_string());
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &headers, &retry).await.unwrap();
    assert_eq!(
        (status, error_code(answer.as_bytes())),
        (400, Some(-32020)),
        "{answer}"
    );
    let mut unsupported = headers.clone();
    unsupported.push(("mcp-protocol-version", "2099-01-01"));
    let (status, _, answer) = raw(Method::POST, &gateway.url(), &unsupported, &retry)
        .await
        .unwrap();
    assert_eq!(
        (status, error_code(answer.as_bytes())),
        (400, Some(-32022)),
        "{answer}"
    );
    assert_eq!(backend.requests().len(), 1, "only round one reached the backend");
    gateway.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The backend side.
// ---------------------------------------------------------------------------------------------

/// A backend answering each `tools/call` with what `answers` gives for its `arguments.case`.
async fn backend_by_case(answers: fn(&str, &Value) -> Vec<Act>) -> ScriptedBackend {
    ScriptedBackend::start(move |r| answers(r["params"]["arguments"]["case"].as_str().unwrap_or(""), r)).await
}

/// `tools/call deploy` with `arguments.case`; the answer's status, headers and body.
async fn call_case(gateway: &RunningGateway, case: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let (headers, _) = deploy(1);
    let call = body(
        1,
        "tools/call",
        json!({"name": "deploy", "arguments": {"case": case}}),
    );
    raw_bytes(Method::POST, &gateway.url(), &headers, call)
        .await
        .unwrap()
}

/// Malformed answers: one that mentions `input_required` and cannot be read fails closed
/// (-32603, never the raw state); one that holds nothing to seal passes as the backend sent it.
#[tokio::test]
async fn malformed_backend_answers() {
    fn answers(case: &str, r: &Value) -> Vec<Act> {
        let sealed = input_required(r, &format!("\"{SECRET}\""));
        match case {
            "truncated" => json_answer(&sealed[..sealed.len() - 5]),
            "trailing bytes" => json_answer(&format!("{sealed} trailing")),
            "byte-order mark" => json_answer(&format!("\u{feff}{sealed}")),
            "state not a string" => json_answer(&input_required(r, &format!("{{\"s\":\"{SECRET}\"}}"))),
            "duplicate state" => json_answer(
                &sealed
                    .replace("}}", &format!(r#"}},"requestState":"{SECRET}""#))
                    .replacen(r#"}},"requestState":"backend-secret-state""#, "}", 1),
            ),
            "case-variant member" => json_answer(&sealed.replace("requestState", "RequestState")),
            "not JSON-RPC" => vec![Act::Send(response(
                "500 Internal Server Error",
                &[("content-type", "text/html")],
                b"<html>oops</html>",
            ))],
            _ => json_answer(r#"{"jsonrpc":"2.0","id":1,"result":"#),
        }
    }
    let backend = backend_by_case(answers).await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    for case in [
        "truncated",
        "trailing bytes",
        "byte-order mark",
        "state not a string",
        "duplicate state",
        "case-variant member",
    ] {
        let (status, _, answer) = call_case(&gateway, case).await;
        assert!(
            !contains(&answer, SECRET),
            "{case}: {}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(
            (status, error_code(&answer)),
            (200, Some(-32603)),
            "{case}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    let (status, headers, answer) = call_case(&gateway, "not JSON-RPC").await;
    assert_eq!((status, &answer[..]), (500, &b"<html>oops</html>"[..]));
    assert_eq!(headers["content-type"], "text/html");
    let (status, _, answer) = call_case(&gateway, "cut short, nothing to seal").await;
    assert_eq!(
        (status, &answer[..]),
        (200, &br#"{"jsonrpc":"2.0","id":1,"result":"#[..])
    );
    gateway.shutdown().await.unwrap();
}

/// Content types: any answer that is not a stream is read (whatever it claims to be) and
/// sealed; one with two different content types fails closed; a stream that holds no event
/// gives a client no message.
#[tokio::test]
async fn wrong_content_types() {
    fn answers(case: &str, r: &Value) -> Vec<Act> {
        let sealed = input_required(r, &format!("\"{SECRET}\""));
        let types: &[(&str, &str)] = match case {
            "text/html" => &[("content-type", "text/html")],
            "none" => &[],
            "two" => &[
                ("content-type", "text/event-stream"),
                ("content-type", "application/json"),
            ],
            _ => &[("content-type", "text/event-stream")],
        };
        vec![Act::Send(response("200 OK", types, sealed.as_bytes()))]
    }
    let backend = backend_by_case(answers).await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    for case in ["text/html", "none"] {
        let (status, _, answer) = call_case(&gateway, case).await;
        let message = last_message(&answer);
        assert!(
            !contains(&answer, SECRET),
            "{case}: {}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(status, 200);
        assert!(
            message["result"]["requestState"]
                .as_str()
                .is_some_and(|s| s.starts_with("mrtr4.")),
            "{case}: {message}"
        );
    }
    let (status, _, answer) = call_case(&gateway, "two").await;
    assert!(!contains(&answer, SECRET));
    assert_eq!((status, error_code(&answer)), (200, Some(-32603)));
    // A JSON body under text/event-stream holds no `data:` line: an SSE client reads no message
    // from it. The bytes pass as the backend sent them, raw state included (docs/reliability.md
    // says why that is left so).
    let (status, headers, answer) = call_case(&gateway, "stream without events").await;
    assert_eq!(
        (status, headers["content-type"].to_str().unwrap()),
        (200, "text/event-stream")
    );
    let events = String::from_utf8_lossy(&answer);
    assert_eq!(
        events.lines().filter(|l| l.starts_with("data")).count(),
        0,
        "{events}"
    );
    gateway.shutdown().await.unwrap();
}

/// A `tools/call` answer over `max_response_body` and an SSE event over `max_sse_event` (4 MiB
/// each by default) fail closed; the events before the oversized one are delivered.
#[tokio::test]
async fn oversized_backend_answers_fail_closed() {
    fn answers(case: &str, r: &Value) -> Vec<Act> {
        let padding = "p".repeat(5 * 1024 * 1024);
        match case {
            "json" => json_answer(&input_required(r, &format!("\"{SECRET}\"")).replacen(
                r#""resultType""#,
                &format!(r#""padding":"{padding}","resultType""#),
                1,
            )),
            _ => {
                let huge = format!(
                    "data: {}\n\n",
                    input_required(r, &format!("\"{SECRET}\"")).replacen("Sure?", &padding, 1)
                );
                vec![
                    Act::Send(SSE_HEAD.to_vec()),
                    Act::Send(chunk(PROGRESS_EVENT)),
                    Act::Send(chunk(huge.as_bytes())),
                    Act::Send(b"0\r\n\r\n".to_vec()),
                ]
            }
        }
    }
    let backend = backend_by_case(answers).await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (status, _, answer) = call_case(&gateway, "json").await;
    assert!(!contains(&answer, SECRET));
    assert_eq!((status, error_code(&answer)), (200, Some(-32603)));
    let (status, _, answer) = call_case(&gateway, "sse").await;
    assert!(
        !contains(&answer, SECRET) && answer.len() < 1024 * 1024,
        "{} bytes",
        answer.len()
    );
    assert!(
        contains(&answer, "notifications/progress"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!((status, error_code(&answer)), (200, Some(-32603)));
    gateway.shutdown().await.unwrap();
}

/// A backend that sends no answer head within the backend timeout, or closes the connection
/// before answering, or answers with a head hyper refuses (too many or too large headers), gives
/// the client a 502 with a JSON-RPC error.
#[tokio::test]
async fn backends_that_stall_reset_or_flood_headers_before_answering() {
    fn answers(case: &str, r: &Value) -> Vec<Act> {
        let ok = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, id(r));
        match case {
            "stall" => vec![Act::Wait(Duration::from_secs(30))],
            "reset" => vec![Act::Reset],
            "garbage" => vec![Act::Send(b"NOT HTTP AT ALL\r\n\r\n".to_vec()), Act::Reset],
            "headers" => {
                let many: Vec<(String, String)> = (0..500)
                    .map(|i| (format!("x-flood-{i}"), i.to_string()))
                    .collect();
                let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                vec![Act::Send(response("200 OK", &many, ok.as_bytes())), Act::Reset]
            }
            _ => {
                let long = "v".repeat(1024 * 1024);
                vec![
                    Act::Send(response("200 OK", &[("x-long", &long)], ok.as_bytes())),
                    Act::Reset,
                ]
            }
        }
    }
    let backend = backend_by_case(answers).await;
    let gateway = gateway_for(&backend, Duration::from_secs(1)).await;
    for case in ["stall", "reset", "garbage", "headers", "a 1 MiB header"] {
        let (status, _, answer) = call_case(&gateway, case).await;
        assert_eq!(
            (status, error_code(&answer)),
            (502, Some(-32603)),
            "{case}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    gateway.shutdown().await.unwrap();
}

/// A connection reset in the middle of an answer: a JSON answer to `tools/call` fails closed;
/// a stream ends with an error at the client (never a clean end), after what was complete.
#[tokio::test]
async fn connections_reset_mid_answer() {
    fn answers(case: &str, r: &Value) -> Vec<Act> {
        let sealed = input_required(r, &format!("\"{SECRET}\""));
        match case {
            "json" => {
                let mut head = response(
                    "200 OK",
                    &[("content-type", "application/json")],
                    sealed.as_bytes(),
                );
                head.truncate(head.len() - sealed.len() + 60);
                vec![Act::Send(head), Act::Reset]
            }
            _ => vec![
                Act::Send(SSE_HEAD.to_vec()),
                Act::Send(chunk(PROGRESS_EVENT)),
                Act::Send(chunk(
                    &format!("data: {}", &sealed[..sealed.len() - 3]).into_bytes(),
                )),
                Act::Reset,
            ],
        }
    }
    let backend = backend_by_case(answers).await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (status, _, answer) = call_case(&gateway, "json").await;
    assert!(!contains(&answer, SECRET));
    assert_eq!(
        (status, error_code(&answer)),
        (200, Some(-32603)),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    let (headers, _) = deploy(1);
    let call = body(
        1,
        "tools/call",
        json!({"name": "deploy", "arguments": {"case": "sse"}}),
    );
    let mut request = reqwest::Client::new().post(gateway.url()).body(call);
    for (name, value) in &headers {
        request = request.header(*name, *value);
    }
    let mut response = tokio::time::timeout(TIMEOUT, request.send())
        .await
        .unwrap()
        .unwrap();
    let mut received = Vec::new();
    let ended = loop {
        match tokio::time::timeout(TIMEOUT, response.chunk()).await.unwrap() {
            Ok(Some(bytes)) => received.extend_from_slice(&bytes),
            Ok(None) => break "cleanly",
            Err(_) => break "with an error",
        }
    };
    // The gateway ends the stream with a JSON-RPC error event saying why (issue 15), then
    // cleanly: the client learns that its request failed rather than seeing a broken stream.
    let text = String::from_utf8_lossy(&received);
    assert_eq!(ended, "cleanly", "{text}");
    assert!(contains(&received, "notifications/progress") && !contains(&received, SECRET));
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
    let error: Value = serde_json::from_str(last.trim_start_matches("data: ")).expect("a last event of JSON");
    assert_eq!(error["id"], 1, "{text}");
    assert_eq!(error["error"]["code"], -32603, "{text}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the connection failed"),
        "{text}"
    );
    gateway.shutdown().await.unwrap();
}

/// A compressed answer cannot be inspected: it fails closed.
#[tokio::test]
async fn compressed_backend_answers_fail_closed() {
    let backend = ScriptedBackend::start(|_| {
        vec![Act::Send(response(
            "200 OK",
            &[("content-type", "application/json"), ("content-encoding", "gzip")],
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
        ))]
    })
    .await;
    let gateway = gateway_for(&backend, TIMEOUT).await;
    let (status, _, answer) = call_case(&gateway, "gzip").await;
    assert_eq!((status, error_code(&answer)), (200, Some(-32603)));
    gateway.shutdown().await.unwrap();
}

/// `input_required` answering a method that must not have one (`tools/list`) is a backend bug
/// the relay does not correct (docs/security.md): with one backend it passes through as sent;
/// with several, the gateway's list merge finds no list in it and leaves that backend out.
#[tokio::test]
async fn input_required_to_a_method_that_must_not_have_one() {
    let buggy = ScriptedBackend::start(|r| json_answer(&input_required(r, &format!("\"{SECRET}\"")))).await;
    let single = gateway_for(&buggy, TIMEOUT).await;
    let list = body(1, "tools/list", json!({}));
    let (status, _, answer) = raw(Method::POST, &single.url(), &mcp_headers("tools/list"), &list)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        last_message(answer.as_bytes())["result"]["resultType"],
        "input_required"
    );
    assert_eq!(last_message(answer.as_bytes())["result"]["requestState"], SECRET);
    single.shutdown().await.unwrap();

    let sound = ScriptedBackend::start(|r| {
        json_answer(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"tools":[{{"name":"deploy","inputSchema":{{"type":"object"}}}}]}}}}"#,
            id(r)
        ))
    })
    .await;
    let config = GatewayConfig::new(vec![
        Backend::new("buggy", &buggy.url).unwrap(),
        Backend::new("sound", &sound.url).unwrap(),
    ]);
    let merging = gateway(config, keyring()).await.unwrap();
    let (status, _, answer) = raw(Method::POST, &merging.url(), &mcp_headers("tools/list"), &list)
        .await
        .unwrap();
    let message = last_message(answer.as_bytes());
    assert!(status == 200 && !answer.contains(SECRET), "{answer}");
    assert_eq!(
        message["result"]["tools"],
        json!([{"name": "deploy", "inputSchema": {"type": "object"}}])
    );
    merging.shutdown().await.unwrap();
}
