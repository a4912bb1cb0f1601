//! One bearer token verified: its signature by a key of the issuer's JWKS under an accepted
//! algorithm, its issuer, its audience (the gateway's resource URI), its lifetime (with the
//! configured leeway), the principal claim and the required scopes. [`OAuthSettings`] is the
//! `[oauth]` table of the config file.

use std::collections::HashSet;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::caller::Caller;
use super::keys::{Found, KeySource, Keys};

/// The algorithms accepted when none are configured: every asymmetric one jsonwebtoken knows.
const DEFAULT_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The `[oauth]` table: the gateway as an OAuth 2.1 resource server (see `docs/gateway.md`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct OAuthSettings {
    /// The one issuer accepted (`iss`, exactly), named as the authorization server in the
    /// Protected Resource Metadata.
    pub issuer: String,
    /// Where the issuer's JWKS is fetched (`http://` or `https://`).
    pub jwks_uri: Option<String>,
    /// Or a JWKS file (read again when a token names an unknown key).
    pub jwks_file: Option<PathBuf>,
    /// The gateway's resource URI: a token's `aud` must hold it, and the metadata names it.
    pub audience: String,
    /// The claim whose string value is the principal.
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// The claim holding the caller's groups (a list of strings, or one string), for the policy.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Scopes every request's token must hold (each one).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway: u64,
    /// Accepted signature algorithms (default: every asymmetric one; `none` and HMAC are never
    /// accepted).
    #[serde(default)]
    pub algorithms: Vec<String>,
}

fn default_principal_claim() -> String {
    "sub".to_owned()
}

fn default_groups_claim() -> String {
    "groups".to_owned()
}

fn default_leeway() -> u64 {
    30
}

/// Why a token was refused: a fixed label, for the debug log and the metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The token does not verify (the label says which check failed).
    Invalid(&'static str),
    /// It verifies but lacks a required scope.
    Scope,
}

/// What [`Verifier::verify`] decided.
pub(crate) enum Verified {
    Caller(Caller),
    Refused(Refused),
    /// The token names a key the gateway does not hold: read the keys again, then verify again.
    UnknownKey,
}

/// Verifies tokens against [`OAuthSettings`].
#[derive(Debug)]
pub(crate) struct Verifier {
    pub(crate) settings: OAuthSettings,
    pub(crate) keys: Keys,
    algorithms: Vec<Algorithm>,
    validation: Validation,
}

impl Verifier {
    /// The verifier of `settings`, or what is wrong with them.
    pub(crate) fn new(settings: OAuthSettings) -> Result<Self, String> {
        let source = match (&settings.jwks_uri, &settings.jwks_file) {
            (Some(uri), None) => {
                let uri: http::Uri = uri.parse().map_err(|e| format!("[oauth] jwks-uri: {e}"))?;
                if !matches!(uri.scheme_str(), Some("http" | "https")) {
                    return Err("[oauth] jwks-uri: expected an http:// or https:// URL".into());
                }
                KeySource::Url(uri)
            }
            (None, Some(path)) => KeySource::File(path.clone()),
            _ => return Err("[oauth]: give exactly one of jwks-uri and jwks-file".into()),
        };
        if settings.issuer.is_empty() || settings.audience.is_empty() {
            return Err("[oauth]: issuer and audience must not be empty".into());
        }
        let algorithms = if settings.algorithms.is_empty() {
            DEFAULT_ALGORITHMS.to_vec()
        } else {
            settings
                .algorithms
                .iter()
                .map(|name| match Algorithm::from_str(name) {
                    Ok(alg) if DEFAULT_ALGORITHMS.contains(&alg) => Ok(alg),
                    Ok(_) => Err(format!(
                        "[oauth] algorithms: {name} is a shared-secret algorithm; only asymmetric signatures are accepted"
                    )),
                    Err(_) => Err(format!("[oauth] algorithms: unknown or unsupported algorithm {name:?}")),
                })
                .collect::<Result<_, _>>()?
        };
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&[&settings.issuer]);
        validation.set_audience(&[&settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = settings.leeway;
        validation.validate_nbf = true;
        Ok(Self {
            keys: Keys::new(source)?,
            settings,
            algorithms,
            validation,
        })
    }

    /// Verifies `token` with the keys held.
    pub(crate) fn verify(&self, token: &str) -> Verified {
        let refused = |label| Verified::Refused(Refused::Invalid(label));
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            // `alg: none` lands here too: it is no algorithm jsonwebtoken reads.
            return refused("malformed");
        };
        if !self.algorithms.contains(&header.alg) {
            return refused("algorithm");
        }
        let key = match self.keys.find(header.kid.as_deref()) {
            Found::Key(key) => key,
            Found::Unknown => return Verified::UnknownKey,
        };
        if key.alg.is_some_and(|alg| alg != header.alg) {
            return refused("algorithm");
        }
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let claims = match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
            Ok(data) => data.claims,
            Err(error) => {
                use jsonwebtoken::errors::ErrorKind;
                return refused(match error.kind() {
                    ErrorKind::ExpiredSignature => "expired",
                    ErrorKind::ImmatureSignature => "not_yet_valid",
                    ErrorKind::InvalidAudience => "audience",
                    ErrorKind::InvalidIssuer => "issuer",
                    ErrorKind::InvalidSignature => "signature",
                    ErrorKind::InvalidAlgorithm => "algorithm",
                    ErrorKind::MissingRequiredClaim(_) => "missing_claim",
                    _ => "malformed",
                });
            }
        };
        let Some(principal) = claims
            .get(&self.settings.principal_claim)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        else {
            return refused("principal_claim");
        };
        let scopes = strings(claims.get("scope").or_else(|| claims.get("scp")), true);
        let held: HashSet<&str> = scopes.iter().map(|s| &**s).collect();
        if !self.settings.scopes.iter().all(|s| held.contains(s.as_str())) {
            return Verified::Refused(Refused::Scope);
        }
        Verified::Caller(Caller {
            principal: principal.into(),
            groups: Arc::from(strings(claims.get(&self.settings.groups_claim), false)),
            scopes: Arc::from(scopes),
        })
    }
}

