//! The behaviour table of `docs/design` for `application/json` answers, one test (or more) per row.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::Value;
use tower::{Layer, ServiceExt};
use tower_mrtr::{Keyring, MrtrLayer, RequestBody, Route};

use crate::common::*;

fn keyring() -> Arc<Keyring> {
    Arc::new(Keyring::generate("k1").unwrap())
}

/// A backend that asks for input `rounds` times, with states `s1`, `s2`…, then completes.
fn rounds_backend(
    backend: &Backend,
    route: &'static str,
    rounds: usize,
) -> impl tower::Service<
    Request<RequestBody<Full<Bytes>>>,
    Response = http::Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    backend.service(Some(route), move |req: &Value| {
        let round = match req["params"]["requestState"].as_str() {
            None => 0,
            Some(s) => s.trim_start_matches('s').parse::<usize>().unwrap(),
        };
        if round < rounds {
            input_required(req, Some(&format!("\"s{}\"", round + 1)))
        } else {
            complete(req, route)
        }
    })
}

#[tokio::test]
async fn two_round_flow_seals_restores_and_pins() {
    let backend = Backend::new();
    let svc = MrtrLayer::with_shared_keyring(keyring()).layer(rounds_backend(&backend, "alpha", 1));

    let first = send(svc.clone(), post(&tool_call(1, "delete_branch", None))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.outcome, Some(tower_mrtr::Outcome::Sealed));
    let envelope = first.envelope();
    assert!(envelope.starts_with("mrtr4."), "{envelope}");
    assert!(
        !first.text().contains("\"s1\""),
        "backend state leaked: {}",
        first.text()
    );
    // inputRequests and everything else pass through.
    assert_eq!(
        first.json()["result"]["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    assert!(backend.last().pinned.is_none());

    let second = send(svc, post(&tool_call(2, "delete_branch", Some(&envelope)))).await;
    assert_eq!(second.json()["result"]["content"][0]["text"], "done by alpha");
    assert_eq!(second.outcome, None, "relayed as the backend answered");
    let seen = backend.last();
    assert_eq!(seen.pinned, Some(Route::new("alpha")));
    let sent: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(sent["params"]["requestState"], "s1");
    assert_eq!(sent["params"]["inputResponses"]["confirm"]["action"], "accept");
    assert_eq!(
        seen.headers["content-length"],
        seen.body.len().to_string().as_str()
    );
    let head = seen.head.unwrap();
    assert_eq!(
        (head.method(), head.target(), head.id_json(), head.is_retry()),
        ("tools/call", Some("delete_branch"), Some("2"), true)
    );
}

#[tokio::test]
async fn three_round_flow_over_prompts_and_resources() {
    for (method, key) in [("prompts/get", "name"), ("resources/read", "uri")] {
        let backend = Backend::new();
        let svc = MrtrLayer::with_shared_keyring(keyring()).layer(rounds_backend(&backend, "beta", 2));
        let mut state: Option<String> = None;
        for round in 0..3 {
            let mut params = serde_json::json!({ key: "file:///notes.txt" });
            if let Some(s) = &state {
                params["requestState"] = Value::String(s.clone());
            }
            let body =
                serde_json::json!({"jsonrpc":"2.0","id": round + 10,"method": method,"params": params})
                    .to_string();
            let answer = send(svc.clone(), post(&body)).await;
            let sent: Value = serde_json::from_slice(&backend.last().body).unwrap();
            if round == 0 {
                assert!(sent["params"].get("requestState").is_none());
            } else {
                assert_eq!(
                    sent["params"]["requestState"],
                    format!("s{round}"),
                    "{method} round {round}"
                );
                assert_eq!(backend.last().pinned, Some(Route::new("beta")));
            }
            if round < 2 {
                state = Some(answer.envelope());
            } else {
                assert_eq!(answer.json()["result"]["resultType"], "complete", "{method}");
            }
        }
    }
}

#[tokio::test]
async fn backend_state_is_restored_byte_for_byte_absent_empty_or_escaped() {
    // The raw JSON of the backend's requestState, and what the retry must carry.
    let cases: [(Option<&str>, Option<&str>); 4] = [
        (None, None),
        (Some(r#""""#), Some(r#""requestState":"""#)),
        (
            Some(r#""caf\u00e9 \"q\" \\ \/ é""#),
            Some(r#""requestState":"caf\u00e9 \"q\" \\ \/ é""#),
        ),
        (
            Some(r#""eyJ4IjoxfQ==""#),
            Some(r#""requestState":"eyJ4IjoxfQ==""#),
        ),
    ];
    for (state_json, expected) in cases {
        let backend = Backend::new();
        let inner = backend.service(Some("alpha"), move |req: &Value| {
            if req["params"].get("inputResponses").is_some() {
                complete(req, "alpha")
            } else {
                input_required(req, state_json)
            }
        });
        let svc = MrtrLayer::with_shared_keyring(keyring()).layer(inner);
        let first = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
        let envelope = send(svc.clone(), post(first)).await.envelope();
        let retry = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"t","requestState":"{envelope}","inputResponses":{{}}}}}}"#
        );
        send(svc, post(&retry)).await;
        let seen = String::from_utf8(backend.last().body.to_vec()).unwrap();
        match expected {
            Some(member) => assert!(seen.contains(member), "{state_json:?}: backend saw {seen}"),
            None => {
                assert!(
                    !seen.contains("requestState"),
                    "absent state must be removed: {seen}"
                );
                assert_eq!(
                    seen,
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","inputResponses":{}}}"#
                );
            }
        }
    }
}

#[tokio::test]
async fn input_required_without_state_still_gets_an_envelope() {
    let backend = Backend::new();
    let inner = backend.service(Some("alpha"), |req: &Value| input_required(req, None));
    let svc = MrtrLayer::with_shared_keyring(keyring()).layer(inner);
    let answer = send(svc, post(&tool_call(1, "t", None))).await;
    assert!(answer.envelope().starts_with("mrtr4."));
    assert_eq!(answer.json()["result"]["resultType"], "input_required");
}

#[tokio::test]
async fn only_the_request_state_bytes_change_in_the_answer() {
    let raw = r#"{"id" : 7 ,"jsonrpc":"2.0", "result" : {"inputRequests":{"k":{"method":"roots/list"}},"requestState" : "abc","resultType":"input_required","big":1e400,"n":12345678901234567890123}}"#;
    let svc = MrtrLayer::with_shared_keyring(keyring())
        .layer(Backend::new().service(Some("alpha"), move |_| raw.to_owned()));
    let answer = send(svc, post(&tool_call(7, "t", None))).await;
    let envelope = answer
        .text()
        .split('"')
        .find(|s| s.starts_with("mrtr4."))
        .unwrap()
        .to_owned();
    assert_eq!(answer.text(), raw.replace(r#""abc""#, &format!("\"{envelope}\"")));
    assert_eq!(
        answer.headers["content-length"],
        answer.body.len().to_string().as_str()
    );
    assert_eq!(answer.headers["content-type"], "application/json");
}

/// A retry whose envelope is bad in any way: one uniform `-32602`, inner service never called.
async fn assert_rejected(layer: &MrtrLayer, body: String, why: &str) {
    let answer = send(layer.layer(must_not_be_called()), post(&body)).await;
    assert_eq!(answer.status, StatusCode::OK, "{why}");
    let v = answer.json();
    assert_eq!(v["error"]["code"], -32602, "{why}: {v}");
    assert_eq!(v["error"]["message"], "Invalid or expired requestState", "{why}");
    assert_eq!(
        v["id"],
        serde_json::from_str::<Value>(&body).unwrap()["id"],
        "{why}"
    );
}

#[tokio::test]
async fn bad_envelopes_are_rejected_without_calling_the_backend() {
    let clock = ManualClock::new();
    let ring = keyring();
    let layer = MrtrLayer::with_shared_keyring(ring.clone())
        .clock(clock.clone())
        .ttl(Duration::from_secs(60))
        .bind_principal(|parts| {
            parts
                .headers
                .get("x-user")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
    let backend = Backend::new();
    let minting =
        layer.layer(backend.service(Some("alpha"), |req: &Value| input_required(req, Some(r#""s1""#))));
    let mut first = post(&tool_call(1, "delete_branch", None));
    first.headers_mut().insert("x-user", "alice".parse().unwrap());
    let envelope = send(minting, first).await.envelope();

    let with_user = |body: String, user: Option<&str>| {
        let mut req = post(&body);
        if let Some(user) = user {
            req.headers_mut().insert("x-user", user.parse().unwrap());
        }
        req
    };
    // The genuine retry works (control).
    let ok = send(
        layer.layer(backend.service(Some("alpha"), |r: &Value| complete(r, "alpha"))),
        with_user(tool_call(2, "delete_branch", Some(&envelope)), Some("alice")),
    )
    .await;
    assert_eq!(ok.json()["result"]["resultType"], "complete");

    // Tampered at every character position.
    for i in "mrtr4.".len()..envelope.len() {
        let mut chars: Vec<char> = envelope.chars().collect();
        chars[i] = if chars[i] == 'x' { 'y' } else { 'x' };
        let tampered: String = chars.into_iter().collect();
        let answer = send(
            layer.layer(must_not_be_called()),
            with_user(tool_call(3, "delete_branch", Some(&tampered)), Some("alice")),
        )
        .await;
        assert_eq!(answer.error_code(), Some(-32602), "position {i}");
    }
    let cases = [
        (
            tool_call(4, "delete_branch", Some(&envelope[..envelope.len() - 4])),
            "truncated",
        ),
        (
            tool_call(
                5,
                "delete_branch",
                Some(&envelope.replacen("mrtr4.", "mrtr1.", 1)),
            ),
            "wrong prefix",
        ),
        (tool_call(6, "delete_branch", Some("s1")), "raw backend state"),
        (tool_call(7, "delete_branch", Some("")), "empty"),
        (tool_call(8, "drop_database", Some(&envelope)), "other tool name"),
        (
            tool_call(9, "delete_branch", Some(&"A".repeat(70_000))),
            "over the envelope limit",
        ),
    ];
    for (body, why) in cases {
        let mut req_body: Value = serde_json::from_str(&body).unwrap();
        req_body["params"]["x"] = Value::Null; // keep ids distinct from the control
        let answer = send(
            layer.layer(must_not_be_called()),
            with_user(req_body.to_string(), Some("alice")),
        )
        .await;
        assert_eq!(answer.error_code(), Some(-32602), "{why}: {}", answer.text());
    }
    // Other method: the same envelope on prompts/get with the same name.
    let other_method = serde_json::json!({"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"delete_branch","requestState": envelope}});
    let answer = send(
        layer.layer(must_not_be_called()),
        with_user(other_method.to_string(), Some("alice")),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32602), "other method");
    // Another principal: the uniform refusal. No principal at all: refused before any envelope
    // is opened (see `requests_without_a_principal_never_get_or_open_an_envelope`).
    for (user, status, code) in [
        (Some("mallory"), StatusCode::OK, -32602),
        (None, StatusCode::FORBIDDEN, -32600),
    ] {
        let answer = send(
            layer.layer(must_not_be_called()),
            with_user(tool_call(11, "delete_branch", Some(&envelope)), user),
        )
        .await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (status, Some(code)),
            "principal {user:?}"
        );
    }
    // Not a string.
    for value in ["null", "42", "{}", "[\"mrtr4.x\"]"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{{"name":"delete_branch","requestState":{value}}}}}"#
        );
        assert_rejected(
            &layer.clone().require_principal(false).bind_principal(|_| None),
            body,
            value,
        )
        .await;
    }
    // Unknown key id: a layer whose ring does not hold k1.
    let stranger = MrtrLayer::new(Keyring::generate("k9").unwrap()).clock(clock.clone());
    assert_rejected(
        &stranger,
        tool_call(13, "delete_branch", Some(&envelope)),
        "unknown key id",
    )
    .await;
    // Expired.
    clock.advance(Duration::from_secs(61));
    let answer = send(
        layer.layer(must_not_be_called()),
        with_user(tool_call(14, "delete_branch", Some(&envelope)), Some("alice")),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32602), "expired");
}

#[tokio::test]
async fn retired_key_is_rejected_and_rotation_keeps_rounds_in_flight() {
    let old = "old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
    let new = "new:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";
    let replica = |keys: String| MrtrLayer::new(keys.parse::<Keyring>().unwrap());
    let backend = Backend::new();
    let mint = |layer: &MrtrLayer| {
        layer.layer(backend.service(Some("alpha"), |r: &Value| input_required(r, Some(r#""s1""#))))
    };
    let finish =
        |layer: &MrtrLayer| layer.layer(backend.service(Some("alpha"), |r: &Value| complete(r, "alpha")));

    // Rotation in three steps; during each rollout, replicas at adjacent stages run side by side.
    // Whatever one of them seals (round 1), the other opens (round 2), in both directions.
    let stages = [
        old.to_owned(),
        format!("{old},{new}"),
        format!("{new},{old}"),
        new.to_owned(),
    ];
    for pair in stages.windows(2) {
        for (a, b) in [(&pair[0], &pair[1]), (&pair[1], &pair[0])] {
            let (first, second) = (replica(a.clone()), replica(b.clone()));
            let envelope = send(mint(&first), post(&tool_call(1, "t", None)))
                .await
                .envelope();
            let answer = send(finish(&second), post(&tool_call(2, "t", Some(&envelope)))).await;
            assert_eq!(
                answer.json()["result"]["resultType"],
                "complete",
                "{a} -> {b}: {}",
                answer.text()
            );
        }
    }
    // After the old key is dropped, an envelope sealed with it (a round left far too long) fails.
    let envelope = send(mint(&replica(old.to_owned())), post(&tool_call(1, "t", None)))
        .await
        .envelope();
    let answer = send(
        replica(new.to_owned()).layer(must_not_be_called()),
        post(&tool_call(2, "t", Some(&envelope))),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32602));
}

#[tokio::test]
async fn replicas_sharing_a_keyring_serve_each_others_rounds() {
    let ring = keyring();
    let (a, b) = (
        MrtrLayer::with_shared_keyring(ring.clone()),
        MrtrLayer::with_shared_keyring(ring),
    );
    let backend = Backend::new();
    let envelope = send(
        a.layer(rounds_backend(&backend, "gamma", 1)),
        post(&tool_call(1, "t", None)),
    )
    .await
    .envelope();
    let answer = send(
        b.layer(rounds_backend(&backend, "gamma", 1)),
        post(&tool_call(2, "t", Some(&envelope))),
    )
    .await;
    assert_eq!(answer.json()["result"]["content"][0]["text"], "done by gamma");
}

#[tokio::test]
async fn requests_that_need_no_change_pass_byte_for_byte() {
    let bodies = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{}}}"#,
        r#"{ "jsonrpc" : "2.0", "id" : "x", "method" : "tools/call", "params" : { "name" : "t", "arguments" : {"n": 1.50} } }"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"Cursor":"any case for names the relay does not read"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"action":"accept"}}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}]"#,
    ];
    for body in bodies {
        let backend = Backend::new();
        let svc = MrtrLayer::with_shared_keyring(keyring()).layer(backend.service(Some("alpha"), |_| {
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#.into()
        }));
        let mut req = post(body);
        req.headers_mut().insert("x-custom", "kept".parse().unwrap());
        req.headers_mut()
            .insert("transfer-encoding", "chunked".parse().unwrap());
        let expected_headers = req.headers().clone();
        send(svc, req).await;
        let seen = backend.last();
        assert_eq!(seen.body, body.as_bytes(), "body changed: {body}");
        assert_eq!(seen.headers, expected_headers, "headers changed: {body}");
        assert!(seen.pinned.is_none());
    }
}

/// A body the layer cannot parse is refused, never forwarded: real backends parse bodies that
/// `serde_json` refuses (Python's `json.loads` takes a BOM and UTF-16, Node takes invalid UTF-8,
/// Go's decoder and Jackson stop after the first value), so a forged raw `requestState` in such a
/// body would reach them unverified.
#[tokio::test]
async fn bodies_the_layer_cannot_parse_are_refused_never_forwarded() {
    let forged = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"x":"y"},"requestState":"forged-raw-state"}}"#;
    let utf16le: Vec<u8> = forged.encode_utf16().flat_map(u16::to_le_bytes).collect();
    // One 0xFF byte inside the string "y" of the arguments.
    let y = forged.find(r#""y""#).unwrap() + 2;
    let invalid_utf8 = [&forged.as_bytes()[..y], b"\xFF", &forged.as_bytes()[y..]].concat();
    let batch_invalid_utf8 = [b"[".as_slice(), &invalid_utf8, b"]"].concat();
    let cases: Vec<(&str, Vec<u8>, i64)> = vec![
        (
            "UTF-8 BOM in front",
            [b"\xEF\xBB\xBF".as_slice(), forged.as_bytes()].concat(),
            -32700,
        ),
        ("a 0xFF byte inside arguments", invalid_utf8, -32700),
        (
            "a 0xFF byte in a member the layer skips",
            [
                &forged.as_bytes()[..1],
                b"\"x\":\"\xFF\",",
                &forged.as_bytes()[1..],
            ]
            .concat(),
            -32700,
        ),
        (
            "trailing bytes after the value",
            format!("{forged} x").into_bytes(),
            -32700,
        ),
        ("UTF-16LE", utf16le, -32700),
        ("a batch holding invalid UTF-8", batch_invalid_utf8, -32700),
        ("not JSON at all", b"not json at all {".to_vec(), -32700),
        ("empty", Vec::new(), -32700),
        ("a JSON string", br#""a JSON string""#.to_vec(), -32600),
        ("a JSON number", b"42".to_vec(), -32600),
    ];
    for (why, body, code) in cases {
        let req = Request::post("/mcp")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let answer = send(
            MrtrLayer::with_shared_keyring(keyring()).layer(must_not_be_called()),
            req,
        )
        .await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{why}: {}",
            answer.text()
        );
    }
}

/// Go's `encoding/json` (v1) matches a member name to a field case-insensitively, so a backend
/// written in Go would read `RequestState` as `requestState`: such names are refused.
#[tokio::test]
async fn case_variant_member_names_are_refused() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    for (name, method) in [
        ("RequestState", "tools/call"),
        ("REQUESTSTATE", "tools/call"),
        ("requeſtState", "prompts/get"),
        ("REQUESTSTATE", "tools/list"),
        ("taskID", "tasks/get"),
        ("Arguments", "tools/call"),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"name":"t","{name}":"forged-raw-state"}}}}"#
        );
        let answer = send(layer.layer(must_not_be_called()), post(&body)).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(-32600)),
            "{name} on {method}: {}",
            answer.text()
        );
        assert!(answer.json()["error"]["message"].as_str().unwrap().contains(name));
    }
    let top = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","METHOD":"tools/call","params":{}}"#;
    let answer = send(layer.layer(must_not_be_called()), post(top)).await;
    assert_eq!(answer.error_code(), Some(-32600));
}

