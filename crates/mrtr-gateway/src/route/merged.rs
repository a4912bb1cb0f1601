//! Merged `*/list` answers kept between requests: each backend's listing as read once
//! ([`Page`]), the items of the last merge of each kind renamed under the naming rule
//! ([`Merged`]), and the written answer ([`Merged::render`]), filtered per request.
//!
//! Every `*/list` still asks every backend. What is kept is the work done on the answers: when a
//! backend's one-page `result` has the same text as last time, its parsed listing is reused;
//! when every backend answered as for the last merge (the same pages, the same failures), the
//! catalog's names have not changed since ([`Catalog`](super::catalog::Catalog)'s generation)
//! and the pins file has not been reloaded ([`Pins::generation`](super::pins::Pins)), the merged
//! items are served as they are, without reading, renaming or re-serialising any catalog. The
//! policy and pinning's withholding are applied at every request ([`Merged::render`]), so a
//! cached list never widens what a caller sees. One merge per kind is kept, of listings of one
//! page each (a paged listing is merged every time): memory stays within what the backends'
//! answers, bounded by the response limits, already take.
//!
//! Imports the catalog's types (`catalog.rs`) and the ground floor.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::catalog::{self, Item, Keep, Kind, Listing, Names};
use crate::jsonrpc::RawObject;

/// One backend's complete listing of one kind, read once.
#[derive(Debug)]
pub(crate) struct Page {
    /// The backend's `result` text when the listing is that one page (compared with the next
    /// answer); `None` for a listing of several pages, which is never reused.
    text: Option<Box<str>>,
    pub(crate) listing: Listing,
    /// The identifying key of each item ([`catalog::item_keys`]).
    pub(crate) keys: Vec<String>,
}

impl Page {
    /// The listing read from a backend, `text` being its one page's `result` when it had one.
    pub(crate) fn new(kind: Kind, text: Option<Box<str>>, listing: Listing) -> Self {
        let keys = catalog::item_keys(kind, &listing.items);
        Self { text, listing, keys }
    }

    /// Whether `result` (a first page's `result` text) is this one-page listing again.
    pub(crate) fn is(&self, result: &str) -> bool {
        self.text.as_deref() == Some(result)
    }
}

/// One item of a merge: where it comes from, its key, the name it is exposed under when that
/// differs from its key, and its text as the client gets it.
#[derive(Debug)]
struct Entry {
    backend: usize,
    key: String,
    renamed: Option<String>,
    text: Box<RawValue>,
}

/// The merge of what every backend listed of one kind, before any caller's filter.
#[derive(Debug)]
pub(crate) struct Merged {
    /// Each backend's listing, `None` where it gave none.
    pages: Vec<Option<Arc<Page>>>,
    /// The catalog generation whose names the entries are exposed under.
    generation: u64,
    /// The pins generation the pages were observed under.
    pins: u64,
    entries: Vec<Entry>,
    ttl_ms: u64,
    private: bool,
}

impl Merged {
    /// Merges `pages` (in configuration order, `None` where a backend gave nothing) under
    /// `names` of catalog `generation`, observed by pinning at its generation `pins`: tools and
    /// prompts renamed (those `names` does not expose left out), resources and templates as
    /// they came; the least `ttlMs` of all, private if any is.
    pub(crate) fn new(
        kind: Kind,
        names: &Names,
        pages: Vec<Option<Arc<Page>>>,
        generation: u64,
        pins: u64,
    ) -> Self {
        let mut entries = Vec::new();
        let mut ttl_ms: Option<u64> = None;
        let mut private = false;
        for (backend, page) in pages.iter().enumerate() {
            let Some(page) = page else { continue };
            let listed = page.listing.ttl_ms.unwrap_or(0);
            ttl_ms = Some(ttl_ms.map_or(listed, |t| t.min(listed)));
            private |= page.listing.private;
            for item in &page.listing.items {
                if let Some(entry) = entry(kind, names, backend, item) {
                    entries.push(entry);
                }
            }
        }
        Self {
            pages,
            generation,
            pins,
            entries,
            ttl_ms: ttl_ms.unwrap_or(0),
            private,
        }
    }

    /// Whether this merge is what merging `pages` again would give, as long as the catalog is
    /// still at [`generation`](Self::generation): the very same listings and failures, pinning
    /// still at `pins`.
    pub(crate) fn serves(&self, pages: &[Option<Arc<Page>>], pins: u64) -> bool {
        self.pins == pins
            && self.pages.len() == pages.len()
            && self.pages.iter().zip(pages).all(|pair| match pair {
                (Some(kept), Some(now)) => Arc::ptr_eq(kept, now),
                (None, None) => true,
                _ => false,
            })
    }

