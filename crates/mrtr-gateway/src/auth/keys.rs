//! The issuer's signing keys (a JWKS), read from a file or fetched from a URL, kept in memory and
//! read again when a token names a key id they do not hold (the issuer rotated its keys), or
//! when they are older than [`MAX_AGE`] (so that a key the issuer withdrew stops being
//! accepted).
//!
//! Only signature keys of asymmetric algorithms are kept: a JWKS entry of type `oct` (an HMAC
//! secret), or one whose `use` is not `sig`, is skipped, so no token is ever checked with HMAC
//! against a public key. Reading again is single-flight (one fetch at a time, the requests that
//! wait share it), and reading for an unknown key id happens at most once per [`MIN_INTERVAL`],
//! so tokens naming random key ids cannot make the gateway flood the issuer.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

/// Keys are read again, at the next request, once they are this old.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(5 * 60);
/// The least time between two reads of the keys.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(10);
/// How long one fetch of the JWKS may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWKS document read.
const MAX_DOCUMENT: usize = 1024 * 1024;

/// Where the keys come from.
#[derive(Clone, Debug)]
pub(crate) enum KeySource {
    /// A JWKS file, read again like a fetched document.
    File(PathBuf),
    /// A JWKS URL (`http://` or `https://`; the system's trust store).
    Url(http::Uri),
}

/// One signature key.
#[derive(Clone)]
pub(crate) struct Key {
    pub(crate) decoding: DecodingKey,
    /// The `alg` the JWKS pins the key to, if it does.
    pub(crate) alg: Option<Algorithm>,
}

/// The keys read last, by key id (`None`: an entry without `kid`).
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<Option<Box<str>>, Key>,
    read_at: Option<Instant>,
}

type FetchClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// When reads of the keys began (successful or not).
#[derive(Default)]
struct Reads {
    /// The last read, whatever caused it.
    any: Option<Instant>,
    /// The last read for a token naming an unknown key.
    unknown_key: Option<Instant>,
}

/// What [`Keys::find`] found.
pub(crate) enum Found {
    Key(Key),
    /// No such key in the keys held; [`Keys::refresh`] may find it.
    Unknown,
}

/// The issuer's keys; see the [module docs](self).
pub(crate) struct Keys {
    source: KeySource,
    current: ArcSwap<KeySet>,
    /// When the last reads began: one read at a time, and not too often for unknown keys.
    reads: tokio::sync::Mutex<Reads>,
    client: Option<FetchClient>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("source", &self.source)
            .field("keys", &self.current.load().by_kid.len())
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// Keys from `source`, none read yet.
    pub(crate) fn new(source: KeySource) -> Result<Self, String> {
        let client = match &source {
            KeySource::File(_) => None,
            KeySource::Url(_) => {
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_native_roots()
                    .map_err(|e| format!("no trust store for fetching the JWKS: {e}"))?
                    .https_or_http()
                    .enable_http1()
                    .build();
                Some(Client::builder(TokioExecutor::new()).build(https))
            }
        };
        Ok(Self {
            source,
            current: ArcSwap::from_pointee(KeySet::default()),
            reads: tokio::sync::Mutex::new(Reads::default()),
            client,
        })
    }

    /// The key `kid` names (a token without `kid` may use the one key of a set of one).
    pub(crate) fn find(&self, kid: Option<&str>) -> Found {
        let set = self.current.load();
        let key = match kid {
            Some(kid) => set.by_kid.get(&Some(Box::from(kid))),
            None if set.by_kid.len() == 1 => set.by_kid.values().next(),
            None => None,
        };
        match key {
            Some(key) => Found::Key(key.clone()),
            None => Found::Unknown,
        }
    }

    /// Whether the keys held are older than [`MAX_AGE`] (or none were read yet).
    pub(crate) fn stale(&self) -> bool {
        self.current
            .load()
            .read_at
            .is_none_or(|at| at.elapsed() >= MAX_AGE)
    }

