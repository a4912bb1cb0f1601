//! `MrtrLayer` under other layers that answer early (authentication, limits): their answers must
//! have the layer's response body type, and they compose with no adapter in between.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::Value;
use tower::ServiceBuilder;
use tower::limit::RateLimitLayer;
use tower_http::auth::{AsyncAuthorizeRequest, AsyncRequireAuthorizationLayer};
use tower_http::validate_request::ValidateRequestHeaderLayer;
use tower_mrtr::{Keyring, MrtrLayer, ResponseBody};

use crate::common::*;

/// What an authentication layer learned about the caller.
#[derive(Clone, Debug)]
struct Claims {
    sub: String,
}

/// A bearer-token check standing in for JWT verification: `Bearer user:<name>` authenticates
/// `<name>`; anything else gets a 401 with a JSON-RPC error, built with the layer's body type.
#[derive(Clone)]
struct BearerAuth;

impl<B: Send + 'static> AsyncAuthorizeRequest<B> for BearerAuth {
    type RequestBody = B;
    type ResponseBody = ResponseBody<Full<Bytes>>;
    type Future = std::future::Ready<Result<Request<B>, Response<Self::ResponseBody>>>;

    fn authorize(&mut self, mut request: Request<B>) -> Self::Future {
        let sub = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer user:"))
            .map(str::to_owned);
        std::future::ready(match sub {
            Some(sub) => {
                request.extensions_mut().insert(Claims { sub });
                Ok(request)
            }
            None => Err(Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::WWW_AUTHENTICATE, "Bearer")
                .body(ResponseBody::from(
                    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Unauthorized"}}"#,
                ))
                .unwrap()),
        })
    }
}

#[tokio::test]
async fn an_authentication_layer_answering_401_stacks_in_front_with_no_adapter() {
    let backend = Backend::new();
    let inner = backend.service(Some("git"), |r: &Value| {
        if r["params"].get("requestState").is_some() {
            complete(r, "git")
        } else {
            input_required(r, Some(r#""s1""#))
        }
    });
    // Outermost first: a rate limit, authentication, then the relay bound to the subject.
    let stack = ServiceBuilder::new()
        .layer(RateLimitLayer::new(100, Duration::from_secs(1)))
        .layer(AsyncRequireAuthorizationLayer::new(BearerAuth))
        .layer(
            MrtrLayer::new(Keyring::generate("k1").unwrap())
                .bind_principal(|parts| parts.extensions.get::<Claims>().map(|c| c.sub.clone())),
        )
        .service(inner);
    let mut stack = stack;

    let as_user = |body: &str, user: Option<&str>| {
        let mut req = post(body);
        if let Some(user) = user {
            req.headers_mut().insert(
                header::AUTHORIZATION,
                format!("Bearer user:{user}").parse().unwrap(),
            );
        }
        req
    };
    let anonymous = send(&mut stack, as_user(&tool_call(1, "t", None), None)).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.error_code(), Some(-32001));
    assert!(backend.seen().is_empty());

    let first = send(&mut stack, as_user(&tool_call(2, "t", None), Some("alice"))).await;
    let envelope = first.envelope();
    let stolen = send(
        &mut stack,
        as_user(&tool_call(3, "t", Some(&envelope)), Some("mallory")),
    )
    .await;
    assert_eq!(stolen.error_code(), Some(-32602), "bound to alice");
    let done = send(
        &mut stack,
        as_user(&tool_call(4, "t", Some(&envelope)), Some("alice")),
    )
    .await;
    assert_eq!(done.json()["result"]["resultType"], "complete");
    assert_eq!(
        backend.seen().len(),
        2,
        "only alice's two calls reached the backend"
    );
}

#[tokio::test]
async fn tower_http_header_validation_stacks_in_front_with_no_adapter() {
    // `ValidateRequestHeaderLayer::accept` builds its 406 with `ResBody::default()`.
    let backend = Backend::new();
    let stack = ServiceBuilder::new()
        .layer(ValidateRequestHeaderLayer::accept("text/event-stream"))
        .layer(MrtrLayer::new(Keyring::generate("k1").unwrap()))
        .service(backend.service(Some("a"), |r: &Value| complete(r, "a")));
    let mut req = post(&tool_call(1, "t", None));
    req.headers_mut()
        .insert(header::ACCEPT, "application/json".parse().unwrap());
    let answer = send(stack.clone(), req).await;
    assert_eq!(
        (answer.status, answer.body.len()),
        (StatusCode::NOT_ACCEPTABLE, 0)
    );
    assert!(backend.seen().is_empty());
    let answer = send(stack, post(&tool_call(2, "t", None))).await;
    assert_eq!(answer.json()["result"]["resultType"], "complete");
}
