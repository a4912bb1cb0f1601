//! The answer targets (`json_response`, `sse_response`): a fixed, well-formed request of a chosen
//! kind goes through the relay, and the inner service answers with the fuzzed bytes.
//!
//! Input (`crate::script`): an options line whose first word is the request kind
//! ([`KINDS`]) followed by options (`route=NAME`: the route the proxy reports; `default=NAME`:
//! the relay's default route; `status=N`; `limit=N`: response and event limits; `envlimit=N`;
//! `cut=A,B`: chunk boundaries; `stall=I,J`: the backend is not ready before chunk I, J;
//! `reset=N`: the connection fails after N bytes; `trailers`), the answer's header lines, a
//! blank line, and the answer. In the answer `@S@` becomes a backend state (a fresh marker
//! `BKSTATE-<n>.` each time) and `@T@` a backend task id (for task follow-ups, the id behind the
//! handle the request presented; otherwise a fresh `BKTASK-<n>.`).
//!
//! ```
//! use tower_mrtr_fuzz::answer::{Mode, run};
//!
//! run(b"call route=alpha\n\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"resultType\":\"input_required\",\"requestState\":\"@S@\"}}", Mode::Json);
//! ```

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use tower_mrtr::Route;
use tower_mrtr::envelope::{ArgumentsDigest, Binding, Purpose};

use crate::exec::Received;
use crate::lenient::{Node, json_readings, sse_events};
use crate::mint::{DEPLOY_ARGUMENTS, mints, placeholders};
use crate::oracle::{self, markers_in};
use crate::relay::{Exchange, Step, StepBody, exchange, relay_layer, with_principal};
use crate::script::{Script, chunks, find};

/// How the layer must treat the answer to a request kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Not inspected at all: passes through untouched.
    Passthrough,
    /// `input_required` sealed; for `tools/call`, task results sealed too.
    Seal,
    /// The backend's ids of the presented task handles shown as those handles.
    Tasks,
    /// A batch with requests that may need sealing: such answers fail closed.
    Batch,
    /// A request the layer did not read (not a POST): answers needing sealing fail closed.
    Inspect,
}

/// One kind of request the answer targets send.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// The word naming it in an input.
    pub name: &'static str,
    /// What the layer must do with its answer.
    pub plan: Plan,
    http: &'static str,
    body: &'static str,
    method: &'static str,
    target: Option<&'static str>,
    arguments: Option<&'static str>,
    /// The route the layer pins it to (a retry or a task follow-up).
    pinned: Option<&'static str>,
    /// Index of the mint whose handle it presents (task follow-ups).
    handle: Option<usize>,
    principal: Option<&'static str>,
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

const fn kind(name: &'static str, plan: Plan, body: &'static str, method: &'static str) -> Kind {
    Kind {
        name,
        plan,
        http: "POST",
        body,
        method,
        target: None,
        arguments: None,
        pinned: None,
        handle: None,
        principal: None,
    }
}

