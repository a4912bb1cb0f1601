//! What each backend offers, the names the gateway exposes for it, and how list and discover
//! results of several backends are merged.
//!
//! # Naming rule
//!
//! With several backends, a tool or prompt name offered by exactly one backend is exposed as is.
//! A name offered by two or more backends is exposed once per backend as `<backend>__<name>`
//! (for example `alpha__deploy` and `beta__deploy`), and the unprefixed name is not exposed at all,
//! so no client silently lands on an arbitrary backend. A unique name that happens to equal such a
//! prefixed name is prefixed as well. On the way to the backend the original name is restored, in
//! `params.name` and in `Mcp-Name`.
//!
//! Resources keep their URIs: `resources/read` goes to the first backend (in configuration order)
//! that lists the URI, else to the first whose `resources/templates/list` has a matching template.
//! A URI listed by several backends is exposed once, for the first of them.
//!
//! # Freshness
//!
//! The name table is refreshed from every `*/list` call a client makes, and on demand: a call
//! naming something the table does not know, or a table older than the catalog TTL, triggers one
//! fan-out `*/list` (concurrent callers share it). When a backend fails to answer a list call, the
//! names it offered last time are **kept** (so the names of other backends do not change under the
//! clients' feet) but its items are left out of the merged list; calls to it fail when forwarded.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::jsonrpc::RawObject;
use crate::policy::rules::Thing;

/// The Tasks extension (SEP-2663), advertised by the gateway if any backend advertises it.
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

pub use crate::upstream::SEPARATOR;

