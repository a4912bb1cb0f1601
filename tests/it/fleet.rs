//! A fleet sharing a store (`[shared-store]`): three gateways with one keyring in front of the
//! demo backends, and one real `redis-server` on loopback (`mrtr_test_support::redis`):
//! * a `[[rate-limit]]` is one budget for the fleet, where without the store each replica counts
//!   its own, and a changed limit starts with a full budget;
//! * with `single-use`, a request state opens once in the fleet: presented again at any replica
//!   it is refused `-32602` before any backend; without it, a replay is served as before;
//! * the store killed: `on-store-error = "deny"` answers 503 and `"allow"` serves, `/readyz`
//!   says why; the store back, limits hold again without a restart;
//! * the store slow: a retry refused 503 because its check answered too late has not spent its
//!   state, though the check ran in the end.

use mrtr_backends::ResponseMode;
use mrtr_gateway::{GatewayConfig, PositiveSeconds};
use mrtr_test_support::backends::Stack;
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::{Call, Reply, send};
use mrtr_test_support::redis::RedisServer;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::json;

/// `whoami` of alpha (one round, no input), five an hour per principal.
const FIVE_AN_HOUR: &str = r#"
[[rate-limit]]
name = "whoami"
per = "principal-and-tool"
tools = ["alpha__whoami"]
requests = 5
period = 3600
"#;

/// The demo backends behind one gateway per entry of `files`, all with one keyring, each with
/// the settings of its file (TOML: any `[[rate-limit]]`s and a `[shared-store]` table), the
/// principal from `x-user`.
async fn fleet(files: &[&str]) -> anyhow::Result<Stack> {
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let keys = keyring();
    let mut gateways = Vec::new();
    for text in files {
        let file: toml::Table = toml::from_str(text)?;
        let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
        config.settings.principal_header = Some("x-user".parse()?);
        // Probes (and store pings) every second, so that /readyz follows an outage quickly.
        config.settings.health_interval = PositiveSeconds::from_secs(1);
        if let Some(limits) = file.get("rate-limit") {
            config.settings.rate_limit = limits.clone().try_into()?;
        }
        if let Some(store) = file.get("shared-store") {
            config.settings.shared_store = Some(store.clone().try_into()?);
        }
        let config = config.resolve_settings().map_err(anyhow::Error::msg)?;
        gateways.push(gateway(config, keys.clone()).await?);
    }
    Ok(Stack {
        alpha,
        beta,
        gateways,
    })
}

fn store_table(redis: &RedisServer, extra: &str) -> String {
    format!("[shared-store]\nurl = \"{}\"\n{extra}\n", redis.url())
}

fn whoami(user: &str) -> Call {
    Call::tool("alpha__whoami", json!({})).header("x-user", user)
}

fn admitted(reply: &Reply) -> bool {
    reply.status == 200 && reply.text().starts_with("[alpha]")
}

#[tokio::test]
async fn a_rate_limit_is_one_budget_for_the_fleet() -> anyhow::Result<()> {
    let redis = RedisServer::start_new();
    let file = format!("{FIVE_AN_HOUR}{}", store_table(&redis, ""));
    let stack = fleet(&[&file, &file, &file]).await?;
    let mut outcomes = Vec::new();
    for n in 0..9 {
        let reply = send(&stack.gateways[n % 3].url(), &whoami("alice")).await?;
        assert!(admitted(&reply) || reply.status == 429, "{}", reply.body);
        outcomes.push(admitted(&reply));
    }
    assert_eq!(
        outcomes,
        [true, true, true, true, true, false, false, false, false],
        "five of nine calls spread over three replicas"
    );
    let other = send(&stack.gateways[2].url(), &whoami("bob")).await?;
    assert!(admitted(&other), "bob has his own budget: {}", other.body);
    stack.stop().await?;

    // The limit changed (six an hour): its keys carry a new version, so it starts full; the
    // store still holds the old one's, untouched.
    let changed = format!(
        "{}{}",
        FIVE_AN_HOUR.replace("requests = 5", "requests = 6"),
        store_table(&redis, "")
    );
    let stack = fleet(&[&changed]).await?;
    for n in 0..6 {
        let reply = send(&stack.gateways[0].url(), &whoami("alice")).await?;
        assert!(
            admitted(&reply),
            "call {n} under the changed limit: {}",
            reply.body
        );
    }
    assert_eq!(
        send(&stack.gateways[0].url(), &whoami("alice")).await?.status,
        429
    );
    stack.stop().await?;

    // The same limit without the store: each replica counts its own (nine admitted).
    let stack = fleet(&[FIVE_AN_HOUR, FIVE_AN_HOUR, FIVE_AN_HOUR]).await?;
    for n in 0..9 {
        let reply = send(&stack.gateways[n % 3].url(), &whoami("alice")).await?;
        assert!(admitted(&reply), "call {n}: {}", reply.body);
    }
    stack.stop().await
}

