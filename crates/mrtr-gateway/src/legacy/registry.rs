//! The calls on this replica that wait for a legacy client's answers, and nothing else.
//!
//! When the bridge sends a server-to-client request (`elicitation/create`, …) on a call's SSE
//! stream, it registers the request's fresh id here and waits on the returned [`Pending`]. The
//! client POSTs its answer separately, with the session id; the front hands it to
//! [`Registry::deliver`], which wakes the call if the id is waiting *and* belongs to the same
//! session. Dropping a [`Pending`] (the call answered, timed out, or its client went away)
//! removes the entry: nothing outlives the call.
//!
//! Both are bounded per replica, per session and per principal, so that one client cannot crowd
//! the others out: the waiting ids ([`Registry`]), and the calls waiting for their client
//! ([`WaitingCalls`]). A waiting call's response head has long gone out, so the front's
//! in-flight limit no longer counts it: these limits do. One [`Tally`] counts for both.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::session::SessionDigest;
use crate::observe::metrics::{self, Held};

/// A client's answer: the JSON-RPC `result`, or its `error` object.
pub(super) type Answer = Result<Box<RawValue>, Box<RawValue>>;

/// What became of a delivered answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// Handed to the waiting call.
    Delivered,
    /// No call on this replica waits for this id in this session (another replica's, already
    /// answered, timed out, or never sent).
    NotWaiting,
}

/// How many may wait at once: on the replica, for one session, for one principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub(super) replica: usize,
    pub(super) session: usize,
    pub(super) principal: usize,
}

/// Which limit is reached, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LimitReached {
    Replica(usize),
    Session(usize),
    Principal(usize),
}

/// Who one waiting entry counts against.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    session: SessionDigest,
    principal: Option<String>,
}

/// Entries counted per replica, per session and per principal (an entry without a principal,
/// on a gateway without `--principal-header`, counts only for the first two).
#[derive(Debug, Default)]
struct Tally {
    total: usize,
    sessions: HashMap<SessionDigest, usize>,
    principals: HashMap<String, usize>,
}

impl Tally {
    /// Counts one more entry for `owner`, if every limit has room.
    fn enter(&mut self, limits: Limits, owner: &Owner) -> Result<(), LimitReached> {
        if self.total >= limits.replica {
            return Err(LimitReached::Replica(limits.replica));
        }
        if self.sessions.get(&owner.session).copied().unwrap_or(0) >= limits.session {
            return Err(LimitReached::Session(limits.session));
        }
        if let Some(principal) = &owner.principal
            && self.principals.get(principal).copied().unwrap_or(0) >= limits.principal
        {
            return Err(LimitReached::Principal(limits.principal));
        }
        self.total += 1;
        *self.sessions.entry(owner.session).or_default() += 1;
        if let Some(principal) = &owner.principal {
            *self.principals.entry(principal.clone()).or_default() += 1;
        }
        Ok(())
    }

    /// Counts one entry of `owner` less.
    fn leave(&mut self, owner: &Owner) {
        self.total -= 1;
        release(&mut self.sessions, &owner.session);
        if let Some(principal) = &owner.principal {
            release(&mut self.principals, principal);
        }
    }
}

/// Takes one off `key`'s count, forgetting a count of zero.
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(key);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The tables stay consistent under any panic (each update is a few integer steps).
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug)]
struct Waiter {
    owner: Owner,
    answer: oneshot::Sender<Answer>,
}

#[derive(Debug, Default)]
struct Waiting {
    ids: HashMap<String, Waiter>,
    tally: Tally,
}

impl Waiting {
    /// Removes `id`, and its count with it.
    fn remove(&mut self, id: &str) -> Option<Waiter> {
        let waiter = self.ids.remove(id)?;
        self.tally.leave(&waiter.owner);
        Some(waiter)
    }
}

#[derive(Debug)]
struct Inner {
    limits: Limits,
    /// A random prefix per replica, so ids from different replicas (or runs) never collide.
    prefix: String,
    counter: AtomicU64,
    waiting: Mutex<Waiting>,
}

/// The per-replica table of ids waiting for an answer. Cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Registry {
    inner: Arc<Inner>,
}

