//! `[[policy]]` where the third review found holes (finding 5), with real peers: two demo
//! backends offering the same tools and prompts (so exposed `alpha__…` and `beta__…`) and an
//! `initialize`-era backend with resources one subscribes to, behind one gateway whose
//! principals come from `x-user`:
//! * a deny rule on a tool's bare name holds for every backend's prefixed name;
//! * `completion/complete` is governed by the prompt it completes;
//! * resource rules match a URI's normal form (`..` resolved, unreserved escapes decoded), and a
//!   URI without one is refused;
//! * `subscriptions/listen` leaves out the resources the caller may not read (and is refused when
//!   nothing it asks for is left), and a legacy client's `resources/subscribe` of one is refused.

use anyhow::Context as _;
use mrtr_backends::legacy::{OTHER, WATCHED};
use mrtr_backends::{LegacyBackend, ResponseMode, ServedLegacy, serve_legacy};
use mrtr_gateway::{Backend, GatewayConfig, PositiveSeconds, RunningGateway};
use mrtr_test_support::backends::Stack;
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, EventStream, listen, send};
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

const POLICY: &str = r#"
[[policy]]
principals = ["*"]
tools = ["*"]
prompts = ["alpha__*"]
resources = ["test://legacy/watched", "file:///srv/*"]

[[policy]]
principals = ["*"]
tools = ["delete_branch"]
effect = "deny"
"#;

/// The demo backends and a legacy one behind a gateway with [`POLICY`].
struct Fixture {
    stack: Stack,
    _legacy: ServedLegacy,
}

impl Fixture {
    async fn start() -> anyhow::Result<Self> {
        let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Sse).await?;
        let legacy = serve_legacy(LegacyBackend::new("old")).await?;
        let mut backends = Stack::backends(&alpha, &beta);
        backends.push(Backend::new("old", legacy.url())?);
        let mut config = GatewayConfig::new(backends);
        config.settings.health_interval = PositiveSeconds::from_secs(3600);
        config.settings.principal_header = Some("x-user".parse()?);
        let file: toml::Table = toml::from_str(POLICY)?;
        config.settings.policy = file["policy"].clone().try_into()?;
        let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
        let gateway: RunningGateway = gateway(config, keyring()).await?;
        let readiness = gateway.readiness();
        eventually(TIMEOUT, "the legacy backend found legacy", || async {
            readiness.check().1["backends"]["old"]["era"] == "legacy"
        })
        .await;
        let stack = Stack {
            alpha,
            beta,
            gateways: vec![gateway],
        };
        Ok(Self {
            stack,
            _legacy: legacy,
        })
    }

    fn url(&self) -> String {
        self.stack.url()
    }

    async fn send(&self, call: Call) -> anyhow::Result<mrtr_test_support::mcp::Reply> {
        send(&self.url(), &call.header("x-user", "alice")).await
    }
}

fn refused(reply: &mrtr_test_support::mcp::Reply) -> bool {
    reply.status == 403 && reply.error_code() == Some(-32600)
}

#[tokio::test]
async fn a_deny_rule_on_a_bare_name_holds_for_every_backends_prefixed_name() -> anyhow::Result<()> {
    let fixture = Fixture::start().await?;
    let arguments = json!({ "repo": "acme/api", "branch": "old" });
    for name in ["alpha__delete_branch", "beta__delete_branch", "delete_branch"] {
        let reply = fixture.send(Call::tool(name, arguments.clone())).await?;
        assert!(refused(&reply), "{name}: {}", reply.body);
    }
    let listed = fixture.send(Call::new("tools/list", json!({}))).await?;
    let names: Vec<&str> = listed.result()["tools"]
        .as_array()
        .context("no tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.iter().all(|n| !n.ends_with("delete_branch")) && names.contains(&"alpha__deploy"),
        "{names:?}"
    );
    fixture.stack.stop().await
}

