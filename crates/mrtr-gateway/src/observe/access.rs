//! The access log: one event per request at `info` level, target `mrtr_gateway::access`,
//! written when the response head is ready.
//!
//! Fields: `http` (the HTTP method), `method` (the MCP method from `Mcp-Method`, `-` without
//! one), `target` (`Mcp-Name`: the tool, prompt or resource; `-` without one), `backend` (the
//! route that answered: a backend name, `@gateway` for the gateway's own answers, `-` when the
//! gateway refused before routing), `status`, `duration_ms` (to the response head) and, when
//! traces are exported (`otlp-endpoint`), `trace_id` (the request's span's). Never a
//! body, an envelope, a key or a header that could carry a credential.
//!
//! It is on the hot path, so it costs nothing when the target is filtered out (one cached
//! check, no clock read) and, when on, allocates nothing of its own: the two header values are
//! kept by reference count. Its lines are written by [`AccessLineFormat`], which writes what
//! tracing-subscriber's formatters would (text or JSON) at a fraction of their cost
//! (`docs/benchmarks.md` has the counts), and reach stderr gathered, a write per tenth of a
//! second instead of one per request ([`crate::observe::logging`]). Turn it off with `RUST_LOG=info,mrtr_gateway::access=off`.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{Instant, SystemTime};

use http::{HeaderValue, Method, Request, Response};
use tower_mrtr::Route;
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The tracing target of access log events.
pub(crate) const TARGET: &str = "mrtr_gateway::access";

/// What the access log line of one request needs from its request; `None` when the log is off.
#[derive(Debug)]
pub(crate) struct Entry(Option<Started>);

#[derive(Debug)]
struct Started {
    at: Instant,
    http: Method,
    method: Option<HeaderValue>,
    target: Option<HeaderValue>,
}

/// A header value as text for the log, `-` when absent or not visible ASCII.
fn text(value: &Option<HeaderValue>) -> &str {
    value.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("-")
}

impl Entry {
    /// Notes what the line will say about `request`.
    pub(crate) fn start<B>(request: &Request<B>) -> Self {
        if !tracing::enabled!(target: TARGET, Level::INFO) {
            return Self(None);
        }
        let headers = request.headers();
        Self(Some(Started {
            at: Instant::now(),
            http: request.method().clone(),
            method: headers.get(MCP_METHOD).cloned(),
            target: headers.get(MCP_NAME).cloned(),
        }))
    }

    /// Writes the line for `response`; `trace_id` is its span's, when traces are exported.
    pub(crate) fn finish<B>(&mut self, response: &Response<B>, trace_id: Option<&str>) {
        let Some(started) = self.0.take() else { return };
        let backend = response.extensions().get::<Route>().map_or("-", Route::as_str);
        tracing::info!(
            target: TARGET,
            http = started.http.as_str(),
            method = text(&started.method),
            target = text(&started.target),
            backend,
            status = response.status().as_u16(),
            duration_ms = started.at.elapsed().as_secs_f64() * 1000.0,
            trace_id,
        );
    }
}

/// An event formatter that writes access lines itself and hands every other event to `inner`
/// (tracing-subscriber's text or JSON format).
///
/// An access line comes out as `inner` would write it (`2026-07-28T09:00:00.123456Z  INFO
/// mrtr_gateway::access: http="POST" ... duration_ms=0.412`, or the JSON object with
/// `timestamp`, `level`, `fields` and `target`), except that `duration_ms` has three decimals
/// (a microsecond) instead of a float's seventeen digits. The generic formatters write every
/// field through `Debug` and format the date anew for each line, the largest single cost of a
/// plain call through the gateway when they wrote access lines (`docs/benchmarks.md`); this one
/// writes the values as they are and the date once a second. An event inside a span, and every
/// line on a terminal (colors), goes to `inner`, so nothing is lost when debugging.
#[derive(Debug, Clone)]
pub(crate) struct AccessLineFormat<F> {
    inner: F,
    json: bool,
}