/// `requestState` belongs to retries of the three methods that can answer `input_required`; on
/// any other request it would reach the backend unverified.
#[tokio::test]
async fn request_state_on_other_methods_is_refused() {
    for body in [
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"requestState":"forged"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestState":"forged"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"completion/complete","params":{"requestState":null}}"#,
        // A member of the wrong type leaves the params of a method that takes no state unread
        // (they are the backend's business), but not a state beside it: the long fuzz run found
        // a lone surrogate in `uri` letting one through.
        r#"{"jsonrpc":"2.0","id":5,"method":"x/resume","params":{"uri":"\ud800","requestState":"forged"}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"x/resume","params":{"name":7,"requestState":"forged"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"x/resume","params":{"name":7,"RequestState":"forged"}}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"x/resume","params":{"requestState":"forged","name":[]}}"#,
    ] {
        let answer = send(
            MrtrLayer::with_shared_keyring(keyring()).layer(must_not_be_called()),
            post(body),
        )
        .await;
        assert_eq!(answer.error_code(), Some(-32602), "{body}");
    }
    // Without a state, such params still pass, untouched.
    let body = r#"{"jsonrpc":"2.0","id":9,"method":"x/resume","params":{"name":7,"uri":"\ud800"}}"#;
    let backend = Backend::new();
    let service = backend.service(Some("alpha"), |_| {
        r#"{"jsonrpc":"2.0","id":9,"result":{}}"#.to_owned()
    });
    let answer = send(
        MrtrLayer::with_shared_keyring(keyring()).layer(service),
        post(body),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(backend.last().body, body.as_bytes());
}

#[tokio::test]
async fn a_retry_with_other_arguments_is_refused_before_the_backend() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    let call = |id: u64, arguments: &str, state: Option<&str>| {
        let state = state
            .map(|s| format!(r#","requestState":"{s}","inputResponses":{{"confirm":{{"action":"accept"}}}}"#))
            .unwrap_or_default();
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"delete_branch","arguments":{arguments}{state}}}}}"#
        )
    };
    let minted = r#"{"repo":"acme/api","branch":"old","force":false,"n":10}"#;
    let backend = Backend::new();
    let envelope = send(
        layer.layer(backend.service(Some("git"), |r: &Value| input_required(r, Some(r#""s1""#)))),
        post(&call(1, minted, None)),
    )
    .await
    .envelope();
    for other in [
        r#"{"repo":"acme/api","branch":"main","force":false,"n":10}"#,
        r#"{"repo":"acme/api","branch":"old","force":true,"n":10}"#,
        r#"{"repo":"acme/api","branch":"old","force":false,"n":10,"extra":1}"#,
        r#"{"repo":"acme/api","branch":"old","force":false}"#,
        "{}",
    ] {
        let answer = send(
            layer.layer(must_not_be_called()),
            post(&call(2, other, Some(&envelope))),
        )
        .await;
        assert_eq!(answer.error_code(), Some(-32602), "{other}");
        assert_eq!(
            answer.json()["error"]["message"],
            "Invalid or expired requestState"
        );
    }
    // The same arguments, reordered, re-spaced, re-escaped and with 10 written as 1e1: accepted.
    let same = "{ \"n\": 1e1, \"force\" : false,\n\t\"br\\u0061nch\": \"old\", \"repo\": \"acme\\/api\" }";
    let answer = send(
        layer.layer(backend.service(Some("git"), |r: &Value| complete(r, "git"))),
        post(&call(3, same, Some(&envelope))),
    )
    .await;
    assert_eq!(
        answer.json()["result"]["resultType"],
        "complete",
        "{}",
        answer.text()
    );
    // Arguments with no single meaning cannot be bound: the client hears why.
    let ambiguous = r#"{"branch":"old","branch":"main"}"#;
    let answer = send(
        layer.layer(must_not_be_called()),
        post(&call(4, ambiguous, Some(&envelope))),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32602));
    assert!(answer.text().contains("duplicate member"), "{}", answer.text());
}

#[tokio::test]
async fn argument_binding_can_be_turned_off() {
    let layer = MrtrLayer::with_shared_keyring(keyring()).bind_arguments(false);
    let backend = Backend::new();
    let first =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"q":"a"}}}"#;
    let envelope = send(
        layer.layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""s1""#)))),
        post(first),
    )
    .await
    .envelope();
    let retry = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"t","arguments":{{"q":"refined"}},"requestState":"{envelope}"}}}}"#
    );
    let answer = send(
        layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
        post(&retry),
    )
    .await;
    assert_eq!(answer.json()["result"]["resultType"], "complete");
    // The setting is part of the binding: a replica binding arguments does not open it.
    let binding = MrtrLayer::with_shared_keyring(keyring());
    let answer = send(binding.layer(must_not_be_called()), post(&retry)).await;
    assert_eq!(answer.error_code(), Some(-32602));
}

