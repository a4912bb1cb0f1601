//! Legacy resource subscriptions (`resources/subscribe`, `resources/unsubscribe`), served where
//! the client holds its session's standalone `GET` stream on this replica: the affinity legacy
//! clients need anyway (`docs/gateway.md`), since the updates have no other way to reach them.
//!
//! * A `GET` with a session opens the stream (one per session: a second replaces the first);
//!   it carries keep-alive comments and the session's updates for as long as the client holds it.
//! * `resources/subscribe {uri}` records the URI for the session, and while its stream is open
//!   the front sends the modern stack one `subscriptions/listen` with `resourceSubscriptions:
//!   [uri]`, which the proxy routes to the backend owning the resource. Its
//!   `notifications/resources/updated` become the legacy notification on the `GET` stream.
//!   `resources/unsubscribe` ends that listen; `DELETE` of the session ends them all.
//! * A stream that closes ends every listen of its session; the URIs stay recorded, so a client
//!   that opens its stream again gets its listens again. A subscription made before the stream
//!   opens (SDK clients open it right after `initialize`, racing their first requests) starts
//!   when it does.
//! * Bounds: at most [`MAX_SESSIONS`] sessions with subscriptions per replica and
//!   [`MAX_URIS`] URIs per session; a session with no stream for [`ORPHAN_AFTER`] is forgotten
//!   when room is needed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;

use super::session::SessionDigest;
use super::stream::Events;

/// Most sessions with subscriptions or a stream per replica.
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// Most resources one session subscribes to.
pub(crate) const MAX_URIS: usize = 32;

/// How long a session's subscriptions are kept without a stream before they may be forgotten.
pub(crate) const ORPHAN_AFTER: Duration = Duration::from_secs(60);

/// The subscriptions and standalone streams of this replica's legacy sessions; see the
/// [module docs](self).
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    entries: Mutex<HashMap<SessionDigest, Entry>>,
}

#[derive(Debug)]
struct Entry {
    /// The open stream, by the number it was opened under.
    stream: Option<(u64, Events)>,
    /// Each subscribed URI, with its listen while one runs.
    uris: Vec<(String, Option<AbortHandle>)>,
    /// When the stream last closed, or the entry was made without one.
    orphaned: Instant,
}

impl Entry {
    fn new() -> Self {
        Self {
            stream: None,
            uris: Vec::new(),
            orphaned: Instant::now(),
        }
    }

    fn stop_listening(&mut self) {
        for (_, listen) in &mut self.uris {
            if let Some(listen) = listen.take() {
                listen.abort();
            }
        }
    }
}

/// Why a subscription or a stream was refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Full {
    /// [`MAX_SESSIONS`] sessions have subscriptions or a stream here.
    Replica,
    /// The session already subscribes to [`MAX_URIS`] resources.
    Session,
}

/// What the caller must start listens for: the open stream (and its number) and the URIs.
pub(super) struct Start {
    pub(super) events: Events,
    pub(super) stream: u64,
    pub(super) uris: Vec<String>,
}

