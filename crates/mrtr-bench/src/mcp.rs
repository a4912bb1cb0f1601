//! The benchmark's MCP traffic, byte for byte: the requests the driver sends and the answers the
//! mock backend gives. Both sides build them with these functions, so the driver knows the exact
//! bytes every answer must have (a hop that passes them through must not change one).
//!
//! Three tools and `tools/list`:
//!
//! | tool | arguments | answer |
//! |---|---|---|
//! | `echo` | `size` | a `complete` JSON answer of exactly `size` bytes |
//! | `confirm` | `seed`, `stateSize` | round 1: `input_required` with a `requestState` of `stateSize` bytes derived from `seed`; round 2: `complete` if the state is exactly that, else a JSON-RPC error |
//! | `progress` | `events` | an SSE stream: `events` progress notifications, one frame each, then the result |
//!
//! ```
//! use mrtr_bench::mcp;
//!
//! let answer = mcp::echo_answer("7", 256);
//! assert_eq!(answer.len(), 256);
//! let state = mcp::state(42, 300);
//! assert_eq!(state.len(), 300);
//! assert_eq!(state, mcp::state(42, 300)); // the backend recomputes it on round 2
//! ```

/// The protocol revision every request declares.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Answers `complete` with a body of the requested size.
pub const ECHO: &str = "echo";
/// Answers `input_required` (round 1) and checks the state on round 2.
pub const CONFIRM: &str = "confirm";
/// Answers with an SSE stream of progress notifications.
pub const PROGRESS: &str = "progress";
/// Every tool the mock backend lists, in its order.
pub const TOOLS: [&str; 3] = [ECHO, CONFIRM, PROGRESS];

/// Largest `size` or `stateSize` the backend accepts.
pub const MAX_SIZE: usize = 1 << 20;
/// Most progress events the backend streams for one call.
pub const MAX_EVENTS: usize = 10_000;

/// The per-request `_meta` of 2026-07-28: protocol version and client capabilities.
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#;

fn request(id: u64, method: &str, params: &str) -> Vec<u8> {
    let comma = if params.is_empty() { "" } else { "," };
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}{comma}{META}}}}}"#)
        .into_bytes()
}

/// `tools/call` of `echo`, answered by [`echo_answer`].
pub fn echo_request(id: u64, answer_size: usize) -> Vec<u8> {
    request(
        id,
        "tools/call",
        &format!(r#""name":"{ECHO}","arguments":{{"size":{answer_size}}}"#),
    )
}

/// The `complete` answer of `echo`: exactly `size` bytes (or the shortest possible answer).
pub fn echo_answer(id: &str, size: usize) -> Vec<u8> {
    let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#);
    let tail = r#""}],"isError":false}}"#;
    let fill = size.saturating_sub(head.len() + tail.len());
    let mut answer = Vec::with_capacity(head.len() + fill + tail.len());
    answer.extend_from_slice(head.as_bytes());
    answer.resize(head.len() + fill, b'x');
    answer.extend_from_slice(tail.as_bytes());
    answer
}

/// The backend's own `requestState` for `seed`: `size` URL-safe characters, recomputed (not
/// stored) by the backend on round 2.
pub fn state(seed: u64, size: usize) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|_| {
            // xorshift64: cheap, and every seed gives a different state.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x & 63) as usize])
        })
        .collect()
}

fn confirm_arguments(seed: u64, state_size: usize) -> String {
    format!(r#""name":"{CONFIRM}","arguments":{{"seed":{seed},"stateSize":{state_size}}}"#)
}

/// Round 1 of `confirm`: answered `input_required` by [`input_required_answer`].
pub fn confirm_request(id: u64, seed: u64, state_size: usize) -> Vec<u8> {
    request(id, "tools/call", &confirm_arguments(seed, state_size))
}

/// Round 2 of `confirm`: the same arguments, the client's answer and the echoed `request_state`.
pub fn confirm_retry(id: u64, seed: u64, state_size: usize, request_state: &str) -> Vec<u8> {
    request(
        id,
        "tools/call",
        &format!(
            r#"{},"inputResponses":{{"confirm":{{"action":"accept","content":{{"confirm":true}}}}}},"requestState":"{request_state}""#,
            confirm_arguments(seed, state_size)
        ),
    )
}

/// The bytes of the `input_required` answer before and after the `requestState` value.
pub fn input_required_parts(id: &str) -> (String, &'static str) {
    let head = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"confirm":{{"method":"elicitation/create","params":{{"mode":"form","message":"Proceed?","requestedSchema":{{"type":"object","properties":{{"confirm":{{"type":"boolean"}}}},"required":["confirm"]}}}}}}}},"requestState":""#
    );
    (head, r#""}}"#)
}