/// The four kinds of listable things.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [Kind::Tools, Kind::Prompts, Kind::Resources, Kind::Templates];

    pub(crate) fn from_list_method(method: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.list_method() == method)
    }

    /// The kind a call names: a tool (`tools/call`) or a prompt (`prompts/get`).
    pub(crate) fn called(method: &str) -> Option<Self> {
        match method {
            "tools/call" => Some(Self::Tools),
            "prompts/get" => Some(Self::Prompts),
            _ => None,
        }
    }

    pub(crate) fn list_method(self) -> &'static str {
        match self {
            Self::Tools => "tools/list",
            Self::Prompts => "prompts/list",
            Self::Resources => "resources/list",
            Self::Templates => "resources/templates/list",
        }
    }

    /// The result member holding the items.
    pub(crate) fn items_member(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources => "resources",
            Self::Templates => "resourceTemplates",
        }
    }

    /// The item member identifying an item.
    pub(crate) fn key_member(self) -> &'static str {
        match self {
            Self::Tools | Self::Prompts => "name",
            Self::Resources => "uri",
            Self::Templates => "uriTemplate",
        }
    }

    /// What the policy's rules call the items of this kind (templates are resources).
    pub(crate) fn thing(self) -> Thing {
        match self {
            Self::Tools => Thing::Tool,
            Self::Prompts => Thing::Prompt,
            Self::Resources | Self::Templates => Thing::Resource,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Exposed names of tools or prompts, computed by [`expose`].
#[derive(Debug, Default, Clone)]
pub struct Names {
    by_exposed: HashMap<String, (usize, String)>,
    by_origin: HashMap<(usize, String), String>,
}

impl Names {
    /// The backend index and original name behind an exposed name.
    pub fn resolve(&self, exposed: &str) -> Option<(usize, &str)> {
        self.by_exposed.get(exposed).map(|(b, n)| (*b, n.as_str()))
    }

    /// The exposed name of backend `backend`'s `original`.
    pub fn exposed(&self, backend: usize, original: &str) -> Option<&str> {
        self.by_origin
            .get(&(backend, original.to_owned()))
            .map(String::as_str)
    }
}

/// Applies the naming rule (see the module docs) to the names each backend offers
/// (`None`: unknown, contributes nothing).
pub fn expose(backends: &[&str], offered: &[Option<Vec<String>>]) -> Names {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for names in offered.iter().flatten() {
        let unique: HashSet<&str> = names.iter().map(String::as_str).collect();
        for name in unique {
            *count.entry(name).or_default() += 1;
        }
    }
    let prefixed = |b: usize, name: &str| format!("{}{SEPARATOR}{name}", backends[b]);
    let taken_by_prefix: HashSet<String> = offered
        .iter()
        .enumerate()
        .filter_map(|(b, names)| names.as_ref().map(|n| (b, n)))
        .flat_map(|(b, names)| {
            names
                .iter()
                .filter(|n| count[n.as_str()] > 1)
                .map(move |n| (b, n))
        })
        .map(|(b, n)| prefixed(b, n))
        .collect();
    let mut names = Names::default();
    for (b, offered) in offered.iter().enumerate() {
        for name in offered.iter().flatten() {
            let exposed = if count[name.as_str()] > 1 || taken_by_prefix.contains(name) {
                prefixed(b, name)
            } else {
                name.clone()
            };
            if names.by_exposed.contains_key(&exposed) {
                // Only possible with contrived names (`a__b__c` style); the first backend keeps it.
                tracing::warn!(name = %exposed, backend = backends[b], "exposed name collides; hidden");
                continue;
            }
            names.by_origin.insert((b, name.clone()), exposed.clone());
            names.by_exposed.insert(exposed, (b, name.clone()));
        }
    }
    names
}

/// Whether `uri` matches an RFC 6570 template, reading every `{…}` expression as "one or more
/// characters". Good enough to find the owner of a URI; the backend does the real expansion.
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    literals.push(rest);
    let (first, others) = literals.split_first().expect("at least one literal");
    let Some(mut remaining) = uri.strip_prefix(first) else {
        return false;
    };
    let last = others.len();
    for (i, literal) in others.iter().enumerate() {
        if i + 1 == last {
            return remaining.len() > literal.len() && remaining.ends_with(literal);
        }
        // An expression matches at least one character, then the next literal.
        match remaining.get(1..).and_then(|r| r.find(literal)) {
            Some(at) if !literal.is_empty() => remaining = &remaining[1 + at + literal.len()..],
            _ => return false,
        }
    }
    remaining.is_empty()
}

#[derive(Debug)]
struct KindState {
    refreshed: Option<Instant>,
    offered: Vec<Option<Vec<String>>>,
    names: Names,
    /// Counts the changes of `offered`, so that a merged list kept for these names can tell
    /// that they changed (`merged.rs`).
    generation: u64,
}

/// The gateway's knowledge of what each backend offers.
#[derive(Debug)]
pub(crate) struct Catalog {
    backend_names: Vec<String>,
    ttl: Duration,
    kinds: [Mutex<KindState>; 4],
    refreshing: [tokio::sync::Mutex<()>; 4],
}

impl Catalog {
    pub(crate) fn new(backend_names: Vec<String>, ttl: Duration) -> Self {
        let empty = || {
            Mutex::new(KindState {
                refreshed: None,
                offered: vec![None; backend_names.len()],
                names: Names::default(),
                generation: 0,
            })
        };
        Self {
            ttl,
            kinds: [empty(), empty(), empty(), empty()],
            refreshing: Default::default(),
            backend_names,
        }
    }

    fn state(&self, kind: Kind) -> std::sync::MutexGuard<'_, KindState> {
        self.kinds[kind.index()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records what each backend listed (`None`: it did not answer; its previous names are kept)
    /// and returns the resulting names and their generation.
    pub(crate) fn record(&self, kind: Kind, listed: Vec<Option<Vec<String>>>) -> (Names, u64) {
        let mut state = self.state(kind);
        let mut answered = false;
        let mut changed = false;
        for (slot, fresh) in state.offered.iter_mut().zip(listed) {
            if fresh.is_some() {
                changed |= *slot != fresh;
                *slot = fresh;
                answered = true;
            }
        }
        if changed {
            let names: Vec<&str> = self.backend_names.iter().map(String::as_str).collect();
            state.names = expose(&names, &state.offered);
            state.generation += 1;
        }
        if answered {
            // A fan-out nobody answered must not make a stale table look fresh.
            state.refreshed = Some(Instant::now());
        }
        (state.names.clone(), state.generation)
    }

    /// Marks the table for `kind` refreshed now, if it is still at `generation`: every backend
    /// answered as when it was recorded. Whether it was.
    pub(crate) fn confirm(&self, kind: Kind, generation: u64) -> bool {
        let mut state = self.state(kind);
        if state.generation != generation {
            return false;
        }
        state.refreshed = Some(Instant::now());
        true
    }

    /// When the table for `kind` was last refreshed, if it is still within the TTL.
    pub(crate) fn fresh_since(&self, kind: Kind) -> Option<Instant> {
        self.state(kind).refreshed.filter(|at| at.elapsed() < self.ttl)
    }

    /// Serialises refreshes of one kind, so concurrent misses cause one fan-out.
    pub(crate) async fn refresh_lock(&self, kind: Kind) -> tokio::sync::MutexGuard<'_, ()> {
        self.refreshing[kind.index()].lock().await
    }

    pub(crate) fn refreshed_at(&self, kind: Kind) -> Option<Instant> {
        self.state(kind).refreshed
    }

    /// Backend index and original name behind an exposed tool or prompt name.
    pub(crate) fn resolve_name(&self, kind: Kind, exposed: &str) -> Option<(usize, String)> {
        self.state(kind)
            .names
            .resolve(exposed)
            .map(|(b, n)| (b, n.to_owned()))
    }

    /// Whether backend `index` listed a tool or prompt named `name` (its own name) last time.
    pub(crate) fn offers(&self, kind: Kind, index: usize, name: &str) -> bool {
        self.state(kind)
            .offered
            .get(index)
            .and_then(Option::as_ref)
            .is_some_and(|names| names.iter().any(|n| n == name))
    }

    /// The backend that owns a resource URI: a listed resource, else a matching template.
    pub(crate) fn resolve_uri(&self, uri: &str) -> Option<usize> {
        let owner = |kind: Kind, matches: &dyn Fn(&str) -> bool| {
            self.state(kind).offered.iter().position(|listed| {
                listed
                    .as_ref()
                    .is_some_and(|l| l.iter().any(|item| matches(item)))
            })
        };
        owner(Kind::Resources, &|listed| listed == uri)
            .or_else(|| owner(Kind::Templates, &|template| template_matches(template, uri)))
    }
}

/// One backend's complete listing (all pages) for one kind.
#[derive(Clone, Debug, Default)]
pub(crate) struct Listing {
    pub(crate) items: Vec<Box<RawValue>>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) private: bool,
}

