//! A backend's era: whether it speaks the 2026-07-28 revision (`server/discover`, per-request
//! `_meta`, no sessions) or an earlier one (`initialize`, `Mcp-Session-Id`), as the operator
//! configured it ([`Era`]), and what the probe's answers mean (giving a
//! [`Found`]): the vocabulary the probes of HTTP backends
//! (`session/probe.rs`) and of stdio processes (`stdio/process.rs`) share, and the
//! `server/discover` result made from an `initialize` result ([`discover_result`]).
//!
//! Detection follows the specification's advice to clients (basic/versioning, backward
//! compatibility): send a modern request first; a success, or one of the modern JSON-RPC errors
//! about headers (`-32020`, `-32021`), means a modern server; anything else (`Server not
//! initialized`, `-32601`, an HTTP 400/404/405 with or without a JSON-RPC body) means falling
//! back to `initialize`, offering the newest legacy revision, which the server accepts or
//! answers with the one it speaks. The probe's legacy session is closed (`DELETE`) at once.
//!
//! The era found decides how requests reach the backend: as they come (modern), or in sessions of
//! the gateway's own (`upstream/session/`). A backend whose era cannot be found is down, with
//! the reason.
//!
//! ```
//! use mrtr_gateway::Era;
//!
//! assert_eq!("auto".parse::<Era>(), Ok(Era::Auto));
//! assert_eq!(Era::default(), Era::Auto);
//! assert!("2025".parse::<Era>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use tower_mrtr::error::{HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY};

use super::answer::{Answer, UpstreamError};
use super::health::{Down, Found};

/// The revision the gateway speaks with modern backends.
pub(crate) const MODERN_VERSION: &str = "2026-07-28";

/// The `initialize`-era revisions the gateway recognises, newest first; `initialize` offers the
/// first.
pub(crate) const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Which revision a backend is expected to speak, as configured (`era` in its `[[backend]]`
/// section).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// Found by the probe: `server/discover` first, then `initialize` (the default).
    #[default]
    Auto,
    /// 2026-07-28 only: a backend that does not answer `server/discover` is down.
    Modern,
    /// An `initialize`-era server (2025-03-26 to 2025-11-25): probed with `initialize` alone.
    Legacy,
}

impl FromStr for Era {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "modern" => Ok(Self::Modern),
            "legacy" => Ok(Self::Legacy),
            other => Err(format!(
                "expected \"auto\", \"modern\" or \"legacy\", got {other:?}"
            )),
        }
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Modern => "modern",
            Self::Legacy => "legacy",
        })
    }
}

/// The discovery request the probe sends.
pub(crate) const DISCOVER_BODY: &str = r#"{"jsonrpc":"2.0","id":"mrtr-gateway-health","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

/// The legacy handshake's `initialize` request declaring `$capabilities` (a JSON object, as a
/// literal), offering the newest legacy revision.
macro_rules! initialize_body {
    ($capabilities:literal) => {
        concat!(
            r#"{"jsonrpc":"2.0","id":"mrtr-gateway-health","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":"#,
            $capabilities,
            r#","clientInfo":{"name":"mrtr-gateway","version":""#,
            env!("CARGO_PKG_VERSION"),
            r#""}}}"#
        )
    };
}

/// The legacy handshake the probe falls back to: no capabilities, the newest legacy revision.
pub(crate) const INITIALIZE_BODY: &str = initialize_body!("{}");

