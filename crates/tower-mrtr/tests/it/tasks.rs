//! The Tasks extension (SEP-2663): task ids sealed into handles, follow-ups opened and pinned.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use mrtr_test_support::mcp::tasks_meta;
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};
use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
use tower_mrtr::{Denied, Keyring, MrtrLayer, Outcome, RequestBody, Route, TaskHandle};

use crate::common::*;

fn layer() -> MrtrLayer {
    MrtrLayer::new(Keyring::generate("k1").unwrap())
}

/// A task-capable backend: `tools/call` creates task `task-<route>-7`; `tasks/*` answer about it.
fn task_backend(
    backend: &Backend,
    route: &'static str,
) -> impl tower::Service<
    Request<RequestBody<Full<Bytes>>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    backend.service(Some(route), move |req: &Value| {
        let id = &req["id"];
        let task_id = format!("task-{route}-7");
        let answer = match req["method"].as_str().unwrap_or_default() {
            "tools/call" => json!({"resultType":"task","taskId": task_id,"status":"working",
                "createdAt":"2026-11-29T10:00:00Z","lastUpdatedAt":"2026-11-29T10:00:00Z","ttlMs":60000,"pollIntervalMs":500}),
            "tasks/get" => {
                assert_eq!(req["params"]["taskId"], task_id.as_str());
                json!({"resultType":"complete","taskId": task_id,"status":"completed",
                    "result":{"resultType":"complete","content":[{"type":"text","text": format!("done by {route}")}]}})
            }
            "tasks/update" | "tasks/cancel" => json!({"resultType":"complete"}),
            _ => return format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#),
        };
        json!({"jsonrpc":"2.0","id": id,"result": answer}).to_string()
    })
}

fn task_request(id: u64, method: &str, handle: &str) -> Request<Full<Bytes>> {
    let mut params = json!({"taskId": handle, "_meta": tasks_meta()});
    if method == "tasks/update" {
        params["inputResponses"] = json!({"approve": {"action":"accept","content":{"ok":true}}});
    }
    let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
    let mut req = post(&body);
    req.headers_mut().insert("mcp-name", handle.parse().unwrap());
    req
}

async fn create_task(layer: &MrtrLayer, backend: &Backend, route: &'static str) -> String {
    let answer = send(
        layer.layer(task_backend(backend, route)),
        post(&tool_call(1, "slow_compute", None)),
    )
    .await;
    let v = answer.json();
    assert_eq!(v["result"]["resultType"], "task");
    assert_eq!(v["result"]["status"], "working", "other members untouched");
    let handle = v["result"]["taskId"].as_str().unwrap().to_owned();
    assert!(
        handle.starts_with("mrtr4.") && !answer.text().contains("task-"),
        "{}",
        answer.text()
    );
    handle
}

#[tokio::test]
async fn task_ids_are_sealed_and_follow_ups_are_opened_pinned_and_answered_with_the_same_handle() {
    let layer = layer();
    let backend = Backend::new();
    let handle = create_task(&layer, &backend, "alpha").await;
    for (i, method) in ["tasks/get", "tasks/update", "tasks/cancel"]
        .into_iter()
        .enumerate()
    {
        let answer = send(
            layer.layer(task_backend(&backend, "alpha")),
            task_request(10 + i as u64, method, &handle),
        )
        .await;
        let seen = backend.last();
        let sent: Value = serde_json::from_slice(&seen.body).unwrap();
        assert_eq!(sent["params"]["taskId"], "task-alpha-7", "{method}");
        assert_eq!(
            seen.headers["mcp-name"], "task-alpha-7",
            "{method}: Mcp-Name must equal the body"
        );
        assert_eq!(
            seen.headers["content-length"],
            seen.body.len().to_string().as_str()
        );
        assert_eq!(seen.pinned, Some(Route::new("alpha")), "{method}");
        assert_eq!(seen.head.unwrap().target(), Some("task-alpha-7"));
        assert_eq!(
            seen.handle.as_ref().map(TaskHandle::as_str),
            Some(handle.as_str()),
            "{method}: the handle presented, for a proxy that hands the request on"
        );
        assert!(
            !answer.text().contains("task-alpha-7"),
            "{method}: {}",
            answer.text()
        );
        if method == "tasks/get" {
            assert_eq!(
                answer.json()["result"]["taskId"],
                handle.as_str(),
                "the client sees its own handle"
            );
            assert_eq!(
                answer.json()["result"]["result"]["content"][0]["text"],
                "done by alpha"
            );
        }
    }
}

