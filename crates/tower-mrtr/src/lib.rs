//! A [tower] middleware that makes any MCP proxy or gateway a correct, **stateless** relay for
//! the multi round-trip requests (MRTR, SEP-2322) of MCP revision 2026-07-28 and for the task ids
//! of its Tasks extension (SEP-2663).
//!
//! When a backend answers `tools/call`, `prompts/get` or `resources/read` with
//! `resultType: "input_required"`, [`MrtrLayer`] seals the backend's `requestState`, the
//! [`Route`] of the backend that answered (name and optional identity), the round, an expiry and
//! a binding (optional audience, method, target name, arguments, optional principal) into one
//! XChaCha20-Poly1305 envelope, and hands the client only that. When the
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
//! * The proxy honours a [`PinnedRoute`] in the request's extensions: it sends the request to
//!   the backend whose configured [`Route`] is `==` the pinned one, **name and
//!   [identity](RouteIdentity)**, and to no backend if none is (never to one that only has the
//!   name). A response to a pinned request that reports another route, in name or identity, is
//!   refused.
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
//! assert!(text.contains(r#""requestState":"mrtr4."#));
//! assert!(!text.contains("backend-secret"));
//! # Ok(())
//! # }
//! ```
//!
//! # What the inner service must be
//!
//! `MrtrLayer` wraps a `Service<http::Request<RequestBody<B>>>` whose response is an
//! `http::Response<ResBody>`:
//!
//! * **`Clone`**: the layer reads the request body before calling the inner service, so it moves
//!   the service made ready by `poll_ready` into the response future and keeps a clone (tower's
//!   "be careful when cloning inner services" rule). Readiness is therefore held while a client
//!   sends its body; put a body timeout (tower-http's `RequestBodyTimeoutLayer`) outside.
//! * the request body `B: http_body::Body` with `B::Error: Into<BoxError>`; the inner service
//!   receives it as [`RequestBody<B>`] (`Data = Bytes`, same error type): the buffered bytes of a
//!   POST, or the client's own body, untouched, for other methods.
//! * the response body `ResBody: http_body::Body` with `ResBody::Error: Into<BoxError>`; the
//!   client receives [`ResponseBody<ResBody>`] (`Data = Bytes`, `Error = BoxError`).
//! * `Error` is passed through unchanged: the layer's own answers are responses, never errors.
//!   Under axum (`Router::route_service`) that means `Error = Infallible`, and everything must be
//!   `Send + 'static` (futures and bodies; the layer adds nothing that is not).
//!
//! The layer inserts a [`McpRequestHead`] into every POST it relays that holds one JSON-RPC
//! request: after a retry's envelope is opened, with the names the backend will see. There is
//! none on a request that is not a POST (it is not read), on a batch, on a JSON-RPC *response*
//! a client sends (no method), and of course on anything the layer refused (it never reaches
//! the inner service).
//!
//! # Composing with other layers
//!
//! Outermost first, for a gateway that authenticates, limits, traces and compresses:
//!
//! ```text
//!  client
//!    │
//!    ▼
//!  SetSensitiveRequestHeadersLayer   marks Authorization sensitive BEFORE anything logs it
//!    │   (tower-http)
//!  TraceLayer (tower-http)           sees every request and every answer, refusals included;
//!    │                               the span is made before the body is read, so the MCP
//!    │                               method and name are recorded into it later, from
//!    │                               McpRequestHead, by a small layer inside MrtrLayer
//!  CompressionLayer (answers)        must be OUTSIDE: MrtrLayer reads answers in clear and
//!    │                               fails closed on an encoded one
//!  RequestDecompressionLayer         must be OUTSIDE: MrtrLayer refuses a compressed body
//!    │                               (415); decompressed first, it is read and checked, and
//!    │                               max_request_body bounds the *decompressed* size
//!  authentication                    must be OUTSIDE: it puts the subject into the request's
//!    │                               extensions, where bind_principal reads it; inside, the
//!    │                               principal is missing and the request is refused (403)
//!  rate limit / load shed            per principal, so after authentication (keyed on a
//!    │                               verified subject, not on anything the client picks);
//!    │                               refused requests are never buffered or parsed
//!  RequestBodyTimeoutLayer           bounds how long a slow client holds the inner service's
//!    │                               readiness while MrtrLayer reads its body
//!  MrtrLayer                         opens retries (PinnedRoute, McpRequestHead), seals answers
//!    │
//!  (span recorder)                   reads McpRequestHead, and Route on the way back
//!    │
//!  your proxy                        routes on McpRequestHead, honours PinnedRoute, reports Route,
//!    │                               drops Accept-Encoding and the client's credentials
//!    ▼                               toward backends
//!  backends
//! ```
//!
//! Layers outside `MrtrLayer` that answer early (a 401, a 406, a 429) must build responses of
//! the layer's body type, [`ResponseBody<ResBody>`]: [`ResponseBody::new`] wraps a body of the
//! inner type, and `From<&'static str | String | Vec<u8> | Bytes>` and `Default` build one from
//! bytes, so tower-http's `AsyncRequireAuthorizationLayer` and `ValidateRequestHeaderLayer` stack
//! in front with no adapter (`tests/it/composition.rs` does exactly that).
//!
//! Under axum, put the layers that answer early on the `Router` (`Router::layer`), where every
//! response has axum's body, and `MrtrLayer` with the proxy as the route's service
//! (`route_service`). Some layers only compose there: `tower_governor` answers through
//! `From<GovernorError>`, which it implements for axum's response type only. Layers that change
//! the *request* body type (`RequestBodyTimeoutLayer`) cannot go on the `Router`, whose routes
//! take axum's body; put them on the route's service, right outside `MrtrLayer` (authentication
//! and rate limits read no body, so the order between them does not matter).
//!
//! Request decompression: tower-http's `RequestDecompressionLayer` decodes lazily, so the
//! layer's length limit stops decoding at `max_request_body` (a compression bomb costs the limit
//! plus one 4 KiB chunk; `mrtr-gateway`'s `tests/it/http_layers.rs` sends one). Give it
//! `pass_through_unaccepted(true)`: encodings it cannot decode then reach `MrtrLayer`, which
//! refuses them with 415 and a JSON-RPC error. It boxes every answer and wraps every request
//! body, so a gateway that counts its per-request cost calls it only for requests that carry
//! `Content-Encoding` (`mrtr-gateway`'s `middleware::DecompressRequestLayer` does).
//!
//! The repository's `examples/` holds this stack, runnable and tested against real backends:
//! `axum_gateway.rs` (tracing with MCP fields, JWT authentication, a per-principal rate limit,
//! `bind_principal`, a two-backend router), `hyper_proxy.rs` (the same without axum) and
//! `tests/it/routing_with_mocks.rs` (see [`testing`]).
//!
//! # Behaviour
//!
//! | input | outcome |
//! |---|---|
//! | a request the layer need not change | forwarded byte for byte |
//! | a retry with a valid envelope | backend state restored, [`PinnedRoute`] and [`Continuation`] set, forwarded |
//! | a retry whose envelope is not one, tampered, expired, misbound (audience, method, name, arguments, principal), or under an unknown key | JSON-RPC `-32602`, one uniform message; inner service not called |
//! | a retry whose envelope is of round [`MrtrLayer::max_rounds`] (default 16) or later | JSON-RPC `-32602` "The request took too many rounds …"; inner service not called |
//! | an envelope of format v3 (`mrtr3.`, sealed before the upgrade to v4) | opened as sealed, with no call target (a follow-up on a v3 task handle is checked as a `tools/call` naming no tool); see [`envelope`] |
//! | an envelope of format v2 (`mrtr2.`, sealed before the upgrade to v3) | opened as round 1, route without identity, no audience (so refused where one is configured), no call target; see [`envelope`] |
//! | a retry whose `params.arguments` differ in value from round one's (order, whitespace and escapes do not matter; see [`canonical`]) | the same `-32602`: the envelope is bound to them ([`MrtrLayer::bind_arguments`]) |
//! | a `requestState` on any other method | JSON-RPC `-32602`; inner service not called |
//! | with [`MrtrLayer::bind_principal`], a request that may produce or open an envelope and has no principal | HTTP 403, `-32600` (unless [`MrtrLayer::require_principal`]`(false)`) |
//! | a POST body over the limit | HTTP 413 with a JSON-RPC error; inner service not called |
//! | a POST body with any `Content-Encoding` value other than `identity` | HTTP 415, `-32600`: it could not be inspected |
//! | a POST body that is not JSON (a BOM, UTF-16, invalid UTF-8, trailing bytes, anything else) | HTTP 400, `-32700`; inner service not called |
//! | JSON the layer cannot read unambiguously as a request (another JSON value, a duplicate member, a member named like one the layer reads but for letter case, a mistyped `method`) | HTTP 400, `-32600`; inner service not called |
//! | a batch | forwarded untouched, unless an element carries a `requestState` or a task handle (HTTP 400, `-32600`); `input_required` and task results in its answer fail closed element by element |
//! | `Mcp-Method`/`Mcp-Name` disagreeing with the body of a request being rewritten | HTTP 400, `-32020` |
//! | an `input_required` answer | `requestState` replaced by an envelope; all other bytes kept |
//! | an `input_required` answer without a route, or that cannot be read or sealed | JSON-RPC `-32603`, never the raw state |
//! | a `tools/call` answered with `resultType: "task"` | `taskId` replaced by a sealed task handle (another purpose than a `requestState`; carries the called tool; lives as long as the task's `ttlMs`, capped by [`MrtrLayer::max_task_ttl`]) |
//! | `tasks/get`, `tasks/update`, `tasks/cancel` with a valid handle | with [`MrtrLayer::authorize`], checked as a `tools/call` of the tool sealed in the handle (refused: HTTP 403, `-32600`; inner service not called); the backend's `taskId` restored in the body and in `Mcp-Name`, [`PinnedRoute`], [`Continuation`] and [`TaskHandle`] (the handle presented) set; task ids in the answer (`taskId` members, `taskIds` arrays) shown as the client's handle, every other byte kept |
//! | the same with an invalid, expired or misbound handle, or a `requestState` in its place | JSON-RPC `-32602`; inner service not called |
//! | a task request whose `_meta` does not declare the Tasks extension | HTTP 400, `-32021` with `requiredCapabilities` (SEP-2663); inner service not called |
//! | `subscriptions/listen` filtering on task handles | at most 100, each opened once and pinned (handles of different backends in one filter: `-32602`); task ids in the stream shown as the client's handles |
//! | an answer to a pinned request reporting another [`Route`] (another name, or the same name with another identity or none) | JSON-RPC `-32603`: the proxy did not honour the pin |
//! | an answer to a request the layer did not read (not a POST) that holds an `input_required` or task result | JSON-RPC `-32603` (an SSE stream ends with it): fail closed |
//!
//! The precise reason for every refusal goes to [`tracing`] at debug level; clients only ever see
//! the uniform message.
//!
//! [tower]: https://docs.rs/tower

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's example is a doctest too, so the crate's front page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod body;
pub mod canonical;
mod clock;
mod config;
pub mod envelope;
pub mod error;
mod future;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;
mod json;
mod jsonrpc;
pub mod keyring;
mod layer;
pub mod mcp_headers;
pub mod metrics;
mod outcome;
mod request;
mod response;
pub mod route;
mod service;
mod shared_str;
mod sse;
pub mod testing;

pub use body::{RequestBody, ResponseBody};
pub use clock::{Clock, SystemClock};
pub use config::{
    DEFAULT_MAX_ENVELOPE_LEN, DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_MAX_ROUNDS,
    DEFAULT_MAX_SSE_EVENT, DEFAULT_MAX_TASK_TTL, DEFAULT_TTL,
};
pub use error::Denied;
pub use future::ResponseFuture;
pub use keyring::{Key, KeyId, Keyring, KeyringError, KeyringHandle};
pub use layer::MrtrLayer;
pub use outcome::Outcome;
pub use route::{Continuation, EnvelopeId, McpRequestHead, PinnedRoute, Route, RouteIdentity, TaskHandle};
pub use service::Mrtr;

/// Alias for a type-erased error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
