//! The `[[policy]]` where routing knows what a request names (`policy/rules.rs` says what a rule
//! matches): a tool or prompt once its backend is known, the prompt or resource a completion
//! completes, the resources a listen subscribes to.
//!
//! The MRTR layer's `authorize` hook checks calls before anything else (a retry unopened); it
//! learns a name's backend from the catalog as far as this replica has listed it
//! ([`Proxy::origin_of`](super::Proxy::origin_of)). The proxy checks again once routing has
//! resolved the name for certain, so a rule on `<backend>__<name>` holds on a replica whose
//! catalog was empty when the call arrived. A refusal here has the layer's shape: `403` and a
//! JSON-RPC `-32600` naming what is not permitted.

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tower_mrtr::error::INVALID_REQUEST;
use tower_mrtr::{Continuation, Denied, McpRequestHead};

use super::catalog::{Kind, SEPARATOR};
use super::pins::Pins;
use super::{INVALID_PARAMS, Inner, error_response, request_params};
use crate::auth::Caller;
use crate::jsonrpc;
use crate::policy::{self, Origin, Policy, Subject, Thing};
use crate::upstream::body::ProxyBody;

/// Where a tool or prompt comes from, owned: the name its backend gives it and that name
/// qualified with the backend's (see [`Origin`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KnownOrigin {
    name: String,
    qualified: String,
}

impl KnownOrigin {
    pub(super) fn new(backend: &str, name: &str) -> Self {
        Self {
            name: name.to_owned(),
            qualified: format!("{backend}{SEPARATOR}{name}"),
        }
    }

    /// Borrowed, as the rules take it.
    pub(crate) fn as_origin(&self) -> Origin<'_> {
        Origin {
            name: &self.name,
            qualified: &self.qualified,
        }
    }
}

/// The refusal of something the policy denied, as the layer words its own.
pub(super) fn refusal(id: Option<&str>, denied: &Denied) -> Response<ProxyBody> {
    let mut response = error_response(StatusCode::FORBIDDEN, id, INVALID_REQUEST, denied.message(), None);
    response.extensions_mut().insert(crate::audit::Refusal("denied"));
    response
}

impl Inner {
    /// The caller of a request (`policy::caller_of`).
    pub(super) fn caller(&self, parts: &Parts) -> Option<Caller> {
        policy::caller_of(&parts.extensions, &parts.headers, self.principal_header.as_ref())
    }

    /// Where the exposed tool or prompt name `exposed` comes from, as far as the catalog knows
    /// without asking the backends: with one backend, that backend (names are never prefixed);
    /// with several, what the last listing resolved it to.
    pub(super) fn known_origin(&self, kind: Kind, exposed: &str) -> Option<KnownOrigin> {
        let (index, name) = match self.backends.len() {
            1 => (0, exposed.to_owned()),
            _ => self.catalog.resolve_name(kind, exposed)?,
        };
        Some(KnownOrigin::new(self.backends[index].name(), &name))
    }

