//! Writes the seed corpora under `fuzz/seeds/<target>/`, from the inputs of the project's tests
//! (`crates/tower-mrtr/tests`, the crates' unit tests, `docs/envelope.md`): run
//! `cargo run --example make_seeds` in `fuzz/`. The seeds are committed; the corpora libFuzzer
//! grows from them (`fuzz/corpus/`) are not.

use std::fs;
use std::path::Path;

use tower_mrtr_fuzz::mint::mints;

const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

/// The SSE stream of `crates/tower-mrtr/tests/it/sse_relay.rs`, with the backend's state as `@S@`.
const STREAM: &str = concat!(
    ": keep-alive\n\n",
    "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n",
    "retry: 1000\r\n\r\n",
    "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"input_required soon\"}}\r\n\r\n",
    ": keep-alive\r\r",
    "id: 2\nevent: message\n",
    "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{\"ok\":{\"method\":\"roots/list\"}},\n",
    "data: \"requestState\":\"@S@\"}}\n",
    ": trailing comment\n\n",
);

fn input_required(id: &str, state: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"confirm":{{"method":"elicitation/create","params":{{"message":"Sure?","requestedSchema":{{"type":"object","properties":{{}}}}}}}}}}{state}}}}}"#
    )
}

fn tool_call(id: u32, name: &str, extra: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{"env":"prod"}}{extra},{META}}}}}"#
    )
}

fn post(options: &str, headers: &[&str], body: &str) -> String {
    let mut text = format!("{options}\n");
    for header in headers {
        text.push_str(header);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(body);
    text
}

const MCP: &[&str] = &[
    "content-type: application/json",
    "accept: application/json, text/event-stream",
    "mcp-protocol-version: 2026-07-28",
];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    MCP.iter().chain(extra).copied().collect()
}

fn canonical() -> Vec<String> {
    let mut seeds: Vec<String> = [
        "0", "-0", "-0.0", "1.0", "4.50", "2e-3", "1E30", "1e21", "1e20", "0.000001", "1e-7",
        "333333333.33333329", "9007199254740992", "-9007199254740992", "9007199254740993",
        "9007199254740993.0", "1152921504606846976.0", "18446744073709551617", "5e-324",
        "1.7976931348623157e308", "1e400", "null", "{}", "[]", "true",
        r#"{"branch":"old","repo":"acme/api"}"#,
        "{ \"repo\" : \"acme/api\",\n \"br\\u0061nch\": \"old\" }",
        r#"{"a":1,"a":2}"#,
        r#"{"a":1,"\u0061":2}"#,
        r#""\ud800""#,
        r#"{"\ud83d\ude00":1,"\ue000":2,"z":3}"#,
        r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
        r#"{"amount":9007199254740993,"to":"bob"}"#,
        r#"{"path":"a\/b","tab":"\t","ctl":"\u001f"}"#,
    ]
    .map(str::to_owned)
    .to_vec();
    seeds.push(format!("{}{}", "[".repeat(128), "]".repeat(128)));
    seeds.push(format!("{}{}", "[".repeat(129), "]".repeat(129)));
    seeds
}

fn keyring() -> Vec<String> {
    let mut seeds: Vec<String> = [
        "",
        "nocolon",
        ":AAAA",
        "bad id:AAAA",
        "a:!!!",
        "a:AAAA",
        "a:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8+",
    ]
    .map(str::to_owned)
    .to_vec();
    seeds.push(format!("k2:{K1},\n k1:{K2}"));
    seeds.push(format!(" a:{K1} ,\n b:{K1}= "));
    seeds.push(format!("a:{K1},"));
    seeds.push(format!("a:{K1},a:{K1}"));
    seeds.push(format!("# active first\nnew:{K1}\nold:{K2}\n"));
    seeds.push(format!("{}:{K1}", "x".repeat(33)));
    seeds
}

