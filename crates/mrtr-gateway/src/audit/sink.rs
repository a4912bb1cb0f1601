//! The bounded queue between the request path and the writer's thread, and the thread: it reads
//! each [`Record`] into its event, writes it as one JSON line to stdout and/or a file rotated by
//! size (rolling-file), exports it as an OTLP log record, and flushes after each batch.
//!
//! A request only ever `try_send`s: a full queue (in events, or in the bytes they hold) drops the
//! event, counts it (`mrtr_gateway_audit_dropped_total`), and the next event written carries the
//! count in `dropped`. An event that could not be written (the file cannot be opened, the disk is
//! full) is counted the same way, with an error in the log.

use std::io::{self, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rolling_file::{BasicRollingFileAppender, RollingConditionBasic};

use super::otlp::Logs;
use super::record::{Changed, Record};
use crate::observe::metrics;

/// Where the writer writes.
#[derive(Debug)]
pub(crate) struct Outputs {
    pub(crate) stdout: bool,
    /// The file, its size limit and the rotated files kept.
    pub(crate) file: Option<(PathBuf, u64, usize)>,
    pub(crate) otlp: Option<Logs>,
}

enum Job {
    Record(Box<Record>, usize),
    Changed(Box<Changed>),
    Flush(mpsc::Sender<()>),
}

/// What the queue and the writer share.
#[derive(Debug, Default)]
struct Counters {
    /// Bytes held by queued records.
    bytes: AtomicUsize,
    /// Events dropped since the last one written.
    dropped: AtomicU64,
}

/// The sending side of the queue.
#[derive(Debug)]
pub(crate) struct Queue {
    sender: Mutex<Option<SyncSender<Job>>>,
    counters: Arc<Counters>,
    max_bytes: usize,
}

impl Queue {
    /// A queue of `capacity` events holding at most `max_bytes`, and its writer's thread.
    pub(crate) fn start(
        capacity: usize,
        max_bytes: usize,
        outputs: Outputs,
        record: Vec<String>,
    ) -> io::Result<Self> {
        let (sender, receiver) = mpsc::sync_channel(capacity);
        let counters = Arc::new(Counters::default());
        let writer = Writer {
            outputs,
            file: None,
            record,
            counters: counters.clone(),
            line: Vec::new(),
            failing: false,
        };
        std::thread::Builder::new()
            .name("mrtr-audit".to_owned())
            .spawn(move || writer.run(receiver))?;
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            counters,
            max_bytes,
        })
    }

    pub(crate) fn submit_record(&self, record: Record) {
        let size = record.bytes();
        let held = self.counters.bytes.fetch_add(size, Ordering::Relaxed) + size;
        if held > self.max_bytes {
            self.counters.bytes.fetch_sub(size, Ordering::Relaxed);
            self.dropped();
            return;
        }
        if !self.send(Job::Record(Box::new(record), size)) {
            self.counters.bytes.fetch_sub(size, Ordering::Relaxed);
        }
    }

    pub(crate) fn submit_changed(&self, changed: Changed) {
        self.send(Job::Changed(Box::new(changed)));
    }

    /// Queues `job` if there is room; counts it dropped otherwise.
    fn send(&self, job: Job) -> bool {
        let sent = match self.sender.lock().ok().as_deref().and_then(Option::as_ref) {
            Some(sender) => match sender.try_send(job) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            self.dropped();
        }
        sent
    }

    fn dropped(&self) {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        metrics::audit_dropped();
    }

    /// Has the writer write what is queued and flush, and waits for it, at most `within` (a
    /// sink that blocks must not hold up the gateway's exit): `false` when it did not finish.
    /// Blocks: call it where blocking is fine.
    pub(crate) fn flush(&self, within: Duration) -> bool {
        let sender = self.sender.lock().ok().and_then(|s| s.clone());
        let Some(sender) = sender else { return true };
        let deadline = Instant::now() + within;
        let (done, finished) = mpsc::channel();
        let mut job = Job::Flush(done);
        // A full queue is waited on in steps: `SyncSender` has no send with a timeout.
        loop {
            match sender.try_send(job) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return true,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    job = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
        finished
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

impl Drop for Queue {
    /// Closes the queue: the writer writes what is in it and ends. It is not waited for (a sink
    /// that blocks would block the drop); [`Queue::flush`] is the bounded wait.
    fn drop(&mut self) {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
    }
}

/// The writer's thread.
struct Writer {
    outputs: Outputs,
    file: Option<BasicRollingFileAppender>,
    record: Vec<String>,
    counters: Arc<Counters>,
    line: Vec<u8>,
    /// An output failed and was reported; reported again only after it worked.
    failing: bool,
}

impl Writer {
    fn run(mut self, jobs: Receiver<Job>) {
        // Opened here, not by the gateway's start: a file that blocks (a FIFO nobody reads)
        // blocks this thread alone, and the queue in front of it fills and drops.
        self.open();
        while let Ok(job) = jobs.recv() {
            self.handle(job);
            while let Ok(job) = jobs.try_recv() {
                self.handle(job);
            }
            self.flush();
        }
        self.flush();
        if let Some(otlp) = &self.outputs.otlp {
            otlp.flush();
        }
    }

    fn open(&mut self) {
        let Some((path, max_bytes, max_files)) = &self.outputs.file else {
            return;
        };
        if self.file.is_some() {
            return;
        }
        let condition = RollingConditionBasic::new().max_size(*max_bytes);
        match BasicRollingFileAppender::new(path, condition, *max_files) {
            Ok(file) => self.file = Some(file),
            Err(error) => self.failed(&format!("cannot open {}: {error}", path.display())),
        }
    }

    fn handle(&mut self, job: Job) {
        let dropped = self.counters.dropped.swap(0, Ordering::Relaxed);
        self.line.clear();
        let (written, trace_id, attributes) = match job {
            Job::Flush(done) => {
                self.counters.dropped.fetch_add(dropped, Ordering::Relaxed);
                self.flush();
                if let Some(otlp) = &self.outputs.otlp {
                    otlp.flush();
                }
                let _ = done.send(());
                return;
            }
            Job::Record(record, size) => {
                self.counters.bytes.fetch_sub(size, Ordering::Relaxed);
                let event = record.event(&self.record, dropped);
                let written = serde_json::to_writer(&mut self.line, &event);
                let attributes = [
                    ("mrtr.audit.event", Some(event.event)),
                    ("mrtr.audit.outcome", Some(event.outcome)),
                    ("mcp.method.name", event.method),
                    ("mrtr.backend", event.backend),
                    ("enduser.id", event.principal),
                ];
                let attributes = attributes.map(|(k, v)| (k, v.map(str::to_owned)));
                (written, event.trace_id.clone(), attributes)
            }
            Job::Changed(mut changed) => {
                changed.dropped = dropped;
                let written = serde_json::to_writer(&mut self.line, &changed);
                let attributes = [
                    ("mrtr.audit.event", Some(changed.event.to_owned())),
                    ("mrtr.audit.outcome", Some(changed.action.to_owned())),
                    ("mcp.method.name", None),
                    ("mrtr.backend", Some(changed.backend.clone())),
                    ("enduser.id", None),
                ];
                (written, None, attributes)
            }
        };
        if written.is_err() {
            self.lost("an event could not be written as JSON");
            return;
        }
        self.line.push(b'\n');
        self.write(trace_id.as_deref(), &attributes);
    }

    fn write(&mut self, trace_id: Option<&str>, attributes: &[(&'static str, Option<String>); 5]) {
        let mut ok = true;
        if self.outputs.stdout {
            ok &= io::stdout().lock().write_all(&self.line).is_ok();
        }
        if self.outputs.file.is_some() {
            self.open();
            ok &= match self.file.as_mut() {
                Some(file) => file.write_all(&self.line).is_ok(),
                None => false,
            };
        }
        if let Some(otlp) = &self.outputs.otlp {
            let line = String::from_utf8_lossy(&self.line[..self.line.len() - 1]);
            let attributes = attributes.each_ref().map(|(k, v)| (*k, v.as_deref()));
            otlp.emit(&line, &attributes, trace_id);
        }
        if ok {
            self.failing = false;
        } else {
            self.lost("an event could not be written");
        }
    }

    fn flush(&mut self) {
        if self.outputs.stdout {
            let _ = io::stdout().lock().flush();
        }
        if let Some(file) = self.file.as_mut()
            && let Err(error) = file.flush()
        {
            self.failed(&format!("cannot write the file: {error}"));
        }
    }

    /// An event lost after it left the queue: counted as dropped.
    fn lost(&mut self, what: &str) {
        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        metrics::audit_dropped();
        self.failed(what);
    }

    fn failed(&mut self, what: &str) {
        if !std::mem::replace(&mut self.failing, true) {
            tracing::error!(problem = what, "audit trail: events are being lost");
        }
    }
}