    /// Reads the keys again, unless a read began since `asked` (the caller waited for it), or
    /// the last read of the same cause began less than [`MIN_INTERVAL`] ago: for a token naming
    /// an unknown key (`unknown_key`), the last such read; else (keys gone stale) any read. A
    /// failed read keeps the keys held.
    pub(crate) async fn refresh(&self, asked: Instant, unknown_key: bool) {
        let mut reads = self.reads.lock().await;
        let last_of_cause = if unknown_key { reads.unknown_key } else { reads.any };
        if reads.any.is_some_and(|at| at >= asked)
            || last_of_cause.is_some_and(|at| at.elapsed() < MIN_INTERVAL)
        {
            return;
        }
        let now = Instant::now();
        reads.any = Some(now);
        if unknown_key {
            reads.unknown_key = Some(now);
        }
        match self.read().await {
            Ok(set) => {
                tracing::debug!(keys = set.by_kid.len(), source = ?self.source, "JWKS read");
                self.current.store(Arc::new(set));
            }
            Err(error) => {
                tracing::warn!(source = ?self.source, %error, "the JWKS could not be read; keeping the keys held")
            }
        }
    }

    async fn read(&self) -> Result<KeySet, String> {
        let document = match (&self.source, &self.client) {
            (KeySource::File(path), _) => {
                let bytes = tokio::fs::read(path)
                    .await
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                if bytes.len() > MAX_DOCUMENT {
                    return Err(format!("{}: over {MAX_DOCUMENT} bytes", path.display()));
                }
                Bytes::from(bytes)
            }
            (KeySource::Url(uri), Some(client)) => tokio::time::timeout(FETCH_TIMEOUT, fetch(client, uri))
                .await
                .map_err(|_| format!("{uri}: no answer within {} s", FETCH_TIMEOUT.as_secs()))??,
            (KeySource::Url(_), None) => return Err("no client to fetch the JWKS".into()),
        };
        parse(&document)
    }
}

async fn fetch(client: &FetchClient, uri: &http::Uri) -> Result<Bytes, String> {
    let request = http::Request::get(uri.clone())
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| format!("{uri}: {e}"))?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("{uri}: HTTP {}", response.status()));
    }
    Limited::new(response.into_body(), MAX_DOCUMENT)
        .collect()
        .await
        .map(|body| body.to_bytes())
        .map_err(|e| format!("{uri}: {e}"))
}

/// The signature keys of a JWKS document (see the [module docs](self) for what is skipped).
fn parse(document: &[u8]) -> Result<KeySet, String> {
    let set: JwkSet = serde_json::from_slice(document).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut by_kid = HashMap::new();
    for jwk in &set.keys {
        let common = &jwk.common;
        let kid = common.key_id.as_deref();
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_))
            || common
                .public_key_use
                .as_ref()
                .is_some_and(|u| *u != PublicKeyUse::Signature)
        {
            tracing::debug!(kid, "JWKS entry skipped: not an asymmetric signature key");
            continue;
        }
        let alg = match common.key_algorithm {
            None => None,
            Some(alg) => match Algorithm::from_str(&alg.to_string()) {
                Ok(alg) => Some(alg),
                Err(_) => {
                    tracing::debug!(kid, %alg, "JWKS entry skipped: not a signature algorithm");
                    continue;
                }
            },
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(decoding) => {
                by_kid.insert(kid.map(Box::from), Key { decoding, alg });
            }
            Err(error) => tracing::debug!(kid, %error, "JWKS entry skipped: unreadable"),
        }
    }
    Ok(KeySet {
        by_kid,
        read_at: Some(Instant::now()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_secrets_and_encryption_keys_are_never_kept() {
        let document = br#"{"keys":[
            {"kty":"oct","kid":"h","k":"c2VjcmV0"},
            {"kty":"EC","kid":"enc","use":"enc","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"EC","kid":"sig","use":"sig","alg":"ES256","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}
        ]}"#;
        let set = parse(document).unwrap();
        let kids: Vec<_> = set.by_kid.keys().cloned().collect();
        assert_eq!(kids, [Some(Box::from("sig"))]);
        assert_eq!(set.by_kid[&Some(Box::from("sig"))].alg, Some(Algorithm::ES256));
        assert!(parse(b"[]").is_err());
    }
}