#[tokio::test]
async fn forged_and_cross_purpose_handles_are_refused_without_reaching_a_backend() {
    let layer = layer()
        .bind_principal(|p| p.headers.get("x-user").map(|v| v.to_str().unwrap().to_owned()))
        .require_principal(false);
    let backend = Backend::new();
    let handle = create_task(&layer, &backend, "alpha").await;
    // A requestState envelope of the same keyring, presented as a task handle.
    let minting = layer.layer(backend.service(Some("alpha"), |r: &Value| input_required(r, Some(r#""s""#))));
    let state_envelope = send(minting, post(&tool_call(1, "t", None))).await.envelope();

    let mut forged = handle.clone();
    forged.replace_range(20..21, if &handle[20..21] == "A" { "B" } else { "A" });
    for (candidate, why) in [
        (forged.as_str(), "forged"),
        ("task-alpha-7", "the raw backend id"),
        (state_envelope.as_str(), "a requestState envelope"),
    ] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let answer = send(
                layer.layer(must_not_be_called()),
                task_request(5, method, candidate),
            )
            .await;
            assert_eq!(
                (answer.status, answer.error_code()),
                (StatusCode::OK, Some(-32602)),
                "{why} on {method}"
            );
            assert_eq!(
                answer.json()["error"]["message"],
                "Invalid or expired task handle"
            );
        }
    }
    // A task handle presented as a requestState.
    let answer = send(
        layer.layer(must_not_be_called()),
        post(&tool_call(6, "t", Some(&handle))),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32602));
    // Another principal.
    let mut req = task_request(7, "tasks/get", &handle);
    req.headers_mut().insert("x-user", "mallory".parse().unwrap());
    let answer = send(layer.layer(must_not_be_called()), req).await;
    assert_eq!(answer.error_code(), Some(-32602));
    // Missing or non-string taskId.
    for params in [
        json!({"_meta": tasks_meta()}),
        json!({"taskId": 5, "_meta": tasks_meta()}),
    ] {
        let mut req = post(&json!({"jsonrpc":"2.0","id":8,"method":"tasks/get","params":params}).to_string());
        req.headers_mut().insert("mcp-name", "x".parse().unwrap());
        let answer = send(layer.layer(must_not_be_called()), req).await;
        assert_eq!(answer.error_code(), Some(-32602), "{params}");
    }
}

#[tokio::test]
async fn clients_that_did_not_declare_the_extension_get_missing_capability() {
    let layer = layer();
    let handle = create_task(&layer, &Backend::new(), "alpha").await;
    for (method, candidate) in [
        ("tasks/get", handle.as_str()),
        ("tasks/cancel", "gate-test"),
        ("tasks/update", "gate-test"),
    ] {
        let body = json!({"jsonrpc":"2.0","id":3,"method":method,"params":{"taskId":candidate,"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}});
        let mut req = post(&body.to_string());
        req.headers_mut().insert("mcp-name", candidate.parse().unwrap());
        let answer = send(layer.layer(must_not_be_called()), req).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(-32021)),
            "{method}"
        );
        assert!(answer.json()["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object());
    }
    let listen = json!({"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{"notifications":{"taskIds":[handle]}}});
    let answer = send(layer.layer(must_not_be_called()), post(&listen.to_string())).await;
    assert_eq!(answer.error_code(), Some(-32021));
    // A header mismatch is reported first, as a server validating headers before dispatch does.
    let mut req =
        post(&json!({"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":"x"}}).to_string());
    req.headers_mut().insert("mcp-name", "y".parse().unwrap());
    assert_eq!(
        send(layer.layer(must_not_be_called()), req).await.error_code(),
        Some(-32020)
    );
}

#[tokio::test]
async fn a_handle_answered_by_another_backend_fails_closed() {
    let layer = layer();
    let handle = create_task(&layer, &Backend::new(), "alpha").await;
    let beta = Backend::new();
    let wrong = layer.layer(task_backend(&beta, "beta"));
    let answer = send(wrong, task_request(2, "tasks/cancel", &handle)).await;
    assert_eq!(
        answer.error_code(),
        Some(-32603),
        "a proxy that ignores PinnedRoute is caught"
    );
}

#[tokio::test]
async fn mcp_name_must_name_the_handle() {
    let layer = layer();
    let handle = create_task(&layer, &Backend::new(), "alpha").await;
    let mut wrong = task_request(2, "tasks/get", &handle);
    wrong
        .headers_mut()
        .insert("mcp-name", "something-else".parse().unwrap());
    let mut missing = task_request(3, "tasks/get", &handle);
    missing.headers_mut().remove("mcp-name");
    let mut method = task_request(4, "tasks/get", &handle);
    method
        .headers_mut()
        .insert("mcp-method", "tasks/cancel".parse().unwrap());
    for req in [wrong, missing, method] {
        let answer = send(layer.layer(must_not_be_called()), req).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(-32020))
        );
    }
}

#[tokio::test]
async fn handles_expire_with_the_tasks_ttl_capped_by_the_maximum() {
    let clock = ManualClock::new();
    let layer = layer()
        .clock(clock.clone())
        .max_task_ttl(Duration::from_secs(3600));
    let backend = Backend::new();
    // ttlMs 60000 in the backend's answer: valid for a minute.
    let handle = create_task(&layer, &backend, "alpha").await;
    clock.advance(Duration::from_secs(59));
    let ok = send(
        layer.layer(task_backend(&backend, "alpha")),
        task_request(2, "tasks/get", &handle),
    )
    .await;
    assert!(ok.error_code().is_none());
    clock.advance(Duration::from_secs(2));
    let expired = send(
        layer.layer(must_not_be_called()),
        task_request(3, "tasks/get", &handle),
    )
    .await;
    assert_eq!(expired.error_code(), Some(-32602));
    // A null (unlimited) TTL gets the configured maximum.
    let unlimited = backend.service(Some("alpha"), |r: &Value| {
        json!({"jsonrpc":"2.0","id":r["id"],"result":{"resultType":"task","taskId":"forever","status":"working","ttlMs":null}}).to_string()
    });
    let handle = send(layer.layer(unlimited), post(&tool_call(4, "t", None)))
        .await
        .json()["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    clock.advance(Duration::from_secs(3599));
    let ok = send(
        layer.layer(task_backend(&backend, "alpha")),
        task_request(5, "tasks/cancel", &handle),
    )
    .await;
    assert!(ok.error_code().is_none(), "{}", ok.text());
    clock.advance(Duration::from_secs(2));
    let expired = send(
        layer.layer(must_not_be_called()),
        task_request(6, "tasks/cancel", &handle),
    )
    .await;
    assert_eq!(expired.error_code(), Some(-32602));
}

#[tokio::test]
async fn mrtr_rounds_then_a_task() {
    let layer = layer();
    let backend = Backend::new();
    let inner = backend.service(Some("gamma"), |req: &Value| {
        if req["params"].get("requestState").is_none() {
            return input_required(req, Some(r#""need-name""#));
        }
        assert_eq!(req["params"]["requestState"], "need-name");
        json!({"jsonrpc":"2.0","id":req["id"],"result":{"resultType":"task","taskId":"t-77","status":"working","ttlMs":1000}}).to_string()
    });
    let envelope = send(
        layer.layer(inner.clone()),
        post(&tool_call(1, "test_tool_with_task", None)),
    )
    .await
    .envelope();
    let answer = send(
        layer.layer(inner),
        post(&tool_call(2, "test_tool_with_task", Some(&envelope))),
    )
    .await;
    let v = answer.json();
    assert_eq!(v["result"]["resultType"], "task");
    assert!(v["result"].get("requestState").is_none());
    let handle = v["result"]["taskId"].as_str().unwrap();
    assert!(handle.starts_with("mrtr4.") && handle != envelope);
    let follow = backend.service(Some("gamma"), |r: &Value| json!({"jsonrpc":"2.0","id":r["id"],"result":{"resultType":"complete","taskId":"t-77","status":"working"}}).to_string());
    send(layer.layer(follow), task_request(3, "tasks/get", handle)).await;
    assert_eq!(backend.last().pinned, Some(Route::new("gamma")));
}

#[tokio::test]
async fn tasks_result_and_list_and_non_tool_task_results_pass_through() {
    for method in ["tasks/result", "tasks/list"] {
        let backend = Backend::new();
        let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":{"taskId":"whatever"}}).to_string();
        let answer = send(layer().layer(task_backend(&backend, "alpha")), post(&body)).await;
        assert_eq!(backend.last().body, body.as_bytes());
        assert_eq!(answer.error_code(), Some(-32601));
    }
    // Only tools/call may create tasks: elsewhere a task result is invalid for the client and left alone.
    let raw = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t"}}"#;
    let svc = layer().layer(Backend::new().service(Some("a"), move |_| raw.to_owned()));
    let answer = send(
        svc,
        post(r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p"}}"#),
    )
    .await;
    assert_eq!(answer.text(), raw);
}

#[tokio::test]
async fn listen_streams_name_tasks_by_the_clients_handles() {
    let layer = layer();
    let backend = Backend::new();
    let first = create_task(&layer, &backend, "alpha").await;
    let second = create_task(&layer, &backend, "alpha").await; // same backend id, another handle
    assert_ne!(first, second);
    let other = create_task(&layer, &backend, "beta").await;

    // Handles of two backends in one filter: a clear error.
    let mixed = json!({"jsonrpc":"2.0","id":9,"method":"subscriptions/listen","params":{"notifications":{"taskIds":[first, other]},"_meta":tasks_meta()}});
    let answer = send(layer.layer(must_not_be_called()), post(&mixed.to_string())).await;
    assert_eq!(answer.error_code(), Some(-32602));
    assert!(
        answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("different backends")
    );

    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen_in = seen.clone();
    let inner = tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
        let seen = seen_in.clone();
        async move {
            let pinned = req.extensions().get::<tower_mrtr::PinnedRoute>().cloned();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            *seen.lock().unwrap() = Some((pinned, body));
            let events = [
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{\"notifications\":{\"taskIds\":[\"task-alpha-7\"]}}}\n\n",
                ": keep-alive\n\n",
                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tasks\",\"params\":{\"taskId\":\"task-alpha-7\",\"status\":\"completed\",\"statusMessage\":\"task-alpha-7 finished\"}}\n\n",
            ];
            let frames: Vec<Result<Frame<Bytes>, Infallible>> = events
                .iter()
                .map(|e| Ok(Frame::data(Bytes::from_static(e.as_bytes()))))
                .collect();
            let mut response = Response::new(StreamBody::new(futures_util::stream::iter(frames)));
            response
                .headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            response.extensions_mut().insert(Route::new("alpha"));
            Ok::<_, Infallible>(response)
        }
    });
    let listen = json!({"jsonrpc":"2.0","id":10,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"taskIds":[first]},"_meta":tasks_meta()}});
    let response = layer
        .layer(inner)
        .oneshot(post(&listen.to_string()))
        .await
        .unwrap();
    let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let (pinned, body) = seen.lock().unwrap().take().unwrap();
    assert_eq!(pinned.map(|p| p.0), Some(Route::new("alpha")));
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        sent["params"]["notifications"],
        json!({"toolsListChanged":true,"taskIds":["task-alpha-7"]})
    );
    assert!(
        text.contains(&format!("\"taskIds\":[\"{first}\"]")),
        "ack: {text}"
    );
    assert!(
        text.contains(&format!("\"taskId\":\"{first}\"")),
        "notification: {text}"
    );
    assert!(
        text.contains("\"statusMessage\":\"task-alpha-7 finished\""),
        "free text is not an id: {text}"
    );
    assert!(text.contains(": keep-alive\n\n"));
}

/// Only id positions are mapped: a tool whose output happens to equal the task id (here the
/// text `task-alpha-7`) reaches the client byte for byte.
#[tokio::test]
async fn tool_output_equal_to_a_task_id_is_not_rewritten() {
    let layer = layer();
    let backend = Backend::new();
    let handle = create_task(&layer, &backend, "alpha").await;
    let raw = r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","taskId":"task-alpha-7","status":"completed","result":{"content":[{"type":"text","text":"task-alpha-7"}],"structuredContent":{"echo":["task-alpha-7"],"task-alpha-7":1}}}}"#;
    let inner = backend.service(Some("alpha"), move |_| raw.to_owned());
    let answer = send(layer.layer(inner), task_request(2, "tasks/get", &handle)).await;
    assert_eq!(
        answer.text(),
        raw.replacen(
            r#""taskId":"task-alpha-7""#,
            &format!(r#""taskId":"{handle}""#),
            1
        )
    );
}

/// A batch gets no way around task-handle protection, either way: a batched follow-up must not
/// reach a backend with a raw id or skip the `-32021` gate, nor a batched task result show one.
#[tokio::test]
async fn batches_cannot_carry_task_handles_and_batched_task_results_fail_closed() {
    let layer = layer();
    let handle = create_task(&layer, &Backend::new(), "alpha").await;
    for element in [
        json!({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"task-alpha-7"}}),
        json!({"jsonrpc":"2.0","id":2,"method":"tasks/cancel","params":{"taskId":handle,"_meta":tasks_meta()}}),
        json!({"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["task-alpha-7"]}}}),
        json!({"jsonrpc":"2.0","id":2,"method":"tasks/update","params":{"TASKID":"task-alpha-7"}}),
    ] {
        let batch = json!([{"jsonrpc":"2.0","id":1,"method":"tools/list"}, element]).to_string();
        let answer = send(layer.layer(must_not_be_called()), post(&batch)).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::BAD_REQUEST, Some(-32600)),
            "{element}"
        );
    }
    // A listen without task handles is harmless in a batch.
    let backend = Backend::new();
    let batch = json!([{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"taskIds":[]}}}]).to_string();
    send(
        layer.layer(backend.service(None, |_| "[]".to_owned())),
        post(&batch),
    )
    .await;
    assert_eq!(backend.seen().len(), 1);
    // A batched tools/call answered with a task: that element fails closed, the rest passes.
    let inner = Backend::new().service(Some("alpha"), |_| {
        r#"[{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}},{"jsonrpc":"2.0","id":2,"result":{"resultType":"task","taskId":"raw-task-id","status":"working"}}]"#.to_owned()
    });
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/list"}},{}]"#,
        tool_call(2, "t", None)
    );
    let answer = send(layer.layer(inner), post(&batch)).await;
    assert!(!answer.text().contains("raw-task-id"), "{}", answer.text());
    let v = answer.json();
    assert_eq!(v[0]["result"]["resultType"], "complete");
    assert_eq!(
        (v[1]["id"].as_i64(), v[1]["error"]["code"].as_i64()),
        (Some(2), Some(-32603))
    );
}

