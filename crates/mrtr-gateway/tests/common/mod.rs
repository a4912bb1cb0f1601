//! Helpers shared by the gateway's integration tests: certificates made on the spot (rcgen),
//! an HTTPS server for any axum router, and an MCP call that reads JSON or SSE answers.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use mrtr_gateway::{Backend, GatewayConfig, RunningGateway};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Every network step of a test is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A scratch directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mrtr-gw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

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

impl Ca {
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
/// every request and counts failed handshakes.
pub struct HttpsServer {
    pub addr: SocketAddr,
    pub versions: Arc<Mutex<Vec<(Version, String)>>>,
    pub failed_handshakes: Arc<Mutex<u32>>,
    task: JoinHandle<()>,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpsServer {
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

/// The headers every 2026-07-28 request carries.
pub fn mcp_request(url: &str, method: &str, name: Option<&str>, body: Value) -> Request<Full<Bytes>> {
    let mut request = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// A JSON-RPC request body with a conformant `_meta` (elicitation declared).
pub fn rpc(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// The JSON-RPC response in a JSON or SSE answer.
pub fn message(text: &str) -> Value {
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|d| d.contains("\"id\""))
        .unwrap_or(text);
    serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

/// Reads a whole response.
pub async fn text(response: Response<hyper::body::Incoming>) -> String {
    let bytes = tokio::time::timeout(TIMEOUT, response.into_body().collect())
        .await
        .expect("the body ends in time")
        .expect("a readable body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A reqwest POST of `method` with `params` (plus a conformant `_meta`) and the headers every
/// 2026-07-28 request carries (`Mcp-Name` from `params.name`).
pub fn mcp_post(
    client: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .timeout(TIMEOUT);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name.to_owned());
    }
    request.body(rpc(id, method, params).to_string())
}

/// A `tools/call` with reqwest (plain HTTP), returning the JSON-RPC response.
pub async fn call_tool(client: &reqwest::Client, url: &str, id: u64, params: Value) -> Value {
    let response = mcp_post(client, url, id, "tools/call", params)
        .send()
        .await
        .expect("the gateway answers");
    message(&response.text().await.expect("an answer"))
}

/// Round 1 of the demo's `delete_branch` flow with `name` (prefixed or not).
pub fn delete_branch(name: &str) -> Value {
    json!({ "name": name, "arguments": { "repo": "acme/api", "branch": "old" } })
}

/// Round 2: the elicitation answered and `state` echoed.
pub fn delete_branch_retry(name: &str, state: &str) -> Value {
    let mut params = delete_branch(name);
    params["requestState"] = json!(state);
    params["inputResponses"] =
        json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } });
    params
}

/// A gateway process (the real binary), killed on drop unless it already exited.
pub struct Process {
    pub child: std::process::Child,
    /// `http://ADDR/mcp`.
    pub url: String,
    /// `http://ADDR` of the admin listener.
    pub admin: String,
    /// Everything the process wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Starts the binary with `args` (plus `--listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`)
    /// and waits for both "listening" lines.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        use std::io::{BufRead, BufReader, Read};
        use std::process::{Command, Stdio};
        let mut command = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"));
        command
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("MRTR_KEYS")
            .env("RUST_LOG", "info,rmcp=warn");
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mrtr-gateway");
        let stdout = child.stdout.take().unwrap();
        let mut stderr_pipe = child.stderr.take().unwrap();
        let stderr: Arc<Mutex<String>> = Arc::default();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (mut url, mut admin) = (None, None);
        while url.is_none() || admin.is_none() {
            let Ok(line) = rx.recv_timeout(Duration::from_secs(20)) else {
                panic!("the gateway did not start: {}", stderr.lock().unwrap());
            };
            if let Some(u) = line.strip_prefix("mrtr-gateway listening on ") {
                url = Some(u.to_owned());
            } else if let Some(a) = line.strip_prefix("mrtr-gateway admin listening on ") {
                admin = Some(a.to_owned());
            }
        }
        Self {
            child,
            url: url.unwrap(),
            admin: admin.unwrap(),
            stderr,
        }
    }