#[tokio::test]
async fn a_completion_is_governed_by_the_prompt_it_completes() -> anyhow::Result<()> {
    let fixture = Fixture::start().await?;
    let complete = |prompt: &str| {
        Call::new(
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": prompt },
                    "argument": { "name": "audience", "value": "eng" } }),
        )
    };
    let denied = fixture.send(complete("beta__release_notes")).await?;
    assert!(refused(&denied), "{}", denied.body);
    let allowed = fixture.send(complete("alpha__release_notes")).await?;
    assert!(!refused(&allowed), "{}", allowed.body);
    let nameless = fixture
        .send(Call::new(
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt" } }),
        ))
        .await?;
    assert!(refused(&nameless), "{}", nameless.body);
    fixture.stack.stop().await
}

#[tokio::test]
async fn resource_rules_match_the_normal_form_of_a_uri() -> anyhow::Result<()> {
    let fixture = Fixture::start().await?;
    let read = |uri: &str| Call::new("resources/read", json!({ "uri": uri }));
    for uri in [
        "file:///srv/../etc/passwd",
        "file:///srv/%2e%2e/etc/passwd",
        "file:///srv/..%2Fetc/passwd",
        "test://legacy/other",
        "not a uri",
    ] {
        let reply = fixture.send(read(uri)).await?;
        assert!(refused(&reply), "{uri}: {}", reply.body);
    }
    // The same resource by another spelling of its URI is allowed, and read.
    let reply = fixture.send(read("test://legacy/./x/../watched")).await?;
    assert!(!refused(&reply), "{}", reply.body);
    fixture.stack.stop().await
}

/// The resources a listen's acknowledgement names.
async fn acknowledged(events: &mut EventStream) -> anyhow::Result<Value> {
    let ack = events.next().await?;
    anyhow::ensure!(
        ack["method"] == "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    Ok(ack["params"]["notifications"]["resourceSubscriptions"].clone())
}

#[tokio::test]
async fn a_listen_leaves_out_what_the_caller_may_not_read() -> anyhow::Result<()> {
    let fixture = Fixture::start().await?;
    let url = fixture.url();
    let alice = [("x-user", "alice")];
    let (status, mut events) = listen(
        &url,
        1,
        json!({ "resourceSubscriptions": [WATCHED, OTHER] }),
        &alice,
    )
    .await?;
    assert_eq!(status, 200);
    assert_eq!(acknowledged(&mut events).await?, json!([WATCHED]));
    drop(events);

    let (status, _) = listen(&url, 2, json!({ "resourceSubscriptions": [OTHER] }), &alice).await?;
    assert_eq!(status, 403, "nothing the listen asks for is permitted");
    fixture.stack.stop().await
}

#[tokio::test]
async fn a_legacy_clients_subscription_to_a_denied_resource_is_refused() -> anyhow::Result<()> {
    let fixture = Fixture::start().await?;
    let url = fixture.url();
    let post = async |session: Option<&str>, body: Value| -> anyhow::Result<reqwest::Response> {
        let mut request = reqwest::Client::new()
            .post(&url)
            .timeout(TIMEOUT)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-user", "alice")
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        Ok(request.send().await?)
    };
    let initialized = post(
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-legacy", "version": "0"}}}),
    )
    .await?;
    let session = initialized
        .headers()
        .get("mcp-session-id")
        .context("no session id")?
        .to_str()?
        .to_owned();
    // The session's stream must be open for a subscription to start (and be refused) at once.
    let stream = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("x-user", "alice")
        .send()
        .await?;
    assert_eq!(stream.status(), 200);
    let subscribe = |id: u64, uri: &str| json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe", "params": {"uri": uri}});
    let denied: Value = post(Some(&session), subscribe(1, OTHER)).await?.json().await?;
    assert!(denied.get("error").is_some(), "{denied}");
    let allowed: Value = post(Some(&session), subscribe(2, WATCHED)).await?.json().await?;
    assert_eq!(allowed["result"], json!({}), "{allowed}");
    drop(stream);
    fixture.stack.stop().await
}
