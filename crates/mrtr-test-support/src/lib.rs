//! The helpers the workspace's tests share, each defined once (`docs/tests.md` says which test
//! goes where and what belongs in which module).
//!
//! | module | what it holds | feature |
//! |---|---|---|
//! | [`mcp`] | the protocol's literal bits: the `_meta` value and its variants, the conformant headers, request bodies, reading the JSON-RPC message of a JSON or SSE answer | always |
//! | `mcp` (with `gateway`) | the HTTP client side: `Call`, `Reply`, `send`, `drive`, `raw`, reqwest and hyper requests | `gateway` |
//! | [`wait`] | the one [`TIMEOUT`](wait::TIMEOUT) every step is bounded by, [`eventually`](wait::eventually) | always |
//! | [`metrics`] | reading a sample out of a Prometheus text exposition | always |
//! | [`redis`] | a real `redis-server` on a free loopback port, stopped and started again (the shared store's tests) | always |
//! | `gateway` | starting an in-process gateway, and the real binary as a child process | `gateway` |
//! | `backends` | the demo backends (`Stack`), a raw hyper backend answering in a chosen way, the demo's `delete_branch` flow | `gateway` |
//! | `peers` | rmcp clients: the form-filling `Answerer`, `connect`, `call` | `peers` (also in `gateway`) |
//! | `tls` | scratch directories, a certificate authority, TLS server configurations, an HTTPS server | `gateway` |
//!
//! Without features the crate needs only `serde_json`, `anyhow` and tokio's timer: that is what
//! tower-mrtr's own tests take, so `cargo test -p tower-mrtr` builds neither the gateway nor an
//! MCP peer. mrtr-backends' tests add `peers` (rmcp clients, still no gateway); the gateway's, the
//! examples' and the workspace's tests enable `gateway`, which includes `peers`.

#[cfg(feature = "gateway")]
pub mod backends;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod mcp;
pub mod metrics;
#[cfg(feature = "peers")]
pub mod peers;
pub mod redis;
#[cfg(feature = "gateway")]
pub mod tls;
pub mod wait;
