//! Integrity-protected `requestState` for stateless MRTR flows.
//!
//! Every backend in this crate keeps *no* server-side state between MRTR
//! rounds: the round counter and the answers collected so far travel inside
//! `requestState`. SEP-2322 makes that value attacker-controlled, so it is
//! sealed with rmcp's [`RequestStateCodec`] (HMAC-SHA256, `rs1` format) and
//! opened again on the retry:
//!
//! * the tag is bound (as associated data, not stored in the token) to a
//!   *binding context* made of a domain label, the backend scope (its
//!   identity), the JSON-RPC method, the tool/prompt name or resource URI and
//!   a SHA-256 digest of the canonicalised arguments, so a state minted for
//!   one request cannot be replayed against another request or backend;
//! * a TTL (default ten minutes) is stamped into the token.
//!
//! Any failure to open a value (forged, tampered, expired, bound to another
//! request) is reported as JSON-RPC `-32602` Invalid params, which is what
//! the conformance scenario `input-required-result-tampered-state` expects.
//!
//! The payload is signed, not encrypted: clients can read it. Nothing secret
//! is stored in it.

use std::{collections::BTreeMap, fmt, sync::Arc, time::Duration};

use rmcp::{
    ErrorData,
    model::{JsonObject, RequestStateCodec, RequestStateError, SealOptions},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Default lifetime of a sealed `requestState`.
pub const DEFAULT_STATE_TTL: Duration = Duration::from_secs(600);

/// Domain label mixed into every binding context.
const BINDING_DOMAIN: &str = "mrtr-backends/request-state/v1";

/// Progress of one multi-round flow, carried inside `requestState`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct FlowState {
    /// Index of the round currently being collected (0-based).
    pub(crate) step: usize,
    /// Answers collected so far, keyed by input-request key.
    pub(crate) answers: BTreeMap<String, Value>,
}

/// Seals and opens the per-flow progress record (round number and answers
/// collected so far) with an HMAC key.
///
/// Cloning is cheap (the codec is shared), so one sealer can be handed to
/// every per-request handler instance the HTTP service creates.
#[derive(Clone)]
pub struct StateSealer {
    codec: Arc<RequestStateCodec>,
    scope: Arc<str>,
    ttl: Duration,
}

impl fmt::Debug for StateSealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateSealer")
            .field("scope", &self.scope)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl StateSealer {
    /// Creates a sealer with a fresh random 32-byte key.
    ///
    /// Fails only if the operating system's random source is unavailable.
    pub fn random(scope: impl Into<Arc<str>>) -> Result<Self, getrandom::Error> {
        let mut key = [0u8; RequestStateCodec::MIN_KEY_LENGTH];
        getrandom::fill(&mut key)?;
        let sealer = Self::with_key(scope, key.to_vec());
        key.fill(0);
        // A 32-byte key always satisfies the codec's minimum length.
        sealer.map_err(|_| getrandom::Error::UNEXPECTED)
    }

    /// Creates a sealer from explicit key material (at least 32 bytes).
    ///
    /// Use this when several replicas of a backend must open each other's
    /// states.
    pub fn with_key(scope: impl Into<Arc<str>>, key: impl Into<Vec<u8>>) -> Result<Self, RequestStateError> {
        Ok(Self {
            codec: Arc::new(RequestStateCodec::try_new(key)?),
            scope: scope.into(),
            ttl: DEFAULT_STATE_TTL,
        })
    }

    /// Overrides the lifetime stamped into sealed values.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The scope (backend identity) mixed into every binding.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Builds the binding context for one request.
    ///
    /// `target` is the tool or prompt name, or the resource URI. Missing
    /// arguments and `{}` bind identically.
    pub(crate) fn binding(&self, method: &str, target: &str, arguments: Option<&JsonObject>) -> Vec<u8> {
        let mut canonical = String::new();
        match arguments {
            Some(arguments) => write_canonical_object(arguments, &mut canonical),
            None => canonical.push_str("{}"),
        }
        let digest = Sha256::digest(canonical.as_bytes());
        let mut binding =
            Vec::with_capacity(BINDING_DOMAIN.len() + self.scope.len() + method.len() + target.len() + 36);
        for part in [BINDING_DOMAIN, &self.scope, method, target] {
            // Length prefixes keep the concatenation unambiguous.
            binding.extend_from_slice(&(part.len() as u64).to_be_bytes());
            binding.extend_from_slice(part.as_bytes());
        }
        binding.extend_from_slice(&digest);
        binding
    }

    /// Seals `state` for the request identified by `binding`.
    pub(crate) fn seal(&self, state: &FlowState, binding: &[u8]) -> Result<String, ErrorData> {
        self.codec
            .seal_json_with(state, &SealOptions::new().associated_data(binding).ttl(self.ttl))
            .map_err(|error| ErrorData::internal_error(format!("failed to seal requestState: {error}"), None))
    }

    /// Opens a `requestState` echoed by the client.
    ///
    /// Every failure is a `-32602` Invalid params error; the message says
    /// whether the value expired or failed verification, nothing more.
    pub(crate) fn open(&self, sealed: &str, binding: &[u8]) -> Result<FlowState, ErrorData> {
        self.codec
            .open_json_with::<FlowState>(sealed, binding)
            .map_err(|error| {
                let message = match error {
                    RequestStateError::Expired => "requestState has expired; restart the request",
                    _ => "requestState failed integrity verification",
                };
                ErrorData::invalid_params(message, None)
            })
    }
}