#[tokio::test]
async fn answers_that_need_no_change_pass_byte_for_byte() {
    let answers = [
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[{"type":"text","text":"input_required is just a word here"}]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"input_required"}}"#,
        "upstream exploded",
    ];
    for raw in answers {
        let svc = MrtrLayer::with_shared_keyring(keyring())
            .layer(Backend::new().service(None, move |_| raw.to_owned()));
        let answer = send(svc, post(&tool_call(1, "t", None))).await;
        assert_eq!(answer.text(), raw);
    }
    // Any method, any content: the answer to a non-MRTR method is never read.
    let svc = MrtrLayer::with_shared_keyring(keyring())
        .layer(Backend::new().service(None, |r: &Value| input_required(r, Some(r#""raw""#))));
    let answer = send(svc, post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)).await;
    assert!(
        answer.text().contains(r#""requestState":"raw""#),
        "tools/list answers are not MRTR-capable and pass through"
    );
}

#[tokio::test]
async fn get_and_delete_pass_through_unread() {
    for method in [http::Method::GET, http::Method::DELETE] {
        let backend = Backend::new();
        let svc = MrtrLayer::with_shared_keyring(keyring()).layer(backend.service(None, |_| String::new()));
        let req = Request::builder()
            .method(method.clone())
            .uri("/mcp")
            .body(Full::new(Bytes::new()))
            .unwrap();
        send(svc, req).await;
        assert!(backend.last().head.is_none(), "{method}: not parsed");
    }
}

#[tokio::test]
async fn oversized_requests_get_413_without_reaching_the_backend() {
    let layer = MrtrLayer::with_shared_keyring(keyring()).max_request_body(1024);
    let big = tool_call(1, &"x".repeat(2000), None);
    // Declared by Content-Length.
    let answer = send(layer.layer(must_not_be_called()), post(&big)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.error_code(), Some(-32600));
    assert_eq!(answer.headers["content-type"], "application/json");
    // Streamed without a length, in small chunks.
    let chunks: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> = big
        .as_bytes()
        .chunks(100)
        .map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let req = Request::post("/mcp")
        .body(StreamBody::new(futures_util::stream::iter(chunks)))
        .unwrap();
    let inner = tower::service_fn(|_req: Request<RequestBody<_>>| async {
        panic!("inner service should not be called");
        #[allow(unreachable_code)]
        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::new())))
    });
    let response = layer.layer(inner).oneshot(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Exactly at the limit is fine.
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","pad":"{}"}}"#,
        "y".repeat(1024 - 55)
    );
    assert_eq!(body.len(), 1024);
    let backend = Backend::new();
    send(layer.layer(backend.service(None, |_| String::new())), post(&body)).await;
    assert_eq!(backend.last().body.len(), 1024);
}