/// The legacy handshake of a stdio process run per principal (`stdio/process.rs`): it declares
/// the requests its principal's clients may take during a call, which servers check before
/// asking (a client that takes none has the gateway answer with an error naming the Tasks
/// extension). Not roots, which servers ask for once initialized, outside any call.
pub(crate) const INITIALIZE_ASKING_BODY: &str = initialize_body!(r#"{"elicitation":{},"sampling":{}}"#);

pub(crate) fn discover_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", MODERN_VERSION),
        ("mcp-method", "server/discover"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
}

/// What one answer to `server/discover` says about the backend.
#[derive(Debug, PartialEq, Eq)]
enum Discovered {
    /// A modern server.
    Modern(Option<(String, String)>),
    /// Not a modern answer: what it was, for the log.
    NotModern(String),
}

/// Reads a `server/discover` answer (see the [module docs](self) for the rule).
fn discovered(answer: &Answer) -> Discovered {
    let message: Option<Value> = answer
        .message
        .as_ref()
        .and_then(|m| serde_json::from_slice(m).ok());
    let Some(message) = message.filter(Value::is_object) else {
        return Discovered::NotModern(format!("HTTP {} without a JSON-RPC response", answer.status));
    };
    if let Some(result) = message.get("result").filter(|_| message.get("error").is_none()) {
        let info = result
            .get("serverInfo")
            .or_else(|| result.pointer("/_meta/io.modelcontextprotocol~1serverInfo"));
        return Discovered::Modern(server_info(info));
    }
    let code = message.pointer("/error/code").and_then(Value::as_i64);
    if matches!(code, Some(HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY)) {
        // A modern server refusing the probe's headers: it speaks 2026-07-28.
        return Discovered::Modern(None);
    }
    let text = message
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    Discovered::NotModern(format!(
        "HTTP {}, JSON-RPC error {} {}",
        answer.status,
        code.map_or_else(|| "without a code".to_owned(), |c| c.to_string()),
        short(text)
    ))
}

/// `(name, version)` from a `serverInfo` object.
fn server_info(info: Option<&Value>) -> Option<(String, String)> {
    let info = info?;
    let name = info.get("name")?.as_str()?;
    let version = info.get("version").and_then(Value::as_str).unwrap_or("");
    Some((short(name), short(version)))
}

/// A backend's text cut to 80 characters, for a log line.
fn short(text: &str) -> String {
    let mut cut: String = text.chars().take(80).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut.escape_debug().to_string()
}

/// What an answer to `initialize` says: the era found, or why the backend is no MCP server the
/// gateway can speak with.
pub(crate) fn initialized(answer: &Answer, discover: Option<&str>) -> Result<Found, Down> {
    let message: Option<Value> = answer
        .message
        .as_ref()
        .and_then(|m| serde_json::from_slice(m).ok());
    let result = message.as_ref().and_then(|m| m.get("result"));
    let before = discover
        .map(|d| format!("server/discover: {d}; "))
        .unwrap_or_default();
    let Some(result) = result else {
        return Err(Down {
            reason: "not_mcp",
            detail: format!(
                "{before}initialize: HTTP {} without a JSON-RPC result",
                answer.status
            ),
        });
    };
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !LEGACY_VERSIONS.contains(&version) {
        return Err(Down {
            reason: "unknown_era",
            detail: format!(
                "{before}initialize answered protocol version \"{}\", which the gateway does not speak (it knows {})",
                short(version),
                LEGACY_VERSIONS.join(", ")
            ),
        });
    }
    Ok(Found {
        modern: false,
        version: version.to_owned(),
        server: server_info(result.get("serverInfo")),
    })
}

pub(crate) fn unavailable(error: UpstreamError) -> Down {
    Down {
        reason: match error {
            UpstreamError::Timeout => "timeout",
            UpstreamError::Unreachable(_) => "unreachable",
        },
        detail: error.to_string(),
    }
}

/// What the answer to the discovery probe means for a backend expected to speak `era`.
pub(crate) enum AfterDiscover {
    /// A modern server.
    Modern(Found),
    /// Not a modern answer (what it was, for the log): `initialize` is next.
    Fallback(String),
}

/// Reads the answer to the discovery probe of a backend configured as `era` (not `legacy`).
pub(crate) fn after_discover(answer: &Answer, era: Era) -> Result<AfterDiscover, Down> {
    match discovered(answer) {
        Discovered::Modern(server) => Ok(AfterDiscover::Modern(Found {
            modern: true,
            version: MODERN_VERSION.to_owned(),
            server,
        })),
        Discovered::NotModern(what) if era == Era::Modern => Err(Down {
            reason: "not_modern",
            detail: format!(
                "server/discover: {what} (configured as era \"modern\"; \"auto\" would try initialize)"
            ),
        }),
        Discovered::NotModern(what) => Ok(AfterDiscover::Fallback(what)),
    }
}

/// A `server/discover` result for a 2026-07-28 client from an `initialize` result: the features
/// the backend offers, with the list changes and resource subscriptions it announces (which a
/// `subscriptions/listen` gets through `upstream/session/hub.rs`), without `logging` (per request in
/// 2026-07-28).
pub(crate) fn discover_result(initialize: &Value) -> Value {
    let mut capabilities = serde_json::Map::new();
    for feature in ["tools", "prompts", "resources", "completions"] {
        let offered = &initialize["capabilities"][feature];
        if offered.is_object() {
            let mut kept = serde_json::Map::new();
            for flag in ["listChanged", "subscribe"] {
                if offered[flag] == true && (flag == "listChanged" || feature == "resources") {
                    kept.insert(flag.to_owned(), Value::Bool(true));
                }
            }
            capabilities.insert(feature.to_owned(), Value::Object(kept));
        }
    }
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [MODERN_VERSION],
        "capabilities": capabilities,
        "serverInfo": initialize["serverInfo"],
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(instructions) = initialize["instructions"].as_str() {
        result["instructions"] = json!(instructions);
    }
    result
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn discovery_offers_the_features_and_their_notifications_without_logging() {
        let initialize = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": { "listChanged": true }, "resources": { "subscribe": true, "x": 1 },
                "prompts": { "subscribe": true }, "logging": {} },
            "serverInfo": { "name": "everything", "version": "2.0.0" },
            "instructions": "be kind"
        });
        let result = discover_result(&initialize);
        assert_eq!(
            result["capabilities"],
            json!({ "tools": { "listChanged": true }, "resources": { "subscribe": true }, "prompts": {} })
        );
        assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(result["serverInfo"]["name"], "everything");
        assert_eq!(result["instructions"], "be kind");
    }
    use http::StatusCode;

    fn answer(status: u16, message: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            message: (!message.is_empty()).then(|| Bytes::copy_from_slice(message.as_bytes())),
        }
    }

    #[test]
    fn the_initialize_body_is_json_with_the_newest_legacy_version() {
        for (text, capabilities) in [
            (INITIALIZE_BODY, serde_json::json!({})),
            (
                INITIALIZE_ASKING_BODY,
                serde_json::json!({ "elicitation": {}, "sampling": {} }),
            ),
        ] {
            let body: Value = serde_json::from_str(text).unwrap();
            assert_eq!(body["params"]["protocolVersion"], LEGACY_VERSIONS[0]);
            assert_eq!(body["params"]["clientInfo"]["version"], env!("CARGO_PKG_VERSION"));
            assert_eq!(body["params"]["capabilities"], capabilities);
        }
        let discover: Value = serde_json::from_str(DISCOVER_BODY).unwrap();
        assert_eq!(discover["method"], "server/discover");
    }

    #[test]
    fn a_discover_result_or_a_header_error_means_modern() {
        let ok = answer(
            200,
            r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"serverInfo":{"name":"crm","version":"3.1"}}}"#,
        );
        assert_eq!(
            discovered(&ok),
            Discovered::Modern(Some(("crm".into(), "3.1".into())))
        );
        let headers = answer(
            400,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Header mismatch"}}"#,
        );
        assert_eq!(discovered(&headers), Discovered::Modern(None));
    }

    #[test]
    fn what_legacy_servers_answer_to_discover_is_not_modern() {
        // server-everything 2026.8.31 (TypeScript SDK 1.x), a -32601, an empty 404, a 405 page.
        for (status, message) in [
            (
                400,
                r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#,
            ),
            (
                404,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
            ),
            (404, ""),
            (405, "<html>Method Not Allowed</html>"),
        ] {
            assert!(
                matches!(discovered(&answer(status, message)), Discovered::NotModern(_)),
                "{status} {message}"
            );
        }
        let Discovered::NotModern(what) = discovered(&answer(
            400,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#,
        )) else {
            unreachable!()
        };
        assert_eq!(
            what,
            "HTTP 400 Bad Request, JSON-RPC error -32000 Bad Request: Server not initialized"
        );
    }

    #[test]
    fn initialize_gives_the_legacy_version_and_server_or_says_why_not() {
        let ok = answer(
            200,
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"everything","version":"2.0.0"}}}"#,
        );
        let found = initialized(&ok, None).unwrap();
        assert_eq!(
            (found.era(), found.version.as_str(), found.server_text()),
            ("legacy", "2025-06-18", "everything 2.0.0".to_owned())
        );
        let future = answer(
            200,
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2030-01-01"}}"#,
        );
        assert_eq!(initialized(&future, None).unwrap_err().reason, "unknown_era");
        let html = initialized(
            &answer(200, "<html></html>"),
            Some("HTTP 404 Not Found without a JSON-RPC response"),
        )
        .unwrap_err();
        assert_eq!(html.reason, "not_mcp");
        assert!(
            html.detail.starts_with("server/discover: HTTP 404"),
            "{}",
            html.detail
        );
    }

    #[test]
    fn a_backends_text_is_cut_and_escaped_for_the_log() {
        assert_eq!(short("line\nbreak"), "line\\nbreak");
        assert_eq!(short(&"x".repeat(100)).chars().count(), 81);
    }
}
