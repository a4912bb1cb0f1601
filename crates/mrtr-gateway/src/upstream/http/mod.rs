//! Streamable HTTP toward backends: [`forward`] holds the connections and relays a request as a
//! well-mannered MCP client would, [`body`] is every answer's body on its way back (a backend's
//! streamed through with stall and whole-event guards, or one the gateway wrote).
//!
//! The modern door relays through this directly; the `initialize`-era door (`super::session`)
//! posts through the same forwarder, and every door answers with a [`body::ProxyBody`].
//! `body` is the lower of the two files: `forward` imports it, never the other way.

pub(crate) mod body;
pub(crate) mod forward;
