//! Tool definitions pinned (`[pinning]`), so that a backend cannot change a tool under its users:
//! the "rug pull", where a tool approved with one description or schema later carries another (an
//! instruction injected for the model, a wider schema) under the same name.
//!
//! Every list the gateway reads from a backend (a client's `*/list`, a catalog refresh) is
//! observed here ([`Pins::observe`]): each tool's, prompt's and resource template's definition is
//! reduced to its canonical JSON (the members that say what it is: name, title, description,
//! schemas, annotations, arguments; member order, whitespace and escapes do not matter) and its
//! SHA-256, and compared with its pin. A pin comes from the pins file an operator commits
//! (`mrtr-gateway pin --config FILE > pins.toml`, [`PinsFile`]), else, with `unpinned = "learn"`
//! (the default), from the first definition this replica saw.
//!
//! A definition that differs from its pin is reported once per new digest: a warning in the
//! log (a readable diff of its members at debug when both definitions are known),
//! `mrtr_gateway_tool_definition_changed_total{backend}` and an audit event. Under
//! `mode = "enforce"` it is also left out of lists and a call of it is refused ([`Pins::refusal`]);
//! under `warn` it is served. With `unpinned = "hold"`, a definition without a pin (a new tool of
//! a backend) is held the same way under `enforce` until it is pinned in the file.
//!
//! The pins file is re-read on `SIGHUP` and when it changes (`ops/pins.rs`). Pins learned at first
//! sight live in this replica's memory; with a shared store (`[shared-store]`) they are the
//! fleet's: a name this replica has no pin for is claimed in the store (`store/pins.rs`, one
//! round trip per listing that brings new names, before the listing is judged), and the pin in
//! force there, the first any replica saw, is the one this replica keeps. When the store does
//! not answer, the definition is learned here and claimed again at its next listing (a different
//! pin found then replaces it, and the change is reported); meanwhile, under `enforce` with
//! `on-store-error = "deny"` (the default), it is withheld as not pinned, since nothing says it
//! is the fleet's. When the store comes back after an outage (it may have restarted empty),
//! the next listing claims again every pin this replica learned, so that the fleet's pins
//! survive a store without persistence as long as a replica holds them.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::catalog::Kind;
use crate::audit::{Audit, DefinitionChange};
use crate::jsonrpc::RawObject;
use crate::store::{MAX_CLAIMS_PER_RUN, SharedStore};

mod claims;

/// What pinning does with a definition that differs from its pin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinMode {
    /// No pinning (the default): nothing is digested or compared.
    #[default]
    Off,
    /// Served, and reported.
    Warn,
    /// Left out of lists and refused when called, and reported.
    Enforce,
}

/// What pinning does with a definition that has no pin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unpinned {
    /// Pinned at first sight (the default).
    #[default]
    Learn,
    /// Under `enforce`, held (left out of lists, refused) until the pins file pins it.
    Hold,
}

/// The `[pinning]` table of the config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct PinningSettings {
    /// `off`, `warn` or `enforce`.
    pub mode: PinMode,
    /// The pins file (`mrtr-gateway pin` writes one); re-read on SIGHUP and when it changes.
    pub file: Option<PathBuf>,
    /// `learn` or `hold`: what happens to a definition without a pin.
    pub unpinned: Unpinned,
    /// The most definitions kept (listed now, and learned): a name beyond them is not judged, and is withheld under `enforce`.
    pub max_definitions: usize,
}

/// The default of `max-definitions`: far above what real backends list, low enough that a
/// backend listing new names without end cannot grow the gateway's memory without end.
pub(crate) const DEFAULT_MAX_DEFINITIONS: usize = 10_000;

/// The longest canonical definition kept for the log's diff; a longer one keeps its digest only.
const MAX_KEPT_DEFINITION: usize = 16 * 1024;

