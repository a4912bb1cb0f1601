//! The invariants the request and answer targets check. Each function panics (a libFuzzer
//! crash) with a message saying which promise was broken.

use http::{HeaderMap, Method, header};
use tower_mrtr::Route;
use tower_mrtr::envelope::{ArgumentsDigest, Binding, Purpose, Sealer};
use tower_mrtr::mcp_headers::decode_header_value;

use crate::MARKERS;
use crate::exec::Received;
use crate::lenient::{Node, json_readings, raw_members, sse_events, string_tokens};
use crate::mint::{PRINCIPAL_HEADER, mint_of_state, mints, now, relay_keyring};
use crate::relay::Seen;

/// Task follow-up methods (Tasks extension): `params.taskId` is a task handle.
pub const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// The request-side settings of the relay under test that decide how envelopes are bound.
#[derive(Debug, Clone, Copy)]
pub struct Binds {
    /// The relay binds the `x-user` header as principal.
    pub principal: bool,
    /// The relay binds `tools/call` and `prompts/get` arguments (its default).
    pub arguments: bool,
    /// The relay's audience.
    pub audience: Option<&'static str>,
    /// The relay's cap on rounds: a state of this round or later never reaches the backend.
    pub max_rounds: u16,
}

impl Binds {
    /// The principal the relay binds for a request with these headers.
    pub fn principal_of<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        if !self.principal {
            return None;
        }
        headers.get(PRINCIPAL_HEADER).and_then(|v| v.to_str().ok())
    }
}

