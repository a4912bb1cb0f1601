//! The gateway's own metrics, emitted through the [`metrics`] facade (the admin listener renders
//! them as Prometheus text; see `docs/operations.md` for every name).
//!
//! * [`RequestMetricsLayer`](crate::front::metrics::RequestMetricsLayer) counts and times every
//!   MCP request at the front of the stack with the handles kept here.
//! * the forwarder counts and times every request the gateway sends to a backend.
//! * Key and certificate reloads, backend health and draining report through the helpers below.
//!
//! Labels are bounded: methods outside the MCP method set are counted as `other`, backends are
//! the configured names.
//!
//! The per-request metrics keep their handles: each label set is registered with the recorder
//! the first time it is counted and the handle is kept, so counting a request costs an index and
//! an atomic add instead of building a key and asking the recorder again, which costs even with
//! no recorder installed, since the `metrics` facade cannot tell (`docs/benchmarks-log.md`).
//! The price is that a label set first counted before any recorder was installed stays
//! uncounted: install the recorder before the gateway serves its first request, as
//! `mrtr-gateway` does (and as the [`crate::ops::admin`] example shows).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use metrics::{Counter, Histogram, SharedString};

use tower_mrtr::mcp_headers::MCP_METHOD;

/// Counter: MCP requests answered, by `method`, `status` and `answered_by`.
pub(crate) const REQUESTS_TOTAL: &str = "mrtr_gateway_requests_total";
/// Histogram: seconds from a request's arrival to its response head, by `method`.
pub(crate) const REQUEST_DURATION_SECONDS: &str = "mrtr_gateway_request_duration_seconds";
/// Counter: requests sent to a backend, by `backend` and `method`.
pub(crate) const BACKEND_REQUESTS_TOTAL: &str = "mrtr_gateway_backend_requests_total";
/// Counter: backend requests that failed, by `backend`, `method` and `reason`.
pub(crate) const BACKEND_ERRORS_TOTAL: &str = "mrtr_gateway_backend_errors_total";
/// Histogram: seconds until a backend's response head, by `backend` and `method`.
pub(crate) const BACKEND_REQUEST_DURATION_SECONDS: &str = "mrtr_gateway_backend_request_duration_seconds";
/// Gauge: 1 when the backend's last probe found it usable, else 0.
pub(crate) const BACKEND_UP: &str = "mrtr_gateway_backend_up";
/// Gauge: 1 for the `era` (`modern`, `legacy`) and `protocol_version` the backend's last probe
/// found, 0 for what an earlier probe found.
pub(crate) const BACKEND_ERA: &str = "mrtr_gateway_backend_era";
/// Counter: keyring reloads, by `result` (`ok`, `failed`).
pub(crate) const KEYRING_RELOADS_TOTAL: &str = "mrtr_gateway_keyring_reloads_total";
/// Gauge: 1 for the key id that seals (label `kid`), 0 for ids that sealed before.
pub(crate) const KEYRING_ACTIVE_KEY: &str = "mrtr_gateway_keyring_active_key";
/// Gauge: keys in the keyring.
pub(crate) const KEYRING_KEYS: &str = "mrtr_gateway_keyring_keys";
/// Counter: listener certificate reloads, by `result` (`ok`, `failed`).
pub(crate) const TLS_RELOADS_TOTAL: &str = "mrtr_gateway_tls_reloads_total";
/// Counter: reloads of the config file, by `result` (`ok`; `partial`: applied, but settings
/// that need a restart kept their running values; `failed`: the file did not parse or validate,
/// nothing changed).
pub(crate) const CONFIG_RELOADS_TOTAL: &str = "mrtr_gateway_config_reloads_total";
/// Gauge: 1 from SIGTERM until exit.
pub(crate) const DRAINING: &str = "mrtr_gateway_draining";
/// Counter: requests answered 503 because `--max-in-flight` requests were in flight.
pub(crate) const SHED_TOTAL: &str = "mrtr_gateway_shed_total";
/// Gauge: client connections open on the MCP listener.
pub(crate) const OPEN_CONNECTIONS: &str = "mrtr_gateway_open_connections";
/// Counter: HTTP/1.1 client connections parked while idle (their hyper connection dropped).
pub(crate) const CONNECTIONS_PARKED_TOTAL: &str = "mrtr_gateway_connections_parked_total";
/// Counter: sessions opened by `initialize`-era clients (an `initialize` answered with a session id).
pub(crate) const LEGACY_SESSIONS_TOTAL: &str = "mrtr_gateway_legacy_sessions_total";
/// Gauge: `initialize`-era clients' calls held open waiting for the client's answer to a request
/// of the gateway's (an MRTR round bridged in the call).
pub(crate) const LEGACY_WAITING_CALLS: &str = "mrtr_gateway_legacy_waiting_calls";
/// Gauge: sessions open with `initialize`-era HTTP backends, by `backend`.
pub(crate) const BACKEND_SESSIONS: &str = "mrtr_gateway_backend_sessions";
/// Gauge: backend listens the gateway reads for the clients that share them, by `backend`.
pub(crate) const SHARED_LISTENS: &str = "mrtr_gateway_shared_listens";
/// Gauge: client listens served from a shared backend listen, by `backend`.
pub(crate) const SHARED_LISTEN_CLIENTS: &str = "mrtr_gateway_shared_listen_clients";
/// Gauge: stdio backend processes running (started, not yet exited), by `backend`.
pub(crate) const STDIO_PROCESSES: &str = "mrtr_gateway_stdio_processes";
/// Counter: stdio backend processes that went down, by `backend` and `reason`.
pub(crate) const STDIO_DOWN_TOTAL: &str = "mrtr_gateway_stdio_down_total";
/// Counter: requests refused by the OAuth resource server, by `reason`.
pub(crate) const AUTH_REFUSED_TOTAL: &str = "mrtr_gateway_auth_refused_total";
/// Counter: calls the policy refused, by `method`.
pub(crate) const POLICY_DENIED_TOTAL: &str = "mrtr_gateway_policy_denied_total";
/// Counter: requests answered 429 by a rate limit, by `limit` (what it counts per).
pub(crate) const RATE_LIMITED_TOTAL: &str = "mrtr_gateway_rate_limited_total";