impl Registry {
    /// At most `limits` ids waiting at once.
    pub(super) fn new(limits: Limits) -> Self {
        let mut random = [0u8; 8];
        // Uniqueness, not secrecy, is what the prefix is for (answers are also bound to the
        // session), so a failing random source falls back to the time.
        if getrandom::fill(&mut random).is_err() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            random = (nanos as u64).to_be_bytes();
        }
        let prefix = random.iter().map(|b| format!("{b:02x}")).collect::<String>();
        Self {
            inner: Arc::new(Inner {
                limits,
                prefix: format!("mrtr-{prefix}-"),
                counter: AtomicU64::new(0),
                waiting: Mutex::default(),
            }),
        }
    }

    /// A fresh id waiting for an answer from `session` (of `principal`).
    pub(super) fn register(
        &self,
        session: SessionDigest,
        principal: Option<&str>,
    ) -> Result<Pending, LimitReached> {
        let (answer, receiver) = oneshot::channel();
        let owner = Owner {
            session,
            principal: principal.map(str::to_owned),
        };
        let mut waiting = lock(&self.inner.waiting);
        waiting.tally.enter(self.inner.limits, &owner)?;
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", self.inner.prefix);
        waiting.ids.insert(id.clone(), Waiter { owner, answer });
        Ok(Pending {
            id,
            receiver,
            registry: self.clone(),
        })
    }

    /// Hands `answer` to the call waiting for `id` (the JSON string value, without quotes) in
    /// `session`.
    pub(super) fn deliver(&self, session: SessionDigest, id: &str, answer: Answer) -> Delivery {
        let mut waiting = lock(&self.inner.waiting);
        match waiting.ids.get(id) {
            Some(waiter) if waiter.owner.session == session => {}
            _ => return Delivery::NotWaiting,
        }
        let Some(waiter) = waiting.remove(id) else {
            return Delivery::NotWaiting;
        };
        drop(waiting);
        match waiter.answer.send(answer) {
            Ok(()) => Delivery::Delivered,
            Err(_) => Delivery::NotWaiting,
        }
    }

    /// How many ids wait right now.
    pub(super) fn waiting(&self) -> usize {
        lock(&self.inner.waiting).ids.len()
    }
}

/// The calls waiting for their client's answers. Cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct WaitingCalls {
    tally: Arc<Mutex<Tally>>,
    limits: Limits,
}

impl WaitingCalls {
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            tally: Arc::default(),
            limits,
        }
    }

    /// A place for one more call of `session` (of `principal`) to wait, if every limit has one.
    pub(super) fn enter(
        &self,
        session: SessionDigest,
        principal: Option<&str>,
    ) -> Result<WaitingCall, LimitReached> {
        let owner = Owner {
            session,
            principal: principal.map(str::to_owned),
        };
        lock(&self.tally).enter(self.limits, &owner)?;
        Ok(WaitingCall {
            calls: self.clone(),
            owner,
            _counted: Held::new(metrics::LEGACY_WAITING_CALLS, None),
        })
    }

    /// Calls waiting right now.
    pub(super) fn waiting(&self) -> usize {
        lock(&self.tally).total
    }
}

/// One call's place among the [`WaitingCalls`]; dropping it (the call ended) frees it.
#[derive(Debug)]
pub(super) struct WaitingCall {
    calls: WaitingCalls,
    owner: Owner,
    _counted: Held,
}

impl Drop for WaitingCall {
    fn drop(&mut self) {
        lock(&self.calls.tally).leave(&self.owner);
    }
}

/// One id waiting for its answer; dropping it forgets the id.
#[derive(Debug)]
pub(super) struct Pending {
    id: String,
    receiver: oneshot::Receiver<Answer>,
    registry: Registry,
}

