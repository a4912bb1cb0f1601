//! The owner's URL in a bridged task's id, sealed ([`OwnerSeal`]): other replicas forward the
//! client's request, credentials and all, to the URL they find there, so it must be a URL a
//! replica with the keyring wrote. The client's handle is sealed too, but what it seals is the
//! task id a backend returned: a Tasks backend could return an id in the bridge's form naming an
//! address of its choosing, and the URL's own seal is what tells it from a replica's.
//! Imports nothing of the room.
//!
//! ```text
//! mrtr-bridged.<replica>.<random>.<the URL sealed: an envelope of the purpose below>
//! ```

use std::time::SystemTime;

use tower_mrtr::KeyringHandle;
use tower_mrtr::Route;
use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};

/// The envelope purpose of an owner's URL: no request state, task handle or session id opens as
/// one, nor one of them as a request state.
pub(super) const OWNER_PURPOSE: Purpose =
    Purpose::custom("tower-mrtr/v2/bridged-task-owner", "bridged task owner");

/// The route an owner envelope names: the gateway's own, no backend's.
const OWNER_ROUTE: &str = "@bridged-task-owner";

/// Seals this replica's URL into its task ids and opens other replicas'; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub(super) struct OwnerSeal {
    keys: KeyringHandle,
}

impl OwnerSeal {
    pub(super) fn new(keys: KeyringHandle) -> Self {
        Self { keys }
    }

    fn binding() -> Binding<'static> {
        Binding::new("bridged-task", None, None)
    }

    /// `url` sealed until `expires_at` (the task's end of life).
    pub(super) fn seal(&self, url: &str, expires_at: SystemTime) -> Option<String> {
        let sealed = Sealed {
            route: Route::new(OWNER_ROUTE),
            state: Some(url.to_owned()),
            expires_at,
            round: 0,
            call_target: None,
        };
        Sealer::new(self.keys.load())
            .seal(OWNER_PURPOSE, &Self::binding(), &sealed)
            .ok()
    }

    /// The URL sealed in `envelope`, if it opens now; anything else is `None`.
    pub(super) fn open(&self, envelope: &str) -> Option<String> {
        let sealed = Sealer::new(self.keys.load())
            .open(OWNER_PURPOSE, &Self::binding(), envelope, SystemTime::now())
            .ok()?;
        (sealed.route.as_str() == OWNER_ROUTE)
            .then_some(sealed.state)
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use tower_mrtr::Keyring;

    use super::*;

    fn seal() -> OwnerSeal {
        OwnerSeal::new(KeyringHandle::new(Keyring::generate("k1").unwrap()))
    }

    #[test]
    fn only_a_url_a_replica_sealed_opens() {
        let ours = seal();
        let later = SystemTime::now() + Duration::from_secs(60);
        let sealed = ours.seal("http://10.0.3.7:8080/mcp", later).unwrap();
        assert_eq!(ours.open(&sealed).as_deref(), Some("http://10.0.3.7:8080/mcp"));

        // What a backend could write without the keys: the URL in clear, or another keyring's seal.
        let clear = URL_SAFE_NO_PAD.encode("http://169.254.169.254/latest");
        assert_eq!(ours.open(&clear), None);
        let theirs = seal().seal("http://evil.example/mcp", later).unwrap();
        assert_eq!(ours.open(&theirs), None);
        // Expired with its task.
        let past = ours
            .seal(
                "http://10.0.3.7:8080/mcp",
                SystemTime::now() - Duration::from_secs(1),
            )
            .unwrap();
        assert_eq!(ours.open(&past), None);
    }
}
