//! What a caller may call, and how often: the `[[policy]]` rules (`rules.rs`) and the
//! `[[rate-limit]]` token buckets (`rate.rs`). Imports `auth` (the [`Caller`]), `observe` and
//! the ground floor; the composition root gives the rules to the MRTR layer's `authorize`
//! check, and both to the proxy, which filters lists and applies the limits.
//!
//! Where each is applied, and why there:
//!
//! * a `tools/call`, `prompts/get` or `resources/read` is checked by the MRTR layer's
//!   `authorize` hook, **before** its `requestState` is opened: a retry of a call the caller may
//!   no longer make is refused unopened, and no denied call reaches a backend; a task follow-up
//!   is checked there too, as the `tools/call` that created the task, once its handle opened;
//! * the proxy checks again where only routing knows what a request names (`route/govern.rs`):
//!   a tool or prompt once its backend is resolved (`<backend>__<name>`), a completion by what
//!   it completes, a listen's resources (the denied ones left out);
//! * lists (`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`) are
//!   filtered by the proxy to what the caller may use, and marked `cacheScope: "private"`;
//! * rate limits are applied by the proxy, **after** the layer opened any envelope: a retry
//!   that carries a verified `requestState` is keyed as the call it continues, and its first
//!   use on this replica is part of that call, so a round trip is never throttled halfway; the
//!   same state presented again costs a call (`uses.rs`; a retry whose state does not open never
//!   gets that far).
//!
//! With a shared store (`[shared-store]`), the limits are counted for the fleet there, with the
//! same accounting, and `single-use` makes every request state open at most once in the fleet
//! (`fleet.rs`): the proxy asks at the same place, after the layer opened the envelope and
//! before any backend.
//!
//! The caller is the [`Caller`] the resource server verified, or, behind an authenticating
//! proxy, the principal header's value alone (`caller_of`).

mod fleet;
pub mod rate;
pub mod rules;
pub(crate) mod uses;

use http::{HeaderMap, HeaderName};

use crate::auth::Caller;

pub(crate) use self::fleet::Refusal;
pub(crate) use self::rate::Charge;
pub use self::rate::{Per, RateLimitSpec, RateLimits};
pub use self::rules::{Effect, Policy, PolicyRule};
pub(crate) use self::rules::{Origin, Subject, Thing};

/// The caller of a request: the [`Caller`] in `extensions` (the resource server's, or the one
/// the front made of the principal header), else the principal header read as the front reads
/// it (for a [`Proxy`](crate::Proxy) served without the front), else nobody.
pub(crate) fn caller_of(
    extensions: &http::Extensions,
    headers: &HeaderMap,
    principal_header: Option<&HeaderName>,
) -> Option<Caller> {
    if let Some(caller) = extensions.get::<Caller>() {
        return Some(caller.clone());
    }
    let principal = crate::auth::principal::read(headers, principal_header?).ok()?;
    Some(Caller::from_principal(&principal))
}
