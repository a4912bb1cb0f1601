//! A client's `tools/call` reaches its backend once, however the backend answers it: HTTP 500,
//! 502 or 503 (with a JSON-RPC error or no body), HTTP 200 with a JSON-RPC error (`-32603`, as
//! JSON or SSE), a 400 whose error is not about a session, or the connection closed without an
//! answer. This holds for a 2026-07-28 backend, for an `initialize`-era backend in the gateway's
//! session with it, for a legacy client through the dual-era front, and for a stdio process that
//! fails the call or exits during it (and is started again). A tool may not be idempotent: only
//! the backend knows whether it ran, so the gateway never sends the request again.
//!
//! The one resend there is (`upstream/legacy.rs`) is the control: a legacy backend that refuses
//! the request unprocessed for a session it forgot (404, or a 400 whose error names the session)
//! gets it once more in a new session, and only once. Meanwhile the health probe runs every
//! 300 ms: it sends `server/discover` and `initialize`, never a client's request, and two more of
//! its rounds after each call bound the wait for anything the gateway might send late.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway, StdioCommand};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{call_tool_raw, message};
use mrtr_test_support::tls::TempDir;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// How often the gateways under test probe their backend.
const PROBE_INTERVAL: Duration = Duration::from_millis(300);

/// What a scripted backend answers.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// HTTP `status` with a JSON-RPC error (code, message) as its body, or with no body.
    Http(u16, Option<(i64, &'static str)>),
    /// HTTP 200 and an SSE stream whose one event is a JSON-RPC error `-32603`.
    SseError,
    /// HTTP 200 and a result: the tool ran.
    Done,
    /// No answer: the connection is closed once the request has been read.
    Drop,
}

/// The ordinary failures of a `tools/call` the backend received and may have run: none of them
/// may bring the same call to the backend again.
const FAULTS: &[(&str, Reply)] = &[
    (
        "HTTP 500, JSON-RPC error",
        Reply::Http(500, Some((-32603, "Internal error"))),
    ),
    ("HTTP 500, no body", Reply::Http(500, None)),
    (
        "HTTP 502, JSON-RPC error",
        Reply::Http(502, Some((-32603, "Bad gateway"))),
    ),
    ("HTTP 502, no body", Reply::Http(502, None)),
    (
        "HTTP 503, JSON-RPC error",
        Reply::Http(503, Some((-32000, "Service unavailable"))),
    ),
    ("HTTP 503, no body", Reply::Http(503, None)),
    (
        "HTTP 200, JSON-RPC error -32603",
        Reply::Http(200, Some((-32603, "Internal error"))),
    ),
    ("HTTP 200, SSE ending in -32603", Reply::SseError),
    (
        "HTTP 400, JSON-RPC error not about a session",
        Reply::Http(400, Some((-32602, "Invalid arguments for tool deploy"))),
    ),
    ("connection closed unanswered", Reply::Drop),
];

/// A legacy backend's answers to the call itself (under its own id) with the statuses of a
/// forgotten session: it read the request and may have run it, so they are final too.
const ANSWERED_IN_SESSION: &[(&str, Reply)] = &[
    (
        "HTTP 404 under the call's own id",
        Reply::Http(404, Some((-32002, "Resource not found"))),
    ),
    (
        "HTTP 400 under the call's own id, naming a session",
        Reply::Http(400, Some((-32602, "Invalid arguments: no session named prod"))),
    ),
];

/// What a gateway falling back between eras could take for "another era" or "the session is
/// gone". A 2026-07-28 backend has no session to forget, so these are as final as the faults.
const MODERN_REFUSALS: &[(&str, Reply)] = &[
    (
        "HTTP 404, JSON-RPC error",
        Reply::Http(404, Some((-32601, "Method not found"))),
    ),
    ("HTTP 404, no body", Reply::Http(404, None)),
    (
        "HTTP 400, server not initialized",
        Reply::Http(400, Some((-32000, "Bad Request: Server not initialized"))),
    ),
    (
        "HTTP 400, naming a session",
        Reply::Http(400, Some((-32000, "Bad Request: No valid session ID provided"))),
    ),
];

/// A legacy backend's refusal of a request in a session it does not know, as the transport
/// specification prescribes it.
const SESSION_NOT_FOUND: Reply = Reply::Http(404, Some((-32001, "Session not found")));

/// The same refusal as the TypeScript SDK 1.x's servers word it.
const NO_VALID_SESSION: Reply = Reply::Http(400, Some((-32000, "Bad Request: No valid session ID provided")));

/// Which era a scripted backend speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    /// 2026-07-28: answers `server/discover`.
    Modern,
    /// `initialize` era, a `Mcp-Session-Id` per session.
    Legacy,
    /// `initialize` era without sessions (a stateless legacy server).
    Stateless,
}

