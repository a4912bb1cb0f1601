//! The benchmark's cells: what request each one sends, and what answer is correct through each
//! kind of hop.
//!
//! A hop that needs no change passes answers through byte for byte, so most checks compare
//! whole bodies. The exceptions are the gateway's own work: round 1 through the gateway carries
//! a sealed envelope instead of the backend's state, and `tools/list` through a gateway with
//! two backends is a merged catalog.
//!
//! ```
//! use mrtr_bench::workload::{Cell, Hop, Workload};
//!
//! let work = Workload::new(Cell::Call { size: 256 }, Hop::Gateway, None);
//! let answer = mrtr_bench::mcp::echo_answer("5", 256);
//! assert!(work.check(5, http::StatusCode::OK, &answer).is_ok());
//! assert!(work.check(6, http::StatusCode::OK, &answer).is_err()); // another request's id
//! ```

use std::fmt;

use http::{HeaderMap, HeaderValue, StatusCode};

use crate::mcp;

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
}

impl Cell {
    /// The cells of a full run, in the order they are printed.
    pub const ALL: [Cell; 8] = [
        Cell::Call { size: 256 },
        Cell::Call { size: 4096 },
        Cell::Round1 { state: 256 },
        Cell::Round2 { state: 256 },
        Cell::Round1 { state: 4096 },
        Cell::Round2 { state: 4096 },
        Cell::Sse,
        Cell::List,
    ];

    /// The `Mcp-Method` and `Mcp-Name` of its requests.
    fn method_and_name(self) -> (&'static str, Option<&'static str>) {
        match self {
            Cell::Call { .. } => ("tools/call", Some(mcp::ECHO)),
            Cell::Round1 { .. } | Cell::Round2 { .. } => ("tools/call", Some(mcp::CONFIRM)),
            Cell::Sse => ("tools/call", Some(mcp::PROGRESS)),
            Cell::List => ("tools/list", None),
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
}

impl Hop {
    /// Column name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Hop::Direct => "direct",
            Hop::Bare => "bare proxy",
            Hop::Gateway => "gateway",
            Hop::Gateway2 => "gateway, 2 backends",
        }
    }

    fn seals(self) -> bool {
        matches!(self, Hop::Gateway | Hop::Gateway2)
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
            Cell::Sse => mcp::progress_request(id, SSE_EVENTS),
            Cell::List => mcp::list_request(id),
        }
    }

    /// The round-1 request whose answer gives round 2 its state.
    pub fn retry_state_request(state: usize, id: u64) -> Vec<u8> {
        mcp::confirm_request(id, ROUND2_SEED, state)
    }

    /// The `requestState` of a round-1 answer, if it is one.
    pub fn retry_state_from(answer: &[u8]) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(answer).ok()?;
        value["result"]["requestState"].as_str().map(str::to_owned)
    }

    /// Whether `body` (with `status`) is the correct answer to request `id`.
    pub fn check(&self, id: u64, status: StatusCode, body: &[u8]) -> Result<(), String> {
        if status != StatusCode::OK {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ));
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
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ))
            }
        };
        match self.cell {
            Cell::Call { size } => exact(mcp::echo_answer(&id_text, size)),
            Cell::Round1 { state } => self.check_round1(&id_text, &mcp::state(id, state), body),
            Cell::Round2 { .. } => exact(mcp::confirmed_answer(&id_text, ROUND2_SEED)),
            Cell::Sse => exact(mcp::progress_events(&id_text, SSE_EVENTS).concat()),
            Cell::List if self.hop == Hop::Gateway2 => check_merged_list(id, body),
            Cell::List => exact(mcp::list_answer(&id_text)),
        }
    }

    fn check_round1(&self, id: &str, state: &str, body: &[u8]) -> Result<(), String> {
        let (head, tail) = mcp::input_required_parts(id);
        let middle = body
            .strip_prefix(head.as_bytes())
            .and_then(|rest| rest.strip_suffix(tail.as_bytes()))
            .ok_or_else(|| format!("not the input_required answer: {}", String::from_utf8_lossy(body)))?;
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

/// The gateway's merged catalog of two mock backends: every tool twice, prefixed by backend.
fn check_merged_list(id: u64, body: &[u8]) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("merged list is not JSON: {e}"))?;
    if value["id"].as_u64() != Some(id) {
        return Err(format!("merged list answers id {} instead of {id}", value["id"]));
    }
    let mut names: Vec<&str> = value["result"]["tools"]
        .as_array()
        .ok_or("merged list has no tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    let mut expected: Vec<String> = ["alpha", "beta"]
        .iter()
        .flat_map(|b| mcp::TOOLS.iter().map(move |t| format!("{b}__{t}")))
        .collect();
    expected.sort_unstable();
    (names == expected)
        .then_some(())
        .ok_or_else(|| format!("merged list names {names:?}"))
}
