//! Bridged tasks: an `initialize`-era backend's own requests (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) during a 2026-07-28 client's `tools/call`, carried to
//! that client through the Tasks extension (SEP-2663), the one stateful part of the gateway.
//!
//! A 2026-07-28 client takes no server-to-client requests, and MRTR cannot resume a legacy
//! backend's live request without parking it behind a token (a session in disguise). A client
//! that declares the Tasks extension has asked for explicit state instead: a task with an id, a
//! TTL and its own errors. So when such a client's call to a legacy backend meets the backend's
//! own request, the gateway answers the client a `CreateTaskResult` and keeps the backend's call
//! running on this replica:
//!
//! * [`layer`]: the tower layer between the MRTR layer and the proxy ([`BridgeLayer`],
//!   [`Bridged`]). A `tools/call` declaring Tasks (and elicitation, sampling or roots) goes on
//!   with a [`ClientAsks`](crate::upstream::translate::ClientAsks) in its extensions, as the legacy
//!   front's calls do; `tasks/get`, `tasks/update` and `tasks/cancel` for a bridged task are
//!   answered here, never by a backend.
//! * [`body`]: the call's answer as it streams to the client; at the backend's first request
//!   it becomes the task (registered first: it answers `tasks/get` before its id is returned)
//!   and the stream ends with the `CreateTaskResult`.
//! * [`task`]: one task's state, and the driver that reads the rest of the backend's answer in
//!   the background (its requests become `inputRequests`, its response the task's outcome).
//! * [`registry`]: this replica's tasks, their bounds (per replica, per principal), ids, expiry
//!   and metrics.
//! * [`wire`]: the JSON the client reads and sends (Tasks wire shapes, the client's declared
//!   capabilities).
//! * [`owner`]: the URL a replica advertised (`advertise-url`), sealed into its task ids, so
//!   that other replicas forward only to a replica's URL, never to one a backend wrote.
//! * [`forward`]: a `tasks/*` for another replica's task, handed to that replica at the URL in
//!   the task's id; a task whose owner is gone is `failed`.
//!
//! The task id the backend side names is this replica's (`mrtr-bridged.<replica>.<random>`,
//! then `.<advertise-url sealed>` when the replica has one);
//! the MRTR layer above seals it into the client's task handle with the route, the principal
//! (with a principal header), the tool and the expiry, exactly as it seals a Tasks backend's
//! ids, and opens it again on `tasks/*`. This room checks the route and the principal again on
//! every `tasks/*`.
//!
//! Imports `route` (the gateway's own route name; the proxy, whose rate limits count the
//! follow-ups the bridge answers), `policy` (the caller), `audit` (the note a
//! follow-up leaves for the trail), `upstream` (the backend's requests, bodies, the SSE reader),
//! `observe` and the ground floor (`tls`, for the client toward other replicas). The room,
//! lowest first: [`wire`], [`task`], [`owner`], [`registry`], [`body`], [`forward`], [`layer`].

mod body;
mod forward;
mod layer;
mod owner;
mod registry;
mod task;
mod wire;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::layer::BridgeLayer;
pub use self::layer::Bridged;

/// The bounds of bridged tasks (the `bridged-*` settings).
#[derive(Clone, Debug)]
pub(crate) struct BridgeConfig {
    /// Most bridged tasks alive on this replica (running or keeping their outcome); 0 turns the
    /// bridge off (a Tasks client is then served as any other 2026-07-28 client).
    pub(crate) max_tasks: usize,
    /// Most bridged tasks alive for one principal.
    pub(crate) max_per_principal: usize,
    /// A task's whole life from its creation (its `ttlMs`): a task still running then fails.
    pub(crate) ttl: Duration,
    /// How long a task waits in `input_required` for the client's `inputResponses`.
    pub(crate) answer_timeout: Duration,
    /// How long a finished task keeps its outcome for `tasks/get` (within its `ttl`).
    pub(crate) result_ttl: Duration,
    /// Largest answer read from the backend for a task (one SSE event), in bytes; also the
    /// largest answer read from the owner of a task when forwarding.
    pub(crate) max_message: usize,
    /// This replica's URL for the others (`advertise-url`), named in its task ids; without it,
    /// a task of another replica is not forwarded.
    pub(crate) advertise: Option<Arc<str>>,
}
