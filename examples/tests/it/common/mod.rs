//! What only the tests of the two HTTP examples share, built on `mrtr-test-support`: the backends
//! and settings they run with, bearer tokens, and the behaviour both relays must show.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use mrtr_backends::{ResponseMode, ServedBackend};
use mrtr_examples::auth::mint;
use mrtr_examples::cli::{AUDIENCE, Secret, Settings};
use mrtr_test_support::backends::Stack;
use mrtr_test_support::mcp::{Call, send};
use serde_json::json;
use tower_mrtr::Keyring;

/// The JWT secret of every test.
pub const SECRET: &[u8] = b"the examples' test secret, 32+ bytes long";

/// Demo backends `alpha` (JSON answers, the default route) and `beta` (SSE answers, serving
/// `archive_repo` and `migrate_database`).
pub struct Backends {
    pub alpha: ServedBackend,
    pub beta: ServedBackend,
}

impl Backends {
    pub async fn start() -> Backends {
        let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await.unwrap();
        Backends { alpha, beta }
    }

    /// The settings an example runs with: these backends, a fresh keyring, [`SECRET`].
    pub fn settings(&self) -> Settings {
        let backends = [
            format!("alpha={}", self.alpha.url()),
            format!("beta={},archive_repo,migrate_database", self.beta.url()),
        ];
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            backends: backends.iter().map(|spec| spec.parse().unwrap()).collect(),
            keyring: Keyring::generate("k1").unwrap(),
            jwt_secret: Secret(SECRET.to_vec()),
        }
    }

    /// Requests each backend has received: (alpha, beta).
    pub fn requests(&self) -> (u64, u64) {
        (self.alpha.requests(), self.beta.requests())
    }

    pub async fn stop(self) {
        self.alpha.shutdown().await.unwrap();
        self.beta.shutdown().await.unwrap();
    }
}

/// A bearer token for `subject`, as an identity provider would issue it.
pub fn token(subject: &str) -> String {
    mint(SECRET, AUDIENCE, subject, Duration::from_secs(300)).unwrap()
}

/// `call` as `subject` (with a bearer token).
pub fn as_subject(call: &Call, subject: &str) -> Call {
    call.clone()
        .header("authorization", &format!("Bearer {}", token(subject)))
}

/// What both relays must do, at `url` in front of `backends`: refuse the unauthenticated (401),
/// route by target, seal round one, refuse a retry presented by another subject or tampered
/// with (`-32602`, no backend reached), and pin the retry to the backend that asked.
pub async fn relays_principal_bound_rounds(url: &str, backends: &Backends) {
    let archive = Call::tool("archive_repo", json!({ "repo": "acme/api" }));

    let anonymous = send(url, &archive).await.unwrap();
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.error_code(), Some(-32600));
    let forged = mint(
        b"another secret, also 32 bytes long",
        AUDIENCE,
        "alice",
        Duration::from_secs(60),
    );
    let forged = archive
        .clone()
        .header("authorization", &format!("Bearer {}", forged.unwrap()));
    assert_eq!(send(url, &forged).await.unwrap().status, 401);
    assert_eq!(backends.requests(), (0, 0), "refused before any backend");

    // Round one: the table sends archive_repo to beta, which asks for confirmation.
    let first = send(url, &as_subject(&archive, "alice")).await.unwrap();
    let state = first.state().unwrap();
    assert!(state.starts_with("mrtr4."), "sealed: {state}");
    assert!(
        first.body["result"]["inputRequests"]
            .to_string()
            .contains("[beta]"),
        "{}",
        first.body
    );
    assert_eq!(backends.requests(), (0, 1));

    // Another subject presenting alice's envelope, and a tampered envelope: refused here.
    let retry = archive.retry(first.answers(), &state);
    let stolen = send(url, &as_subject(&retry, "mallory")).await.unwrap();
    assert_eq!((stolen.status, stolen.error_code()), (200, Some(-32602)));
    let middle = state.len() / 2;
    let flipped = if &state[middle..=middle] == "A" { "B" } else { "A" };
    let tampered_state = format!("{}{flipped}{}", &state[..middle], &state[middle + 1..]);
    let tampered = archive.retry(first.answers(), &tampered_state);
    assert_eq!(
        send(url, &as_subject(&tampered, "alice"))
            .await
            .unwrap()
            .error_code(),
        Some(-32602)
    );
    assert_eq!(backends.requests(), (0, 1), "neither refusal reached a backend");

    // Alice's own retry reaches beta, which finishes the flow.
    let done = send(url, &as_subject(&retry, "alice")).await.unwrap();
    assert_eq!(done.body["result"]["resultType"], "complete", "{}", done.body);
    assert!(done.text().starts_with("[beta]"), "{}", done.text());
    assert_eq!(backends.requests(), (0, 2));

    // Anything not in the table goes to the default backend.
    let whoami = send(url, &as_subject(&Call::tool("whoami", json!({})), "alice"))
        .await
        .unwrap();
    assert!(whoami.text().contains("alpha"), "{}", whoami.body);
    assert_eq!(backends.requests(), (1, 2));
}