#[tokio::test]
async fn compressed_requests_are_refused_not_forwarded_unread() {
    let mut req = post(&tool_call(1, "t", Some("mrtr4.hidden-in-gzip")));
    req.headers_mut()
        .insert("content-encoding", "gzip".parse().unwrap());
    let answer = send(
        MrtrLayer::with_shared_keyring(keyring()).layer(must_not_be_called()),
        req,
    )
    .await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, Some(-32600))
    );
    // Identity is no encoding at all.
    let mut req = post(&tool_call(2, "t", None));
    req.headers_mut()
        .insert("content-encoding", "identity".parse().unwrap());
    let backend = Backend::new();
    send(
        MrtrLayer::with_shared_keyring(keyring())
            .layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
        req,
    )
    .await;
    assert_eq!(backend.seen().len(), 1);
}

#[tokio::test]
async fn batches_and_ambiguous_bodies() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    // A batch carrying a requestState cannot be opened element by element: refused.
    let batch = format!("[{}]", tool_call(1, "t", Some("mrtr4.abc")));
    let answer = send(layer.layer(must_not_be_called()), post(&batch)).await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (StatusCode::BAD_REQUEST, Some(-32600))
    );
    // Duplicate members: the backend might read the other one.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"t"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"params":{"name":"t","requestState":"raw"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
    ] {
        let answer = send(layer.layer(must_not_be_called()), post(body)).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(-32600)),
            "{body}"
        );
    }
    // Ambiguous params: refused as an invalid request.
    let dup = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","requestState":"a","requestState":"b"}}"#;
    let answer = send(layer.layer(must_not_be_called()), post(dup)).await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (StatusCode::BAD_REQUEST, Some(-32600))
    );
    // Params of the wrong shape on a relayed method.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["t","mrtr4.x"]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#,
    ] {
        let answer = send(layer.layer(must_not_be_called()), post(body)).await;
        assert_eq!(answer.error_code(), Some(-32602), "{body}");
    }
    // A batch answer holding an input_required result fails closed for that element only.
    let backend = Backend::new();
    let inner = backend.service(Some("alpha"), |_| {
        r#"[{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}},{"jsonrpc":"2.0","id":2,"result":{"resultType":"input_required","requestState":"raw"}}]"#.to_owned()
    });
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/list"}},{}]"#,
        tool_call(2, "t", None)
    );
    let answer = send(layer.layer(inner), post(&batch)).await;
    assert!(!answer.text().contains("raw"), "{}", answer.text());
    let v = answer.json();
    assert_eq!(v[0]["result"]["resultType"], "complete");
    assert_eq!(
        (v[1]["id"].as_i64(), v[1]["error"]["code"].as_i64()),
        (Some(2), Some(-32603))
    );
}

