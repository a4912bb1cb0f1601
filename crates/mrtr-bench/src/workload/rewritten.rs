//! The answers the gateway rewrites, checked: an answer that went to the backend under an id of
//! the gateway's own (legacy HTTP and stdio backends; a legacy client's call through the front),
//! an `initialize`-era backend's result given its `resultType`, and a catalog merged over
//! several backends. It may import the rest of [`crate::workload`] and [`crate::mcp`],
//! [`crate::messages`].

use super::{Cell, SSE_EVENTS};
use crate::mcp;
use crate::messages::{self, excerpt};

/// The names the gateway gives the mock backends: the first two for
/// [`Hop::Gateway2`](super::Hop::Gateway2), the first N for [`Hop::Merge`](super::Hop::Merge).
pub const BACKEND_NAMES: [&str; 10] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
];

/// An answer that went to the backend under an id of the gateway's own: the backend's messages,
/// in order, parsed, the client's id restored, with `resultType: "complete"` added to the result
/// when `complete` (an `initialize`-era backend's, translated) and nothing else changed.
///
/// The echo tool fills its answer to 256 bytes with the id the backend saw, which is the
/// gateway's: the text must be the backend's filler, as long as some id of 1 to 20 digits leaves.
pub(super) fn check_translated(
    cell: Cell,
    id: &str,
    content_type: Option<&str>,
    body: &[u8],
    complete: bool,
) -> Result<(), String> {
    let (framing, backend) = match cell {
        Cell::LegacyHttp { sse: true } => {
            ("text/event-stream", mcp::progress_events(id, SSE_EVENTS).concat())
        }
        _ => ("application/json", mcp::echo_answer(id, Cell::ECHO_SIZE)),
    };
    if messages::Framing::of(content_type)? != messages::Framing::of(Some(framing))? {
        return Err(format!("answer is {content_type:?}, the backend's {framing}"));
    }
    let mut expected = messages::of_answer(Some(framing), &backend).expect("the backend's own answers parse");
    let got = messages::of_answer(content_type, body)?;
    if let Some(result) = expected
        .last_mut()
        .and_then(|m| m.get_mut("result"))
        .and_then(serde_json::Value::as_object_mut)
    {
        if complete {
            result.insert("resultType".to_owned(), "complete".into());
        }
        let text = got
            .last()
            .and_then(|m| m["result"]["content"][0]["text"].as_str());
        if let (false, Some(text)) = (cell == Cell::LegacyHttp { sse: true }, text) {
            // `echo_answer` with an empty id is the answer without its filler and id.
            let room = Cell::ECHO_SIZE - mcp::echo_answer("", 0).len();
            if (room - 20..room).contains(&text.len()) && text.bytes().all(|b| b == b'x') {
                result["content"][0]["text"] = text.into();
            }
        }
    }
    if got.len() == expected.len() && got.iter().zip(&expected).all(|(g, e)| messages::same_json(g, e)) {
        Ok(())
    } else {
        Err(format!("not the backend's answer, translated: {}", excerpt(body)))
    }
}

