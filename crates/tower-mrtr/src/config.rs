//! The layer's configuration, shared by every module that reads it.
//!
//! [`MrtrLayer`](crate::MrtrLayer) builds a [`Config`]; the service, its future and the request and
//! response paths read it. It sits below all of them so that imports flow one way.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use crate::clock::{Clock, SystemClock};
use crate::error::Denied;
use crate::keyring::KeyringHandle;
use crate::route::Route;

/// Default lifetime of an envelope: long enough for a person to answer an elicitation form.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);
/// Default cap on a buffered request body.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 2 * 1024 * 1024;
/// Default cap on a buffered JSON response to a method that may need sealing.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 4 * 1024 * 1024;
/// Default cap on one SSE event in a stream that may need sealing.
pub const DEFAULT_MAX_SSE_EVENT: usize = 4 * 1024 * 1024;
/// Default longest lifetime of a task handle (used for tasks with a `null` TTL, and as a cap).
pub const DEFAULT_MAX_TASK_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default cap on the length of an envelope, checked before any decoding.
pub const DEFAULT_MAX_ENVELOPE_LEN: usize = 64 * 1024;
/// Default cap on the rounds of one call: a retry presenting the envelope of round 16 (or later)
/// is refused, so a call reaches its backend at most 16 times.
pub const DEFAULT_MAX_ROUNDS: u16 = 16;

/// Computes the principal an envelope is bound to, from the request head (for example the `sub`
/// claim an authentication layer put into the extensions).
pub(crate) type PrincipalFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Decides whether a call may go on, from the request head, the method and its target (the
/// tool or prompt name, or the resource URI), before any envelope is opened.
pub(crate) type AuthorizeFn = Arc<dyn Fn(&Parts, &str, Option<&str>) -> Result<(), Denied> + Send + Sync>;

/// Everything the layer is configured with. Built by [`MrtrLayer`](crate::MrtrLayer), shared
/// behind an `Arc` by every service and future it makes.
#[derive(Clone)]
pub(crate) struct Config {
    /// Where each request reads the keyring it seals and opens with.
    pub(crate) keys: KeyringHandle,
    pub(crate) ttl: Duration,
    pub(crate) max_task_ttl: Duration,
    pub(crate) default_route: Option<Route>,
    pub(crate) principal: Option<PrincipalFn>,
    pub(crate) authorize: Option<AuthorizeFn>,
    /// The deployment's name, bound into every envelope's associated data.
    pub(crate) audience: Option<Arc<str>>,
    /// A retry presenting a request state of this round or later is refused.
    pub(crate) max_rounds: u16,
    /// With a principal function: refuse requests it finds no principal for.
    pub(crate) principal_required: bool,
    /// Bind `tools/call` and `prompts/get` envelopes to the call's `params.arguments`.
    pub(crate) bind_arguments: bool,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) max_sse_event: usize,
    pub(crate) max_envelope_len: usize,
}

impl Config {
    pub(crate) fn new(keys: KeyringHandle) -> Self {
        Self {
            keys,
            ttl: DEFAULT_TTL,
            max_task_ttl: DEFAULT_MAX_TASK_TTL,
            default_route: None,
            principal: None,
            authorize: None,
            audience: None,
            max_rounds: DEFAULT_MAX_ROUNDS,
            principal_required: true,
            bind_arguments: true,
            clock: Arc::new(SystemClock),
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            max_sse_event: DEFAULT_MAX_SSE_EVENT,
            max_envelope_len: DEFAULT_MAX_ENVELOPE_LEN,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("keys", &self.keys)
            .field("ttl", &self.ttl)
            .field("max_task_ttl", &self.max_task_ttl)
            .field("default_route", &self.default_route)
            .field(
                "principal",
                &self.principal.as_ref().map(|_| "Fn(&Parts) -> Option<String>"),
            )
            .field("principal_required", &self.principal_required)
            .field(
                "authorize",
                &self
                    .authorize
                    .as_ref()
                    .map(|_| "Fn(&Parts, &str, Option<&str>) -> Result<(), Denied>"),
            )
            .field("audience", &self.audience)
            .field("max_rounds", &self.max_rounds)
            .field("bind_arguments", &self.bind_arguments)
            .field("clock", &self.clock)
            .field("max_request_body", &self.max_request_body)
            .field("max_response_body", &self.max_response_body)
            .field("max_sse_event", &self.max_sse_event)
            .field("max_envelope_len", &self.max_envelope_len)
            .finish()
    }
}