/// A claim as a list of strings: a JSON array of strings, or one string (split at spaces when
/// `split`, as `scope` is).
fn strings(claim: Option<&Value>, split: bool) -> Vec<Box<str>> {
    match claim {
        Some(Value::String(s)) if split => s.split_ascii_whitespace().map(Box::from).collect(),
        Some(Value::String(s)) => vec![Box::from(s.as_str())],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(Box::from).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> OAuthSettings {
        toml::from_str(
            r#"
issuer = "https://idp.example.com"
jwks-file = "/nonexistent/jwks.json"
audience = "https://mcp.example.com/mcp"
"#,
        )
        .unwrap()
    }

    #[test]
    fn shared_secret_algorithms_and_two_key_sources_are_refused() {
        let mut hmac = settings();
        hmac.algorithms = vec!["HS256".into()];
        assert!(Verifier::new(hmac).unwrap_err().contains("shared-secret"));
        let mut none = settings();
        none.algorithms = vec!["none".into()];
        assert!(Verifier::new(none).unwrap_err().contains("unknown"));
        let mut both = settings();
        both.jwks_uri = Some("https://idp.example.com/jwks".into());
        assert!(Verifier::new(both).unwrap_err().contains("exactly one"));
        let defaults = Verifier::new(settings()).unwrap();
        assert_eq!(defaults.settings.principal_claim, "sub");
        assert_eq!(defaults.settings.leeway, 30);
    }

    #[test]
    fn scopes_are_read_from_scope_or_scp() {
        assert_eq!(
            strings(Some(&Value::from("a b  c")), true),
            ["a", "b", "c"].map(Box::from)
        );
        assert_eq!(
            strings(Some(&serde_json::json!(["x", 1, "y"])), false),
            ["x", "y"].map(Box::from)
        );
        assert!(strings(Some(&Value::from(3)), true).is_empty());
    }
}
