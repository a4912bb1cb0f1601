//! [`MrtrLayer`]: configuration and the [`Layer`] impl.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::envelope::Sealer;
use crate::keyring::Keyring;
use crate::route::Route;
use crate::service::Mrtr;

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

/// Computes the principal an envelope is bound to, from the request head (for example the `sub`
/// claim an authentication layer put into the extensions).
pub(crate) type PrincipalFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) sealer: Sealer,
    pub(crate) ttl: Duration,
    pub(crate) max_task_ttl: Duration,
    pub(crate) default_route: Option<Route>,
    pub(crate) principal: Option<PrincipalFn>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) max_sse_event: usize,
    pub(crate) max_envelope_len: usize,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("keyring", self.sealer.keyring())
            .field("ttl", &self.ttl)
            .field("max_task_ttl", &self.max_task_ttl)
            .field("default_route", &self.default_route)
            .field(
                "principal",
                &self.principal.as_ref().map(|_| "Fn(&Parts) -> Option<String>"),
            )
            .field("clock", &self.clock)
            .field("max_request_body", &self.max_request_body)
            .field("max_response_body", &self.max_response_body)
            .field("max_sse_event", &self.max_sse_event)
            .field("max_envelope_len", &self.max_envelope_len)
            .finish()
    }
}

/// Makes the wrapped MCP proxy a stateless, sealed relay for multi round-trip requests.
///
/// Cloning is cheap (one `Arc`). See the [crate docs](crate) for what it does and an example.
#[derive(Clone, Debug)]
pub struct MrtrLayer {
    pub(crate) config: Arc<Config>,
}

impl MrtrLayer {
    /// A layer sealing with `keyring`'s active key, with default limits and lifetime, no default
    /// route and no principal binding.
    pub fn new(keyring: Keyring) -> Self {
        Self::with_shared_keyring(Arc::new(keyring))
    }

    /// Like [`MrtrLayer::new`], sharing a keyring with other layers or services.
    pub fn with_shared_keyring(keyring: Arc<Keyring>) -> Self {
        Self {
            config: Arc::new(Config {
                sealer: Sealer::new(keyring),
                ttl: DEFAULT_TTL,
                max_task_ttl: DEFAULT_MAX_TASK_TTL,
                default_route: None,
                principal: None,
                clock: Arc::new(SystemClock),
                max_request_body: DEFAULT_MAX_REQUEST_BODY,
                max_response_body: DEFAULT_MAX_RESPONSE_BODY,
                max_sse_event: DEFAULT_MAX_SSE_EVENT,
                max_envelope_len: DEFAULT_MAX_ENVELOPE_LEN,
            }),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// How long an envelope stays valid after it is sealed (default [`DEFAULT_TTL`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config_mut().ttl = ttl;
        self
    }

    /// Longest lifetime of a task handle (default [`DEFAULT_MAX_TASK_TTL`]). A handle lives as long
    /// as the task's `ttlMs` announced at creation, capped by this; a task with a `null` (unlimited)
    /// TTL gets this. A TTL the backend extends later is not reflected in handles already issued.
    pub fn max_task_ttl(mut self, ttl: Duration) -> Self {
        self.config_mut().max_task_ttl = ttl;
        self
    }

    /// The route sealed when a response reports no [`Route`] extension; for proxies with a single
    /// backend. Without it, such a response fails closed.
    pub fn default_route(mut self, route: impl Into<Route>) -> Self {
        self.config_mut().default_route = Some(route.into());
        self
    }

    /// Binds every envelope to a principal computed from the request head, such as the subject
    /// of a token an authentication layer has verified and stored in the extensions. An envelope
    /// minted for one principal does not open for another, nor for a request without one.
    ///
    /// The function runs on every request the layer relays; keep it cheap.
    pub fn bind_principal<F>(mut self, principal: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.config_mut().principal = Some(Arc::new(principal));
        self
    }

    /// Where the layer reads the time (default [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.config_mut().clock = clock;
        self
    }

    /// Largest request body the layer buffers (default [`DEFAULT_MAX_REQUEST_BODY`]). Larger
    /// POST bodies get HTTP 413 without reaching the inner service.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.config_mut().max_request_body = bytes;
        self
    }

    /// Largest non-streamed response the layer buffers to look for `input_required` (default
    /// [`DEFAULT_MAX_RESPONSE_BODY`]). Only responses to `tools/call`, `prompts/get` and
    /// `resources/read` are buffered; a larger one fails closed with a JSON-RPC error.
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.config_mut().max_response_body = bytes;
        self
    }

    /// Largest SSE event the layer buffers in a stream that may need sealing (default
    /// [`DEFAULT_MAX_SSE_EVENT`]). A larger event ends the stream with a JSON-RPC error event.
    pub fn max_sse_event(mut self, bytes: usize) -> Self {
        self.config_mut().max_sse_event = bytes;
        self
    }

    /// Longest envelope the layer accepts from a client, and the longest it hands out (default
    /// [`DEFAULT_MAX_ENVELOPE_LEN`]). A backend state too large to fit fails closed.
    pub fn max_envelope_len(mut self, bytes: usize) -> Self {
        self.config_mut().max_envelope_len = bytes;
        self
    }
}

impl<S> Layer<S> for MrtrLayer {
    type Service = Mrtr<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Mrtr::new(inner, self.config.clone())
    }
}
