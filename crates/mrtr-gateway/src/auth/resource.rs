//! The resource server's side of a request: the check the front runs on every request to `/mcp`
//! ([`Authenticator::check`]), the Protected Resource Metadata it serves (RFC 9728), and the
//! `WWW-Authenticate` challenges of its refusals (RFC 6750 §3, with the `resource_metadata`
//! parameter of RFC 9728 §5.1 that MCP clients discover the authorization server from).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use tower_mrtr::error::INVALID_REQUEST;

use super::token::{OAuthSettings, Refused, Verified, Verifier};
use crate::jsonrpc::error_body;

/// The header the verified principal travels in, inside the gateway and on to the backends.
/// Any copy a client sends is removed first.
pub const PRINCIPAL_HEADER: HeaderName = HeaderName::from_static("x-mrtr-principal");

/// The well-known path of the Protected Resource Metadata (RFC 9728 §3).
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// What [`Authenticator::check`] decided.
pub(crate) enum Check {
    /// Verified: the principal header and the [`Caller`](super::Caller) are set.
    Passed,
    /// The answer to send instead (401 or 403).
    Refused(Response<Full<Bytes>>),
    /// The token names a key not held: [`Authenticator::refresh`], then check again.
    UnknownKey(Instant),
}

/// The gateway's OAuth resource server; see the [module docs](super).
#[derive(Debug)]
pub struct Authenticator {
    verifier: Verifier,
    metadata: Bytes,
    /// The two paths the metadata is served at: the RFC 9728 one for the resource's path
    /// (`/.well-known/oauth-protected-resource/mcp`), and the bare one.
    metadata_paths: [String; 2],
    /// `Bearer resource_metadata=…, scope=…`: no token.
    challenge: HeaderValue,
    /// `Bearer error="invalid_token", …`: a token that does not verify.
    invalid: HeaderValue,
    /// `Bearer error="insufficient_scope", …`: a scope missing.
    insufficient: HeaderValue,
    /// A background read of stale keys is under way.
    refreshing: AtomicBool,
}

impl Authenticator {
    /// The resource server of `settings`, or what is wrong with them.
    pub fn new(settings: OAuthSettings) -> Result<Arc<Self>, String> {
        let resource: http::Uri = settings
            .audience
            .parse()
            .map_err(|e| format!("[oauth] audience: not a URL: {e}"))?;
        let (Some(scheme), Some(authority)) = (resource.scheme_str(), resource.authority()) else {
            return Err(
                "[oauth] audience: expected an absolute URL such as https://mcp.example.com/mcp".into(),
            );
        };
        if resource.query().is_some() {
            return Err("[oauth] audience: a resource URI has no query".into());
        }
        // RFC 6749 §3.3: a scope token is visible ASCII but `"` and `\`, so it quotes as is.
        if let Some(bad) = settings.scopes.iter().find(|s| {
            s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
        }) {
            return Err(format!("[oauth] scopes: {bad:?} is not a scope token"));
        }
        let path = resource.path().trim_end_matches('/');
        let metadata_url = format!("{scheme}://{authority}{METADATA_PATH}{path}");
        let metadata = serde_json::json!({
            "resource": settings.audience,
            "authorization_servers": [settings.issuer],
            "scopes_supported": settings.scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "mrtr-gateway",
        });
        let scope = settings.scopes.join(" ");
        let with_scope = |head: &str| {
            let mut value = format!("Bearer {head}resource_metadata=\"{metadata_url}\"");
            if !scope.is_empty() {
                value.push_str(&format!(", scope=\"{scope}\""));
            }
            HeaderValue::try_from(value).map_err(|e| format!("[oauth]: {e}"))
        };
        Ok(Arc::new(Self {
            challenge: with_scope("")?,
            invalid: HeaderValue::try_from(format!(
                "Bearer error=\"invalid_token\", resource_metadata=\"{metadata_url}\""
            ))
            .map_err(|e| format!("[oauth]: {e}"))?,
            insufficient: with_scope("error=\"insufficient_scope\", ")?,
            metadata: Bytes::from(metadata.to_string()),
            metadata_paths: [format!("{METADATA_PATH}{path}"), METADATA_PATH.to_owned()],
            verifier: Verifier::new(settings)?,
            refreshing: AtomicBool::new(false),
        }))
    }