/// Counter: shared-store operations that failed, by `reason` (`timeout`, `connection`, `refused`).
pub(crate) const SHARED_STORE_ERRORS_TOTAL: &str = "mrtr_gateway_shared_store_errors_total";
/// Gauge: 1 when the shared store's last operation succeeded, else 0.
pub(crate) const SHARED_STORE_UP: &str = "mrtr_gateway_shared_store_up";
/// Counter: retries refused because their request state had been opened before (single use).
pub(crate) const REPLAYS_REFUSED_TOTAL: &str = "mrtr_gateway_replays_refused_total";
/// Counter: audit events dropped (the queue was full, or the output failed).
pub(crate) const AUDIT_DROPPED_TOTAL: &str = "mrtr_gateway_audit_dropped_total";
/// Counter: tool, prompt or resource-template definitions found to differ from their pins, by
/// `backend`.
pub(crate) const TOOL_DEFINITION_CHANGED_TOTAL: &str = "mrtr_gateway_tool_definition_changed_total";
/// Gauge: bridged tasks alive on this replica (running, or keeping their outcome).
pub(crate) const BRIDGED_TASKS: &str = "mrtr_gateway_bridged_tasks";
/// Counter: bridged tasks ended, by `outcome` (`completed`, `failed`, `cancelled`), and refused
/// at their creation by the bounds (`refused`).
pub(crate) const BRIDGED_TASKS_TOTAL: &str = "mrtr_gateway_bridged_tasks_total";
/// Counter: `tasks/*` for a bridged task of another replica, by `outcome` (`forwarded` to its
/// owner, or answered here: `unreachable`, `restarted`, `looped`).
pub(crate) const BRIDGED_TASK_FORWARDS_TOTAL: &str = "mrtr_gateway_bridged_task_forwards_total";

