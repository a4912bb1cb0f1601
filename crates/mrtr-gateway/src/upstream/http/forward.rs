//! Forwarding one request to one backend over HTTP/1.1 or HTTP/2 (negotiated over TLS), as a
//! well-mannered MCP client would.
//!
//! Toward the backend the gateway:
//!
//! * sets `Host` to the backend's own authority (rmcp servers refuse a foreign `Host` with 403);
//! * drops the client's `Origin` (it names the client's page, not the gateway), hop-by-hop headers
//!   (`Connection` and the headers it lists, `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`,
//!   `Upgrade`, `Proxy-*`), `Accept-Encoding` (the MRTR layer must read answers in clear),
//!   `Mcp-Session-Id` and `Last-Event-ID` (not part of 2026-07-28), and the client's credentials
//!   (`Authorization`, `Cookie`): MCP forbids passing a client's token through to another server;
//! * keeps everything else, notably `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
//!   `Mcp-Param-*`, `Accept`, `Content-Type` and trace context;
//! * adds the backend's own static headers ([`Backend::with_header`], its credentials).
//!
//! Each backend has its own connection pool, because each may have its own TLS settings.
//!
//! Answers stream back untouched except for hop-by-hop headers and `Mcp-Session-Id`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, Uri};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_mrtr::Route;

use super::body::{BackendBody, ProxyBody};
use crate::observe::metrics::{BackendMetrics, MethodLabel};
use crate::upstream::answer::{Answer, UpstreamError};
use crate::upstream::backend::{Backend, DEFAULT_IDLE_TIMEOUT, DEFAULT_STALL_TIMEOUT};
use crate::upstream::sse::{EventReader, is_response, is_sse};

const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// Headers never forwarded toward a backend (besides `Proxy-*` and those `Connection` lists).
/// `Host` and `Content-Length` are not listed: [`Forwarder::send`] replaces them.
pub(crate) fn request_drops(name: &str) -> bool {
    matches!(
        name,
        "origin"
            | "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "accept-encoding"
            | "mcp-session-id"
            | "last-event-id"
            | "authorization"
            | "cookie"
    )
}

/// The bytes of a request's one `Content-Length` value (empty without one, or with several).
fn content_length(headers: &HeaderMap) -> &[u8] {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.as_bytes(),
        _ => &[],
    }
}

/// Headers never passed back to the client (besides `Proxy-*` and those `Connection` lists).
pub(crate) fn response_drops(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade" | "mcp-session-id"
    )
}

/// Largest backend answer the gateway buffers when it has to merge answers (lists, discover).
pub(crate) const MAX_MERGED_ANSWER: usize = 8 * 1024 * 1024;

type BackendClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP clients toward backends, in configuration order.
#[derive(Clone, Debug)]
pub(crate) struct Forwarder {
    pools: Arc<[Pools]>,
    response_timeout: Duration,
}

/// One backend's clients: its keep-alive pool, and one that keeps no connection (the one retry
/// of [`Forwarder::exchange`] goes out on a fresh connection).
#[derive(Clone, Debug)]
struct Pools {
    route: Route,
    /// Its request metrics' handles.
    metrics: Arc<BackendMetrics>,
    pooled: BackendClient,
    fresh: BackendClient,
}

impl Pools {
    fn new(backend: &Backend) -> Self {
        Self {
            route: backend.route().clone(),
            metrics: Arc::new(BackendMetrics::new(backend.name())),
            pooled: client_for(
                backend,
                Some(backend.idle_timeout().unwrap_or(DEFAULT_IDLE_TIMEOUT)),
            ),
            fresh: client_for(backend, None),
        }
    }
}

impl Forwarder {
    /// Clients for `backends` (tests).
    #[cfg(test)]
    pub(crate) fn new(backends: &[Backend], response_timeout: Duration) -> Self {
        Self::carrying(None, backends, &|_| false, response_timeout)
    }

    /// Clients for `backends`, waiting at most `response_timeout` (unless a backend has its own)
    /// for a response head; the backends `kept` names (a config reload) share `previous`'s
    /// clients (their idle connections, their metrics' handles).
    pub(crate) fn carrying(
        previous: Option<&Self>,
        backends: &[Backend],
        kept: &dyn Fn(&Backend) -> bool,
        response_timeout: Duration,
    ) -> Self {
        let old = |backend: &Backend| {
            let previous = previous.filter(|_| kept(backend))?;
            previous
                .pools
                .iter()
                .find(|p| p.route == *backend.route())
                .cloned()
        };
        Self {
            pools: backends
                .iter()
                .map(|b| old(b).unwrap_or_else(|| Pools::new(b)))
                .collect(),
            response_timeout,
        }
    }