    /// The catalog generation whose names the merge is exposed under.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether this merge may be kept for the next request: every listing in it is one page.
    pub(crate) fn keepable(&self) -> bool {
        self.pages.iter().flatten().all(|page| page.text.is_some())
    }

    /// The list result (raw JSON) with the items `keep` keeps (every item without it), resources
    /// and templates once per key (the first backend's that is kept). `server_info` is the
    /// gateway's own, raw JSON.
    pub(crate) fn render(&self, kind: Kind, keep: Option<&Keep<'_>>, server_info: &str) -> String {
        let texts: usize = self.entries.iter().map(|e| e.text.get().len() + 1).sum();
        let mut out = String::with_capacity(texts + server_info.len() + 160);
        let _ = write!(out, r#"{{"{}":["#, kind.items_member());
        let mut seen: HashSet<&str> = HashSet::new();
        let unique_keys = matches!(kind, Kind::Resources | Kind::Templates);
        let mut first = true;
        for entry in &self.entries {
            let item = Item {
                backend: entry.backend,
                key: &entry.key,
                exposed: entry.renamed.as_deref().unwrap_or(&entry.key),
            };
            if keep.is_some_and(|keep| !keep(item)) || (unique_keys && !seen.insert(&entry.key)) {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(entry.text.get());
        }
        // A list filtered for its caller must not be shared with another by a cache.
        let private = self.private || keep.is_some();
        let scope = if private { "private" } else { "public" };
        let _ = write!(
            out,
            r#"],"resultType":"complete","ttlMs":{},"cacheScope":"{scope}","_meta":{{"io.modelcontextprotocol/serverInfo":{server_info}}}}}"#,
            self.ttl_ms
        );
        out
    }
}

/// `item` of backend `backend` as merged: `None` when it is no object with a string key, or
/// (a tool or prompt) `names` does not expose it. A renamed item is re-serialised with its new
/// name (every other member keeps its raw text); any other passes as it came.
fn entry(kind: Kind, names: &Names, backend: usize, item: &RawValue) -> Option<Entry> {
    let mut object: RawObject = serde_json::from_str(item.get()).ok()?;
    let key: String = serde_json::from_str(object.get(kind.key_member())?.get()).ok()?;
    let renamed = match kind {
        Kind::Tools | Kind::Prompts => {
            let exposed = names.exposed(backend, &key)?;
            (exposed != key).then(|| exposed.to_owned())
        }
        Kind::Resources | Kind::Templates => None,
    };
    let text = match &renamed {
        Some(exposed) => {
            let (_, slot) = object.0.iter_mut().find(|(k, _)| k == "name")?;
            *slot = serde_json::value::to_raw_value(exposed).ok()?;
            serde_json::value::to_raw_value(&object).ok()?
        }
        None => item.to_owned(),
    };
    Some(Entry {
        backend,
        key,
        renamed,
        text,
    })
}

/// The last merge of each kind (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct MergedLists {
    kinds: [Mutex<Option<Arc<Merged>>>; 4],
}

impl MergedLists {
    pub(crate) fn new() -> Self {
        Self {
            kinds: Default::default(),
        }
    }

