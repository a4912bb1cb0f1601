//! Edge cases of the splices [`outgoing`] and [`Translation`] make: every id a client or backend
//! may use (numbers, strings with escapes), whitespace anywhere, members in any order, each
//! rewrite read back and compared with the same change made on the parsed message.

use super::*;
use serde_json::{Value, json};

/// Ids in the shapes JSON-RPC allows, written as clients write them.
const IDS: [&str; 8] = [
    "7",
    "-0",
    "1.50e3",
    r#""a""#,
    r#""q\"uo\\te""#,
    r#""\u00e9\n""#,
    r#""""#,
    "12345678901234567890",
];

/// `text` with the whitespace JSON allows put between every token outside strings.
fn spaced(text: &str, gap: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '}' | '[' | ']' | ':' | ',' => {
                out.push_str(gap);
                out.push(c);
                out.push_str(gap);
            }
            _ => out.push(c),
        }
    }
    out
}

fn parsed(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

#[test]
fn requests_keep_every_byte_but_the_id_and_the_meta() {
    let metas = [
        "",
        r#","_meta":{}"#,
        r#","_meta":{"progressToken":"p"}"#,
        r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7,"x\"y":[1]}"#,
        r#","_meta":{"io.modelcontextprotocol/clientCapabilities":{"a":{}}}"#,
    ];
    for id in IDS {
        for meta in metas {
            for gap in ["", " ", "\n\t "] {
                for id_first in [true, false] {
                    let params = format!(r#"{{"name":"echo","arguments":{{"n":1.50,"s":"a\u0041"}}{meta}}}"#);
                    let body = if id_first {
                        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
                    } else {
                        format!(r#"{{"params":{params},"method":"tools/call","id":{id},"jsonrpc":"2.0"}}"#)
                    };
                    let body = spaced(&body, gap);
                    for (legacy, progress) in [(true, false), (false, true), (false, false)] {
                        let out = outgoing(body.as_bytes(), r#""mrtr-9""#, legacy, progress).unwrap();
                        let text = std::str::from_utf8(&out.body).unwrap();
                        let mut expected = parsed(body.as_bytes());
                        expected["id"] = json!("mrtr-9");
                        let token = expected["params"]["_meta"]["progressToken"].clone();
                        if let Some(meta) = expected
                            .pointer_mut("/params/_meta")
                            .and_then(Value::as_object_mut)
                        {
                            if legacy {
                                meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
                            }
                            if progress && meta.contains_key("progressToken") {
                                meta.insert("progressToken".into(), json!("mrtr-9"));
                            }
                            if meta.is_empty() {
                                expected["params"].as_object_mut().unwrap().remove("_meta");
                            }
                        }
                        assert_eq!(parsed(&out.body), expected, "{body} -> {text}");
                        assert_eq!(parsed(out.id.unwrap().as_bytes()), parsed(id.as_bytes()));
                        let replaced = progress && !token.is_null();
                        assert_eq!(
                            out.progress.map(|t| parsed(t.as_bytes())),
                            replaced.then_some(token)
                        );
                        assert!(text.contains(r#""n":1.50"#.replace(':', &format!("{gap}:{gap}")).as_str()));
                        assert!(text.contains(r#""a\u0041""#), "escapes kept as written: {text}");
                    }
                }
            }
        }
    }
}

#[test]
fn requests_that_are_not_objects_or_repeat_a_member_are_refused() {
    for body in [
        "[1]",
        "7",
        r#"{"id":1,"params":[1]}"#,
        r#"{"id":1,"id":2,"params":{}}"#,
        r#"{"id":1,"params":{"a":1,"a":2}}"#,
        r#"{"id":1,"params":{"_meta":[]}}"#,
        r#"{"id":1,"params":{"_meta":{"k":1,"k":1}}}"#,
        r#"{"id":1"#,
    ] {
        assert!(outgoing(body.as_bytes(), "1", true, true).is_none(), "{body}");
    }
}

#[test]
fn answers_keep_every_byte_but_the_id_and_what_is_added() {
    let results = [
        r#"{"content":[{"type":"text","text":"a\"b"}],"n":1.50}"#,
        "{}",
        r#"{"resultType":"complete","tools":[]}"#,
        r#"{"tools":[],"ttlMs":5}"#,
    ];
    for theirs in IDS {
        for result in results {
            for gap in ["", " ", "\r\n"] {
                for cacheable in [false, true] {
                    let body = spaced(
                        &format!(r#"{{"jsonrpc":"2.0","result":{result},"id":"mrtr-7"}}"#),
                        gap,
                    );
                    let reply: Reply = Arc::new(|_| {});
                    let mut t = Translation::new(r#""mrtr-7""#, theirs, reply);
                    if cacheable {
                        t = t.for_method("tools/list");
                    }
                    let out = t.one(Bytes::from(body.clone()));
                    let mut expected = parsed(body.as_bytes());
                    expected["id"] = parsed(theirs.as_bytes());
                    let object = expected["result"].as_object_mut().unwrap();
                    object.entry("resultType").or_insert(json!("complete"));
                    if cacheable {
                        object.entry("ttlMs").or_insert(json!(0));
                        object.entry("cacheScope").or_insert(json!("private"));
                    }
                    let text = String::from_utf8_lossy(&out).into_owned();
                    assert_eq!(parsed(&out), expected, "{body} -> {text}");
                    if result.contains("1.50") {
                        assert!(text.contains("1.50"), "raw numbers kept: {text}");
                    }
                    assert!(t.answered);
                }
            }
        }
    }
}

#[test]
fn an_error_without_an_id_gets_the_clients() {
    for theirs in IDS {
        for body in [
            r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"}}"#,
            r#" { "error" : { "code" : 1 , "message" : "}" } , "jsonrpc" : "2.0" } "#,
            r#"{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"id":null}"#,
        ] {
            let reply: Reply = Arc::new(|_| {});
            let mut t = Translation::new(r#""mrtr-7""#, theirs, reply);
            let out = parsed(&t.one(Bytes::from_static(body.as_bytes())));
            assert_eq!(out["id"], parsed(theirs.as_bytes()), "{body}");
            assert_eq!(out["error"], parsed(body.as_bytes())["error"]);
        }
    }
}
