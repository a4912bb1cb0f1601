//! The request path: arbitrary bodies and MCP headers through the whole `Mrtr` service, over the
//! scripted backend of `tower_mrtr_fuzz::backend` (which answers what it reads, leniently).
//!
//! Input (`tower_mrtr_fuzz::script`): an options line (an HTTP method; `principal`, `require`:
//! bind the `x-user` header, required or not; `noargs`: arguments not bound; `default`: a default
//! route; `limit=N`: body limit; `envlimit=N`: envelope limit; `split=A,B`: the client's body in
//! chunks; `error`: the client's body fails; `audience`: the relay's audience is `prod`;
//! `rounds=N`: its cap on rounds; `sse`, `task`, `nostate`, `noroute`, `misroute`: how the
//! backend answers), header lines, a blank line, the body (`@E<n>@`: a minted envelope, `@P<n>@`
//! and `@V<n>@`: its v3 and v2 twins).
//!
//! Invariants:
//! * a request reaching the backend carries no `requestState` or task id the backend did not
//!   mint and that did not open for exactly this request (audience, method, target, arguments,
//!   principal), none of a round at or past the cap, and is pinned to the minting backend (name
//!   and identity); one in which nothing was opened arrives byte for byte;
//! * a refused request gets a JSON-RPC error whose status matches its code;
//! * no state or task id of the backend (markers `BKSTATE-`, `BKTASK-`) reaches the client;
//! * every envelope the client gets is of format v4 and opens, for this request, to what the
//!   backend sent, in the round after the one the request presented (1 for a first round); a task
//!   handle with the tool of the `tools/call` that created it.
#![no_main]

use http::{HeaderMap, Method, Request};
use libfuzzer_sys::fuzz_target;
use tower_mrtr::Route;
use tower_mrtr::envelope::{ArgumentsDigest, Binding, Purpose};
use tower_mrtr_fuzz::MARKERS;
use tower_mrtr_fuzz::backend::{self, NEW_STATE, NEW_TASK, Style};
use tower_mrtr_fuzz::mint::{AUDIENCE, mint_of_state, mints};
use tower_mrtr_fuzz::oracle::{self, Binds};
use tower_mrtr_fuzz::relay::{Step, StepBody, exchange, relay_layer, with_principal};
use tower_mrtr_fuzz::script::{Script, chunks};

fuzz_target!(|data: &[u8]| {
    let script = Script::parse(data);
    let method = script
        .first()
        .filter(|word| word.bytes().all(|b| b.is_ascii_uppercase()))
        .and_then(|word| Method::from_bytes(word.as_bytes()).ok())
        .unwrap_or(Method::POST);
    let binds = Binds {
        principal: script.flag("principal"),
        arguments: !script.flag("noargs"),
        audience: script.flag("audience").then_some(AUDIENCE),
        max_rounds: script
            .number("rounds")
            .map_or(tower_mrtr::DEFAULT_MAX_ROUNDS, |n| {
                u16::try_from(n).unwrap_or(u16::MAX)
            }),
    };
    let mut layer = relay_layer()
        .bind_arguments(binds.arguments)
        .max_rounds(binds.max_rounds);
    if let Some(audience) = binds.audience {
        layer = layer.audience(audience);
    }
    if binds.principal {
        layer = with_principal(layer, script.flag("require"));
    }
    if let Some(limit) = script.number("limit") {
        layer = layer.max_request_body(limit);
    }
    if let Some(limit) = script.number("envlimit") {
        layer = layer.max_envelope_len(limit);
    }
    if script.flag("default") {
        layer = layer.default_route("alpha");
    }
    let split = script.numbers("split");
    let body = if split.is_empty() && !script.flag("error") {
        StepBody::full(&script.body)
    } else {
        let mut steps: Vec<Step> = chunks(&script.body, &split).into_iter().map(Step::Data).collect();
        if script.flag("error") {
            steps.push(Step::Error);
        }
        StepBody::new(steps)
    };
    let mut request = Request::builder().method(method).uri("/mcp");
    for (name, value) in &script.headers {
        request = request.header(name, value);
    }
    let request = request.body(body).expect("valid parts");
    let client_headers: HeaderMap = request.headers().clone();
    let style = Style {
        sse: script.flag("sse"),
        task: script.flag("task"),
        no_state: script.flag("nostate"),
        no_route: script.flag("noroute"),
        misroute: script.flag("misroute"),
    };

    let out = exchange(&layer, request, move |seen| backend::answer(seen, style));

    for seen in &out.seen {
        if !seen.body_error {
            oracle::check_forwarded(seen, &client_headers, &script.body, binds);
        }
    }
    let received = out.received.bytes();
    if out.seen.is_empty() {
        oracle::check_refusal(out.status, &out.headers, &received);
        assert!(!out.received.error && out.received.trailers.is_none());
        return;
    }
    // The client may echo markers itself (an id, a member name the refusal quotes).
    let client_mentions = oracle::mentions_markers(data)
        || client_headers
            .values()
            .any(|v| oracle::mentions_markers(v.as_bytes()));
    if !client_mentions {
        let prefixes: Vec<String> = MARKERS.iter().map(|m| (*m).to_owned()).collect();
        oracle::assert_hidden(&prefixes, &out.headers, &out.received);
    }
    if let Some(length) = out.headers.get(http::header::CONTENT_LENGTH) {
        assert_eq!(
            length.to_str().ok(),
            Some(received.len().to_string().as_str()),
            "Content-Length"
        );
    }
    // Every envelope handed out opens for this request to what the backend sent.
    let seen = &out.seen[0];
    let principal = binds.principal_of(&seen.headers);
    let fields = oracle::request_fields(&seen.body);
    let method = fields.method.as_deref().unwrap_or("");
    let mut binding = Binding::new(method, fields.target.as_deref(), principal).with_audience(binds.audience);
    if binds.arguments
        && matches!(method, "tools/call" | "prompts/get")
        && let Ok(digest) = ArgumentsDigest::of(fields.arguments.as_deref())
    {
        binding = binding.with_arguments(digest);
    }
    let task_binding = Binding::new("tasks", None, principal).with_audience(binds.audience);
    let mut states: Vec<String> = vec![NEW_STATE.to_owned(), NEW_TASK.to_owned()];
    states.extend(mints().iter().filter_map(|m| m.decoded_state()));
    // The backend reports the pinned route, or alpha; a misrouting proxy reports gamma (an
    // unpinned request then seals gamma, the route that answered; a pinned one fails closed).
    let route = match (&seen.pinned, style.misroute) {
        (_, true) => Route::new("gamma"),
        (Some(pinned), false) => pinned.clone(),
        (None, false) => Route::new("alpha"),
    };
    // The round after the presented one: the mint whose state the backend got back (a retry of
    // a state-less mint, all of round 1, gets none back), or 1 for a first round.
    let round = match seen.head.as_ref().is_some_and(|head| head.is_retry()) {
        false => 1,
        true => {
            let restored = fields.request_state.as_deref().and_then(|state| {
                serde_json::from_str::<String>(state)
                    .ok()
                    .and_then(|state| mint_of_state(Purpose::REQUEST_STATE, &state))
            });
            restored.map_or(1, |mint| mint.round) + 1
        }
    };
    oracle::check_envelopes(
        &received,
        &script.body,
        &[
            (Purpose::REQUEST_STATE, binding),
            (Purpose::TASK_HANDLE, task_binding),
        ],
        &states,
        Some(&route),
        round,
    );
});