    /// After routing resolved a `tools/call` or `prompts/get` of `exposed` to backend `index`'s
    /// `original`: the policy's answer with the name's origin known for certain.
    pub(super) fn permit_named(
        &self,
        parts: &Parts,
        head: &McpRequestHead,
        exposed: &str,
        (index, original): (usize, &str),
    ) -> Result<(), Denied> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        let origin = KnownOrigin::new(self.backends[index].name(), original);
        let caller = self.caller(parts);
        policy.authorize(
            caller.as_ref(),
            head.method(),
            Some(exposed),
            Some(origin.as_origin()),
        )
    }

    /// The refusal of a call of backend `index`'s `original` (exposed as `exposed`) when pinning
    /// withholds its definition (`pins.rs`), after listing `kind` again if the catalog's table is
    /// older than its TTL, so that the definition judged is the one the backend lists now.
    pub(super) async fn withheld(
        &self,
        kind: Kind,
        (index, original): (usize, &str),
        (exposed, id): (&str, Option<&str>),
        parts: &Parts,
        body: &Bytes,
    ) -> Option<Response<ProxyBody>> {
        let pins = self.pins.as_ref().filter(|pins| pins.enforcing())?;
        if self.catalog.fresh_since(kind).is_none() {
            self.refresh(&[kind], parts, body).await;
        }
        let reason = pins.withheld(self.backends[index].name(), kind, original)?;
        let message = Pins::refusal(reason, kind, exposed);
        let mut response = error_response(StatusCode::OK, id, INVALID_PARAMS, &message, None);
        response.extensions_mut().insert(crate::audit::Refusal(reason));
        Some(response)
    }

    /// A task follow-up pinned to backend `index`: checked as the `tools/call` that created the
    /// task (its tool, sealed in the handle), with the tool's origin on that backend. The layer
    /// checked it already, but with what this replica's catalog knew then, which may have been
    /// nothing.
    pub(super) async fn permit_follow_up(
        &self,
        parts: &Parts,
        head: &McpRequestHead,
        index: usize,
        body: &Bytes,
    ) -> Result<(), Denied> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        let Some(continuation) = parts.extensions.get::<Continuation>() else {
            return Ok(());
        };
        if !head.method().starts_with("tasks/") {
            return Ok(());
        }
        let tool = continuation.call_target();
        let mut original = None;
        if let Some(tool) = tool {
            original = self.pinned_name(Kind::Tools, index, tool);
            if original.is_none() {
                self.refresh(&[Kind::Tools], parts, body).await;
                original = self.pinned_name(Kind::Tools, index, tool);
            }
        }
        let origin = original.map(|name| KnownOrigin::new(self.backends[index].name(), &name));
        let caller = self.caller(parts);
        policy.authorize(
            caller.as_ref(),
            continuation.call_method(),
            tool,
            origin.as_ref().map(KnownOrigin::as_origin),
        )
    }

    /// `completion/complete`, governed by the rule of the prompt or resource it completes: a
    /// prompt by its name (and origin), a resource template by its text, a resource by its URI.
    pub(super) fn permit_completion(
        &self,
        policy: &Policy,
        parts: &Parts,
        body: &[u8],
    ) -> Result<(), Denied> {
        #[derive(Deserialize)]
        struct Reference {
            #[serde(rename = "type")]
            kind: String,
            name: Option<String>,
            uri: Option<String>,
        }
        let reference = request_params(body)
            .and_then(|p| p.get("ref").map(|r| r.get().to_owned()))
            .and_then(|r| serde_json::from_str::<Reference>(&r).ok());
        let caller = self.caller(parts);
        let (thing, target, allowed) = match reference {
            Some(Reference {
                kind,
                name: Some(name),
                ..
            }) if kind == "ref/prompt" => {
                let origin = self.known_origin(Kind::Prompts, &name);
                let subject = Subject::Named {
                    thing: Thing::Prompt,
                    exposed: &name,
                    origin: origin.as_ref().map(KnownOrigin::as_origin),
                };
                let allowed = policy.allows(caller.as_ref(), &subject);
                (Thing::Prompt, Some(name), allowed)
            }
            Some(Reference {
                kind, uri: Some(uri), ..
            }) if kind == "ref/resource" => {
                // A template's text holds expressions (`{path}`); a plain URI is a resource's.
                let subject = if uri.contains('{') {
                    Subject::Template(&uri)
                } else {
                    Subject::Uri(&uri)
                };
                let allowed = policy.allows(caller.as_ref(), &subject);
                (Thing::Resource, Some(uri), allowed)
            }
            // No reference the rules can judge: nothing to complete for this caller.
            _ => (Thing::Prompt, None, false),
        };
        if allowed {
            return Ok(());
        }
        Err(policy.denied(caller.as_ref(), thing, target.as_deref()))
    }

    /// `subscriptions/listen`: the resources the caller may not read are left out of its filter
    /// (so out of the acknowledgement, as a subscription a backend refused is); a listen left
    /// asking for nothing is refused. Returns the body to route, rewritten when a resource was
    /// left out.
    pub(super) fn permit_listen(&self, policy: &Policy, parts: &Parts, body: Bytes) -> Result<Bytes, Denied> {
        let Some(mut filter) = request_params(&body)
            .and_then(|p| p.get("notifications").map(|n| n.get().to_owned()))
            .and_then(|n| serde_json::from_str::<serde_json::Map<String, Value>>(&n).ok())
        else {
            // Not a filter the proxy can read: routing refuses it.
            return Ok(body);
        };
        let Some(Value::Array(uris)) = filter.get("resourceSubscriptions") else {
            return Ok(body);
        };
        let caller = self.caller(parts);
        let allowed = |uri: &Value| {
            uri.as_str()
                .is_some_and(|uri| policy.allows(caller.as_ref(), &Subject::Uri(uri)))
        };
        let (kept, denied): (Vec<Value>, Vec<Value>) = uris.iter().cloned().partition(allowed);
        let Some(first_denied) = denied.first() else {
            return Ok(body);
        };
        let asks_more = filter.iter().any(|(key, value)| {
            key != "resourceSubscriptions" && value != &Value::Bool(false) && !value.is_null()
        });
        if kept.is_empty() && !asks_more {
            return Err(policy.denied(caller.as_ref(), Thing::Resource, first_denied.as_str()));
        }
        for uri in &denied {
            tracing::debug!(uri = uri.as_str(), "left out of a subscription by the policy");
        }
        filter.insert("resourceSubscriptions".to_owned(), Value::Array(kept));
        // A filter the proxy read is one it can write back; if not, nothing denied goes on.
        serde_json::value::to_raw_value(&filter)
            .ok()
            .and_then(|filter: Box<RawValue>| jsonrpc::set_param(&body, "notifications", filter))
            .ok_or_else(|| Denied::new("This subscription could not be narrowed to what is permitted"))
    }
}
