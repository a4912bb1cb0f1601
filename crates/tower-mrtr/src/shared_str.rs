//! Text that shares the buffer of the body it was read from.
//!
//! The request head, the JSON-RPC id and the target a response may need are slices of the
//! request body the layer already holds: keeping them as [`SharedStr`] costs a reference count
//! instead of an allocation per request.

use std::fmt;

use bytes::Bytes;

use crate::json;

/// UTF-8 text in shared bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SharedStr(Bytes);

impl SharedStr {
    /// `part` as a slice of `body` when it is borrowed from it (no escapes were decoded), a copy
    /// otherwise.
    pub(crate) fn from_body(body: &Bytes, part: &str) -> Self {
        match json::span_of(body, part) {
            Some(span) => Self(body.slice(span)),
            None => Self::from(part),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        // Built only from `str`s, so always UTF-8; the check keeps the crate free of `unsafe`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl From<&str> for SharedStr {
    fn from(text: &str) -> Self {
        Self(Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}
