//! Who a request comes from: the gateway as an OAuth 2.1 resource server (the MCP authorization
//! specification). Imports `observe` and the ground floor; the front calls it, the policy and
//! the legacy front read the [`Caller`] it leaves on a request.
//!
//! With `[oauth]` configured, every request to `/mcp` must carry `Authorization: Bearer <JWT>`
//! signed by a key of the issuer's JWKS, issued by the configured issuer for the gateway's own
//! resource URI (the `aud`, RFC 8707), unexpired, and holding the required scopes. The front asks
//! `Authenticator::check`; what passes has:
//!
//! * the principal (the configured claim, `sub` by default) in the gateway's principal header
//!   ([`PRINCIPAL_HEADER`]), which replaces any copy the client sent: the MRTR layer binds
//!   envelopes to it, legacy sessions and stdio processes are keyed by it, and backends receive
//!   it, as they receive an authenticating proxy's header with `--principal-header`;
//! * a [`Caller`] in the request's extensions (principal, groups, scopes), for the policy.
//!
//! What fails gets `401` (no token, or one that does not verify) or `403` (a scope missing),
//! with `WWW-Authenticate: Bearer` naming the Protected Resource Metadata (RFC 9728), which the
//! front serves at `/.well-known/oauth-protected-resource`; MCP
//! clients discover the authorization server from it. The reason goes to the debug log and the
//! `mrtr_gateway_auth_refused_total` metric, never to the client. The token itself never reaches
//! a backend: the forwarder drops `Authorization`.
//!
//! Without `[oauth]`, behind an authenticating proxy, the principal header's value is the
//! principal (`principal.rs`, read one way by everything keyed by it); the front refuses a
//! request whose header is missing, repeated, empty or unreadable, and leaves a [`Caller`] of
//! that principal on the others.
//!
//! Floors, lowest first: `caller.rs` and `principal.rs`; `keys.rs` (the JWKS, fetched and cached); `token.rs` (one
//! token verified); `resource.rs` (the check, the metadata and the challenges).

pub(crate) mod caller;
pub(crate) mod keys;
pub mod principal;
pub(crate) mod resource;
pub(crate) mod token;

pub use self::caller::Caller;
pub use self::resource::{Authenticator, PRINCIPAL_HEADER};
pub use self::token::OAuthSettings;
