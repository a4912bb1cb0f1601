//! What the proxy tells the audit layer about a request, in its answer's extensions: only the
//! proxy knows the name the backend was sent, the round the layer's [`Continuation`] opened, and
//! why it refused a request itself.
//!
//! [`Continuation`]: tower_mrtr::Continuation

use std::sync::Arc;

/// The label of a refusal the proxy wrote itself (a rate limit, the policy once routing knew
/// the name, a definition that changed since it was pinned), in the refusal's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal(pub(crate) &'static str);

/// What the proxy read of an audited request, in its answer's extensions (only when the audit
/// trail is on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CallNote {
    /// The name or URI the backend was sent (the exposed name with its `<backend>__` prefix
    /// taken off, or as it came).
    pub(crate) backend_target: Option<Arc<str>>,
    /// For a request that continues a call (an MRTR retry or a task follow-up whose envelope
    /// opened): the round of the state presented (0 for a task handle) and the call's target as
    /// the client named it.
    pub(crate) continued: Option<(u16, Option<Arc<str>>)>,
}