impl<F> AccessLineFormat<F> {
    /// Access lines as tracing-subscriber's text format writes them; others by `inner`.
    pub(crate) fn text(inner: F) -> Self {
        Self { inner, json: false }
    }

    /// Access lines as tracing-subscriber's JSON format writes them; others by `inner`.
    pub(crate) fn json(inner: F) -> Self {
        Self { inner, json: true }
    }
}

impl<S, N, F> FormatEvent<S, N> for AccessLineFormat<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        if metadata.target() != TARGET || writer.has_ansi_escapes() || ctx.lookup_current().is_some() {
            return self.inner.format_event(ctx, writer, event);
        }
        let level = metadata.level().as_str();
        if self.json {
            writer.write_str("{\"timestamp\":\"")?;
            write_timestamp(&mut writer)?;
            writer.write_str("\",\"level\":\"")?;
            writer.write_str(level)?;
            writer.write_str("\",\"fields\":{")?;
        } else {
            write_timestamp(&mut writer)?;
            // The level right-aligned in five columns, as tracing-subscriber writes it.
            writer.write_str(&"      "[..6 - level.len().min(5)])?;
            writer.write_str(level)?;
            writer.write_char(' ')?;
            writer.write_str(TARGET)?;
            writer.write_char(':')?;
        }
        let mut fields = FieldWriter {
            writer: &mut writer,
            json: self.json,
            first: true,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        if self.json {
            writer.write_str("},\"target\":\"")?;
            writer.write_str(TARGET)?;
            writer.write_str("\"}")?;
        }
        writer.write_char('\n')
    }
}

/// Writes an event's fields: ` name=value` (strings quoted as `Debug` quotes them) or
/// `"name":value` (JSON).
struct FieldWriter<'a, 'w> {
    writer: &'a mut Writer<'w>,
    json: bool,
    first: bool,
    result: fmt::Result,
}

impl FieldWriter<'_, '_> {
    fn name(&mut self, field: &Field) -> fmt::Result {
        let first = std::mem::replace(&mut self.first, false);
        if self.json {
            if !first {
                self.writer.write_char(',')?;
            }
            self.writer.write_char('"')?;
            self.writer.write_str(field.name())?;
            self.writer.write_str("\":")
        } else {
            self.writer.write_char(' ')?;
            self.writer.write_str(field.name())?;
            self.writer.write_char('=')
        }
    }

    fn string(&mut self, field: &Field, value: &str) -> fmt::Result {
        self.name(field)?;
        // Header values here are visible ASCII; quotes, backslashes and anything else take the
        // general path, which escapes as the generic formatters do.
        let plain = value
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        match (plain, self.json) {
            (true, _) => {
                self.writer.write_char('"')?;
                self.writer.write_str(value)?;
                self.writer.write_char('"')
            }
            (false, true) => match serde_json::to_string(value) {
                Ok(quoted) => self.writer.write_str(&quoted),
                Err(_) => Err(fmt::Error),
            },
            (false, false) => write!(self.writer, "{value:?}"),
        }
    }

    fn record(&mut self, write: impl FnOnce(&mut Self) -> fmt::Result) {
        if self.result.is_ok() {
            self.result = write(self);
        }
    }
}

