//! `json-validators MODE BODY N`: checks BODY (`call`: the benchmark's 226-byte `tools/call`;
//! `dense`: 4 KiB of arguments with many small members; `text`: 4 KiB of prose in one string) N
//! times with one validator, so that callgrind's counts at N = 1001 and N = 1 give the cost of
//! one check. MODE: `std` / `simdutf8` (UTF-8 only), `serde` (serde_json, `IgnoredAny`),
//! `simdjson` (simd-json's tape, into reused buffers, from a copy of the body it may modify),
//! `sonic` (sonic-rs, `IgnoredAny`), `none` (the loop alone).

use std::hint::black_box;

use serde::de::IgnoredAny;

const CALL: &str = r#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"size":256},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#;

fn body(kind: &str) -> Vec<u8> {
    let wrap = |arguments: String| {
        format!(r#"{{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{{"name":"echo","arguments":{arguments},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}}}}"#)
            .into_bytes()
    };
    match kind {
        "call" => CALL.as_bytes().to_vec(),
        "text" => {
            let text = "lorem ipsum dolor sit amet, consectetur adipiscing elit ".repeat(70);
            wrap(format!(r#"{{"text":"{text}"}}"#))
        }
        "dense" => {
            let mut arguments = String::from("{");
            let mut i = 0;
            while arguments.len() < 4000 {
                arguments.push_str(&format!(
                    r#""key{i}":"value with some text {i}","n{i}":{i}.5,"a{i}":[1,2,{{"x":true}}],"#
                ));
                i += 1;
            }
            arguments.push_str(r#""end":null}"#);
            wrap(arguments)
        }
        other => panic!("unknown body {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, kind, n] = &args[..] else {
        panic!("usage: json-validators MODE BODY N");
    };
    let n: usize = n.parse().expect("N is a number");
    let input = body(kind);
    let mut buffers = simd_json::Buffers::new(input.len());
    let mut copy = input.clone();
    let mut valid = 0usize;
    for _ in 0..n {
        let bytes = black_box(&input[..]);
        let ok = match mode.as_str() {
            "std" => std::str::from_utf8(bytes).is_ok(),
            "simdutf8" => simdutf8::basic::from_utf8(bytes).is_ok(),
            "serde" => serde_json::from_slice::<IgnoredAny>(bytes).is_ok(),
            "simdjson" => {
                copy.clear();
                copy.extend_from_slice(bytes);
                simd_json::Deserializer::from_slice_with_buffers(&mut copy, &mut buffers).is_ok()
            }
            "sonic" => sonic_rs::from_slice::<IgnoredAny>(bytes).is_ok(),
            "none" => true,
            other => panic!("unknown mode {other}"),
        };
        valid += usize::from(ok);
    }
    assert_eq!(valid, n, "every body is valid");
    println!("{} bytes, simd-json implementation {:?}", input.len(), simd_json::Deserializer::algorithm());
}