/// Histogram buckets for the `_seconds` histograms: 1 ms to 60 s.
pub(crate) const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Histogram buckets for the `_bytes` histograms (the library's envelope sizes): 64 B to 64 KiB.
pub(crate) const BYTES_BUCKETS: &[f64] = &[
    64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 65536.0,
];

/// Every value of the `method` label, in the order [`MethodLabel`] numbers them. The last two
/// are an `initialize`-era backend's session `GET` stream and `DELETE`, which carry no message.
const METHOD_LABELS: [&str; 22] = [
    "tools/call",
    "tools/list",
    "prompts/get",
    "prompts/list",
    "resources/read",
    "resources/list",
    "resources/templates/list",
    "server/discover",
    "completion/complete",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/list",
    "ping",
    "logging/setLevel",
    "initialize",
    "notifications/*",
    "other",
    "none",
    "GET",
    "DELETE",
];

/// A value of the `method` label, as its place in [`METHOD_LABELS`], so that handles can be kept
/// in arrays indexed by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MethodLabel(u8);

impl MethodLabel {
    /// `notifications/*`: every notification.
    const NOTIFICATIONS: Self = Self(17);
    /// `other`: a method outside the MCP method set.
    const OTHER: Self = Self(18);
    /// `none`: no method (no `Mcp-Method` header; a message that is an answer).
    const NONE: Self = Self(19);
    /// `GET`: an `initialize`-era backend's session stream.
    const GET: Self = Self(20);
    /// `DELETE`: the end of an `initialize`-era backend's session.
    const DELETE: Self = Self(21);

    pub(crate) fn of(method: Option<&str>) -> Self {
        let Some(method) = method else { return Self::NONE };
        if method.starts_with("notifications/") {
            return Self::NOTIFICATIONS;
        }
        // Eighteen comparisons, each by length first: as cheap as a `match` here.
        METHOD_LABELS[..usize::from(Self::OTHER.0)]
            .iter()
            .position(|label| *label == method)
            .map_or(Self::OTHER, |at| Self(at as u8))
    }

    /// The label of a request's `Mcp-Method` header.
    pub(crate) fn of_headers(headers: &HeaderMap) -> Self {
        Self::of(headers.get(&MCP_METHOD).and_then(|v| v.to_str().ok()))
    }

    /// The label of a request sent to a backend: its `Mcp-Method` header or, without one (an
    /// `initialize`-era backend's requests), the HTTP method's (`GET`, `DELETE`) or the method
    /// the JSON-RPC `body` names (read only then).
    pub(crate) fn of_request(http: &http::Method, headers: &HeaderMap, body: &[u8]) -> Self {
        if headers.contains_key(&MCP_METHOD) {
            return Self::of_headers(headers);
        }
        match *http {
            http::Method::GET => Self::GET,
            http::Method::DELETE => Self::DELETE,
            _ => {
                #[derive(serde::Deserialize)]
                struct Message<'a> {
                    #[serde(borrow)]
                    method: Option<std::borrow::Cow<'a, str>>,
                }
                let message = serde_json::from_slice::<Message<'_>>(body).ok();
                Self::of(message.as_ref().and_then(|m| m.method.as_deref()))
            }
        }
    }

    fn index(self) -> usize {
        usize::from(self.0)
    }

    pub(crate) fn as_str(self) -> &'static str {
        METHOD_LABELS[self.index()]
    }
}

/// The `status` label: the three digits of `status`, without allocating.
pub(crate) fn status_label(status: StatusCode) -> &'static str {
    // Every code from 100 to 999, three digits each; `StatusCode` guarantees the range.
    static DIGITS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| (100..1000).map(|code: u16| code.to_string()).collect());
    let at = usize::from(status.as_u16() - 100) * 3;
    &DIGITS[at..at + 3]
}