    /// How long a backend's response head is waited for, unless it has its own timeout.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// POSTs `body` to `backend` and relays the answer to the client's request `id` (raw
    /// JSON): the answer's body streams through a [`BackendBody`].
    pub(crate) async fn relay(
        &self,
        backend: &Backend,
        headers: HeaderMap,
        id: Option<&str>,
        body: Bytes,
    ) -> Result<Response<ProxyBody>, UpstreamError> {
        let (response, _) = self
            .send_on(
                backend,
                Method::POST,
                headers,
                body,
                Sent::plain(Connection::Pooled),
            )
            .await?;
        let sse = is_sse(response.headers());
        Ok(response.map(|body| {
            let stall = backend.stall_timeout().unwrap_or(DEFAULT_STALL_TIMEOUT);
            Either::Left(BackendBody::new(body, stall, sse, id, backend.route()))
        }))
    }

    /// Sends `method` with `body` to `backend` on a kept-alive connection, in `session` (a
    /// legacy backend's `Mcp-Session-Id`, if any), the headers filtered as for every request.
    /// `label` is the request's method for the metrics when the caller knows it (a client's
    /// request, whose `Mcp-Method` a legacy backend does not get); `None` reads it from the
    /// headers or, failing them, the body. Returns the answer, its body streaming, and the
    /// session id it named.
    pub(crate) async fn send(
        &self,
        backend: &Backend,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
        session: Option<&HeaderValue>,
        label: Option<MethodLabel>,
    ) -> Result<(Response<Incoming>, Option<HeaderValue>), UpstreamError> {
        let sent = Sent {
            connection: Connection::Pooled,
            session,
            read_session: true,
            label,
        };
        self.send_on(backend, method, headers, body, sent).await
    }

    /// Sends `method` with `body` to `backend` as `sent` says, the headers filtered in place
    /// (see the module docs). Returns the answer (its body streaming) and, when
    /// `sent.read_session`, the session id the backend's answer named.
    async fn send_on(
        &self,
        backend: &Backend,
        method: Method,
        mut headers: HeaderMap,
        body: Bytes,
        sent: Sent<'_>,
    ) -> Result<(Response<Incoming>, Option<HeaderValue>), UpstreamError> {
        let Sent {
            connection,
            session,
            read_session,
            label,
        } = sent;
        let (Some(url), Some(host)) = (backend.url(), backend.host()) else {
            return Err(UpstreamError::Unreachable("not an HTTP backend".to_owned()));
        };
        drop_headers(&mut headers, request_drops);
        headers.insert(header::HOST, host.clone());
        // The body may have been rewritten (an envelope opened, a name restored); the client's
        // length is kept when it is still right, which spares making a new value.
        let still_right = itoa::Buffer::new().format(body.len()).as_bytes() == content_length(&headers);
        if !still_right {
            headers.insert(header::CONTENT_LENGTH, body.len().into());
        }
        if let Some(session) = session {
            headers.insert(MCP_SESSION_ID, session.clone());
        }
        if !backend.headers().is_empty() {
            for name in backend.headers().keys() {
                headers.remove(name);
            }
            for (name, value) in backend.headers() {
                headers.append(name, value.clone());
            }
        }
        let label = label.unwrap_or_else(|| MethodLabel::of_request(&method, &headers, &body));
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = url.clone();
        *request.headers_mut() = headers;

        // A short scan: a backend's route is compared by pointer first.
        let found = self.pools.iter().find(|pools| pools.route == *backend.route());
        let adhoc;
        let pools = match found {
            Some(pools) => pools,
            None => {
                adhoc = Pools::new(backend);
                &adhoc
            }
        };
        let sent = match connection {
            Connection::Pooled => pools.pooled.request(request),
            Connection::Fresh => pools.fresh.request(request),
        };
        let timeout = backend.timeout().unwrap_or(self.response_timeout);
        let started = Instant::now();
        let outcome = match tokio::time::timeout(timeout, sent).await {
            Err(_) => Err(UpstreamError::Timeout),
            Ok(result) => result.map_err(|e| UpstreamError::Unreachable(error_chain(&e))),
        };
        let failure = match &outcome {
            Ok(response) if response.status().is_server_error() => Some("http_5xx"),
            Ok(response) if response.status().is_client_error() => Some("http_4xx"),
            Ok(_) => None,
            Err(UpstreamError::Timeout) => Some("timeout"),
            Err(UpstreamError::Unreachable(_)) => Some("unreachable"),
        };
        pools.metrics.request(label, failure, started.elapsed());
        let (mut parts, body) = outcome?.into_parts();
        let session = read_session
            .then(|| parts.headers.get(&MCP_SESSION_ID).cloned())
            .flatten();
        drop_headers(&mut parts.headers, response_drops);
        Ok((Response::from_parts(parts, body), session))
    }

