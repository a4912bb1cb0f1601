//! The benchmark's cells: what request each one sends, and what answer is correct through each
//! kind of hop.
//!
//! A hop of ours that needs no change passes answers through byte for byte, so most checks
//! compare whole bodies. The exceptions are the gateway's own work: round 1 through the gateway
//! carries a sealed envelope instead of the backend's state, and `tools/list` through a gateway
//! with two backends is a merged catalog.
//!
//! A peer gateway ([`Hop::Peer`]) may frame and serialise answers its own way, so its answers are
//! compared as parsed JSON-RPC messages ([`crate::messages`]): the same messages, in the same
//! order, with the backend's `requestState` verbatim (a peer relays it; it does not seal). Two
//! things a 2026-07-28 gateway may say differently without changing the meaning are read alike
//! (see [`as_relayed`]): an absent `resultType` is `complete`, and the cache hints of a result
//! (`ttlMs`, `cacheScope`) are the answering gateway's own.
//!
//! ```
//! use mrtr_bench::workload::{Cell, Hop, Workload};
//!
//! let json = Some("application/json");
//! let work = Workload::new(Cell::Call { size: 256 }, Hop::Gateway, None);
//! let answer = mrtr_bench::mcp::echo_answer("5", 256);
//! assert!(work.check(5, http::StatusCode::OK, json, &answer).is_ok());
//! assert!(work.check(6, http::StatusCode::OK, json, &answer).is_err()); // another request's id
//!
//! // A peer that re-frames the answer as SSE passes; our gateway may not do that.
//! let sse = [b"event: message\ndata: ".as_slice(), &answer, b"\n\n"].concat();
//! let peer = Workload::new(Cell::Call { size: 256 }, Hop::Peer("agentgateway"), None);
//! assert!(peer.check(5, http::StatusCode::OK, Some("text/event-stream"), &sse).is_ok());
//! assert!(work.check(5, http::StatusCode::OK, Some("text/event-stream"), &sse).is_err());
//! ```

use std::fmt;

use http::{HeaderMap, HeaderValue, StatusCode};

use crate::mcp;
use crate::messages::{self, excerpt};

mod rewritten;

pub use rewritten::BACKEND_NAMES;
use rewritten::{check_merged_list, check_translated};

/// Progress events in the SSE cell's stream (about 150 bytes each).
pub const SSE_EVENTS: usize = 64;

/// One kind of request a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cell {
    /// `tools/call` answered `complete` with `size` bytes of JSON.
    Call {
        /// Answer size in bytes.
        size: usize,
    },
    /// MRTR round 1: answered `input_required` with a backend state of `state` bytes.
    Round1 {
        /// Backend state size in bytes.
        state: usize,
    },
    /// MRTR round 2: the retry echoing the state from round 1 (an envelope through the gateway).
    Round2 {
        /// Backend state size in bytes.
        state: usize,
    },
    /// `tools/call` answered with an SSE stream of [`SSE_EVENTS`] per-event frames.
    Sse,
    /// `tools/list`.
    List,
    /// `tools/call` of `echo` (256 B) or of `progress` (SSE, `sse`) to an `initialize`-era HTTP
    /// backend ([`Hop::LegacyHttp`]): a backend session, the gateway's own ids, the answer
    /// translated (`resultType` added).
    LegacyHttp {
        /// The SSE answer of [`SSE_EVENTS`] events instead of 256 B of JSON.
        sse: bool,
    },
    /// `tools/call` of `echo` (256 B) by an `initialize`-era client, in the session it opened
    /// at the gateway's front, to the modern backend ([`Hop::Gateway`]).
    LegacyClient,
    /// `tools/call` of `echo` (256 B) to a stdio backend, the mock backend as a process of the
    /// gateway's ([`Hop::Stdio`], [`Hop::LegacyStdio`]).
    Stdio {
        /// The process speaks the `initialize` era.
        legacy: bool,
    },
    /// `tools/list` merged over this many backends ([`Hop::Merge`]).
    Merge {
        /// How many mock backends the gateway fronts.
        backends: usize,
    },
}

