//! The principal behind an authenticating proxy: the value of the principal header
//! (`--principal-header`), read one way by everything keyed by it.
//!
//! A value is read as the mirrored MCP headers are ([`tower_mrtr::mcp_headers`]): the
//! `=?base64?…?=` form the specification gives values that plain ASCII cannot carry, decoded; any
//! other value as its own bytes, which must be UTF-8. So `zoë` arrives either way (`=?base64?em/Dqw==?=`
//! or the raw UTF-8 bytes) and is the one principal `zoë`, and two values are one principal
//! exactly when they read to the same text. A request whose header is missing, repeated, empty or
//! unreadable has no principal: the front refuses it (`403`) before anything else reads it, so
//! that it can never share a session, a process or a bucket with other requests that have none.
//!
//! ```
//! use http::{HeaderMap, HeaderValue};
//! use mrtr_gateway::auth::principal::{self, Unreadable};
//!
//! let name = http::HeaderName::from_static("x-user");
//! let mut headers = HeaderMap::new();
//! headers.insert(&name, HeaderValue::from_bytes("zoë".as_bytes()).unwrap());
//! assert_eq!(&*principal::read(&headers, &name).unwrap(), "zoë");
//! headers.insert(&name, HeaderValue::from_static("=?base64?em/Dqw==?="));
//! assert_eq!(&*principal::read(&headers, &name).unwrap(), "zoë");
//! headers.append(&name, HeaderValue::from_static("bob"));
//! assert_eq!(principal::read(&headers, &name), Err(Unreadable::Repeated));
//! ```

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue};

/// What the base64 form of a header value starts with (and `?=` ends it).
const ENCODED_PREFIX: &[u8] = b"=?base64?";

/// Why a request has no readable principal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// The header is absent.
    Missing,
    /// The header is there more than once.
    Repeated,
    /// The header's value is empty.
    Empty,
    /// The value is neither UTF-8 nor a well-formed `=?base64?…?=` of UTF-8.
    Undecodable,
}

impl Unreadable {
    /// A short label, for the log and the refusal counter.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Repeated => "repeated",
            Self::Empty => "empty",
            Self::Undecodable => "undecodable",
        }
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Missing => "the principal header is missing",
            Self::Repeated => "the principal header is repeated",
            Self::Empty => "the principal header is empty",
            Self::Undecodable => "the principal header is neither UTF-8 nor =?base64?…?= of UTF-8",
        })
    }
}

impl std::error::Error for Unreadable {}

/// The principal named by the one `name` header of `headers`.
pub fn read(headers: &HeaderMap, name: &HeaderName) -> Result<Arc<str>, Unreadable> {
    let mut values = headers.get_all(name).iter();
    let value = values.next().ok_or(Unreadable::Missing)?;
    if values.next().is_some() {
        return Err(Unreadable::Repeated);
    }
    decode(value)
}

/// The principal one header value names (see the [module docs](self)).
pub fn decode(value: &HeaderValue) -> Result<Arc<str>, Unreadable> {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(Unreadable::Empty);
    }
    let text = match bytes
        .strip_prefix(ENCODED_PREFIX)
        .and_then(|rest| rest.strip_suffix(b"?="))
    {
        // A value in the encoded form is that form, or unreadable: never taken as its own bytes,
        // which would make `=?base64?YQ==?=` and `a` two principals.
        Some(encoded) => {
            let decoded = STANDARD.decode(encoded).map_err(|_| Unreadable::Undecodable)?;
            String::from_utf8(decoded).map_err(|_| Unreadable::Undecodable)?
        }
        None => std::str::from_utf8(bytes)
            .map_err(|_| Unreadable::Undecodable)?
            .to_owned(),
    };
    if text.is_empty() {
        return Err(Unreadable::Empty);
    }
    Ok(Arc::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &[u8]) -> HeaderValue {
        HeaderValue::from_bytes(bytes).unwrap()
    }

    #[test]
    fn both_forms_of_one_name_are_one_principal_and_the_rest_is_refused() {
        for (raw, principal) in [
            (&b"alice"[..], "alice"),
            ("josé".as_bytes(), "josé"),
            (b"=?base64?am9zw6k=?=", "josé"),
            (b"=?base64?YQ==?=", "a"),
            (b"a b", "a b"),
        ] {
            assert_eq!(decode(&value(raw)).as_deref(), Ok(principal), "{raw:?}");
        }
        for (raw, why) in [
            (&b""[..], Unreadable::Empty),
            (b"=?base64??=", Unreadable::Empty),
            (b"zo\xeb", Unreadable::Undecodable),
            (b"=?base64?not base64?=", Unreadable::Undecodable),
            (b"=?base64?/w==?=", Unreadable::Undecodable),
        ] {
            assert_eq!(decode(&value(raw)), Err(why), "{raw:?}");
        }
    }

    #[test]
    fn a_missing_or_repeated_header_names_nobody() {
        let name = HeaderName::from_static("x-user");
        let mut headers = HeaderMap::new();
        assert_eq!(read(&headers, &name), Err(Unreadable::Missing));
        headers.append(&name, value(b"alice"));
        assert_eq!(read(&headers, &name).as_deref(), Ok("alice"));
        headers.append(&name, value(b"alice"));
        assert_eq!(read(&headers, &name), Err(Unreadable::Repeated));
    }
}