#[tokio::test]
async fn mirrored_headers_must_match_a_rewritten_request() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    let envelope = send(
        layer.layer(Backend::new().service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#)))),
        post(&tool_call(1, "t", None)),
    )
    .await
    .envelope();
    for (header, value) in [("mcp-name", "other"), ("mcp-method", "prompts/get")] {
        let mut req = post(&tool_call(2, "t", Some(&envelope)));
        req.headers_mut().insert(header, value.parse().unwrap());
        let answer = send(layer.layer(must_not_be_called()), req).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(-32020)),
            "{header}"
        );
        assert_eq!(answer.json()["id"], 2);
    }
    // The base64 sentinel form is decoded before comparing: "dA==" is "t", the body's name, so
    // the retry goes through; "dQ==" is "u" and is refused.
    for (value, ok) in [("=?base64?dA==?=", true), ("=?base64?dQ==?=", false)] {
        let mut req = post(&tool_call(3, "t", Some(&envelope)));
        req.headers_mut().insert("mcp-name", value.parse().unwrap());
        let backend = Backend::new();
        let answer = send(
            layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
            req,
        )
        .await;
        if ok {
            assert_eq!(answer.json()["result"]["resultType"], "complete", "{value}");
            assert_eq!(backend.seen().len(), 1);
        } else {
            assert_eq!(
                (answer.status, answer.error_code()),
                (StatusCode::BAD_REQUEST, Some(-32020)),
                "{value}"
            );
            assert!(backend.seen().is_empty());
        }
    }
}