    fn slot(&self, kind: Kind) -> std::sync::MutexGuard<'_, Option<Arc<Merged>>> {
        self.kinds[kind.index()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The last merge of `kind`, if one is kept.
    pub(crate) fn last(&self, kind: Kind) -> Option<Arc<Merged>> {
        self.slot(kind).clone()
    }

    /// Keeps `merged` as the last merge of `kind`, if it may be kept.
    pub(crate) fn keep(&self, kind: Kind, merged: &Arc<Merged>) {
        if merged.keepable() {
            *self.slot(kind) = Some(merged.clone());
        }
    }

    /// The listing of backend `index` kept in the last merge of `kind`.
    pub(crate) fn page(last: Option<&Merged>, index: usize) -> Option<&Arc<Page>> {
        last?.pages.get(index)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::catalog::expose;
    use serde_json::{Value, json};

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn page(kind: Kind, items: &[&str], ttl_ms: u64, private: bool) -> Option<Arc<Page>> {
        let listing = Listing {
            items: items.iter().map(|i| raw(i)).collect(),
            ttl_ms: Some(ttl_ms),
            private,
        };
        Some(Arc::new(Page::new(kind, Some("text".into()), listing)))
    }

    fn names(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| (*s).to_owned()).collect())
    }

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_merge_renames_shared_names_and_merges_cache_hints() {
        let n = expose(&["a", "b"], &[names(&["t", "u"]), names(&["t"])]);
        let a = page(
            Kind::Tools,
            &[
                r#"{"name":"t","inputSchema":{"z":1,"a":2}}"#,
                r#"{ "name" : "u" }"#,
            ],
            500,
            false,
        );
        let b = page(Kind::Tools, &[r#"{"name":"t"}"#], 100, true);
        let merged = Merged::new(Kind::Tools, &n, vec![a.clone(), b], 0, 0);
        let text = merged.render(Kind::Tools, None, r#"{"name":"gw","version":"1"}"#);
        let all = parsed(&text);
        let names: Vec<&str> = all["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a__t", "u", "b__t"]);
        assert!(
            text.contains(r#"{ "name" : "u" }"#),
            "an item not renamed passes as it came: {text}"
        );
        assert_eq!(all["tools"][0]["inputSchema"], json!({"z":1,"a":2}));
        assert_eq!(all["ttlMs"], 100);
        assert_eq!(all["cacheScope"], "private");
        assert_eq!(all["resultType"], "complete");
        assert_eq!(all["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "gw");
        // A filter sees exposed names, and marks the list private even when nothing is left out.
        let merged = Merged::new(Kind::Tools, &n, vec![a, None], 0, 0);
        let only_prefixed = |item: Item<'_>| item.exposed.contains("__");
        let filtered = parsed(&merged.render(Kind::Tools, Some(&only_prefixed), "{}"));
        assert_eq!(
            filtered["tools"],
            json!([{"name":"a__t","inputSchema":{"z":1,"a":2}}])
        );
        assert_eq!(filtered["cacheScope"], "private");
        let everything = |_: Item<'_>| true;
        let unfiltered = parsed(&merged.render(Kind::Tools, None, "{}"));
        assert_eq!(unfiltered["cacheScope"], "public");
        let kept = parsed(&merged.render(Kind::Tools, Some(&everything), "{}"));
        assert_eq!(kept["cacheScope"], "private");
        assert_eq!(kept["tools"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_uri_listed_twice_is_served_once_from_the_first_backend_kept() {
        let n = Names::default();
        let a = page(Kind::Resources, &[r#"{"uri":"x://1","name":"a"}"#], 0, false);
        let b = page(
            Kind::Resources,
            &[
                r#"{"uri":"x://1","name":"b"}"#,
                r#"{"uri":"x://2"}"#,
                r#"{"uri":3}"#,
                "[1]",
            ],
            0,
            false,
        );
        let merged = Merged::new(Kind::Resources, &n, vec![a, b], 0, 0);
        let all = parsed(&merged.render(Kind::Resources, None, "{}"));
        assert_eq!(
            all["resources"],
            json!([{"uri":"x://1","name":"a"},{"uri":"x://2"}]),
            "items without a string key are left out"
        );
        let not_first = |item: Item<'_>| item.backend != 0;
        let later = parsed(&merged.render(Kind::Resources, Some(&not_first), "{}"));
        assert_eq!(
            later["resources"],
            json!([{"uri":"x://1","name":"b"},{"uri":"x://2"}])
        );
    }

    #[test]
    fn a_merge_serves_only_the_same_pages_generation_and_pins() {
        let n = expose(&["a", "b"], &[names(&["t"]), None]);
        let a = page(Kind::Tools, &[r#"{"name":"t"}"#], 0, false);
        let merged = Merged::new(Kind::Tools, &n, vec![a.clone(), None], 3, 1);
        assert!(merged.keepable());
        assert_eq!(merged.generation(), 3);
        assert!(merged.serves(&[a.clone(), None], 1));
        assert!(
            !merged.serves(&[a.clone(), None], 2),
            "the pins file was reloaded"
        );
        let again = page(Kind::Tools, &[r#"{"name":"t"}"#], 0, false);
        assert!(
            !merged.serves(&[again, None], 1),
            "another reading of the backend"
        );
        assert!(
            !merged.serves(&[a.clone(), a.clone()], 1),
            "a backend answered this time"
        );
        assert!(!merged.serves(&[None, None], 1), "a backend failed this time");
        assert!(!merged.serves(std::slice::from_ref(&a), 1));
        let paged = Arc::new(Page::new(Kind::Tools, None, Listing::default()));
        assert!(!Merged::new(Kind::Tools, &n, vec![Some(paged), None], 3, 1).keepable());
        assert!(a.as_ref().unwrap().is("text") && !a.as_ref().unwrap().is("text "));
    }
}