/// The gateway's merged catalog of the first `backends` mock backends: every tool once per
/// backend, prefixed by its name.
pub(super) fn check_merged_list(id: u64, body: &[u8], backends: usize) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("merged list is not JSON: {e}"))?;
    if value["id"].as_u64() != Some(id) {
        return Err(format!("merged list answers id {} instead of {id}", value["id"]));
    }
    let mut names: Vec<&str> = value["result"]["tools"]
        .as_array()
        .ok_or("merged list has no tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    let mut expected: Vec<String> = BACKEND_NAMES[..backends.min(BACKEND_NAMES.len())]
        .iter()
        .flat_map(|b| mcp::TOOLS.iter().map(move |t| format!("{b}__{t}")))
        .collect();
    expected.sort_unstable();
    (names == expected)
        .then_some(())
        .ok_or_else(|| format!("merged list names {names:?}"))
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;
    use crate::workload::{Hop, Workload};

    const JSON: Option<&str> = Some("application/json");
    const SSE: Option<&str> = Some("text/event-stream");

    fn check(cell: Cell, hop: Hop, content_type: Option<&str>, id: u64, body: &[u8]) -> Result<(), String> {
        Workload::new(cell, hop, None).check(id, StatusCode::OK, content_type, body)
    }

    /// `answer` as the gateway gives it back: the backend saw `ours` as the id, the client
    /// gets `theirs`, and (`complete`) a `resultType` is added at the end of the result.
    fn through_gateway(ours: &str, theirs: &str, complete: bool) -> Vec<u8> {
        let answer = String::from_utf8(mcp::echo_answer(ours, Cell::ECHO_SIZE)).unwrap();
        let answer = answer.replacen(&format!(r#""id":{ours}"#), &format!(r#""id":{theirs}"#), 1);
        match complete {
            true => answer.replace(
                r#""isError":false}"#,
                r#""isError":false,"resultType":"complete"}"#,
            ),
            false => answer,
        }
        .into_bytes()
    }

    #[test]
    fn a_legacy_backends_answer_must_come_back_translated() {
        let cell = Cell::LegacyHttp { sse: false };
        assert!(
            check(
                cell,
                Hop::LegacyHttp,
                JSON,
                21,
                &through_gateway("1234567", "21", true)
            )
            .is_ok()
        );
        let error = check(
            cell,
            Hop::LegacyHttp,
            JSON,
            21,
            &through_gateway("1234567", "21", false),
        )
        .unwrap_err();
        assert!(error.contains("translated"), "no resultType: {error}");
        assert!(
            check(
                cell,
                Hop::LegacyHttp,
                JSON,
                22,
                &through_gateway("1234567", "21", true)
            )
            .is_err()
        );
        let changed = String::from_utf8(through_gateway("1234567", "21", true))
            .unwrap()
            .replacen("xx", "xy", 1);
        assert!(check(cell, Hop::LegacyHttp, JSON, 21, changed.as_bytes()).is_err());
        assert!(
            check(
                cell,
                Hop::LegacyHttp,
                SSE,
                21,
                &through_gateway("1234567", "21", true)
            )
            .is_err()
        );
        // A modern stdio backend's answer gets its id back and nothing added.
        let stdio = Cell::Stdio { legacy: false };
        assert!(check(stdio, Hop::Stdio, JSON, 21, &through_gateway("3", "21", false)).is_ok());
        assert!(check(stdio, Hop::Stdio, JSON, 21, &through_gateway("3", "21", true)).is_err());
        let legacy_stdio = Cell::Stdio { legacy: true };
        assert!(
            check(
                legacy_stdio,
                Hop::LegacyStdio,
                JSON,
                21,
                &through_gateway("3", "21", true)
            )
            .is_ok()
        );
        // Over its pipes, the process's own answer under the driver's id, in either era.
        for cell in [stdio, legacy_stdio] {
            let pipe = Hop::Pipe {
                legacy: cell == legacy_stdio,
            };
            assert!(check(cell, pipe, JSON, 21, &mcp::echo_answer("21", Cell::ECHO_SIZE)).is_ok());
            assert!(check(cell, pipe, JSON, 21, &mcp::echo_answer("22", Cell::ECHO_SIZE)).is_err());
            assert!(check(cell, pipe, JSON, 21, &through_gateway("21", "21", true)).is_err());
        }
    }

    #[test]
    fn a_legacy_backends_sse_answer_needs_every_event_and_the_result_translated() {
        let cell = Cell::LegacyHttp { sse: true };
        let frames = mcp::progress_events("23", SSE_EVENTS);
        let translated = |frames: &[Vec<u8>]| {
            String::from_utf8(frames.concat())
                .unwrap()
                .replace(
                    r#""isError":false}"#,
                    r#""isError":false,"resultType":"complete"}"#,
                )
                .into_bytes()
        };
        assert!(check(cell, Hop::LegacyHttp, SSE, 23, &translated(&frames)).is_ok());
        assert!(check(cell, Hop::LegacyHttp, SSE, 23, &frames.concat()).is_err());
        let mut missing = frames.clone();
        missing.remove(3);
        assert!(check(cell, Hop::LegacyHttp, SSE, 23, &translated(&missing)).is_err());
    }

    #[test]
    fn a_merged_list_names_every_backends_tools() {
        let names = |backends: &[&str]| -> Vec<u8> {
            let tools: Vec<String> = backends
                .iter()
                .flat_map(|b| {
                    mcp::TOOLS
                        .iter()
                        .map(move |t| format!(r#"{{"name":"{b}__{t}"}}"#))
                })
                .collect();
            format!(
                r#"{{"jsonrpc":"2.0","id":31,"result":{{"tools":[{}]}}}}"#,
                tools.join(",")
            )
            .into_bytes()
        };
        let three = Cell::Merge { backends: 3 };
        assert!(check(three, Hop::Merge(3), JSON, 31, &names(&BACKEND_NAMES[..3])).is_ok());
        assert!(check(three, Hop::Merge(3), JSON, 31, &names(&BACKEND_NAMES[..2])).is_err());
        assert!(check(three, Hop::Merge(3), JSON, 32, &names(&BACKEND_NAMES[..3])).is_err());
        let ten = Cell::Merge { backends: 10 };
        assert!(check(ten, Hop::Merge(10), JSON, 31, &names(&BACKEND_NAMES)).is_ok());
    }
}