/// What a scripted backend received, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Discover,
    /// An `initialize` that opened this session.
    Opened(String),
    /// A `tools/call` in `session`; `processed` unless refused for a session the backend does
    /// not know.
    Call {
        session: Option<String>,
        processed: bool,
    },
}

/// A backend answering every `tools/call` with `reply`, recording everything it receives.
#[derive(Debug)]
struct Script {
    era: Era,
    reply: Reply,
    /// How it refuses a call in a session it does not know.
    refusal: Reply,
    /// How many of the coming calls find it restarted (every session forgotten) just before.
    forgets: AtomicUsize,
    known: Mutex<HashSet<String>>,
    opened: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

impl Script {
    fn new(era: Era, reply: Reply) -> Self {
        Self {
            era,
            reply,
            refusal: SESSION_NOT_FOUND,
            forgets: AtomicUsize::new(0),
            known: Mutex::default(),
            opened: AtomicUsize::new(0),
            seen: Mutex::default(),
        }
    }

    fn saw(&self, seen: Seen) {
        self.seen.lock().unwrap().push(seen);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Every `tools/call` received: (session, processed).
    fn calls(&self) -> Vec<(Option<String>, bool)> {
        self.seen()
            .into_iter()
            .filter_map(|seen| match seen {
                Seen::Call { session, processed } => Some((session, processed)),
                _ => None,
            })
            .collect()
    }

    fn discovers(&self) -> usize {
        self.seen().iter().filter(|s| **s == Seen::Discover).count()
    }
}

fn error(id: &Value, code: i64, text: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": text } }).to_string()
}

fn result(id: &Value, result: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string()
}

fn respond(status: u16, content_type: Option<&'static str>, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::builder().status(status);
    if let Some(content_type) = content_type {
        response = response.header("content-type", content_type);
    }
    response.body(Full::new(Bytes::from(body))).unwrap()
}

/// `reply` to the request `id`; `None` for [`Reply::Drop`].
fn render(reply: Reply, id: &Value) -> Option<Response<Full<Bytes>>> {
    Some(match reply {
        Reply::Http(status, Some((code, text))) => {
            respond(status, Some("application/json"), error(id, code, text))
        }
        Reply::Http(status, None) => respond(status, None, String::new()),
        Reply::SseError => {
            let event = format!("data: {}\n\n", error(id, -32603, "Internal error"));
            respond(200, Some("text/event-stream"), event)
        }
        Reply::Done => {
            let done = json!({ "resultType": "complete", "content": [{ "type": "text", "text": "done" }] });
            respond(200, Some("application/json"), result(id, done))
        }
        Reply::Drop => return None,
    })
}

async fn handle(
    request: Request<Incoming>,
    script: Arc<Script>,
    cut: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().clone();
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if method == Method::DELETE {
        if let Some(session) = &session {
            script.known.lock().unwrap().remove(session);
        }
        return Ok(respond(200, None, String::new()));
    }
    if method != Method::POST {
        return Ok(respond(405, None, String::new()));
    }
    let message: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = message["id"].clone();
    let json = Some("application/json");
    let answer = match message["method"].as_str().unwrap_or_default() {
        "server/discover" => {
            script.saw(Seen::Discover);
            if script.era == Era::Modern {
                let discovered = json!({
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": { "tools": {} },
                    "serverInfo": { "name": "counting", "version": "0" },
                });
                respond(200, json, result(&id, discovered))
            } else {
                // What the TypeScript SDK 1.x answers before `initialize`: the probe falls back.
                let refused = error(&Value::Null, -32000, "Bad Request: Server not initialized");
                respond(400, json, refused)
            }
        }
        "initialize" if script.era != Era::Modern => {
            let initialized = json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "counting", "version": "0" },
            });
            let mut response = respond(200, json, result(&id, initialized));
            if script.era == Era::Legacy {
                let session = format!("s-{}", script.opened.fetch_add(1, Ordering::SeqCst) + 1);
                script.known.lock().unwrap().insert(session.clone());
                script.saw(Seen::Opened(session.clone()));
                let value = HeaderValue::from_str(&session).unwrap();
                response.headers_mut().insert("mcp-session-id", value);
            }
            response
        }
        "tools/call" => {
            let processed = script.era != Era::Legacy || {
                let mut known = script.known.lock().unwrap();
                let restarted = script
                    .forgets
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if restarted {
                    known.clear();
                }
                session.as_ref().is_some_and(|s| known.contains(s))
            };
            script.saw(Seen::Call { session, processed });
            let rendered = if processed {
                render(script.reply, &id)
            } else {
                render(script.refusal, &Value::Null)
            };
            match rendered {
                Some(response) => response,
                None => {
                    // The connection's task drops the connection: closed, unanswered.
                    cut.notify_one();
                    std::future::pending().await
                }
            }
        }
        // Notifications (`notifications/initialized`).
        _ if id.is_null() => respond(202, None, String::new()),
        _ => respond(200, json, result(&id, json!({}))),
    };
    Ok(answer)
}