    /// Sends `signal` (`TERM`, `HUP`) to the process.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits (polling, up to `limit`) for the process to exit; its exit status.
    pub async fn exited(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the gateway did not exit in {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /readyz`: (HTTP status, JSON body).
    pub async fn readyz(&self) -> (u16, Value) {
        let response = reqwest::Client::new()
            .get(format!("{}/readyz", self.admin))
            .timeout(TIMEOUT)
            .send()
            .await
            .expect("the admin listener answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("JSON"))
    }

    /// `GET /metrics` as text.
    pub async fn metrics(&self) -> String {
        reqwest::Client::new()
            .get(format!("{}/metrics", self.admin))
            .timeout(TIMEOUT)
            .send()
            .await
            .expect("the admin listener answers")
            .text()
            .await
            .unwrap()
    }
}

/// Polls `check` every 50 ms until it holds, for at most `limit`; panics with `what` otherwise.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the sample of `metric` whose labels include every `labels` pair (`name="value"`),
/// summed over the matching samples; `None` without one.
pub fn sample(metrics: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, label_text) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if name != metric {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|pair| pair == format!("{k}=\"{v}\"")))
        {
            *total.get_or_insert(0.0) += value.parse::<f64>().unwrap();
        }
    }
    total
}

/// How a test MCP backend ([`start_backend`]) answers every request.
#[derive(Clone, Copy)]
pub enum Answer {
    /// A JSON result.
    Json,
    /// A JSON result after this delay.
    JsonAfter(Duration),
    /// An SSE stream: a progress notification, then the connection is cut.
    SseThenDie,
    /// An SSE stream: a progress notification, then nothing.
    SseThenStall,
}

type BackendBody =
    Either<Full<Bytes>, StreamBody<futures_util::stream::BoxStream<'static, io::Result<Frame<Bytes>>>>>;

async fn answer(request: Request<Incoming>, answer: Answer) -> Result<Response<BackendBody>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let id = serde_json::from_slice::<Value>(&body)
        .map(|m| m["id"].clone())
        .unwrap_or_default();
    let progress = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n";
    let stream = match answer {
        Answer::Json | Answer::JsonAfter(_) => {
            if let Answer::JsonAfter(delay) = answer {
                tokio::time::sleep(delay).await;
            }
            let result =
                json!({"jsonrpc": "2.0", "id": id, "result": {"content": [], "resultType": "complete"}});
            return Ok(Response::builder()
                .header("content-type", "application/json")
                .body(Either::Left(Full::new(Bytes::from(result.to_string()))))
                .unwrap());
        }
        Answer::SseThenDie => {
            futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(progress.as_bytes())))])
                .chain(futures_util::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(io::Error::other("the backend process died"))
                }))
                .boxed()
        }
        Answer::SseThenStall => {
            futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(progress.as_bytes())))])
                .chain(futures_util::stream::pending())
                .boxed()
        }
    };
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(Either::Right(StreamBody::new(stream)))
        .unwrap())
}

/// Serves `answer` on 127.0.0.1; with `idle_close`, a connection that sends no request head
/// for that long is closed (hyper's header read timeout, which runs while a connection idles).
/// Counts accepted connections.
pub async fn start_backend(mode: Answer, idle_close: Option<Duration>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(idle_close);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| answer(request, mode));
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (url, connections)
}

/// An in-process gateway over `backends` on 127.0.0.1, with `configure` applied to the defaults.
pub async fn gateway(backends: Vec<Backend>, configure: impl FnOnce(&mut GatewayConfig)) -> RunningGateway {
    let mut config = GatewayConfig::new(backends);
    configure(&mut config);
    let keyring = tower_mrtr::Keyring::generate("k1").unwrap();
    mrtr_gateway::start(config, keyring, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// The two demo backends on 127.0.0.1: `alpha` answering in JSON, `beta` in SSE.
pub async fn demo_pair() -> (mrtr_backends::ServedBackend, mrtr_backends::ServedBackend) {
    use mrtr_backends::{DemoBackend, ResponseMode, serve};
    let alpha = serve(DemoBackend::alpha("alpha").unwrap(), ResponseMode::Json)
        .await
        .unwrap();
    let beta = serve(DemoBackend::beta("beta").unwrap(), ResponseMode::Sse)
        .await
        .unwrap();
    (alpha, beta)
}
