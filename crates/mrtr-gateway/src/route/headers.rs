//! Validation of the 2026-07-28 request headers that mirror the body (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`), which any server that processes the body must perform.
//!
//! The body side comes from the [`McpRequestHead`] the MRTR layer parsed, so the body is read
//! once. `Mcp-Param-*` headers are left to the backend, which receives the same arguments and
//! knows the tool's schema; `_meta` is likewise checked by the backend.

use http::HeaderName;
use http::{HeaderMap, HeaderValue};
use tower_mrtr::McpRequestHead;
use tower_mrtr::error::{HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION};
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME, decode_header_value, header_value_is};

/// The protocol versions the gateway itself speaks.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28"];

/// The `MCP-Protocol-Version` header.
pub(crate) const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// A header problem: the JSON-RPC error to send with HTTP 400.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeaderError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<serde_json::Value>,
}

impl HeaderError {
    fn mismatch(message: impl Into<String>) -> Self {
        Self {
            code: HEADER_MISMATCH,
            message: message.into(),
            data: None,
        }
    }
}

/// Methods whose target must be mirrored in `Mcp-Name`.
fn names_target(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// Checks the mirrored headers of a request against its parsed head.
pub(crate) fn validate(headers: &HeaderMap, head: &McpRequestHead) -> Result<(), HeaderError> {
    let version =
        single(headers, &MCP_PROTOCOL_VERSION, "MCP-Protocol-Version")?.ok_or_else(|| HeaderError {
            data: Some(serde_json::json!({ "supported": SUPPORTED_VERSIONS })),
            ..HeaderError::mismatch("Missing MCP-Protocol-Version header")
        })?;
    let version = version
        .to_str()
        .map_err(|_| HeaderError::mismatch("Invalid MCP-Protocol-Version header"))?;
    if !SUPPORTED_VERSIONS.contains(&version) {
        return Err(HeaderError {
            code: UNSUPPORTED_PROTOCOL_VERSION,
            message: format!("Unsupported protocol version: {version}"),
            data: Some(serde_json::json!({ "supported": SUPPORTED_VERSIONS, "requested": version })),
        });
    }

    let method = single(headers, &MCP_METHOD, "Mcp-Method")?
        .ok_or_else(|| HeaderError::mismatch("Missing Mcp-Method header"))?;
    if !header_value_is(method, head.method()) {
        return Err(HeaderError::mismatch(
            "Mcp-Method header does not match the request body",
        ));
    }

    if names_target(head.method()) {
        let name = single(headers, &MCP_NAME, "Mcp-Name")?
            .ok_or_else(|| HeaderError::mismatch("Missing Mcp-Name header"))?;
        let matches = match head.target() {
            Some(target) if header_value_is(name, target) => true,
            _ => {
                decode_header_value(name).ok_or_else(|| HeaderError::mismatch("Invalid Mcp-Name header"))?;
                false
            }
        };
        if !matches {
            return Err(HeaderError::mismatch(
                "Mcp-Name header does not match the request body",
            ));
        }
    }
    Ok(())
}

/// The one value of header `name`, if present. A repeated header is refused: the gateway would
/// check one value while a backend may read another (and the request is forwarded with both).
fn single<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
    shown: &str,
) -> Result<Option<&'h HeaderValue>, HeaderError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(HeaderError::mismatch(format!("{shown} header repeated")));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    // `McpRequestHead` can only be built by the layer, so these checks are covered end to end
    // in the workspace tests (`tests/it/gateway_http.rs`); here only the method table.
    use super::*;

    #[test]
    fn only_the_three_targeted_methods_need_mcp_name() {
        assert!(names_target("tools/call") && names_target("prompts/get") && names_target("resources/read"));
        assert!(!names_target("tools/list") && !names_target("server/discover"));
    }
}