/// Serves `script` on 127.0.0.1; its MCP endpoint's URL.
async fn serve(script: Arc<Script>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let script = script.clone();
            tokio::spawn(async move {
                let cut = Arc::new(Notify::new());
                let service = {
                    let cut = cut.clone();
                    hyper::service::service_fn(move |request| handle(request, script.clone(), cut.clone()))
                };
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    () = cut.notified() => {}
                }
            });
        }
    });
    url
}

/// A gateway over the backend at `url`, once its probe found the backend's `era`.
async fn gateway_over(url: &str, era: &str) -> RunningGateway {
    let mut config = GatewayConfig::new(vec![Backend::new("crm", url).unwrap()]);
    config.settings.health_interval = Some(PositiveSeconds(PROBE_INTERVAL));
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the probe found the backend's era", || async {
        readiness.check().1["backends"]["crm"]["era"] == era
    })
    .await;
    gateway
}

/// Who makes the one call.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// A 2026-07-28 client.
    Modern,
    /// A 2025-11-25 client in a session with the gateway's dual-era front.
    Legacy,
}

/// One `tools/call` of `deploy` by `client`: its HTTP status, text and JSON-RPC response (`Null`
/// when there is none).
async fn call(client: Client, url: &str) -> (u16, String, Value) {
    let arguments = json!({ "env": "prod" });
    match client {
        Client::Modern => call_tool_raw(url, 7, "deploy", arguments, json!({}), &[])
            .await
            .unwrap(),
        Client::Legacy => {
            let post = |body: Value, session: Option<&str>| {
                let mut request = reqwest::Client::new()
                    .post(url)
                    .timeout(TIMEOUT)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream");
                if let Some(session) = session {
                    request = request
                        .header("mcp-session-id", session)
                        .header("mcp-protocol-version", "2025-11-25");
                }
                request.body(body.to_string()).send()
            };
            let initialize = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": { "name": "raw-legacy", "version": "0" } } });
            let opened = post(initialize, None).await.unwrap();
            let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_owned();
            let call = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": { "name": "deploy", "arguments": arguments } });
            let answer = post(call, Some(&session)).await.unwrap();
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap();
            let response = message(&text).unwrap_or(Value::Null);
            (status, text, response)
        }
    }
}

/// What one case came to: the backend's record and the client's answer.
#[derive(Debug)]
struct Outcome {
    seen: Vec<Seen>,
    calls: Vec<(Option<String>, bool)>,
    status: u16,
    response: Value,
}

