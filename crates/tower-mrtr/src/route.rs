//! The extensions through which the layer and the proxy it wraps talk to each other.
//!
//! * [`Route`], in a **response**'s extensions: the proxy reports which backend served it. The
//!   layer seals that route, its name and its [identity](RouteIdentity) if it has one, into the
//!   envelope it hands the client.
//! * [`PinnedRoute`], in a **request**'s extensions: the layer tells the proxy which backend must
//!   serve a retry (or a task follow-up). The proxy must honour it; a response reporting another
//!   route is refused.
//!
//! # Route identity: the name is not enough
//!
//! A route's name is the proxy's own (`alpha`); two deployments that share a keyring may both
//! have an `alpha` that is a different backend each, and then each opens the other's envelopes
//! and sends their retries to its own `alpha`, which never minted the state. A [`RouteIdentity`]
//! (32 bytes the proxy chooses, such as [`RouteIdentity::digest`] of the backend's URL) tells
//! them apart: it is sealed with the route, restored into the [`PinnedRoute`], and **a pinned
//! route equals a configured one only when the name and the identity are both equal**. That is
//! [`Route`]'s `==`; the proxy must find the backend of a `PinnedRoute` with it (never by the
//! name alone), and the layer refuses an answer whose reported route is not `==` the pinned one.
//! A route without an identity equals only routes without one, so a proxy that gives its routes
//! identities opens no envelope minted before it did (nor a v2 envelope, which carries none):
//! such a retry finds no backend and starts again.
//! * [`McpRequestHead`], in a **request**'s extensions: the JSON-RPC method, id and target the
//!   layer parsed, so the proxy can route without parsing the body again.
//! * [`Continuation`], in a **request**'s extensions beside the [`PinnedRoute`]: what the opened
//!   envelope said about the call the request continues (its tool, the round, the envelope's
//!   id and expiry), so that the proxy can count a retry or a task follow-up as part of that
//!   call, or refuse a second use of one envelope.
//!
//! # Example
//!
//! A proxy's routing step, reading the layer's extensions:
//!
//! ```
//! use http::Request;
//! use tower_mrtr::{McpRequestHead, PinnedRoute, Route};
//!
//! fn choose_backend<B>(req: &Request<B>) -> Option<Route> {
//!     if let Some(PinnedRoute(route)) = req.extensions().get::<PinnedRoute>() {
//!         // A retry must go where round one went: to the configured route equal to it, name
//!         // and identity (here every route is configured; a real proxy looks it up with `==`).
//!         return Some(route.clone());
//!     }
//!     let head = req.extensions().get::<McpRequestHead>()?;
//!     match head.target()? {
//!         name if name.starts_with("git_") => Some(Route::new("git")),
//!         _ => Some(Route::new("default")),
//!     }
//! }
//! # let req = Request::new(());
//! # assert!(choose_backend(&req).is_none());
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::shared_str::SharedStr;

/// A backend, as the proxy names it: a name (a URL, an index, any text) and, optionally, an
/// [identity](RouteIdentity) that tells apart backends of one name in different deployments.
/// Cheap to clone.
///
/// The layer treats both as opaque; they are sealed into envelopes (so keep the name short: at
/// most 65535 bytes, typically a few) and compared for equality: two routes are equal when their
/// names **and** their identities are (see the [module docs](crate::route#route-identity-the-name-is-not-enough)).
///
/// ```
/// use tower_mrtr::route::{Route, RouteIdentity};
///
/// let alpha = Route::new("alpha").with_identity(RouteIdentity::digest("https://alpha-1.internal/mcp"));
/// let other = Route::new("alpha").with_identity(RouteIdentity::digest("https://alpha-2.internal/mcp"));
/// assert_ne!(alpha, other, "one name, two backends");
/// assert_ne!(alpha, Route::new("alpha"), "an identity never equals none");
/// assert_eq!(alpha.as_str(), "alpha");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    name: Arc<str>,
    identity: Option<RouteIdentity>,
}

impl Route {
    /// A route from any text, without an identity.
    pub fn new(route: impl Into<Arc<str>>) -> Self {
        Self {
            name: route.into(),
            identity: None,
        }
    }

