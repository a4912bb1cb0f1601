//! The access log: one line per request at `info` level, target `mrtr_gateway::access`,
//! written when the response head is ready.
//!
//! Fields: `http` (the HTTP method), `method` (the MCP method from `Mcp-Method`; without one,
//! from the request head the answer carries: a legacy client's request, a body the MRTR layer
//! refused; else `-`), `target` (`Mcp-Name`, or that head's target: the tool, prompt or
//! resource; `-` without one), `backend` (the
//! route that answered: a backend name, `@gateway` for the gateway's own answers, `-` when the
//! gateway refused before routing), `status`, `duration_ms` (to the response head) and, when
//! traces are exported (`otlp-endpoint`), `trace_id` (the request's span's). Never a
//! body, an envelope, a key or a header that could carry a credential.
//!
//! It is on the hot path, so it costs nothing when the target is filtered out (one cached
//! check, no clock read) and, when on, allocates nothing of its own: the two header values are
//! kept by reference count, and the line is written into a buffer kept per thread. Whether the
//! target is on is decided by `RUST_LOG` as for every other line; the filter is read once, when
//! the process starts.
//!
//! Once the process's logging is set up ([`crate::observe::logging`] calls [`write_lines`]), a
//! line is written here, as tracing-subscriber's text or JSON format would write the event
//! (`2026-07-28T09:00:00.123456Z  INFO mrtr_gateway::access: http="POST" ... duration_ms=0.412`,
//! or the JSON object with `timestamp`, `level`, `fields` and `target`), except that
//! `duration_ms` has three decimals (a microsecond) instead of a float's seventeen digits, and
//! handed to the gatherer of stderr (a write per tenth of a second). No `tracing` event is made
//! for it: dispatching one and formatting its fields through `Visit` cost more than the line
//! (`docs/benchmarks-log.md`). Inside a span (debug logging), on a terminal (colors), or without
//! that setup (a gateway embedded as a library, tests), the line is a `tracing` event as
//! before, so the subscriber writes the span's context and colors and nothing is lost. Turn it
//! off with `RUST_LOG=info,mrtr_gateway::access=off`.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use http::{HeaderValue, Method, Request, Response};
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME};
use tower_mrtr::{McpRequestHead, Route};
use tracing::{Level, Span};

/// The tracing target of access lines.
pub(crate) const TARGET: &str = "mrtr_gateway::access";

/// Where access lines go without a `tracing` event, once [`write_lines`] was called.
static LINES: OnceLock<Lines> = OnceLock::new();

/// A format and a writer of whole lines.
struct Lines {
    json: bool,
    write: WriteLine,
}

/// What takes each finished line.
type WriteLine = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Has access lines written as text (or `json`) lines and handed to `write`, without a
/// `tracing` event (see the [module docs](self)). For the process: only the first call counts.
pub(crate) fn write_lines(json: bool, write: impl Fn(&[u8]) + Send + Sync + 'static) {
    let _ = LINES.set(Lines {
        json,
        write: Box::new(write),
    });
}

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
            method: headers.get(&MCP_METHOD).cloned(),
            target: headers.get(&MCP_NAME).cloned(),
        }))
    }

    /// Writes the line for `response`; `trace_id` is its span's, when traces are exported.
    /// A request without `Mcp-Method` (a legacy client's, one the MRTR layer refused) is named
    /// by the request head its answer carries, if any.
    pub(crate) fn finish<B>(&mut self, response: &Response<B>, trace_id: Option<&str>) {
        let Some(started) = self.0.take() else { return };
        let head = match started.method {
            None => response.extensions().get::<McpRequestHead>(),
            Some(_) => None,
        };
        let line = Line {
            http: started.http.as_str(),
            method: head.map_or_else(|| text(&started.method), McpRequestHead::method),
            target: match head {
                Some(head) => head.target().unwrap_or("-"),
                None => text(&started.target),
            },
            backend: response.extensions().get::<Route>().map_or("-", Route::as_str),
            status: response.status().as_u16(),
            duration_ms: started.at.elapsed().as_secs_f64() * 1000.0,
            trace_id,
        };
        match LINES.get() {
            // In a span the subscriber writes the span's context first: it writes the line.
            Some(lines) if Span::current().is_none() => line.write_to(lines),
            _ => line.event(),
        }
    }
}

