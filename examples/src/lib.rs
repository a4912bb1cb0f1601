//! The building blocks the examples of this directory share. Each example file shows one whole
//! stack and how its layers are ordered; what they have in common lives here, one module per
//! concern:
//!
//! * [`routing`]: [`McpRouter`](routing::McpRouter), a proxy's routing step under `MrtrLayer`:
//!   honour `PinnedRoute`, route on `McpRequestHead`, report `Route`. Its backends are any tower
//!   services: HTTP clients in the examples, `tower-test` mocks in the tests.
//! * [`forward`]: [`HttpBackend`](forward::HttpBackend), one backend reached over HTTP/1.1 with
//!   hyper-util's client, and the `name=url[,target...]` backend syntax of the command lines.
//! * [`auth`]: [`JwtAuth`](auth::JwtAuth), bearer-token verification with `jsonwebtoken` for
//!   tower-http's `ValidateRequestHeaderLayer`, putting the token's [`Subject`](auth::Subject)
//!   into the request's extensions, where `MrtrLayer::bind_principal` reads it.
//! * [`observe`]: spans for tower-http's `TraceLayer` that carry the MCP method, target and
//!   backend, filled in by [`RecordMcpHeadLayer`](observe::RecordMcpHeadLayer) from inside the
//!   stack, where `MrtrLayer` has parsed the request.
//! * [`jsonrpc`]: JSON-RPC error answers for the layers that refuse requests.
//! * [`cli`]: the command line and environment both example binaries read.
//!
//! The examples:
//!
//! * `single_backend_proxy.rs`: the smallest deployment, one backend, `MrtrLayer` and nothing
//!   else;
//! * `axum_gateway.rs`: two backends behind an axum router with tracing, JWT authentication, a
//!   per-principal rate limit and principal-bound envelopes;
//! * `hyper_proxy.rs`: the same relay on hyper and hyper-util alone;
//! * `tests/it/routing_with_mocks.rs`: unit tests of a proxy's routing under `MrtrLayer` with
//!   `tower-test` mocks and `tower::service_fn`, to copy.

#![forbid(unsafe_code)]

pub mod auth;
pub mod cli;
pub mod forward;
pub mod jsonrpc;
pub mod observe;
pub mod routing;

pub use tower_mrtr::BoxError;
