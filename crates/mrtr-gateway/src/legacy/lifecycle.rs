//! The legacy requests the front answers itself: the `initialize` result built from the modern
//! `server/discover`, and the small answers (`ping`, `logging/setLevel`, the methods 2026-07-28
//! removed without a modern counterpart).

use serde_json::{Map, Value, json};

use super::config::LEGACY_VERSIONS;

/// The protocol version the gateway answers an `initialize` asking for `requested` with.
pub(super) fn negotiate(requested: &str) -> &'static str {
    LEGACY_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(LEGACY_VERSIONS[LEGACY_VERSIONS.len() - 1])
}

/// The legacy `InitializeResult` for `version`, from the gateway's (merged) modern
/// `server/discover` result: the same features (tools, prompts, resources, completions) without
/// `listChanged` (list changes are not relayed to legacy clients), with `resources.subscribe`
/// when a backend offers subscriptions (served on the session's `GET` stream,
/// `subscriptions.rs`), plus `logging` (log notifications are relayed on each call's stream),
/// and the instructions.
pub(super) fn initialize_result(version: &str, discover: &Value, server_info: &Value) -> Value {
    let mut capabilities = Map::new();
    for feature in ["tools", "prompts", "resources", "completions"] {
        if discover["capabilities"][feature].is_object() {
            capabilities.insert(feature.to_owned(), json!({}));
        }
    }
    if discover["capabilities"]["resources"]["subscribe"] == json!(true) {
        capabilities.insert("resources".to_owned(), json!({ "subscribe": true }));
    }
    capabilities.insert("logging".to_owned(), json!({}));
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(instructions) = discover["instructions"].as_str() {
        result["instructions"] = json!(instructions);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_answers_from_the_backends_discovery() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate("2024-11-05"), "2025-11-25"); // the client decides whether it can go on

        let discover = json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true}, "extensions": {"x": {}}},
            "instructions": "Use the tools."
        });
        let result = initialize_result(
            "2025-11-25",
            &discover,
            &json!({"name": "mrtr-gateway", "version": "1"}),
        );
        assert_eq!(
            result["capabilities"],
            json!({"tools": {}, "resources": {"subscribe": true}, "logging": {}})
        );
        assert_eq!(result["instructions"], "Use the tools.");
    }
}
