//! The processes under test: two backends, two gateway replicas sharing a keys file, and nginx
//! in front of the replicas (round-robin, no stickiness). Each is a child of the soak, started
//! and stopped by it; their logs go to the work directory.
//!
//! | process | command |
//! |---|---|
//! | backend `alpha` | `fixture-server --demo alpha --sse --state-key-file …` (stateless, killed and restarted) |
//! | backend `beta` | `tasks-fixture-server --identity beta` (JSON; holds the tasks, never killed) |
//! | replica `gateway-a`, `gateway-b` | `mrtr-gateway --keys-file KEYS --backend alpha=… --backend beta=… --admin-listen … --client-idle-timeout 30` |
//! | `nginx` | `nginx -p DIR -c DIR/nginx.conf -e DIR/nginx-error.log -g 'daemon off;'` |
//! | `redis` (with `--shared-store`) | `redis-server --bind 127.0.0.1 --port … --save '' --appendonly no` (killed and restarted, empty) |
//!
//! With `--shared-store`, every replica also gets `--shared-store redis://…` and `--config
//! DIR/store.toml`: one `[[rate-limit]]` that every request counts against, far above the
//! soak's rate ([`STORE_CONFIG`]), so that each request makes the store's round trip and none is
//! refused for the limit; a request the store cannot check gets `on-store-error`'s default,
//! `deny` (`503`, retried by the users).
//!
//! `alpha` reads its own `requestState` key from a file, so a restarted `alpha` still opens the
//! state of rounds it answered before it was killed; `beta` keeps tasks in memory, which a
//! `kill -9` would lose with the process (a property of the backend, not of the relay), so the
//! soak kills `alpha`. The nginx config is [`nginx_config`].
//!
//! ```
//! let conf = mrtr_soak::fleet::nginx_config(
//!     std::path::Path::new("/tmp/soak"),
//!     "127.0.0.1:8000".parse().unwrap(),
//!     &["127.0.0.1:8001".parse().unwrap(), "127.0.0.1:8002".parse().unwrap()],
//! );
//! assert!(conf.contains("server 127.0.0.1:8001 max_fails=1 fail_timeout=2s;"));
//! assert!(!conf.contains("hash") && !conf.contains("sticky"));
//! assert!(conf.contains("keepalive_timeout 20s;"));
//! assert!(mrtr_soak::fleet::NGINX_UPSTREAM_IDLE < mrtr_soak::fleet::REPLICA_CLIENT_IDLE);
//! ```

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The pid of every process under test now, by name: what the sampler reads.
pub type Pids = Arc<Mutex<BTreeMap<&'static str, u32>>>;

/// How long a process may take to print that it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The programs the fleet runs.
#[derive(Clone, Debug)]
pub struct Programs {
    /// `mrtr-gateway`.
    pub gateway: PathBuf,
    /// `fixture-server` (demo backend alpha).
    pub fixture: PathBuf,
    /// `tasks-fixture-server` (backend beta).
    pub tasks_fixture: PathBuf,
    /// `nginx`.
    pub nginx: PathBuf,
    /// `redis-server`, when the replicas share a store.
    pub redis: Option<PathBuf>,
}

/// Settings every replica gets.
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// `--envelope-ttl`.
    pub envelope_ttl: Duration,
    /// `--drain-delay`.
    pub drain_delay: Duration,
    /// `--drain-timeout`.
    pub drain_timeout: Duration,
    /// `--reload-interval`.
    pub reload_interval: Duration,
    /// `--shared-store URL` and the `--config` file holding the limit: set by the run once it
    /// has started the store ([`Programs::redis`]).
    pub shared_store: Option<(String, PathBuf)>,
}

/// A running child with its log.
#[derive(Debug)]
struct Running {
    child: Child,
    pid: u32,
    /// Lines printed up to (and with) the ready line.
    lines: Vec<String>,
}