/// The messages of a reading: the value itself, or the elements of a batch.
pub fn messages(reading: &Node) -> Vec<&Node> {
    match reading {
        Node::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// A request that reached the inner service carries no `requestState` or task id that the
/// backend did not mint, each opened for exactly this request and pinned to the backend that
/// minted it; a request in which nothing was opened arrives byte for byte as the client sent it.
///
/// Only POSTs are judged: the relay forwards other methods unread, by design (MCP requests are
/// POSTs; the gateway answers others itself).
pub fn check_forwarded(seen: &Seen, client_headers: &HeaderMap, client_body: &[u8], binds: Binds) {
    if seen.method != Method::POST {
        return;
    }
    for reading in json_readings(&seen.body) {
        for message in messages(&reading) {
            check_states(seen, message, binds);
        }
    }
    match &seen.pinned {
        None => {
            assert_eq!(
                seen.body, client_body,
                "a request in which nothing was opened reached the backend changed"
            );
            assert_eq!(
                &seen.headers, client_headers,
                "headers of an unchanged request changed"
            );
        }
        Some(_) => {
            let (client_middle, seen_middle) = difference(client_body, &seen.body);
            let mut added = seen_middle.to_vec();
            for mint in mints() {
                if let Some(state) = mint.state {
                    added = replace_all(&added, state.as_bytes(), b"");
                }
            }
            assert!(
                contains(client_middle, &added),
                "the relay added more than restored states: {:?}",
                String::from_utf8_lossy(seen_middle)
            );
            let declared = seen
                .headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok());
            assert_eq!(
                declared,
                Some(seen.body.len().to_string().as_str()),
                "Content-Length of a rewrite"
            );
        }
    }
}

/// Every `requestState` and task id a lenient backend could read in `message`.
fn check_states(seen: &Seen, message: &Node, binds: Binds) {
    let principal = binds.principal_of(&seen.headers);
    let methods: Vec<&str> = message.members("method").filter_map(Node::as_str).collect();
    if methods.is_empty() {
        // Not a request (a response, or malformed): no backend acts on its params.
        return;
    }
    for params in message.members("params") {
        for value in params.members("requeststate") {
            let state = value
                .as_str()
                .unwrap_or_else(|| panic!("a non-string requestState reached the backend: {value:?}"));
            let mint = mint_of_state(Purpose::REQUEST_STATE, state)
                .unwrap_or_else(|| panic!("an unverified requestState reached the backend: {state:?}"));
            assert!(mint.valid, "an expired or retired envelope was opened: {mint:?}");
            assert!(
                mint.round < binds.max_rounds,
                "a state of round {} reached the backend past the cap of {}",
                mint.round,
                binds.max_rounds
            );
            assert_eq!(mint.audience, binds.audience, "opened for another audience");
            // Name and identity (a v2 twin has neither an identity nor its mint one).
            assert_eq!(
                seen.pinned.as_ref(),
                Some(&mint.route()),
                "a restored state not pinned to its backend"
            );
            assert_eq!(principal, mint.principal, "opened for another principal");
            check_bound_request(&seen.body, mint.method, mint.target, binds, mint.digest());
        }
    }
    let task_ids: Vec<&Node> = if methods.iter().any(|m| TASK_METHODS.contains(m)) {
        message
            .members("params")
            .flat_map(|p| p.members("taskid"))
            .collect()
    } else if methods.contains(&"subscriptions/listen") {
        message
            .members("params")
            .flat_map(|p| p.members("notifications"))
            .flat_map(|n| n.members("taskids"))
            .flat_map(|ids| match ids {
                Node::Array(items) => items.iter().collect(),
                other => vec![other],
            })
            .collect()
    } else {
        Vec::new()
    };
    for value in task_ids {
        let Node::Str(task_id) = value else {
            // A non-string in a listen filter carries no task and the backend must refuse it.
            assert!(
                methods.contains(&"subscriptions/listen"),
                "a non-string taskId reached the backend: {value:?}"
            );
            continue;
        };
        let mint = mint_of_state(Purpose::TASK_HANDLE, task_id)
            .unwrap_or_else(|| panic!("an unverified task id reached the backend: {task_id:?}"));
        assert!(mint.valid, "an expired or retired task handle was opened");
        assert_eq!(seen.pinned.as_ref(), Some(&mint.route()));
        assert_eq!(
            mint.audience, binds.audience,
            "a task handle opened for another audience"
        );
        assert_eq!(
            principal, mint.principal,
            "a task handle opened for another principal"
        );
        if methods.iter().any(|m| TASK_METHODS.contains(m)) {
            let names: Vec<Option<String>> = seen
                .headers
                .get_all("mcp-name")
                .iter()
                .map(decode_header_value)
                .collect();
            assert_eq!(
                names,
                vec![Some(task_id.clone())],
                "Mcp-Name must name the backend's task id"
            );
        }
    }
}

/// What a strict reader finds in a request body: what the relay binds an envelope to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestFields {
    /// `method`.
    pub method: Option<String>,
    /// `params.uri` for `resources/read`, `params.name` otherwise.
    pub target: Option<String>,
    /// `params.arguments`, raw.
    pub arguments: Option<String>,
    /// `params.requestState`, raw.
    pub request_state: Option<String>,
}

/// The [`RequestFields`] of a body (all `None` where it has none, or is no JSON object).
pub fn request_fields(body: &[u8]) -> RequestFields {
    let text = String::from_utf8_lossy(body);
    let member = |members: &[(String, &serde_json::value::RawValue)], name: &str| {
        members
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.get().to_owned())
    };
    let top = raw_members(&text).unwrap_or_default();
    let method: Option<String> = member(&top, "method").and_then(|m| serde_json::from_str(&m).ok());
    let params = member(&top, "params").unwrap_or_default();
    let params = raw_members(&params).unwrap_or_default();
    let key = if method.as_deref() == Some("resources/read") {
        "uri"
    } else {
        "name"
    };
    RequestFields {
        target: member(&params, key).and_then(|t| serde_json::from_str(&t).ok()),
        arguments: member(&params, "arguments"),
        request_state: member(&params, "requestState"),
        method,
    }
}

/// The request opened for a mint has the mint's method, target and (if bound) arguments.
fn check_bound_request(
    body: &[u8],
    method: &str,
    target: Option<&str>,
    binds: Binds,
    digest: Option<ArgumentsDigest>,
) {
    let fields = request_fields(body);
    assert_eq!(
        fields.method.as_deref(),
        Some(method),
        "opened for another method"
    );
    assert_eq!(fields.target.as_deref(), target, "opened for another target");
    if binds.arguments && digest.is_some() {
        assert_eq!(
            ArgumentsDigest::of_with_v2(fields.arguments.as_deref()).ok(),
            digest,
            "opened with other arguments"
        );
    }
}

