//! The examples' tests, one test binary: a module per example (`axum_gateway`, `hyper_proxy`)
//! and the routing pattern (`routing_with_mocks`), the backends and tokens they share in
//! `common`. The spans of `axum_gateway` are tested in a binary of their own
//! (`tests/axum_gateway_spans.rs`): it installs a global tracing subscriber.

mod common;

mod axum_gateway;
mod hyper_proxy;
mod routing_with_mocks;