/// One handle per method label, each registered the first time it is used.
pub(crate) struct PerMethod<T>([OnceLock<T>; METHOD_LABELS.len()]);

impl<T> PerMethod<T> {
    pub(crate) fn new() -> Self {
        Self(std::array::from_fn(|_| OnceLock::new()))
    }

    pub(crate) fn get(&self, method: MethodLabel, register: impl FnOnce(&'static str) -> T) -> &T {
        self.0[method.index()].get_or_init(|| register(method.as_str()))
    }
}

impl<T> std::fmt::Debug for PerMethod<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let registered = self.0.iter().filter(|slot| slot.get().is_some()).count();
        write!(f, "PerMethod({registered} registered)")
    }
}

/// The handles of one backend's request metrics (the forwarder keeps one per backend).
#[derive(Debug)]
pub(crate) struct BackendMetrics {
    backend: SharedString,
    requests: PerMethod<Counter>,
    durations: PerMethod<Histogram>,
}

impl BackendMetrics {
    pub(crate) fn new(backend: &str) -> Self {
        Self {
            backend: SharedString::from(Arc::<str>::from(backend)),
            requests: PerMethod::new(),
            durations: PerMethod::new(),
        }
    }

    /// Records one request: its count, its time to the response head, and why it failed, if it
    /// did (`failure`: the `reason` label).
    pub(crate) fn request(&self, method: MethodLabel, failure: Option<&'static str>, elapsed: Duration) {
        let backend = &self.backend;
        self.requests
            .get(method, |method| {
                metrics::counter!(BACKEND_REQUESTS_TOTAL, "backend" => backend.clone(), "method" => method)
            })
            .increment(1);
        self.durations
            .get(method, |method| {
                metrics::histogram!(BACKEND_REQUEST_DURATION_SECONDS, "backend" => backend.clone(), "method" => method)
            })
            .record(elapsed.as_secs_f64());
        let Some(reason) = failure else { return };
        // Failures are rare: registered each time rather than kept.
        metrics::counter!(BACKEND_ERRORS_TOTAL, "backend" => backend.clone(), "method" => method.as_str(), "reason" => reason)
            .increment(1);
    }
}

