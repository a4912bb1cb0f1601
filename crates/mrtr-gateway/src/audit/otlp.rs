//! Audit events as OTLP log records, exported over OTLP/HTTP (protobuf) to the gateway's
//! `otlp-endpoint` (`/v1/logs`), in batches on the SDK's own thread, as the traces are
//! (`observe/trace.rs`). Each record's body is the event's JSON line; its attributes repeat the
//! fields a log pipeline filters on; it carries the request's trace id when there is one.

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};

use crate::observe::trace::{resource, signal_endpoint};

/// The OTLP log exporter of the audit trail.
pub(crate) struct Logs {
    provider: SdkLoggerProvider,
    logger: SdkLogger,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Logs(otlp)")
    }
}

impl Logs {
    /// Records exported in batches to `endpoint`'s `/v1/logs`.
    pub(crate) fn new(endpoint: &str) -> Result<Self, String> {
        let endpoint = signal_endpoint(endpoint, "logs")?;
        let exporter = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| format!("otlp-endpoint (audit logs): {e}"))?;
        let provider = SdkLoggerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Self {
            logger: provider.logger("mrtr-gateway.audit"),
            provider,
        })
    }

    /// One event: `line` (its JSON) as the body, `attributes` beside it, and its trace.
    pub(crate) fn emit(
        &self,
        line: &str,
        attributes: &[(&'static str, Option<&str>)],
        trace_id: Option<&str>,
    ) {
        let mut record = self.logger.create_log_record();
        record.set_event_name("mrtr_gateway.audit");
        record.set_timestamp(std::time::SystemTime::now());
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        record.set_body(AnyValue::from(line.to_owned()));
        for (key, value) in attributes {
            if let Some(value) = value {
                record.add_attribute(*key, (*value).to_owned());
            }
        }
        if let Some(trace_id) = trace_id.and_then(|t| TraceId::from_hex(t).ok()) {
            record.set_trace_context(trace_id, SpanId::INVALID, None);
        }
        self.logger.emit(record);
    }

    /// Exports what is queued.
    pub(crate) fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!(%error, "audit log records could not be exported");
        }
    }
}
