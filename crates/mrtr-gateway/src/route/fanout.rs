//! Requests every backend answers, merged into one answer: the `*/list` calls (every page of
//! every backend, exposed under the naming rule and filtered by the policy: `catalog.rs`; the
//! last merge kept while the backends answer the same: `merged.rs`),
//! `server/discover`, and the catalog's own listings when it must learn names again
//! ([`refresh`](Inner::refresh)). A backend that fails is left out, with a warning; when none
//! answers, the client gets the first one's own error, else `502`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::Value;
use tower_mrtr::McpRequestHead;
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME};

use super::catalog::{self, Kind, Listing};
use super::govern::KnownOrigin;
use super::headers::SUPPORTED_VERSIONS;
use super::merged::{Merged, MergedLists, Page};
use super::{
    INTERNAL_ERROR, Inner, Routed, error_response, invalid_params, request_cursor, request_meta, success,
    success_raw,
};
use crate::jsonrpc;
use crate::policy::{self, Subject};
use crate::upstream::Upstreams;
use crate::upstream::answer::{Answer, UpstreamError};
use crate::upstream::body::{self, ProxyBody};

/// Most pages fetched from one backend for one list call.
const MAX_PAGES: usize = 64;

/// Shortest interval between two on-demand catalog refreshes of one kind, so that calls naming
/// unknown things cannot make the gateway hammer its backends.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// Why one backend of a fan-out gave nothing to merge.
#[derive(Debug)]
pub(super) enum Unanswered {
    /// A JSON-RPC error, or a non-JSON-RPC HTTP answer.
    Answer(Answer),
    Unavailable(UpstreamError),
    Malformed,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answer(answer) if answer.is_error() => write!(f, "JSON-RPC error (HTTP {})", answer.status),
            Self::Answer(answer) => write!(f, "no JSON-RPC result (HTTP {})", answer.status),
            Self::Unavailable(error) => error.fmt(f),
            Self::Malformed => f.write_str("malformed list result"),
        }
    }
}

