//! [`Caller`]: who a request comes from, as the resource server verified it.

use std::sync::Arc;

/// The verified caller of a request, in its extensions: its principal, and the groups and scopes
/// its token carries (empty without OAuth, where only the principal header names a caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The principal (the configured claim of the token, or the principal header's value).
    pub principal: Arc<str>,
    /// The token's groups claim (the configured one), if any.
    pub groups: Arc<[Box<str>]>,
    /// The token's scopes (`scope`, space separated, or `scp`).
    pub scopes: Arc<[Box<str>]>,
}

impl Caller {
    /// A caller known by its principal alone (behind an authenticating proxy).
    pub fn from_principal(principal: &str) -> Self {
        Self {
            principal: principal.into(),
            groups: Arc::from(Vec::new()),
            scopes: Arc::from(Vec::new()),
        }
    }
}