#[tokio::test]
async fn a_single_use_state_opens_once_in_the_fleet() -> anyhow::Result<()> {
    let redis = RedisServer::start_new();
    let file = store_table(&redis, "single-use = true");
    let stack = fleet(&[&file, &file, &file]).await?;
    let url = |n: usize| stack.gateways[n % 3].url();
    // provision_cluster takes three input rounds.
    let call = Call::tool("provision_cluster", json!({"name": "c1"})).header("x-user", "alice");
    let round1 = send(&url(0), &call).await?;
    let retry = call.retry(round1.answers(), &round1.state()?);
    let round2 = send(&url(1), &retry).await?;
    assert!(round2.state().is_ok(), "{}", round2.body);
    let before = stack.backend_requests();
    for n in 0..3 {
        let replay = send(&url(n), &retry).await?;
        assert_eq!(replay.error_code(), Some(-32602), "replica {n}: {}", replay.body);
    }
    assert_eq!(stack.backend_requests(), before, "no replay reached a backend");
    // The flow itself goes on from round 2's state.
    let round3 = send(&url(2), &call.retry(round2.answers(), &round2.state()?)).await?;
    let done = send(&url(0), &call.retry(round3.answers(), &round3.state()?)).await?;
    assert!(
        done.text().starts_with("[alpha] provision_cluster"),
        "{}",
        done.body
    );
    stack.stop().await?;

    // The store without single use: a replay is served as today.
    let file = store_table(&redis, "");
    let stack = fleet(&[&file, &file]).await?;
    let round1 = send(&stack.gateways[0].url(), &call).await?;
    let retry = call.retry(round1.answers(), &round1.state()?);
    for n in 0..3 {
        let again = send(&stack.gateways[n % 2].url(), &retry).await?;
        assert!(again.state().is_ok(), "replay {n}: {}", again.body);
    }
    stack.stop().await
}

/// A single-use check that times out still runs when the store gets to it: the retry is refused
/// `503` (`on-store-error = "deny"`), and its envelope's record is taken back after the check,
/// so that the client's next try of the same retry is served, once.
#[tokio::test]
async fn a_retry_refused_for_a_slow_store_has_not_spent_its_state() -> anyhow::Result<()> {
    let redis = RedisServer::start_new();
    let file = store_table(&redis, "single-use = true\ntimeout = 0.25");
    let stack = fleet(&[&file, &file]).await?;
    let url = |n: usize| stack.gateways[n % 2].url();
    let call = Call::tool("provision_cluster", json!({"name": "c1"})).header("x-user", "alice");
    // A first retry loads the script into the store, so that the slow one is one EVALSHA.
    let warm = send(&url(0), &call).await?;
    let warm_retry = send(&url(1), &call.retry(warm.answers(), &warm.state()?)).await?;
    assert!(warm_retry.state().is_ok(), "{}", warm_retry.body);

    let round1 = send(&url(0), &call).await?;
    let retry = call.retry(round1.answers(), &round1.state()?);
    let pause = std::time::Duration::from_millis(800);
    redis.pause(pause);
    let refused = send(&url(1), &retry).await?;
    assert_eq!(refused.status, 503, "{}", refused.body);
    // The pause over, the store has run the late check and then its release.
    tokio::time::sleep(pause).await;
    let readiness = stack.gateways[1].readiness();
    eventually(TIMEOUT, "the store answers again", || async {
        readiness.check().1["shared_store"]["state"] == "up"
    })
    .await;
    let served = send(&url(0), &retry).await?;
    assert!(served.state().is_ok(), "the state was not spent: {}", served.body);
    let replay = send(&url(1), &retry).await?;
    assert_eq!(replay.error_code(), Some(-32602), "and is now: {}", replay.body);
    stack.stop().await
}

