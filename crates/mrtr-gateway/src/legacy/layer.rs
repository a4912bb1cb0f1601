//! [`DualEraLayer`]: the legacy front's state, shared by every clone of the service it builds
//! (sessions, notes, the replica's waiting calls and answers, subscriptions), its settings, and
//! how a request's principal and session are read.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http::HeaderName;
use http::request::Parts;
use serde_json::json;
use tower_mrtr::{Clock, KeyringHandle, SystemClock};

use super::config::LegacyConfig;
use super::notes::Notes;
use super::registry::{Limits, Registry, WaitingCalls};
use super::request::ToolHeaders;
use super::session::{MCP_SESSION_ID, OpenedSession, SessionSealer};
use super::subscriptions::Subscriptions;
use crate::auth::Caller;

/// The legacy front's state, shared by every clone of [`DualEra`](super::DualEra). Cheap to clone.
#[derive(Clone, Debug)]
pub struct DualEraLayer {
    pub(super) inner: Arc<FrontState>,
}

#[derive(Debug)]
pub(super) struct FrontState {
    pub(super) config: Arc<LegacyConfig>,
    pub(super) sessions: SessionSealer,
    pub(super) notes: Notes,
    pub(super) registry: Registry,
    pub(super) calls: WaitingCalls,
    pub(super) tools: Arc<ToolHeaders>,
    pub(super) principal: Option<HeaderName>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) max_request_body: usize,
    pub(super) server_info: serde_json::Value,
    /// Resource subscriptions and the `GET` streams they are served on, on this replica.
    pub(super) subscriptions: Subscriptions,
    /// Numbers the `GET` streams (a session's second stream replaces its first).
    pub(super) streams: AtomicU64,
}

impl DualEraLayer {
    /// A front sealing sessions with the keys behind `keys` (share the layer's handle, so a
    /// rotation reaches both), with `config`'s limits, no principal binding, the system clock
    /// and request bodies up to tower-mrtr's default.
    pub fn new(config: LegacyConfig, keys: KeyringHandle) -> Self {
        Self {
            inner: Arc::new(FrontState {
                sessions: SessionSealer::new(keys, config.session_ttl),
                notes: Notes::new(config.max_session_notes),
                registry: Registry::new(Limits {
                    replica: config.max_waiting_answers,
                    session: config.max_waiting_answers_per_session,
                    principal: config.max_waiting_answers_per_principal,
                }),
                calls: WaitingCalls::new(Limits {
                    replica: config.max_waiting_calls,
                    session: config.max_waiting_calls_per_session,
                    principal: config.max_waiting_calls_per_principal,
                }),
                tools: Arc::default(),
                principal: None,
                clock: Arc::new(SystemClock),
                max_request_body: tower_mrtr::DEFAULT_MAX_REQUEST_BODY,
                server_info: json!({ "name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION") }),
                subscriptions: Subscriptions::default(),
                streams: AtomicU64::new(1),
                config: Arc::new(config),
            }),
        }
    }

    fn state_mut(&mut self) -> &mut FrontState {
        Arc::get_mut(&mut self.inner).expect("configured before it is shared")
    }

    /// Binds sessions to this request header's value, as the layer binds envelopes.
    pub fn principal_header(mut self, header: Option<HeaderName>) -> Self {
        self.state_mut().principal = header;
        self
    }

    /// Binds session ids to the deployment named `audience` (the MRTR layer's audience).
    pub fn audience(mut self, audience: Option<Arc<str>>) -> Self {
        let state = self.state_mut();
        state.sessions = state.sessions.clone().with_audience(audience);
        self
    }

    /// Where session expiry reads the time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.state_mut().clock = clock;
        self
    }

    /// Largest legacy request body read (413 above).
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.state_mut().max_request_body = bytes;
        self
    }

    /// Server-to-client requests waiting for an answer on this replica right now.
    pub fn waiting_answers(&self) -> usize {
        self.inner.registry.waiting()
    }

    /// Calls waiting for their client's answers on this replica right now.
    pub fn waiting_calls(&self) -> usize {
        self.inner.calls.waiting()
    }
}

impl DualEraLayer {
    /// The legacy-era path, when `uri` is on it (`LegacyConfig::era_path`).
    pub(super) fn era_path(&self, uri: &http::Uri) -> Option<&str> {
        self.inner
            .config
            .era_path
            .as_deref()
            .filter(|path| uri.path() == *path)
    }

    /// The principal sessions are bound to: the caller the front or the resource server left on
    /// the request, else the principal header read as the front reads it.
    pub(super) fn principal(&self, parts: &Parts) -> Option<Arc<str>> {
        let name = self.inner.principal.as_ref()?;
        match parts.extensions.get::<Caller>() {
            Some(caller) => Some(caller.principal.clone()),
            None => crate::auth::principal::read(&parts.headers, name).ok(),
        }
    }

    pub(super) fn open_session(&self, parts: &Parts) -> Option<OpenedSession> {
        let state = &self.inner;
        let now = state.clock.now();
        let id = parts.headers.get(MCP_SESSION_ID)?.to_str().ok()?;
        state
            .sessions
            .open(id, self.principal(parts).as_deref(), now)
            .filter(|s| !state.notes.is_ended(s.digest(), now))
    }
}
