//! The access log: one event per request at `info` level, target `mrtr_gateway::access`,
//! written when the response head is ready.
//!
//! Fields: `http` (the HTTP method), `method` (the MCP method from `Mcp-Method`, `-` without
//! one), `target` (`Mcp-Name`: the tool, prompt or resource; `-` without one), `backend` (the
//! route that answered: a backend name, `@gateway` for the gateway's own answers, `-` when the
//! gateway refused before routing), `status` and `duration_ms` (to the response head). Never a
//! body, an envelope, a key or a header that could carry a credential.
//!
//! It is on the hot path, so it costs nothing when the target is filtered out (one cached
//! check, no clock read) and, when on, allocates nothing of its own: the two header values are
//! kept by reference count. Turn it off with `RUST_LOG=info,mrtr_gateway::access=off`.
//!
//! ```
//! use mrtr_gateway::access::TARGET;
//!
//! assert_eq!(TARGET, "mrtr_gateway::access");
//! ```

use std::time::Instant;

use http::{HeaderValue, Method, Request, Response};
use tower_mrtr::Route;
use tower_mrtr::mcp_headers::{MCP_METHOD, MCP_NAME};
use tracing::Level;

/// The tracing target of access log events.
pub const TARGET: &str = "mrtr_gateway::access";

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

    /// Writes the line for `response`.
    pub(crate) fn finish<B>(&mut self, response: &Response<B>) {
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
        );
    }
}
