//! Attacks on sealed `requestState`, each refused by the gateway with JSON-RPC `-32602` **without
//! reaching any backend** (the backends' request counters do not move).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mrtr_backends::ResponseMode;
use mrtr_gateway::GatewayConfig;
use mrtr_test_support::backends::Stack;
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, Reply, body, drive, mcp_headers, message, raw, send};
use serde_json::json;
use tower_mrtr::Clock;

fn delete_branch(backend: &str) -> Call {
    Call::tool(
        &format!("{backend}__delete_branch"),
        json!({"repo": "acme/api", "branch": "old"}),
    )
}

/// Sends `call` and checks that the gateway refused it on its own.
async fn assert_refused(stack: &Stack, url: &str, call: &Call) -> anyhow::Result<Reply> {
    let before = stack.backend_requests();
    let reply = send(url, call).await?;
    assert_eq!(
        reply.error_code(),
        Some(-32602),
        "expected -32602, got {}",
        reply.body
    );
    assert_eq!(reply.status, 200);
    assert_eq!(stack.backend_requests(), before, "a backend was reached");
    Ok(reply)
}

async fn shared_key_stack() -> anyhow::Result<Stack> {
    let (alpha, beta) = Stack::start_shared_key().await?;
    let config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    Stack::with_gateway(alpha, beta, config).await
}

#[tokio::test]
async fn edited_state_is_refused() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Sse).await?;
    let url = stack.url();
    let call = delete_branch("beta");
    let first = send(&url, &call).await?;
    let state = first.state()?;
    // Flip one character in the middle, then append, then truncate.
    let mut bytes = state.clone().into_bytes();
    let mid = bytes.len() / 2;
    bytes[mid] = if bytes[mid] == b'A' { b'B' } else { b'A' };
    let edited = String::from_utf8(bytes)?;
    for bad in [
        edited,
        format!("{state}-TAMPERED"),
        state[..state.len() - 4].to_owned(),
        "backend-state".to_owned(),
    ] {
        assert_refused(&stack, &url, &call.retry(first.answers(), &bad)).await?;
    }
    // The genuine state still completes.
    let done = send(&url, &call.retry(first.answers(), &state)).await?;
    assert!(done.text().starts_with("[beta] delete_branch"), "{}", done.body);
    stack.stop().await
}

#[tokio::test]
async fn state_minted_by_one_backend_is_refused_for_another() -> anyhow::Result<()> {
    // alpha and beta share their own state key and scope, so each would accept the other's raw
    // state: only the gateway can tell where a state came from.
    let stack = shared_key_stack().await?;
    let url = stack.url();

    // Proof that the backends alone cannot tell: alpha's raw state completes on beta directly.
    let direct = Call::tool("delete_branch", json!({"repo": "acme/api", "branch": "old"}));
    let raw = send(&stack.alpha.url(), &direct).await?;
    let on_beta = send(&stack.beta.url(), &direct.retry(raw.answers(), &raw.state()?)).await?;
    assert!(
        on_beta.text().starts_with("[beta] delete_branch"),
        "{}",
        on_beta.body
    );

    // Through the gateway: alpha's envelope on a call routed to beta is refused.
    let first = send(&url, &delete_branch("alpha")).await?;
    let envelope = first.state()?;
    assert_refused(
        &stack,
        &url,
        &delete_branch("beta").retry(first.answers(), &envelope),
    )
    .await?;
    // ... and still works where it belongs.
    let done = send(&url, &delete_branch("alpha").retry(first.answers(), &envelope)).await?;
    assert!(done.text().starts_with("[alpha] delete_branch"), "{}", done.body);
    stack.stop().await
}

#[tokio::test]
async fn state_minted_for_another_tool_prompt_or_resource_is_refused() -> anyhow::Result<()> {
    let stack = shared_key_stack().await?;
    let url = stack.url();
    let first = send(&url, &delete_branch("alpha")).await?;
    let envelope = first.state()?;
    let deploy = Call::tool("alpha__deploy", json!({"service": "api", "environment": "prod"}));
    assert_refused(&stack, &url, &deploy.retry(first.answers(), &envelope)).await?;
    let prompt = Call::new(
        "prompts/get",
        json!({"name": "alpha__release_notes", "arguments": {"version": "1"}}),
    );
    assert_refused(&stack, &url, &prompt.retry(first.answers(), &envelope)).await?;
    let resource = Call::new("resources/read", json!({"uri": "demo://alpha/audit-log"}));
    assert_refused(&stack, &url, &resource.retry(first.answers(), &envelope)).await?;
    stack.stop().await
}