/// Each entry of a filter costs a decryption on the request path, so a filter is refused beyond
/// 100 entries (repeats count), and the backend hears of each task once however it is named.
#[tokio::test]
async fn listen_filters_are_capped_and_deduplicated() {
    let layer = layer();
    let backend = Backend::new();
    let first = create_task(&layer, &backend, "alpha").await;
    let second = create_task(&layer, &backend, "alpha").await; // another handle, same backend id
    let repeated = vec![first.clone(); 10_000];
    let listen = |ids: &[String]| {
        json!({"jsonrpc":"2.0","id":9,"method":"subscriptions/listen","params":{"notifications":{"taskIds":ids},"_meta":tasks_meta()}})
            .to_string()
    };
    let answer = send(layer.layer(must_not_be_called()), post(&listen(&repeated))).await;
    assert_eq!(answer.error_code(), Some(-32602));
    assert!(answer.text().contains("at most 100"), "{}", answer.text());
    let many: Vec<String> = (0..101).map(|i| format!("h{i}")).collect();
    assert_eq!(
        send(layer.layer(must_not_be_called()), post(&listen(&many)))
            .await
            .error_code(),
        Some(-32602)
    );
    // Duplicates, and two handles of one task: the backend hears of the task once.
    let ids = [first.clone(), first.clone(), second.clone(), first.clone()];
    let inner = backend.service(Some("alpha"), |r: &Value| {
        json!({"jsonrpc":"2.0","id":r["id"],"result":{"resultType":"complete","taskId":"task-alpha-7"}})
            .to_string()
    });
    let answer = send(layer.layer(inner), post(&listen(&ids))).await;
    let sent: Value = serde_json::from_slice(&backend.last().body).unwrap();
    assert_eq!(
        sent["params"]["notifications"]["taskIds"],
        json!(["task-alpha-7"])
    );
    assert_eq!(
        answer.json()["result"]["taskId"],
        first.as_str(),
        "shown as the first handle"
    );
}

