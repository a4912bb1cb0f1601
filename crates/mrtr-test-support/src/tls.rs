//! TLS material made on the spot (rcgen): a scratch directory for the PEM files ([`TempDir`]), a
//! certificate authority that signs leaves ([`Ca`]), a TLS server configuration
//! ([`server_config`]) and an HTTPS server for any axum router ([`HttpsServer`]).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use http::Version;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::task::JoinHandle;

/// A scratch directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh, empty directory named for `name` and this process.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mrtr-gw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// The path of `file` in the directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate authority that writes its certificate and the leaves it signs as PEM files.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A self-signed CA named `name`, its certificate written to `dir/NAME-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), issuer.pem()).unwrap();
        Self {
            issuer,
            dir: dir.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The CA certificate's PEM file.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// Signs a leaf for `names` (DNS names or IP addresses); returns (chain file, key file).
    pub fn leaf(&self, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_file, key_file) = (
            self.dir.join(format!("{file}.crt")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS server configuration offering h2 and http/1.1; with `client_ca`, client certificates
/// signed by it are required.
pub fn server_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Arc<ServerConfig> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// An HTTPS server for `router` on 127.0.0.1; records the HTTP version and `Mcp-Method` of
/// every request and counts failed handshakes. Stops on drop.
#[derive(Debug)]
pub struct HttpsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The HTTP version and `Mcp-Method` of every request, in order.
    pub versions: Arc<Mutex<Vec<(Version, String)>>>,
    /// TLS handshakes that failed.
    pub failed_handshakes: Arc<Mutex<u32>>,
    task: JoinHandle<()>,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpsServer {
    /// Serves `router` over TLS with `tls` on an ephemeral port.
    pub async fn start(router: Router, tls: Arc<ServerConfig>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let versions: Arc<Mutex<Vec<(Version, String)>>> = Arc::default();
        let failed_handshakes: Arc<Mutex<u32>> = Arc::default();
        let seen = versions.clone();
        let router = router.layer(axum::middleware::map_request(
            move |request: axum::extract::Request| {
                let method = request
                    .headers()
                    .get("mcp-method")
                    .and_then(|m| m.to_str().ok())
                    .unwrap_or("");
                seen.lock().unwrap().push((request.version(), method.to_owned()));
                std::future::ready(request)
            },
        ));
        let failed = failed_handshakes.clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, router, failed) = (acceptor.clone(), router.clone(), failed.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        *failed.lock().unwrap() += 1;
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            versions,
            failed_handshakes,
            task,
        }
    }

    /// `https://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/mcp", self.addr.port())
    }

    /// The HTTP versions of the `method` requests received.
    pub fn versions_of(&self, method: &str) -> Vec<Version> {
        let seen = self.versions.lock().unwrap();
        seen.iter()
            .filter(|(_, m)| m == method)
            .map(|(v, _)| *v)
            .collect()
    }
}