/// Starts `program`, appending its output to `log`, and waits for a stdout line containing
/// `ready`.
async fn start(
    program: &Path,
    args: &[String],
    env: &[(&str, &str)],
    log: &Path,
    ready: &str,
) -> io::Result<Running> {
    let mut file = OpenOptions::new().create(true).append(true).open(log)?;
    writeln!(file, "---- {} {}", program.display(), args.join(" "))?;
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file.try_clone()?)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", program.display())))?;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("child exited at once"))?;
    let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let wait = async {
        while let Some(line) = lines.next_line().await? {
            writeln!(file, "{line}")?;
            let done = line.contains(ready);
            seen.push(line);
            if done {
                return Ok(());
            }
        }
        Err(io::Error::other(format!(
            "{} exited before printing {ready:?} (see {})",
            program.display(),
            log.display()
        )))
    };
    tokio::time::timeout(START_TIMEOUT, wait)
        .await
        .map_err(|_| io::Error::other(format!("{} did not print {ready:?}", program.display())))??;
    // Keep draining stdout into the log, so the child never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = writeln!(file, "{line}");
        }
    });
    Ok(Running {
        child,
        pid,
        lines: seen,
    })
}

/// Sends `signal` (`TERM`, `KILL`, ...) to `pid` with kill(1).
pub async fn signal(pid: u32, signal: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .await?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("kill -{signal} {pid} failed")))
    }
}

/// `kill -9` of the process `running` holds, reaped, its pid no longer sampled.
async fn kill(running: &mut Option<Running>, pids: &Pids, name: &str) -> io::Result<()> {
    if let Some(mut running) = running.take() {
        pids.lock().expect("not poisoned").remove(name);
        signal(running.pid, "KILL").await?;
        running.child.wait().await?;
    }
    Ok(())
}

/// A free port on 127.0.0.1 (bound and released; the child binds it right after).
pub fn free_addr() -> io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// A backend process, restartable on the same address.
#[derive(Debug)]
pub struct Backend {
    /// `alpha` or `beta`.
    pub name: &'static str,
    /// Its address.
    pub addr: SocketAddr,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    running: Option<Running>,
    pids: Pids,
}

impl Backend {
    /// `alpha`: the demo backend answering in SSE, its state key in `dir`.
    pub fn alpha(programs: &Programs, dir: &Path, pids: &Pids) -> io::Result<Self> {
        let key = dir.join("alpha-state.key");
        let mut bytes = [0u8; 32];
        File::open("/dev/urandom").and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes))?;
        std::fs::write(&key, bytes)?;
        let args = ["--demo", "alpha", "--sse", "--state-key-file"]
            .map(String::from)
            .into_iter()
            .chain([key.display().to_string()])
            .collect();
        Self::new("alpha", &programs.fixture, args, dir, pids)
    }

    /// `beta`: the task fixture answering in JSON.
    pub fn beta(programs: &Programs, dir: &Path, pids: &Pids) -> io::Result<Self> {
        let args = ["--identity", "beta"].map(String::from).to_vec();
        Self::new("beta", &programs.tasks_fixture, args, dir, pids)
    }

    fn new(
        name: &'static str,
        program: &Path,
        mut args: Vec<String>,
        dir: &Path,
        pids: &Pids,
    ) -> io::Result<Self> {
        let addr = free_addr()?;
        args.extend(["--listen".to_owned(), addr.to_string()]);
        Ok(Self {
            name,
            addr,
            program: program.to_owned(),
            args,
            log: dir.join(format!("{name}.log")),
            running: None,
            pids: pids.clone(),
        })
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Starts it and waits until it listens.
    pub async fn start(&mut self) -> io::Result<()> {
        let running = start(&self.program, &self.args, &[], &self.log, "listening on").await?;
        self.pids
            .lock()
            .expect("not poisoned")
            .insert(self.name, running.pid);
        self.running = Some(running);
        Ok(())
    }

    /// `kill -9`, and reaps it.
    pub async fn kill(&mut self) -> io::Result<()> {
        kill(&mut self.running, &self.pids, self.name).await
    }
}

