//! A real `redis-server` for the tests of the shared store (`[shared-store]`): started on a free
//! loopback port with nothing saved to disk, stopped and started again on the same port (a store
//! outage and its end), paused (a slow store), killed when dropped.
//!
//! The binary is `redis-server` from the `PATH` (Debian's package: `.ci/run` installs it), or
//! the one `MRTR_REDIS_SERVER` names. A test that needs it and cannot find it fails, naming
//! the package: a missing store is not a reason for a test to pass.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::wait::TIMEOUT;

/// A running (or stopped, between [`stop`](Self::stop) and [`start`](Self::start))
/// `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    child: Option<Child>,
    /// `requirepass`, when the server asks for one.
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server on a port the system picks, and waits (within [`TIMEOUT`]) until it
    /// answers `PING`.
    pub fn start_new() -> Self {
        Self::start_with(None)
    }

    /// [`start_new`](Self::start_new), the server asking for `password` (`--requirepass`).
    pub fn start_with_password(password: &str) -> Self {
        Self::start_with(Some(password.to_owned()))
    }

    fn start_with(password: Option<String>) -> Self {
        let binary = std::env::var_os("MRTR_REDIS_SERVER")
            .map(PathBuf::from)
            .or_else(|| find_in_path("redis-server"))
            .expect(
                "redis-server is needed by the shared-store tests: apt-get install redis-server \
                 (or set MRTR_REDIS_SERVER to its path)",
            );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = Self {
            binary,
            port,
            child: None,
            password,
        };
        server.start();
        server
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server again on its port (after [`stop`](Self::stop)), with an empty data
    /// set, and waits until it answers.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "redis-server already runs");
        let mut command = Command::new(&self.binary);
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "yes"]);
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + TIMEOUT;
        while !self.answers() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (`SIGKILL`: an outage, not a shutdown) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Holds every client's commands for `pause` (`CLIENT PAUSE … ALL`): a store that answers,
    /// late. The commands sent meanwhile run when it ends, in order. Returns once the server
    /// has taken the pause.
    pub fn pause(&self, pause: Duration) {
        use std::io::{Read, Write};
        let mut stream =
            TcpStream::connect_timeout(&self.address(), TIMEOUT).expect("connect to redis-server");
        let _ = stream.set_read_timeout(Some(TIMEOUT));
        let auth = match &self.password {
            Some(password) => format!("AUTH {password}\r\n"),
            None => String::new(),
        };
        let ask = format!("{auth}CLIENT PAUSE {} ALL\r\n", pause.as_millis());
        let expected: &[u8] = if self.password.is_some() {
            b"+OK\r\n+OK\r\n"
        } else {
            b"+OK\r\n"
        };
        let mut answer = vec![0u8; expected.len()];
        stream.write_all(ask.as_bytes()).expect("send CLIENT PAUSE");
        stream.read_exact(&mut answer).expect("CLIENT PAUSE answered");
        assert_eq!(
            answer,
            expected,
            "CLIENT PAUSE: {}",
            String::from_utf8_lossy(&answer)
        );
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Whether a `PING` on a fresh connection (after `AUTH`, with a password) gets `+PONG`
    /// within a second.
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = TcpStream::connect_timeout(&self.address(), Duration::from_secs(1)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let (ask, expected): (String, &[u8]) = match &self.password {
            Some(password) => (format!("AUTH {password}\r\nPING\r\n"), b"+OK\r\n+PONG\r\n"),
            None => ("PING\r\n".to_owned(), b"+PONG\r\n"),
        };
        let mut answer = vec![0u8; expected.len()];
        stream.write_all(ask.as_bytes()).is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && answer == expected
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}