/// The fields of one access line.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    http: &'a str,
    method: &'a str,
    target: &'a str,
    backend: &'a str,
    status: u16,
    duration_ms: f64,
    trace_id: Option<&'a str>,
}

impl Line<'_> {
    /// The line as a `tracing` event, for the subscriber to write.
    fn event(&self) {
        tracing::info!(
            target: TARGET,
            http = self.http,
            method = self.method,
            target = self.target,
            backend = self.backend,
            status = self.status,
            duration_ms = self.duration_ms,
            trace_id = self.trace_id,
        );
    }

    /// Writes the line with `lines`, formatted in a buffer kept per thread.
    fn write_to(&self, lines: &Lines) {
        thread_local! {
            static BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
        }
        BUFFER.with_borrow_mut(|buffer| {
            buffer.clear();
            if self.format(buffer, lines.json).is_ok() {
                (lines.write)(buffer.as_bytes());
            }
        });
    }

    /// Writes the line (with its newline) as tracing-subscriber's text or JSON format would.
    fn format(&self, out: &mut String, json: bool) -> fmt::Result {
        if json {
            out.push_str("{\"timestamp\":\"");
            write_timestamp(out)?;
            out.push_str("\",\"level\":\"INFO\",\"fields\":{");
        } else {
            write_timestamp(out)?;
            // The level right-aligned in five columns, as tracing-subscriber writes it.
            out.push_str("  INFO ");
            out.push_str(TARGET);
            out.push(':');
        }
        let mut fields = Fields {
            out,
            json,
            first: true,
        };
        fields.string("http", self.http)?;
        fields.string("method", self.method)?;
        fields.string("target", self.target)?;
        fields.string("backend", self.backend)?;
        fields.name("status");
        fields.out.push_str(itoa::Buffer::new().format(self.status));
        fields.name("duration_ms");
        fields.thousandths(self.duration_ms)?;
        if let Some(trace_id) = self.trace_id {
            fields.string("trace_id", trace_id)?;
        }
        if json {
            out.push_str("},\"target\":\"");
            out.push_str(TARGET);
            out.push_str("\"}");
        }
        out.push('\n');
        Ok(())
    }
}

/// Writes a line's fields: ` name=value` (strings quoted as `Debug` quotes them) or
/// `"name":value` (JSON).
struct Fields<'a> {
    out: &'a mut String,
    json: bool,
    first: bool,
}

impl Fields<'_> {
    fn name(&mut self, name: &str) {
        let first = std::mem::replace(&mut self.first, false);
        if self.json {
            if !first {
                self.out.push(',');
            }
            self.out.push('"');
            self.out.push_str(name);
            self.out.push_str("\":");
        } else {
            self.out.push(' ');
            self.out.push_str(name);
            self.out.push('=');
        }
    }

    fn string(&mut self, name: &str, value: &str) -> fmt::Result {
        self.name(name);
        // Header values here are visible ASCII; quotes, backslashes and anything else take the
        // general path, which escapes as the generic formatters do.
        let plain = value
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        match (plain, self.json) {
            (true, _) => {
                self.out.push('"');
                self.out.push_str(value);
                self.out.push('"');
                Ok(())
            }
            (false, true) => match serde_json::to_string(value) {
                Ok(quoted) => {
                    self.out.push_str(&quoted);
                    Ok(())
                }
                Err(_) => Err(fmt::Error),
            },
            (false, false) => write!(self.out, "{value:?}"),
        }
    }

    /// `value` with three decimals (the duration's microseconds), in integers: no float
    /// formatting.
    fn thousandths(&mut self, value: f64) -> fmt::Result {
        if value.is_finite() && (0.0..1e12).contains(&value) {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let thousandths = (value * 1000.0).round() as u64;
            self.out.push_str(itoa::Buffer::new().format(thousandths / 1000));
            let fraction = thousandths % 1000;
            self.out.push_str(&".00"[..4 - digits(fraction)]);
            self.out.push_str(itoa::Buffer::new().format(fraction));
            Ok(())
        } else if self.json && !value.is_finite() {
            self.out.push_str("null");
            Ok(())
        } else {
            write!(self.out, "{value}")
        }
    }
}