impl Pending {
    /// The id to send the client (a JSON string).
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the answer. `None` if the entry was removed without one.
    pub(super) async fn answer(mut self) -> Option<Answer> {
        (&mut self.receiver).await.ok()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        lock(&self.registry.inner.waiting).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn limits(replica: usize, session: usize, principal: usize) -> Limits {
        Limits {
            replica,
            session,
            principal,
        }
    }

    #[test]
    fn bounded_and_cleaned_up_on_drop() {
        let registry = Registry::new(limits(2, 2, 2));
        let s = SessionDigest::of("s");
        let a = registry.register(s, None).unwrap();
        let b = registry.register(s, None).unwrap();
        assert_ne!(a.id(), b.id());
        assert_eq!(registry.register(s, None).unwrap_err(), LimitReached::Replica(2));
        let id = a.id().to_owned();
        drop(a);
        assert_eq!(registry.waiting(), 1);
        let late = RawValue::from_string("{}".into()).unwrap();
        assert_eq!(registry.deliver(s, &id, Ok(late)), Delivery::NotWaiting);
        assert!(registry.register(s, None).is_ok());
    }

    #[test]
    fn ids_differ_between_replicas() {
        let s = SessionDigest::of("s");
        let one = Registry::new(limits(1, 1, 1))
            .register(s, None)
            .unwrap()
            .id()
            .to_owned();
        let two = Registry::new(limits(1, 1, 1))
            .register(s, None)
            .unwrap()
            .id()
            .to_owned();
        assert_ne!(one, two);
    }

    #[tokio::test]
    async fn only_the_session_that_was_asked_can_answer() {
        let registry = Registry::new(limits(16, 16, 16));
        let session = SessionDigest::of("session-a");
        let pending = registry.register(session, None).unwrap();
        let id = pending.id().to_owned(); // sent to the client as the request's id
        let answer = RawValue::from_string(r#"{"action":"accept"}"#.into()).unwrap();

        // Another session cannot answer it.
        assert_eq!(
            registry.deliver(SessionDigest::of("session-b"), &id, Ok(answer.clone())),
            Delivery::NotWaiting
        );
        assert_eq!(registry.deliver(session, &id, Ok(answer)), Delivery::Delivered);
        assert_eq!(
            pending.answer().await.unwrap().unwrap().get(),
            r#"{"action":"accept"}"#
        );
        assert_eq!(registry.waiting(), 0);
    }

    #[test]
    fn one_session_cannot_take_every_waiting_id() {
        let registry = Registry::new(limits(10, 2, 2));
        let (greedy, other) = (SessionDigest::of("greedy"), SessionDigest::of("other"));
        let held: Vec<Pending> = (0..2).map(|_| registry.register(greedy, None).unwrap()).collect();
        assert_eq!(
            registry.register(greedy, None).unwrap_err(),
            LimitReached::Session(2)
        );
        let answered = registry
            .register(other, None)
            .expect("another session still gets ids");
        let id = held[0].id().to_owned();
        let answer = RawValue::from_string("{}".into()).unwrap();
        assert_eq!(registry.deliver(greedy, &id, Ok(answer)), Delivery::Delivered);
        assert!(
            registry.register(greedy, None).is_ok(),
            "a delivered answer frees the session's place"
        );
        drop((held, answered));
        assert_eq!(registry.waiting(), 0);
        let again: Vec<Pending> = (0..2).map(|_| registry.register(greedy, None).unwrap()).collect();
        assert_eq!(
            registry.waiting(),
            again.len(),
            "every place of the session is free again"
        );
    }

    #[test]
    fn waiting_calls_are_bounded_per_replica_session_and_principal() {
        let calls = WaitingCalls::new(limits(4, 2, 3));
        let (a, b, c) = (
            SessionDigest::of("a"),
            SessionDigest::of("b"),
            SessionDigest::of("c"),
        );
        let first = [
            calls.enter(a, Some("alice")).unwrap(),
            calls.enter(a, Some("alice")).unwrap(),
        ];
        assert_eq!(
            calls.enter(a, Some("alice")).unwrap_err(),
            LimitReached::Session(2)
        );
        let third = calls.enter(b, Some("alice")).unwrap();
        assert_eq!(
            calls.enter(b, Some("alice")).unwrap_err(),
            LimitReached::Principal(3)
        );
        let fourth = calls.enter(c, None).unwrap();
        assert_eq!(calls.enter(c, Some("bob")).unwrap_err(), LimitReached::Replica(4));
        drop(first);
        assert_eq!(calls.waiting(), 2);
        assert!(
            calls.enter(a, Some("alice")).is_ok(),
            "ended calls give their places back"
        );
        drop((third, fourth));
        assert_eq!(calls.waiting(), 0);
    }

    #[test]
    fn one_principal_cannot_take_every_waiting_id() {
        let registry = Registry::new(limits(10, 10, 3));
        let sessions = [SessionDigest::of("a"), SessionDigest::of("b")];
        let held: Vec<Pending> = (0..3)
            .map(|i| registry.register(sessions[i % 2], Some("mallory")).unwrap())
            .collect();
        assert_eq!(
            registry.register(sessions[0], Some("mallory")).unwrap_err(),
            LimitReached::Principal(3),
            "a fresh session does not help"
        );
        let other = registry
            .register(sessions[0], Some("alice"))
            .expect("another principal still gets ids");
        let unbound = registry
            .register(sessions[1], None)
            .expect("an id without a principal counts per session and replica only");
        drop(held);
        assert!(registry.register(sessions[0], Some("mallory")).is_ok());
        drop((other, unbound));
        assert_eq!(registry.waiting(), 0);
    }
}
