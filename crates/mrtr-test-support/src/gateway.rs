//! The gateway under test: in process on an ephemeral loopback port ([`gateway`], with a
//! [`keyring`] of its own or shared between replicas), or the real binary as a child process
//! ([`Process`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mrtr_gateway::{GatewayConfig, RunningGateway, start_shared};
use serde_json::Value;
use tower_mrtr::Keyring;

use crate::wait::TIMEOUT;

/// A fresh keyring of one random key, `k1`; clone the `Arc` for replicas that share keys.
pub fn keyring() -> Arc<Keyring> {
    Arc::new(Keyring::generate("k1").expect("a random key"))
}

/// A gateway serving `config` with `keyring` on an ephemeral port of 127.0.0.1.
pub async fn gateway(config: GatewayConfig, keyring: Arc<Keyring>) -> anyhow::Result<RunningGateway> {
    Ok(start_shared(config, keyring, "127.0.0.1:0".parse()?).await?)
}

/// A gateway process (the real binary), killed on drop unless it already exited.
///
/// [`Process::spawn`] takes the binary's path because Cargo sets `CARGO_BIN_EXE_mrtr-gateway`
/// only while it compiles the gateway package's own integration tests, not this crate; those
/// tests pass `env!("CARGO_BIN_EXE_mrtr-gateway")`.
#[derive(Debug)]
pub struct Process {
    /// The child process.
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
    /// Starts `binary` with `args` (plus `--listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`),
    /// without `MRTR_KEYS` from the test's environment but with `env`, and waits for both
    /// "listening" lines.
    pub fn spawn(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        use std::io::{BufRead, BufReader, Read};
        use std::process::{Command, Stdio};
        let mut command = Command::new(binary);
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

/// The path of `name`, a binary of another workspace package (`legacy-stdio-server` of
/// `mrtr-backends`), next to the running test's own directory: `cargo test --workspace` builds
/// it there (that package has integration tests), as `cargo build --workspace --bins` does.
pub fn workspace_binary(name: &str) -> std::path::PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let profile = test
        .parent()
        .and_then(std::path::Path::parent)
        .expect("a test binary under target/<profile>/deps");
    let binary = profile.join(name);
    assert!(
        binary.exists(),
        "{} is not built: run `cargo test --workspace` (or `cargo build --workspace --bins` first)",
        binary.display()
    );
    binary
}