/// Round 1's answer: `input_required` carrying `state`.
pub fn input_required_answer(id: &str, state: &str) -> Vec<u8> {
    let (head, tail) = input_required_parts(id);
    [head.as_bytes(), state.as_bytes(), tail.as_bytes()].concat()
}

/// Round 2's answer when the state was the backend's own.
pub fn confirmed_answer(id: &str, seed: u64) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"confirmed {seed}"}}],"isError":false}}}}"#
    )
    .into_bytes()
}

/// A JSON-RPC error answer.
pub fn error_answer(id: &str, code: i64, message: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"{message}"}}}}"#).into_bytes()
}

/// `tools/call` of `progress`, answered by the frames of [`progress_events`].
pub fn progress_request(id: u64, events: usize) -> Vec<u8> {
    request(
        id,
        "tools/call",
        &format!(r#""name":"{PROGRESS}","arguments":{{"events":{events}}}"#),
    )
}

/// The SSE answer of `progress`, one frame per event: `events` notifications, then the result.
pub fn progress_events(id: &str, events: usize) -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = (1..=events)
        .map(|i| {
            format!(
                "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"bench\",\"progress\":{i},\"total\":{events},\"message\":\"step {i} of {events}\"}}}}\n\n"
            )
            .into_bytes()
        })
        .collect();
    frames.push(
        format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"done\"}}],\"isError\":false}}}}\n\n"
        )
        .into_bytes(),
    );
    frames
}

/// `tools/list`.
pub fn list_request(id: u64) -> Vec<u8> {
    request(id, "tools/list", "")
}

/// The revision an `initialize`-era client and the legacy mock backend speak.
pub const LEGACY_VERSION: &str = "2025-11-25";

/// An `initialize`-era client's `initialize`, offering [`LEGACY_VERSION`].
pub fn initialize_request(id: u64) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"{LEGACY_VERSION}","capabilities":{{}},"clientInfo":{{"name":"gateway-bench","version":"{}"}}}}}}"#,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes()
}

/// `notifications/initialized`, which a legacy client sends after `initialize`.
pub fn initialized_notification() -> Vec<u8> {
    br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec()
}

/// The legacy mock backend's `initialize` answer.
pub fn initialize_answer(id: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"{LEGACY_VERSION}","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"mock-backend","version":"{}"}}}}}}"#,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes()
}

/// `tools/call` of `echo` as an `initialize`-era client sends it: no per-request `_meta`.
pub fn legacy_echo_request(id: u64, answer_size: usize) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{ECHO}","arguments":{{"size":{answer_size}}}}}}}"#
    )
    .into_bytes()
}

/// The backend's `server/discover` answer, as a 2026-07-28 server gives it.
pub fn discover_answer(id: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"mock-backend","version":"{}"}},"ttlMs":0,"cacheScope":"private"}}}}"#,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes()
}

/// The backend's `tools/list` answer: [`TOOLS`], one page.
pub fn list_answer(id: &str) -> Vec<u8> {
    let tools: Vec<String> = TOOLS
        .iter()
        .map(|name| {
            format!(
                r#"{{"name":"{name}","description":"The benchmark's {name} tool","inputSchema":{{"type":"object"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{}]}}}}"#,
        tools.join(",")
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_json_of_the_announced_shape() {
        let shortest = echo_answer("1", 0).len();
        for size in [0, 256, 4096] {
            let answer = echo_answer("1", size);
            assert_eq!(answer.len(), size.max(shortest));
            serde_json::from_slice::<serde_json::Value>(&answer).unwrap();
        }
        let round1: serde_json::Value =
            serde_json::from_slice(&input_required_answer("\"a\"", &state(1, 256))).unwrap();
        assert_eq!(round1["result"]["requestState"].as_str().unwrap(), state(1, 256));
        for body in [
            confirm_retry(3, 1, 256, &state(1, 256)),
            list_request(4),
            progress_request(5, 3),
            list_answer("4"),
            initialize_request(6),
            initialize_answer("6"),
            initialized_notification(),
            legacy_echo_request(7, 256),
        ] {
            serde_json::from_slice::<serde_json::Value>(&body).unwrap();
        }
        let frames = progress_events("5", 3);
        assert_eq!(frames.len(), 4);
        for frame in frames {
            let data = std::str::from_utf8(&frame).unwrap().lines().nth(1).unwrap();
            serde_json::from_str::<serde_json::Value>(data.strip_prefix("data: ").unwrap()).unwrap();
        }
    }

    #[test]
    fn states_differ_by_seed() {
        assert_ne!(state(1, 64), state(2, 64));
        assert!(
            state(9, 100)
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }
}
