//! [`MrtrLayer`]: configuration and the [`Layer`] impl.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use tower_layer::Layer;

use crate::clock::Clock;
use crate::config::Config;
use crate::keyring::{Keyring, KeyringHandle};
use crate::route::Route;
use crate::service::Mrtr;

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
        Self::with_keyring_handle(KeyringHandle::from_shared(keyring))
    }

    /// A layer reading its keyring from `keys` on every request, so that the keyring can be
    /// replaced while it runs (key rotation without a restart). See [`KeyringHandle`].
    pub fn with_keyring_handle(keys: KeyringHandle) -> Self {
        Self {
            config: Arc::new(Config::new(keys)),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// How long an envelope stays valid after it is sealed (default [`DEFAULT_TTL`](crate::DEFAULT_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config_mut().ttl = ttl;
        self
    }

    /// Longest lifetime of a task handle (default [`DEFAULT_MAX_TASK_TTL`](crate::DEFAULT_MAX_TASK_TTL)). A handle lives as long
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
    /// By default a principal is then **required**: a request that may produce or open an
    /// envelope (`tools/call`, `prompts/get`, `resources/read`, `tasks/*`, `subscriptions/listen`
    /// on task handles) for which `principal` returns `None` is refused with HTTP 403 and a
    /// JSON-RPC error, before it reaches the inner service. That catches the easy mistake of
    /// stacking the authentication layer *inside* this one, where it has not run yet when the
    /// layer looks. See [`MrtrLayer::require_principal`] to allow anonymous requests.
    ///
    /// The function runs on every request the layer relays; keep it cheap.
    pub fn bind_principal<F>(mut self, principal: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.config_mut().principal = Some(Arc::new(principal));
        self
    }

    /// Checks every `tools/call`, `prompts/get` and `resources/read` with `authorize` before
    /// anything else is done with it: before its `requestState` is opened, and before it reaches
    /// the inner service. `authorize` gets the request head (where an authentication layer put
    /// the caller), the method and its target (`params.name`, or `params.uri` for
    /// `resources/read`; `None` when the request names none). A [`Denied`](crate::Denied) is
    /// answered with HTTP 403 and a JSON-RPC `-32600` error carrying its message; the retry of a
    /// call that is no longer permitted is refused the same way, its state unopened.
    ///
    /// The same check runs on each such request inside a JSON-RPC batch: one denied element
    /// refuses the batch.
    ///
    /// A task follow-up (`tasks/get`, `tasks/update`, `tasks/cancel`) is checked as the call
    /// that created the task: once its handle has opened, `authorize` gets `tools/call` and the
    /// tool sealed in the handle (`None` for a handle sealed before envelope format v4), so a
    /// caller no longer permitted the tool cannot drive its task on.
    ///
    /// ```
    /// use tower_mrtr::{Denied, Keyring, MrtrLayer};
    ///
    /// let layer = MrtrLayer::new(Keyring::generate("k1").unwrap()).authorize(|_parts, method, target| {
    ///     match (method, target) {
    ///         ("tools/call", Some("drop_database")) => Err(Denied::new("The tool drop_database is not permitted")),
    ///         _ => Ok(()),
    ///     }
    /// });
    /// # let _ = layer;
    /// ```
    ///
    /// The function runs on every such request; keep it cheap.
    pub fn authorize<F>(mut self, authorize: F) -> Self
    where
        F: Fn(&Parts, &str, Option<&str>) -> Result<(), crate::Denied> + Send + Sync + 'static,
    {
        self.config_mut().authorize = Some(Arc::new(authorize));
        self
    }

    /// Whether a request without a principal is refused (`true`, the default) or relayed with
    /// envelopes bound to no principal (`false`; such envelopes open for any request without
    /// one). Only meaningful with [`MrtrLayer::bind_principal`]. Either way a missing principal
    /// is logged at debug level.
    pub fn require_principal(mut self, required: bool) -> Self {
        self.config_mut().principal_required = required;
        self
    }

    /// Binds every envelope to this deployment's name: its request states and task handles open
    /// only where the same audience is configured. Two deployments that share a keyring (a
    /// `prod` and a `staging`, two regions, two tenants' gateways) then never open each other's
    /// envelopes, and an envelope minted without an audience never opens where one is configured
    /// (nor the reverse: configuring an audience ends the rounds in flight, which start again).
    /// Every replica of one deployment must use the same name. An empty name is an audience too,
    /// distinct from none.
    pub fn audience(mut self, name: impl Into<Arc<str>>) -> Self {
        self.config_mut().audience = Some(name.into());
        self
    }

    /// The most rounds one call may take (default [`DEFAULT_MAX_ROUNDS`](crate::DEFAULT_MAX_ROUNDS)):
    /// the state sealed for a call's first `input_required` is round 1, the one answering a
    /// retry of round `r` is round `r + 1`, and a retry presenting round `n` or later is refused
    /// with a JSON-RPC error (`-32602`, "The request took too many rounds …") before the inner
    /// service is called. So a call reaches its backend at most `n` times: the first request and
    /// `n − 1` retries. A backend that asks for input forever costs its client a bounded number
    /// of round trips. (`0` and `1` both refuse every retry.) A v2 envelope counts as round 1.
    pub fn max_rounds(mut self, rounds: u16) -> Self {
        self.config_mut().max_rounds = rounds;
        self
    }

    /// Whether envelopes minted for `tools/call` and `prompts/get` are bound to the call's
    /// `params.arguments` (`true`, the default). A retry whose arguments differ in value is then
    /// refused like a tampered envelope; arguments that differ only in member order, whitespace
    /// or escapes are the same ([`canonical`](crate::canonical)). Turn it off only for clients that
    /// legitimately change arguments between rounds (the specification says a retry repeats
    /// them). Every replica sharing a keyring must use the same setting.
    pub fn bind_arguments(mut self, bind: bool) -> Self {
        self.config_mut().bind_arguments = bind;
        self
    }

    /// Where the layer reads the time (default [`SystemClock`](crate::SystemClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.config_mut().clock = clock;
        self
    }

    /// Largest request body the layer buffers (default [`DEFAULT_MAX_REQUEST_BODY`](crate::DEFAULT_MAX_REQUEST_BODY)). Larger
    /// POST bodies get HTTP 413 without reaching the inner service.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.config_mut().max_request_body = bytes;
        self
    }

    /// Largest non-streamed response the layer buffers to look for `input_required` (default
    /// [`DEFAULT_MAX_RESPONSE_BODY`](crate::DEFAULT_MAX_RESPONSE_BODY)). Only responses to `tools/call`, `prompts/get` and
    /// `resources/read` are buffered; a larger one fails closed with a JSON-RPC error.
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.config_mut().max_response_body = bytes;
        self
    }

    /// Largest SSE event the layer buffers in a stream that may need sealing (default
    /// [`DEFAULT_MAX_SSE_EVENT`](crate::DEFAULT_MAX_SSE_EVENT)). A larger event ends the stream with a JSON-RPC error event.
    pub fn max_sse_event(mut self, bytes: usize) -> Self {
        self.config_mut().max_sse_event = bytes;
        self
    }

    /// Longest envelope the layer accepts from a client, and the longest it hands out (default
    /// [`DEFAULT_MAX_ENVELOPE_LEN`](crate::DEFAULT_MAX_ENVELOPE_LEN)). A backend state too large to fit fails closed.
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
