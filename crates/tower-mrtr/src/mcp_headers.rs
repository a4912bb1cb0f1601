//! MCP 2026-07-28's mirrored request headers (`Mcp-Method`, `Mcp-Name`) and their value encoding.
//!
//! Header values that are not plain visible ASCII (or that have leading or trailing spaces) are
//! sent as `=?base64?<base64 of the UTF-8>?=`; receivers decode before comparing. A proxy that
//! rewrites a tool name or task id must rebuild `Mcp-Name` to match the body it forwards.
//!
//! # Example
//!
//! ```
//! use tower_mrtr::mcp_headers::{decode_header_value, encode_header_value};
//!
//! let value = encode_header_value("日本語").unwrap();
//! assert_eq!(value, "=?base64?5pel5pys6Kqe?=");
//! assert_eq!(decode_header_value(&value).as_deref(), Some("日本語"));
//! assert_eq!(encode_header_value("get_weather").unwrap(), "get_weather");
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderName, HeaderValue};

/// `Mcp-Method`: mirrors the JSON-RPC method. A `HeaderName`, not a `&str`: a lookup by a
/// `&str` parses the name again every time.
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`: mirrors `params.name`, `params.uri` or (Tasks extension) `params.taskId`.
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Decodes a mirrored header value: plain visible ASCII as is, or the `=?base64?…?=` form MCP
/// uses for anything else.
pub fn decode_header_value(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    match text.strip_prefix("=?base64?").and_then(|t| t.strip_suffix("?=")) {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?).ok(),
        None => Some(text.to_owned()),
    }
}

/// Encodes a value for a mirrored header, using the base64 form when plain ASCII will not do.
pub fn encode_header_value(value: &str) -> Option<HeaderValue> {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with("=?base64?");
    if plain {
        HeaderValue::from_str(value).ok()
    } else {
        HeaderValue::from_str(&format!("=?base64?{}?=", STANDARD.encode(value))).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_in_both_forms() {
        for value in [
            "get_weather",
            "日本語",
            " x",
            "x ",
            "=?base64?not",
            "file:///a b.txt",
        ] {
            let encoded = encode_header_value(value).unwrap();
            assert_eq!(
                decode_header_value(&encoded).as_deref(),
                Some(value),
                "{value:?} -> {encoded:?}"
            );
        }
        assert!(
            encode_header_value(" x")
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("=?base64?")
        );
        assert_eq!(
            decode_header_value(&HeaderValue::from_static("=?base64?!!?=")),
            None
        );
    }
}