/// One page of a list result: its items appended to `listing`; returns `nextCursor`.
pub(crate) fn read_page(
    kind: Kind,
    result: &RawValue,
    listing: &mut Listing,
) -> Result<Option<Box<RawValue>>, ()> {
    let result: RawObject = serde_json::from_str(result.get()).map_err(drop)?;
    let items = result.get(kind.items_member()).ok_or(())?;
    let items: Vec<Box<RawValue>> = serde_json::from_str(items.get()).map_err(drop)?;
    listing.items.extend(items);
    read_cache_hints(&result, &mut listing.ttl_ms, &mut listing.private);
    let cursor = result
        .get("nextCursor")
        .filter(|c| c.get() != "null")
        .map(ToOwned::to_owned);
    Ok(cursor)
}

fn read_cache_hints(result: &RawObject, ttl_ms: &mut Option<u64>, private: &mut bool) {
    // Missing hints are read conservatively: not cacheable, not shareable.
    let ttl = result
        .get("ttlMs")
        .and_then(|t| serde_json::from_str::<u64>(t.get()).ok())
        .unwrap_or(0);
    *ttl_ms = Some(ttl_ms.map_or(ttl, |t| t.min(ttl)));
    *private |= result.get("cacheScope").is_none_or(|s| s.get() != r#""public""#);
}

/// The identifying key (`name`, `uri`, `uriTemplate`) of each item.
pub(crate) fn item_keys(kind: Kind, items: &[Box<RawValue>]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| {
            let item: RawObject = serde_json::from_str(item.get()).ok()?;
            serde_json::from_str::<String>(item.get(kind.key_member())?.get()).ok()
        })
        .collect()
}

