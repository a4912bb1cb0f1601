//! The workspace's end-to-end tests, one test binary: a module per subject, real MCP peers
//! through the gateway (helpers in `mrtr-test-support`). Run one module's tests with
//! `cargo test --workspace --test it -- attacks::`. The legacy front's memory test is a binary of
//! its own (`legacy_memory.rs`): it counts the whole process's heap with a global allocator.

mod attacks;
mod audit;
mod bad_input;
mod bridged_fleet;
mod bridged_stdio;
mod bridged_tasks;
mod deployments;
mod fleet;
mod gateway_http;
mod layout;
mod legacy;
mod legacy_era_path;
mod oauth;
mod pinning;
mod policy;
mod real_peers;
mod rooms;
mod scale_out;
mod streaming;
mod tasks;
mod traces;