#[tokio::test]
async fn routes_default_missing_and_mismatched() {
    let ring = keyring();
    // No Route reported, no default: fail closed, never the raw state.
    let svc = MrtrLayer::with_shared_keyring(ring.clone())
        .layer(Backend::new().service(None, |r: &Value| input_required(r, Some(r#""secret""#))));
    let answer = send(svc, post(&tool_call(1, "t", None))).await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (StatusCode::OK, Some(-32603))
    );
    assert_eq!(answer.json()["id"], 1);
    assert!(!answer.text().contains("secret"));
    // The default route is used when none is reported, and pinned on the retry.
    let layer = MrtrLayer::with_shared_keyring(ring.clone()).default_route("only");
    let backend = Backend::new();
    let envelope = send(
        layer.layer(backend.service(None, |r: &Value| input_required(r, Some(r#""s""#)))),
        post(&tool_call(1, "t", None)),
    )
    .await
    .envelope();
    send(
        layer.layer(backend.service(None, |r: &Value| complete(r, "only"))),
        post(&tool_call(2, "t", Some(&envelope))),
    )
    .await;
    assert_eq!(backend.last().pinned, Some(Route::new("only")));
    // A retry answered by another backend than the pinned one is a proxy bug: fail closed.
    let layer = MrtrLayer::with_shared_keyring(ring);
    let envelope = send(
        layer.layer(Backend::new().service(Some("alpha"), |r: &Value| input_required(r, Some(r#""s""#)))),
        post(&tool_call(1, "t", None)),
    )
    .await
    .envelope();
    let wrong = layer.layer(Backend::new().service(Some("beta"), |r: &Value| {
        input_required(r, Some(r#""beta-secret""#))
    }));
    let answer = send(wrong, post(&tool_call(2, "t", Some(&envelope)))).await;
    assert_eq!(answer.error_code(), Some(-32603));
    assert!(!answer.text().contains("beta-secret"));
}

#[tokio::test]
async fn unreadable_answers_fail_closed() {
    let ring = keyring();
    // Over the response limit.
    let layer = MrtrLayer::with_shared_keyring(ring.clone()).max_response_body(256);
    let svc = layer.layer(Backend::new().service(Some("a"), |r: &Value| {
        input_required(r, Some(&format!("\"{}\"", "z".repeat(400))))
    }));
    let answer = send(svc, post(&tool_call(1, "t", None))).await;
    assert_eq!(answer.error_code(), Some(-32603));
    // Compressed.
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let mut r = http::Response::new(Full::new(Bytes::from_static(b"\x1f\x8b...")));
        r.headers_mut()
            .insert("content-encoding", "gzip".parse().unwrap());
        r.extensions_mut().insert(Route::new("a"));
        Ok::<_, std::convert::Infallible>(r)
    });
    let answer = send(
        MrtrLayer::with_shared_keyring(ring.clone()).layer(inner),
        post(&tool_call(1, "t", None)),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32603));
    // Mentions input_required but cannot be read (duplicate members).
    let dup = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"a","requestState":"b"}}"#;
    let answer = send(
        MrtrLayer::with_shared_keyring(ring.clone())
            .layer(Backend::new().service(Some("a"), move |_| dup.to_owned())),
        post(&tool_call(1, "t", None)),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32603));
    // Escaped resultType is still recognised.
    let escaped =
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input\u005frequired","requestState":"hidden"}}"#;
    let answer = send(
        MrtrLayer::with_shared_keyring(ring.clone())
            .layer(Backend::new().service(Some("a"), move |_| escaped.to_owned())),
        post(&tool_call(1, "t", None)),
    )
    .await;
    assert!(
        !answer.text().contains("hidden") && answer.text().contains("mrtr4."),
        "{}",
        answer.text()
    );
    // A state that is not a string.
    let numeric = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":5}}"#;
    let answer = send(
        MrtrLayer::with_shared_keyring(ring.clone())
            .layer(Backend::new().service(Some("a"), move |_| numeric.to_owned())),
        post(&tool_call(1, "t", None)),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32603));
    // A sealed state longer than the envelope limit.
    let layer = MrtrLayer::with_shared_keyring(ring).max_envelope_len(128);
    let answer = send(
        layer.layer(Backend::new().service(Some("a"), |r: &Value| {
            input_required(r, Some(&format!("\"{}\"", "q".repeat(200))))
        })),
        post(&tool_call(1, "t", None)),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32603));
}

#[tokio::test]
async fn a_backend_body_error_fails_closed() {
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = vec![
            Ok(http_body::Frame::data(Bytes::from_static(
                b"{\"jsonrpc\":\"2.0\"",
            ))),
            Err(std::io::Error::other("backend reset")),
        ];
        let mut r = http::Response::new(StreamBody::new(futures_util::stream::iter(frames)));
        r.extensions_mut().insert(Route::new("a"));
        Ok::<_, std::convert::Infallible>(r)
    });
    let response = MrtrLayer::with_shared_keyring(keyring())
        .layer(inner)
        .oneshot(post(&tool_call(1, "t", None)))
        .await
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], -32603);
}

#[tokio::test]
async fn principal_can_come_from_an_auth_layers_extension() {
    #[derive(Clone)]
    struct Claims {
        sub: String,
    }
    let layer = MrtrLayer::with_shared_keyring(keyring())
        .bind_principal(|parts| parts.extensions.get::<Claims>().map(|c| c.sub.clone()));
    let backend = Backend::new();
    let mut first = post(&tool_call(1, "t", None));
    first.extensions_mut().insert(Claims { sub: "alice".into() });
    let envelope = send(
        layer.layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#)))),
        first,
    )
    .await
    .envelope();
    for (sub, ok) in [("alice", true), ("bob", false)] {
        let mut retry = post(&tool_call(2, "t", Some(&envelope)));
        retry.extensions_mut().insert(Claims { sub: sub.into() });
        let answer = send(
            layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
            retry,
        )
        .await;
        assert_eq!(answer.error_code().is_none(), ok, "{sub}");
    }
}

/// With `bind_principal`, a request the principal function finds no principal for is refused
/// (403) before it can be sealed unbound or open an envelope, unless the layer is told that
/// anonymous requests are expected. Putting the authentication layer inside `MrtrLayer` (where it
/// has not run yet when the layer looks) is the mistake this catches.
#[tokio::test]
async fn requests_without_a_principal_never_get_or_open_an_envelope() {
    let from_header = |parts: &http::request::Parts| {
        parts
            .headers
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let layer = MrtrLayer::with_shared_keyring(keyring()).bind_principal(from_header);
    let anonymous_envelope = {
        let open = MrtrLayer::with_shared_keyring(keyring())
            .bind_principal(from_header)
            .require_principal(false);
        let svc =
            open.layer(Backend::new().service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#))));
        send(svc, post(&tool_call(1, "t", None))).await.envelope()
    };
    for body in [
        tool_call(1, "t", None),
        tool_call(2, "t", Some(&anonymous_envelope)),
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a"}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"h","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}"#.to_owned(),
    ] {
        let mut req = post(&body);
        if body.contains("tasks/get") {
            req.headers_mut().insert("mcp-name", "h".parse().unwrap());
        }
        let answer = send(layer.layer(must_not_be_called()), req).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::FORBIDDEN, Some(-32600)),
            "{body}"
        );
    }
    // Methods that can neither produce nor open an envelope are not the layer's business.
    let backend = Backend::new();
    send(
        layer.layer(backend.service(None, |_| "{}".to_owned())),
        post(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#),
    )
    .await;
    assert_eq!(backend.seen().len(), 1);
    // Opting out: anonymous requests are relayed, their envelopes bound to no principal.
    let optional = MrtrLayer::with_shared_keyring(keyring())
        .bind_principal(from_header)
        .require_principal(false);
    let answer = send(
        optional.layer(Backend::new().service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#)))),
        post(&tool_call(6, "t", None)),
    )
    .await;
    assert!(answer.envelope().starts_with("mrtr4."));
}

#[tokio::test]
async fn inner_errors_propagate() {
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        Err::<http::Response<Full<Bytes>>, _>(std::io::Error::other("connect refused"))
    });
    let err = MrtrLayer::with_shared_keyring(keyring())
        .layer(inner)
        .oneshot(post(&tool_call(1, "t", None)))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "connect refused");
}