/// `max_task_ttl(Duration::MAX)` means no cap: the expiry saturates at the end of the clock,
/// where `SystemTime + Duration` would overflow and panic on the first task result.
#[tokio::test]
async fn an_unbounded_task_ttl_saturates_instead_of_panicking() {
    let layer = layer().max_task_ttl(Duration::MAX);
    let backend = Backend::new();
    let unlimited = backend.service(Some("alpha"), |r: &Value| {
        json!({"jsonrpc":"2.0","id":r["id"],"result":{"resultType":"task","taskId":"forever","status":"working","ttlMs":null}}).to_string()
    });
    let answer = send(layer.layer(unlimited), post(&tool_call(1, "t", None))).await;
    let handle = answer.json()["result"]["taskId"].as_str().unwrap().to_owned();
    assert!(handle.starts_with("mrtr4."), "{}", answer.text());
    let answer = send(
        layer.layer(task_backend(&backend, "alpha")),
        task_request(2, "tasks/cancel", &handle),
    )
    .await;
    assert!(answer.error_code().is_none(), "{}", answer.text());
}

#[tokio::test]
async fn task_handles_are_bound_to_the_deployments_audience() {
    // One keyring, three deployments: `prod`, `staging`, and one with no audience.
    let keys = std::sync::Arc::new(Keyring::generate("k1").unwrap());
    let deployment = |audience: Option<&str>| {
        let layer = MrtrLayer::with_shared_keyring(keys.clone());
        match audience {
            Some(name) => layer.audience(name),
            None => layer,
        }
    };
    let backend = Backend::new();
    for minted in [Some("prod"), Some("staging"), None] {
        let handle = create_task(&deployment(minted), &backend, "alpha").await;
        for opener in [Some("prod"), Some("staging"), None] {
            let answer = send(
                deployment(opener).layer(task_backend(&backend, "alpha")),
                task_request(2, "tasks/get", &handle),
            )
            .await;
            if opener == minted {
                assert_eq!(
                    answer.json()["result"]["status"],
                    "completed",
                    "{}",
                    answer.text()
                );
            } else {
                assert_eq!(
                    answer.error_code(),
                    Some(-32602),
                    "minted for {minted:?}, presented to {opener:?}: {}",
                    answer.text()
                );
                assert_eq!(
                    answer.json()["error"]["message"],
                    "Invalid or expired task handle"
                );
            }
        }
    }
    // The backend saw the three creations and the three follow-ups that opened, nothing else.
    let methods: Vec<String> = backend
        .seen()
        .iter()
        .map(|s| {
            serde_json::from_slice::<Value>(&s.body).unwrap()["method"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        methods.iter().filter(|m| *m == "tasks/get").count(),
        3,
        "{methods:?}"
    );
}

/// What `authorize` was asked, in order: (method, target).
type Checks = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A layer over `keys` whose `authorize` records what it is asked, and refuses every call once
/// `revoked` is set (as a policy that no longer permits the caller would).
fn recording_layer(keys: Arc<Keyring>, checks: &Checks, revoked: &Arc<AtomicBool>) -> MrtrLayer {
    let (checks, revoked) = (checks.clone(), revoked.clone());
    MrtrLayer::with_shared_keyring(keys).authorize(move |_parts, method, target| {
        checks
            .lock()
            .unwrap()
            .push((method.to_owned(), target.map(str::to_owned)));
        if revoked.load(Ordering::SeqCst) {
            return Err(Denied::new(format!(
                "{method} of {} is not permitted",
                target.unwrap_or("an unnamed tool")
            )));
        }
        Ok(())
    })
}

fn take(checks: &Checks) -> Vec<(String, Option<String>)> {
    std::mem::take(&mut *checks.lock().unwrap())
}

fn tool_check(target: Option<&str>) -> Vec<(String, Option<String>)> {
    vec![("tools/call".to_owned(), target.map(str::to_owned))]
}

/// Envelope format v4: a task handle carries the tool of the call that created the task, so a
/// follow-up, which names only the task, is checked as a `tools/call` of that tool once its handle
/// has opened (and refused before the backend hears of it when that tool is no longer permitted),
/// and the proxy learns the tool from the `Continuation`.
#[tokio::test]
async fn follow_ups_are_checked_and_continued_as_the_call_that_created_the_task() {
    let checks = Checks::default();
    let revoked = Arc::new(AtomicBool::new(false));
    let layer = recording_layer(Arc::new(Keyring::generate("k1").unwrap()), &checks, &revoked);
    let backend = Backend::new();
    let handle = create_task(&layer, &backend, "alpha").await;
    assert_eq!(take(&checks), tool_check(Some("slow_compute")));
    assert_eq!(
        backend.last().continuation,
        None,
        "a first call continues nothing"
    );

    let mut ids = Vec::new();
    for (i, method) in ["tasks/get", "tasks/update", "tasks/cancel"]
        .into_iter()
        .enumerate()
    {
        let answer = send(
            layer.layer(task_backend(&backend, "alpha")),
            task_request(10 + i as u64, method, &handle),
        )
        .await;
        assert!(answer.error_code().is_none(), "{method}: {}", answer.text());
        assert_eq!(take(&checks), tool_check(Some("slow_compute")), "{method}");
        let continuation = backend.last().continuation.expect("a follow-up continues a call");
        assert_eq!(
            (
                continuation.call_method(),
                continuation.call_target(),
                continuation.round()
            ),
            ("tools/call", Some("slow_compute"), 0),
            "{method}"
        );
        ids.push(continuation.envelope());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "one handle, one id: {ids:?}");

    // The tool is no longer permitted: every follow-up is refused, 403 as the call would be.
    revoked.store(true, Ordering::SeqCst);
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let answer = send(
            layer.layer(must_not_be_called()),
            task_request(20, method, &handle),
        )
        .await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (StatusCode::FORBIDDEN, Some(-32600)),
            "{method}: {}",
            answer.text()
        );
        assert_eq!(
            answer.json()["error"]["message"],
            "tools/call of slow_compute is not permitted"
        );
        assert_eq!(answer.outcome, Some(Outcome::Refused { reason: "denied" }));
        assert_eq!(take(&checks), tool_check(Some("slow_compute")), "{method}");
    }
    // The check runs once the handle has opened: a forged one is refused as such, unchecked.
    let mut forged = handle.clone();
    forged.replace_range(20..21, if &handle[20..21] == "A" { "B" } else { "A" });
    let answer = send(
        layer.layer(must_not_be_called()),
        task_request(21, "tasks/get", &forged),
    )
    .await;
    assert_eq!(answer.error_code(), Some(-32602), "{}", answer.text());
    assert!(take(&checks).is_empty());
}

