//! The `[[policy]]` rules: which callers (principals, groups, scopes) may call which tools, use
//! which prompts and read which resources, by the names the gateway exposes (globs allowed).
//!
//! Once any rule exists, what no rule allows is denied. A rule with `effect = "deny"` refuses
//! what it names even where another rule allows it. Methods that name no tool, prompt or
//! resource (lists, `server/discover`, `ping`, `completion/complete`, `subscriptions/listen`)
//! are not governed by the rules (lists are filtered).
//!
//! ```
//! use mrtr_gateway::policy::{Policy, PolicyRule};
//! use mrtr_gateway::auth::Caller;
//!
//! let rules: Vec<PolicyRule> = toml::from_str::<toml::Table>(r#"
//! [[policy]]
//! principals = ["*"]
//! tools = ["get_*"]
//!
//! [[policy]]
//! groups = ["ops"]
//! tools = ["*"]
//!
//! [[policy]]
//! principals = ["*"]
//! tools = ["drop_database"]
//! effect = "deny"
//! "#)?["policy"].clone().try_into()?;
//! let policy = Policy::new(rules)?;
//! let alice = Caller::from_principal("alice");
//! assert!(policy.allows_tool(Some(&alice), "get_weather"));
//! assert!(!policy.allows_tool(Some(&alice), "deploy"));
//! assert!(!policy.allows_tool(None, "drop_database"));
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

use serde::Deserialize;
use tower_mrtr::Denied;

use crate::auth::Caller;

/// What a rule does to what it names.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Permits it (the default).
    #[default]
    Allow,
    /// Refuses it, whatever other rules permit.
    Deny,
}

/// One `[[policy]]` table.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct PolicyRule {
    /// Principals the rule applies to (globs; `"*"` is every caller, even one without a
    /// principal).
    #[serde(default)]
    pub principals: Vec<String>,
    /// Groups (the token's groups claim) the rule applies to: any one of them.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Scopes the rule applies to: any one of them.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Tools (exposed names, globs).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Prompts (exposed names, globs).
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Resources (URIs, globs; a resource template is matched by its `uriTemplate` text).
    #[serde(default)]
    pub resources: Vec<String>,
    /// `allow` (the default) or `deny`.
    #[serde(default)]
    pub effect: Effect,
}

/// What a rule may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Thing {
    Tool,
    Prompt,
    Resource,
}

impl Thing {
    /// The method that uses it.
    fn method(self) -> &'static str {
        match self {
            Self::Tool => "tools/call",
            Self::Prompt => "prompts/get",
            Self::Resource => "resources/read",
        }
    }

    /// What `method` names, if it is one the rules govern.
    pub(crate) fn of_method(method: &str) -> Option<Self> {
        match method {
            "tools/call" => Some(Self::Tool),
            "prompts/get" => Some(Self::Prompt),
            "resources/read" => Some(Self::Resource),
            _ => None,
        }
    }
}

impl PolicyRule {
    fn applies_to(&self, caller: Option<&Caller>) -> bool {
        if self.principals.iter().any(|p| p == "*") {
            return true;
        }
        let Some(caller) = caller else {
            return false;
        };
        self.principals.iter().any(|p| glob(p, &caller.principal))
            || caller
                .groups
                .iter()
                .any(|g| self.groups.iter().any(|p| glob(p, g)))
            || caller
                .scopes
                .iter()
                .any(|s| self.scopes.iter().any(|p| glob(p, s)))
    }

    fn names(&self, thing: Thing, name: &str) -> bool {
        let patterns = match thing {
            Thing::Tool => &self.tools,
            Thing::Prompt => &self.prompts,
            Thing::Resource => &self.resources,
        };
        patterns.iter().any(|p| glob(p, name))
    }
}

/// The rules, checked as a whole; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Policy {
    rules: Vec<PolicyRule>,
}

