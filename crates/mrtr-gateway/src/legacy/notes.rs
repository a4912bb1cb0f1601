//! What a replica may remember about a legacy session besides its id: that the client ended it
//! (`DELETE`), and the level it asked for with `logging/setLevel`.
//!
//! Neither is needed to serve the session: any replica serves it from the sealed id alone, with
//! no logging and as long as the id has not expired. The notes are what a legacy server must
//! honour *after* the handshake (a deleted session answers 404; log notifications at the chosen
//! level), which an immutable id cannot carry. They live on the replica that received them, are
//! bounded in number, and are forgotten when the session id expires. A load balancer that hashes
//! on `Mcp-Session-Id` sends the session's later requests to the replica that holds them (see
//! `docs/gateway.md`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use super::session::SessionDigest;

/// A logging level of MCP (RFC 5424 severities).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct LogLevel(u8);

const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

impl LogLevel {
    /// The level named `name`, if it is one of MCP's eight.
    pub(super) fn parse(name: &str) -> Option<Self> {
        LEVELS.iter().position(|l| *l == name).map(|i| Self(i as u8))
    }

    /// The level's name.
    pub(super) fn as_str(self) -> &'static str {
        LEVELS[usize::from(self.0)]
    }
}

/// The replica has no room for another note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NotesFull;

#[derive(Debug, Default, Clone, Copy)]
struct Note {
    ended: bool,
    log_level: Option<LogLevel>,
    expires_at: Option<SystemTime>,
}

/// Per-replica notes about sessions, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct Notes {
    capacity: usize,
    notes: Mutex<HashMap<SessionDigest, Note>>,
}

impl Notes {
    /// Room for `capacity` sessions' notes.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            notes: Mutex::new(HashMap::new()),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<SessionDigest, Note>) -> T) -> T {
        let mut notes = self.notes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut notes)
    }

    fn get(&self, session: SessionDigest, now: SystemTime) -> Option<Note> {
        self.with(|notes| notes.get(&session).copied())
            .filter(|n| n.expires_at.is_some_and(|at| now < at))
    }

    fn update(
        &self,
        session: SessionDigest,
        expires_at: SystemTime,
        now: SystemTime,
        change: impl FnOnce(&mut Note),
    ) -> Result<(), NotesFull> {
        self.with(|notes| {
            if !notes.contains_key(&session) && notes.len() >= self.capacity {
                notes.retain(|_, n| n.expires_at.is_some_and(|at| now < at));
                if notes.len() >= self.capacity {
                    return Err(NotesFull);
                }
            }
            let note = notes.entry(session).or_default();
            note.expires_at = Some(expires_at);
            change(note);
            Ok(())
        })
    }

    /// Records that the client ended the session (it expires at `expires_at` anyway).
    pub(super) fn end(
        &self,
        session: SessionDigest,
        expires_at: SystemTime,
        now: SystemTime,
    ) -> Result<(), NotesFull> {
        self.update(session, expires_at, now, |note| note.ended = true)
    }

    /// Whether the client ended the session on this replica.
    pub(super) fn is_ended(&self, session: SessionDigest, now: SystemTime) -> bool {
        self.get(session, now).is_some_and(|n| n.ended)
    }

    /// Records the level the client asked for.
    pub(super) fn set_log_level(
        &self,
        session: SessionDigest,
        level: LogLevel,
        expires_at: SystemTime,
        now: SystemTime,
    ) -> Result<(), NotesFull> {
        self.update(session, expires_at, now, |note| note.log_level = Some(level))
    }

    /// The level the client asked for on this replica, if any.
    pub(super) fn log_level(&self, session: SessionDigest, now: SystemTime) -> Option<LogLevel> {
        self.get(session, now).and_then(|n| n.log_level)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bounded_and_expired_notes_make_room() {
        let notes = Notes::new(1);
        let now = SystemTime::now();
        let soon = now + Duration::from_secs(1);
        let (a, b) = (SessionDigest::of("a"), SessionDigest::of("b"));
        notes.end(a, soon, now).unwrap();
        assert_eq!(notes.end(b, soon, now), Err(NotesFull));
        // Updating a session already noted needs no room.
        notes
            .set_log_level(a, LogLevel::parse("error").unwrap(), soon, now)
            .unwrap();
        // Once a's session has expired, b fits.
        notes.end(b, soon + Duration::from_secs(5), soon).unwrap();
        assert!(notes.is_ended(b, soon));
        assert!(!notes.is_ended(a, soon));
    }

    #[test]
    fn levels_are_ordered_by_severity() {
        let level = |s| LogLevel::parse(s).unwrap();
        assert!(level("debug") < level("info") && level("error") < level("emergency"));
        assert!(LogLevel::parse("verbose").is_none());
        assert_eq!(level("notice").as_str(), "notice");
    }

    #[test]
    fn a_note_is_forgotten_with_its_session() {
        use std::time::Duration;
        let notes = Notes::new(2);
        let now = SystemTime::now();
        let session = SessionDigest::of("session-a");
        assert_eq!(notes.log_level(session, now), None);
        notes
            .set_log_level(
                session,
                LogLevel::parse("info").unwrap(),
                now + Duration::from_secs(60),
                now,
            )
            .unwrap();
        assert_eq!(notes.log_level(session, now).map(LogLevel::as_str), Some("info"));
        notes.end(session, now + Duration::from_secs(60), now).unwrap();
        assert!(notes.is_ended(session, now));
        assert!(
            !notes.is_ended(session, now + Duration::from_secs(61)),
            "forgotten with the session"
        );
    }
}
