//! The gateway as a 2026-07-28 server on its own endpoint: its own HTTP statuses and JSON-RPC
//! errors, aggregation corner cases, and what happens when one backend is down.

use mrtr_backends::ResponseMode;
use mrtr_test_support::backends::Stack;
use mrtr_test_support::mcp::{body, mcp_headers, raw};
use reqwest::Method;
use serde_json::{Value, json};

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn http_level_checks() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Json).await?;
    let url = stack.url();
    let list = body(1, "tools/list", json!({}));
    let before = stack.backend_requests();

    for method in [Method::GET, Method::DELETE] {
        let (status, headers, _) = raw(method, &url, &[], "").await?;
        assert_eq!(status, 405);
        assert_eq!(headers["allow"], "POST");
    }
    let mut evil = mcp_headers("tools/list");
    evil.push(("origin", "https://evil.example"));
    assert_eq!(raw(Method::POST, &url, &evil, &list).await?.0, 403);
    let mut local = mcp_headers("tools/list");
    local.push(("origin", "http://localhost:5173"));
    assert_eq!(raw(Method::POST, &url, &local, &list).await?.0, 200);
    let mut host = mcp_headers("tools/list");
    host.push(("host", "rebound.evil.example"));
    assert_eq!(raw(Method::POST, &url, &host, &list).await?.0, 403);

    let mut text = mcp_headers("tools/list");
    text[0] = ("content-type", "text/plain");
    assert_eq!(raw(Method::POST, &url, &text, &list).await?.0, 415);
    let mut accept = mcp_headers("tools/list");
    accept[1] = ("accept", "application/json");
    assert_eq!(raw(Method::POST, &url, &accept, &list).await?.0, 406);

    let (status, _, text) = raw(Method::POST, &url, &mcp_headers("tools/list"), "{not json").await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (400, Some(-32700))
    );
    let (status, _, text) = raw(
        Method::POST,
        &url,
        &mcp_headers("tools/list"),
        &format!("[{list}]"),
    )
    .await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (400, Some(-32600))
    );
    // Only the accepted tools/list (with a loopback Origin) reached the backends, once each.
    let after = stack.backend_requests();
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1));
    stack.stop().await
}

#[tokio::test]
async fn mirrored_header_checks() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Sse).await?;
    let url = stack.url();
    let call = body(
        7,
        "tools/call",
        json!({"name": "archive_repo", "arguments": {"repo": "a/b"}}),
    );
    let error = |text: &str| json(text)["error"].clone();

    let no_version: Vec<_> = mcp_headers("tools/call")
        .into_iter()
        .filter(|(k, _)| *k != "mcp-protocol-version")
        .collect();
    let (status, _, text) = raw(Method::POST, &url, &no_version, &call).await?;
    assert_eq!((status, error(&text)["code"].as_i64()), (400, Some(-32020)));
    assert_eq!(error(&text)["data"]["supported"], json!(["2026-07-28"]));

    let mut old = mcp_headers("tools/call");
    old[2] = ("mcp-protocol-version", "2025-11-25");
    let (status, _, text) = raw(Method::POST, &url, &old, &call).await?;
    assert_eq!((status, error(&text)["code"].as_i64()), (400, Some(-32022)));
    assert_eq!(error(&text)["data"]["requested"], "2025-11-25");

    let (status, _, text) = raw(Method::POST, &url, &mcp_headers("tools/list"), &call).await?;
    assert_eq!(
        (status, error(&text)["code"].as_i64(), json(&text)["id"].as_i64()),
        (400, Some(-32020), Some(7))
    );

    let (status, _, text) = raw(Method::POST, &url, &mcp_headers("tools/call"), &call).await?;
    assert_eq!(
        (status, error(&text)["code"].as_i64()),
        (400, Some(-32020)),
        "missing Mcp-Name"
    );

    let mut wrong = mcp_headers("tools/call");
    wrong.push(("mcp-name", "migrate_database"));
    let (status, _, text) = raw(Method::POST, &url, &wrong, &call).await?;
    assert_eq!((status, error(&text)["code"].as_i64()), (400, Some(-32020)));

    // The base64 form of the right name is accepted, and the call is routed to beta.
    let mut encoded = mcp_headers("tools/call");
    encoded.push(("mcp-name", "=?base64?YXJjaGl2ZV9yZXBv?="));
    let (status, _, text) = raw(Method::POST, &url, &encoded, &call).await?;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("input_required") && text.contains("[beta]"),
        "{text}"
    );
    stack.stop().await
}