fn jsonrpc() -> Vec<String> {
    [
        "name\ndeploy\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"beta__deploy\",\"arguments\":{\"b\":1.50,\"a\":2}}}",
        "name\nb\n{\"params\":{\"arguments\":{\"z\":1e3,\"a\":\"x\"},\"name\":\"a__b\",\"_meta\":{\"k\":[1,2]}},\"id\":\"q\",\"method\":\"prompts/get\",\"jsonrpc\":\"2.0\"}",
        "name\nc\n{\"params\":{\"name\":\"a\",\"name\":\"b\"}}",
        "name\nc\n{\"params\":{\"name\":3}}",
        "cursor\n\"c2\"\n{\"id\":1,\"method\":\"tools/list\"}",
        "cursor\n\"c2\"\n{\"params\":{\"cursor\":\"c1\",\"_meta\":{}}}",
        "params/name\nx\n{\"params\":{\"name\":\"y\"}}",
        "abc\n\"abc\"\n{}",
        "x\nnot json\n[1]",
        "message \"quoted\"\n1}, \"x\":{\n{\"params\":{\"name\":\"\\u0061\"}}",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn catalog() -> Vec<String> {
    [
        "alpha:whoami,provision_cluster\nbeta:whoami,archive_repo",
        "a:x,y\nb:x,z\nc",
        "a:x\nb:x\nc:a__x",
        "a:x,x\nb:y",
        "a:t,u\nb:t",
        "a__b:x\na:b__x\nb:x",
        ":\n:",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn envelope_open() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for (i, mint) in mints().iter().enumerate() {
        let purpose = if mint.purpose == tower_mrtr::envelope::Purpose::TASK_HANDLE {
            1
        } else {
            0
        };
        let mut seed = vec![purpose, i as u8];
        seed.extend_from_slice(format!("@E{i}@").as_bytes());
        seeds.push(seed);
        let mut literal = vec![purpose, i as u8];
        literal.extend_from_slice(mint.envelope.as_bytes());
        seeds.push(literal);
        let mut v3_twin = vec![purpose, i as u8];
        v3_twin.extend_from_slice(format!("@P{i}@").as_bytes());
        seeds.push(v3_twin);
    }
    for text in [
        "",
        "mrtr4.",
        "mrtr3.",
        "mrtr4.AwJrMg",
        "mrtr3.BAJrMg",
        "mrtr2.",
        "mrtr1.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_3l38z3APz2l8zF",
        "mrtr2.AQJrMUBBQkNERUZHSElKS0xNTk9QUVJTVFVWV9Q5BNPIvCkWj_3l38z3APz2l8zF",
        "mrtr2.AAAA",
        "mrtr2.AgJrMg",
        "mrtr2.Ag==",
    ] {
        let mut seed = vec![0, 0];
        seed.extend_from_slice(text.as_bytes());
        seeds.push(seed);
    }
    seeds
}

fn request_path() -> Vec<String> {
    let retry = |id, name: &str, envelope: &str| {
        tool_call(
            id,
            name,
            &format!(r#","inputResponses":{{"ok":{{"action":"accept"}}}},"requestState":"{envelope}""#),
        )
    };
    let task = |method: &str, envelope: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":5,"method":"{method}","params":{{"taskId":"{envelope}",{META}}}}}"#)
    };
    let listen = |ids: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":6,"method":"subscriptions/listen","params":{{"notifications":{{"taskIds":[{ids}]}},{META}}}}}"#
        )
    };
    vec![
        post(
            "POST",
            &with(&["mcp-method: tools/call", "mcp-name: deploy"]),
            &tool_call(1, "deploy", ""),
        ),
        post(
            "POST sse",
            &with(&["mcp-method: tools/call", "mcp-name: deploy"]),
            &tool_call(1, "deploy", ""),
        ),
        post(
            "POST task",
            &with(&["mcp-method: tools/call"]),
            &tool_call(1, "deploy", ""),
        ),
        post(
            "POST nostate noroute default",
            &with(&[]),
            &tool_call(1, "deploy", ""),
        ),
        post(
            "POST",
            &with(&["mcp-method: tools/call", "mcp-name: deploy"]),
            &retry(2, "deploy", "@E0@"),
        ),
        post("POST misroute", &with(&[]), &retry(2, "deploy", "@E0@")),
        post(
            "POST",
            &with(&["mcp-method: tools/call", "mcp-name: other"]),
            &retry(2, "deploy", "@E0@"),
        ),
        post("POST", &with(&[]), &retry(2, "other", "@E0@")),
        post("POST noargs", &with(&[]), &retry(2, "deploy", "@E0@")),
        post("POST", &with(&[]), &retry(3, "deploy", "@E3@")),
        post(
            "POST principal",
            &with(&["x-user: alice"]),
            &retry(4, "deploy", "@E4@"),
        ),
        post("POST principal require", &with(&[]), &retry(4, "deploy", "@E4@")),
        post("POST", &with(&[]), &retry(5, "deploy", "@E5@")),
        post("POST sse", &with(&[]), &retry(6, "deploy", "@E6@")),
        post("POST", &with(&[]), &retry(7, "deploy", "@E11@")),
        post("POST", &with(&[]), &retry(8, "deploy", "@E7@")),
        post(
            "POST",
            &with(&["mcp-method: prompts/get", "mcp-name: greet"]),
            r#"{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"greet","requestState":"@E1@"}}"#,
        ),
        post(
            "POST",
            &with(&["mcp-method: resources/read", "mcp-name: file:///notes.txt"]),
            r#"{"jsonrpc":"2.0","id":10,"method":"resources/read","params":{"uri":"file:///notes.txt","requestState":"@E2@"}}"#,
        ),
        post(
            "POST",
            &with(&[]),
            r#"{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"arguments":{"to":"bob","amount":9007199254740993},"name":"transfer","requestState":"@E10@"}}"#,
        ),
        post(
            "POST",
            &with(&[]),
            r#"{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"arguments":{"to":"bob","amount":9007199254740992},"name":"transfer","requestState":"@E10@"}}"#,
        ),
        post(
            "POST",
            &with(&["mcp-method: tasks/get", "mcp-name: @E7@"]),
            &task("tasks/get", "@E7@"),
        ),
        post(
            "POST",
            &with(&["mcp-method: tasks/cancel", "mcp-name: @E8@"]),
            &task("tasks/cancel", "@E8@"),
        ),
        post(
            "POST principal",
            &with(&["mcp-name: @E9@", "x-user: alice"]),
            &task("tasks/update", "@E9@"),
        ),
        post("POST", &with(&["mcp-name: @E7@"]), &task("tasks/get", "@E0@")),
        post("POST", &with(&[]), &listen(r#""@E7@","@E7@""#)),
        post("POST", &with(&[]), &listen(r#""@E7@","@E8@""#)),
        post(
            "POST",
            &with(&[]),
            &format!("[{},{}]", tool_call(1, "deploy", ""), tool_call(2, "x", "")),
        ),
        post(
            "POST",
            &with(&[]),
            &format!("[{},{}]", retry(1, "deploy", "@E0@"), tool_call(2, "x", "")),
        ),
        post(
            "POST",
            &with(&["mcp-method: tools/list"]),
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/list","params":{"requestState":"@E0@"}}"#,
        ),
        post(
            "POST",
            &with(&["mcp-method: ping"]),
            r#"{"jsonrpc":"2.0","id":12,"method":"ping"}"#,
        ),
        post("POST", &with(&[]), r#"{"jsonrpc":"2.0","id":13,"result":{}}"#),
        post("GET", &["accept: text/event-stream"], ""),
        post("DELETE", &with(&[]), &retry(2, "deploy", "@E0@")),
        post(
            "POST",
            &with(&[]),
            &format!("\u{feff}{}", retry(2, "deploy", "BKSTATE-E0.")),
        ),
        post(
            "POST",
            &with(&[]),
            &format!("{} {{}}", tool_call(1, "deploy", "")),
        ),
        post(
            "POST",
            &with(&[]),
            &tool_call(1, "deploy", r#","RequestState":"BKSTATE-E0.""#),
        ),
        post(
            "POST",
            &with(&[]),
            &tool_call(
                1,
                "deploy",
                r#","requestState":"@E0@","requestState":"BKSTATE-E0.""#,
            ),
        ),
        post(
            "POST",
            &with(&[]),
            &tool_call(1, "deploy", r#","requeſtState":"BKSTATE-E0.""#),
        ),
        post(
            "POST",
            &with(&["content-encoding: gzip"]),
            &retry(2, "deploy", "@E0@"),
        ),
        post(
            "POST",
            &with(&["content-encoding: identity", "content-encoding: br"]),
            &tool_call(1, "deploy", ""),
        ),
        post("POST limit=64", &with(&[]), &tool_call(1, "deploy", "")),
        post(
            "POST",
            &with(&["content-length: 99999999999"]),
            &tool_call(1, "deploy", ""),
        ),
        post("POST split=3,50,51,120", &with(&[]), &retry(2, "deploy", "@E0@")),
        post("POST split=10 error", &with(&[]), &tool_call(1, "deploy", "")),
        post(
            "POST",
            &with(&[]),
            &format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        ),
        post("POST", &with(&[]), "\u{0}\u{1}not json"),
        post("POST", &with(&[]), r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
        post("POST envlimit=40", &with(&[]), &retry(2, "deploy", "@E0@")),
    ]
}

fn answers(sse: bool) -> Vec<String> {
    let wrap = |body: &str| -> String {
        if sse {
            format!(": keep-alive\n\nid: 1\nevent: message\ndata: {body}\n\n")
        } else {
            body.to_owned()
        }
    };
    let ir = |id: &str| input_required(id, r#","requestState":"@S@""#);
    let task = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"task","taskId":"@T@","status":"working","ttlMs":60000}}}}"#
        )
    };
    let got = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"taskId":"@T@","status":"working","statusMessage":"working on it"}}}}"#
        )
    };
    let complete = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"done"}}]}}}}"#
        )
    };
    let mut seeds = vec![
        format!("call route=alpha\n\n{}", wrap(&ir("7"))),
        format!("call route=alpha\n\n{}", wrap(&input_required("7", ""))),
        format!("call\n\n{}", wrap(&ir("7"))),
        format!("call default=alpha\n\n{}", wrap(&ir("7"))),
        format!("call route=alpha\n\n{}", wrap(&task("7"))),
        format!("call route=alpha\n\n{}", wrap(&complete("7"))),
        format!("call route=alpha envlimit=100\n\n{}", wrap(&ir("7"))),
        format!("call route=alpha limit=100\n\n{}", wrap(&ir("7"))),
        format!("call route=alpha\ncontent-encoding: gzip\n\n{}", wrap(&ir("7"))),
        format!(
            "call route=alpha\n\n{}",
            wrap(
                r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input\u005frequired","requestState":"@S@"}}"#
            )
        ),
        format!(
            "call route=alpha\n\n{}",
            wrap(r#"{"jsonrpc":"2.0","id":7,"result":{"ResultType":"input_required","requestState":"@S@"}}"#)
        ),
        format!(
            "call route=alpha\n\n{}",
            wrap(
                r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","requestState":"@S@","requestState":"@S@"}}"#
            )
        ),
        format!(
            "call route=alpha\n\n{}",
            wrap(
                r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","requestState":{"s":"@S@"}}}"#
            )
        ),
        format!(
            "call route=alpha\n\n{}",
            wrap(
                r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","requestState":"@S@ \"quoted\" \u00e9"}}"#
            )
        ),
        format!("call route=alpha\n\n\u{feff}{}", ir("7")),
        format!("call route=alpha\n\n{} trailing", ir("7")),
        format!("call route=alpha\n\n[{},{}]", ir("7"), complete("8")),
        format!("retry route=alpha\n\n{}", wrap(&ir("8"))),
        format!("retry route=beta\n\n{}", wrap(&ir("8"))),
        format!("retry-k1 route=beta\n\n{}", wrap(&ir("9"))),
        format!("retry-big route=beta\n\n{}", wrap(&ir("\"t\""))),
        format!("prompt route=beta\n\n{}", wrap(&ir("10"))),
        format!("prompt route=beta\n\n{}", wrap(&task("10"))),
        format!("prompt-retry route=beta\n\n{}", wrap(&ir("11"))),
        format!("read route=alpha\n\n{}", wrap(&ir("12"))),
        format!("read-retry route=alpha\n\n{}", wrap(&ir("13"))),
        format!("as-alice route=alpha\n\n{}", wrap(&ir("14"))),
        format!("task-get route=alpha\n\n{}", wrap(&got("15"))),
        format!(
            "task-get route=alpha\n\n{}",
            wrap(
                r#"{"jsonrpc":"2.0","id":15,"result":{"taskId":"@T@","related":{"taskIds":["@T@","other"]}}}"#
            )
        ),
        format!("task-get route=beta\n\n{}", wrap(&got("15"))),
        format!("task-cancel route=beta\n\n{}", wrap(&got("16"))),
        format!(
            "task-get route=alpha\n\n{}",
            wrap(r#"{"jsonrpc":"2.0","id":15,"result":{"TaskId":"@T@","status":"working"}}"#)
        ),
        format!(
            "listen route=alpha\n\n{}",
            wrap(
                r#"{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"@T@","status":"completed"}}"#
            )
        ),
        format!("list route=alpha\n\n{}", wrap(&ir("18"))),
        format!("batch route=alpha\n\n[{},{}]", ir("19"), complete("20")),
        format!("batch route=alpha\n\n[{},{}]", task("19"), complete("20")),
        format!("batch route=alpha\n\n{}", ir("19")),
        format!(
            "batch-plain route=alpha\n\n[{},{}]",
            complete("21"),
            complete("22")
        ),
        format!("get route=alpha\n\n{}", wrap(&ir("null"))),
        format!("get\n\n{}", wrap(&complete("null"))),
        format!(
            "call route=alpha status=500\n\n{}",
            wrap(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"boom"}}"#)
        ),
        format!("call route=alpha reset=60\n\n{}", wrap(&ir("7"))),
        format!("call route=alpha trailers\n\n{}", wrap(&ir("7"))),
        format!("call route=alpha\ncontent-type: text/html\n\n{}", ir("7")),
        format!(
            "call route=alpha\ncontent-type: text/event-stream\ncontent-type: application/json\n\n{}",
            ir("7")
        ),
        format!(
            "call route=alpha\ncontent-type: application/json\ncontent-type: text/event-stream\n\ndata: {}\n\n",
            ir("7")
        ),
        format!(
            "call route=alpha\nx-large: {}\n\n{}",
            "h".repeat(4096),
            wrap(&ir("7"))
        ),
    ];
    if sse {
        seeds.extend([
            format!("call route=alpha cut=1,2,3,40,41,100,200,201,300 stall=0,2,5\n\n{STREAM}"),
            format!("call route=alpha reset=400\n\n{STREAM}"),
            format!("call route=alpha limit=120\n\n{STREAM}"),
            format!("call route=alpha trailers cut=17\n\n{STREAM}"),
            format!("call route=alpha\n\nretry: 10\r\n: comment\r\nevent: message\rdata: {}\r\r", ir("7")),
            format!("call route=alpha\n\n{}", ir("7")),
            format!("call route=alpha cut=30\n\ndata: {}", ir("7")),
            format!("list route=alpha cut=5\n\n{STREAM}"),
            "listen route=alpha cut=9\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tasks/status\",\"params\":{\"taskId\":\"@T@\"}}\n\n: ping\n\n".to_string(),
        ]);
    }
    seeds
}

fn write(target: &str, seeds: impl IntoIterator<Item = Vec<u8>>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target);
    if dir.exists() {
        fs::remove_dir_all(&dir).expect("clear old seeds");
    }
    fs::create_dir_all(&dir).expect("seed directory");
    let mut count = 0;
    for (i, seed) in seeds.into_iter().enumerate() {
        fs::write(dir.join(format!("seed-{i:03}")), seed).expect("write seed");
        count += 1;
    }
    println!("{target}: {count} seeds");
}

fn bytes(seeds: Vec<String>) -> Vec<Vec<u8>> {
    seeds.into_iter().map(String::into_bytes).collect()
}

fn main() {
    write("canonical", bytes(canonical()));
    write("keyring_parse", bytes(keyring()));
    write("gateway_jsonrpc", bytes(jsonrpc()));
    write("gateway_catalog", bytes(catalog()));
    write("envelope_open", envelope_open());
    write("request_path", bytes(request_path()));
    write("json_response", bytes(answers(false)));
    write("sse_response", bytes(answers(true)));
}