    /// Reads the issuer's keys, so that the first request need not wait for them (a failure is
    /// logged; requests then try again).
    pub async fn load_keys(&self) {
        self.verifier.keys.refresh(Instant::now(), false).await;
    }

    /// Whether `path` is where the metadata is served.
    pub(crate) fn is_metadata_path(&self, path: &str) -> bool {
        self.metadata_paths.iter().any(|p| p == path)
    }

    /// The answer at a metadata path: the document to `GET` and `HEAD`, else 405.
    pub(crate) fn metadata(&self, method: &Method) -> Response<Full<Bytes>> {
        let mut response = if method == Method::GET || method == Method::HEAD {
            let body = if method == Method::GET {
                self.metadata.clone()
            } else {
                Bytes::new()
            };
            let mut ok = Response::new(Full::new(body));
            ok.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            ok
        } else {
            let mut refused = Response::new(Full::new(Bytes::new()));
            *refused.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            refused
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            refused
        };
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
        response
    }

    /// Checks the bearer token of a request to `/mcp` (see the [module docs](super)).
    /// `after_refresh`: the keys were just read again for this request, so a key still unknown
    /// refuses it.
    pub(crate) fn check<B>(self: &Arc<Self>, request: &mut Request<B>, after_refresh: bool) -> Check {
        // Whatever happens next, no client sets the principal itself.
        request.headers_mut().remove(PRINCIPAL_HEADER);
        let Some(token) = bearer(request.headers()) else {
            return self.refuse(
                "no_token",
                StatusCode::UNAUTHORIZED,
                &self.challenge,
                "A bearer token is required",
            );
        };
        self.refresh_if_stale();
        match self.verifier.verify(token) {
            Verified::Caller(caller) => {
                let value = tower_mrtr::mcp_headers::encode_header_value(&caller.principal);
                let Some(value) = value else {
                    return self.refuse(
                        "principal_claim",
                        StatusCode::UNAUTHORIZED,
                        &self.invalid,
                        "The bearer token is not valid here",
                    );
                };
                request.headers_mut().insert(PRINCIPAL_HEADER, value);
                request.extensions_mut().insert(caller);
                Check::Passed
            }
            Verified::Refused(Refused::Scope) => self.refuse(
                "insufficient_scope",
                StatusCode::FORBIDDEN,
                &self.insufficient,
                "The bearer token lacks a scope this gateway requires",
            ),
            Verified::Refused(Refused::Invalid(reason)) => self.refuse(
                reason,
                StatusCode::UNAUTHORIZED,
                &self.invalid,
                "The bearer token is not valid here",
            ),
            Verified::UnknownKey if after_refresh => self.refuse(
                "unknown_key",
                StatusCode::UNAUTHORIZED,
                &self.invalid,
                "The bearer token is not valid here",
            ),
            Verified::UnknownKey => Check::UnknownKey(Instant::now()),
        }
    }

    /// Reads the keys again (see `keys.rs`) for a token naming an unknown key, seen at `asked`.
    pub(crate) async fn refresh(&self, asked: Instant) {
        self.verifier.keys.refresh(asked, true).await;
    }