    /// POSTs and reads the JSON-RPC response message, from a JSON or an SSE answer. These are
    /// the gateway's own read-only requests (lists, discovery, catalog refreshes, probes): one
    /// that fails on the connection is sent once more on a fresh connection, so that a backend
    /// closing an idle connection at the wrong moment does not drop out of a merged list.
    pub(crate) async fn exchange(
        &self,
        backend: &Backend,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Answer, UpstreamError> {
        match self
            .exchange_once(backend, client_headers, body.clone(), Connection::Pooled)
            .await
        {
            Err(UpstreamError::Unreachable(error)) => {
                tracing::debug!(backend = backend.name(), %error, "read-only request failed; once more on a fresh connection");
                self.exchange_once(backend, client_headers, body, Connection::Fresh)
                    .await
            }
            outcome => outcome,
        }
    }

    async fn exchange_once(
        &self,
        backend: &Backend,
        client_headers: &HeaderMap,
        body: Bytes,
        connection: Connection,
    ) -> Result<Answer, UpstreamError> {
        let (response, _) = self
            .send_on(
                backend,
                Method::POST,
                client_headers.clone(),
                body,
                Sent::plain(connection),
            )
            .await?;
        self.read_answer(backend, response).await
    }

    /// Reads the JSON-RPC response message from `response`, a JSON or an SSE answer, within the
    /// backend's timeout and [`MAX_MERGED_ANSWER`].
    pub(crate) async fn read_answer(
        &self,
        backend: &Backend,
        response: Response<Incoming>,
    ) -> Result<Answer, UpstreamError> {
        let status = response.status();
        let is_sse = is_sse(response.headers());
        let mut body = response.into_body();
        let too_large = || UpstreamError::Unreachable("answer too large to merge".to_owned());
        let read = async {
            let mut buffer = Vec::new();
            let mut events = EventReader::new();
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| UpstreamError::Unreachable(format!("reading the answer: {e}")))?;
                let Ok(data) = frame.into_data() else { continue };
                if !is_sse {
                    buffer.extend_from_slice(&data);
                    if buffer.len() > MAX_MERGED_ANSWER {
                        return Err(too_large());
                    }
                    continue;
                }
                events.push(&data);
                if events.held() > MAX_MERGED_ANSWER {
                    return Err(too_large());
                }
                // A stream that stays open after its response (keep-alives) must not hold the
                // merge: the response is taken as soon as its event is complete.
                while let Some(event) = events.next_event() {
                    if is_response(&event) {
                        return Ok(Some(event));
                    }
                }
            }
            Ok(if is_sse {
                events.finish().filter(|event| is_response(event))
            } else {
                Some(Bytes::from(buffer))
            })
        };
        let timeout = backend.timeout().unwrap_or(self.response_timeout);
        let message = tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| UpstreamError::Timeout)??;
        Ok(Answer { status, message })
    }
}

/// Which of a backend's clients a request goes out on.
#[derive(Clone, Copy, Debug)]
enum Connection {
    /// A kept-alive connection when one is idle (hyper-util resends a request it could not
    /// start on a reused connection that turned out closed; see `docs/gateway.md`).
    Pooled,
    /// A connection of its own.
    Fresh,
}

/// How one request goes out ([`Forwarder::send_on`]): on which connection, in which legacy
/// session (its `Mcp-Session-Id`), whether the session id the answer names is read, and the
/// method label for the metrics if the caller knows it.
struct Sent<'a> {
    connection: Connection,
    session: Option<&'a HeaderValue>,
    read_session: bool,
    label: Option<MethodLabel>,
}