impl Cell {
    /// The cells of a full run, in the order they are printed.
    pub const ALL: [Cell; 15] = [
        Cell::Call { size: 256 },
        Cell::Call { size: 4096 },
        Cell::Round1 { state: 256 },
        Cell::Round2 { state: 256 },
        Cell::Round1 { state: 4096 },
        Cell::Round2 { state: 4096 },
        Cell::Sse,
        Cell::List,
        Cell::LegacyHttp { sse: false },
        Cell::LegacyHttp { sse: true },
        Cell::LegacyClient,
        Cell::Stdio { legacy: false },
        Cell::Stdio { legacy: true },
        Cell::Merge { backends: 3 },
        Cell::Merge { backends: 10 },
    ];

    /// The answer size of the cells that call `echo` and are not [`Cell::Call`].
    pub const ECHO_SIZE: usize = 256;

    /// The cell whose gateway figures this one is read against (the same work through the
    /// gateway in front of one modern HTTP backend), if it is one of the paths beside it.
    pub fn reference(self) -> Option<Cell> {
        match self {
            Cell::LegacyHttp { sse: true } => Some(Cell::Sse),
            Cell::LegacyHttp { sse: false } | Cell::LegacyClient | Cell::Stdio { .. } => Some(Cell::Call {
                size: Self::ECHO_SIZE,
            }),
            Cell::Merge { .. } => Some(Cell::List),
            _ => None,
        }
    }

    /// The `Mcp-Method` and `Mcp-Name` of its requests.
    fn method_and_name(self) -> (&'static str, Option<&'static str>) {
        match self {
            Cell::Call { .. } => ("tools/call", Some(mcp::ECHO)),
            Cell::Round1 { .. } | Cell::Round2 { .. } => ("tools/call", Some(mcp::CONFIRM)),
            Cell::Sse | Cell::LegacyHttp { sse: true } => ("tools/call", Some(mcp::PROGRESS)),
            Cell::List | Cell::Merge { .. } => ("tools/list", None),
            Cell::LegacyHttp { sse: false } | Cell::LegacyClient | Cell::Stdio { .. } => {
                ("tools/call", Some(mcp::ECHO))
            }
        }
    }

    /// Short name for tables and command lines (`call-256`, `r2-4096`, `sse`, `list`).
    pub fn name(self) -> String {
        match self {
            Cell::Call { size } => format!("call-{size}"),
            Cell::Round1 { state } => format!("r1-{state}"),
            Cell::Round2 { state } => format!("r2-{state}"),
            Cell::Sse => "sse".to_owned(),
            Cell::List => "list".to_owned(),
            Cell::LegacyHttp { sse: false } => format!("legacy-http-{}", Self::ECHO_SIZE),
            Cell::LegacyHttp { sse: true } => "legacy-http-sse".to_owned(),
            Cell::LegacyClient => format!("legacy-client-{}", Self::ECHO_SIZE),
            Cell::Stdio { legacy: false } => format!("stdio-{}", Self::ECHO_SIZE),
            Cell::Stdio { legacy: true } => format!("legacy-stdio-{}", Self::ECHO_SIZE),
            Cell::Merge { backends } => format!("list-{backends}"),
        }
    }

