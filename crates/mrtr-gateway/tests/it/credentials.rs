//! Backend credentials: static headers from the config file, an environment variable and a file
//! reach the backend; the client's own `Authorization` and `Cookie` do not, and no value shows
//! in `Debug` output or `--help`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;

use mrtr_gateway::cli::{self, Command};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::mcp::mcp_post;
use mrtr_test_support::tls::TempDir;
use mrtr_test_support::wait::{TIMEOUT, eventually};
use serde_json::json;
use tower_mrtr::Keyring;

#[tokio::test]
async fn the_backend_gets_its_own_credentials_and_never_the_clients() {
    let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let recorder = seen.clone();
    let app = Router::new().route(
        "/mcp",
        post(move |headers: HeaderMap, body: bytes::Bytes| {
            let recorder = recorder.clone();
            async move {
                recorder.lock().unwrap().push(headers);
                let id = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["id"].clone();
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [], "isError": false}});
                ([("content-type", "application/json")], answer.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = TempDir::new("credentials");
    let token = dir.path("token");
    std::fs::write(&token, "backend-token-from-file\n").unwrap();
    let text = format!(
        r#"
[[backend]]
name = "crm"
url = "{url}"
headers.authorization = {{ file = "{}", prefix = "Bearer " }}
headers.x-api-key = {{ env = "CRM_API_KEY" }}
headers.x-tenant = {{ value = "acme" }}
"#,
        token.display()
    );
    let file = dir.path("gateway.toml");
    std::fs::write(&file, text).unwrap();
    let keys = Keyring::generate("k1").unwrap().to_config_string();
    // The binary's own reading of the file: its backends, with their headers resolved.
    let env = |name: &str| match name {
        "CRM_API_KEY" => Some("api-key-from-env".to_owned()),
        "MRTR_KEYS" => Some(keys.to_string()),
        _ => None,
    };
    let args = [
        "mrtr-gateway",
        "--config",
        file.to_str().unwrap(),
        "--health-interval",
        "60",
    ];
    let Ok(Command::Run(run)) = cli::parse(args, env) else {
        panic!("the config file parses")
    };
    let config = run.config;
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("backend-token") && !debug.contains("api-key-from-env"),
        "{debug}"
    );
    let gateway = gateway(config, keyring()).await.unwrap();

    let answer = mcp_post(
        &reqwest::Client::new(),
        &gateway.url(),
        1,
        "tools/call",
        json!({"name": "lookup", "arguments": {}}),
    )
    .header("authorization", "Bearer client-token")
    .header("cookie", "session=client-cookie")
    .header("x-api-key", "client-api-key")
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    eventually(TIMEOUT, "the health probe reached the backend", || async {
        seen.lock()
            .unwrap()
            .iter()
            .any(|h| h.get("mcp-method").is_some_and(|m| m == "server/discover"))
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let call = seen
        .iter()
        .find(|h| h.get("mcp-method").is_some_and(|m| m == "tools/call"))
        .expect("the call reached the backend");
    assert_eq!(call["authorization"], "Bearer backend-token-from-file");
    assert_eq!(call.get_all("authorization").iter().count(), 1);
    assert_eq!(
        call["x-api-key"], "api-key-from-env",
        "the backend's value replaces the client's"
    );
    assert_eq!(call.get_all("x-api-key").iter().count(), 1);
    assert_eq!(call["x-tenant"], "acme");
    assert!(call.get("cookie").is_none());
    let everything = format!("{seen:?}");
    assert!(
        !everything.contains("client-token") && !everything.contains("client-cookie"),
        "{everything}"
    );
    // The health probe carries the credentials too (a backend behind auth still answers it).
    let probe = seen
        .iter()
        .find(|h| h.get("mcp-method").is_some_and(|m| m == "server/discover"))
        .expect("the health probe reached the backend");
    assert_eq!(probe["authorization"], "Bearer backend-token-from-file");
    gateway.shutdown().await.unwrap();
}
