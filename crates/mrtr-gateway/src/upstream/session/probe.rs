//! The health probe of a Streamable HTTP backend ([`detect`]): `server/discover` first, as the
//! specification advises clients, then, unless the answer was a modern one (or the backend is
//! configured `modern`), `initialize`, whose session is closed at once. What each answer means
//! is `era.rs`'s.

use bytes::Bytes;
use http::HeaderMap;

use super::wire;
use crate::upstream::backend::Backend;
use crate::upstream::era::{
    AfterDiscover, DISCOVER_BODY, Era, INITIALIZE_BODY, after_discover, discover_headers, initialized,
    unavailable,
};
use crate::upstream::health::{Down, Found};
use crate::upstream::http::forward::Forwarder;

/// Finds `backend`'s era as its configured [`Era`] allows: what it is, or why it is down.
pub(crate) async fn detect(forwarder: &Forwarder, backend: &Backend) -> Result<Found, Down> {
    let mut not_modern = None;
    if backend.era() != Era::Legacy {
        let answer = forwarder
            .exchange(
                backend,
                &discover_headers(),
                Bytes::from_static(DISCOVER_BODY.as_bytes()),
            )
            .await
            .map_err(unavailable)?;
        match after_discover(&answer, backend.era())? {
            AfterDiscover::Modern(found) => return Ok(found),
            AfterDiscover::Fallback(what) => not_modern = Some(what),
        }
    }
    let (answer, session) = wire::exchange(
        forwarder,
        backend,
        HeaderMap::new(),
        None,
        None,
        Bytes::from_static(INITIALIZE_BODY.as_bytes()),
    )
    .await
    .map_err(unavailable)?;
    let found = initialized(&answer, not_modern.as_deref());
    if let (Ok(found), Some(session)) = (&found, session) {
        // The probe's session ends now rather than when the backend's own timeout ends it.
        wire::close(forwarder, backend, &found.version, session).await;
    }
    found
}
