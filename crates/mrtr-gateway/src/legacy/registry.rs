//! The calls on this replica that wait for a legacy client's answers, and nothing else.
//!
//! When the bridge sends a server-to-client request (`elicitation/create`, …) on a call's SSE
//! stream, it registers the request's fresh id here and waits on the returned [`Pending`]. The
//! client POSTs its answer separately, with the session id; the front hands it to
//! [`Registry::deliver`], which wakes the call if the id is waiting *and* belongs to the same
//! session. Dropping a [`Pending`] (the call answered, timed out, or its client went away)
//! removes the entry: nothing outlives the call. The number of waiting ids is bounded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::session::SessionDigest;

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

/// Too many ids are waiting on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RegistryFull;

#[derive(Debug)]
struct Waiter {
    session: SessionDigest,
    answer: oneshot::Sender<Answer>,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    /// A random prefix per replica, so ids from different replicas (or runs) never collide.
    prefix: String,
    counter: AtomicU64,
    waiting: Mutex<HashMap<String, Waiter>>,
}

/// The per-replica table of ids waiting for an answer. Cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Registry {
    inner: Arc<Inner>,
}

impl Registry {
    /// At most `capacity` ids waiting at once.
    pub(super) fn new(capacity: usize) -> Self {
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
                capacity,
                prefix: format!("mrtr-{prefix}-"),
                counter: AtomicU64::new(0),
                waiting: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn waiting_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.inner
            .waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A fresh id waiting for an answer from `session`.
    pub(super) fn register(&self, session: SessionDigest) -> Result<Pending, RegistryFull> {
        let (answer, receiver) = oneshot::channel();
        let mut waiting = self.waiting_map();
        if waiting.len() >= self.inner.capacity {
            return Err(RegistryFull);
        }
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", self.inner.prefix);
        waiting.insert(id.clone(), Waiter { session, answer });
        Ok(Pending {
            id,
            receiver,
            registry: self.clone(),
        })
    }

    /// Hands `answer` to the call waiting for `id` (the JSON string value, without quotes) in
    /// `session`.
    pub(super) fn deliver(&self, session: SessionDigest, id: &str, answer: Answer) -> Delivery {
        let mut waiting = self.waiting_map();
        match waiting.get(id) {
            Some(waiter) if waiter.session == session => {}
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
        self.waiting_map().len()
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
        self.registry.waiting_map().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_cleaned_up_on_drop() {
        let registry = Registry::new(2);
        let s = SessionDigest::of("s");
        let a = registry.register(s).unwrap();
        let b = registry.register(s).unwrap();
        assert_ne!(a.id(), b.id());
        assert_eq!(registry.register(s).unwrap_err(), RegistryFull);
        let id = a.id().to_owned();
        drop(a);
        assert_eq!(registry.waiting(), 1);
        let late = RawValue::from_string("{}".into()).unwrap();
        assert_eq!(registry.deliver(s, &id, Ok(late)), Delivery::NotWaiting);
        assert!(registry.register(s).is_ok());
    }

    #[test]
    fn ids_differ_between_replicas() {
        let s = SessionDigest::of("s");
        let one = Registry::new(1).register(s).unwrap().id().to_owned();
        let two = Registry::new(1).register(s).unwrap().id().to_owned();
        assert_ne!(one, two);
    }

    #[tokio::test]
    async fn only_the_session_that_was_asked_can_answer() {
        let registry = Registry::new(16);
        let session = SessionDigest::of("session-a");
        let pending = registry.register(session).unwrap();
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
}
