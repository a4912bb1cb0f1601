//! The audit trail: one structured event per `tools/call`, `prompts/get`, `resources/read` and
//! task follow-up (`tasks/get`, `tasks/update`, `tasks/cancel`), whatever became of it (answered,
//! asked for input, refused), and one per tool definition that changed since it was pinned.
//! Off unless `[audit]` is configured (`docs/operations.md`, "Audit trail", has every field).
//!
//! Imports `upstream` (its SSE reader, to find a streamed answer's final message), `auth` (the
//! [`Caller`](crate::auth::Caller)), `observe` (metrics, the request's trace slot, the OTLP
//! endpoint) and the ground floor. The composition root puts [`AuditLayer`] in the stack; the
//! front reports its own refusals ([`Audit::refused_at_front`]); the proxy leaves what only it
//! knows in the answer's extensions ([`CallNote`]); pinning reports changed definitions
//! ([`Audit::definition_changed`]).
//!
//! Floors, lowest first: `note.rs` (what the proxy tells the layer), `record.rs` (what an event
//! holds, read and written as a JSON line on the writer's thread), `otlp.rs` (events as OTLP log
//! records), `sink.rs` (the bounded queue and the thread that writes), `layer.rs` (the collection
//! point in the stack).
//!
//! **Never blocks a request.** Events go into a bounded queue (`queue` events, and at most
//! `queue-bytes` of the request and answer bytes they hold); when it is full the event is
//! dropped, counted in `mrtr_gateway_audit_dropped_total`, and the next event written says how
//! many were dropped before it (`dropped`). Everything that costs (reading the request's client
//! and arguments, the answer's outcome, formatting) happens on the writer's thread; the request
//! path only keeps the bytes (reference-counted, not copied).

mod layer;
mod note;
mod otlp;
mod record;
mod sink;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

pub(crate) use self::layer::{AuditLayer, Audited};
pub(crate) use self::note::{CallNote, Refusal};
use self::record::{Changed, Record};
use self::sink::Queue;

/// Where the JSON lines of the audit trail go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditOutput {
    /// One JSON object per line on the gateway's stdout.
    #[default]
    Stdout,
    /// One JSON object per line in `file`, rotated by size.
    File,
    /// No JSON lines (with `otlp = true`: OTLP log records only).
    None,
}

/// The `[audit]` table of the config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct AuditSettings {
    /// Where the JSON lines go: `stdout` (default), `file` or `none`.
    pub output: AuditOutput,
    /// The file of `output = "file"`.
    pub file: Option<PathBuf>,
    /// Rotate the file once it holds this many bytes: it becomes `FILE.1` (and `FILE.1` becomes
    /// `FILE.2`, ...).
    pub max_file_bytes: u64,
    /// Rotated files kept (`FILE.1` to `FILE.N`); older ones are deleted.
    pub max_files: usize,
    /// Also export every event as an OTLP log record to `otlp-endpoint` (`/v1/logs`).
    pub otlp: bool,
    /// Argument names whose values are recorded; every other argument is recorded by name with
    /// the value `"[redacted]"`. Empty (default): no arguments, only their digest.
    pub record_arguments: Vec<String>,
    /// Most events waiting to be written; more are dropped (and counted).
    pub queue: usize,
    /// Most request and answer bytes the waiting events may hold together; more are dropped.
    pub queue_bytes: usize,
    /// Most bytes of an answer read to tell its outcome; a longer answer is recorded as
    /// `unread` (an SSE stream's last bytes are kept instead, where its final message is).
    pub max_answer_bytes: usize,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self {
            output: AuditOutput::Stdout,
            file: None,
            max_file_bytes: 100 * 1024 * 1024,
            max_files: 10,
            otlp: false,
            record_arguments: Vec::new(),
            queue: 4096,
            queue_bytes: 64 * 1024 * 1024,
            max_answer_bytes: 1024 * 1024,
        }
    }
}

/// The audit trail of a running gateway: the queue its events go into. Cheap to share.
#[derive(Debug)]
pub struct Audit {
    queue: Queue,
    settings: AuditSettings,
}

