//! The JSON-RPC messages an answer carries, whatever its framing: a JSON body holds one, an SSE
//! stream one per event.
//!
//! Our own hops pass the backend's bytes through, so their answers are compared byte for byte.
//! A peer gateway may legitimately frame the same messages differently (agentgateway answers every
//! request with an SSE stream) and re-serialise them (other key order, other whitespace), so its
//! answers are compared as parsed messages, in order.
//!
//! ```
//! use mrtr_bench::messages;
//!
//! let sse = b"event: message\ndata: {\"id\":1,\ndata: \"jsonrpc\":\"2.0\",\"result\":{}}\n\n";
//! let parsed = messages::of_answer(Some("text/event-stream"), sse).unwrap();
//! let expected = messages::of_answer(Some("application/json"), br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
//! assert_eq!(parsed, expected);
//! ```

use serde_json::Value;

/// How an answer body is framed, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `application/json`: the body is one JSON-RPC message.
    Json,
    /// `text/event-stream`: one JSON-RPC message per event's `data`.
    Sse,
}

impl Framing {
    /// The framing a `Content-Type` value declares (parameters such as `charset` ignored).
    pub fn of(content_type: Option<&str>) -> Result<Self, String> {
        let Some(value) = content_type else {
            return Err("answer has no Content-Type".to_owned());
        };
        let essence = value.split(';').next().unwrap_or_default().trim();
        if essence.eq_ignore_ascii_case("application/json") {
            Ok(Framing::Json)
        } else if essence.eq_ignore_ascii_case("text/event-stream") {
            Ok(Framing::Sse)
        } else {
            Err(format!("answer has Content-Type {value:?}, neither JSON nor SSE"))
        }
    }
}

/// The JSON-RPC messages of an answer with this `Content-Type`, in order.
///
/// SSE events without data (a resumable stream's priming event) carry no message and are
/// skipped; every other event's data must be one JSON value.
pub fn of_answer(content_type: Option<&str>, body: &[u8]) -> Result<Vec<Value>, String> {
    match Framing::of(content_type)? {
        Framing::Json => serde_json::from_slice(body)
            .map(|value| vec![value])
            .map_err(|e| format!("JSON answer does not parse ({e}): {}", excerpt(body))),
        Framing::Sse => sse_data(body)?
            .into_iter()
            .filter(|data| !data.is_empty())
            .map(|data| {
                serde_json::from_str(&data).map_err(|e| {
                    format!(
                        "SSE event data does not parse ({e}): {}",
                        excerpt(data.as_bytes())
                    )
                })
            })
            .collect(),
    }
}

/// The `data` of every event of an SSE stream, as the event-stream rules of the HTML standard
/// read them: lines end in CRLF, LF or CR; a blank line ends an event; `data` lines of one event
/// are joined with LF; one space after the colon is dropped; comments and other fields are
/// ignored.
///
/// A stream that ends inside an event (no blank line after its last field) is refused: a reader
/// would drop that event, so a truncated answer cannot pass.
pub fn sse_data(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("SSE answer is not UTF-8: {e}"))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut events = Vec::new();
    let mut data: Option<String> = None;
    let mut pending = false;
    let mut rest = text;
    while !rest.is_empty() {
        let Some(end) = memchr::memchr2(b'\r', b'\n', rest.as_bytes()) else {
            return Err(format!(
                "SSE answer ends inside a line: {}",
                excerpt(rest.as_bytes())
            ));
        };
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[end + skip..];
        if line.is_empty() {
            if let Some(mut joined) = data.take() {
                joined.pop(); // the LF after the last data line
                events.push(joined);
            }
            pending = false;
            continue;
        }
        pending = true;
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            let buffer = data.get_or_insert_with(String::new);
            buffer.push_str(value);
            buffer.push('\n');
        }
    }
    if pending {
        return Err("SSE answer ends inside an event (no blank line after it)".to_owned());
    }
    Ok(events)
}

/// Whether two JSON values are the same as JSON means it: objects whatever the order of their
/// members, numbers by value (`1` and `1.0` are one number; a peer that reads a progress count
/// into a float writes the latter).
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i128(), y.as_i128()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64().zip(y.as_f64()).is_some_and(|(x, y)| x == y),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// The start of `bytes`, for messages.
pub fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX)]);
    if bytes.len() > MAX {
        format!("{text}…")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_follows_the_content_type() {
        assert_eq!(Framing::of(Some("application/json")), Ok(Framing::Json));
        assert_eq!(
            Framing::of(Some("Application/JSON; charset=utf-8")),
            Ok(Framing::Json)
        );
        assert_eq!(Framing::of(Some("text/event-stream")), Ok(Framing::Sse));
        assert!(Framing::of(Some("text/plain")).is_err());
        assert!(Framing::of(None).is_err());
        // An SSE body declared as JSON is not JSON.
        assert!(of_answer(Some("application/json"), b"data: {}\n\n").is_err());
    }

    #[test]
    fn sse_events_are_read_as_the_standard_reads_them() {
        let body = "\u{feff}: comment\r\nid: 1\r\ndata\r\n\r\nevent: message\rdata:{\"a\":\rdata:  1}\r\rretry: 5\n\ndata: x\n\n";
        assert_eq!(
            sse_data(body.as_bytes()).unwrap(),
            vec!["".to_owned(), "{\"a\":\n 1}".to_owned(), "x".to_owned()]
        );
        // The empty event (a priming event) carries no message.
        let values = of_answer(Some("text/event-stream"), &body.as_bytes()[..body.len() - 9]).unwrap();
        assert_eq!(values, vec![serde_json::json!({"a": 1})]);
    }

    #[test]
    fn json_sameness_is_by_value() {
        use serde_json::json;
        assert!(same_json(
            &json!({"a": 1, "b": [1, "x"]}),
            &json!({"b": [1.0, "x"], "a": 1})
        ));
        assert!(!same_json(&json!({"a": 1}), &json!({"a": 1.5})));
        assert!(!same_json(&json!({"a": 1}), &json!({"a": "1"})));
        assert!(!same_json(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(!same_json(&json!([1, 2]), &json!([2, 1])));
        assert!(!same_json(&json!(u64::MAX), &json!(u64::MAX - 1)));
    }

    #[test]
    fn truncated_or_broken_streams_are_refused() {
        assert!(sse_data(b"data: {}\n").is_err(), "no blank line after the event");
        assert!(sse_data(b"data: {}").is_err(), "ends inside a line");
        assert!(sse_data(b"data: \xff\n\n").is_err(), "not UTF-8");
        assert!(of_answer(Some("text/event-stream"), b"data: {\"a\":\n\n").is_err());
        assert_eq!(sse_data(b"").unwrap(), Vec::<String>::new());
    }
}
