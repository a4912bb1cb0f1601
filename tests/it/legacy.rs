//! Legacy (2025-11-25) clients through the dual-era front, in front of a *modern* backend (the
//! suite fixture, rmcp) that asks for input with MRTR: a real rmcp client speaking the
//! `initialize` era, and raw HTTP for what a client library hides (sealed session ids, answers
//! reaching the wrong replica, timeouts, disconnects). And in front of an `initialize`-era
//! backend whose own server-to-client request reaches the legacy client in-request.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still part of legacy clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use mrtr_backends::legacy::WATCHED;
use mrtr_backends::{LegacyBackend, ResponseMode, ServedBackend, SuiteFixture, serve};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway};
use mrtr_test_support::backends::legacy_behind;
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::EventStream;
use mrtr_test_support::peers::{connect_with, tool_params, tool_text};
use mrtr_test_support::wait::TIMEOUT;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ListRootsResult, ProtocolVersion, Root, SamplingMessage,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ClientLifecycleMode, ErrorData, RoleClient};
use serde_json::{Value, json};

/// An rmcp client that answers elicitations with a user's details and sampling with "Paris".
#[derive(Clone, Debug, Default)]
struct LegacyUser {
    elicitations: Arc<AtomicUsize>,
}

impl ClientHandler for LegacyUser {
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.elicitations.fetch_add(1, Ordering::SeqCst);
        let content = json!({ "username": "rust-user", "email": "rust@example.com" });
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let message = SamplingMessage::assistant_text("Paris");
        Ok(CreateMessageResult::new(message, "rmcp-test".into()))
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder()
                .enable_elicitation()
                .enable_sampling()
                .build(),
            Implementation::new("rmcp-legacy-client", "0.1.0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// An rmcp client of 2025-11-25 that declares roots (or not) and answers `roots/list` with one.
#[derive(Clone, Debug)]
struct RootsUser {
    declares_roots: bool,
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for RootsUser {
    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(ListRootsResult::new(vec![Root::new("file:///srv/project")]))
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.declares_roots {
            ClientCapabilities::builder().enable_roots().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("rmcp-roots-client", "0.1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

#[tokio::test]
async fn a_legacy_backends_own_request_reaches_the_legacy_client_that_declared_it() -> anyhow::Result<()> {
    let (_backend, gateway) = legacy_behind(&LegacyBackend::new("old"), |_| {}).await?;
    for declares_roots in [true, false] {
        let user = RootsUser {
            declares_roots,
            asked: Arc::default(),
        };
        let client = connect_with(&gateway.url(), user.clone(), ClientLifecycleMode::Initialize).await?;
        let result =
            tokio::time::timeout(TIMEOUT, client.call_tool(tool_params("roots", json!({}))?)).await??;
        if declares_roots {
            // The backend's roots/list went to this client during the call, its answer back.
            assert_eq!(tool_text(&result), "1 roots");
            assert_eq!(user.asked.load(Ordering::SeqCst), 1);
        } else {
            // The backend session of this client declares no roots; asked anyway, the gateway
            // answers the backend for it.
            assert!(
                tool_text(&result).starts_with("no roots"),
                "{}",
                tool_text(&result)
            );
            assert_eq!(user.asked.load(Ordering::SeqCst), 0);
        }
        client.cancel().await?;
    }
    gateway.shutdown().await?;
    Ok(())
}

async fn suite_behind(
    config: impl FnOnce(&mut GatewayConfig),
) -> anyhow::Result<(ServedBackend, RunningGateway)> {
    let backend = serve(SuiteFixture::new()?, ResponseMode::Sse).await?;
    let mut gateway_config = GatewayConfig::new(vec![Backend::new("suite", &backend.url())?]);
    config(&mut gateway_config);
    let gateway = gateway(gateway_config, keyring()).await?;
    Ok((backend, gateway))
}

#[tokio::test]
async fn an_rmcp_client_of_2025_11_25_completes_two_elicitation_rounds_and_sampling() -> anyhow::Result<()> {
    let (backend, gateway) = suite_behind(|_| {}).await?;
    let user = LegacyUser::default();
    let client = connect_with(&gateway.url(), user.clone(), ClientLifecycleMode::Initialize).await?;
    let info = client.peer_info().context("initialized")?;
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("mrtr-gateway")
    );

    let result = tokio::time::timeout(
        TIMEOUT,
        client.call_tool(tool_params(
            "test_elicitation",
            json!({"message": "Who are you?"}),
        )?),
    )
    .await??;
    assert_eq!(user.elicitations.load(Ordering::SeqCst), 2, "two rounds");
    assert!(tool_text(&result).contains("rust-user"), "{}", tool_text(&result));

    let result = tokio::time::timeout(
        TIMEOUT,
        client.call_tool(tool_params(
            "test_sampling",
            json!({"prompt": "Capital of France?"}),
        )?),
    )
    .await??;
    assert_eq!(tool_text(&result), "LLM response: Paris");
    client.cancel().await?;
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

/// A raw legacy session.
struct Session {
    url: String,
    id: String,
}

const ACCEPT: &str = "application/json, text/event-stream";

impl Session {
    async fn open(url: &str, capabilities: Value) -> anyhow::Result<Self> {
        let response = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "raw-legacy", "version": "0"}}}),
            )
            .send()
            .await?;
        let id = response
            .headers()
            .get("mcp-session-id")
            .context("no session id")?
            .to_str()?
            .to_owned();
        Ok(Self {
            url: url.to_owned(),
            id,
        })
    }

    async fn post(&self, url: &str, body: Value) -> anyhow::Result<reqwest::Response> {
        Ok(reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
            .await?)
    }

    async fn call(&self, tool: &str, arguments: Value) -> anyhow::Result<EventStream> {
        let body = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        Ok(EventStream::of(self.post(&self.url, body).await?))
    }

    /// The session's standalone `GET` stream, opened.
    async fn updates(&self) -> anyhow::Result<EventStream> {
        let stream = reqwest::Client::new()
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await?;
        anyhow::ensure!(stream.status() == 200, "GET stream: HTTP {}", stream.status());
        Ok(EventStream::of(stream))
    }
}

/// The response message of a legacy answer, JSON or SSE (a legacy client must take both).
async fn reply(response: reqwest::Response) -> anyhow::Result<Value> {
    let sse = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !sse {
        return Ok(response.json().await?);
    }
    let mut events = EventStream::of(response);
    loop {
        let message = events.next().await?;
        if message.get("result").is_some() || message.get("error").is_some() {
            return Ok(message);
        }
    }
}

#[tokio::test]
async fn answers_must_reach_the_replica_that_holds_the_call() -> anyhow::Result<()> {
    let backend = serve(SuiteFixture::new()?, ResponseMode::Sse).await?;
    let keyring = keyring();
    let config = || GatewayConfig::new(vec![Backend::new("suite", &backend.url()).unwrap()]);
    let a = gateway(config(), keyring.clone()).await?;
    let b = gateway(config(), keyring).await?;

    let session = Session::open(&a.url(), json!({"elicitation": {}})).await?;
    // The sealed session opens on every replica: a plain call works on B.
    let plain = session
        .post(&b.url(), json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await?;
    assert_eq!(reply(plain).await?["result"], json!({}));

    let mut events = session
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    let request = events.next().await?;
    assert_eq!(request["method"], "elicitation/create");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"action": "accept", "content": {"username": "u", "email": "e@x"}}});
    // On the other replica: a clear error, not a hang.
    let wrong = session.post(&b.url(), answer.clone()).await?;
    assert_eq!(wrong.status(), 400);
    let error = wrong.json::<Value>().await?;
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hash on Mcp-Session-Id"),
        "{error}"
    );
    // On the replica that holds the call: accepted, and the call goes on to round two.
    assert_eq!(session.post(&a.url(), answer).await?.status(), 202);
    let second = events.next().await?;
    assert_eq!(second["method"], "elicitation/create");
    assert_ne!(second["id"], request["id"], "a fresh id per request");
    let answer = json!({"jsonrpc": "2.0", "id": second["id"], "result": {"action": "accept",
        "content": {"username": "u", "email": "e@x"}}});
    assert_eq!(session.post(&a.url(), answer).await?.status(), 202);
    let done = events.next().await?;
    assert_eq!(done["id"], "c1");
    assert!(
        done["result"].get("resultType").is_none(),
        "legacy results have no resultType"
    );
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("action=accept")
    );
    a.shutdown().await?;
    b.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_call_ends_when_its_client_goes_away_or_does_not_answer() -> anyhow::Result<()> {
    let (backend, gateway) =
        suite_behind(|c| c.settings.legacy_answer_timeout = PositiveSeconds(Duration::from_millis(500)))
            .await?;
    let session = Session::open(&gateway.url(), json!({"elicitation": {}})).await?;

    // Unanswered: the client is told to cancel, and the call ends with a timeout error.
    let mut events = session
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    let request = events.next().await?;
    let cancel = events.next().await?;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], request["id"]);
    let end = events.next().await?;
    assert_eq!(end["error"]["code"], -32001, "{end}");
    let late = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "cancel"}});
    assert_eq!(session.post(&gateway.url(), late).await?.status(), 400);

    // Gone: dropping the stream drops the call, and its id with it.
    let mut events = session
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    let request = events.next().await?;
    drop(events);
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "cancel"}});
    let mut status = 0;
    // Polled until the gateway has seen the stream go (bounded by TIMEOUT, not a count of
    // tries a loaded machine can exhaust).
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        status = session
            .post(&gateway.url(), answer.clone())
            .await?
            .status()
            .as_u16();
        if status == 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 400, "the call was forgotten when its client left");
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn sessions_are_sealed_bound_and_ended_by_delete() -> anyhow::Result<()> {
    let (backend, gateway) = suite_behind(|_| {}).await?;
    let url = gateway.url();
    let session = Session::open(&url, json!({})).await?;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let listed = reply(session.post(&url, list.clone()).await?).await?;
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    assert!(
        listed["result"].get("ttlMs").is_none(),
        "no modern-only members: {listed}"
    );

    // Undeclared capability: the backend (asked with this session's capabilities) refuses.
    let call = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "Name?"}}});
    let refused = reply(session.post(&session.url, call).await?).await?;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");

    let mut tampered = session.id.clone();
    tampered.push('A');
    let forged = Session {
        url: url.clone(),
        id: tampered,
    };
    assert_eq!(forged.post(&url, list.clone()).await?.status(), 404);

    let delete = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &session.id)
        .send()
        .await?;
    assert_eq!(delete.status(), 200);
    assert_eq!(session.post(&url, list).await?.status(), 404);

    // A modern client is not affected: no initialize, no session.
    let modern = reqwest::Client::new().get(&url).send().await?;
    assert_eq!(
        (modern.status().as_u16(), modern.headers()["allow"].to_str()?),
        (405, "POST")
    );
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