impl Subscriptions {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<SessionDigest, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry of `session`, made if there is room (forgetting orphans long without a stream
    /// when there is not).
    fn entry(
        entries: &mut HashMap<SessionDigest, Entry>,
        session: SessionDigest,
    ) -> Result<&mut Entry, Full> {
        if !entries.contains_key(&session) && entries.len() >= MAX_SESSIONS {
            entries.retain(|_, e| e.stream.is_some() || e.orphaned.elapsed() < ORPHAN_AFTER);
            if entries.len() >= MAX_SESSIONS {
                return Err(Full::Replica);
            }
        }
        Ok(entries.entry(session).or_insert_with(Entry::new))
    }

    /// Opens `session`'s stream (number `stream`) onto `events`, replacing any other; returns the
    /// URIs to listen for on it.
    pub(super) fn attach(&self, session: SessionDigest, stream: u64, events: Events) -> Result<Start, Full> {
        let mut entries = self.entries();
        let entry = Self::entry(&mut entries, session)?;
        entry.stop_listening();
        entry.stream = Some((stream, events.clone()));
        Ok(Start {
            events,
            stream,
            uris: entry.uris.iter().map(|(uri, _)| uri.clone()).collect(),
        })
    }

    /// Closes `session`'s stream number `stream` (unless another replaced it) and its listens.
    pub(super) fn detach(&self, session: SessionDigest, stream: u64) {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(&session) else {
            return;
        };
        if entry.stream.as_ref().is_some_and(|(n, _)| *n == stream) {
            entry.stream = None;
            entry.orphaned = Instant::now();
            entry.stop_listening();
            if entry.uris.is_empty() {
                entries.remove(&session);
            }
        }
    }

    /// Records `uri` for `session`; returns the stream to start its listen on, if one is open.
    pub(super) fn subscribe(&self, session: SessionDigest, uri: &str) -> Result<Option<Start>, Full> {
        let mut entries = self.entries();
        let entry = Self::entry(&mut entries, session)?;
        if entry.uris.iter().any(|(u, _)| u == uri) {
            return Ok(None);
        }
        if entry.uris.len() >= MAX_URIS {
            return Err(Full::Session);
        }
        entry.uris.push((uri.to_owned(), None));
        Ok(entry.stream.as_ref().map(|(stream, events)| Start {
            events: events.clone(),
            stream: *stream,
            uris: vec![uri.to_owned()],
        }))
    }

    /// Notes `listen` as `uri`'s on `session`'s stream number `stream`; when that stream is gone,
    /// or the URI no longer subscribed, the listen is ended instead.
    pub(super) fn listening(&self, session: SessionDigest, stream: u64, uri: &str, listen: AbortHandle) {
        let mut entries = self.entries();
        let slot = entries
            .get_mut(&session)
            .filter(|e| e.stream.as_ref().is_some_and(|(n, _)| *n == stream))
            .and_then(|e| e.uris.iter_mut().find(|(u, _)| u == uri));
        match slot {
            Some((_, slot)) => {
                if let Some(old) = slot.replace(listen) {
                    old.abort();
                }
            }
            None => listen.abort(),
        }
    }

    /// Forgets `uri` for `session`, ending its listen; whether it was subscribed.
    pub(super) fn unsubscribe(&self, session: SessionDigest, uri: &str) -> bool {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(&session) else {
            return false;
        };
        let Some(index) = entry.uris.iter().position(|(u, _)| u == uri) else {
            return false;
        };
        let (_, listen) = entry.uris.remove(index);
        if let Some(listen) = listen {
            listen.abort();
        }
        if entry.uris.is_empty() && entry.stream.is_none() {
            entries.remove(&session);
        }
        true
    }

    /// Ends everything of `session` (its `DELETE`): listens, and the stream with them.
    pub(super) fn end(&self, session: SessionDigest) {
        if let Some(mut entry) = self.entries().remove(&session) {
            entry.stop_listening();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u8) -> SessionDigest {
        SessionDigest::of(&format!("session-{n}"))
    }

    #[tokio::test]
    async fn subscriptions_wait_for_the_stream_and_end_with_it() {
        let subscriptions = Subscriptions::default();
        let session = digest(1);
        // Before the stream: recorded, nothing to start.
        assert!(subscriptions.subscribe(session, "a://1").unwrap().is_none());
        let (events, _rx) = tokio::sync::mpsc::channel(1);
        let start = subscriptions.attach(session, 7, events).unwrap();
        assert_eq!(start.uris, ["a://1"]);
        // On the stream: the new URI is to start at once; a repeated one is not.
        assert_eq!(
            subscriptions.subscribe(session, "b://2").unwrap().unwrap().uris,
            ["b://2"]
        );
        assert!(subscriptions.subscribe(session, "b://2").unwrap().is_none());

        let listen = tokio::spawn(std::future::pending::<()>());
        subscriptions.listening(session, 7, "a://1", listen.abort_handle());
        subscriptions.detach(session, 7);
        assert!(
            listen.await.unwrap_err().is_cancelled(),
            "the stream's end ends its listens"
        );
        // A listen noted for a stream that is gone is ended at once.
        let late = tokio::spawn(std::future::pending::<()>());
        subscriptions.listening(session, 7, "a://1", late.abort_handle());
        assert!(late.await.unwrap_err().is_cancelled());

        assert!(subscriptions.unsubscribe(session, "a://1"));
        assert!(!subscriptions.unsubscribe(session, "a://1"));
        subscriptions.end(session);
        assert!(subscriptions.entries().is_empty());
    }

    #[test]
    fn a_session_subscribes_to_a_bounded_number_of_resources() {
        let subscriptions = Subscriptions::default();
        for n in 0..MAX_URIS {
            subscriptions.subscribe(digest(2), &format!("r://{n}")).unwrap();
        }
        assert_eq!(
            subscriptions.subscribe(digest(2), "r://one-more").err(),
            Some(Full::Session)
        );
    }
}
