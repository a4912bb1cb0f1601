//! Re-reading the keys file and the listener's certificate while the gateway runs.
//!
//! Both are re-read on SIGHUP and whenever their content changes. Change is detected by reading
//! the files every [`--reload-interval`](crate::cli) and comparing a SHA-256 of their bytes: the
//! files are small, and reading them sees every way they get replaced (an edit in place, a
//! rename over them, or the swap of the `..data` symlink by which Kubernetes updates a mounted
//! Secret), where modification times can miss a change within one timestamp tick.
//!
//! A file that does not parse (or is half written when read) changes nothing: the previous
//! keyring or certificate stays in use, the error is logged naming the file and the problem,
//! and `mrtr_gateway_keyring_reloads_total{result="failed"}` (or the TLS counterpart) counts it.
//! The next change is tried again. Requests in flight keep the keyring they started with
//! ([`tower_mrtr::KeyringHandle`]).
//!
//! ```
//! use mrtr_gateway::reload::{KeysFile, Reloaded};
//!
//! let dir = std::env::temp_dir().join(format!("mrtr-reload-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("keys");
//! std::fs::write(&path, tower_mrtr::keyring::generate_entry("k1").unwrap().as_bytes()).unwrap();
//! let keys = KeysFile::load(&path).unwrap();
//! assert_eq!(keys.handle().load().active_key_id().as_str(), "k1");
//!
//! std::fs::write(&path, "k2:not-a-key").unwrap();
//! assert!(matches!(keys.reload(), Reloaded::Failed(_)));
//! assert_eq!(keys.handle().load().active_key_id().as_str(), "k1"); // the old keyring stays
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tower_mrtr::{Keyring, KeyringHandle};

use crate::observe::metrics as telemetry;
use crate::tls::ListenerTls;

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The file's content is what is already in use.
    Unchanged,
    /// The new content is in use.
    Applied,
    /// The content could not be used (the message names the file and the problem); the previous
    /// one stays in use.
    Failed(String),
}

/// A SHA-256 of a file's content (and its parts' lengths).
pub(crate) type Fingerprint = [u8; 32];

/// The [`Fingerprint`] of `parts`.
pub(crate) fn fingerprint(parts: &[&[u8]]) -> Fingerprint {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

/// The keyring read from a file, and the handle the MRTR layer reads it through.
#[derive(Debug)]
pub struct KeysFile {
    path: PathBuf,
    handle: KeyringHandle,
    seen: Mutex<Fingerprint>,
}

impl KeysFile {
    /// Reads and parses `path` (see [`parse_keys`] for the format).
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, String> {
        let path = path.into();
        let text = read(&path)?;
        let keyring = parse_keys(&text).map_err(|e| format!("invalid keyring in {}: {e}", path.display()))?;
        Ok(Self {
            seen: Mutex::new(fingerprint(&[text.as_bytes()])),
            handle: KeyringHandle::new(keyring),
            path,
        })
    }

    /// The handle to build the MRTR layer from.
    pub fn handle(&self) -> &KeyringHandle {
        &self.handle
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the file's permissions expose its keys, if they do: readable or writable by its group
    /// or by others (anyone who can read it can open every envelope).
    pub fn exposure(&self) -> Option<String> {
        exposure(&self.path)
    }

    /// Re-reads the file and swaps the keyring in if its content changed and parses.
    pub fn reload(&self) -> Reloaded {
        let text = match read(&self.path) {
            Ok(text) => text,
            Err(error) => return self.failed(error),
        };
        let print = fingerprint(&[text.as_bytes()]);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == print {
            return Reloaded::Unchanged;
        }
        let keyring = match parse_keys(&text) {
            Ok(keyring) => keyring,
            Err(error) => {
                // Remember the bad content too, so it is reported once, not at every poll.
                *seen = print;
                return self.failed(format!("invalid keyring in {}: {error}", self.path.display()));
            }
        };
        *seen = print;
        let previous = self.handle.load();
        let (active, keys) = (keyring.active_key_id().as_str().to_owned(), keyring.len());
        self.handle.store(keyring);
        telemetry::keyring_reloaded(Ok((&active, keys)), Some(previous.active_key_id().as_str()));
        tracing::info!(file = %self.path.display(), active_key = %active, keys, "keyring reloaded");
        if let Some(warning) = self.exposure() {
            tracing::warn!("{warning}");
        }
        Reloaded::Applied
    }

    fn failed(&self, error: String) -> Reloaded {
        telemetry::keyring_reloaded(Err(()), None);
        tracing::error!(%error, "keyring reload failed; the previous keyring stays in use");
        Reloaded::Failed(error)
    }
}

/// Parses a keyring written with commas and/or newlines between entries, ignoring `#` lines.
pub fn parse_keys(text: &str) -> Result<Keyring, tower_mrtr::KeyringError> {
    let entries: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    entries.join(",").parse()
}

#[cfg(unix)]
fn exposure(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "the keys file {} can be read or written by its group or others (mode {mode:03o}): \
             anyone who reads it can open every envelope; make it 0600 or 0400",
            path.display()
        )
    })
}