impl Policy {
    /// The policy of `rules`, or the first rule that names no caller or nothing.
    pub fn new(rules: Vec<PolicyRule>) -> Result<Self, String> {
        for (n, rule) in rules.iter().enumerate() {
            if rule.principals.is_empty() && rule.groups.is_empty() && rule.scopes.is_empty() {
                return Err(format!(
                    "[[policy]] #{}: say whom it applies to (principals, groups or scopes; principals = [\"*\"] for every caller)",
                    n + 1
                ));
            }
            if rule.tools.is_empty() && rule.prompts.is_empty() && rule.resources.is_empty() {
                return Err(format!(
                    "[[policy]] #{}: say what it applies to (tools, prompts or resources)",
                    n + 1
                ));
            }
        }
        Ok(Self { rules })
    }

    /// Whether `caller` may use `thing` `name`: some rule allows it, none denies it.
    pub(crate) fn allows(&self, caller: Option<&Caller>, thing: Thing, name: &str) -> bool {
        let mut allowed = false;
        for rule in self
            .rules
            .iter()
            .filter(|r| r.applies_to(caller) && r.names(thing, name))
        {
            match rule.effect {
                Effect::Deny => return false,
                Effect::Allow => allowed = true,
            }
        }
        allowed
    }

    /// The MRTR layer's `authorize` check: a `tools/call`, `prompts/get` or `resources/read`
    /// of something the caller may not use (or naming nothing) is refused.
    pub(crate) fn authorize(
        &self,
        caller: Option<&Caller>,
        method: &str,
        target: Option<&str>,
    ) -> Result<(), Denied> {
        let Some(thing) = Thing::of_method(method) else {
            return Ok(());
        };
        if let Some(name) = target
            && self.allows(caller, thing, name)
        {
            return Ok(());
        }
        crate::observe::metrics::policy_denied(thing.method());
        tracing::debug!(
            method,
            target,
            principal = caller.map(|c| &*c.principal),
            "call refused by the policy"
        );
        let what = match thing {
            Thing::Tool => "tool",
            Thing::Prompt => "prompt",
            Thing::Resource => "resource",
        };
        Err(Denied::new(match target {
            Some(name) => format!("The {what} {name} is not permitted for this caller"),
            None => format!("This {what} is not permitted for this caller"),
        }))
    }

    /// Whether `caller` may call the tool `name`.
    pub fn allows_tool(&self, caller: Option<&Caller>, name: &str) -> bool {
        self.allows(caller, Thing::Tool, name)
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters and `?` for
/// one. Written out rather than taken from a glob crate: two wildcards and no character
/// classes, where a crate would compile each pattern to a regex.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it has been tried to cover up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn globs_match_runs_and_single_characters() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("*", "anything", true),
            ("get_*", "get_weather", true),
            ("get_*", "set_weather", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*__deploy", "alpha__deploy", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("file:///srv/*", "file:///srv/a/b", true),
            ("日*", "日本語", true),
            ("deploy", "deploy", true),
            ("deploy", "deploy2", false),
        ] {
            assert_eq!(glob(pattern, text), expected, "{pattern} on {text}");
        }
    }

    #[test]
    fn deny_wins_and_nothing_is_allowed_by_default() {
        let rule = |principals: &[&str], groups: &[&str], tools: &[&str], effect| PolicyRule {
            principals: principals.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            effect,
            ..PolicyRule::default()
        };
        let policy = Policy::new(vec![
            rule(&[], &["ops"], &["*"], Effect::Allow),
            rule(&["bob"], &[], &["read_*"], Effect::Allow),
            rule(&["*"], &[], &["drop_database"], Effect::Deny),
        ])
        .unwrap();
        let ops = Caller {
            groups: Arc::from(vec![Box::from("ops")]),
            ..Caller::from_principal("carol")
        };
        let bob = Caller::from_principal("bob");
        assert!(policy.allows_tool(Some(&ops), "deploy"));
        assert!(!policy.allows_tool(Some(&ops), "drop_database"));
        assert!(policy.allows_tool(Some(&bob), "read_file"));
        assert!(!policy.allows_tool(Some(&bob), "deploy"));
        assert!(!policy.allows_tool(None, "read_file"));
        assert!(
            !policy.allows(Some(&ops), Thing::Prompt, "p"),
            "no rule names prompts"
        );
        assert!(Policy::new(vec![rule(&[], &[], &["*"], Effect::Allow)]).is_err());
        assert!(Policy::new(vec![rule(&["*"], &[], &[], Effect::Allow)]).is_err());
    }
}
