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

/// What starts a value in the encoded form, `=?base64?…?=`.
const ENCODED_PREFIX: &str = "=?base64?";

/// Decodes a mirrored header value: plain visible ASCII as is, or the `=?base64?…?=` form MCP
/// uses for anything else.
pub fn decode_header_value(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    match text
        .strip_prefix(ENCODED_PREFIX)
        .and_then(|t| t.strip_suffix("?="))
    {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?).ok(),
        None => Some(text.to_owned()),
    }
}

/// Whether a mirrored header value carries `expected`: the same answer as comparing
/// [`decode_header_value`] with `Some(expected)`, without copying a plain value to compare it.
pub fn header_value_is(value: &HeaderValue, expected: &str) -> bool {
    // The usual case first, byte for byte: ASCII bytes a `HeaderValue` holds are all visible, so
    // decoding would return them as they are unless they look encoded.
    if value.as_bytes() == expected.as_bytes() && expected.is_ascii() && !expected.starts_with(ENCODED_PREFIX)
    {
        return true;
    }
    let Ok(text) = value.to_str() else {
        return false;
    };
    match text
        .strip_prefix(ENCODED_PREFIX)
        .and_then(|t| t.strip_suffix("?="))
    {
        Some(encoded) => STANDARD
            .decode(encoded)
            .is_ok_and(|bytes| bytes == expected.as_bytes()),
        None => text == expected,
    }
}

/// Encodes a value for a mirrored header, using the base64 form when plain ASCII will not do.
pub fn encode_header_value(value: &str) -> Option<HeaderValue> {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with(ENCODED_PREFIX);
    if plain {
        HeaderValue::from_str(value).ok()
    } else {
        HeaderValue::from_str(&format!("{ENCODED_PREFIX}{}?=", STANDARD.encode(value))).ok()
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

    #[test]
    fn mirrored_values_match_plain_or_encoded() {
        let encoded = encode_header_value("日本語").unwrap();
        assert!(header_value_is(&encoded, "日本語"));
        assert!(header_value_is(
            &HeaderValue::from_static("get_weather"),
            "get_weather"
        ));
        let raw = HeaderValue::from_bytes("日本語".as_bytes()).unwrap();
        assert!(!header_value_is(&raw, "日本語"));
        assert!(!header_value_is(
            &HeaderValue::from_static("get_weather"),
            "get_weathe"
        ));
        // A value that looks encoded is decoded, never compared as it is.
        let tricky = "=?base64?eA==?=";
        assert!(!header_value_is(&HeaderValue::from_static(tricky), tricky));
        assert!(header_value_is(&HeaderValue::from_static(tricky), "x"));
    }

    proptest::proptest! {
        /// `header_value_is` answers as decoding and comparing does: for values in either form,
        /// values that are not valid in either (bad base64, non-ASCII bytes, a lone prefix), and
        /// expectations that are the value's own, its encoded text, or anything else.
        #[test]
        fn header_value_is_decoding_and_comparing(
            value in "(=\\?base64\\?)?[ -~é日\t]{0,12}(\\?=)?",
            other in "[ -~é日]{0,12}",
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
        ) {
            let mut headers = vec![HeaderValue::from_str(&value).ok(), encode_header_value(&value)];
            headers.push(HeaderValue::from_bytes(&raw).ok());
            for header in headers.into_iter().flatten() {
                let text = String::from_utf8_lossy(header.as_bytes()).into_owned();
                for expected in [value.as_str(), other.as_str(), text.as_str()] {
                    proptest::prop_assert_eq!(
                        header_value_is(&header, expected),
                        decode_header_value(&header).as_deref() == Some(expected),
                        "{:?} against {:?}", header, expected
                    );
                }
            }
        }
    }
}