#[tokio::test]
async fn state_bound_to_another_principal_is_refused() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    config.settings.principal_header = Some("x-authenticated-user".parse()?);
    let stack = Stack::with_gateway(alpha, beta, config).await?;
    let url = stack.url();

    let alice = delete_branch("beta").header("x-authenticated-user", "alice");
    let first = send(&url, &alice).await?;
    let envelope = first.state()?;
    let bob = delete_branch("beta").header("x-authenticated-user", "bob");
    assert_refused(&stack, &url, &bob.retry(first.answers(), &envelope)).await?;
    // Without the principal header the gateway refuses before opening anything (403): a
    // deployment that binds principals never relays a request without one.
    let before = stack.backend_requests();
    let anonymous = send(&url, &delete_branch("beta").retry(first.answers(), &envelope)).await?;
    assert_eq!(
        (anonymous.status, anonymous.error_code()),
        (403, Some(-32600)),
        "{}",
        anonymous.body
    );
    assert_eq!(stack.backend_requests(), before, "a backend was reached");
    let done = send(&url, &alice.retry(first.answers(), &envelope)).await?;
    assert!(done.text().starts_with("[beta] delete_branch"), "{}", done.body);
    stack.stop().await
}

#[tokio::test]
async fn state_replayed_with_other_arguments_is_refused() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Sse).await?;
    let url = stack.url();
    for backend in ["alpha", "beta"] {
        let first = send(&url, &delete_branch(backend)).await?;
        let envelope = first.state()?;
        // The confirmation was given for branch "old"; replayed for "main", it must not open.
        let main = Call::tool(
            &format!("{backend}__delete_branch"),
            json!({"repo": "acme/api", "branch": "main"}),
        );
        assert_refused(&stack, &url, &main.retry(first.answers(), &envelope)).await?;
        // With the arguments it was given for, it opens (reordering and re-spacing are covered by
        // the layer's own tests, which send raw bytes).
        let done = send(&url, &delete_branch(backend).retry(first.answers(), &envelope)).await?;
        assert!(done.text().contains("deleted branch old"), "{}", done.body);
    }
    stack.stop().await
}

#[derive(Debug)]
struct ManualClock(Mutex<SystemTime>);

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
}

#[tokio::test]
async fn expired_state_is_refused() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let clock = Arc::new(ManualClock(Mutex::new(SystemTime::now())));
    let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    config.settings.envelope_ttl = mrtr_gateway::Seconds(Duration::from_secs(60));
    config.clock = Some(clock.clone());
    let stack = Stack::with_gateway(alpha, beta, config).await?;
    let url = stack.url();

    let call = Call::tool("provision_cluster", json!({"name": "c1"}));
    let first = send(&url, &call).await?;
    *clock.0.lock().unwrap() += Duration::from_secs(61);
    assert_refused(&stack, &url, &call.retry(first.answers(), &first.state()?)).await?;
    // A fresh flow works at the new time.
    let (done, rounds) = drive(&[&url], &call).await?;
    assert_eq!(rounds, 3);
    assert!(
        done.text().starts_with("[alpha] provision_cluster"),
        "{}",
        done.body
    );
    stack.stop().await
}

#[tokio::test]
async fn retry_pinned_to_a_removed_backend_gets_a_clear_error() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let keyring = keyring();
    let both = gateway(
        GatewayConfig::new(Stack::backends(&alpha, &beta)),
        keyring.clone(),
    )
    .await?;
    let only_alpha = GatewayConfig::new(vec![mrtr_gateway::Backend::new("alpha", &alpha.url())?]);
    let reduced = gateway(only_alpha, keyring).await?;
    let stack = Stack {
        alpha,
        beta,
        gateways: vec![both, reduced],
    };

    let call = Call::tool("archive_repo", json!({"repo": "acme/old"}));
    let first = send(&stack.gateways[0].url(), &call).await?;
    let reply = assert_refused(
        &stack,
        &stack.gateways[1].url(),
        &call.retry(first.answers(), &first.state()?),
    )
    .await?;
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"beta\"") && message.contains("no longer configured"),
        "{message}"
    );
    stack.stop().await
}