impl Sent<'_> {
    /// A request outside any legacy session.
    fn plain(connection: Connection) -> Self {
        Self {
            connection,
            session: None,
            read_session: false,
            label: None,
        }
    }
}

/// A client for `backend`: plain HTTP, or TLS with the backend's own configuration (else the
/// system's roots). With `idle_timeout`, connections are kept alive for that long between
/// requests; without, none is kept.
fn client_for(backend: &Backend, idle_timeout: Option<Duration>) -> BackendClient {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    http.set_nodelay(true);
    http.enforce_http(false);
    let tls = backend.tls().cloned().unwrap_or_else(|| {
        crate::tls::BackendTls::default()
            .client_config()
            .unwrap_or_else(|error| {
                // Checked at start-up for https:// backends; this keeps plain-HTTP backends
                // working on a machine without a trust store.
                if backend.url().and_then(Uri::scheme_str) == Some("https") {
                    tracing::error!(backend = backend.name(), %error, "no TLS roots: HTTPS to this backend will fail");
                }
                crate::tls::empty_roots_config()
            })
    });
    let mut builder = Client::builder(TokioExecutor::new());
    // A request hyper hands back unwritten (the reused connection was found closed) is sent
    // again on another connection: it cannot have been processed. This is hyper-util's
    // default; it is the only resend of a client's request (see `docs/gateway.md`).
    builder.retry_canceled_requests(true);
    match idle_timeout {
        Some(idle) => builder.pool_idle_timeout(idle).pool_timer(TokioTimer::new()),
        None => builder.pool_max_idle_per_host(0),
    };
    builder.build(crate::tls::connector(tls, http))
}

/// Removes the headers `drop` names, every `Proxy-*` header and the headers `Connection` lists
/// (hop-by-hop too, RFC 9110 §7.6.1), in place. One pass over the headers finds them; the usual
/// message has few (`Host`, `Content-Length`), so nothing is allocated for the rest.
pub(crate) fn drop_headers(headers: &mut HeaderMap, drop: fn(&str) -> bool) {
    let doomed = |name: &HeaderName| drop(name.as_str()) || name.as_str().starts_with("proxy-");
    if !headers.keys().any(doomed) {
        return;
    }
    let mut names: Vec<HeaderName> = headers.keys().filter(|name| doomed(name)).cloned().collect();
    names.extend(
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok()),
    );
    for name in names {
        headers.remove(name);
    }
}

/// An error and its sources, as one line: hyper's own text names only the step that failed.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names left after `drop_headers(headers, drops)`, sorted.
    fn kept(headers: &[(&'static str, &'static str)], drops: fn(&str) -> bool) -> Vec<String> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(*k, v.parse().unwrap());
        }
        drop_headers(&mut map, drops);
        let mut kept: Vec<String> = map.keys().map(|k| k.as_str().to_owned()).collect();
        kept.sort_unstable();
        kept
    }

    #[test]
    fn hop_by_hop_and_credentials_are_dropped() {
        let request = [
            ("host", "gw.example"),
            ("content-length", "12"),
            ("origin", "https://app.example"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("proxy-authorization", "x"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("cookie", "c=1"),
            ("last-event-id", "3"),
            ("accept-encoding", "gzip"),
            ("authorization", "Bearer t"),
            ("mcp-session-id", "s"),
            ("mcp-method", "tools/call"),
            ("mcp-param-region", "eu"),
            ("accept", "application/json, text/event-stream"),
            ("traceparent", "00-1-2-01"),
        ];
        // Host and Content-Length stay for `post` to replace.
        assert_eq!(
            kept(&request, request_drops),
            [
                "accept",
                "content-length",
                "host",
                "mcp-method",
                "mcp-param-region",
                "traceparent"
            ]
        );
    }

    #[test]
    fn hop_by_hop_answers_lose_only_hop_by_hop_headers() {
        let answer = [
            ("content-type", "text/event-stream"),
            ("transfer-encoding", "chunked"),
            ("mcp-session-id", "s"),
            ("proxy-authenticate", "Basic"),
            ("x-request-id", "7"),
        ];
        assert_eq!(kept(&answer, response_drops), ["content-type", "x-request-id"]);
    }
}