/// One session cannot crowd the others out: past its limit of calls waiting for its answers, a
/// call of that session ends at once with an error, while another session's call still gets its
/// elicitation. (One session used to fill the replica's whole table of waiting answers.)
#[tokio::test]
async fn one_session_cannot_keep_every_call_waiting() -> anyhow::Result<()> {
    let (backend, gateway) = suite_behind(|c| {
        c.settings.legacy_max_waiting_calls_per_session = 2.try_into().unwrap();
    })
    .await?;
    let greedy = Session::open(&gateway.url(), json!({"elicitation": {}})).await?;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut events = greedy
            .call("test_elicitation", json!({"message": "Name?"}))
            .await?;
        assert_eq!(events.next().await?["method"], "elicitation/create");
        held.push(events);
    }
    let mut refused = greedy
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    let end = refused.next().await?;
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("already has 2 calls waiting"),
        "{end}"
    );
    let other = Session::open(&gateway.url(), json!({"elicitation": {}})).await?;
    let mut events = other
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    assert_eq!(
        events.next().await?["method"],
        "elicitation/create",
        "another session is served"
    );
    // An ended call gives its place back.
    drop(held.pop());
    let mut again = None;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        let mut events = greedy
            .call("test_elicitation", json!({"message": "Name?"}))
            .await?;
        let first = events.next().await?;
        if first["method"] == "elicitation/create" {
            again = Some(events);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the session got its place back");
    // The calls still waiting end with their streams.
    drop((held, events, again, refused));
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

/// A session may keep only so many of its requests waiting for answers: the next call that
/// would ask ends with an error that says so, and the session's other calls go on.
#[tokio::test]
async fn one_session_cannot_keep_every_answer_waiting() -> anyhow::Result<()> {
    let (backend, gateway) = suite_behind(|c| {
        c.settings.legacy_max_waiting_answers_per_session = 2.try_into().unwrap();
    })
    .await?;
    let greedy = Session::open(&gateway.url(), json!({"elicitation": {}})).await?;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut events = greedy
            .call("test_elicitation", json!({"message": "Name?"}))
            .await?;
        assert_eq!(events.next().await?["method"], "elicitation/create");
        held.push(events);
    }
    let mut refused = greedy
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    let end = refused.next().await?;
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("too many requests waiting"),
        "{end}"
    );
    drop((held, refused));
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