/// Every value of every `Content-Encoding` header must be `identity`, both ways: checking only
/// the first would let `identity` then `gzip` through unread.
#[tokio::test]
async fn every_content_encoding_value_must_be_identity() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    for values in [
        &["identity", "gzip"][..],
        &["identity, gzip"],
        &["IDENTITY,br"],
        &["gzip", "identity"],
    ] {
        let mut req = post(&tool_call(1, "t", Some("mrtr4.hidden-in-gzip")));
        for value in values {
            req.headers_mut()
                .append("content-encoding", value.parse().unwrap());
        }
        let answer = send(layer.layer(must_not_be_called()), req).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, Some(-32600)),
            "{values:?}"
        );
    }
    // Identity in any spelling, repeated or with empty list elements, is no encoding at all.
    let mut req = post(&tool_call(2, "t", None));
    req.headers_mut()
        .append("content-encoding", "identity".parse().unwrap());
    req.headers_mut()
        .append("content-encoding", "Identity, ,identity".parse().unwrap());
    let backend = Backend::new();
    send(
        layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
        req,
    )
    .await;
    assert_eq!(backend.seen().len(), 1);
    // The answer side likewise: identity then gzip fails closed.
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let mut r = http::Response::new(Full::new(Bytes::from_static(b"\x1f\x8b...")));
        r.headers_mut()
            .append("content-encoding", "identity".parse().unwrap());
        r.headers_mut()
            .append("content-encoding", "gzip".parse().unwrap());
        r.extensions_mut().insert(Route::new("a"));
        Ok::<_, std::convert::Infallible>(r)
    });
    let answer = send(layer.layer(inner), post(&tool_call(3, "t", None))).await;
    assert_eq!(answer.error_code(), Some(-32603));
}

/// Found by fuzzing (`fuzz/`, target `json_response`): an answer with two `Content-Type` headers,
/// `text/event-stream` first and `application/json` second, and a JSON body. The layer read it as
/// a stream (the first value); a JSON line without `data:` is no event, so it passed untouched,
/// and a client reading the other value took the raw state. An answer whose `Content-Type`
/// headers name different media types cannot be read unambiguously: it fails closed.
#[tokio::test]
async fn answers_with_conflicting_content_types_fail_closed() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    let json =
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"raw-secret"}}"#;
    let stream = format!("data: {json}\n\n");
    for (types, body) in [
        (["text/event-stream", "application/json"], json.to_owned()),
        (["application/json", "text/event-stream"], stream.clone()),
        (
            ["text/event-stream; charset=utf-8", "Application/JSON"],
            stream.clone(),
        ),
    ] {
        let inner = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
            let body = body.clone();
            async move {
                let mut r = http::Response::new(Full::new(Bytes::from(body)));
                for value in types {
                    r.headers_mut().append("content-type", value.parse().unwrap());
                }
                r.extensions_mut().insert(Route::new("a"));
                Ok::<_, std::convert::Infallible>(r)
            }
        });
        let answer = send(layer.layer(inner), post(&tool_call(1, "t", None))).await;
        assert!(
            !answer.text().contains("raw-secret"),
            "{types:?}: {}",
            answer.text()
        );
        assert_eq!(answer.error_code(), Some(-32603), "{types:?}");
    }
    // The same media type twice (parameters and case aside) is no conflict: sealed as usual.
    let inner = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        let stream = stream.clone();
        async move {
            let mut r = http::Response::new(Full::new(Bytes::from(stream)));
            r.headers_mut()
                .append("content-type", "text/event-stream".parse().unwrap());
            r.headers_mut().append(
                "content-type",
                "Text/Event-Stream; charset=utf-8".parse().unwrap(),
            );
            r.extensions_mut().insert(Route::new("a"));
            Ok::<_, std::convert::Infallible>(r)
        }
    });
    let answer = send(layer.layer(inner), post(&tool_call(2, "t", None))).await;
    assert!(
        answer.text().contains("mrtr4.") && !answer.text().contains("raw-secret"),
        "{}",
        answer.text()
    );
}

/// `ttl(Duration::MAX)` saturates at the end of the clock, where `SystemTime + Duration` would
/// overflow and panic on the first answer.
#[tokio::test]
async fn an_unbounded_ttl_saturates_instead_of_panicking() {
    let layer = MrtrLayer::with_shared_keyring(keyring()).ttl(Duration::MAX);
    let backend = Backend::new();
    let envelope = send(
        layer.layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#)))),
        post(&tool_call(1, "t", None)),
    )
    .await
    .envelope();
    let answer = send(
        layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
        post(&tool_call(2, "t", Some(&envelope))),
    )
    .await;
    assert_eq!(answer.json()["result"]["resultType"], "complete");
}