    /// What the cell is, for the report.
    pub fn describe(self) -> String {
        match self {
            Cell::Call { size } => format!("`tools/call` → complete ({})", bytes(size)),
            Cell::Round1 { state } => format!("round 1 → `input_required` ({} state)", bytes(state)),
            Cell::Round2 { state } => format!("round 2, envelope opened ({} state)", bytes(state)),
            Cell::Sse => format!("SSE answer, {SSE_EVENTS} per-event frames"),
            Cell::List => "`tools/list`".to_owned(),
            Cell::LegacyHttp { sse: false } => format!(
                "`tools/call` ({}) to a legacy HTTP backend",
                bytes(Self::ECHO_SIZE)
            ),
            Cell::LegacyHttp { sse: true } => {
                format!("SSE answer ({SSE_EVENTS} events) from a legacy HTTP backend")
            }
            Cell::LegacyClient => format!(
                "legacy client's `tools/call` ({}) through the front",
                bytes(Self::ECHO_SIZE)
            ),
            Cell::Stdio { legacy } => format!(
                "`tools/call` ({}) to a {} stdio backend",
                bytes(Self::ECHO_SIZE),
                if legacy { "legacy" } else { "modern" }
            ),
            Cell::Merge { backends } => format!("`tools/list` merged over {backends} backends"),
        }
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

fn bytes(n: usize) -> String {
    if n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}

/// What the driver's requests go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hop {
    /// Straight to the backend.
    Direct,
    /// Through the bare hyper proxy.
    Bare,
    /// Through `mrtr-gateway` with one backend.
    Gateway,
    /// Through `mrtr-gateway` with two backends (`tools/list` merges both catalogs).
    Gateway2,
    /// Through another gateway with one backend, named on the command line (`--peer NAME=...`).
    Peer(&'static str),
    /// Through `mrtr-gateway` in front of the mock backend speaking the `initialize` era over HTTP.
    LegacyHttp,
    /// Through `mrtr-gateway` in front of the mock backend as its stdio process, 2026-07-28.
    Stdio,
    /// … the same, the process speaking the `initialize` era.
    LegacyStdio,
    /// Through `mrtr-gateway` with this many mock backends (3 or 10), each its own process.
    Merge(usize),
    /// Straight to the mock backend as a stdio process of the driver's, over its pipes (the
    /// `initialize` era when `legacy`): what [`Hop::Stdio`] and [`Hop::LegacyStdio`] are read
    /// against (`pipe.rs`).
    Pipe {
        /// Whether the process speaks the `initialize` era.
        legacy: bool,
    },
}

impl Hop {
    /// Column name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Hop::Direct => "direct",
            Hop::Bare => "bare proxy",
            Hop::Gateway => "gateway",
            Hop::Gateway2 => "gateway, 2 backends",
            Hop::Peer(name) => name,
            Hop::LegacyHttp => "gateway, legacy HTTP backend",
            Hop::Stdio => "gateway, stdio backend",
            Hop::LegacyStdio => "gateway, legacy stdio backend",
            Hop::Merge(3) => "gateway, 3 backends",
            Hop::Merge(10) => "gateway, 10 backends",
            Hop::Merge(_) => "gateway, several backends",
            Hop::Pipe { legacy: false } => "direct, over its pipes",
            Hop::Pipe { legacy: true } => "direct, legacy, over its pipes",
        }
    }

    /// A short name for files (logs, callgrind dumps).
    pub fn file_name(self) -> String {
        match self {
            Hop::Direct => "direct".to_owned(),
            Hop::Bare => "bare-proxy".to_owned(),
            Hop::Gateway => "gateway".to_owned(),
            Hop::Gateway2 => "gateway-2".to_owned(),
            Hop::Peer(name) => name.to_owned(),
            Hop::LegacyHttp => "gateway-legacy-http".to_owned(),
            Hop::Stdio => "gateway-stdio".to_owned(),
            Hop::LegacyStdio => "gateway-legacy-stdio".to_owned(),
            Hop::Merge(n) => format!("gateway-{n}"),
            Hop::Pipe { legacy: false } => "pipe".to_owned(),
            Hop::Pipe { legacy: true } => "legacy-pipe".to_owned(),
        }
    }

    fn seals(self) -> bool {
        !matches!(self, Hop::Direct | Hop::Bare | Hop::Peer(_) | Hop::Pipe { .. })
    }
}

/// The seed of round 2's state: the retry replays one state (or envelope) fetched before the run.
pub const ROUND2_SEED: u64 = 4242;

/// Requests and checks of one cell through one hop.
#[derive(Debug)]
pub struct Workload {
    cell: Cell,
    hop: Hop,
    headers: HeaderMap,
    /// Round 2: the `requestState` to echo (an envelope through the gateway).
    retry_state: Option<String>,
}

impl Workload {
    /// `retry_state` is required for [`Cell::Round2`]: what round 1 answered through this hop
    /// for [`ROUND2_SEED`] (see [`Workload::retry_state_from`]).
    pub fn new(cell: Cell, hop: Hop, retry_state: Option<String>) -> Self {
        let (method, name) = cell.method_and_name();
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert(
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if cell == Cell::LegacyClient {
            // An `initialize`-era client: its revision, and no `Mcp-Method` or `Mcp-Name`.
            headers.insert(
                "mcp-protocol-version",
                HeaderValue::from_static(mcp::LEGACY_VERSION),
            );
            return Self {
                cell,
                hop,
                headers,
                retry_state,
            };
        }
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static(mcp::PROTOCOL_VERSION),
        );
        headers.insert("mcp-method", HeaderValue::from_static(method));
        if let Some(name) = name {
            headers.insert("mcp-name", HeaderValue::from_static(name));
        }
        Self {
            cell,
            hop,
            headers,
            retry_state,
        }
    }

