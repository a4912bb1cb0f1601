//! The processes a run starts (pinned to a core with `taskset`, optionally under callgrind) and
//! what Linux tells about them: CPU time, peak RSS.
//!
//! CPU time is the sum of `/proc/PID/task/*/schedstat` (nanoseconds on a CPU, per thread), read
//! at the edges of a measured window; user and system time come from `/proc/PID/stat` (clock
//! ticks) for the kernel's share, and context switches (voluntary and not, per thread) from
//! `/proc/PID/task/*/status`: each is a thread going to sleep or being woken, which is where
//! cross-thread hand-offs show. Peak RSS is `VmHWM`.
//!
//! A peer gateway ([`Launch`]) runs in a process group of its own, as its launcher may fork:
//! its figures are the sums over the group's processes, and the group is killed as a whole.

use std::io::{self, BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child process, killed on drop.
#[derive(Debug)]
pub struct Proc {
    /// Name in messages.
    pub name: String,
    /// What it printed after "listening on " (a peer: its port and MCP path).
    pub url: String,
    child: Child,
    /// Leads a process group of its own: measured and killed as a group.
    group: bool,
}

/// How to start one process.
#[derive(Debug)]
pub struct Spawn<'a> {
    /// Name in messages and log file names.
    pub name: &'a str,
    /// The executable.
    pub program: &'a Path,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(&'a str, String)>,
    /// `taskset -c` list (`"0"`), or `None` not to pin.
    pub cpus: Option<&'a str>,
    /// Run under `valgrind --tool=callgrind`, writing its dumps to this file name pattern.
    pub callgrind_out: Option<PathBuf>,
    /// Where its stderr goes.
    pub log_dir: &'a Path,
}

impl Spawn<'_> {
    /// Starts the process and waits (at most `timeout`) for the line `... listening on URL`.
    pub fn start(self, timeout: Duration) -> io::Result<Proc> {
        let mut argv: Vec<String> = Vec::new();
        if let Some(cpus) = self.cpus {
            argv.extend(["taskset".to_owned(), "-c".to_owned(), cpus.to_owned()]);
        }
        if let Some(out) = &self.callgrind_out {
            argv.extend([
                "valgrind".to_owned(),
                "--tool=callgrind".to_owned(),
                format!("--callgrind-out-file={}", out.display()),
            ]);
        }
        argv.push(self.program.display().to_string());
        argv.extend(self.args);
        let log = std::fs::File::create(self.log_dir.join(format!("{}.log", self.name)))?;
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", argv[0])))?;
        let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The gateway also announces its admin listener; the driver wants the MCP one.
                if line.contains("admin listening on") {
                    continue;
                }
                if let Some((_, url)) = line.split_once("listening on ") {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let mut proc = Proc {
            name: self.name.to_owned(),
            url: String::new(),
            child,
            group: false,
        };
        proc.url = rx.recv_timeout(timeout).map_err(|_| {
            io::Error::other(format!(
                "{} did not print its address within {timeout:?} (see {}/{}.log)",
                self.name,
                self.log_dir.display(),
                self.name
            ))
        })?;
        Ok(proc)
    }
}

/// How to start a peer gateway: a shell command line, ready when its port accepts connections.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Name in messages and log file names.
    pub name: &'a str,
    /// The command line, run as `sh -c 'exec COMMAND'`.
    pub command: &'a str,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    /// Path of its MCP endpoint.
    pub path: &'a str,
    /// `taskset -c` list, or `None` not to pin.
    pub cpus: Option<&'a str>,
    /// Where its stdout and stderr go.
    pub log_dir: &'a Path,
}