/// Every request kind; an input whose first word names none uses the first.
pub const KINDS: &[Kind] = &[
    Kind {
        target: Some("deploy"),
        arguments: Some(DEPLOY_ARGUMENTS),
        ..kind(
            "call",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"},META}}"#,
            "tools/call",
        )
    },
    Kind {
        target: Some("deploy"),
        arguments: Some(DEPLOY_ARGUMENTS),
        pinned: Some("alpha"),
        ..kind(
            "retry",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"},"inputResponses":{"ok":{"action":"accept"}},"requestState":"@E0@",META}}"#,
            "tools/call",
        )
    },
    Kind {
        target: Some("deploy"),
        arguments: Some(DEPLOY_ARGUMENTS),
        pinned: Some("beta"),
        ..kind(
            "retry-k1",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"},"requestState":"@E6@",META}}"#,
            "tools/call",
        )
    },
    Kind {
        target: Some("transfer"),
        arguments: Some(r#"{"amount":9007199254740993,"to":"bob"}"#),
        pinned: Some("beta"),
        ..kind(
            "retry-big",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"arguments":{"to":"bob","amount":9007199254740993},"name":"transfer","requestState":"@E10@"}}"#,
            "tools/call",
        )
    },
    Kind {
        target: Some("greet"),
        ..kind(
            "prompt",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"greet",META}}"#,
            "prompts/get",
        )
    },
    Kind {
        target: Some("greet"),
        pinned: Some("beta"),
        ..kind(
            "prompt-retry",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":11,"method":"prompts/get","params":{"name":"greet","requestState":"@E1@",META}}"#,
            "prompts/get",
        )
    },
    Kind {
        target: Some("file:///notes.txt"),
        ..kind(
            "read",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"file:///notes.txt",META}}"#,
            "resources/read",
        )
    },
    Kind {
        target: Some("file:///notes.txt"),
        pinned: Some("alpha"),
        ..kind(
            "read-retry",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":13,"method":"resources/read","params":{"uri":"file:///notes.txt","requestState":"@E2@",META}}"#,
            "resources/read",
        )
    },
    Kind {
        target: Some("deploy"),
        arguments: Some(DEPLOY_ARGUMENTS),
        principal: Some("alice"),
        ..kind(
            "as-alice",
            Plan::Seal,
            r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"},META}}"#,
            "tools/call",
        )
    },
    Kind {
        pinned: Some("alpha"),
        handle: Some(7),
        ..kind(
            "task-get",
            Plan::Tasks,
            r#"{"jsonrpc":"2.0","id":15,"method":"tasks/get","params":{"taskId":"@E7@",META}}"#,
            "tasks/get",
        )
    },
    Kind {
        pinned: Some("beta"),
        handle: Some(8),
        ..kind(
            "task-cancel",
            Plan::Tasks,
            r#"{"jsonrpc":"2.0","id":16,"method":"tasks/cancel","params":{"taskId":"@E8@",META}}"#,
            "tasks/cancel",
        )
    },
    Kind {
        pinned: Some("alpha"),
        handle: Some(7),
        ..kind(
            "listen",
            Plan::Tasks,
            r#"{"jsonrpc":"2.0","id":17,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["@E7@"]},META}}"#,
            "subscriptions/listen",
        )
    },
    kind(
        "list",
        Plan::Passthrough,
        r#"{"jsonrpc":"2.0","id":18,"method":"tools/list","params":{META}}"#,
        "tools/list",
    ),
    kind(
        "batch",
        Plan::Batch,
        r#"[{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":"deploy"}},{"jsonrpc":"2.0","id":20,"method":"tools/list"}]"#,
        "tools/call",
    ),
    kind(
        "batch-plain",
        Plan::Passthrough,
        r#"[{"jsonrpc":"2.0","id":21,"method":"tools/list"},{"jsonrpc":"2.0","id":22,"method":"ping"}]"#,
        "tools/list",
    ),
    Kind {
        http: "GET",
        ..kind("get", Plan::Inspect, "", "")
    },
];

impl Kind {
    fn body(&self) -> Vec<u8> {
        crate::mint::substitute(self.body.replace("META", META).as_bytes())
    }

    fn request(&self, body: StepBody) -> Request<StepBody> {
        let mut builder = Request::builder()
            .method(Method::from_bytes(self.http.as_bytes()).expect("a method"))
            .uri("/mcp")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28");
        if self.http == "POST" && !self.body.starts_with('[') {
            builder = builder.header("mcp-method", self.method);
            let name = match self.handle {
                Some(mint) if self.method != "subscriptions/listen" => Some(mints()[mint].envelope.as_str()),
                _ => self.target,
            };
            if let Some(name) = name {
                builder = builder.header("mcp-name", name);
            }
        }
        if let Some(principal) = self.principal {
            builder = builder.header(crate::mint::PRINCIPAL_HEADER, principal);
        }
        builder.body(body).expect("valid request")
    }

    /// The bindings the envelopes of its answer must open under.
    fn bindings(&self) -> Vec<(Purpose, Binding<'static>)> {
        let mut binding = Binding::new(self.method, self.target, self.principal);
        if matches!(self.method, "tools/call" | "prompts/get") {
            binding = binding.with_arguments(ArgumentsDigest::of(self.arguments).expect("canonical"));
        }
        vec![
            (Purpose::REQUEST_STATE, binding),
            (Purpose::TASK_HANDLE, Binding::new("tasks", None, self.principal)),
        ]
    }

    /// The backend's id behind the handle it presents.
    fn backend_task_id(&self) -> Option<String> {
        self.handle.and_then(|mint| mints()[mint].decoded_state())
    }
}

/// Which framing the target defaults to when the answer names no content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `application/json`.
    Json,
    /// `text/event-stream`, checked for chunking invariance.
    Sse,
}