/// A request the relay refused (the inner service was not called) gets one JSON-RPC error
/// object, with a status that matches its code.
pub fn check_refusal(status: http::StatusCode, headers: &HeaderMap, body: &[u8]) {
    assert_eq!(
        headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
        Some(&b"application/json"[..]),
        "a refusal is application/json"
    );
    let Ok(Node::Object(members)) = serde_json::from_slice::<Node>(body) else {
        panic!(
            "a refusal is one JSON object: {:?}",
            String::from_utf8_lossy(body)
        );
    };
    let error = members
        .iter()
        .find(|(n, _)| n == "error")
        .map(|(_, v)| v)
        .expect("a refusal has an error member");
    let code = error
        .members("code")
        .next()
        .and_then(|c| match c {
            Node::Scalar(text) => text.parse::<i64>().ok(),
            _ => None,
        })
        .expect("an integer error code");
    assert!(error.members("message").next().and_then(Node::as_str).is_some());
    let allowed: &[i64] = match status.as_u16() {
        200 => &[-32602, -32603],
        400 => &[-32700, -32600, -32020, -32021],
        403 | 413 | 415 => &[-32600],
        other => panic!("a refusal with status {other}"),
    };
    assert!(allowed.contains(&code), "code {code} with status {status}");
}

/// The marker tokens (`BKSTATE-….`, `BKTASK-….`) in `text`.
pub fn markers_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in MARKERS {
        let mut rest = text;
        while let Some(at) = rest.find(prefix) {
            let tail = &rest[at..];
            let end = tail.find('.').map_or(tail.len(), |dot| dot + 1);
            found.push(tail[..end].to_owned());
            rest = &tail[prefix.len()..];
        }
    }
    found
}

/// Whether `bytes` mention a marker prefix, plainly or in any string token (escapes decoded).
pub fn mentions_markers(bytes: &[u8]) -> bool {
    let plain = MARKERS.iter().any(|m| contains(bytes, m.as_bytes())) || contains(bytes, b"BK");
    plain
        || string_tokens(bytes)
            .iter()
            .any(|s| s.contains("BK") || MARKERS.iter().any(|m| s.contains(m)))
}

/// The client sees none of `markers`: not in the answer's headers, not in its bytes, not in any
/// string of it (escapes decoded), not in any SSE event's data.
pub fn assert_hidden(markers: &[String], headers: &HeaderMap, received: &Received) {
    if markers.is_empty() {
        return;
    }
    let body = received.bytes();
    let mut texts: Vec<String> = vec![String::from_utf8_lossy(&body).into_owned()];
    texts.extend(string_tokens(&body));
    for event in sse_events(&body) {
        if let Some(data) = event.data {
            texts.push(String::from_utf8_lossy(&data).into_owned());
            texts.extend(string_tokens(&data));
        }
    }
    for (name, value) in headers {
        texts.push(format!("{name}: {}", String::from_utf8_lossy(value.as_bytes())));
    }
    if let Some(trailers) = &received.trailers {
        for (name, value) in trailers {
            texts.push(format!("{name}: {}", String::from_utf8_lossy(value.as_bytes())));
        }
    }
    for marker in markers {
        for text in &texts {
            assert!(
                !text.contains(marker.as_str()),
                "the backend's raw state {marker:?} reached the client: {:?}",
                String::from_utf8_lossy(&body)
            );
        }
    }
}