impl Inner {
    /// A `*/list` call with several backends: every page of every backend, merged (or the last
    /// merge served again when every backend answered as for it: `merged.rs`).
    pub(super) async fn list(&self, kind: Kind, parts: &Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        if request_cursor(&body).is_some() {
            // The merged list is always one page, so no cursor the gateway handed out exists.
            return self.own(invalid_params(id, "Invalid cursor"));
        }
        let last = self.merged.last(kind);
        let outcomes = self
            .list_all(kind, &parts.headers, &parts.extensions, body, last.as_deref())
            .await;
        let mut pages = Vec::with_capacity(outcomes.len());
        let mut failures = Vec::new();
        for (index, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Ok(page) => pages.push(Some(page)),
                Err(failure) => {
                    pages.push(None);
                    failures.push((index, failure));
                }
            }
        }
        if failures.len() == pages.len() {
            return self.own(self.all_failed(id, failures));
        }
        for (index, failure) in &failures {
            tracing::warn!(backend = self.backends[*index].name(), method = kind.list_method(), %failure, "left out of the merged list");
        }
        let pins = self.pins.as_ref().map_or(0, |pins| pins.generation());
        let claims_pending = self.pins.as_ref().is_some_and(|pins| pins.claims_pending());
        let merged = match last.filter(|last| {
            !claims_pending && last.serves(&pages, pins) && self.catalog.confirm(kind, last.generation())
        }) {
            Some(last) => last,
            None => {
                let (names, generation) = self.record(kind, &pages).await;
                let merged = Arc::new(Merged::new(kind, &names, pages, generation, pins));
                self.merged.keep(kind, &merged);
                merged
            }
        };
        let caller = self.policy.as_ref().and_then(|_| {
            policy::caller_of(&parts.extensions, &parts.headers, self.principal_header.as_ref())
        });
        let permitted = |item: catalog::Item<'_>| {
            let Some(policy) = &self.policy else { return true };
            let origin = KnownOrigin::new(self.backends[item.backend].name(), item.key);
            let subject = match kind {
                Kind::Tools | Kind::Prompts => Subject::Named {
                    thing: kind.thing(),
                    exposed: item.exposed,
                    origin: Some(origin.as_origin()),
                },
                Kind::Resources => Subject::Uri(item.key),
                Kind::Templates => Subject::Template(item.key),
            };
            policy.allows(caller.as_ref(), &subject)
        };
        // A definition pinning withholds is left out, whoever asks.
        let served = |item: catalog::Item<'_>| {
            self.pins.as_ref().is_none_or(|pins| {
                pins.withheld(self.backends[item.backend].name(), kind, item.key)
                    .is_none()
            })
        };
        let keep = |item: catalog::Item<'_>| permitted(item) && served(item);
        let filter: Option<&catalog::Keep<'_>> =
            (self.policy.is_some() || self.pins.is_some()).then_some(&keep);
        let result = merged.render(kind, filter, &self.server_info_json);
        self.own(success_raw(id, &result))
    }

    /// Whether backend `index`'s calls may become bridged tasks: the bridge is on and the
    /// backend is a legacy one whose requests reach the call's client.
    pub(super) fn offers_bridged_tasks(&self, index: usize) -> bool {
        self.bridging && Upstreams::relays_requests(&self.backends[index])
    }

    /// `server/discover` with several backends, or with one whose result the gateway completes
    /// (a legacy HTTP backend's, which offers bridged tasks): one backend's result is its own,
    /// several are merged.
    pub(super) async fn discover(&self, parts: &Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let answers = join_all(
            self.backends
                .iter()
                .map(|backend| self.exchange(backend, &parts.headers, &parts.extensions, body.clone())),
        )
        .await;
        let mut results = Vec::new();
        let mut failures = Vec::new();
        for (index, answer) in answers.into_iter().enumerate() {
            let backend = self.backends[index].name();
            match answer {
                Ok(answer) => match answer
                    .result()
                    .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                {
                    Some(mut result) => {
                        if self.offers_bridged_tasks(index) {
                            catalog::offer_tasks(&mut result);
                        }
                        results.push((backend, result));
                    }
                    None => failures.push((index, Unanswered::Answer(answer))),
                },
                Err(error) => failures.push((index, Unanswered::Unavailable(error))),
            }
        }
        if results.is_empty() {
            return self.own(self.all_failed(id, failures));
        }
        for (index, failure) in &failures {
            tracing::warn!(backend = self.backends[*index].name(), %failure, "left out of server/discover");
        }
        if let ([(_, result)], true) = (&results[..], failures.is_empty() && self.backends.len() == 1) {
            return self.own(success(id, result));
        }
        let result = catalog::merge_discover(SUPPORTED_VERSIONS, &results, &self.server_info);
        self.own(success(id, &result))
    }

    /// When no backend gave a usable answer: the first backend's own JSON-RPC error (it is about
    /// the client's request), else 502.
    fn all_failed(&self, id: Option<&str>, failures: Vec<(usize, Unanswered)>) -> Response<ProxyBody> {
        for (_, failure) in &failures {
            if let Unanswered::Answer(answer) = failure
                && let (true, Some(message)) = (answer.is_error(), answer.message.clone())
            {
                return body::json(answer.status, message);
            }
        }
        for (index, failure) in &failures {
            tracing::warn!(backend = self.backends[*index].name(), %failure, "backend failed");
        }
        error_response(
            StatusCode::BAD_GATEWAY,
            id,
            INTERNAL_ERROR,
            "No backend could answer",
            None,
        )
    }

    /// Every backend's full listing of `kind`, in configuration order; a backend's listing in
    /// `last` is reused when the backend answers with the same one page.
    async fn list_all(
        &self,
        kind: Kind,
        headers: &HeaderMap,
        extensions: &Extensions,
        body: Bytes,
        last: Option<&Merged>,
    ) -> Vec<Result<Arc<Page>, Unanswered>> {
        join_all((0..self.backends.len()).map(|index| {
            let known = MergedLists::page(last, index);
            self.list_pages(index, kind, headers, extensions, body.clone(), known)
        }))
        .await
    }

    /// Backend `index`'s full listing of `kind` (every page).
    pub(super) async fn list_backend(
        &self,
        index: usize,
        kind: Kind,
        headers: &HeaderMap,
        extensions: &Extensions,
        body: Bytes,
    ) -> Result<Listing, Unanswered> {
        let page = self
            .list_pages(index, kind, headers, extensions, body, None)
            .await?;
        Ok(Arc::try_unwrap(page).map_or_else(|page| page.listing.clone(), |page| page.listing))
    }

    /// Backend `index`'s full listing of `kind`: `known` again when its first page is `known`'s
    /// one page, text for text, else every page read.
    async fn list_pages(
        &self,
        index: usize,
        kind: Kind,
        headers: &HeaderMap,
        extensions: &Extensions,
        mut body: Bytes,
        known: Option<&Arc<Page>>,
    ) -> Result<Arc<Page>, Unanswered> {
        let backend = &self.backends[index];
        let mut listing = Listing::default();
        for page in 0..MAX_PAGES {
            let answer = self
                .exchange(backend, headers, extensions, body.clone())
                .await
                .map_err(Unanswered::Unavailable)?;
            let Some(result) = answer.result() else {
                return Err(Unanswered::Answer(answer));
            };
            if page == 0
                && let Some(known) = known.filter(|known| known.is(result.get()))
            {
                return Ok(known.clone());
            }
            match catalog::read_page(kind, result, &mut listing).map_err(|()| Unanswered::Malformed)? {
                None => {
                    let text = (page == 0).then(|| result.get().into());
                    return Ok(Arc::new(Page::new(kind, text, listing)));
                }
                Some(cursor) => {
                    body = jsonrpc::set_param(&body, "cursor", cursor).ok_or(Unanswered::Malformed)?
                }
            }
        }
        tracing::warn!(
            backend = backend.name(),
            "more than {MAX_PAGES} pages; listing truncated"
        );
        Ok(Arc::new(Page::new(kind, None, listing)))
    }

    /// Shows pinning what each backend listed, and records the names in the catalog: the names
    /// and their generation.
    async fn record(&self, kind: Kind, pages: &[Option<Arc<Page>>]) -> (catalog::Names, u64) {
        if let Some(pins) = &self.pins {
            for (index, page) in pages.iter().enumerate() {
                if let Some(page) = page {
                    pins.observe(self.backends[index].name(), kind, &page.listing.items)
                        .await;
                }
            }
        }
        let listed = pages
            .iter()
            .map(|page| page.as_ref().map(|page| page.keys.clone()))
            .collect();
        self.catalog.record(kind, listed)
    }

    /// Re-lists `kinds` from every backend (on a catalog miss), reusing the client's `_meta` so
    /// each backend sees the same protocol version and capabilities as for the call itself.
    /// Lists `kinds` again for the catalog, as the client of `parts` (its headers, principal and,
    /// for a legacy client, its capabilities).
    pub(super) async fn refresh(&self, kinds: &[Kind], parts: &Parts, body: &Bytes) {
        let client_headers = &parts.headers;
        let requested = Instant::now();
        let meta = request_meta(body);
        for &kind in kinds {
            let _one_at_a_time = self.catalog.refresh_lock(kind).await;
            if self
                .catalog
                .refreshed_at(kind)
                .is_some_and(|at| at >= requested || at.elapsed() < MIN_REFRESH_INTERVAL)
            {
                continue; // someone refreshed while we waited, or very recently
            }
            let mut list_body = format!(
                r#"{{"jsonrpc":"2.0","id":"mrtr-gateway-catalog","method":"{}","params":{{"#,
                kind.list_method()
            );
            if let Some(meta) = &meta {
                list_body.push_str(r#""_meta":"#);
                list_body.push_str(meta.get());
            }
            list_body.push_str("}}");
            let mut headers = client_headers.clone();
            headers.insert(MCP_METHOD, HeaderValue::from_static(kind.list_method()));
            headers.remove(MCP_NAME);
            let params: Vec<_> = headers
                .keys()
                .filter(|k| k.as_str().starts_with("mcp-param-"))
                .cloned()
                .collect();
            for name in params {
                headers.remove(name);
            }
            let last = self.merged.last(kind);
            let outcomes = self
                .list_all(
                    kind,
                    &headers,
                    &parts.extensions,
                    Bytes::from(list_body),
                    last.as_deref(),
                )
                .await;
            let mut pages = Vec::with_capacity(outcomes.len());
            for (index, outcome) in outcomes.into_iter().enumerate() {
                match outcome {
                    Ok(page) => pages.push(Some(page)),
                    Err(failure) => {
                        tracing::warn!(backend = self.backends[index].name(), method = kind.list_method(), %failure, "catalog refresh failed");
                        pages.push(None);
                    }
                }
            }
            self.record(kind, &pages).await;
        }
    }
}
