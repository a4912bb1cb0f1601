//! Stateless MCP `2026-07-28` backends that exercise multi round-trip
//! requests (MRTR, SEP-2322), built with the official Rust SDK `rmcp` 3.11
//! and served over Streamable HTTP with axum 0.8.
//!
//! * [`demo`]: two demo backends ([`DemoBackend`], catalogs `Alpha` and
//!   `Beta`) with one-, two- and three-round tools, a prompt and a resource
//!   that need input. Every final result names the backend identity.
//! * [`fixture`]: [`ConformanceFixture`], exactly what the conformance
//!   suite's `input-required-result-*` and `http-header-validation` scenarios
//!   call.
//! * [`suite_fixture`]: [`SuiteFixture`], what the suite's other server scenarios (tools,
//!   prompts, resources, completion, both eras) call, with MRTR where a legacy scenario expects a
//!   server-to-client request.
//! * [`tasks_fixture`]: [`TasksFixture`], a task-capable backend (Tasks
//!   extension, SEP-2663) with what the suite's `tasks-*` scenarios call.
//! * [`legacy`]: [`LegacyBackend`], an `initialize`-era server with sessions (2025-11-25), for
//!   tests of how a gateway treats the servers of that era.
//! * [`serve`](mod@serve): run any `rmcp` server handler on `127.0.0.1:0` at
//!   `/mcp`, with JSON or SSE responses, and stop it again.
//! * [`cli`]: what the `fixture-server` and `tasks-fixture-server` binaries
//!   share (usage and errors, `--listen`, serving until Ctrl-C or SIGTERM).
//!
//! None of the backends keeps state between rounds: progress and collected
//! answers travel in an HMAC-sealed `requestState` ([`StateSealer`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mrtr_backends::{DemoBackend, ResponseMode, serve};
//!
//! let backend = serve(DemoBackend::alpha("alpha")?, ResponseMode::Sse).await?;
//! println!("MCP endpoint: {}", backend.url());
//! backend.shutdown().await?;
//! # Ok(()) }
//! ```

use std::fmt;

pub mod cli;
pub mod demo;
pub mod fixture;
mod flow;
pub mod legacy;
pub mod serve;
mod state;
pub mod suite_fixture;
pub mod tasks_fixture;

pub use demo::{DemoBackend, DemoCatalog};
pub use fixture::ConformanceFixture;
pub use legacy::{LegacyBackend, ServedLegacy, serve_legacy, serve_legacy_at, serve_legacy_stdio};
pub use serve::{
    MCP_PATH, ResponseMode, ServeOptions, ServedBackend, ShutdownHandle, serve, serve_stdio, serve_with,
};
pub use state::{DEFAULT_STATE_TTL, StateSealer};
pub use suite_fixture::SuiteFixture;
pub use tasks_fixture::TasksFixture;

/// Errors constructing a backend.
#[derive(Debug)]
#[non_exhaustive]
pub enum BackendError {
    /// The operating system's random source failed while generating the
    /// `requestState` key.
    Random(getrandom::Error),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Random(error) => {
                write!(f, "failed to generate a requestState key: {error}")
            }
        }
    }
}

impl std::error::Error for BackendError {}