/// Every envelope in the answer that the backend did not send itself is of format v4 and opens,
/// under `binding` for `purpose` (or a task handle's binding), to a state among `states`, the
/// route `route` (name and identity) and, for a request state, the round `round` (a task
/// handle: round 0). A request state carries no call target; a task handle sealed for a
/// `tools/call` carries that call's tool (the target of the request-state binding).
pub fn check_envelopes(
    received: &[u8],
    answer: &[u8],
    bindings: &[(Purpose, Binding<'_>)],
    states: &[String],
    route: Option<&Route>,
    round: u16,
) {
    let sealer = Sealer::new(relay_keyring());
    for envelope in envelopes_in(received) {
        if contains(answer, envelope.as_bytes()) {
            continue;
        }
        assert!(
            envelope.starts_with(tower_mrtr::envelope::PREFIX),
            "the relay handed out an envelope of another format than v4: {envelope}"
        );
        let (purpose, opened) = bindings
            .iter()
            .find_map(|(purpose, binding)| {
                sealer
                    .open(*purpose, binding, &envelope, now())
                    .ok()
                    .map(|opened| (*purpose, opened))
            })
            .unwrap_or_else(|| panic!("the client got an envelope that does not open: {envelope}"));
        let expected_round = if purpose == Purpose::TASK_HANDLE { 0 } else { round };
        assert_eq!(opened.round, expected_round, "the round sealed in {purpose:?}");
        if purpose == Purpose::REQUEST_STATE {
            assert_eq!(opened.call_target, None, "a request state carries no call target");
        } else if let Some((_, call)) = bindings
            .iter()
            .find(|(p, b)| *p == Purpose::REQUEST_STATE && b.method == "tools/call")
        {
            assert_eq!(
                opened.call_target.as_deref(),
                call.target,
                "a task handle carries the tool of the call that created it"
            );
        }
        // No state: the backend sent none (legal with inputRequests); the envelope carries the route.
        if let Some(state) = opened.state {
            // Decoded as the lenient reading that listed `states` decodes: a backend's state may
            // hold a lone surrogate escape, which the layer seals byte for byte (found by the
            // long run; the input is a seed).
            let quoted = format!("\"{state}\"");
            let quoted = crate::lenient::without_lone_surrogates(quoted.as_bytes())
                .map_or(quoted, |text| String::from_utf8(text).expect("escapes are ASCII"));
            let decoded: String = serde_json::from_str(&quoted).expect("a sealed state is string contents");
            assert!(
                states.contains(&decoded),
                "an envelope holds {decoded:?}, which the backend did not send as a state"
            );
        }
        if let Some(route) = route {
            assert_eq!(&opened.route, route, "an envelope names another backend");
        }
    }
}

/// Where the next envelope (`mrtr4.`, `mrtr3.` or `mrtr2.`) at or after `from` starts.
fn next_envelope(bytes: &[u8], from: usize) -> Option<usize> {
    [&b"mrtr4."[..], b"mrtr3.", b"mrtr2."]
        .into_iter()
        .filter_map(|prefix| find_from(bytes, prefix, from))
        .min()
}

/// The envelopes (`mrtr4.`, and `mrtr3.` and `mrtr2.` ones of the formats that still open) in
/// `bytes`.
pub fn envelopes_in(bytes: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(start) = next_envelope(bytes, at) {
        let end = bytes[start + 6..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'))
            .map_or(bytes.len(), |len| start + 6 + len);
        found.push(String::from_utf8_lossy(&bytes[start..end]).into_owned());
        at = end;
    }
    found
}

/// `bytes` with every envelope replaced by `mrtr4.*` (or `mrtr3.*`, `mrtr2.*`): what stays the same
/// between two runs (envelopes have random nonces).
pub fn without_envelopes(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(start) = next_envelope(bytes, at) {
        out.extend_from_slice(&bytes[at..start]);
        out.extend_from_slice(&bytes[start..start + 6]);
        out.push(b'*');
        at = bytes[start + 6..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'))
            .map_or(bytes.len(), |len| start + 6 + len);
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

/// The parts of `a` and `b` between their longest common prefix and suffix.
pub fn difference<'a, 'b>(a: &'a [u8], b: &'b [u8]) -> (&'a [u8], &'b [u8]) {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix])
}

/// Whether `needle` occurs in `haystack` (the empty needle always does).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn find_from(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn replace_all(bytes: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() {
        return bytes.to_vec();
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(found) = find_from(bytes, needle, at) {
        out.extend_from_slice(&bytes[at..found]);
        out.extend_from_slice(with);
        at = found + needle.len();
    }
    out.extend_from_slice(&bytes[at..]);
    out
}