#[cfg(not(unix))]
fn exposure(_path: &Path) -> Option<String> {
    None
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read the keys file {}: {e}", path.display()))
}

/// The listener's certificate files, watched like the keys file.
#[derive(Debug)]
pub struct CertFiles {
    tls: Arc<ListenerTls>,
    seen: Mutex<Option<Fingerprint>>,
}

impl CertFiles {
    /// Watches the files `tls` was loaded from.
    pub fn new(tls: Arc<ListenerTls>) -> Self {
        let seen = Mutex::new(Self::read(&tls).ok());
        Self { tls, seen }
    }

    fn read(tls: &ListenerTls) -> Result<Fingerprint, String> {
        let [cert, key] = tls.files();
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        Ok(fingerprint(&[&read(cert)?, &read(key)?]))
    }

    /// Re-reads the certificate and key if either changed (or always, when `forced`).
    pub fn reload(&self, forced: bool) -> Reloaded {
        let print = Self::read(&self.tls);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !forced && print.as_ref().ok() == seen.as_ref() {
            return Reloaded::Unchanged;
        }
        if let Ok(print) = &print {
            *seen = Some(*print);
        }
        match print.and_then(|_| self.tls.reload().map_err(|e| e.to_string())) {
            Ok(()) => {
                telemetry::tls_reloaded(true);
                tracing::info!(cert = %self.tls.files()[0].display(), "listener certificate reloaded");
                Reloaded::Applied
            }
            Err(error) => {
                telemetry::tls_reloaded(false);
                tracing::error!(%error, "listener certificate reload failed; the previous one stays in use");
                Reloaded::Failed(error)
            }
        }
    }
}

/// When a watcher re-reads its files: on SIGHUP, and every `interval` (to see edits made without
/// a signal). Shared by the keys and certificate watcher below and the pins file's (`pins.rs`).
pub(crate) struct Reloads {
    #[cfg(unix)]
    hangups: Option<tokio::signal::unix::Signal>,
    ticks: tokio::time::Interval,
}

impl Reloads {
    /// Starts listening for SIGHUP; the first wait ends `interval` from now at the latest (the
    /// files were just read).
    pub(crate) async fn start(interval: Duration) -> Self {
        #[cfg(unix)]
        let hangups = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; files are still re-read on change");
                None
            }
        };
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is immediate
        Self {
            #[cfg(unix)]
            hangups,
            ticks,
        }
    }

    /// Waits for the next re-read: `true` when a SIGHUP asked for it, `false` on the interval.
    pub(crate) async fn next(&mut self) -> bool {
        let ticks = &mut self.ticks;
        #[cfg(unix)]
        let hangups = &mut self.hangups;
        #[cfg(unix)]
        let hangup = async {
            match hangups.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hangup = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = hangup => true,
            _ = ticks.tick() => false,
        }
    }
}