/// Writes `object` as JSON with keys sorted recursively, so the digest does
/// not depend on the key order the client happened to use.
fn write_canonical_object(object: &JsonObject, out: &mut String) {
    let mut keys: Vec<&String> = object.keys().collect();
    keys.sort();
    out.push('{');
    for (index, key) in keys.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        if let Some(value) = object.get(key) {
            write_canonical(value, out);
        }
    }
    out.push('}');
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => write_canonical_object(object, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(scope: &str) -> StateSealer {
        StateSealer::with_key(scope, vec![7u8; 32]).expect("32-byte key")
    }

    fn args(value: Value) -> JsonObject {
        match value {
            Value::Object(object) => object,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn round_trips_and_rejects_tampering() {
        let sealer = sealer("alpha");
        let binding = sealer.binding("tools/call", "deploy", None);
        let mut state = FlowState {
            step: 1,
            ..FlowState::default()
        };
        state
            .answers
            .insert("k".into(), serde_json::json!({"action": "accept"}));
        let sealed = sealer.seal(&state, &binding).expect("seal");
        assert_eq!(sealer.open(&sealed, &binding).expect("open"), state);

        let tampered = format!("{sealed}-TAMPERED");
        let error = sealer.open(&tampered, &binding).expect_err("tampered");
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    }

    #[test]
    fn binding_covers_scope_method_target_and_arguments() {
        let alpha = sealer("alpha");
        let beta = sealer("beta");
        let a = args(serde_json::json!({"x": 1, "y": [1, {"b": 2, "a": 1}]}));
        let reordered = args(serde_json::json!({"y": [1, {"a": 1, "b": 2}], "x": 1}));
        let base = alpha.binding("tools/call", "deploy", Some(&a));
        assert_eq!(base, alpha.binding("tools/call", "deploy", Some(&reordered)));
        assert_ne!(base, beta.binding("tools/call", "deploy", Some(&a)));
        assert_ne!(base, alpha.binding("prompts/get", "deploy", Some(&a)));
        assert_ne!(base, alpha.binding("tools/call", "provision", Some(&a)));
        assert_ne!(base, alpha.binding("tools/call", "deploy", None));
        assert_eq!(
            alpha.binding("tools/call", "deploy", None),
            alpha.binding("tools/call", "deploy", Some(&JsonObject::new()))
        );

        let sealed = alpha.seal(&FlowState::default(), &base).expect("seal");
        let other = alpha.binding("tools/call", "deploy", None);
        assert!(alpha.open(&sealed, &other).is_err());
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        let sealer = sealer("alpha");
        let binding = sealer.binding("tools/call", "x", None);
        for garbage in ["", ".", "rs1..", "rs1.%%%.%%%", "rs2.a.b.c", &"A".repeat(10_000)] {
            assert!(sealer.open(garbage, &binding).is_err(), "{garbage:?}");
        }
    }
}