/// Describes every gateway metric to the installed recorder (the `# HELP` lines).
pub(crate) fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS_TOTAL,
        "MCP requests answered, by method, HTTP status and who answered"
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time to the response head, by MCP method"
    );
    describe_counter!(
        BACKEND_REQUESTS_TOTAL,
        "Requests sent to a backend, by backend and MCP method"
    );
    describe_counter!(
        BACKEND_ERRORS_TOTAL,
        "Backend requests that failed, by backend, MCP method and reason"
    );
    describe_histogram!(
        BACKEND_REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time to a backend's response head, by backend and MCP method"
    );
    describe_gauge!(BACKEND_UP, "1 when the backend's last probe found it usable");
    describe_gauge!(
        BACKEND_ERA,
        "1 for the era and protocol version the backend's last probe found"
    );
    describe_counter!(
        KEYRING_RELOADS_TOTAL,
        "Keyring reloads from the keys file, by result"
    );
    describe_gauge!(KEYRING_ACTIVE_KEY, "1 for the key id that seals new envelopes");
    describe_gauge!(KEYRING_KEYS, "Keys in the keyring (every one opens envelopes)");
    describe_counter!(TLS_RELOADS_TOTAL, "Listener certificate reloads, by result");
    describe_counter!(CONFIG_RELOADS_TOTAL, "Config file reloads, by result");
    describe_gauge!(DRAINING, "1 while the gateway drains before exiting");
    describe_gauge!(OPEN_CONNECTIONS, "Client connections open on the MCP listener");
    describe_counter!(
        CONNECTIONS_PARKED_TOTAL,
        "HTTP/1.1 client connections parked while idle (hyper's connection and buffers dropped)"
    );
    describe_counter!(
        SHED_TOTAL,
        "Requests answered 503 at once because the in-flight limit was reached"
    );
    describe_counter!(
        AUTH_REFUSED_TOTAL,
        "Requests refused by the OAuth resource server (401 or 403), by reason"
    );
    describe_counter!(POLICY_DENIED_TOTAL, "Calls refused by the policy, by MCP method");
    describe_counter!(
        RATE_LIMITED_TOTAL,
        "Requests answered 429 by a rate limit, by what the limit counts per"
    );
    describe_counter!(
        SHARED_STORE_ERRORS_TOTAL,
        "Shared-store operations that failed or timed out, by reason"
    );
    describe_gauge!(
        SHARED_STORE_UP,
        "1 when the shared store's last operation succeeded"
    );
    describe_counter!(
        REPLAYS_REFUSED_TOTAL,
        "Retries refused because their request state was opened before (single use)"
    );
    describe_counter!(
        AUDIT_DROPPED_TOTAL,
        "Audit events dropped because the queue was full or the output failed"
    );
    describe_counter!(
        TOOL_DEFINITION_CHANGED_TOTAL,
        "Tool, prompt and resource-template definitions that differ from their pins, by backend"
    );
    describe_gauge!(
        BRIDGED_TASKS,
        "Bridged tasks alive on this replica (running, or keeping their outcome)"
    );
    describe_counter!(
        BRIDGED_TASKS_TOTAL,
        "Bridged tasks ended, by outcome (completed, failed, cancelled), or refused by the bounds (refused)"
    );
    describe_counter!(
        BRIDGED_TASK_FORWARDS_TOTAL,
        "tasks/* for another replica's bridged task, by outcome (forwarded; or answered here: unreachable, restarted, looped)"
    );
    describe_counter!(
        LEGACY_SESSIONS_TOTAL,
        "Sessions opened by initialize-era clients (initialize answered with a session id)"
    );
    describe_gauge!(
        LEGACY_WAITING_CALLS,
        "Initialize-era clients' calls held open for the client's answer to a request of the gateway's"
    );
    describe_gauge!(
        BACKEND_SESSIONS,
        "Sessions open with initialize-era HTTP backends, by backend"
    );
    describe_gauge!(STDIO_PROCESSES, "stdio backend processes running, by backend");
    describe_gauge!(
        SHARED_LISTENS,
        "Backend listens the gateway reads for the clients that share them, by backend"
    );
    describe_gauge!(
        SHARED_LISTEN_CLIENTS,
        "Client listens served from a shared backend listen, by backend"
    );
    describe_counter!(
        STDIO_DOWN_TOTAL,
        "stdio backend processes that went down (exited, not found, no answer...), by backend and reason"
    );
}

/// One unit of a gauge held while this value lives: added when made, taken away when dropped,
/// so that a gauge of things open (sessions, processes, waiting calls) cannot drift on an early
/// return or a panic.
#[derive(Debug)]
pub(crate) struct Held(metrics::Gauge);