/// Re-reads `keys` and `certs` on SIGHUP and when their content changes (checked every
/// `interval`), until the task is aborted.
pub async fn watch(keys: Option<Arc<KeysFile>>, certs: Option<Arc<CertFiles>>, interval: Duration) {
    let mut reloads = Reloads::start(interval).await;
    loop {
        let forced = reloads.next().await;
        if forced {
            tracing::info!("SIGHUP: re-reading the keys and the listener certificate");
        }
        if let Some(keys) = &keys
            && keys.reload() == Reloaded::Unchanged
            && forced
        {
            tracing::info!(file = %keys.path().display(), "keyring unchanged");
        }
        if let Some(certs) = &certs {
            certs.reload(forced);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mrtr-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entry(kid: &str) -> String {
        tower_mrtr::keyring::generate_entry(kid).unwrap().to_string()
    }

    #[test]
    fn rotation_steps_apply_and_bad_files_keep_the_old_keyring() {
        let dir = temp_dir("steps");
        let path = dir.join("keys");
        let (k1, k2) = (entry("k1"), entry("k2"));
        std::fs::write(&path, &k1).unwrap();
        let keys = KeysFile::load(&path).unwrap();
        assert_eq!(keys.reload(), Reloaded::Unchanged);

        std::fs::write(&path, format!("{k1}\n{k2}\n")).unwrap();
        assert_eq!(keys.reload(), Reloaded::Applied);
        let ring = keys.handle().load();
        assert_eq!((ring.active_key_id().as_str(), ring.len()), ("k1", 2));

        std::fs::write(&path, "# half written\nk2:").unwrap();
        let Reloaded::Failed(error) = keys.reload() else {
            panic!("a bad file must fail")
        };
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert_eq!(keys.handle().load().len(), 2, "the old keyring stays");
        // The same bad content is reported once, not at every poll.
        assert_eq!(keys.reload(), Reloaded::Unchanged);

        std::fs::remove_file(&path).unwrap();
        assert!(matches!(keys.reload(), Reloaded::Failed(e) if e.contains("cannot read")));
        std::fs::write(&path, format!("{k2},{k1}")).unwrap();
        assert_eq!(keys.reload(), Reloaded::Applied);
        assert_eq!(keys.handle().load().active_key_id().as_str(), "k2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Kubernetes mounts a Secret as `keys -> ..data/keys`, `..data -> ..<timestamp>/`, and
    /// updates it by pointing `..data` at a new directory with one rename.
    #[cfg(unix)]
    #[test]
    fn kubernetes_secret_symlink_swaps_are_seen() {
        use std::os::unix::fs::symlink;
        let dir = temp_dir("k8s");
        let (k1, k2) = (entry("k1"), entry("k2"));
        std::fs::create_dir(dir.join("..v1")).unwrap();
        std::fs::write(dir.join("..v1/keys"), &k1).unwrap();
        symlink("..v1", dir.join("..data")).unwrap();
        symlink("..data/keys", dir.join("keys")).unwrap();
        let keys = KeysFile::load(dir.join("keys")).unwrap();
        assert_eq!(keys.handle().load().active_key_id().as_str(), "k1");

        std::fs::create_dir(dir.join("..v2")).unwrap();
        std::fs::write(dir.join("..v2/keys"), format!("{k2}\n{k1}")).unwrap();
        symlink("..v2", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        std::fs::remove_dir_all(dir.join("..v1")).unwrap();

        assert_eq!(keys.reload(), Reloaded::Applied);
        assert_eq!(keys.handle().load().active_key_id().as_str(), "k2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_files_accept_newlines_and_comments() {
        let a = Keyring::generate("new").unwrap().to_config_string();
        let b = Keyring::generate("old").unwrap().to_config_string();
        let ring = parse_keys(&format!("# active first\n{}\n{}\n", *a, *b)).unwrap();
        assert_eq!(ring.active_key_id().as_str(), "new");
        assert_eq!(ring.len(), 2);
    }

    #[cfg(unix)]
    #[test]
    fn a_keys_file_others_can_read_is_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mrtr-keys-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keys");
        std::fs::write(
            &path,
            Keyring::generate("k1").unwrap().to_config_string().as_bytes(),
        )
        .unwrap();
        let set = |mode| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        set(0o600);
        let keys = KeysFile::load(&path).unwrap();
        assert_eq!(keys.exposure(), None);
        set(0o644);
        let warning = keys.exposure().expect("group and others can read it");
        assert!(
            warning.contains("mode 644") && warning.contains("0600"),
            "{warning}"
        );
        set(0o620);
        assert!(keys.exposure().is_some(), "writable by the group");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