/// The answer with its placeholders replaced: `@S@` by fresh state markers, `@T@` by task ids.
fn answer_bytes(template: &[u8], kind: &Kind) -> Vec<u8> {
    let mut out = Vec::with_capacity(template.len() + 64);
    let mut rest = template;
    let mut fresh = 0;
    let task_id = kind.backend_task_id();
    while let Some(at) = rest.iter().position(|&b| b == b'@') {
        out.extend_from_slice(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with(b"@S@") {
            out.extend_from_slice(format!("BKSTATE-{fresh}.").as_bytes());
            fresh += 1;
            rest = &rest[3..];
        } else if rest.starts_with(b"@T@") {
            match &task_id {
                Some(id) => out.extend_from_slice(id.as_bytes()),
                None => out.extend_from_slice(format!("BKTASK-{fresh}.").as_bytes()),
            }
            fresh += 1;
            rest = &rest[3..];
        } else {
            out.push(b'@');
            rest = &rest[1..];
        }
    }
    out.extend_from_slice(rest);
    crate::mint::substitute(&out)
}

/// The scripted answer, as the inner service sends it.
#[derive(Debug, Clone)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    bytes: Vec<u8>,
    steps: Vec<Step>,
    reset: Option<usize>,
    trailers: Option<HeaderMap>,
    route: Option<String>,
}