#[tokio::test]
async fn own_json_rpc_answers_with_several_backends() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Json).await?;
    let url = stack.url();
    let post = |method: &'static str, params: Value, name: Option<&'static str>| {
        let url = url.clone();
        async move {
            let mut headers = mcp_headers(method);
            if let Some(name) = name {
                headers.push(("mcp-name", name));
            }
            raw(Method::POST, &url, &headers, &body(3, method, params)).await
        }
    };

    // A bare name offered by both backends is not exposed.
    let (status, _, text) = post("tools/call", json!({"name": "deploy"}), Some("deploy")).await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (200, Some(-32602)),
        "{text}"
    );
    assert!(text.contains("Unknown tool: deploy"), "{text}");

    let (status, _, text) = post(
        "resources/read",
        json!({"uri": "demo://gamma/audit-log"}),
        Some("demo://gamma/audit-log"),
    )
    .await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (200, Some(-32602)),
        "{text}"
    );

    let (status, _, text) = post("tools/list", json!({"cursor": "abc"}), None).await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (200, Some(-32602)),
        "{text}"
    );

    let (status, _, text) = post("logging/setLevel", json!({"level": "debug"}), None).await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (404, Some(-32601)),
        "{text}"
    );

    let mut headers = mcp_headers("notifications/cancelled");
    headers.truncate(4);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        .to_string();
    assert_eq!(raw(Method::POST, &url, &headers, &note).await?.0, 202);

    let (status, _, text) = post("server/discover", json!({}), None).await?;
    assert_eq!(status, 200);
    let result = &json(&text)["result"];
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(
        result["capabilities"],
        json!({"prompts": {}, "resources": {}, "tools": {}})
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mrtr-gateway"
    );
    assert!(result["ttlMs"].is_u64() && result["cacheScope"].is_string());

    let (_, _, text) = post("resources/templates/list", json!({}), None).await?;
    assert!(json(&text)["result"]["resourceTemplates"].is_array(), "{text}");
    stack.stop().await
}

#[tokio::test]
async fn a_backend_down_keeps_the_other_names_stable() -> anyhow::Result<()> {
    let stack = Stack::new(ResponseMode::Json, ResponseMode::Json).await?;
    let url = stack.url();
    let names = |text: &str| -> Vec<String> {
        json(text)["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let list = body(1, "tools/list", json!({}));
    let (_, _, text) = raw(Method::POST, &url, &mcp_headers("tools/list"), &list).await?;
    assert!(names(&text).contains(&"alpha__deploy".to_owned()));

    let Stack {
        alpha,
        beta,
        gateways,
    } = stack;
    beta.shutdown().await?;
    let (status, _, text) = raw(Method::POST, &url, &mcp_headers("tools/list"), &list).await?;
    assert_eq!(status, 200, "{text}");
    // beta's tools are gone from the list, but alpha's names did not lose their prefix.
    assert_eq!(
        names(&text),
        [
            "alpha__whoami",
            "alpha__delete_branch",
            "alpha__deploy",
            "provision_cluster"
        ]
    );

    let mut headers = mcp_headers("tools/call");
    headers.push(("mcp-name", "archive_repo"));
    let call = body(
        2,
        "tools/call",
        json!({"name": "archive_repo", "arguments": {"repo": "a/b"}}),
    );
    let (status, _, text) = raw(Method::POST, &url, &headers, &call).await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (502, Some(-32603)),
        "{text}"
    );
    assert!(
        json(&text)["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("\"beta\""),
        "{text}"
    );

    alpha.shutdown().await?;
    let (status, _, text) = raw(Method::POST, &url, &mcp_headers("tools/list"), &list).await?;
    assert_eq!(
        (status, json(&text)["error"]["code"].as_i64()),
        (502, Some(-32603)),
        "{text}"
    );
    for gateway in gateways {
        gateway.shutdown().await?;
    }
    Ok(())
}
