//! Reading SSE answers of backends: whether an answer is a stream, where its complete events
//! end, and which event holds the JSON-RPC response.

use bytes::Bytes;
use http::header::{self, HeaderMap};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Whether an answer is an SSE stream.
pub(crate) fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// The parts of a JSON-RPC response the merge needs.
#[derive(Deserialize)]
pub(crate) struct ResponseMessage<'a> {
    #[serde(borrow)]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

/// The data of the last SSE event that holds a JSON-RPC response (not a notification).
pub(crate) fn last_sse_response(stream: &[u8]) -> Option<Bytes> {
    let text = String::from_utf8_lossy(stream);
    let mut found = None;
    let mut data = String::new();
    let mut flush = |data: &mut String| {
        if !data.is_empty() {
            let message = std::mem::take(data);
            if serde_json::from_str::<ResponseMessage<'_>>(&message)
                .is_ok_and(|m| m.result.is_some() || m.error.is_some())
            {
                found = Some(Bytes::from(message));
            }
        }
    };
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            flush(&mut data);
        } else if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    flush(&mut data);
    found
}

/// Length of the prefix of an SSE stream that holds only complete events (ending in a blank line).
pub(crate) fn complete_events(stream: &[u8]) -> usize {
    let end_of = |needle: &[u8]| {
        stream
            .windows(needle.len())
            .rposition(|w| w == needle)
            .map(|at| at + needle.len())
    };
    [end_of(b"\n\n"), end_of(b"\r\n\r\n"), end_of(b"\r\r")]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_answers_yield_the_response_event() {
        let stream = b": keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
            event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{}}\r\n\r\n";
        let message = last_sse_response(stream).unwrap();
        assert_eq!(&message[..], b"{\"jsonrpc\":\"2.0\",\"id\":1,\n\"result\":{}}");
        assert!(last_sse_response(b": only a comment\n\n").is_none());
        let partial =
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,";
        assert_eq!(complete_events(partial), 44);
        assert_eq!(complete_events(b"data: x"), 0);
    }
}