    /// The same requests in the legacy session `session` (an `Mcp-Session-Id`).
    pub fn in_session(mut self, session: HeaderValue) -> Self {
        self.headers.insert("mcp-session-id", session);
        self
    }

    /// The cell.
    pub fn cell(&self) -> Cell {
        self.cell
    }

    /// Headers of every request (without `Host`).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body of request `id`.
    pub fn body(&self, id: u64) -> Vec<u8> {
        match self.cell {
            Cell::Call { size } => mcp::echo_request(id, size),
            // Every round 1 gets its own state, as every real flow does.
            Cell::Round1 { state } => mcp::confirm_request(id, id, state),
            Cell::Round2 { state } => mcp::confirm_retry(
                id,
                ROUND2_SEED,
                state,
                self.retry_state.as_deref().unwrap_or_default(),
            ),
            Cell::Sse | Cell::LegacyHttp { sse: true } => mcp::progress_request(id, SSE_EVENTS),
            Cell::List | Cell::Merge { .. } => mcp::list_request(id),
            Cell::LegacyHttp { sse: false } | Cell::Stdio { .. } => mcp::echo_request(id, Cell::ECHO_SIZE),
            Cell::LegacyClient => mcp::legacy_echo_request(id, Cell::ECHO_SIZE),
        }
    }

    /// The round-1 request whose answer gives round 2 its state.
    pub fn retry_state_request(state: usize, id: u64) -> Vec<u8> {
        mcp::confirm_request(id, ROUND2_SEED, state)
    }

    /// The `requestState` of a round-1 answer (JSON, or SSE through a peer), if it is one.
    pub fn retry_state_from(content_type: Option<&str>, answer: &[u8]) -> Option<String> {
        messages::of_answer(content_type, answer)
            .ok()?
            .iter()
            .find_map(|value| value["result"]["requestState"].as_str().map(str::to_owned))
    }