/// The replicas' config file with a store: a limit that every request counts against (no
/// principal: one budget for the fleet), which the soak's few hundred requests a second never
/// reach.
pub const STORE_CONFIG: &str = r#"# Written by mrtr-soak: every request makes the shared store's round trip.
[[rate-limit]]
name = "soak"
per = "principal"
requests = 100000
period = 1
"#;

/// The shared store: one `redis-server` on loopback, nothing saved, restartable (empty) on the
/// same address.
#[derive(Debug)]
pub struct Store {
    /// Its address.
    pub addr: SocketAddr,
    /// The replicas' `--config` file ([`STORE_CONFIG`]).
    pub config: PathBuf,
    program: PathBuf,
    log: PathBuf,
    running: Option<Running>,
    pids: Pids,
}

impl Store {
    /// A store run by `program`, its log and the replicas' config file in `dir`.
    pub fn new(program: &Path, dir: &Path, pids: &Pids) -> io::Result<Self> {
        let config = dir.join("store.toml");
        std::fs::write(&config, STORE_CONFIG)?;
        Ok(Self {
            addr: free_addr()?,
            config,
            program: program.to_owned(),
            log: dir.join("redis.log"),
            running: None,
            pids: pids.clone(),
        })
    }

    /// `redis://ADDR`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Starts it and waits until it accepts connections.
    pub async fn start(&mut self) -> io::Result<()> {
        let args = [
            "--bind",
            &self.addr.ip().to_string(),
            "--port",
            &self.addr.port().to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .map(String::from);
        let running = start(
            &self.program,
            &args,
            &[],
            &self.log,
            "Ready to accept connections",
        )
        .await?;
        self.pids
            .lock()
            .expect("not poisoned")
            .insert("redis", running.pid);
        self.running = Some(running);
        Ok(())
    }

    /// `kill -9` (its data goes with it), and reaps it.
    pub async fn kill(&mut self) -> io::Result<()> {
        kill(&mut self.running, &self.pids, "redis").await
    }
}

/// A gateway replica, restartable on the same address.
#[derive(Debug)]
pub struct Replica {
    /// `gateway-a` or `gateway-b`.
    pub name: &'static str,
    /// Its MCP listener.
    pub addr: SocketAddr,
    /// Its admin listener now (a new port at every start).
    pub admin: Option<SocketAddr>,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    running: Option<Running>,
    pids: Pids,
}

impl Replica {
    /// A replica serving `backends` with the keys in `keys_file`.
    pub fn new(
        name: &'static str,
        programs: &Programs,
        dir: &Path,
        keys_file: &Path,
        backends: &[&Backend],
        settings: &ReplicaSettings,
        pids: &Pids,
    ) -> io::Result<Self> {
        let addr = free_addr()?;
        let secs = |d: Duration| d.as_secs().max(1).to_string();
        let mut args: Vec<String> = vec![
            "--listen".into(),
            addr.to_string(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
            "--keys-file".into(),
            keys_file.display().to_string(),
            "--envelope-ttl".into(),
            secs(settings.envelope_ttl),
            "--drain-delay".into(),
            settings.drain_delay.as_secs().to_string(),
            "--drain-timeout".into(),
            secs(settings.drain_timeout),
            "--reload-interval".into(),
            secs(settings.reload_interval),
            "--client-idle-timeout".into(),
            secs(REPLICA_CLIENT_IDLE),
        ];
        for backend in backends {
            args.extend([
                "--backend".to_owned(),
                format!("{}={}", backend.name, backend.url()),
            ]);
        }
        if let Some((url, config)) = &settings.shared_store {
            args.extend([
                "--shared-store".to_owned(),
                url.clone(),
                "--config".to_owned(),
                config.display().to_string(),
            ]);
        }
        Ok(Self {
            name,
            addr,
            admin: None,
            program: programs.gateway.clone(),
            args,
            log: dir.join(format!("{name}.log")),
            running: None,
            pids: pids.clone(),
        })
    }

    /// Starts it and waits until it listens.
    pub async fn start(&mut self) -> io::Result<()> {
        // Warnings (a backend down, a reload) stay; the per-request access log would fill the disk.
        let env = [("RUST_LOG", "info,rmcp=warn,mrtr_gateway::access=warn")];
        let running = start(
            &self.program,
            &self.args,
            &env,
            &self.log,
            "mrtr-gateway listening on",
        )
        .await?;
        self.admin = running
            .lines
            .iter()
            .find_map(|l| l.split("admin listening on http://").nth(1))
            .and_then(|a| a.trim().parse().ok());
        self.pids
            .lock()
            .expect("not poisoned")
            .insert(self.name, running.pid);
        self.running = Some(running);
        Ok(())
    }

    /// SIGTERM, then waits for the drain to end (at most `limit`, then `kill -9`). Returns the
    /// exit status as text.
    pub async fn stop(&mut self, limit: Duration) -> io::Result<String> {
        let Some(mut running) = self.running.take() else {
            return Ok("not running".into());
        };
        signal(running.pid, "TERM").await?;
        let status = match tokio::time::timeout(limit, running.child.wait()).await {
            Ok(status) => format!("{}", status?),
            Err(_) => {
                signal(running.pid, "KILL").await?;
                running.child.wait().await?;
                format!("still running after {limit:?}: killed")
            }
        };
        self.pids.lock().expect("not poisoned").remove(self.name);
        Ok(status)
    }
}

/// nginx in front of the replicas.
#[derive(Debug)]
pub struct Nginx {
    /// Where clients connect.
    pub addr: SocketAddr,
    running: Option<Child>,
    pid: u32,
}

impl Nginx {
    /// Writes `DIR/nginx.conf` and starts nginx with it, in the foreground; waits until it
    /// accepts connections.
    pub async fn start(program: &Path, dir: &Path, replicas: &[SocketAddr], pids: &Pids) -> io::Result<Self> {
        let addr = free_addr()?;
        std::fs::create_dir_all(dir.join("nginx-temp"))?;
        std::fs::write(dir.join("nginx.conf"), nginx_config(dir, addr, replicas))?;
        let log = File::create(dir.join("nginx.out"))?;
        let child = Command::new(program)
            .args(["-p", &dir.display().to_string(), "-c"])
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("nginx-error.log"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", program.display())))?;
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("nginx exited at once"))?;
        let nginx = Self {
            addr,
            running: Some(child),
            pid,
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                pids.lock().expect("not poisoned").insert("nginx", pid);
                return Ok(nginx);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(io::Error::other(format!(
            "nginx did not listen on {addr} (see {})",
            dir.join("nginx.out").display()
        )))
    }

    /// Stops nginx and its workers (SIGTERM to the master: a fast shutdown).
    pub async fn stop(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.running.take() {
            signal(self.pid, "TERM").await?;
            child.wait().await?;
        }
        Ok(())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Killing only the master would leave its workers serving: stop it properly.
        if self.running.is_some() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .status();
        }
    }
}

/// The nginx configuration: round-robin over the replicas with no stickiness, keep-alive
/// connections to them (closed by nginx after [`NGINX_UPSTREAM_IDLE`] idle, below the replicas'
/// `--client-idle-timeout` of [`REPLICA_CLIENT_IDLE`], so a replica never closes one under a
/// request, as `docs/operations.md` asks of a load balancer), response buffering off (SSE events pass at once),
/// nginx's default retry of a request that could not be sent to a replica (`error timeout`,
/// never for a POST already sent), and the answering replica named in a response header. Only
/// answers that are not 2xx/3xx are logged, with the replica and its status.
pub fn nginx_config(dir: &Path, listen: SocketAddr, replicas: &[SocketAddr]) -> String {
    let dir = dir.display();
    let upstream_idle = NGINX_UPSTREAM_IDLE.as_secs();
    let servers: String = replicas
        .iter()
        .map(|r| format!("        server {r} max_fails=1 fail_timeout=2s;\n"))
        .collect();
    format!(
        "# Written by mrtr-soak.
worker_processes 2;
pid {dir}/nginx.pid;
events {{
    worker_connections 16384;
}}
http {{
    client_body_temp_path {dir}/nginx-temp/body;
    proxy_temp_path {dir}/nginx-temp/proxy;
    fastcgi_temp_path {dir}/nginx-temp/fastcgi;
    uwsgi_temp_path {dir}/nginx-temp/uwsgi;
    scgi_temp_path {dir}/nginx-temp/scgi;
    log_format soak '$msec $status upstream=$upstream_addr upstream_status=$upstream_status '
                    'request_time=$request_time mcp_method=$http_mcp_method';
    map $status $soak_failed {{
        ~^[23] 0;
        default 1;
    }}
    access_log {dir}/nginx-access.log soak if=$soak_failed;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
    upstream mrtr_gateways {{
{servers}        keepalive 256;
        keepalive_timeout {upstream_idle}s;
        keepalive_requests 1000000;
    }}
    server {{
        listen {listen} backlog=8192;
        location /mcp {{
            proxy_pass http://mrtr_gateways;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host $host;
            proxy_buffering off;
            proxy_read_timeout 300s;
            add_header X-Soak-Upstream $upstream_addr always;
        }}
    }}
}}
"
    )
}

/// How long nginx keeps an idle connection to a replica.
pub const NGINX_UPSTREAM_IDLE: Duration = Duration::from_secs(20);

/// The replicas' `--client-idle-timeout`: above [`NGINX_UPSTREAM_IDLE`].
pub const REPLICA_CLIENT_IDLE: Duration = Duration::from_secs(30);

/// The shared keys file and the keys it has held.
#[derive(Debug)]
pub struct KeysFile {
    /// Its path.
    pub path: PathBuf,
    gateway: PathBuf,
    /// The entries now (`kid:key`), the sealing one first.
    entries: Vec<(String, String)>,
    next: u32,
}

impl KeysFile {
    /// A file holding one fresh key, `k1`.
    pub async fn create(gateway: &Path, dir: &Path) -> io::Result<Self> {
        let mut keys = Self {
            path: dir.join("keys"),
            gateway: gateway.to_owned(),
            entries: Vec::new(),
            next: 1,
        };
        let first = keys.generate().await?;
        keys.entries.push(first);
        keys.write()?;
        Ok(keys)
    }