impl Launch<'_> {
    /// Starts the command in a new process group and waits (at most `timeout`) until its port
    /// accepts a connection. On failure the group is killed. The wait yields to the runtime, so
    /// that a signal handled beside it can end the run meanwhile.
    pub async fn start(self, timeout: Duration) -> io::Result<Proc> {
        let mut argv: Vec<String> = Vec::new();
        if let Some(cpus) = self.cpus {
            argv.extend(["taskset".to_owned(), "-c".to_owned(), cpus.to_owned()]);
        }
        argv.extend(["sh".to_owned(), "-c".to_owned(), format!("exec {}", self.command)]);
        let log_path = self.log_dir.join(format!("{}.log", self.name));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own group: killed as one at the end, whatever the launcher forks.
            .process_group(0)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", argv[0])))?;
        // Built before waiting, so that a failed start still kills the group (on drop).
        let mut proc = Proc {
            name: self.name.to_owned(),
            url: format!("http://127.0.0.1:{}{}", self.port, self.path),
            child,
            group: true,
        };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + timeout;
        let failed = |why: String| {
            io::Error::other(format!(
                "{} ({}) {why} (see {})",
                self.name,
                self.command,
                log_path.display()
            ))
        };
        loop {
            if let Some(status) = proc.child.try_wait()? {
                return Err(failed(format!("exited with {status} before listening on {addr}")));
            }
            let attempt = tokio::net::TcpStream::connect(addr);
            if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(200), attempt).await
                && !connected_to_itself(&stream)
            {
                return Ok(proc);
            }
            if Instant::now() >= deadline {
                return Err(failed(format!("did not listen on {addr} within {timeout:?}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether `stream` is connected to itself: when nothing listens on a loopback port, a connect
/// whose source port the system happens to pick equal to it succeeds by TCP's simultaneous open,
/// which must not pass for the program listening.
pub fn connected_to_itself(stream: &tokio::net::TcpStream) -> bool {
    matches!((stream.local_addr(), stream.peer_addr()), (Ok(local), Ok(peer)) if local == peer)
}

/// A free port on 127.0.0.1 for a peer (free when asked; the peer binds it moments later).
pub fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

impl Proc {
    /// Its process id (that of the program itself: `taskset` and `valgrind` exec it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The processes it is measured as: itself, or those of its process group alive now.
    pub fn members(&self) -> Vec<u32> {
        if self.group {
            group_members(self.pid())
        } else {
            vec![self.pid()]
        }
    }

    /// CPU time of all its threads so far (a group's: of all its processes alive now).
    pub fn cpu(&self) -> io::Result<Cpu> {
        if !self.group {
            return cpu(self.pid());
        }
        let members = self.members();
        if members.is_empty() {
            return Err(io::Error::other(format!("{}: no process left", self.name)));
        }
        Ok(members
            .into_iter()
            .filter_map(|pid| cpu(pid).ok())
            .fold(Cpu::default(), Cpu::plus))
    }

    /// Peak resident set size so far, in KiB (a group's: the sum of its processes' peaks).
    pub fn peak_rss_kib(&self) -> io::Result<u64> {
        if !self.group {
            return status_kib(self.pid(), "VmHWM:");
        }
        let peaks: Vec<u64> = self
            .members()
            .into_iter()
            .filter_map(|pid| status_kib(pid, "VmHWM:").ok())
            .collect();
        if peaks.is_empty() {
            return Err(io::Error::other(format!("{}: no process left", self.name)));
        }
        Ok(peaks.into_iter().sum())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.group {
            // The whole group, so that what a launcher started without `exec` dies too.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.pid())])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes (not zombies) of process group `pgid`, from `/proc/*/stat`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    live_processes(|_, pgrp| pgrp == pgid)
}

/// The child processes (not zombies) of `pid` (a gateway's stdio servers), from `/proc/*/stat`:
/// this kernel may lack `/proc/PID/task/TID/children`.
pub fn children(pid: u32) -> Vec<u32> {
    live_processes(|ppid, _| ppid == pid)
}

/// The processes (not zombies) whose parent and process group `select` takes.
fn live_processes(select: impl Fn(u32, u32) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the parenthesised command name: state, ppid, pgrp.
            let mut fields = stat
                .rsplit_once(')')
                .map_or("", |(_, rest)| rest)
                .split_whitespace();
            let state = fields.next();
            let mut number = || fields.next().and_then(|f| f.parse::<u32>().ok());
            let (ppid, pgrp) = (number(), number());
            state != Some("Z") && ppid.zip(pgrp).is_some_and(|(ppid, pgrp)| select(ppid, pgrp))
        })
        .collect()
}

/// CPU time consumed by a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    /// On-CPU time of its live threads, nanoseconds (`schedstat`).
    pub on_cpu_ns: u64,
    /// Kernel-mode time, clock ticks (`stat`).
    pub system_ticks: u64,
    /// User-mode time, clock ticks (`stat`).
    pub user_ticks: u64,
    /// Context switches of its live threads, voluntary and involuntary.
    pub context_switches: u64,
    /// Read and write system calls (`syscr` and `syscw` of `/proc/PID/io`): a pipe or socket
    /// read or write each, which the on-CPU time of one request hides in noise.
    pub io_calls: u64,
}

impl Cpu {
    /// `self - earlier`, saturating.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            on_cpu_ns: self.on_cpu_ns.saturating_sub(earlier.on_cpu_ns),
            system_ticks: self.system_ticks.saturating_sub(earlier.system_ticks),
            user_ticks: self.user_ticks.saturating_sub(earlier.user_ticks),
            context_switches: self.context_switches.saturating_sub(earlier.context_switches),
            io_calls: self.io_calls.saturating_sub(earlier.io_calls),
        }
    }

    /// The sum of two processes' figures.
    pub fn plus(self, other: Cpu) -> Cpu {
        Cpu {
            on_cpu_ns: self.on_cpu_ns + other.on_cpu_ns,
            system_ticks: self.system_ticks + other.system_ticks,
            user_ticks: self.user_ticks + other.user_ticks,
            context_switches: self.context_switches + other.context_switches,
            io_calls: self.io_calls + other.io_calls,
        }
    }

    /// The kernel's share of the ticks (NaN without ticks).
    pub fn system_share(self) -> f64 {
        self.system_ticks as f64 / (self.system_ticks + self.user_ticks) as f64
    }
}

/// CPU time of all of process `pid`'s threads so far.
pub fn cpu(pid: u32) -> io::Result<Cpu> {
    let mut on_cpu_ns = 0;
    let mut context_switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        // A thread may exit between listing and reading.
        if let Ok(text) = std::fs::read_to_string(task.join("schedstat")) {
            on_cpu_ns += text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        if let Ok(text) = std::fs::read_to_string(task.join("status")) {
            context_switches += text
                .lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:")
                })
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // Not every kernel lets every process read it: counted as none then.
    let io_calls = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("syscr:") || l.starts_with("syscw:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Ok(Cpu {
        on_cpu_ns,
        user_ticks: field(14),
        system_ticks: field(15),
        context_switches,
        io_calls,
    })
}

/// A `kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no {key} in /proc/{pid}/status")))
}

/// Runs `callgrind_control ARGS PID` (zero the counters, dump them).
pub fn callgrind_control(pid: u32, arg: &str) -> io::Result<()> {
    let status = Command::new("callgrind_control")
        .args([arg, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("callgrind_control {arg} {pid} failed")))
    }
}

/// The instruction count (`totals:` line) of a callgrind dump file.
pub fn callgrind_total(dump: &Path) -> io::Result<u64> {
    let text = std::fs::read_to_string(dump)?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no totals in {}", dump.display())))
}

/// Whether `program` can be run (found on `PATH`).
pub fn available(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}