/// A task handle sealed before format v4 (v3) names no tool: it still opens, and its follow-ups
/// are checked as a `tools/call` naming none.
#[tokio::test]
async fn a_v3_task_handle_still_opens_and_its_follow_ups_name_no_tool() {
    let keys = Arc::new(Keyring::generate("k1").unwrap());
    let checks = Checks::default();
    let revoked = Arc::new(AtomicBool::new(false));
    let layer = recording_layer(keys.clone(), &checks, &revoked);
    let sealed = Sealed {
        route: Route::new("alpha"),
        state: Some("task-alpha-7".into()),
        expires_at: SystemTime::now() + Duration::from_secs(600),
        round: 0,
        // Not sealed: v3 has no call target.
        call_target: Some("slow_compute".into()),
    };
    let handle = Sealer::new(keys)
        .seal_v3_with_nonce(
            Purpose::TASK_HANDLE,
            &Binding::new("tasks", None, None),
            &sealed,
            [7; 24],
        )
        .unwrap();
    assert!(handle.starts_with("mrtr3."), "{handle}");

    let backend = Backend::new();
    let answer = send(
        layer.layer(task_backend(&backend, "alpha")),
        task_request(2, "tasks/get", &handle),
    )
    .await;
    assert_eq!(
        answer.json()["result"]["status"],
        "completed",
        "{}",
        answer.text()
    );
    assert_eq!(answer.json()["result"]["taskId"], handle.as_str());
    assert_eq!(take(&checks), tool_check(None));
    let seen = backend.last();
    assert_eq!(seen.pinned, Some(Route::new("alpha")));
    let continuation = seen.continuation.expect("a follow-up continues a call");
    assert_eq!(
        (
            continuation.call_method(),
            continuation.call_target(),
            continuation.round()
        ),
        ("tools/call", None, 0)
    );
    assert_eq!(continuation.envelope().as_bytes(), &[7; 24]);

    // A check that refuses calls naming no tool refuses it.
    revoked.store(true, Ordering::SeqCst);
    let answer = send(
        layer.layer(must_not_be_called()),
        task_request(3, "tasks/cancel", &handle),
    )
    .await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (StatusCode::FORBIDDEN, Some(-32600))
    );
    assert_eq!(take(&checks), tool_check(None));
}