impl Held {
    /// One more of `gauge` (labelled `backend` when given), until dropped.
    pub(crate) fn new(gauge: &'static str, backend: Option<&str>) -> Self {
        let gauge = match backend {
            Some(backend) => metrics::gauge!(gauge, "backend" => backend.to_owned()),
            None => metrics::gauge!(gauge),
        };
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Records a session opened by an `initialize`-era client.
pub(crate) fn legacy_session_opened() {
    metrics::counter!(LEGACY_SESSIONS_TOTAL).increment(1);
}

/// Records a stdio backend's process gone down for `reason`.
pub(crate) fn stdio_down(backend: &str, reason: &'static str) {
    metrics::counter!(STDIO_DOWN_TOTAL, "backend" => backend.to_owned(), "reason" => reason).increment(1);
}

/// Records how many bridged tasks this replica holds (`tasks/`).
pub(crate) fn bridged_tasks(alive: usize) {
    metrics::gauge!(BRIDGED_TASKS).set(alive as f64);
}

/// Counts a bridged task that ended with `outcome`, or was `refused`.
pub(crate) fn bridged_task_ended(outcome: &'static str) {
    metrics::counter!(BRIDGED_TASKS_TOTAL, "outcome" => outcome).increment(1);
}

/// Counts a `tasks/*` for another replica's bridged task, by what became of it.
pub(crate) fn bridged_task_forward(outcome: &'static str) {
    metrics::counter!(BRIDGED_TASK_FORWARDS_TOTAL, "outcome" => outcome).increment(1);
}

/// Records the keyring the gateway starts with (call after installing the recorder).
pub(crate) fn keyring_in_use(keyring: &tower_mrtr::Keyring) {
    keyring_loaded(keyring.active_key_id().as_str(), keyring.len(), None);
}

/// Records the outcome of a keyring reload and, on success, the active key id.
pub(crate) fn keyring_reloaded(result: Result<(&str, usize), ()>, previous_kid: Option<&str>) {
    match result {
        Ok((active, keys)) => {
            metrics::counter!(KEYRING_RELOADS_TOTAL, "result" => "ok").increment(1);
            keyring_loaded(active, keys, previous_kid);
        }
        Err(()) => metrics::counter!(KEYRING_RELOADS_TOTAL, "result" => "failed").increment(1),
    }
}

/// Records the keyring in use: its active key id and its size.
pub(crate) fn keyring_loaded(active: &str, keys: usize, previous_kid: Option<&str>) {
    if let Some(previous) = previous_kid.filter(|p| *p != active) {
        metrics::gauge!(KEYRING_ACTIVE_KEY, "kid" => previous.to_owned()).set(0.0);
    }
    metrics::gauge!(KEYRING_ACTIVE_KEY, "kid" => active.to_owned()).set(1.0);
    metrics::gauge!(KEYRING_KEYS).set(keys as f64);
}

/// Records the outcome of a listener certificate reload.
pub(crate) fn tls_reloaded(ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    metrics::counter!(TLS_RELOADS_TOTAL, "result" => result).increment(1);
}

/// Records the outcome of a config file reload (`ok`, `partial`, `failed`).
pub(crate) fn config_reloaded(result: &'static str) {
    metrics::counter!(CONFIG_RELOADS_TOTAL, "result" => result).increment(1);
}

/// Records whether `backend` was usable at its last probe.
pub(crate) fn backend_up(backend: &str, up: bool) {
    metrics::gauge!(BACKEND_UP, "backend" => backend.to_owned()).set(if up { 1.0 } else { 0.0 });
}

/// Records the era and version a probe found for `backend`, clearing what an earlier probe found.
pub(crate) fn backend_era(backend: &str, previous: Option<(&str, &str)>, now: Option<(&str, &str)>) {
    let set = |(era, version): (&str, &str), value: f64| {
        metrics::gauge!(BACKEND_ERA, "backend" => backend.to_owned(), "era" => era.to_owned(), "protocol_version" => version.to_owned())
            .set(value);
    };
    if let Some(previous) = previous.filter(|p| Some(*p) != now) {
        set(previous, 0.0);
    }
    if let Some(now) = now {
        set(now, 1.0);
    }
}

/// Records a request shed over the in-flight limit.
pub(crate) fn shed() {
    metrics::counter!(SHED_TOTAL).increment(1);
}

/// Records a request the OAuth resource server refused, for `reason` (a fixed label).
pub(crate) fn auth_refused(reason: &'static str) {
    metrics::counter!(AUTH_REFUSED_TOTAL, "reason" => reason).increment(1);
}

/// Records a call the policy refused.
pub(crate) fn policy_denied(method: &'static str) {
    metrics::counter!(POLICY_DENIED_TOTAL, "method" => method).increment(1);
}

/// Records a request a rate limit refused; `per` is what the limit counts per.
pub(crate) fn rate_limited(per: &'static str) {
    metrics::counter!(RATE_LIMITED_TOTAL, "limit" => per).increment(1);
}

/// Records a shared-store operation that failed, for `reason` (a fixed label).
pub(crate) fn shared_store_error(reason: &'static str) {
    metrics::counter!(SHARED_STORE_ERRORS_TOTAL, "reason" => reason).increment(1);
}

/// Records whether the shared store's last operation succeeded.
pub(crate) fn shared_store_up(up: bool) {
    metrics::gauge!(SHARED_STORE_UP).set(if up { 1.0 } else { 0.0 });
}

/// Records a retry refused as a replay of a single-use request state.
pub(crate) fn replay_refused() {
    metrics::counter!(REPLAYS_REFUSED_TOTAL).increment(1);
}

/// Records an audit event dropped.
pub(crate) fn audit_dropped() {
    metrics::counter!(AUDIT_DROPPED_TOTAL).increment(1);
}

/// Records a definition of `backend` found to differ from its pin.
pub(crate) fn definition_changed(backend: &str) {
    metrics::counter!(TOOL_DEFINITION_CHANGED_TOTAL, "backend" => backend.to_owned()).increment(1);
}

/// Records that draining started.
pub(crate) fn draining() {
    metrics::gauge!(DRAINING).set(1.0);
}

/// Records a client connection opening (`+1`) or closing (`-1`).
pub(crate) fn connection(delta: f64) {
    metrics::gauge!(OPEN_CONNECTIONS).increment(delta);
}

/// Records an idle HTTP/1.1 client connection parked.
pub(crate) fn parked() {
    metrics::counter!(CONNECTIONS_PARKED_TOTAL).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_label_has_its_own_place() {
        let mut seen = std::collections::HashSet::new();
        for label in METHOD_LABELS {
            // `GET` and `DELETE` are HTTP methods, never read from a header.
            let method = match label {
                "none" => MethodLabel::of(None),
                "GET" => MethodLabel::GET,
                "DELETE" => MethodLabel::DELETE,
                _ => MethodLabel::of(Some(label)),
            };
            assert_eq!(method.as_str(), label);
            assert!(seen.insert(method.index()));
        }
        assert_eq!(MethodLabel::of(Some("other")).as_str(), "other");
        assert_eq!(MethodLabel::of(Some("GET")).as_str(), "other");
    }

    #[test]
    fn requests_to_legacy_backends_are_labelled_by_what_they_carry() {
        let none = HeaderMap::new();
        let post = |body: &str| MethodLabel::of_request(&http::Method::POST, &none, body.as_bytes()).as_str();
        assert_eq!(
            post(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#),
            "initialize"
        );
        assert_eq!(
            post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            "notifications/*"
        );
        assert_eq!(
            post(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}"#),
            "tools/call"
        );
        assert_eq!(post(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#), "none");
        assert_eq!(post("not json"), "none");
        let get = MethodLabel::of_request(&http::Method::GET, &none, b"");
        let delete = MethodLabel::of_request(&http::Method::DELETE, &none, b"");
        assert_eq!((get.as_str(), delete.as_str()), ("GET", "DELETE"));
        let mut modern = HeaderMap::new();
        modern.insert(MCP_METHOD, "tools/list".parse().unwrap());
        let label = MethodLabel::of_request(&http::Method::POST, &modern, br#"{"method":"tools/call"}"#);
        assert_eq!(label.as_str(), "tools/list", "the header, when there is one");
    }

    #[test]
    fn labels_are_bounded() {
        assert_eq!(MethodLabel::of(Some("tools/call")).as_str(), "tools/call");
        assert_eq!(MethodLabel::of(Some("x/made-up")).as_str(), "other");
        assert_eq!(MethodLabel::of(None).as_str(), "none");
        assert_eq!(status_label(http::StatusCode::BAD_GATEWAY), "502");
    }
}