/// Writes the current time as RFC 3339 in UTC with microseconds, as tracing-subscriber's
/// default timer does; the part up to the second is formatted once per second and thread.
fn write_timestamp(out: &mut String) -> fmt::Result {
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
            write!(
                text,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                time.year(),
                u8::from(time.month()),
                time.day(),
                time.hour(),
                time.minute(),
                time.second()
            )?;
            *cached = seconds;
        }
        out.push_str(text);
        let micros = since_epoch.subsec_micros();
        out.push_str(&".00000"[..7 - digits(u64::from(micros))]);
        out.push_str(itoa::Buffer::new().format(micros));
        out.push('Z');
        Ok(())
    })
}

/// How many decimal digits `n` has (1 for 0).
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Cuts the timestamp (27 characters, the same shape in text and JSON) out of `text`.
    fn without_timestamp(text: &str) -> String {
        let at = text.find("20").unwrap();
        let stamp = &text[at..at + 27];
        assert!(stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T', "{text}");
        format!("{}{}", &text[..at], &text[at + 27..])
    }

    /// What tracing-subscriber's text (or JSON) format writes for `line`'s event.
    fn by_tracing_subscriber(line: &Line<'_>, json: bool) -> String {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let writer = move || Sink(sink.clone());
        let event = || line.event();
        if json {
            let subscriber = tracing_subscriber::fmt().json().with_writer(writer).finish();
            tracing::subscriber::with_default(subscriber, event);
        } else {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(writer)
                .finish();
            tracing::subscriber::with_default(subscriber, event);
        }
        without_timestamp(&String::from_utf8(out.lock().unwrap().clone()).unwrap())
    }

    /// What [`Line::write_to`] hands its writer for `line`.
    fn written(line: &Line<'_>, json: bool) -> String {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let lines = Lines {
            json,
            write: Box::new(move |bytes| sink.lock().unwrap().extend_from_slice(bytes)),
        };
        line.write_to(&lines);
        without_timestamp(&String::from_utf8(out.lock().unwrap().clone()).unwrap())
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

    const LINE: Line<'static> = Line {
        http: "POST",
        method: "tools/call",
        target: r#"a"b\c"#,
        backend: "alpha",
        status: 200,
        duration_ms: 0.125,
        trace_id: None,
    };

    #[test]
    fn lines_read_as_tracing_subscriber_writes_their_event() {
        let traced = Line {
            target: "echo",
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736"),
            duration_ms: 12.125,
            ..LINE
        };
        let odd = Line {
            http: "DELETE",
            method: "-",
            target: "caf\u{e9}\tnew\nline",
            backend: "@gateway",
            status: 503,
            ..LINE
        };
        for line in [LINE, traced, odd] {
            for json in [false, true] {
                // A duration with three decimals reads the same in both.
                assert_eq!(
                    written(&line, json),
                    by_tracing_subscriber(&line, json),
                    "{line:?}"
                );
            }
        }
    }

    #[test]
    fn durations_are_rounded_to_the_microsecond() {
        let line = Line {
            duration_ms: 0.013_845_999_999_999_999,
            ..LINE
        };
        assert_eq!(
            written(&line, false),
            "  INFO mrtr_gateway::access: http=\"POST\" method=\"tools/call\" target=\"a\\\"b\\\\c\" \
             backend=\"alpha\" status=200 duration_ms=0.014\n"
        );
        let line = Line {
            duration_ms: 1234.5678,
            ..LINE
        };
        let json = written(&line, true);
        let json: serde_json::Value = serde_json::from_str(json.replace("\"\"", "\"t\"").trim()).unwrap();
        assert_eq!(json["fields"]["duration_ms"], 1234.568);
        assert_eq!(json["fields"]["target"], r#"a"b\c"#);
        assert_eq!(json["target"], TARGET);
    }

    #[test]
    fn the_target_is_the_documented_one() {
        assert_eq!(TARGET, "mrtr_gateway::access");
    }
}
