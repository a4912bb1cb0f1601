//! Bearer-token authentication with JWTs (HS256, via `jsonwebtoken`), as a validator for
//! tower-http's `ValidateRequestHeaderLayer::custom`.
//!
//! [`JwtAuth`] checks `Authorization: Bearer <token>`: signature, expiry, audience, and that the
//! token names a subject. A valid token's subject goes into the request's extensions as a
//! [`Subject`], where `MrtrLayer::bind_principal` (and a per-principal rate limit) read it. Any
//! other request gets `401 Unauthorized` with `WWW-Authenticate: Bearer` and a JSON-RPC error,
//! built with whatever body type the stack answers with at that point (`From<Bytes>`): axum's
//! body on an axum `Router`, `tower_mrtr::ResponseBody` right outside `MrtrLayer`.
//!
//! Where it goes: **outside** `MrtrLayer`. Inside, the layer would look for the principal
//! before this ran, find none, and refuse the request (403), because `bind_principal` requires
//! one by default.
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http::{Request, StatusCode, header};
//! use mrtr_examples::auth::{JwtAuth, Subject, mint};
//! use tower_http::validate_request::ValidateRequest;
//!
//! let secret = b"a secret of at least thirty-two bytes";
//! let mut auth = JwtAuth::<Bytes>::hs256(secret, "mcp-gateway").unwrap();
//!
//! let token = mint(secret, "mcp-gateway", "alice", Duration::from_secs(60)).unwrap();
//! let mut request = Request::new(());
//! request.headers_mut().insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
//! assert!(auth.validate(&mut request).is_ok());
//! assert_eq!(request.extensions().get::<Subject>().unwrap().as_str(), "alice");
//!
//! let refused = auth.validate(&mut Request::new(())).unwrap_err();
//! assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use tower_http::validate_request::ValidateRequest;
use tower_mrtr::error::INVALID_REQUEST;

use crate::jsonrpc;

/// The authenticated caller: a verified token's `sub` claim, in the request's extensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Subject(Arc<str>);

impl Subject {
    /// The subject as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The principal `MrtrLayer::bind_principal` binds envelopes to: the request's [`Subject`].
///
/// ```
/// # let keyring = tower_mrtr::Keyring::generate("k1").unwrap();
/// let layer = tower_mrtr::MrtrLayer::new(keyring).bind_principal(mrtr_examples::auth::principal);
/// # let _ = layer;
/// ```
pub fn principal(parts: &http::request::Parts) -> Option<String> {
    parts
        .extensions
        .get::<Subject>()
        .map(|subject| subject.as_str().to_owned())
}

/// The claims the examples put into and require from a token.
#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    /// Subject: who the caller is.
    pub sub: String,
    /// Audience: which service the token is for.
    pub aud: String,
    /// Expiry, in seconds since the Unix epoch.
    pub exp: u64,
}

/// Verifies bearer JWTs; see the [module docs](self). `ResBody` is the body type of its 401.
/// Cheap to clone.
pub struct JwtAuth<ResBody> {
    keys: Arc<(DecodingKey, Validation)>,
    _body: PhantomData<fn() -> ResBody>,
}

impl<ResBody> JwtAuth<ResBody> {
    /// Tokens signed with HMAC-SHA256 under `secret`, for `audience`. Fails on an empty
    /// secret.
    pub fn hs256(secret: &[u8], audience: &str) -> Result<Self, jsonwebtoken::errors::Error> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        Ok(Self {
            keys: Arc::new((DecodingKey::from_secret(secret)?, validation)),
            _body: PhantomData,
        })
    }

    /// The subject of a valid `Authorization: Bearer` token, or why there is none (for logs:
    /// never the token itself).
    fn subject(&self, value: Option<&HeaderValue>) -> Result<Subject, String> {
        let value = value.ok_or("no Authorization header")?;
        let value = value.to_str().map_err(|_| "Authorization is not text")?;
        let (scheme, token) = value.split_once(' ').ok_or("Authorization has no scheme")?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(format!("Authorization scheme {scheme:?} is not Bearer"));
        }
        let (key, validation) = &*self.keys;
        let claims = jsonwebtoken::decode::<Claims>(token.trim(), key, validation)
            .map_err(|e| format!("invalid token: {e}"))?
            .claims;
        if claims.sub.is_empty() {
            return Err("token with an empty subject".to_owned());
        }
        Ok(Subject(claims.sub.into()))
    }
}

impl<B, ResBody: From<Bytes>> ValidateRequest<B> for JwtAuth<ResBody> {
    type ResponseBody = ResBody;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<ResBody>> {
        match self.subject(request.headers().get(header::AUTHORIZATION)) {
            Ok(subject) => {
                request.extensions_mut().insert(subject);
                Ok(())
            }
            Err(reason) => {
                tracing::debug!(%reason, "request not authenticated");
                let mut response = jsonrpc::error_response(
                    StatusCode::UNAUTHORIZED,
                    None,
                    INVALID_REQUEST,
                    "Unauthorized: a valid bearer token is required",
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                Err(response)
            }
        }
    }
}

impl<ResBody> Clone for JwtAuth<ResBody> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            _body: PhantomData,
        }
    }
}

impl<ResBody> fmt::Debug for JwtAuth<ResBody> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtAuth")
            .field("audience", &self.keys.1.aud)
            .finish_non_exhaustive()
    }
}

/// A token for `subject`, valid for `ttl`, signed with `secret` (HS256): what an identity
/// provider would issue. The tests and the examples' `--mint-token` use it.
pub fn mint(
    secret: &[u8],
    audience: &str,
    subject: &str,
    ttl: Duration,
) -> Result<String, jsonwebtoken::errors::Error> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let claims = Claims {
        sub: subject.to_owned(),
        aud: audience.to_owned(),
        exp: (now + ttl).as_secs(),
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret)?,
    )
}