    /// Starts a background read of keys older than their maximum age, one at a time.
    fn refresh_if_stale(self: &Arc<Self>) {
        if !self.verifier.keys.stale() || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refreshing.store(false, Ordering::Release);
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            this.verifier.keys.refresh(Instant::now(), false).await;
            this.refreshing.store(false, Ordering::Release);
        });
    }

    fn refuse(
        &self,
        reason: &'static str,
        status: StatusCode,
        challenge: &HeaderValue,
        message: &str,
    ) -> Check {
        tracing::debug!(
            reason,
            status = status.as_u16(),
            "request refused by the resource server"
        );
        crate::observe::metrics::auth_refused(reason);
        let mut response = Response::new(Full::new(error_body(None, INVALID_REQUEST, message, None)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::WWW_AUTHENTICATE, challenge.clone());
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Check::Refused(response)
    }
}

/// The token of the one `Authorization: Bearer` header (RFC 6750 §2.1; the scheme is
/// case-insensitive), if the request has exactly one such header.
fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let text = value.to_str().ok()?;
    let (scheme, token) = text.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' ')).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(scopes: &[&str]) -> Arc<Authenticator> {
        let mut settings: OAuthSettings = toml::from_str(
            r#"
issuer = "https://idp.example.com"
jwks-file = "/nonexistent/jwks.json"
audience = "https://mcp.example.com/mcp"
"#,
        )
        .unwrap();
        settings.scopes = scopes.iter().map(|s| s.to_string()).collect();
        Authenticator::new(settings).unwrap()
    }

    #[test]
    fn the_metadata_is_served_at_the_resources_well_known_path() {
        let auth = authenticator(&["mcp:tools"]);
        assert!(auth.is_metadata_path("/.well-known/oauth-protected-resource/mcp"));
        assert!(auth.is_metadata_path("/.well-known/oauth-protected-resource"));
        assert!(!auth.is_metadata_path("/mcp"));
        let document: serde_json::Value = serde_json::from_slice(&auth.metadata).unwrap();
        assert_eq!(document["resource"], "https://mcp.example.com/mcp");
        assert_eq!(document["authorization_servers"][0], "https://idp.example.com");
        assert_eq!(document["scopes_supported"][0], "mcp:tools");
        assert_eq!(
            auth.metadata(&Method::POST).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            auth.challenge,
            "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"mcp:tools\""
        );
    }

    #[tokio::test]
    async fn a_request_without_a_bearer_token_is_challenged_and_loses_any_principal_it_claimed() {
        let auth = authenticator(&[]);
        for authorization in [
            None,
            Some("Basic YWxpY2U6cHc="),
            Some("Bearer "),
            Some("Bearer a b"),
        ] {
            let mut request = Request::post("/mcp").header(PRINCIPAL_HEADER, "alice");
            if let Some(value) = authorization {
                request = request.header(header::AUTHORIZATION, value);
            }
            let mut request = request.body(()).unwrap();
            let Check::Refused(response) = auth.check(&mut request, false) else {
                panic!("{authorization:?} passed");
            };
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{authorization:?}");
            assert!(
                !response.headers()[header::WWW_AUTHENTICATE]
                    .to_str()
                    .unwrap()
                    .contains("error=")
            );
            assert!(request.headers().get(PRINCIPAL_HEADER).is_none());
        }
        let Check::Refused(response) = auth.check(
            &mut Request::post("/mcp")
                .header(header::AUTHORIZATION, "Bearer not.a.jwt")
                .body(())
                .unwrap(),
            false,
        ) else {
            panic!("a malformed token passed");
        };
        assert!(
            response.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap()
                .starts_with("Bearer error=\"invalid_token\"")
        );
    }

    #[test]
    fn scopes_that_would_break_the_challenge_are_refused() {
        let mut settings: OAuthSettings = toml::from_str(
            r#"
issuer = "https://idp.example.com"
jwks-file = "/x"
audience = "https://mcp.example.com/mcp"
scopes = ["a\"b"]
"#,
        )
        .unwrap();
        assert!(
            Authenticator::new(settings.clone())
                .unwrap_err()
                .contains("scope token")
        );
        settings.scopes.clear();
        settings.audience = "/mcp".into();
        assert!(Authenticator::new(settings).unwrap_err().contains("absolute URL"));
    }
}
