//! The legacy front's settings (read by every other module of the front, so it imports none).
//! Their defaults and their documentation are the gateway's settings' (`config/mod.rs`,
//! `--legacy-*`), which build this with `Settings::legacy`.

use std::sync::Arc;
use std::time::Duration;

/// The protocol versions the legacy front negotiates at `initialize`, oldest first; a client
/// asking for another gets the last one, as the legacy handshake prescribes.
pub const LEGACY_VERSIONS: &[&str] = &["2025-03-26", "2025-06-18", "2025-11-25"];

/// How the gateway serves clients of the `initialize` era (2025-03-26, 2025-06-18, 2025-11-25).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LegacyConfig {
    /// Serve legacy clients at all. When off, an `initialize` gets the modern-only answer
    /// (HTTP 400), as before the front existed.
    pub enabled: bool,
    /// The legacy-era path (`legacy-era-path`), when one is served: there a modern request is
    /// declined (`400`), so that an SDK negotiating the era falls back to `initialize`.
    pub era_path: Option<Arc<str>>,
    /// The path modern clients use (`/mcp`), named in the answer on the legacy-era path.
    pub main_path: &'static str,
    /// How long a sealed `Mcp-Session-Id` stays valid; a client whose session expired gets 404
    /// and starts a new one.
    pub session_ttl: Duration,
    /// How long a call waits for the client's answers to one round of server-to-client
    /// requests before it ends with an error (and the client is told to cancel them).
    pub answer_timeout: Duration,
    /// How long a call may last in all, every round together.
    pub call_timeout: Duration,
    /// Most `input_required` rounds one call may take.
    pub max_rounds: usize,
    /// Most calls waiting for their client's answers on one replica at once.
    pub max_waiting_calls: usize,
    /// Most calls of one session waiting for answers at once.
    pub max_waiting_calls_per_session: usize,
    /// Most calls of one principal (with a principal header) waiting for answers at once.
    pub max_waiting_calls_per_principal: usize,
    /// Most server-to-client requests waiting for an answer on one replica at once.
    pub max_waiting_answers: usize,
    /// Most server-to-client requests of one session waiting for an answer at once.
    pub max_waiting_answers_per_session: usize,
    /// Most server-to-client requests of one principal (with a principal header) waiting for an
    /// answer at once.
    pub max_waiting_answers_per_principal: usize,
    /// Most sessions a replica keeps notes about (a `DELETE`, a `logging/setLevel`).
    pub max_session_notes: usize,
    /// Interval of SSE keep-alive comments while a call waits for the client.
    pub keep_alive: Duration,
    /// Largest message read from the modern stack (one JSON answer or one SSE event).
    pub max_message: usize,
}