    /// The key ids in the file, sealing one first.
    pub fn kids(&self) -> Vec<String> {
        self.entries.iter().map(|(kid, _)| kid.clone()).collect()
    }

    /// Step 1: adds a new key after the current one. Returns its id.
    pub async fn add(&mut self) -> io::Result<String> {
        let entry = self.generate().await?;
        let kid = entry.0.clone();
        self.entries.push(entry);
        self.write()?;
        Ok(kid)
    }

    /// Step 2: makes the last key the sealing one.
    pub fn activate(&mut self) -> io::Result<()> {
        if let Some(last) = self.entries.pop() {
            self.entries.insert(0, last);
        }
        self.write()
    }

    /// Step 3: keeps only the sealing key.
    pub fn retire(&mut self) -> io::Result<()> {
        self.entries.truncate(1);
        self.write()
    }

    async fn generate(&mut self) -> io::Result<(String, String)> {
        let kid = format!("k{}", self.next);
        self.next += 1;
        let output = Command::new(&self.gateway)
            .args(["--generate-key", &kid])
            .output()
            .await?;
        let entry = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !output.status.success() || !entry.starts_with(&format!("{kid}:")) {
            return Err(io::Error::other("mrtr-gateway --generate-key failed"));
        }
        Ok((kid, entry))
    }

    /// Writes the file atomically (a temporary file renamed over it), as operations.md says.
    fn write(&self) -> io::Result<()> {
        let text: String = self.entries.iter().map(|(_, e)| format!("{e}\n")).collect();
        let temporary = self.path.with_extension("new");
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, &self.path)
    }
}