impl Visit for FieldWriter<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(|w| w.string(field, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(|w| {
            w.name(field)?;
            w.writer.write_str(itoa::Buffer::new().format(value))
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(|w| {
            w.name(field)?;
            w.writer.write_str(itoa::Buffer::new().format(value))
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record(|w| {
            w.name(field)?;
            write!(w.writer, "{value}")
        });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.record(|w| {
            w.name(field)?;
            if value.is_finite() && (0.0..1e12).contains(&value) {
                // Thousandths (the duration's microseconds), in integers: no float formatting.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let thousandths = (value * 1000.0).round() as u64;
                w.writer
                    .write_str(itoa::Buffer::new().format(thousandths / 1000))?;
                let fraction = thousandths % 1000;
                w.writer.write_str(&".00"[..4 - digits(fraction)])?;
                w.writer.write_str(itoa::Buffer::new().format(fraction))
            } else if w.json && !value.is_finite() {
                w.writer.write_str("null")
            } else {
                write!(w.writer, "{value}")
            }
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(|w| {
            if w.json {
                let text = format!("{value:?}");
                w.string(field, &text)
            } else {
                w.name(field)?;
                write!(w.writer, "{value:?}")
            }
        });
    }
}

/// Writes the current time as RFC 3339 in UTC with microseconds, as tracing-subscriber's
/// default timer does; the part up to the second is formatted once per second and thread.
fn write_timestamp(writer: &mut Writer<'_>) -> fmt::Result {
    thread_local! {
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since_epoch.as_secs();
    SECOND.with_borrow_mut(|(cached, text)| {
        if *cached != seconds {
            text.clear();
            let time = i64::try_from(seconds)
                .ok()
                .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let _ = write!(
                text,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                time.year(),
                u8::from(time.month()),
                time.day(),
                time.hour(),
                time.minute(),
                time.second()
            );
            *cached = seconds;
        }
        writer.write_str(text)?;
        let micros = since_epoch.subsec_micros();
        writer.write_str(&".00000"[..7 - digits(u64::from(micros))])?;
        writer.write_str(itoa::Buffer::new().format(micros))?;
        writer.write_char('Z')
    })
}

/// How many decimal digits `n` has (1 for 0).
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::format::Format;

    use super::*;

    /// What a subscriber with `format` writes for one access event, timestamp cut off.
    fn line<F>(format: F, json: bool, duration_ms: f64) -> String
    where
        F: FormatEvent<tracing_subscriber::Registry, tracing_subscriber::fmt::format::DefaultFields>
            + FormatEvent<tracing_subscriber::Registry, tracing_subscriber::fmt::format::JsonFields>
            + Send
            + Sync
            + 'static,
    {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let writer = move || Sink(sink.clone());
        let event = || {
            tracing::info!(
                target: TARGET,
                http = "POST",
                method = "tools/call",
                target = r#"a"b\c"#,
                backend = "alpha",
                status = 200u16,
                duration_ms,
            );
        };
        if json {
            let subscriber = tracing_subscriber::fmt()
                .json()
                .event_format(format)
                .with_writer(writer)
                .finish();
            tracing::subscriber::with_default(subscriber, event);
        } else {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .event_format(format)
                .with_writer(writer)
                .finish();
            tracing::subscriber::with_default(subscriber, event);
        }
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        // `2026-11-30T10:18:35.171593Z`: 27 characters, the same shape in both.
        let at = text.find("20").unwrap();
        let stamp = &text[at..at + 27];
        assert!(stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T', "{text}");
        format!("{}{}", &text[..at], &text[at + 27..])
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn access_lines_read_as_tracing_subscriber_writes_them() {
        // A duration with three decimals reads the same in both.
        assert_eq!(
            line(AccessLineFormat::text(Format::default()), false, 0.125),
            line(Format::default(), false, 0.125)
        );
        assert_eq!(
            line(AccessLineFormat::json(Format::default().json()), true, 0.125),
            line(Format::default().json(), true, 0.125)
        );
        // Others are rounded to the microsecond.
        assert_eq!(
            line(
                AccessLineFormat::text(Format::default()),
                false,
                0.013_845_999_999_999_999
            ),
            "  INFO mrtr_gateway::access: http=\"POST\" method=\"tools/call\" target=\"a\\\"b\\\\c\" \
             backend=\"alpha\" status=200 duration_ms=0.014\n"
        );
        let json = line(AccessLineFormat::json(Format::default().json()), true, 1234.5678);
        let json: serde_json::Value = serde_json::from_str(json.replace("\"\"", "\"t\"").trim()).unwrap();
        assert_eq!(json["fields"]["duration_ms"], 1234.568);
        assert_eq!(json["fields"]["target"], r#"a"b\c"#);
    }

    #[test]
    fn the_target_is_the_documented_one() {
        assert_eq!(TARGET, "mrtr_gateway::access");
    }
}