impl Answer {
    fn response(&self) -> Response<StepBody> {
        let mut response = Response::new(StepBody::new(self.steps.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        if let Some(route) = &self.route {
            response.extensions_mut().insert(Route::new(route.as_str()));
        }
        response
    }

    /// The same answer in one chunk, with no stalls.
    fn in_one_chunk(&self) -> Self {
        let mut steps = vec![Step::Data(Bytes::from(self.sent().to_vec()))];
        steps.extend(
            self.steps
                .iter()
                .filter(|s| matches!(s, Step::Error | Step::Trailers(_)))
                .cloned(),
        );
        Self {
            steps,
            ..self.clone()
        }
    }

    /// The bytes the backend sends before it ends or fails.
    fn sent(&self) -> &[u8] {
        &self.bytes[..self.reset.unwrap_or(self.bytes.len()).min(self.bytes.len())]
    }
}

fn scripted_answer(script: &Script, kind: &Kind, mode: Mode) -> Answer {
    let bytes = answer_bytes(&script.template, kind);
    let status = script
        .number("status")
        .and_then(|n| u16::try_from(n).ok())
        .and_then(|n| StatusCode::from_u16(n).ok())
        .unwrap_or(StatusCode::OK);
    let mut headers = HeaderMap::new();
    for (name, value) in &script.headers {
        headers.append(name, value.clone());
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        let default = match mode {
            Mode::Json => "application/json",
            Mode::Sse => "text/event-stream",
        };
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(default));
    }
    let reset = script.number("reset");
    let sent = &bytes[..reset.unwrap_or(bytes.len()).min(bytes.len())];
    let stalls = script.numbers("stall");
    let mut steps = Vec::new();
    for (i, chunk) in chunks(sent, &script.numbers("cut")).into_iter().enumerate() {
        if stalls.contains(&i) {
            steps.push(Step::Stall);
        }
        steps.push(Step::Data(chunk));
    }
    let trailers = script.flag("trailers").then(|| {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", HeaderValue::from_static("abc"));
        trailers
    });
    match (&reset, &trailers) {
        (Some(_), _) => steps.push(Step::Error),
        (None, Some(trailers)) => steps.push(Step::Trailers(trailers.clone())),
        (None, None) => {}
    }
    Answer {
        status,
        headers,
        bytes,
        steps,
        reset,
        trailers,
        route: script.value("route").map(str::to_owned),
    }
}

/// What the oracle makes of an input, for triage (`cargo run --example explain`): the answer
/// the backend sends and, per reading, the strings a client would take for a state or task id.
pub fn explain(input: &[u8], mode: Mode) -> String {
    let script = Script::parse(input);
    let kind = script
        .first()
        .and_then(|word| KINDS.iter().find(|k| k.name == word))
        .unwrap_or(&KINDS[0]);
    let answer = scripted_answer(&script, kind, mode);
    let sent = answer.clone();
    let out = exchange(
        &relay_layer(),
        kind.request(StepBody::full(&kind.body())),
        move |_| sent.response(),
    );
    format!(
        "kind: {}\nheaders: {:?}\nanswer: {:?}\nsensitive: {:?}\nreceived: {:?}",
        kind.name,
        answer.headers,
        String::from_utf8_lossy(answer.sent()),
        sensitive_strings(answer.sent(), &answer.headers, kind),
        String::from_utf8_lossy(&out.received.bytes()),
    )
}

/// Runs one input through the relay and checks every invariant (see the targets' docs).
pub fn run(input: &[u8], mode: Mode) {
    let script = Script::parse(input);
    let kind = script
        .first()
        .and_then(|word| KINDS.iter().find(|k| k.name == word))
        .unwrap_or(&KINDS[0]);
    let mut layer = relay_layer();
    if kind.principal.is_some() {
        layer = with_principal(layer, true);
    }
    let default_route = script.value("default").map(str::to_owned);
    if let Some(route) = &default_route {
        layer = layer.default_route(route.as_str());
    }
    let limit = script.number("limit");
    if let Some(limit) = limit {
        layer = layer.max_response_body(limit).max_sse_event(limit);
    }
    let envelope_limit = script.number("envlimit");
    if let Some(limit) = envelope_limit {
        layer = layer.max_envelope_len(limit);
    }
    let answer = scripted_answer(&script, kind, mode);
    let send = |answer: &Answer| {
        let answer = answer.clone();
        exchange(&layer, kind.request(StepBody::full(&kind.body())), move |_| {
            answer.response()
        })
    };
    let out = send(&answer);
    // The limit holds for the envelopes the request presents too (a retry's state, a task
    // handle: each is a placeholder in the body): a longer one is refused before the backend,
    // and there is no answer to judge.
    let presented = placeholders(kind.body.as_bytes())
        .into_iter()
        .map(|mint| mints()[mint].envelope.len())
        .max();
    if let (Some(limit), Some(len)) = (envelope_limit, presented)
        && len > limit
    {
        assert!(
            out.seen.is_empty(),
            "an envelope longer than the limit reached the backend"
        );
        assert_eq!(out.status, StatusCode::OK, "the refusal of a too-long envelope");
        let refusal = out.received.bytes();
        assert!(
            find(&refusal, b"-32602").is_some(),
            "the refusal of a too-long envelope: {refusal:?}"
        );
        return;
    }
    assert_eq!(
        out.seen.len(),
        1,
        "a well-formed request of kind {} was refused",
        kind.name
    );
    if kind.plan == Plan::Passthrough {
        assert_eq!(out.status, answer.status);
        assert_eq!(
            out.headers, answer.headers,
            "headers of an answer the layer need not read"
        );
        assert_eq!(
            out.received.bytes(),
            answer.sent(),
            "an answer the layer need not read changed"
        );
        assert_eq!(out.received.error, answer.reset.is_some());
        assert_eq!(
            out.received.trailers,
            answer.trailers.filter(|_| answer.reset.is_none())
        );
        return;
    }
    let received = out.received.bytes();
    check_hidden(input, kind, &answer, &out);
    let route = kind
        .pinned
        .map(str::to_owned)
        .or_else(|| answer.route.clone())
        .or(default_route.clone());
    let mut states: Vec<String> = sensitive_strings(answer.sent(), &answer.headers, kind)
        .into_iter()
        .flatten()
        .collect();
    states.extend(kind.backend_task_id());
    // A retry's answer is sealed as round 2 (every kind presents a mint of round 1).
    let round = if kind.pinned.is_some() { 2 } else { 1 };
    oracle::check_envelopes(
        &received,
        answer.sent(),
        &kind.bindings(),
        &states,
        route.map(Route::new).as_ref(),
        round,
    );
    // A body the layer changed has a Content-Length that fits it, or none (an unchanged one keeps
    // whatever the backend declared, right or wrong: the HTTP client in front of it checks that).
    if !out.received.error
        && received != answer.sent()
        && let Some(length) = out.headers.get(header::CONTENT_LENGTH)
    {
        assert_eq!(
            length.to_str().ok(),
            Some(received.len().to_string().as_str()),
            "Content-Length"
        );
    }
    check_identity(kind, &answer, &out, default_route.as_deref(), limit);
    if event_stream(&answer.headers) {
        // Chunk boundaries and stalls change nothing a client sees (envelopes aside: their
        // nonces are random).
        let again = send(&answer.in_one_chunk());
        assert_eq!(out.status, again.status);
        assert_eq!(out.headers, again.headers);
        assert_eq!(
            String::from_utf8_lossy(&oracle::without_envelopes(&received)),
            String::from_utf8_lossy(&oracle::without_envelopes(&again.received.bytes())),
            "the stream's chunk boundaries changed what the client sees"
        );
        assert_eq!(out.received.error, again.received.error);
        assert_eq!(out.received.trailers, again.received.trailers);
    }
}

/// No backend state the answer put where a lenient client would read it as one (an
/// `input_required`'s `requestState`, a task result's `taskId`, a task follow-up's task ids)
/// reaches the client.
fn check_hidden(input: &[u8], kind: &Kind, answer: &Answer, out: &Exchange) {
    if oracle::mentions_markers(input) {
        // The input writes markers itself (in the answer or its headers): it could put one
        // anywhere.
        return;
    }
    let per_interpretation = sensitive_strings(answer.sent(), &answer.headers, kind);
    let mut markers: Vec<String> = Vec::new();
    for strings in &per_interpretation {
        for marker in strings.iter().flat_map(|s| markers_in(s)) {
            if markers.contains(&marker) {
                continue;
            }
            // Checkable only if every occurrence in the answer is one a client could read as a
            // state: the same marker may also sit in a text, which is the backend's business.
            let occurrences = count(answer.sent(), marker.as_bytes());
            let sensitive = per_interpretation
                .iter()
                .map(|strings| {
                    strings
                        .iter()
                        .map(|s| markers_in(s).iter().filter(|m| **m == marker).count())
                        .sum::<usize>()
                })
                .max()
                .unwrap_or(0);
            if occurrences == sensitive {
                markers.push(marker);
            }
        }
    }
    oracle::assert_hidden(&markers, &out.headers, &out.received);
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    let mut n = 0;
    let mut rest = haystack;
    while let Some(at) = find(rest, needle) {
        n += 1;
        rest = &rest[at + needle.len()..];
    }
    n
}

/// For each way a client may read the answer (as JSON, as an event stream, per its content
/// types), the strings it would take for a backend state or task id.
fn sensitive_strings(answer: &[u8], headers: &HeaderMap, kind: &Kind) -> Vec<Vec<String>> {
    // (exactly `text/event-stream`, mentions `event-stream`) per `Content-Type`: the layer reads
    // an answer as a stream only for the exact media type, and as JSON otherwise; a lenient
    // client may take anything mentioning it for a stream. Both readings are judged.
    let types: Vec<(bool, bool)> = headers
        .get_all(header::CONTENT_TYPE)
        .iter()
        .map(|v| {
            let text = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
            let essence = text.split(';').next().unwrap_or_default().trim().to_owned();
            (essence == "text/event-stream", text.contains("event-stream"))
        })
        .collect();
    let mut interpretations = Vec::new();
    if types.is_empty() || types.iter().any(|(exact, _)| !exact) {
        let mut best: Vec<String> = Vec::new();
        for reading in json_readings(answer) {
            let found = sensitive_in(&reading, kind);
            if found.len() > best.len() {
                best = found;
            }
        }
        interpretations.push(best);
    }
    if types.iter().any(|(_, mentions)| *mentions) {
        let mut all = Vec::new();
        for event in sse_events(answer) {
            let Some(data) = event.data else {
                continue;
            };
            let mut best: Vec<String> = Vec::new();
            for reading in json_readings(&data) {
                let found = sensitive_in(&reading, kind);
                if found.len() > best.len() {
                    best = found;
                }
            }
            all.extend(best);
        }
        interpretations.push(all);
    }
    interpretations
}

/// The strings of one reading a client would take for a backend state or task id.
fn sensitive_in(reading: &Node, kind: &Kind) -> Vec<String> {
    let mut found = Vec::new();
    for message in oracle::messages(reading) {
        match kind.plan {
            Plan::Passthrough => {}
            Plan::Seal | Plan::Batch | Plan::Inspect => {
                for result in message.members("result") {
                    let types: Vec<&str> = result.members("resulttype").filter_map(Node::as_str).collect();
                    if types.contains(&"input_required") {
                        found.extend(
                            result
                                .members("requeststate")
                                .filter_map(Node::as_str)
                                .map(str::to_owned),
                        );
                    }
                    // Task results are sealed on tools/call only; elsewhere (the extension allows
                    // them on tools/call alone) they pass, and a client must reject them. The id
                    // under any member a client folds to `taskId` (`TaskId`, `taſkId`): the layer
                    // reads every task result (its pre-filter looks for the value `"task"`) and
                    // refuses such names.
                    if types.contains(&"task") && (kind.method == "tools/call" || kind.plan != Plan::Seal) {
                        found.extend(
                            result
                                .members("taskid")
                                .filter_map(Node::as_str)
                                .map(str::to_owned),
                        );
                    }
                }
            }
            Plan::Tasks => {
                let ids: Vec<String> = kind.backend_task_id().into_iter().collect();
                task_ids_in(message, &ids, &mut found);
            }
        }
    }
    found
}

/// Task ids among `ids` where task ids sit: `taskId` members and `taskIds` arrays, at any depth.
///
/// Exact member names only: in the answer to a task follow-up, a task id under a member named
/// like `taskId` but for case (`TaskId`) from a broken backend is passed on as is, a documented
/// limit (docs/security.md, "Parsing"): such a raw id does not open as a handle, so it is useless
/// to a client. Task results and states are different: they fail closed, and are checked folded.
fn task_ids_in(node: &Node, ids: &[String], found: &mut Vec<String>) {
    match node {
        Node::Object(members) => {
            for (name, value) in members {
                match value {
                    Node::Str(s) if name == "taskId" && ids.contains(s) => found.push(s.clone()),
                    Node::Array(items) if name == "taskIds" => {
                        for item in items {
                            if let Node::Str(s) = item
                                && ids.contains(s)
                            {
                                found.push(s.clone());
                            }
                        }
                    }
                    _ => {}
                }
                task_ids_in(value, ids, found);
            }
        }
        Node::Array(items) => items.iter().for_each(|item| task_ids_in(item, ids, found)),
        _ => {}
    }
}

/// Whether the layer streams the answer: its (first) content type is `text/event-stream`.
fn event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Whether every `Content-Type` names one media type: otherwise the layer and a client could
/// frame the body differently, and the answer fails closed.
fn one_media_type(headers: &HeaderMap) -> bool {
    let essence = |v: &HeaderValue| {
        let bytes = v.as_bytes().split(|&b| b == b';').next().unwrap_or_default();
        bytes.trim_ascii().to_ascii_lowercase()
    };
    let types: Vec<Vec<u8>> = headers
        .get_all(header::CONTENT_TYPE)
        .iter()
        .map(essence)
        .collect();
    types.windows(2).all(|w| w[0] == w[1])
}

fn identity_encoded(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONTENT_ENCODING).iter().all(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .map(<[u8]>::trim_ascii)
            .all(|coding| coding.is_empty() || coding.eq_ignore_ascii_case(b"identity"))
    })
}