/// A header the client lists in `Connection` is for that hop alone: the gateway removes it as
/// the request arrives, before the layer reads it. So a principal named there is no principal
/// (403, nothing relayed) and an `Mcp-Name` named there is missing (400): the layer never binds
/// or checks a header that the backend would then not receive.
#[tokio::test]
async fn headers_the_client_lists_in_connection_are_gone_before_the_layer_reads_them() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    config.settings.principal_header = Some("x-authenticated-user".parse()?);
    let stack = Stack::with_gateway(alpha, beta, config).await?;
    let url = stack.url();
    let before = stack.backend_requests();

    let hop = delete_branch("beta")
        .header("x-authenticated-user", "alice")
        .header("connection", "keep-alive, X-Authenticated-User");
    let refused = send(&url, &hop).await?;
    assert_eq!(
        (refused.status, refused.error_code()),
        (403, Some(-32600)),
        "{}",
        refused.body
    );

    let nameless = delete_branch("beta")
        .header("x-authenticated-user", "alice")
        .header("connection", "mcp-name");
    let refused = send(&url, &nameless).await?;
    assert_eq!(
        (refused.status, refused.error_code()),
        (400, Some(-32020)),
        "{}",
        refused.body
    );
    assert_eq!(stack.backend_requests(), before, "a backend was reached");

    // The same calls without those Connection options go through.
    let fine = send(
        &url,
        &delete_branch("beta").header("x-authenticated-user", "alice"),
    )
    .await?;
    assert!(fine.state().is_ok(), "{}", fine.body);
    stack.stop().await
}

/// A call may take at most `max-rounds` rounds of `input_required`: `provision_cluster` needs
/// three, so with a cap of 2 its third retry is refused before it reaches the backend.
#[tokio::test]
async fn a_call_past_the_round_cap_is_refused_before_the_backend() -> anyhow::Result<()> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
    config.settings.max_rounds = 2.try_into()?;
    let stack = Stack::with_gateway(alpha, beta, config).await?;
    let url = stack.url();
    let call = Call::tool("provision_cluster", json!({ "name": "c1" }));
    let round1 = send(&url, &call).await?;
    let reply = send(&url, &call.retry(round1.answers(), &round1.state()?)).await?;
    // Round 2's envelope is handed out; its retry would be the call's third request.
    let refused = assert_refused(&stack, &url, &call.retry(reply.answers(), &reply.state()?)).await?;
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("too many rounds"),
        "{}",
        refused.body
    );
    stack.stop().await
}

/// Arguments are bound by their exact decimal values: a confirmation minted for
/// `9007199254740992` is refused for `9007199254740993.0`, which a double cannot tell apart
/// but a backend reading exact decimals does.
#[tokio::test]
async fn arguments_that_differ_beyond_a_doubles_precision_are_refused() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Json).await?;
    let url = stack.url();
    let first = Call::tool(
        "provision_cluster",
        json!({ "name": "c1", "quota": 9007199254740992u64 }),
    );
    let round1 = send(&url, &first).await?;
    let retry = first.retry(round1.answers(), &round1.state()?);
    // The retry's body written by hand: a JSON value would print the literal as a double.
    let retried =
        |quota: &str| body(7, "tools/call", retry.params.clone()).replace("9007199254740992", quota);
    let mut headers = mcp_headers("tools/call");
    headers.push(("mcp-name", "provision_cluster"));
    let before = stack.backend_requests();
    let (status, _, answer) = raw(
        reqwest::Method::POST,
        &url,
        &headers,
        &retried("9007199254740993.0"),
    )
    .await?;
    let answer = message(&answer)?;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(-32602)),
        "{answer}"
    );
    assert_eq!(stack.backend_requests(), before, "a backend was reached");
    // The same value written another way is the same argument: the gateway opens the envelope
    // and relays the retry (what the backend, an rmcp server binding its own state to the
    // arguments as it reads them, then says of the new spelling is its own business).
    let before = stack.backend_requests();
    raw(
        reqwest::Method::POST,
        &url,
        &headers,
        &retried("9.007199254740992e15"),
    )
    .await?;
    assert_eq!(stack.backend_requests().0, before.0 + 1, "relayed to alpha");
    let (_, _, answer) = raw(
        reqwest::Method::POST,
        &url,
        &headers,
        &retried("9007199254740992"),
    )
    .await?;
    let answer = message(&answer)?;
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    stack.stop().await
}