#[tokio::test]
async fn a_store_outage_gets_the_configured_answer_and_ends_without_a_restart() -> anyhow::Result<()> {
    let mut redis = RedisServer::start_new();
    let deny = format!("{FIVE_AN_HOUR}{}", store_table(&redis, "timeout = 0.2"));
    let allow = format!(
        "{FIVE_AN_HOUR}{}",
        store_table(&redis, "timeout = 0.2\non-store-error = \"allow\"")
    );
    let stack = fleet(&[&deny, &allow]).await?;
    let (deny_url, allow_url) = (stack.gateways[0].url(), stack.gateways[1].url());
    assert!(admitted(&send(&deny_url, &whoami("alice")).await?));
    let readiness = stack.gateways[0].readiness();
    assert_eq!(readiness.check().1["shared_store"]["state"], "up");

    redis.stop();
    let refused = send(&deny_url, &whoami("alice")).await?;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.error_code(), Some(-32603), "{}", refused.body);
    let served = send(&allow_url, &whoami("alice")).await?;
    assert!(admitted(&served), "on-store-error = allow: {}", served.body);
    let (ready, body) = readiness.check();
    assert!(ready, "a store outage leaves the replica in rotation: {body}");
    let store = &body["shared_store"];
    assert_eq!(
        (store["state"].as_str(), store["on_error"].as_str()),
        (Some("down"), Some("deny"))
    );
    assert!(store["reason"].is_string(), "{body}");

    redis.start();
    eventually(TIMEOUT, "the store answers again", || async {
        readiness.check().1["shared_store"]["state"] == "up"
    })
    .await;
    // The restarted store is empty: alice's budget starts again, and holds.
    let mut admitted_now = 0;
    for n in 0..7 {
        let reply = send(&stack.gateways[n % 2].url(), &whoami("alice")).await?;
        assert!(admitted(&reply) || reply.status == 429, "{}", reply.body);
        admitted_now += usize::from(admitted(&reply));
    }
    assert_eq!(admitted_now, 5);
    stack.stop().await
}

/// A store that accepts connections and never answers (a hung server, a half-open route): a
/// limited call still gets `on-store-error`'s answer (`send` gives up after [`TIMEOUT`], far
/// beyond the store's 0.2 s), calls no limit applies to are served, and the store is shown down,
/// never up.
#[tokio::test]
async fn a_store_that_never_answers_holds_no_request() -> anyhow::Result<()> {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("redis://{}", silent.local_addr()?);
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            open.push(connection);
        }
    });
    let file = format!("{FIVE_AN_HOUR}[shared-store]\nurl = \"{url}\"\ntimeout = 0.2\n");
    let stack = fleet(&[&file]).await?;
    for _ in 0..3 {
        let refused = send(&stack.url(), &whoami("alice")).await?;
        assert_eq!(refused.status, 503, "{}", refused.body);
        let unlimited = send(
            &stack.url(),
            &Call::tool("alpha__deploy", json!({})).header("x-user", "alice"),
        )
        .await?;
        assert_eq!(unlimited.status, 200, "{}", unlimited.body);
        let body = stack.gateways[0].readiness().check().1;
        assert_eq!(body["shared_store"]["state"], "down", "{body}");
    }
    held.abort();
    stack.stop().await
}

/// A store that asks for a password: the gateway gives it from the variable `password-env`
/// names (never from the file) and is admitted; without it, the store refuses the check, the
/// limited call gets `on-store-error`'s answer (503) and `/readyz` says the store is down.
#[tokio::test]
async fn a_store_asking_for_a_password_gets_it_from_the_environment() -> anyhow::Result<()> {
    const VARIABLE: &str = "MRTR_TEST_STORE_PASSWORD";
    let redis = RedisServer::start_with_password("a-test-only-secret");
    let (alpha, beta) = Stack::start(ResponseMode::Json, ResponseMode::Json).await?;
    let file: toml::Table = toml::from_str(&format!(
        "{FIVE_AN_HOUR}{}",
        store_table(&redis, &format!("password-env = \"{VARIABLE}\"\ntimeout = 0.5"))
    ))?;
    let keys = keyring();
    let mut gateways = Vec::new();
    for password in [Some("a-test-only-secret"), None] {
        let mut config = GatewayConfig::new(Stack::backends(&alpha, &beta));
        config.settings.principal_header = Some("x-user".parse()?);
        config.settings.health_interval = PositiveSeconds::from_secs(1);
        config.settings.rate_limit = file["rate-limit"].clone().try_into()?;
        config.settings.shared_store = Some(file["shared-store"].clone().try_into()?);
        let env = move |name: &str| (name == VARIABLE).then(|| password.map(str::to_owned)).flatten();
        let config = config.resolve_settings_in(&env).map_err(anyhow::Error::msg)?;
        gateways.push(gateway(config, keys.clone()).await?);
    }
    let stack = Stack {
        alpha,
        beta,
        gateways,
    };
    let with = send(&stack.gateways[0].url(), &whoami("alice")).await?;
    assert!(admitted(&with), "with the password: {}", with.body);
    let without = send(&stack.gateways[1].url(), &whoami("alice")).await?;
    assert_eq!(without.status, 503, "without it: {}", without.body);
    let readiness = stack.gateways[1].readiness();
    eventually(TIMEOUT, "/readyz saying the store refused", || async {
        let store = readiness.check().1["shared_store"].clone();
        store["state"] == "down" && store["reason"] == "refused"
    })
    .await;
    stack.stop().await
}
