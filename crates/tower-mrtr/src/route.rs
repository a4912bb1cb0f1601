//! The extensions through which the layer and the proxy it wraps talk to each other.
//!
//! * [`Route`], in a **response**'s extensions: the proxy reports which backend served it. The
//!   layer seals that route into the envelope it hands the client.
//! * [`PinnedRoute`], in a **request**'s extensions: the layer tells the proxy which backend must
//!   serve a retry (or a task follow-up). The proxy must honour it; a response reporting another
//!   route is refused.
//! * [`McpRequestHead`], in a **request**'s extensions: the JSON-RPC method, id and target the
//!   layer parsed, so the proxy can route without parsing the body again.
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
//!         return Some(route.clone()); // a retry: it must go where round one went
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

use bytes::Bytes;

use crate::shared_str::SharedStr;

/// Identity of a backend, chosen by the proxy: a name, a URL, an index. Cheap to clone.
///
/// The layer treats it as opaque text; it is sealed into envelopes (so keep it short: at most
/// 65535 bytes, typically a few) and compared for equality.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route(Arc<str>);

impl Route {
    /// A route from any text.
    pub fn new(route: impl Into<Arc<str>>) -> Self {
        Self(route.into())
    }

    /// The route as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Route({:?})", &*self.0)
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
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

/// The backend that must serve this request, set by the layer on an MRTR retry after the
/// envelope opened. See the [module docs](crate::route).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedRoute(pub Route);

/// The JSON-RPC head of a request body the layer parsed: method, id and target.
///
/// The target is `params.name` for `tools/call` and `prompts/get`, `params.uri` for
/// `resources/read`, and whichever of the two is present for other methods. On a retry it is
/// read from the body the backend will receive.
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