/// An item of a listing, as a list filter sees it: its backend, its key (the backend's own name
/// of a tool or prompt, a resource's URI, a template's text) and the name it is exposed under.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    pub(crate) backend: usize,
    pub(crate) key: &'a str,
    pub(crate) exposed: &'a str,
}

/// What a list filter keeps of a listing.
pub(crate) type Keep<'a> = dyn Fn(Item<'_>) -> bool + 'a;

fn finish_result(result: &mut Map<String, Value>, ttl_ms: u64, private: bool, server_info: &Value) {
    result.insert("resultType".to_owned(), json!("complete"));
    result.insert("ttlMs".to_owned(), json!(ttl_ms));
    result.insert(
        "cacheScope".to_owned(),
        json!(if private { "private" } else { "public" }),
    );
    result.insert(
        "_meta".to_owned(),
        json!({ "io.modelcontextprotocol/serverInfo": server_info }),
    );
}

/// Adds the Tasks extension ([`TASKS_EXTENSION`], no settings) to a `server/discover` result
/// that lacks it: a legacy HTTP backend's, whose calls the bridge may answer with a task.
pub(crate) fn offer_tasks(result: &mut Value) {
    let Some(capabilities) = result.get_mut("capabilities").and_then(Value::as_object_mut) else {
        return;
    };
    let extensions = capabilities.entry("extensions").or_insert_with(|| json!({}));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.entry(TASKS_EXTENSION).or_insert_with(|| json!({}));
    }
}