    /// The same route with `identity`.
    pub fn with_identity(mut self, identity: RouteIdentity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// The route's name as text.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The route's identity, if it has one.
    pub fn identity(&self) -> Option<&RouteIdentity> {
        self.identity.as_ref()
    }
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.identity {
            None => write!(f, "Route({:?})", &*self.name),
            Some(identity) => write!(f, "Route({:?}, {identity:?})", &*self.name),
        }
    }
}

/// The name only; the identity is in the `Debug` form.
impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// 32 bytes that identify a backend across deployments, sealed with its [`Route`]: the proxy
/// chooses them (a digest of the backend's URL, of its TLS identity, of a deployment-wide
/// backend id). Not secret: envelopes are encrypted, and the identity only has to differ where
/// backends differ.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteIdentity([u8; 32]);

impl RouteIdentity {
    /// The identity of these 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The SHA-256 of `data` as an identity: `RouteIdentity::digest(backend_url)`.
    pub fn digest(data: impl AsRef<[u8]>) -> Self {
        Self(Sha256::digest(data.as_ref()).into())
    }

    /// The 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for RouteIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RouteIdentity(")?;
        for byte in &self.0 {
            write!(f, "{byte:02x}")?;
        }
        f.write_str(")")
    }
}

impl From<&str> for Route {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for Route {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

/// The backend that must serve this request, set by the layer on an MRTR retry (or a task
/// follow-up) after the envelope opened: the route that minted it, name and identity. The proxy
/// must send the request to the backend whose configured [`Route`] is `==` this one, and to none
/// if there is none. See the [module docs](crate::route).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedRoute(pub Route);

/// What the layer learned by opening the envelope of a request that continues an earlier call:
/// set beside the [`PinnedRoute`] on an MRTR retry (its `requestState` opened) and on a task
/// follow-up (`tasks/get`, `tasks/update`, `tasks/cancel`; its task handle opened). Not set on a
/// `subscriptions/listen` on task handles, which may name several.
///
/// A proxy reads it to treat the request as part of the call it continues: to count it against
/// that call's rate limits (same principal, same tool), or, with a store its replicas share, to
/// let each envelope be used once ([`EnvelopeId`]).
///
/// ```
/// use http::Request;
/// use tower_mrtr::Continuation;
///
/// fn tool_of<B>(request: &Request<B>) -> Option<&str> {
///     request.extensions().get::<Continuation>()?.call_target()
/// }
/// # assert!(tool_of(&Request::new(())).is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continuation {
    call_method: &'static str,
    /// Shares the request body's buffer on a retry; a copy of the handle's on a task follow-up.
    call_target: Option<SharedStr>,
    round: u16,
    expires_at: SystemTime,
    envelope: EnvelopeId,
}

impl Continuation {
    pub(crate) fn new(
        call_method: &'static str,
        call_target: Option<SharedStr>,
        round: u16,
        expires_at: SystemTime,
        envelope: EnvelopeId,
    ) -> Self {
        Self {
            call_method,
            call_target,
            round,
            expires_at,
            envelope,
        }
    }

    /// The method of the call this request continues: the request's own on a retry,
    /// `tools/call` on a task follow-up.
    pub fn call_method(&self) -> &'static str {
        self.call_method
    }

    /// That call's target as the client named it: on a retry, the request's own (bound to the
    /// envelope); on a task follow-up, the tool whose call created the task, sealed in the handle
    /// (`None` for a handle sealed before envelope format v4).
    pub fn call_target(&self) -> Option<&str> {
        self.call_target.as_ref().map(SharedStr::as_str)
    }

    /// The round of the envelope presented: on a retry, `r` for the state of the call's `r`-th
    /// `input_required` (1 for the first); 0 for a task handle.
    pub fn round(&self) -> u16 {
        self.round
    }

    /// When the envelope stops opening.
    pub fn expires_at(&self) -> SystemTime {
        self.expires_at
    }

    /// The envelope's id.
    pub fn envelope(&self) -> EnvelopeId {
        self.envelope
    }
}

/// The task handle a task follow-up presented (`params.taskId`), as the client wrote it: set
/// beside the [`Continuation`] on `tasks/get`, `tasks/update` and `tasks/cancel`, whose body
/// and `Mcp-Name` then carry the backend's task id instead.
///
/// A proxy that hands such a request on to another gateway (the replica that owns a task held
/// in memory) writes the handle back in place of the backend's id, so that the other gateway
/// receives, and checks again, the request the client sent.
///
/// ```
/// use http::Request;
/// use tower_mrtr::TaskHandle;
///
/// fn presented<B>(request: &Request<B>) -> Option<&str> {
///     request.extensions().get::<TaskHandle>().map(TaskHandle::as_str)
/// }
/// # assert!(presented(&Request::new(())).is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskHandle(Arc<str>);

