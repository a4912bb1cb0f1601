//! The `[[policy]]` rules: which callers (principals, groups, scopes) may call which tools, use
//! which prompts and read which resources, by the names the gateway exposes (globs allowed).
//!
//! Once any rule exists, what no rule allows is denied. A rule with `effect = "deny"` refuses
//! what it names even where another rule allows it. What each rule is matched against:
//!
//! * **a tool or prompt**: the name the client uses (`deploy`, or `alpha__deploy` where two
//!   backends offer one) and, once routing knows its backend, `<backend>__<name>` whether or not
//!   the name is prefixed today, so a rule written for `alpha__deploy` keeps holding when the
//!   prefix goes away. A **deny** rule also matches the backend's own name, so `deploy` denied
//!   stays denied when another backend starts offering a `deploy` and the exposed names become
//!   `alpha__deploy` and `beta__deploy` (an allow rule does not widen that way: a new `deploy`
//!   elsewhere is not allowed by a rule written before it existed);
//! * **a resource URI**: its normal form (RFC 3986/3987: dot segments resolved, percent-encoded
//!   unreserved characters decoded, scheme and host in lower case), so `file:///srv/*` does not
//!   match `file:///srv/../etc/passwd`. A URI without a normal form is denied: one that does not
//!   parse, whose dot segments climb above the root or cannot be resolved (a rootless path), or
//!   whose path holds an encoded `/` or `\` (`%2F`, `%5C`), which a backend may decode into
//!   another path than the one matched;
//! * **a resource template** (in `resources/templates/list`): its `uriTemplate` text.
//!
//! What is governed: `tools/call`, `prompts/get`, `resources/read` (and their retries, and task
//! follow-ups as the `tools/call` that created the task), `completion/complete` by the prompt or
//! resource template it completes, `subscriptions/listen` and a legacy client's
//! `resources/subscribe` by the resource rules; lists are filtered. Methods that name nothing
//! (`server/discover`, `ping`) are not.
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

    fn noun(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
            Self::Resource => "resource",
        }
    }
}

/// What a rule is matched against (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Subject<'a> {
    /// A tool or prompt: the name the client uses, and its backend and the backend's own name
    /// once routing knows them.
    Named {
        thing: Thing,
        exposed: &'a str,
        origin: Option<Origin<'a>>,
    },
    /// A resource URI, matched in its normal form.
    Uri(&'a str),
    /// A resource template's `uriTemplate`, matched as it is.
    Template(&'a str),
}

/// Where a tool or prompt comes from: the name its backend gives it, and that name qualified
/// with the backend's (`<backend>__<name>`, the naming rule's prefixed form, built by the
/// catalog), whether or not the exposed name is prefixed today.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin<'a> {
    pub(crate) name: &'a str,
    pub(crate) qualified: &'a str,
}

impl<'a> Subject<'a> {
    /// The subject a governed method names: its tool or prompt (with `origin`, where known), or
    /// its resource URI.
    pub(crate) fn of(thing: Thing, target: &'a str, origin: Option<Origin<'a>>) -> Self {
        match thing {
            Thing::Resource => Self::Uri(target),
            thing => Self::Named {
                thing,
                exposed: target,
                origin,
            },
        }
    }

    fn thing(&self) -> Thing {
        match self {
            Self::Named { thing, .. } => *thing,
            Self::Uri(_) | Self::Template(_) => Thing::Resource,
        }
    }
}