/// A call has a deadline in all, not only per round: with answers allowed 30 s per round but
/// the call 1 s in all, an unanswered call ends after about a second.
#[tokio::test]
async fn a_call_ends_at_its_total_deadline() -> anyhow::Result<()> {
    let (backend, gateway) = suite_behind(|c| {
        c.settings.legacy_answer_timeout = PositiveSeconds::from_secs(30).unwrap();
        c.settings.legacy_call_timeout = PositiveSeconds::from_secs(1).unwrap();
    })
    .await?;
    let session = Session::open(&gateway.url(), json!({"elicitation": {}})).await?;
    let mut events = session
        .call("test_elicitation", json!({"message": "Name?"}))
        .await?;
    let request = events.next().await?;
    assert_eq!(request["method"], "elicitation/create");
    let end = events.next().await?;
    assert_eq!(end["error"]["code"], -32001, "{end}");
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("longer than 1 s"),
        "{end}"
    );
    let late = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "cancel"}});
    assert_eq!(
        session.post(&gateway.url(), late).await?.status(),
        400,
        "its id is forgotten"
    );
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_2025_03_26_client_is_served_in_its_version_and_unknown_versions_are_refused() -> anyhow::Result<()>
{
    let (backend, gateway) = suite_behind(|_| {}).await?;
    let client = reqwest::Client::new();
    let initialize = client
        .post(gateway.url())
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .json(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "raw-2025-03-26", "version": "0"}}}),
        )
        .send()
        .await?;
    let session = initialize
        .headers()
        .get("mcp-session-id")
        .context("no session id")?
        .to_str()?
        .to_owned();
    let result: Value = initialize.json().await?;
    assert_eq!(result["result"]["protocolVersion"], "2025-03-26", "{result}");

    // 2025-03-26 had no MCP-Protocol-Version header; a client may send none, or 2025-03-26 in a
    // session of another legacy version, and is served; a version the front does not speak is not.
    for (header, status) in [
        (None, 200),
        (Some("2025-03-26"), 200),
        (Some("2025-11-25"), 200),
        (Some("2024-11-05"), 400),
    ] {
        let mut request = client
            .post(gateway.url())
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-session-id", &session);
        if let Some(version) = header {
            request = request.header("mcp-protocol-version", version);
        }
        let answer = request
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .send()
            .await?;
        assert_eq!(answer.status().as_u16(), status, "{header:?}");
        if status == 200 {
            let list = reply(answer).await?;
            assert!(
                list["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()),
                "{list}"
            );
        }
    }
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn resource_updates_reach_the_sessions_get_stream() -> anyhow::Result<()> {
    let (backend, gateway) = suite_behind(|_| {}).await?;
    let session = Session::open(&gateway.url(), json!({})).await?;
    let mut updates = session.updates().await?;

    let subscribe = |id: u64, uri: &str| json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe", "params": {"uri": uri}});
    let answer = reply(
        session
            .post(&session.url, subscribe(1, "test://watched-resource"))
            .await?,
    )
    .await?;
    assert_eq!(answer["result"], json!({}), "{answer}");
    // The fixture's watched resource changes once when a subscription starts.
    let update = updates.next().await?;
    assert_eq!(
        update,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://watched-resource"}})
    );

    // A resource the backend sends no updates for: refused with its reason, not accepted silently.
    let refused = reply(
        session
            .post(&session.url, subscribe(2, "test://static-text"))
            .await?,
    )
    .await?;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("does not offer updates")),
        "{refused}"
    );
    let unsubscribe = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/unsubscribe", "params": {"uri": "test://watched-resource"}});
    let answer = reply(session.post(&session.url, unsubscribe).await?).await?;
    assert_eq!(answer["result"], json!({}), "{answer}");

    // Without a session there is no stream.
    let no_session = reqwest::Client::new()
        .get(gateway.url())
        .header("accept", "text/event-stream")
        .send()
        .await?;
    assert_eq!(no_session.status(), 405);
    drop(updates);
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_legacy_clients_subscription_to_a_legacy_backends_resource_is_the_backends() -> anyhow::Result<()> {
    let (_backend, gateway) = legacy_behind(&LegacyBackend::new("old"), |_| {}).await?;
    // A client declaring a capability: its backend session is its own, and the subscription
    // must be made there, where its tools/call lands too.
    let session = Session::open(&gateway.url(), json!({ "roots": { "listChanged": true } })).await?;
    let mut updates = session.updates().await?;
    let request = |id: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let tool = |id: u64, name: &str, text: &str| {
        request(
            id,
            "tools/call",
            json!({"name": name, "arguments": {"text": text}}),
        )
    };
    let text = |answer: &Value| {
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };

    let subscribe = request(1, "resources/subscribe", json!({"uri": WATCHED}));
    let answer = reply(session.post(&session.url, subscribe).await?).await?;
    assert_eq!(answer["result"], json!({}), "{answer}");
    // The backend holds the subscription (its resources/subscribe came through the gateway's
    // listen), and its update reaches the client's GET stream in legacy form.
    let subscribed = reply(session.post(&session.url, tool(2, "subscriptions", "")).await?).await?;
    assert_eq!(text(&subscribed), WATCHED, "{subscribed}");
    let notified = reply(session.post(&session.url, tool(3, "notify", WATCHED)).await?).await?;
    assert_eq!(text(&notified), WATCHED, "{notified}");
    assert_eq!(
        updates.next().await?,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": WATCHED}})
    );

    // Unsubscribed: the backend's subscription goes with the gateway's listen.
    let unsubscribe = request(4, "resources/unsubscribe", json!({"uri": WATCHED}));
    let answer = reply(session.post(&session.url, unsubscribe).await?).await?;
    assert_eq!(answer["result"], json!({}), "{answer}");
    let mut id = 5;
    mrtr_test_support::wait::eventually(TIMEOUT, "the backend unsubscribed", || {
        id += 1;
        let asked = tool(id, "subscriptions", "");
        let session = &session;
        async move {
            match session.post(&session.url, asked).await {
                Ok(answer) => reply(answer).await.is_ok_and(|a| text(&a).is_empty()),
                Err(_) => false,
            }
        }
    })
    .await;
    drop(updates);
    gateway.shutdown().await?;
    Ok(())
}