/// Merges `server/discover` results (`(backend name, result)`, in configuration order):
/// `supportedVersions` is the intersection with the gateway's own; `tools`, `prompts`,
/// `resources` and `completions` are offered if any backend offers them (without `listChanged`,
/// which needs listen streams the gateway does not merge), and `resources.subscribe` if any
/// backend offers it (a subscription to one backend's resources is routed to it); an extension is
/// offered only if every backend offers it, except the Tasks extension ([`TASKS_EXTENSION`]),
/// offered if any backend offers it (with that backend's settings): a task is created by the
/// backend that owns the called tool, and every follow-up carries a handle pinned to that
/// backend, so backends without tasks never see a task request; `instructions` are
/// concatenated, each under its backend's name.
pub(crate) fn merge_discover(own_versions: &[&str], results: &[(&str, Value)], server_info: &Value) -> Value {
    let mut versions: Vec<&str> = own_versions.to_vec();
    let mut capabilities = Map::new();
    let mut extensions: Option<Map<String, Value>> = None;
    let mut tasks: Option<Value> = None;
    let mut instructions = Vec::new();
    let mut ttl_ms: Option<u64> = None;
    let mut private = false;
    for (backend, result) in results {
        let supported: Vec<&str> = result["supportedVersions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        versions.retain(|v| supported.contains(v));
        let caps = &result["capabilities"];
        for key in ["tools", "prompts", "resources", "completions"] {
            if caps[key].is_object() && !capabilities.contains_key(key) {
                capabilities.insert(key.to_owned(), json!({}));
            }
        }
        if caps["resources"]["subscribe"] == json!(true) {
            capabilities.insert("resources".to_owned(), json!({ "subscribe": true }));
        }
        let theirs = caps["extensions"].as_object().cloned().unwrap_or_default();
        if tasks.is_none() {
            tasks = theirs.get(TASKS_EXTENSION).cloned();
        }
        extensions = Some(match extensions {
            None => theirs,
            Some(mut ours) => {
                ours.retain(|k, _| theirs.contains_key(k));
                ours
            }
        });
        if let Some(text) = result["instructions"].as_str().filter(|t| !t.is_empty()) {
            instructions.push(format!("[{backend}] {text}"));
        }
        let ttl = result["ttlMs"].as_u64().unwrap_or(0);
        ttl_ms = Some(ttl_ms.map_or(ttl, |t| t.min(ttl)));
        private |= result["cacheScope"].as_str() != Some("public");
    }
    if let Some(settings) = tasks {
        extensions
            .get_or_insert_with(Map::new)
            .insert(TASKS_EXTENSION.to_owned(), settings);
    }
    if let Some(extensions) = extensions.filter(|e| !e.is_empty()) {
        capabilities.insert("extensions".to_owned(), Value::Object(extensions));
    }
    let mut merged = Map::new();
    merged.insert("supportedVersions".to_owned(), json!(versions));
    merged.insert("capabilities".to_owned(), Value::Object(capabilities));
    if !instructions.is_empty() {
        merged.insert("instructions".to_owned(), json!(instructions.join("\n\n")));
    }
    finish_result(&mut merged, ttl_ms.unwrap_or(0), private, server_info);
    Value::Object(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn unique_names_stay_conflicts_get_prefixed() {
        let n = expose(&["a", "b", "c"], &[names(&["x", "y"]), names(&["x", "z"]), None]);
        assert_eq!(n.resolve("y"), Some((0, "y")));
        assert_eq!(n.resolve("z"), Some((1, "z")));
        assert_eq!(n.resolve("a__x"), Some((0, "x")));
        assert_eq!(n.resolve("b__x"), Some((1, "x")));
        assert_eq!(n.resolve("x"), None);
        assert_eq!(n.resolve("c__x"), None);
    }

    #[test]
    fn a_unique_name_equal_to_a_prefixed_one_is_prefixed_too() {
        let n = expose(
            &["a", "b", "c"],
            &[names(&["x"]), names(&["x"]), names(&["a__x"])],
        );
        assert_eq!(n.resolve("a__x"), Some((0, "x")));
        assert_eq!(n.resolve("c__a__x"), Some((2, "a__x")));
    }

    #[test]
    fn duplicates_within_one_backend_are_not_conflicts() {
        let n = expose(&["a", "b"], &[names(&["x", "x"]), names(&["y"])]);
        assert_eq!(n.resolve("x"), Some((0, "x")));
    }

    #[test]
    fn templates_match_uris() {
        assert!(template_matches(
            "demo://{id}/audit-log",
            "demo://alpha/audit-log"
        ));
        assert!(!template_matches("demo://{id}/audit-log", "demo:///audit-log"));
        assert!(!template_matches(
            "demo://{id}/audit-log",
            "other://alpha/audit-log"
        ));
        assert!(template_matches("file:///{path}", "file:///a/b.txt"));
        assert!(template_matches("x://{a}-{b}", "x://1-2"));
        assert!(!template_matches("x://{a}-{b}", "x://1-"));
        assert!(template_matches("x://fixed", "x://fixed"));
        assert!(!template_matches("x://{a", "x://1"));
    }

    #[test]
    fn the_generation_changes_with_what_a_backend_offers_only() {
        let catalog = Catalog::new(vec!["a".into(), "b".into()], Duration::from_secs(60));
        let (exposed, first) = catalog.record(Kind::Tools, vec![names(&["x"]), names(&["x"])]);
        assert_eq!(exposed.resolve("a__x"), Some((0, "x")));
        let (_, same) = catalog.record(Kind::Tools, vec![names(&["x"]), None]);
        assert_eq!(same, first, "a backend that did not answer keeps its names");
        assert!(catalog.confirm(Kind::Tools, first));
        let (exposed, next) = catalog.record(Kind::Tools, vec![None, names(&["y"])]);
        assert_ne!(next, first);
        assert_eq!(exposed.resolve("x"), Some((0, "x")));
        assert!(
            !catalog.confirm(Kind::Tools, first),
            "a merge of the old names is stale"
        );
        assert!(catalog.confirm(Kind::Prompts, 0), "kinds are apart");
    }

    #[test]
    fn discover_merge_intersects_versions_and_extensions() {
        let a = json!({"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{"listChanged":true},"extensions":{"x":{},"y":{}}},"ttlMs":60000,"cacheScope":"public","instructions":"use a"});
        let b = json!({"supportedVersions":["2026-07-28"],"capabilities":{"prompts":{},"extensions":{"y":{}}},"ttlMs":1000,"cacheScope":"public"});
        let merged = merge_discover(
            &["2026-07-28"],
            &[("a", a), ("b", b)],
            &json!({"name":"gw","version":"1"}),
        );
        assert_eq!(merged["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(
            merged["capabilities"],
            json!({"tools":{},"prompts":{},"extensions":{"y":{}}})
        );
        assert_eq!(merged["ttlMs"], 1000);
        assert_eq!(merged["cacheScope"], "public");
        assert_eq!(merged["instructions"], "[a] use a");
    }

    #[test]
    fn discover_merge_offers_tasks_if_any_backend_does() {
        let tasks = json!({"supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"extensions":{"io.modelcontextprotocol/tasks":{},"y":{}}}});
        let plain = json!({"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}});
        let info = json!({"name":"gw","version":"1"});
        let merged = merge_discover(&["2026-07-28"], &[("a", plain.clone()), ("b", tasks)], &info);
        assert_eq!(
            merged["capabilities"]["extensions"],
            json!({"io.modelcontextprotocol/tasks":{}})
        );
        let merged = merge_discover(&["2026-07-28"], &[("a", plain.clone()), ("b", plain)], &info);
        assert!(merged["capabilities"].get("extensions").is_none());
    }

    #[test]
    fn tasks_are_offered_beside_other_extensions_and_their_settings_kept() {
        let mut bare = json!({"capabilities":{"tools":{}}});
        offer_tasks(&mut bare);
        assert_eq!(bare["capabilities"]["extensions"], json!({TASKS_EXTENSION:{}}));
        let mut other = json!({"capabilities":{"extensions":{"y":{"a":1}}}});
        offer_tasks(&mut other);
        assert_eq!(
            other["capabilities"]["extensions"],
            json!({"y":{"a":1},TASKS_EXTENSION:{}})
        );
        let mut set = json!({"capabilities":{"extensions":{TASKS_EXTENSION:{"s":2}}}});
        offer_tasks(&mut set);
        assert_eq!(
            set["capabilities"]["extensions"],
            json!({TASKS_EXTENSION:{"s":2}})
        );
        let mut odd = json!({"result":"no capabilities"});
        offer_tasks(&mut odd);
        assert_eq!(odd, json!({"result":"no capabilities"}));
    }

    #[test]
    fn a_shared_name_is_prefixed_and_a_unique_one_kept() {
        let alpha = vec!["whoami".to_owned(), "provision_cluster".to_owned()];
        let beta = vec!["whoami".to_owned(), "archive_repo".to_owned()];
        let names = expose(&["alpha", "beta"], &[Some(alpha), Some(beta)]);
        assert_eq!(names.exposed(0, "whoami"), Some("alpha__whoami"));
        assert_eq!(names.exposed(1, "whoami"), Some("beta__whoami"));
        assert_eq!(names.resolve("provision_cluster"), Some((0, "provision_cluster")));
        assert_eq!(names.resolve("beta__whoami"), Some((1, "whoami")));
        assert_eq!(names.resolve("whoami"), None);
    }
}