impl TaskHandle {
    pub(crate) fn new(handle: &str) -> Self {
        Self(handle.into())
    }

    /// The handle: the contents of the JSON string the client sent, escapes as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The id of one envelope: its 24-byte nonce, drawn at random when it was sealed and
/// authenticated with it, so no two envelopes share one. Not secret (the nonce travels in clear
/// in the envelope's header); what it is for is telling a second use of one envelope from the
/// first. `Display` writes it as 48 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EnvelopeId([u8; 24]);

impl EnvelopeId {
    /// The id of the envelope sealed with this nonce.
    pub const fn from_nonce(nonce: [u8; 24]) -> Self {
        Self(nonce)
    }

    /// The 24 bytes.
    pub const fn as_bytes(&self) -> &[u8; 24] {
        &self.0
    }
}

impl fmt::Display for EnvelopeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for EnvelopeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnvelopeId({self})")
    }
}

/// The JSON-RPC head of a request body the layer parsed: method, id and target.
///
/// The target is `params.name` for `tools/call` and `prompts/get`, `params.uri` for
/// `resources/read`, and whichever of the two is present for other methods. On a retry it is
/// read from the body the backend will receive.
///
/// The layer leaves it in the extensions of the request it passes on and, when it refuses a
/// single request whose method it could read, in the extensions of its refusal, so that an
/// observer outside the layer (a trace span, an access log) can name what was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpRequestHead {
    method: SharedStr,
    id: Option<SharedStr>,
    target: Option<SharedStr>,
    request_state: bool,
}

impl McpRequestHead {
    /// A head whose parts are read from `body` (they share its buffer where they can).
    pub(crate) fn parsed(
        body: &Bytes,
        method: &str,
        id: Option<&str>,
        target: Option<&str>,
        request_state: bool,
    ) -> Self {
        Self {
            method: SharedStr::from_body(body, method),
            id: id.map(|id| SharedStr::from_body(body, id)),
            target: target.map(|target| SharedStr::from_body(body, target)),
            request_state,
        }
    }

    /// A head for `method`, without id or target: for unit-testing a proxy's routing without
    /// running the layer. The layer itself builds heads from the bodies it parses.
    ///
    /// ```
    /// use tower_mrtr::McpRequestHead;
    ///
    /// let head = McpRequestHead::new("tools/call").with_id_json("7").with_target("git_push");
    /// assert_eq!((head.method(), head.id_json(), head.target()), ("tools/call", Some("7"), Some("git_push")));
    /// assert!(!head.is_retry());
    /// ```
    pub fn new(method: impl Into<Arc<str>>) -> Self {
        Self {
            method: SharedStr::from(&*method.into()),
            id: None,
            target: None,
            request_state: false,
        }
    }

    /// With the JSON-RPC id, as raw JSON text (`7`, `"c-41"`).
    pub fn with_id_json(mut self, id: impl Into<Arc<str>>) -> Self {
        self.id = Some(SharedStr::from(&*id.into()));
        self
    }

    /// With the target: tool or prompt name, resource URI, or a backend's task id.
    pub fn with_target(mut self, target: impl Into<Arc<str>>) -> Self {
        self.target = Some(SharedStr::from(&*target.into()));
        self
    }

    /// Marks the head as that of an MRTR retry (one that carried a `requestState`).
    pub fn with_retry(mut self, retry: bool) -> Self {
        self.request_state = retry;
        self
    }

    /// The JSON-RPC method, e.g. `tools/call`.
    pub fn method(&self) -> &str {
        self.method.as_str()
    }

    /// The JSON-RPC id as raw JSON text (`7`, `"c-41"`); `None` for a notification.
    pub fn id_json(&self) -> Option<&str> {
        self.id.as_ref().map(SharedStr::as_str)
    }

    /// Tool or prompt name, or resource URI.
    pub fn target(&self) -> Option<&str> {
        self.target.as_ref().map(SharedStr::as_str)
    }

    /// Whether this is an MRTR retry: it carried a `requestState` (now the backend's own).
    pub fn is_retry(&self) -> bool {
        self.request_state
    }
}