/// Serves `script`, puts a gateway in front, has `client` call once and waits two probe rounds
/// more.
async fn one_call(script: Script, client: Client) -> Outcome {
    let script = Arc::new(script);
    let url = serve(script.clone()).await;
    let era = if script.era == Era::Modern {
        "modern"
    } else {
        "legacy"
    };
    let gateway = gateway_over(&url, era).await;
    assert!(
        script.calls().is_empty(),
        "the probe sent a tools/call: {:?}",
        script.seen()
    );
    let (status, _, response) = call(client, &gateway.url()).await;
    // Two more probe rounds: whatever the gateway might send late has had time to arrive.
    let probed = script.discovers();
    eventually(TIMEOUT, "two more probe rounds", || async {
        script.discovers() >= probed + 2
    })
    .await;
    gateway.shutdown().await.unwrap();
    Outcome {
        seen: script.seen(),
        calls: script.calls(),
        status,
        response,
    }
}

/// Runs `faults` concurrently, each against its own backend of `era` and gateway, and asserts
/// that each call reached the backend exactly once and came back to the client as an error.
async fn each_reaches_the_backend_once(era: Era, client: Client, faults: &[(&str, Reply)]) {
    let cases = faults.iter().map(|&(case, reply)| async move {
        let outcome = one_call(Script::new(era, reply), client).await;
        assert_eq!(
            outcome.calls.len(),
            1,
            "{era:?} backend, {client:?} client, {case}: the call reached the backend {} times: {outcome:?}",
            outcome.calls.len()
        );
        assert!(
            outcome.calls[0].1,
            "{case}: processed in its session: {outcome:?}"
        );
        assert!(
            outcome.response["result"].is_null(),
            "{case}: the client got no result the backend never gave: {outcome:?}"
        );
    });
    join_all(cases).await;
}

#[tokio::test]
async fn a_modern_backends_failures_are_never_sent_again() {
    let faults = [FAULTS, MODERN_REFUSALS].concat();
    each_reaches_the_backend_once(Era::Modern, Client::Modern, &faults).await;
}

#[tokio::test]
async fn a_legacy_backends_failures_in_its_session_are_never_sent_again() {
    let faults = [FAULTS, ANSWERED_IN_SESSION].concat();
    each_reaches_the_backend_once(Era::Legacy, Client::Modern, &faults).await;
    // Without a session there is none to forget: a 404 is the backend's answer.
    let no_session = [("HTTP 404 from a backend without sessions", SESSION_NOT_FOUND)];
    each_reaches_the_backend_once(Era::Stateless, Client::Modern, &no_session).await;
}

#[tokio::test]
async fn a_legacy_clients_call_through_the_dual_era_front_is_never_sent_again() {
    let faults = [FAULTS, MODERN_REFUSALS].concat();
    each_reaches_the_backend_once(Era::Modern, Client::Legacy, &faults).await;
}

#[tokio::test]
async fn a_call_refused_unprocessed_for_a_forgotten_session_is_sent_once_more_in_a_new_one() {
    let cases = [
        ("404", SESSION_NOT_FOUND),
        ("400 naming the session", NO_VALID_SESSION),
    ]
    .map(|(case, refusal)| async move {
        // The backend restarts just before the call arrives: it refuses it for its session,
        // then runs it in the session the gateway opens next.
        let mut script = Script::new(Era::Legacy, Reply::Done);
        script.refusal = refusal;
        script.forgets = AtomicUsize::new(1);
        let outcome = one_call(script, Client::Modern).await;
        let [(first, false), (second, true)] = &outcome.calls[..] else {
            panic!("{case}: refused unprocessed, then processed once: {outcome:?}");
        };
        assert_ne!(first, second, "{case}: {outcome:?}");
        // The second went in a session opened after the refusal of the first.
        let refused = outcome
            .seen
            .iter()
            .position(|s| matches!(s, Seen::Call { processed: false, .. }))
            .unwrap();
        let reopened = Seen::Opened(second.clone().unwrap());
        assert!(outcome.seen[refused..].contains(&reopened), "{case}: {outcome:?}");
        assert_eq!(
            (
                outcome.status,
                outcome.response["result"]["content"][0]["text"].as_str()
            ),
            (200, Some("done")),
            "{case}: the client got the one run's result: {outcome:?}"
        );
    });
    join_all(cases).await;

    // A backend that forgets every session gets the call twice, never a third time, and the
    // client its refusal.
    let script = Script::new(Era::Legacy, Reply::Done);
    script.forgets.store(usize::MAX, Ordering::SeqCst);
    let outcome = one_call(script, Client::Modern).await;
    assert!(
        matches!(&outcome.calls[..], [(_, false), (_, false)]),
        "{outcome:?}"
    );
    assert_eq!(outcome.status, 404, "{outcome:?}");
}

