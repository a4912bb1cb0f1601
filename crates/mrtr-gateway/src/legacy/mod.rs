//! The legacy front: `mrtr-gateway` serves MCP clients of the `initialize` era (2025-03-26,
//! 2025-06-18, 2025-11-25) in front of the same backends, with multi round-trip requests
//! bridged inside the legacy request. Imports `auth` (the caller), `route` (the mirrored-header names), `upstream`
//! (its SSE reader, and the channel through which legacy backends' requests reach a legacy
//! client), `observe` (its sessions and waiting calls counted) and the ground floor; its own floors, lowest first: `config`, `modern` (the bound on
//! the modern stack it calls, written once), `session`, `answer` and `stream`; `lifecycle`,
//! `notes`, `registry`, `reply` (its own HTTP answers), `request` and `subscriptions`; `bridge`
//! and `layer` (the front's state, [`DualEraLayer`]); `listen`; `standalone` (a session's `GET`
//! stream and the subscriptions on it); `service` ([`DualEra`], which dispatches a request).
//!
//! The specification defines a *dual-era* server: the era is chosen by how a client opens
//! (`initialize` selects legacy semantics for that session; per-request `_meta` is served
//! statelessly), and both may be served on one endpoint. [`DualEra`] is that front, a tower
//! service wrapping the modern stack (the `MrtrLayer` and the proxy) and calling it once per
//! modern round, so that:
//!
//! * a modern request pays one header comparison and reaches the modern stack untouched;
//! * a legacy session lives in its sealed `Mcp-Session-Id` (`session.rs`): no session store (a
//!   replica remembers what opening an id gave, bounded, so as not to open it on every request;
//!   a memo that no client relies on);
//! * a legacy request becomes a modern one with the session's `_meta` and the mirrored headers
//!   (`request.rs`), and its answer comes back in legacy form (`answer.rs`), with progress and log
//!   notifications relayed on the call's stream (`stream.rs`);
//! * when a backend answers `input_required`, the call stays open for as long as the client takes
//!   to answer (bounded): the input requests go to the client as legacy server-to-client
//!   requests, its answers (separate POSTs) find the waiting call in this replica's
//!   `registry.rs`, and the backend is asked again with `inputResponses` and the sealed state
//!   (`bridge.rs`);
//! * resource subscriptions are served on the session's `GET` stream, held by the replica the
//!   client is hashed to, each as a modern `subscriptions/listen` (`subscriptions.rs`,
//!   `listen.rs`).
//!
//! This is not the design the project rejected (parking a *legacy backend's* live request
//! between a modern client's requests behind a resume token). The backends stay modern and
//! stateless. What the gateway holds is what any legacy server must: the one open call whose
//! answer arrives as another POST, on the replica serving it, for as long as that call lasts.
//! Legacy clients therefore need a load balancer that keeps a session on one replica (hash on
//! `Mcp-Session-Id`); modern clients need nothing of the kind (`docs/gateway.md`).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mrtr_gateway::legacy::{DualEra, DualEraLayer};
//! use mrtr_gateway::Settings;
//! use mrtr_gateway::Proxy;
//! use tower_mrtr::{Keyring, KeyringHandle, MrtrLayer};
//!
//! let keys = KeyringHandle::new(Keyring::generate("k1")?);
//! let proxy = Proxy::new(vec!["a=http://127.0.0.1:9001/mcp".parse()?], Default::default(), Default::default());
//! let modern = tower::ServiceBuilder::new()
//!     .layer(MrtrLayer::with_keyring_handle(keys.clone()))
//!     .service(proxy);
//! let dual_era = DualEra::new(modern, DualEraLayer::new(Settings::default().legacy(), keys));
//! # let _ = dual_era; Ok(()) }
//! ```

mod answer;
mod bridge;
mod config;
mod layer;
mod lifecycle;
mod listen;
mod modern;
mod notes;
mod registry;
mod reply;
mod request;
mod service;
pub(crate) mod session;
mod standalone;
pub(crate) mod stream;
mod subscriptions;

pub use config::{LEGACY_VERSIONS, LegacyConfig};
pub use layer::DualEraLayer;
pub use modern::{ModernAnswer, ModernBody, ModernStack};
pub use reply::LegacyBody;
pub use service::{DualEra, DualEraFuture};
pub use session::MCP_SESSION_ID;
