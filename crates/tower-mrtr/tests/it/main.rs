//! The library's integration tests, one test binary: a module per behaviour, the mocks they share
//! in `common`. Run one module's tests with `cargo test --workspace --test it -- json_relay::`.

mod common;

mod composition;
mod json_relay;
// Its recorder is thread-local (`metrics::with_local_recorder`) around services that answer on
// the test's own thread, so it shares the binary with the other tests.
#[cfg(feature = "metrics")]
mod metrics;
mod no_panic;
mod over_http;
mod readiness;
mod rotation;
mod sse_relay;
mod tasks;
mod v3_bindings;