/// An MRTR retry continues the call whose `input_required` it answers: the proxy gets that
/// call's method and tool, the round of the envelope presented, and the envelope's id, the same
/// on each use of one envelope and another for another envelope.
#[tokio::test]
async fn retries_are_continued_with_their_round_and_the_envelopes_id() {
    let layer = layer();
    let backend = Backend::new();
    // Asks for input twice (states `s1`, `s2`), then completes.
    let inner = backend.service(Some("alpha"), |req: &Value| {
        match req["params"]["requestState"].as_str() {
            None => input_required(req, Some(r#""s1""#)),
            Some("s1") => input_required(req, Some(r#""s2""#)),
            Some(_) => complete(req, "alpha"),
        }
    });
    let first = send(
        layer.layer(inner.clone()),
        post(&tool_call(1, "delete_branch", None)),
    )
    .await
    .envelope();
    assert_eq!(
        backend.last().continuation,
        None,
        "a first call continues nothing"
    );

    let mut continued = Vec::new();
    let mut second = None;
    for id in [2, 3] {
        let answer = send(
            layer.layer(inner.clone()),
            post(&tool_call(id, "delete_branch", Some(&first))),
        )
        .await;
        second = Some(answer.envelope());
        continued.push(backend.last().continuation.expect("a retry continues a call"));
    }
    let second = second.unwrap();
    let answer = send(
        layer.layer(inner),
        post(&tool_call(4, "delete_branch", Some(&second))),
    )
    .await;
    assert_eq!(answer.json()["result"]["resultType"], "complete");
    continued.push(backend.last().continuation.expect("a retry continues a call"));

    let seen: Vec<_> = continued
        .iter()
        .map(|c| (c.call_method(), c.call_target(), c.round()))
        .collect();
    assert_eq!(
        seen,
        [
            ("tools/call", Some("delete_branch"), 1),
            ("tools/call", Some("delete_branch"), 1),
            ("tools/call", Some("delete_branch"), 2),
        ]
    );
    assert_eq!(
        continued[0].envelope(),
        continued[1].envelope(),
        "two uses of one envelope"
    );
    assert_ne!(continued[1].envelope(), continued[2].envelope(), "two envelopes");
    assert!(continued.iter().all(|c| c.expires_at() > SystemTime::now()));
}