/// An answer with nothing to change reaches the client byte for byte; one the layer must refuse
/// whatever it holds (compressed, from another backend than the pinned one) is a JSON-RPC error.
fn check_identity(
    kind: &Kind,
    answer: &Answer,
    out: &Exchange,
    default_route: Option<&str>,
    limit: Option<usize>,
) {
    let received: &Received = &out.received;
    let reported = answer.route.as_deref().or(default_route);
    let misrouted = kind
        .pinned
        .is_some_and(|pinned| reported.is_some_and(|r| r != pinned));
    if misrouted || !identity_encoded(&answer.headers) || !one_media_type(&answer.headers) {
        oracle::check_refusal(out.status, &out.headers, &received.bytes());
        return;
    }
    // The layer's pre-filters (`jsonrpc::TASK_NEEDLES`, `jsonrpc::RESPONSE_NEEDLES`): an answer
    // with none of them is not read at all, so it must pass byte for byte.
    let needles: &[&[u8]] = match kind.plan {
        Plan::Tasks => &[b"taskId", b"\\"],
        _ => &[b"input_required", b"\"task\"", b"\\u"],
    };
    let sent = answer.sent();
    if needles.iter().any(|n| find(sent, n).is_some()) {
        return;
    }
    let limit = limit.unwrap_or(if event_stream(&answer.headers) {
        tower_mrtr::DEFAULT_MAX_SSE_EVENT
    } else {
        tower_mrtr::DEFAULT_MAX_RESPONSE_BODY
    });
    if sent.len() > limit {
        return;
    }
    if event_stream(&answer.headers) {
        let bytes = received.bytes();
        if answer.reset.is_some() {
            assert!(sent.starts_with(&bytes), "a failed stream's prefix changed");
            assert!(received.error, "a backend failure must not look like a clean end");
        } else {
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                String::from_utf8_lossy(sent),
                "a stream with nothing to change changed"
            );
            assert_eq!(received.trailers, answer.trailers);
        }
    } else if answer.reset.is_none() {
        assert_eq!(received.bytes(), sent, "an answer with nothing to change changed");
        assert_eq!(out.status, answer.status);
    }
}