/// The layer does not read the body of a GET (or any other non-POST), so it cannot know what the
/// answer may carry: an answer holding an `input_required` or task result fails closed rather
/// than reaching the client unsealed.
#[tokio::test]
async fn answers_to_requests_the_layer_did_not_read_are_still_checked() {
    let get = || {
        Request::get("/mcp")
            .header("accept", "text/event-stream")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    for raw in [
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"raw-secret"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"raw-secret"}}"#,
        r#"[{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"raw-secret"}}]"#,
    ] {
        let svc = MrtrLayer::with_shared_keyring(keyring())
            .layer(Backend::new().service(Some("a"), move |_| raw.to_owned()));
        let answer = send(svc, get()).await;
        assert!(!answer.text().contains("raw-secret"), "{}", answer.text());
        assert_eq!(answer.error_code(), Some(-32603), "{raw}");
    }
    // A stream: events before the offending one are delivered, then a JSON-RPC error ends it.
    let inner = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        let events = concat!(
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"resultType\":\"input_required\",\"requestState\":\"raw-secret\"}}\n\n",
        );
        let mut r = http::Response::new(Full::new(Bytes::from_static(events.as_bytes())));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        Ok::<_, std::convert::Infallible>(r)
    });
    let answer = send(MrtrLayer::with_shared_keyring(keyring()).layer(inner), get()).await;
    let text = answer.text();
    assert!(text.starts_with("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\""));
    assert!(!text.contains("raw-secret") && text.contains("-32603"), "{text}");
    // Ordinary answers to GET and DELETE (the 405s, a plain stream) pass untouched.
    let svc = MrtrLayer::with_shared_keyring(keyring())
        .layer(Backend::new().service(None, |_| "Method Not Allowed".to_owned()));
    assert_eq!(send(svc, get()).await.text(), "Method Not Allowed");
}

/// Found by fuzzing (`sse_response`, long run): the answer to a batch, under a `Content-Type`
/// whose media type is JSON but which mentions `text/event-stream`, framed as an event stream
/// holding an `input_required` result. The layer reads it as JSON and cannot parse it; a client
/// that matches the media type by substring (the TypeScript SDK does) reads the stream and
/// would take the raw state. It fails closed.
#[tokio::test]
async fn an_unreadable_batch_answer_a_client_could_read_as_a_stream_fails_closed() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    let stream = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"resultType\":\"input_required\",\n\
                  data: \"requestState\":\"raw-backend-state\"}}\n\n";
    let inner = tower::service_fn(move |_request: Request<RequestBody<Full<Bytes>>>| async move {
        let mut answer = http::Response::new(Full::new(Bytes::from_static(stream.as_bytes())));
        answer.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json; profile=text/event-stream"),
        );
        answer.extensions_mut().insert(Route::new("alpha"));
        Ok::<_, std::convert::Infallible>(answer)
    });
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/list"}},{}]"#,
        tool_call(2, "t", None)
    );
    let answer = send(layer.layer(inner), post(&batch)).await;
    assert!(!answer.text().contains("raw-backend-state"), "{}", answer.text());
    assert_eq!(answer.error_code(), Some(-32603), "{}", answer.text());
}

/// A task result whose id sits under a member named like `taskId` but for case (Go's
/// `encoding/json` reads `TaskId` as `taskId`) is read and fails closed, as JSON and as a
/// stream: the answer pre-filter looks for the result type's value, `"task"`, which no client
/// folds, not for the member name.
#[tokio::test]
async fn a_task_id_under_a_case_variant_name_fails_closed() {
    let layer = MrtrLayer::with_shared_keyring(keyring());
    for name in ["TaskId", "TASKID", "taskid", "taſkId"] {
        let json = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"task","{name}":"raw-task-secret","status":"working"}}}}"#
        );
        for (content_type, body) in [
            ("application/json", json.clone()),
            ("text/event-stream", format!("data: {json}\n\n")),
        ] {
            let inner = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
                let body = body.clone();
                async move {
                    let mut r = http::Response::new(Full::new(Bytes::from(body)));
                    r.headers_mut()
                        .insert("content-type", content_type.parse().unwrap());
                    r.extensions_mut().insert(Route::new("a"));
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
            let answer = send(layer.layer(inner), post(&tool_call(1, "t", None))).await;
            let text = answer.text();
            assert!(!text.contains("raw-task-secret"), "{name} {content_type}: {text}");
            assert!(text.contains("-32603"), "{name} {content_type}: {text}");
        }
    }
}

/// `authorize` runs before anything else is done with a call: a denied call never reaches the
/// inner service, a denied retry is refused before its state is opened (a tampered state gets
/// the denial, not the envelope's refusal), and a denied element refuses a batch.
#[tokio::test]
async fn the_authorize_check_refuses_calls_and_retries_before_their_state_is_opened() {
    let layer = MrtrLayer::with_shared_keyring(keyring()).authorize(|parts, method, target| {
        let user = parts.headers.get("x-user").and_then(|v| v.to_str().ok());
        match (user, method, target) {
            (Some("alice"), _, _) | (_, "resources/read", _) => Ok(()),
            (_, _, Some(target)) => Err(tower_mrtr::Denied::new(format!(
                "{method} of {target} is not permitted"
            ))),
            (_, _, None) => Err(tower_mrtr::Denied::new("not permitted")),
        }
    });
    let as_user = |body: &str, user: &str| {
        let mut req = post(body);
        req.headers_mut().insert("x-user", user.parse().unwrap());
        req
    };
    let backend = Backend::new();
    let first = send(
        layer.layer(rounds_backend(&backend, "alpha", 1)),
        as_user(&tool_call(1, "deploy", None), "alice"),
    )
    .await;
    let envelope = first.envelope();
    assert_eq!(backend.seen().len(), 1);

    let tampered = format!("{}x", &envelope[..envelope.len() - 1]);
    for (body, user) in [
        (tool_call(2, "deploy", None), "bob"),
        (tool_call(3, "deploy", Some(&envelope)), "bob"),
        (tool_call(4, "deploy", Some(&tampered)), "bob"),
        (
            format!(
                r#"[{},{{"jsonrpc":"2.0","id":6,"method":"tools/list"}}]"#,
                tool_call(5, "deploy", None)
            ),
            "bob",
        ),
    ] {
        let answer = send(layer.layer(must_not_be_called()), as_user(&body, user)).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(
            answer.outcome,
            Some(tower_mrtr::Outcome::Refused { reason: "denied" }),
            "{body}"
        );
        if !body.starts_with('[') {
            assert_eq!(answer.error_code(), Some(-32600), "{body}");
            assert_eq!(
                answer.json()["error"]["message"],
                "tools/call of deploy is not permitted",
                "{body}"
            );
        }
    }
    // What the check lets through is relayed as before: alice's retry completes, and methods the
    // check is not asked about pass.
    let done = send(
        layer.layer(rounds_backend(&backend, "alpha", 1)),
        as_user(&tool_call(7, "deploy", Some(&envelope)), "alice"),
    )
    .await;
    assert_eq!(done.json()["result"]["content"][0]["text"], "done by alpha");
    let listed = send(
        layer.layer(backend.service(None, |_| "{}".to_owned())),
        as_user(r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#, "bob"),
    )
    .await;
    assert_eq!(listed.status, StatusCode::OK);
}