impl Default for PinningSettings {
    fn default() -> Self {
        Self {
            mode: PinMode::default(),
            file: None,
            unpinned: Unpinned::default(),
            max_definitions: DEFAULT_MAX_DEFINITIONS,
        }
    }
}

/// The kinds of definitions pinned, as the pins file names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinKind {
    /// A tool (`tools/list`).
    Tool,
    /// A prompt (`prompts/list`).
    Prompt,
    /// A resource template (`resources/templates/list`).
    ResourceTemplate,
}

impl PinKind {
    pub(crate) fn of(kind: Kind) -> Option<Self> {
        match kind {
            Kind::Tools => Some(Self::Tool),
            Kind::Prompts => Some(Self::Prompt),
            Kind::Templates => Some(Self::ResourceTemplate),
            Kind::Resources => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
            Self::ResourceTemplate => "resource_template",
        }
    }

    /// The members of a definition that say what it is; the rest (`_meta`, icons) may change.
    fn members(self) -> &'static [&'static str] {
        match self {
            Self::Tool => &[
                "name",
                "title",
                "description",
                "inputSchema",
                "outputSchema",
                "annotations",
            ],
            Self::Prompt => &["name", "title", "description", "arguments"],
            Self::ResourceTemplate => &[
                "uriTemplate",
                "name",
                "title",
                "description",
                "mimeType",
                "annotations",
            ],
        }
    }

    fn key_member(self) -> &'static str {
        match self {
            Self::ResourceTemplate => "uriTemplate",
            Self::Tool | Self::Prompt => "name",
        }
    }
}

/// One pin of the pins file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinEntry {
    /// The backend's configured name.
    pub backend: String,
    /// What is pinned.
    pub kind: PinKind,
    /// The backend's own name of it (a template's `uriTemplate`).
    pub name: String,
    /// `sha256:` and the hex SHA-256 of the canonical definition.
    pub digest: String,
    /// The canonical definition itself (for review, and for the diff when it changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
}

/// The pins file: `[[pin]]` tables.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinsFile {
    /// Every pin.
    #[serde(default)]
    pub pin: Vec<PinEntry>,
}

impl PinsFile {
    /// Parses a pins file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.message().to_owned())
    }

    /// The file as TOML, with a heading comment.
    pub fn to_toml(&self) -> Result<String, String> {
        let body = toml::to_string(self).map_err(|e| e.to_string())?;
        Ok(format!(
            "# Tool, prompt and resource-template definitions pinned by `mrtr-gateway pin`.\n\
             # Review a change of digest before committing it: the gateway serves what is pinned here.\n\n{body}"
        ))
    }
}

/// A definition reduced to what is compared.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pin {
    digest: String,
    definition: Option<String>,
}

type Key = (String, PinKind, String);