/// A modern stdio server (run by python3) that appends `PID discover` or `PID call NAME` to the
/// file its first argument names for every such request, flushed before it answers: `fail`
/// answers `-32603`, `exit` exits without answering, any other tool answers its PID.
const COUNTING_SERVER: &str = r#"
import json, os, sys

log = open(sys.argv[1], "a")
def record(what):
    log.write(f"{os.getpid()} {what}\n")
    log.flush()

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in iter(sys.stdin.readline, ""):
    message = json.loads(line)
    id, method = message.get("id"), message.get("method")
    if id is None or method is None:
        continue
    if method == "server/discover":
        record("discover")
        send({"jsonrpc": "2.0", "id": id, "result": {"supportedVersions": ["2026-07-28"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "counting", "version": "0"}}})
    elif method == "tools/call":
        name = message["params"]["name"]
        record("call " + name)
        if name == "exit":
            os._exit(1)
        if name == "fail":
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "Internal error"}})
        else:
            send({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete",
                  "content": [{"type": "text", "text": str(os.getpid())}]}})
    else:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
"#;

/// The absolute path of python3 (the child's environment holds `PATH`, not a shim's settings).
fn python3() -> String {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs the counting stdio server");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_stdio_process_failing_or_exiting_mid_call_never_gets_the_call_again() {
    let dir = TempDir::new("no-resend");
    let (server, log) = (dir.path("counting.py"), dir.path("seen.log"));
    std::fs::write(&server, COUNTING_SERVER).unwrap();
    let argv = [python3(), server.display().to_string(), log.display().to_string()];
    let backend = Backend::stdio("local", StdioCommand::new(argv).unwrap()).unwrap();
    let mut config = GatewayConfig::new(vec![backend]);
    config.settings.health_interval = Some(PositiveSeconds(PROBE_INTERVAL));
    let gateway = gateway(config, keyring()).await.unwrap();
    let readiness = gateway.readiness();
    eventually(TIMEOUT, "the process started", || async {
        readiness.check().1["backends"]["local"]["era"] == "modern"
    })
    .await;
    let url = gateway.url();
    let call = |tool: &'static str| {
        let url = url.clone();
        async move {
            call_tool_raw(&url, 9, tool, json!({}), json!({}), &[])
                .await
                .unwrap()
        }
    };

    let (_, text, failed) = call("fail").await;
    assert_eq!(failed["error"]["code"], -32603, "{text}");
    // The process reads its requests in order: one after it closes the window for a resend.
    let (_, _, pid) = call("pid").await;
    let pid = pid["result"]["content"][0]["text"].as_str().unwrap().to_owned();

    let (status, text, exited) = call("exit").await;
    assert!(exited["result"].is_null(), "{status} {text}");
    eventually(TIMEOUT, "the process started again", || async {
        let (status, _, answer) = call("pid").await;
        status == 200 && answer["result"]["content"][0]["text"].is_string()
    })
    .await;
    let (_, _, again) = call("pid").await;
    let again = again["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    assert_ne!(again, pid, "another process");
    gateway.shutdown().await.unwrap();

    let seen = std::fs::read_to_string(&log).unwrap();
    let count = |line: &str| seen.lines().filter(|l| *l == line).count();
    assert_eq!(count(&format!("{pid} call fail")), 1, "{seen}");
    assert_eq!(count(&format!("{pid} call exit")), 1, "{seen}");
    assert_eq!(
        seen.lines()
            .filter(|l| l.ends_with(" call fail") || l.ends_with(" call exit"))
            .count(),
        2,
        "nothing failed was sent to either process again: {seen}"
    );
    assert!(
        seen.lines().any(|l| *l == format!("{again} discover")),
        "the second process had its handshake: {seen}"
    );
}
