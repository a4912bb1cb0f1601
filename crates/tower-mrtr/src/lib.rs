//! A [tower] middleware that makes any MCP proxy or gateway a correct, **stateless** relay for
//! the multi round-trip requests (MRTR, SEP-2322) of MCP revision 2026-07-28 and for the task ids
//! of its Tasks extension (SEP-2663).
//!
//! When a backend answers `tools/call`, `prompts/get` or `resources/read` with
//! `resultType: "input_required"`, [`MrtrLayer`] seals the backend's `requestState`, the
//! [`Route`] of the backend that answered, an expiry and a binding (method, target name, optional
//! principal) into one XChaCha20-Poly1305 envelope, and hands the client only that. When the
//! client retries with it, the layer opens it, refuses anything tampered with, expired or misbound
//! with a JSON-RPC error (without calling the inner service), restores the backend's own state
//! byte for byte and puts a [`PinnedRoute`] into the request's extensions so the proxy sends the
//! retry to the same backend. Nothing is stored between rounds: every replica holding the same
//! [`Keyring`] serves every round.
//!
//! Everything else passes through untouched: requests and responses that need no change are
//! never re-serialised.
//!
//! # Contract with the wrapped proxy
//!
//! * The proxy reports which backend served a response by inserting a [`Route`] into the
//!   response's extensions (or the layer is given a [default route](MrtrLayer::default_route)).
//! * The proxy honours a [`PinnedRoute`] in the request's extensions. A response to a pinned
//!   request that reports another route is refused.
//! * The proxy may route on the [`McpRequestHead`] the layer inserts, instead of parsing the body
//!   again.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use tower::{ServiceBuilder, ServiceExt};
//! use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // A stand-in for a proxy: a backend that always asks for confirmation.
//! let backend = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
//!     let body = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required",
//!         "inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"Sure?",
//!         "requestedSchema":{"type":"object","properties":{}}}}},"requestState":"backend-secret"}}"#;
//!     let mut response = Response::new(Full::new(Bytes::from(body)));
//!     response.extensions_mut().insert(Route::new("backend-a"));
//!     Ok::<_, std::convert::Infallible>(response)
//! });
//!
//! let keyring = Keyring::generate("k1")?; // in production: `std::env::var("MRTR_KEYS")?.parse()?`
//! let svc = ServiceBuilder::new().layer(MrtrLayer::new(keyring)).service(backend);
//!
//! let request = Request::post("/mcp")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from(
//!         r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deploy"}}"#,
//!     )))?;
//! let response = svc.oneshot(request).await?;
//! let body = response.into_body().collect().await?.to_bytes();
//! let text = std::str::from_utf8(&body)?;
//!
//! // The client sees a sealed envelope, never the backend's state.
//! assert!(text.contains(r#""requestState":"mrtr1."#));
//! assert!(!text.contains("backend-secret"));
//! # Ok(())
//! # }
//! ```
//!
//! # Behaviour
//!
//! | input | outcome |
//! |---|---|
//! | a request the layer need not change | forwarded byte for byte |
//! | a retry with a valid envelope | backend state restored, [`PinnedRoute`] set, forwarded |
//! | a retry whose envelope is not one, tampered, expired, misbound, or under an unknown key | JSON-RPC `-32602`, one uniform message; inner service not called |
//! | a POST body over the limit | HTTP 413 with a JSON-RPC error; inner service not called |
//! | a POST body with a `Content-Encoding` (other than `identity`) | HTTP 415, `-32600`: it could not be inspected |
//! | a body that is not JSON | forwarded untouched |
//! | valid JSON the layer cannot read as one request (duplicate members, say) | HTTP 400, `-32600` |
//! | a batch | forwarded untouched, unless an element carries a `requestState` (HTTP 400, `-32600`) |
//! | `Mcp-Method`/`Mcp-Name` disagreeing with the body of a request being rewritten | HTTP 400, `-32020` |
//! | an `input_required` answer | `requestState` replaced by an envelope; all other bytes kept |
//! | an `input_required` answer without a route, or that cannot be read or sealed | JSON-RPC `-32603`, never the raw state |
//! | a `tools/call` answered with `resultType: "task"` | `taskId` replaced by a sealed task handle (another purpose than a `requestState`; lives as long as the task's `ttlMs`, capped by [`MrtrLayer::max_task_ttl`]) |
//! | `tasks/get`, `tasks/update`, `tasks/cancel` with a valid handle | the backend's `taskId` restored in the body and in `Mcp-Name`, [`PinnedRoute`] set; task ids in the answer shown as the client's handle |
//! | the same with an invalid, expired or misbound handle, or a `requestState` in its place | JSON-RPC `-32602`; inner service not called |
//! | a task request whose `_meta` does not declare the Tasks extension | HTTP 400, `-32021` with `requiredCapabilities` (SEP-2663); inner service not called |
//! | `subscriptions/listen` filtering on task handles | opened and pinned (handles of different backends in one filter: `-32602`); task ids in the stream shown as the client's handles |
//! | an answer to a pinned request reporting another [`Route`] | JSON-RPC `-32603`: the proxy did not honour the pin |
//!
//! The precise reason for every refusal goes to [`tracing`] at debug level; clients only ever see
//! the uniform message.
//!
//! [tower]: https://docs.rs/tower

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod clock;
mod config;
pub mod envelope;
pub mod error;
mod future;
mod jsonrpc;
pub mod keyring;
mod layer;
pub mod mcp_headers;
mod request;
mod response;
pub mod route;
mod service;
mod sse;

pub use body::{RequestBody, ResponseBody};
pub use clock::{Clock, SystemClock};
pub use config::{
    DEFAULT_MAX_ENVELOPE_LEN, DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_MAX_SSE_EVENT,
    DEFAULT_MAX_TASK_TTL, DEFAULT_TTL,
};
pub use future::ResponseFuture;
pub use keyring::{Key, KeyId, Keyring, KeyringError, KeyringHandle};
pub use layer::MrtrLayer;
pub use route::{McpRequestHead, PinnedRoute, Route};
pub use service::Mrtr;

/// Alias for a type-erased error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