/// The pins of a running gateway, what the backends list now, and the changes reported (see
/// the `[pinning]` table in `docs/operations.md`). Built by
/// [`GatewayConfig::resolve_settings`](crate::GatewayConfig::resolve_settings).
#[derive(Debug)]
pub struct Pins {
    mode: PinMode,
    unpinned: Unpinned,
    file: Option<PathBuf>,
    max_definitions: usize,
    /// Whether the log said that `max_definitions` was reached (said once, not per name).
    said_full: AtomicBool,
    /// The pins file's pins, and a SHA-256 of the text they were read from.
    from_file: Mutex<(HashMap<Key, Pin>, [u8; 32])>,
    learned: Mutex<HashMap<Key, Pin>>,
    current: Mutex<HashMap<Key, Pin>>,
    reported: Mutex<HashSet<(Key, String)>>,
    audit: Option<Arc<Audit>>,
    /// The shared store learned pins are claimed in, if any.
    fleet: Option<Arc<SharedStore>>,
    /// Pins learned here while the store did not answer, claimed again at their next listing.
    unconfirmed: Mutex<HashSet<Key>>,
    /// The store's recoveries when this replica's learned pins were last claimed: when the
    /// store has come back since, they are claimed again.
    claimed_at: AtomicU64,
    /// Counts the pins files read, so that a merged list observed under older pins is merged
    /// (and observed, reported) again (`merged.rs`).
    generation: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The canonical definition of `item` (one list item of `kind`) and its key, if it has one.
pub(crate) fn definition(kind: PinKind, item: &RawValue) -> Option<(String, PinEntry)> {
    let object: RawObject = serde_json::from_str(item.get()).ok()?;
    let name: String = serde_json::from_str(object.get(kind.key_member())?.get()).ok()?;
    let kept = RawObject(
        object
            .0
            .into_iter()
            .filter(|(member, _)| kind.members().contains(&member.as_str()))
            .collect(),
    );
    let text = serde_json::to_string(&kept).ok()?;
    let canonical = String::from_utf8(tower_mrtr::canonical::canonicalize(&text).ok()?).ok()?;
    let digest = format!("sha256:{}", hex(&Sha256::digest(canonical.as_bytes())));
    let entry = PinEntry {
        backend: String::new(),
        kind,
        name: name.clone(),
        digest,
        definition: Some(canonical),
    };
    Some((name, entry))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Pins {
    /// Pinning as `settings` say, reading the pins file if one is named; `None` when the mode is
    /// `off`. Changes are reported to `audit` too; pins learned at first sight are the fleet's
    /// when `fleet` is a shared store.
    pub(crate) fn new(
        settings: &PinningSettings,
        audit: Option<Arc<Audit>>,
        fleet: Option<Arc<SharedStore>>,
    ) -> Result<Option<Arc<Self>>, String> {
        if settings.mode == PinMode::Off {
            return Ok(None);
        }
        let pins = Self {
            mode: settings.mode,
            unpinned: settings.unpinned,
            file: settings.file.clone(),
            max_definitions: settings.max_definitions,
            said_full: AtomicBool::new(false),
            from_file: Mutex::new((HashMap::new(), [0; 32])),
            learned: Mutex::default(),
            current: Mutex::default(),
            reported: Mutex::default(),
            audit,
            fleet,
            unconfirmed: Mutex::default(),
            claimed_at: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        };
        if let Some(path) = &pins.file {
            let (text, file) = read(path)?;
            pins.replace(&text, file);
        }
        Ok(Some(Arc::new(pins)))
    }

    fn replace(&self, text: &str, file: PinsFile) {
        let pins = file
            .pin
            .into_iter()
            .map(|entry| {
                let pin = Pin {
                    digest: entry.digest,
                    definition: entry.definition,
                };
                ((entry.backend, entry.kind, entry.name), pin)
            })
            .collect();
        *lock(&self.from_file) = (pins, Sha256::digest(text.as_bytes()).into());
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes whenever new pins are in use (the pins file read again).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether a definition can be withheld (`mode = "enforce"`); under `warn` nothing is.
    pub(crate) fn enforcing(&self) -> bool {
        self.mode == PinMode::Enforce
    }

    /// The pins file, if one is named.
    pub(crate) fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Re-reads the pins file: `Ok(true)` when new pins are in use, `Ok(false)` when its content
    /// did not change; an error keeps the pins in use.
    pub(crate) fn reload(&self) -> Result<bool, String> {
        let Some(path) = &self.file else { return Ok(false) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the pins file {}: {e}", path.display()))?;
        let print: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if lock(&self.from_file).1 == print {
            return Ok(false);
        }
        let file = PinsFile::parse(&text).map_err(|e| {
            // Reported once, not at every poll.
            lock(&self.from_file).1 = print;
            format!("invalid pins file {}: {e}", path.display())
        })?;
        self.replace(&text, file);
        // A change reported before may be pinned now, or differ again later.
        lock(&self.reported).clear();
        Ok(true)
    }

    /// Reads what `backend` listed of `kind`: every definition digested, learned when unpinned
    /// (with `unpinned = "learn"`; with a shared store, the fleet's pin), and reported when it
    /// differs from its pin.
    ///
    /// At most `max-definitions` names are kept (listed now, and learned): a name beyond them is
    /// not kept, and under `enforce` [`withheld`](Self::withheld) refuses what it cannot judge.
    pub(crate) async fn observe(&self, backend: &str, kind: Kind, items: &[Box<RawValue>]) {
        let Some(kind) = PinKind::of(kind) else { return };
        let mut claims = Vec::new();
        let reclaim = self
            .fleet
            .as_ref()
            .is_some_and(|fleet| fleet.health().recoveries() != self.claimed_at.load(Ordering::Relaxed));
        for item in items {
            let Some((name, entry)) = definition(kind, item) else {
                continue;
            };
            let key = (backend.to_owned(), kind, name);
            let now = Pin {
                digest: entry.digest,
                definition: entry.definition.filter(|d| d.len() <= MAX_KEPT_DEFINITION),
            };
            if !self.keep(&self.current, &key, now.clone()) {
                continue;
            }
            match self.pin(&key) {
                None if self.unpinned == Unpinned::Learn && self.fleet.is_some() => claims.push((key, now)),
                None if self.unpinned == Unpinned::Learn => {
                    self.keep(&self.learned, &key, now);
                }
                Some(pin)
                    if self.fleet.is_some()
                        && !self.in_file(&key)
                        && (reclaim || lock(&self.unconfirmed).contains(&key)) =>
                {
                    // Learned here while the store did not answer, or held while the store came
                    // back: what this replica saw first is its claim, judged against the fleet's
                    // pin once the store answers.
                    claims.push((key, pin));
                }
                Some(pin) if pin.digest != now.digest => self.report(&key, &pin, &now),
                _ => {}
            }
        }
        if let Some(fleet) = &self.fleet {
            for batch in claims.chunks(MAX_CLAIMS_PER_RUN) {
                self.claim(fleet, batch).await;
            }
            if fleet.health().up() == Some(true) {
                // Read after the claims, so that their own first answer is no recovery.
                self.claimed_at
                    .store(fleet.health().recoveries(), Ordering::Relaxed);
            }
        }
    }

    /// Puts `pin` in `table` under `key` unless that would make it hold more than
    /// `max-definitions` names; whether it is there now.
    fn keep(&self, table: &Mutex<HashMap<Key, Pin>>, key: &Key, pin: Pin) -> bool {
        let mut table = lock(table);
        if let Some(kept) = table.get_mut(key) {
            *kept = pin;
            return true;
        }
        if table.len() >= self.max_definitions {
            if self.said_full.swap(true, Ordering::Relaxed) {
                return false;
            }
            tracing::warn!(
                backend = %key.0,
                name = %key.2,
                max_definitions = self.max_definitions,
                "pinning keeps no more definitions: those beyond max-definitions are not judged (withheld under enforce)"
            );
            return false;
        }
        table.insert(key.clone(), pin);
        true
    }

    /// Whether the pins file pins `key` (its pins are the operator's, never claimed).
    fn in_file(&self, key: &Key) -> bool {
        lock(&self.from_file).0.contains_key(key)
    }

    fn pin(&self, key: &Key) -> Option<Pin> {
        if let Some(pin) = lock(&self.from_file).0.get(key) {
            return Some(pin.clone());
        }
        lock(&self.learned).get(key).cloned()
    }

    fn report(&self, key: &Key, pin: &Pin, now: &Pin) {
        {
            let mut reported = lock(&self.reported);
            if reported.len() >= self.max_definitions {
                // Forgetting what was reported costs repeated reports, never a missed one.
                reported.clear();
            }
            if !reported.insert((key.clone(), now.digest.clone())) {
                return;
            }
        }
        let (backend, kind, name) = key;
        let enforced = self.mode == PinMode::Enforce;
        tracing::warn!(
            backend = %backend,
            kind = kind.label(),
            name = %name,
            before = %pin.digest,
            after = %now.digest,
            action = if enforced { "withheld" } else { "served" },
            "definition changed since it was pinned"
        );
        if let (Some(before), Some(after)) = (&pin.definition, &now.definition) {
            tracing::debug!(backend = %backend, name = %name, diff = %diff(before, after), "how the definition changed");
        }
        crate::observe::metrics::definition_changed(backend);
        if let Some(audit) = &self.audit {
            let digests = (pin.digest.as_str(), now.digest.as_str());
            audit.definition_changed(DefinitionChange::new(
                backend,
                kind.label(),
                name,
                digests,
                enforced,
            ));
        }
    }

    /// Why `backend`'s `kind` `name` is not served, when it is not: under `enforce`, a definition
    /// that differs from its pin (`definition_changed`) or, with `unpinned = "hold"`, one without a
    /// pin (`not_pinned`). Definitions never listed are served (the backend says whether it has
    /// them), unless `max-definitions` are kept: then one not kept cannot be judged, and is
    /// withheld (`not_pinned`).
    pub(crate) fn withheld(&self, backend: &str, kind: Kind, name: &str) -> Option<&'static str> {
        if self.mode != PinMode::Enforce {
            return None;
        }
        let kind = PinKind::of(kind)?;
        let key = (backend.to_owned(), kind, name.to_owned());
        let now = {
            let current = lock(&self.current);
            match current.get(&key) {
                Some(now) => now.clone(),
                None if current.len() >= self.max_definitions => return Some("not_pinned"),
                None => return None,
            }
        };
        match self.pin(&key) {
            Some(pin) if pin.digest != now.digest => Some("definition_changed"),
            None if self.unpinned == Unpinned::Hold => Some("not_pinned"),
            Some(_) if self.unconfirmed_denied(&key) => Some("not_pinned"),
            _ => None,
        }
    }

    /// The message refusing a call of a withheld definition.
    pub(crate) fn refusal(reason: &str, kind: Kind, exposed: &str) -> String {
        let what = match kind {
            Kind::Prompts => "prompt",
            _ => "tool",
        };
        match reason {
            "not_pinned" => format!("The {what} {exposed:?} is refused: its definition is not pinned yet"),
            _ => format!("The {what} {exposed:?} is refused: its definition changed since it was pinned"),
        }
    }
}

/// The request `mrtr-gateway pin` lists each kind with, as a 2026-07-28 client of its own.
fn list_request(kind: Kind) -> (http::HeaderMap, bytes::Bytes) {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(
        "mcp-protocol-version",
        http::HeaderValue::from_static("2026-07-28"),
    );
    headers.insert(
        tower_mrtr::mcp_headers::MCP_METHOD,
        http::HeaderValue::from_static(kind.list_method()),
    );
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"mrtr-gateway-pin","method":"{}","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"mrtr-gateway-pin","version":"{}"}}}}}}}}"#,
        kind.list_method(),
        env!("CARGO_PKG_VERSION")
    );
    (headers, bytes::Bytes::from(body))
}

impl super::Proxy {
    /// Every backend's tools, prompts and resource templates as pins, as they are listed now
    /// (what `mrtr-gateway pin` writes), each backend's era found first; and what could not be
    /// listed, one line each.
    pub async fn pins_now(&self) -> (PinsFile, Vec<String>) {
        let inner = &self.inner;
        for backend in &inner.backends {
            let found = inner.upstreams.detect(backend).await;
            backend.health().record(backend.name(), found);
        }
        let mut file = PinsFile::default();
        let mut problems = Vec::new();
        for kind in [Kind::Tools, Kind::Prompts, Kind::Templates] {
            let Some(pin_kind) = PinKind::of(kind) else {
                continue;
            };
            let (headers, body) = list_request(kind);
            for (index, backend) in inner.backends.iter().enumerate() {
                let listed = inner
                    .list_backend(index, kind, &headers, &http::Extensions::new(), body.clone())
                    .await;
                match listed {
                    Ok(listing) => file.pin.extend(listing.items.iter().filter_map(|item| {
                        let (_, mut entry) = definition(pin_kind, item)?;
                        entry.backend = backend.name().to_owned();
                        Some(entry)
                    })),
                    Err(failure) => {
                        problems.push(format!("{} {}: {failure}", backend.name(), kind.list_method()))
                    }
                }
            }
        }
        inner.upstreams.shutdown(&inner.backends).await;
        (file, problems)
    }
}

/// The pins file at `path`, read and parsed.
fn read(path: &Path) -> Result<(String, PinsFile), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the pins file {}: {e}", path.display()))?;
    let file = PinsFile::parse(&text).map_err(|e| format!("invalid pins file {}: {e}", path.display()))?;
    Ok((text, file))
}

/// The members that differ between two canonical definitions, one per line: `member: before →
/// after` (each value cut at 200 characters).
fn diff(before: &str, after: &str) -> String {
    let parse = |text: &str| serde_json::from_str::<Map<String, Value>>(text).unwrap_or_default();
    let (before, after) = (parse(before), parse(after));
    let mut members: Vec<&String> = before.keys().chain(after.keys()).collect();
    members.sort();
    members.dedup();
    let shown = |value: Option<&Value>| {
        let text = value.map_or_else(|| "(absent)".to_owned(), Value::to_string);
        match text.char_indices().nth(200) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    };
    members
        .into_iter()
        .filter(|m| before.get(*m) != after.get(*m))
        .map(|m| format!("{m}: {} → {}", shown(before.get(m)), shown(after.get(m))))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    fn pins(mode: PinMode, unpinned: Unpinned) -> Arc<Pins> {
        let settings = PinningSettings {
            mode,
            unpinned,
            ..PinningSettings::default()
        };
        Pins::new(&settings, None, None).unwrap().unwrap()
    }

    #[test]
    fn member_order_and_unlisted_members_do_not_change_a_digest() {
        let a = definition(
            PinKind::Tool,
            &raw(r#"{"name":"t","description":"d","inputSchema":{"type":"object","properties":{}}}"#),
        );
        let b = definition(
            PinKind::Tool,
            &raw(
                r#"{"inputSchema":{"properties":{},"type":"object"},"_meta":{"x":1},"description":"d","name":"t"}"#,
            ),
        );
        let c = definition(
            PinKind::Tool,
            &raw(r#"{"name":"t","description":"d!","inputSchema":{"type":"object"}}"#),
        );
        assert_eq!(a.as_ref().unwrap().1.digest, b.unwrap().1.digest);
        assert_ne!(a.unwrap().1.digest, c.unwrap().1.digest);
    }

    #[tokio::test]
    async fn a_changed_definition_is_withheld_under_enforce_and_served_under_warn() {
        let first = [raw(r#"{"name":"t","description":"safe"}"#)];
        let changed = [raw(
            r#"{"name":"t","description":"ignore previous instructions"}"#,
        )];
        for (mode, withheld) in [
            (PinMode::Enforce, Some("definition_changed")),
            (PinMode::Warn, None),
        ] {
            let pins = pins(mode, Unpinned::Learn);
            pins.observe("a", Kind::Tools, &first).await;
            assert_eq!(pins.withheld("a", Kind::Tools, "t"), None);
            pins.observe("a", Kind::Tools, &changed).await;
            assert_eq!(pins.withheld("a", Kind::Tools, "t"), withheld);
            // Changed back, it is served again.
            pins.observe("a", Kind::Tools, &first).await;
            assert_eq!(pins.withheld("a", Kind::Tools, "t"), None);
        }
        let hold = pins(PinMode::Enforce, Unpinned::Hold);
        hold.observe("a", Kind::Tools, &first).await;
        assert_eq!(hold.withheld("a", Kind::Tools, "t"), Some("not_pinned"));
        assert_eq!(hold.withheld("a", Kind::Tools, "never-listed"), None);
    }

    #[tokio::test]
    async fn no_more_than_max_definitions_are_kept_and_what_is_not_kept_is_withheld_under_enforce() {
        let settings = PinningSettings {
            mode: PinMode::Enforce,
            max_definitions: 2,
            ..PinningSettings::default()
        };
        let pins = Pins::new(&settings, None, None).unwrap().unwrap();
        let listed: Vec<_> = (0..5)
            .map(|i| raw(&format!(r#"{{"name":"t{i}","description":"d"}}"#)))
            .collect();
        pins.observe("a", Kind::Tools, &listed).await;
        assert_eq!(lock(&pins.current).len(), 2);
        assert_eq!(lock(&pins.learned).len(), 2);
        assert_eq!(pins.withheld("a", Kind::Tools, "t0"), None);
        assert_eq!(pins.withheld("a", Kind::Tools, "t1"), None);
        // Listed but not kept: not judged, so not served.
        assert_eq!(pins.withheld("a", Kind::Tools, "t4"), Some("not_pinned"));
        // A kept name still has its changes caught.
        pins.observe(
            "a",
            Kind::Tools,
            &[raw(r#"{"name":"t0","description":"changed"}"#)],
        )
        .await;
        assert_eq!(pins.withheld("a", Kind::Tools, "t0"), Some("definition_changed"));
        // Under warn nothing is withheld, full or not.
        let warn = Pins::new(
            &PinningSettings {
                mode: PinMode::Warn,
                max_definitions: 1,
                ..PinningSettings::default()
            },
            None,
            None,
        )
        .unwrap()
        .unwrap();
        warn.observe("a", Kind::Tools, &listed).await;
        assert_eq!(warn.withheld("a", Kind::Tools, "t4"), None);
    }

    #[tokio::test]
    async fn the_pins_file_wins_and_reloads() {
        let dir = std::env::temp_dir().join(format!("mrtr-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pins.toml");
        let (_, mut entry) = definition(PinKind::Tool, &raw(r#"{"name":"t","description":"safe"}"#)).unwrap();
        entry.backend = "a".to_owned();
        let file = PinsFile { pin: vec![entry] };
        std::fs::write(&path, file.to_toml().unwrap()).unwrap();
        let settings = PinningSettings {
            mode: PinMode::Enforce,
            file: Some(path.clone()),
            unpinned: Unpinned::Hold,
            ..PinningSettings::default()
        };
        let pins = Pins::new(&settings, None, None).unwrap().unwrap();
        let changed = [raw(r#"{"name":"t","description":"changed"}"#)];
        pins.observe("a", Kind::Tools, &changed).await;
        assert_eq!(pins.withheld("a", Kind::Tools, "t"), Some("definition_changed"));
        assert_eq!(pins.reload(), Ok(false));
        // Re-pinned by writing the new definition's digest into the file.
        let (_, mut entry) = definition(PinKind::Tool, &changed[0]).unwrap();
        entry.backend = "a".to_owned();
        std::fs::write(&path, PinsFile { pin: vec![entry] }.to_toml().unwrap()).unwrap();
        assert_eq!(pins.reload(), Ok(true));
        assert_eq!(pins.withheld("a", Kind::Tools, "t"), None);
        std::fs::write(&path, "[[pin]]\nbackend = 1\n").unwrap();
        assert!(pins.reload().unwrap_err().contains("invalid pins file"));
        assert_eq!(pins.withheld("a", Kind::Tools, "t"), None, "the pins in use stay");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_diff_names_the_members_that_changed() {
        let diff = diff(
            r#"{"description":"safe","name":"t"}"#,
            r#"{"description":"evil","name":"t","title":"T"}"#,
        );
        assert_eq!(diff, "description: \"safe\" → \"evil\"\ntitle: (absent) → \"T\"");
    }
}