    /// Whether `body` (with `status` and `content_type`) is the correct answer to request `id`.
    pub fn check(
        &self,
        id: u64,
        status: StatusCode,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<(), String> {
        if status != StatusCode::OK {
            return Err(format!("HTTP {status}: {}", excerpt(body)));
        }
        if let Hop::Peer(_) = self.hop {
            return self.check_relayed(id, content_type, body);
        }
        let id_text = id.to_string();
        let exact = |expected: Vec<u8>| {
            if body == expected.as_slice() {
                Ok(())
            } else {
                Err(format!(
                    "unexpected answer ({} bytes, expected {}): {}",
                    body.len(),
                    expected.len(),
                    excerpt(body)
                ))
            }
        };
        match self.cell {
            Cell::Call { size } => exact(mcp::echo_answer(&id_text, size)),
            Cell::Round1 { state } => self.check_round1(&id_text, &mcp::state(id, state), body),
            Cell::Round2 { .. } => exact(mcp::confirmed_answer(&id_text, ROUND2_SEED)),
            Cell::Sse => exact(mcp::progress_events(&id_text, SSE_EVENTS).concat()),
            Cell::List if self.hop == Hop::Gateway2 => check_merged_list(id, body, 2),
            Cell::List => exact(mcp::list_answer(&id_text)),
            Cell::Merge { backends } => check_merged_list(id, body, backends),
            // Over its pipes, the process's own answer, under the driver's id.
            Cell::Stdio { .. } if matches!(self.hop, Hop::Pipe { .. }) => {
                exact(mcp::echo_answer(&id_text, Cell::ECHO_SIZE))
            }
            // A 2026-07-28 stdio backend's answer passes with only its id restored, and a legacy
            // client's loses nothing it had (the mock's answer has no `resultType`).
            Cell::Stdio { legacy: false } | Cell::LegacyClient => {
                check_translated(self.cell, &id_text, content_type, body, false)
            }
            Cell::LegacyHttp { .. } | Cell::Stdio { legacy: true } => {
                check_translated(self.cell, &id_text, content_type, body, true)
            }
        }
    }

    /// A peer's answer: the messages the backend sent, parsed, in order, however framed.
    fn check_relayed(&self, id: u64, content_type: Option<&str>, body: &[u8]) -> Result<(), String> {
        let id_text = id.to_string();
        let json = Some("application/json");
        // Computed once: the driver's time per answer limits how fast it can load a peer.
        let backend_state = match self.cell {
            Cell::Round1 { state } => mcp::state(id, state),
            _ => String::new(),
        };
        let expected = match self.cell {
            Cell::Call { size } => messages::of_answer(json, &mcp::echo_answer(&id_text, size)),
            Cell::Round1 { .. } => {
                messages::of_answer(json, &mcp::input_required_answer(&id_text, &backend_state))
            }
            Cell::Round2 { .. } => messages::of_answer(json, &mcp::confirmed_answer(&id_text, ROUND2_SEED)),
            Cell::Sse => messages::of_answer(
                Some("text/event-stream"),
                &mcp::progress_events(&id_text, SSE_EVENTS).concat(),
            ),
            Cell::List => messages::of_answer(json, &mcp::list_answer(&id_text)),
            _ => return Err(format!("{} is not measured through a peer", self.cell)),
        }
        .expect("the backend's own answers parse");
        let expected: Vec<serde_json::Value> = expected.into_iter().map(as_relayed).collect();
        let got: Vec<serde_json::Value> = messages::of_answer(content_type, body)?
            .into_iter()
            .map(as_relayed)
            .collect();
        if let (Cell::Round1 { .. }, Some(first)) = (self.cell, got.first()) {
            // Said apart from other differences: a peer that sealed or rewrote the state.
            let relayed = first["result"]["requestState"].as_str();
            if relayed.is_some_and(|s| s != backend_state) {
                return Err(format!(
                    "requestState not relayed verbatim: {}",
                    excerpt(relayed.unwrap_or_default().as_bytes())
                ));
            }
        }
        if got.len() != expected.len() {
            return Err(format!(
                "{} JSON-RPC messages instead of {}: {}",
                got.len(),
                expected.len(),
                excerpt(body)
            ));
        }
        match got
            .iter()
            .zip(&expected)
            .position(|(g, e)| !messages::same_json(g, e))
        {
            None => Ok(()),
            Some(at) => Err(format!(
                "message {} of {} differs from the backend's: {}",
                at + 1,
                expected.len(),
                excerpt(got[at].to_string().as_bytes())
            )),
        }
    }

    fn check_round1(&self, id: &str, state: &str, body: &[u8]) -> Result<(), String> {
        let (head, tail) = mcp::input_required_parts(id);
        let middle = body
            .strip_prefix(head.as_bytes())
            .and_then(|rest| rest.strip_suffix(tail.as_bytes()))
            .ok_or_else(|| format!("not the input_required answer: {}", excerpt(body)))?;
        if !self.hop.seals() {
            return (middle == state.as_bytes())
                .then_some(())
                .ok_or_else(|| "requestState changed by a hop that must not seal".to_owned());
        }
        // Through the gateway: an envelope (`mrtr<version>.<base64url>`) in place of the state.
        let envelope = middle
            .strip_prefix(b"mrtr")
            .map(|rest| &rest[rest.iter().take_while(|b| b.is_ascii_digit()).count()..])
            .and_then(|rest| rest.strip_prefix(b"."))
            .ok_or_else(|| "requestState is not an mrtr envelope".to_owned())?;
        let base64url = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
        if envelope.len() < state.len() || !envelope.iter().all(base64url) {
            return Err("requestState envelope is malformed or too short to hold the state".to_owned());
        }
        Ok(())
    }
}

/// A JSON-RPC message as a peer gateway may relay it without changing its meaning, in one form:
/// a result's `resultType` made explicit (2026-07-28 reads an absent one as `complete`, and a
/// gateway answering a modern client adds it), its cache hints dropped (`ttlMs` and `cacheScope`
/// describe the answer of whoever gives it; agentgateway marks every list private, with no TTL).
///
/// ```
/// use mrtr_bench::workload::as_relayed;
/// use serde_json::json;
///
/// let backend = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}});
/// let peer = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}});
/// assert_eq!(as_relayed(backend), as_relayed(peer));
/// let other = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "resultType": "input_required"}});
/// assert_ne!(as_relayed(json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})), as_relayed(other));
/// ```
pub fn as_relayed(mut message: serde_json::Value) -> serde_json::Value {
    if let Some(result) = message
        .get_mut("result")
        .and_then(serde_json::Value::as_object_mut)
    {
        result
            .entry("resultType")
            .or_insert_with(|| serde_json::Value::from("complete"));
        result.remove("ttlMs");
        result.remove("cacheScope");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: Option<&str> = Some("application/json");
    const SSE: Option<&str> = Some("text/event-stream");
    const PEER: Hop = Hop::Peer("peer");

    /// `answer` re-serialised as a peer might: keys in another order, spaces, one SSE event with
    /// an id and its data split over two `data` lines, CRLF line ends.
    fn reframed(answer: &[u8]) -> Vec<u8> {
        let value: serde_json::Value = serde_json::from_slice(answer).unwrap();
        let mut members: Vec<(String, serde_json::Value)> =
            value.as_object().unwrap().clone().into_iter().collect();
        members.reverse();
        let text = serde_json::to_string_pretty(&serde_json::Map::from_iter(members)).unwrap();
        let (first, rest) = text.split_once('\n').unwrap();
        format!(
            "id: 7\r\nevent: message\r\ndata: {first}\r\ndata: {}\r\n\r\n",
            rest.replace('\n', " ")
        )
        .into_bytes()
    }

    fn check(cell: Cell, hop: Hop, content_type: Option<&str>, id: u64, body: &[u8]) -> Result<(), String> {
        Workload::new(cell, hop, None).check(id, StatusCode::OK, content_type, body)
    }

    #[test]
    fn a_peer_may_reframe_a_correct_answer_as_sse() {
        let cell = Cell::Call { size: 256 };
        let answer = mcp::echo_answer("9", 256);
        let sse = reframed(&answer);
        assert!(check(cell, PEER, SSE, 9, &sse).is_ok());
        assert!(check(cell, PEER, JSON, 9, &answer).is_ok());
        // Our own hops still pass the backend's bytes through, unchanged.
        assert!(check(cell, Hop::Gateway, SSE, 9, &sse).is_err());
        assert!(check(cell, Hop::Bare, JSON, 9, &answer).is_ok());
    }

    #[test]
    fn a_wrong_answer_through_a_peer_fails_however_framed() {
        let cell = Cell::Call { size: 256 };
        let answer = mcp::echo_answer("9", 256);
        let sse = reframed(&answer);
        let wrong = String::from_utf8(sse.clone())
            .unwrap()
            .replacen("xxx", "xxy", 1)
            .into_bytes();
        assert!(
            check(cell, PEER, SSE, 9, &wrong).is_err(),
            "one byte of text changed"
        );
        assert!(check(cell, PEER, SSE, 10, &sse).is_err(), "another request's id");
        assert!(check(cell, PEER, JSON, 9, &sse).is_err(), "SSE declared as JSON");
        assert!(
            check(cell, PEER, SSE, 9, &sse[..sse.len() - 2]).is_err(),
            "truncated"
        );
        let twice = [sse.as_slice(), &sse].concat();
        assert!(check(cell, PEER, SSE, 9, &twice).is_err(), "the answer twice");
        let error = mcp::error_answer("9", -32603, "Internal error");
        assert!(check(cell, PEER, JSON, 9, &error).is_err());
        let status = Workload::new(cell, PEER, None).check(9, StatusCode::BAD_GATEWAY, JSON, &answer);
        assert!(status.is_err());
    }

    #[test]
    fn round_1_through_a_peer_carries_the_backends_state_verbatim() {
        let cell = Cell::Round1 { state: 256 };
        let state = mcp::state(11, 256);
        let answer = mcp::input_required_answer("11", &state);
        assert!(check(cell, PEER, SSE, 11, &reframed(&answer)).is_ok());
        let sealed = mcp::input_required_answer("11", &format!("mrtr1.{state}"));
        let error = check(cell, PEER, SSE, 11, &reframed(&sealed)).unwrap_err();
        assert!(error.contains("requestState"), "{error}");
        let other = mcp::input_required_answer("11", &mcp::state(12, 256));
        assert!(check(cell, PEER, JSON, 11, &other).is_err());
        assert_eq!(Workload::retry_state_from(SSE, &reframed(&answer)), Some(state));
        // Through our gateway the state must be sealed, so the backend's own is wrong there.
        assert!(check(cell, Hop::Gateway, JSON, 11, &answer).is_err());
    }

    #[test]
    fn the_sse_cell_through_a_peer_needs_every_event_in_order() {
        let frames = mcp::progress_events("13", SSE_EVENTS);
        let reframe = |frames: &[Vec<u8>]| -> Vec<u8> {
            // A priming event first, then each message in its own re-serialised event.
            let mut body = b"id: 0\ndata:\n\n".to_vec();
            for frame in frames {
                let data = std::str::from_utf8(frame).unwrap().lines().nth(1).unwrap();
                body.extend(reframed(data.strip_prefix("data: ").unwrap().as_bytes()));
            }
            body
        };
        assert!(check(Cell::Sse, PEER, SSE, 13, &reframe(&frames)).is_ok());
        assert!(check(Cell::Sse, PEER, SSE, 13, &frames.concat()).is_ok());

        let mut missing = frames.clone();
        missing.remove(5);
        assert!(check(Cell::Sse, PEER, SSE, 13, &reframe(&missing)).is_err());
        let mut swapped = frames.clone();
        swapped.swap(1, 2);
        assert!(check(Cell::Sse, PEER, SSE, 13, &reframe(&swapped)).is_err());
        let no_result = &frames[..frames.len() - 1];
        assert!(check(Cell::Sse, PEER, SSE, 13, &reframe(no_result)).is_err());
        // The final result alone, as JSON, drops the notifications.
        let last = frames.last().unwrap();
        let result = std::str::from_utf8(last).unwrap().lines().nth(1).unwrap()["data: ".len()..].to_owned();
        assert!(check(Cell::Sse, PEER, JSON, 13, result.as_bytes()).is_err());
    }

    #[test]
    fn what_a_modern_gateway_may_add_is_read_alike_and_nothing_else() {
        let with = |answer: &[u8], add: &str| -> Vec<u8> {
            let text = std::str::from_utf8(answer).unwrap();
            let at = text.find(r#""result":{"#).unwrap() + r#""result":{"#.len();
            format!("{}{add},{}", &text[..at], &text[at..]).into_bytes()
        };
        let call = mcp::echo_answer("17", 256);
        let cell = Cell::Call { size: 256 };
        let call_as_sse_with = |add: &str| check(cell, PEER, SSE, 17, &reframed(&with(&call, add)));
        assert!(call_as_sse_with(r#""resultType":"complete""#).is_ok());
        assert!(call_as_sse_with(r#""resultType":"task""#).is_err());
        assert!(check(cell, PEER, JSON, 17, &with(&call, r#""extra":1"#)).is_err());
        let list = mcp::list_answer("18");
        let hinted = with(
            &list,
            r#""ttlMs":0,"cacheScope":"private","resultType":"complete""#,
        );
        assert!(check(Cell::List, PEER, SSE, 18, &reframed(&hinted)).is_ok());
        // Progress counts written as floats are the same numbers.
        let frames = mcp::progress_events("19", SSE_EVENTS).concat();
        let floats = String::from_utf8(frames)
            .unwrap()
            .replace(r#""total":64,"#, r#""total":64.0,"#);
        assert!(check(Cell::Sse, PEER, SSE, 19, floats.as_bytes()).is_ok());
        let off = floats.replacen(r#""progress":3,"#, r#""progress":3.5,"#, 1);
        assert!(check(Cell::Sse, PEER, SSE, 19, off.as_bytes()).is_err());
    }

    #[test]
    fn every_cell_has_its_own_name() {
        for cell in Cell::ALL {
            assert_eq!(
                Cell::ALL.iter().filter(|c| c.name() == cell.name()).count(),
                1,
                "{cell}"
            );
        }
    }

    #[test]
    fn round_2_and_the_list_through_a_peer_compare_parsed() {
        let confirmed = mcp::confirmed_answer("15", ROUND2_SEED);
        assert!(check(Cell::Round2 { state: 256 }, PEER, SSE, 15, &reframed(&confirmed)).is_ok());
        let other_seed = mcp::confirmed_answer("15", ROUND2_SEED + 1);
        assert!(check(Cell::Round2 { state: 256 }, PEER, JSON, 15, &other_seed).is_err());
        let list = mcp::list_answer("16");
        assert!(check(Cell::List, PEER, SSE, 16, &reframed(&list)).is_ok());
        let renamed = String::from_utf8(list)
            .unwrap()
            .replace("\"echo\"", "\"mock_echo\"");
        assert!(check(Cell::List, PEER, JSON, 16, renamed.as_bytes()).is_err());
    }
}