/// The normal form of a resource URI (see the [module docs](self)), or `None` when it has none.
pub(crate) fn normal_uri(uri: &str) -> Option<String> {
    use fluent_uri::Iri;
    use fluent_uri::normalize::Normalizer;

    let iri = Iri::parse(uri).ok()?;
    let normal = Normalizer::new()
        .allow_path_underflow(false)
        .normalize(&iri)
        .ok()?;
    let path = normal.path().as_str();
    // What normalisation leaves of dot segments (a rootless path's) cannot be resolved here, and
    // an encoded separator may become one at the backend: either way the rules would match
    // another path than the one the backend opens.
    let unresolved = path.split('/').any(|segment| segment == "." || segment == "..");
    let upper = path.to_ascii_uppercase();
    if unresolved || upper.contains("%2F") || upper.contains("%5C") {
        return None;
    }
    Some(normal.as_str().to_owned())
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

    fn patterns(&self, thing: Thing) -> &[String] {
        match thing {
            Thing::Tool => &self.tools,
            Thing::Prompt => &self.prompts,
            Thing::Resource => &self.resources,
        }
    }

    /// Whether the rule names `subject`, whose URI (if it is one) is already in `normal` form.
    fn names(&self, subject: &Subject<'_>, normal: Option<&str>) -> bool {
        let patterns = self.patterns(subject.thing());
        let any = |name: &str| patterns.iter().any(|p| glob(p, name));
        match *subject {
            Subject::Named { exposed, origin, .. } => {
                any(exposed)
                    || origin
                        .is_some_and(|o| any(o.qualified) || (self.effect == Effect::Deny && any(o.name)))
            }
            Subject::Uri(_) => normal.is_some_and(any),
            Subject::Template(template) => any(template),
        }
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

    /// Whether `caller` may use `subject`: some rule allows it, none denies it. A URI without a
    /// normal form is never allowed.
    pub(crate) fn allows(&self, caller: Option<&Caller>, subject: &Subject<'_>) -> bool {
        let normal = match subject {
            Subject::Uri(uri) => match normal_uri(uri) {
                Some(normal) => Some(normal),
                None => return false,
            },
            _ => None,
        };
        let mut allowed = false;
        for rule in self
            .rules
            .iter()
            .filter(|r| r.applies_to(caller) && r.names(subject, normal.as_deref()))
        {
            match rule.effect {
                Effect::Deny => return false,
                Effect::Allow => allowed = true,
            }
        }
        allowed
    }

    /// The MRTR layer's `authorize` check and the proxy's after routing: a `tools/call`,
    /// `prompts/get` or `resources/read` of something the caller may not use (or naming nothing)
    /// is refused. `origin` is where the tool or prompt comes from, when the catalog knows.
    pub(crate) fn authorize(
        &self,
        caller: Option<&Caller>,
        method: &str,
        target: Option<&str>,
        origin: Option<Origin<'_>>,
    ) -> Result<(), Denied> {
        let Some(thing) = Thing::of_method(method) else {
            return Ok(());
        };
        if let Some(name) = target
            && self.allows(caller, &Subject::of(thing, name, origin))
        {
            return Ok(());
        }
        Err(self.denied(caller, thing, target))
    }

    /// The refusal of `thing` `target` to `caller`, counted and logged.
    pub(crate) fn denied(&self, caller: Option<&Caller>, thing: Thing, target: Option<&str>) -> Denied {
        crate::observe::metrics::policy_denied(thing.method());
        tracing::debug!(
            method = thing.method(),
            target,
            principal = caller.map(|c| &*c.principal),
            "refused by the policy"
        );
        let what = thing.noun();
        Denied::new(match target {
            Some(name) => format!("The {what} {name} is not permitted for this caller"),
            None => format!("This {what} is not permitted for this caller"),
        })
    }

    /// Whether `caller` may call the tool `name` (as exposed; no backend known).
    pub fn allows_tool(&self, caller: Option<&Caller>, name: &str) -> bool {
        self.allows(
            caller,
            &Subject::Named {
                thing: Thing::Tool,
                exposed: name,
                origin: None,
            },
        )
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
        let prompt = Subject::Named {
            thing: Thing::Prompt,
            exposed: "p",
            origin: None,
        };
        assert!(!policy.allows(Some(&ops), &prompt), "no rule names prompts");
        assert!(Policy::new(vec![rule(&[], &[], &["*"], Effect::Allow)]).is_err());
        assert!(Policy::new(vec![rule(&["*"], &[], &[], Effect::Allow)]).is_err());
    }

    fn policy(text: &str) -> Policy {
        let table: toml::Table = toml::from_str(text).unwrap();
        Policy::new(table["policy"].clone().try_into().unwrap()).unwrap()
    }

    fn tool<'a>(exposed: &'a str, origin: Option<Origin<'a>>) -> Subject<'a> {
        Subject::Named {
            thing: Thing::Tool,
            exposed,
            origin,
        }
    }

    #[test]
    fn a_rule_holds_whether_or_not_the_name_is_prefixed_today() {
        let policy = policy(
            r#"
[[policy]]
principals = ["*"]
tools = ["*"]

[[policy]]
principals = ["*"]
tools = ["deploy", "alpha__migrate"]
effect = "deny"
"#,
        );
        let alpha = |name| {
            Some(Origin {
                name,
                qualified: Box::leak(format!("alpha__{name}").into_boxed_str()),
            })
        };
        // `deploy` denied: still denied once a second backend offers one and the exposed name
        // becomes `alpha__deploy`.
        assert!(!policy.allows(None, &tool("deploy", alpha("deploy"))));
        assert!(!policy.allows(None, &tool("alpha__deploy", alpha("deploy"))));
        // `alpha__migrate` denied: still denied once the name is no longer prefixed.
        assert!(!policy.allows(None, &tool("migrate", alpha("migrate"))));
        assert!(!policy.allows(None, &tool("alpha__migrate", alpha("migrate"))));
        assert!(policy.allows(None, &tool("search", alpha("search"))));
    }

    #[test]
    fn an_allow_rule_on_a_bare_name_does_not_widen_to_other_backends() {
        let policy = policy("[[policy]]\nprincipals = [\"*\"]\ntools = [\"deploy\"]\n");
        let beta = Origin {
            name: "deploy",
            qualified: "beta__deploy",
        };
        assert!(policy.allows(None, &tool("deploy", Some(beta))));
        assert!(
            !policy.allows(None, &tool("beta__deploy", Some(beta))),
            "once prefixed, beta's deploy is not what the rule allowed"
        );
    }

    #[test]
    fn resource_rules_match_normal_uris_and_refuse_what_has_none() {
        let policy =
            policy("[[policy]]\nprincipals = [\"*\"]\nresources = [\"file:///srv/*\", \"docs://*\"]\n");
        let allows = |uri| policy.allows(None, &Subject::Uri(uri));
        assert!(allows("file:///srv/a.txt"));
        assert!(allows("file:///srv/x/../b.txt"));
        assert!(
            allows("FILE:///srv/%61.txt"),
            "scheme case and %61 (a) normalised"
        );
        assert!(!allows("file:///srv/../etc/passwd"));
        assert!(
            !allows("file:///srv/%2E%2E/etc/passwd"),
            "encoded dot segments too"
        );
        assert!(!allows("file:///srv/..%2Fetc/passwd"), "an encoded slash");
        assert!(!allows("file:///../srv/a"), "above the root");
        assert!(!allows("docs:a/../b"), "a rootless path's dot segments");
        assert!(!allows("not a uri"));
        assert!(allows("docs://guide/intro"));
        assert_eq!(
            normal_uri("file:///srv/./x/%7e/../y").as_deref(),
            Some("file:///srv/x/y")
        );
    }
}
