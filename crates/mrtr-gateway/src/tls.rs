//! TLS through rustls (with the `ring` provider), both ways.
//!
//! * **Toward backends** ([`BackendTls`]): an `https://` backend is verified against the
//!   operating system's trust store (rustls-native-certs) unless it names its own CA file, in
//!   which case **only** that CA is trusted for it. A client certificate and key give mTLS. ALPN
//!   offers `h2` and `http/1.1`, so a backend that speaks HTTP/2 gets it.
//! * **On the listener** ([`ListenerTls`]): a certificate chain and key from PEM files, re-read
//!   by [`ListenerTls::reload`] (SIGHUP, or a change of either file); connections already open
//!   keep the configuration they were accepted with.
//!
//! System roots rather than a compiled-in list (webpki-roots): operators manage trust in one place
//! (the image's or host's CA bundle, which receives security updates and corporate CAs), and
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` work as for every other program. The container image ships
//! Debian's `ca-certificates`.
//!
//! ```
//! use mrtr_gateway::tls::BackendTls;
//!
//! // No files: the system's roots, no client certificate.
//! let tls = BackendTls::default();
//! assert!(tls.is_default());
//! // A missing CA file is an error naming the file.
//! let error = BackendTls { ca_file: Some("/nonexistent/ca.pem".into()), ..BackendTls::default() }
//!     .client_config()
//!     .unwrap_err();
//! assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ALPN protocols, most preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A TLS file that could not be used, naming the file and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError(format!("cannot read certificates from {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!("no PEM certificate in {}", path.display())));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // The error names the file only: a key's bytes never reach a message.
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        TlsError(format!(
            "cannot read a PEM private key from {}: {e}",
            path.display()
        ))
    })
}

/// How the gateway connects to one `https://` backend. `Default`: the system's roots, no client
/// certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendTls {
    /// PEM file of the CA certificate(s) to trust for this backend, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate chain to present (mTLS); needs `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub client_key: Option<PathBuf>,
}

impl BackendTls {
    /// Whether nothing is set (the system's roots, no client certificate).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Builds the rustls client configuration, reading every file now.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let roots = match &self.ca_file {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(path)? {
                    roots.add(cert).map_err(|e| {
                        TlsError(format!("unusable CA certificate in {}: {e}", path.display()))
                    })?;
                }
                roots
            }
            None => system_roots()?.clone(),
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS setup: {e}")))?
            .with_root_certificates(roots);
        let config = match (&self.client_cert, &self.client_key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(|e| {
                    TlsError(format!(
                        "client certificate {} and key {} do not fit: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?,
            _ => {
                return Err(TlsError(
                    "a client certificate needs both a certificate and a key file".to_owned(),
                ));
            }
        };
        // ALPN is left to the connector, which offers what the HTTP client can speak.
        Ok(Arc::new(config))
    }
}

/// The operating system's trust store, read once.
fn system_roots() -> Result<&'static RootCertStore, TlsError> {
    static ROOTS: OnceLock<Result<RootCertStore, TlsError>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "skipped part of the system's trust store");
            }
            let mut roots = RootCertStore::empty();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError(
                    "no trusted root certificate found in the system's trust store \
                     (install ca-certificates, set SSL_CERT_FILE, or give the backend a CA file)"
                        .to_owned(),
                ));
            }
            Ok(roots)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A configuration trusting nothing, for a machine without a trust store: plain-HTTP backends
/// still work, and every TLS handshake fails (with an "unknown issuer" error in the log).
pub(crate) fn empty_roots_config() -> Arc<ClientConfig> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    Arc::new(config)
}

/// The HTTPS-or-HTTP connector for one backend, offering HTTP/2 and HTTP/1.1 over ALPN.
pub(crate) fn connector(
    config: Arc<ClientConfig>,
    http: hyper_util::client::legacy::connect::HttpConnector,
) -> hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector> {
    let mut config = Arc::unwrap_or_clone(config);
    // The builder sets ALPN itself and refuses (panics on) a configuration that has it already.
    config.alpn_protocols.clear();
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http)
}

/// The listener's certificate and key, re-readable while the gateway runs.
pub struct ListenerTls {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<ServerConfig>,
}

impl fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ListenerTls {
    /// Reads `cert` (PEM chain, leaf first) and `key` (PEM private key).
    pub fn load(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Result<Self, TlsError> {
        let (cert, key) = (cert.into(), key.into());
        let config = server_config(&cert, &key)?;
        Ok(Self {
            cert,
            key,
            current: ArcSwap::from_pointee(config),
        })
    }

    /// Re-reads both files; on error the previous configuration stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.cert, &self.key)?;
        self.current.store(Arc::new(config));
        Ok(())
    }

    /// The files this configuration is read from (certificate, key).
    pub fn files(&self) -> [&Path; 2] {
        [&self.cert, &self.key]
    }

    /// An acceptor with the current configuration.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.load_full())
    }
}

fn server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS setup: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certificates(cert)?, private_key(key)?)
        .map_err(|e| {
            TlsError(format!(
                "certificate {} and key {} do not fit: {e}",
                cert.display(),
                key.display()
            ))
        })?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}