impl Audit {
    /// Checks `settings` and starts the writer's thread (it opens the file itself, so that a
    /// file that blocks, a FIFO nobody reads, blocks only the writer). `otlp_endpoint` is the
    /// gateway's `otlp-endpoint`, needed with `otlp = true`.
    pub fn start(settings: AuditSettings, otlp_endpoint: Option<&str>) -> Result<Arc<Self>, String> {
        if settings.queue == 0 || settings.queue_bytes == 0 || settings.max_file_bytes == 0 {
            return Err("[audit] queue, queue-bytes and max-file-bytes must be positive".to_owned());
        }
        let file = match (settings.output, &settings.file) {
            (AuditOutput::File, None) => {
                return Err("[audit] output = \"file\" needs file = PATH".to_owned());
            }
            (AuditOutput::File, Some(path)) => {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
                if dir.is_some_and(|dir| !dir.is_dir()) {
                    return Err(format!(
                        "[audit] file {}: its directory does not exist",
                        path.display()
                    ));
                }
                Some(path.clone())
            }
            (_, Some(_)) => return Err("[audit] file goes with output = \"file\"".to_owned()),
            (_, None) => None,
        };
        let otlp = match (settings.otlp, otlp_endpoint) {
            (false, _) => None,
            (true, None) => return Err("[audit] otlp = true needs otlp-endpoint".to_owned()),
            (true, Some(endpoint)) => Some(otlp::Logs::new(endpoint)?),
        };
        let outputs = sink::Outputs {
            stdout: settings.output == AuditOutput::Stdout,
            file: file.map(|path| (path, settings.max_file_bytes, settings.max_files)),
            otlp,
        };
        let queue = Queue::start(
            settings.queue,
            settings.queue_bytes,
            outputs,
            settings.record_arguments.clone(),
        )
        .map_err(|error| format!("[audit] cannot start the writer: {error}"))?;
        Ok(Arc::new(Self { queue, settings }))
    }

    /// The settings it runs with.
    pub(crate) fn settings(&self) -> &AuditSettings {
        &self.settings
    }

    /// Queues a call's event (dropped, and counted, when the queue is full).
    fn submit(&self, record: Record) {
        self.queue.submit_record(record);
    }

    /// Queues the event of a request the front refused before the MCP stack (a bearer token or
    /// a principal header that did not pass): `reason` is the refusal's label.
    pub(crate) fn refused_at_front<B>(
        &self,
        request: &http::Request<B>,
        reason: &'static str,
        status: http::StatusCode,
    ) {
        if let Some(mut record) = Record::start(request) {
            record.refused(reason, status);
            self.submit(record);
        }
    }

    /// Queues the event of a definition that differs from its pin (`route/pins.rs`).
    pub(crate) fn definition_changed(&self, changed: Changed) {
        self.queue.submit_changed(changed);
    }

    /// Writes what is queued and flushes the outputs; waits for it at most ten seconds (at
    /// shutdown, on a thread that may block), so that a sink that blocks cannot hold up the
    /// gateway's exit. `false` when the wait ran out (the log says so).
    pub fn flush(&self) -> bool {
        let flushed = self.queue.flush(std::time::Duration::from_secs(10));
        if !flushed {
            tracing::error!("audit trail: the sink did not take the last events within 10 s");
        }
        flushed
    }
}

pub(crate) use self::record::Changed as DefinitionChange;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_before_anything_starts() {
        let file = |output, file: Option<&str>| AuditSettings {
            output,
            file: file.map(PathBuf::from),
            ..AuditSettings::default()
        };
        let error = Audit::start(file(AuditOutput::File, None), None).unwrap_err();
        assert!(error.contains("needs file"), "{error}");
        let error = Audit::start(file(AuditOutput::Stdout, Some("/tmp/x")), None).unwrap_err();
        assert!(error.contains("goes with output"), "{error}");
        let error =
            Audit::start(file(AuditOutput::File, Some("/nonexistent-dir/a.jsonl")), None).unwrap_err();
        assert!(error.contains("directory does not exist"), "{error}");
        let otlp = AuditSettings {
            otlp: true,
            ..AuditSettings::default()
        };
        assert!(Audit::start(otlp, None).unwrap_err().contains("otlp-endpoint"));
    }
}
