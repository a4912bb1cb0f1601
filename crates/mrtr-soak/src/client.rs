//! One simulated user's HTTP/1.1 keep-alive connection to the load balancer, one attempt at a
//! request on it, and the cause of an attempt that failed.
//!
//! A failed attempt is classified by what the client could see, as a real client would: no
//! connection, a connection closed before the answer, a body cut off, an HTTP status and who
//! wrote it (the gateway answers JSON-RPC, nginx answers HTML), or a JSON-RPC error. The causes
//! that mean "a process was down" are [retryable](Cause::retryable); the others end the flow.
//!
//! ```
//! use mrtr_soak::client::Cause;
//!
//! assert!(Cause::ProxyBadGateway.retryable());
//! assert!(!Cause::InvalidEnvelope.retryable());
//! assert_eq!(Cause::GatewayBadGateway.label(), "gateway_502");
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::mcp::{self, Answer, Call};

/// The response header in which the soak's nginx names the replica that answered.
pub const UPSTREAM_HEADER: &str = "x-soak-upstream";

/// Why an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// No TCP connection to the load balancer.
    Connect,
    /// The connection closed (or was reset) before a response head arrived.
    Closed,
    /// The response head arrived, then the body broke off.
    BodyCut,
    /// The body ended cleanly without the JSON-RPC answer (an SSE stream without its result).
    NoAnswer,
    /// HTTP 502 written by the gateway: it could not reach the backend.
    GatewayBadGateway,
    /// HTTP 502 written by nginx: no gateway replica gave it an answer.
    ProxyBadGateway,
    /// HTTP 503: the gateway shed load, or nginx had no live replica.
    Unavailable,
    /// HTTP 504, or no complete answer within the request timeout.
    Timeout,
    /// A JSON-RPC `-32603` naming a backend inside a 200 answer: the backend failed mid-stream.
    BackendStreamError,
    /// `-32602` to a round carrying a `requestState` or a task handle: the envelope was refused.
    InvalidEnvelope,
    /// Any other JSON-RPC error.
    RpcError,
    /// Any other HTTP status.
    HttpStatus,
    /// A result other than the one the flow must get.
    WrongAnswer,
    /// A merged `tools/list` without one backend's tools.
    PartialList,
}

impl Cause {
    /// Every cause, in report order.
    pub const ALL: [Cause; 14] = [
        Cause::Connect,
        Cause::Closed,
        Cause::BodyCut,
        Cause::NoAnswer,
        Cause::GatewayBadGateway,
        Cause::ProxyBadGateway,
        Cause::Unavailable,
        Cause::Timeout,
        Cause::BackendStreamError,
        Cause::InvalidEnvelope,
        Cause::RpcError,
        Cause::HttpStatus,
        Cause::WrongAnswer,
        Cause::PartialList,
    ];

    /// Whether a client retries after it: the cause says a process was down (or overloaded),
    /// not that the request or its envelope was wrong.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Cause::Connect
                | Cause::Closed
                | Cause::BodyCut
                | Cause::NoAnswer
                | Cause::GatewayBadGateway
                | Cause::ProxyBadGateway
                | Cause::Unavailable
                | Cause::Timeout
                | Cause::BackendStreamError
        )
    }

    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Connect => "connect",
            Cause::Closed => "closed_before_answer",
            Cause::BodyCut => "body_cut",
            Cause::NoAnswer => "stream_without_answer",
            Cause::GatewayBadGateway => "gateway_502",
            Cause::ProxyBadGateway => "nginx_502",
            Cause::Unavailable => "http_503",
            Cause::Timeout => "timeout",
            Cause::BackendStreamError => "backend_failed_mid_stream",
            Cause::InvalidEnvelope => "invalid_envelope",
            Cause::RpcError => "jsonrpc_error",
            Cause::HttpStatus => "http_status",
            Cause::WrongAnswer => "wrong_answer",
            Cause::PartialList => "partial_list",
        }
    }
}

/// A failed attempt.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Why.
    pub cause: Cause,
    /// The replica nginx named, when an answer came back.
    pub upstream: Option<String>,
    /// The backend an error message named (`Backend "alpha" is unavailable`).
    pub backend: Option<String>,
    /// What was seen, briefly.
    pub detail: String,
}

impl Failure {
    fn new(cause: Cause, detail: impl Into<String>) -> Self {
        Self {
            cause,
            upstream: None,
            backend: None,
            detail: detail.into(),
        }
    }
}

/// An answered attempt.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The replica nginx named.
    pub upstream: Option<String>,
    /// The JSON-RPC `result` (every error answer is a [`Failure`]).
    pub result: serde_json::Value,
}

/// A keep-alive connection to the load balancer, reopened after a failure.
#[derive(Debug)]
pub struct Connection {
    addr: SocketAddr,
    authority: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Connection {
    /// A connection to `addr`, opened on first use.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            authority: addr.to_string(),
            sender: None,
        }
    }

    /// Sends `call` with `id` and reads the whole answer, within `timeout`. A round that
    /// carries an envelope (`sealed`) turns `-32602` into [`Cause::InvalidEnvelope`].
    pub async fn attempt(
        &mut self,
        id: u64,
        call: &Call,
        sealed: bool,
        timeout: Duration,
    ) -> Result<Reply, Failure> {
        let result = tokio::time::timeout(timeout, self.exchange(id, call, sealed)).await;
        let result = result.unwrap_or_else(|_| {
            Err(Failure::new(
                Cause::Timeout,
                format!("no answer within {timeout:?}"),
            ))
        });
        if let Err(failure) = &result
            && matches!(
                failure.cause,
                Cause::Connect | Cause::Closed | Cause::BodyCut | Cause::Timeout
            )
        {
            self.sender = None;
        }
        result
    }

    async fn exchange(&mut self, id: u64, call: &Call, sealed: bool) -> Result<Reply, Failure> {
        let request = mcp::request(&self.authority, id, call);
        let response = self
            .ready()
            .await?
            .send_request(request)
            .await
            .map_err(|e| Failure::new(Cause::Closed, error_chain(&e)))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let upstream = header(UPSTREAM_HEADER);
        let content_type = header("content-type");
        let body = response.into_body().collect().await.map(|c| c.to_bytes());
        let with_upstream = |mut failure: Failure| {
            failure.upstream = upstream.clone();
            failure
        };
        let body = body.map_err(|e| with_upstream(Failure::new(Cause::BodyCut, error_chain(&e))))?;
        let answer = mcp::read_answer(content_type.as_deref(), &body, id);
        let failure = match (status, answer) {
            (200, Ok(Answer::Error { code, message })) => {
                let backend = backend_named(&message);
                let cause = match code {
                    -32602 if sealed => Cause::InvalidEnvelope,
                    -32603 if backend.is_some() => Cause::BackendStreamError,
                    _ => Cause::RpcError,
                };
                Failure {
                    backend,
                    ..Failure::new(cause, format!("{code} {message}"))
                }
            }
            (200, Ok(Answer::Result(result))) => return Ok(Reply { upstream, result }),
            (200, Err(problem)) => Failure::new(Cause::NoAnswer, problem),
            (502, Ok(Answer::Error { message, .. })) => Failure {
                backend: backend_named(&message),
                ..Failure::new(Cause::GatewayBadGateway, message)
            },
            (502, _) => Failure::new(Cause::ProxyBadGateway, mcp::excerpt(&body)),
            (503, _) => Failure::new(Cause::Unavailable, mcp::excerpt(&body)),
            (504, _) => Failure::new(Cause::Timeout, format!("504 {}", mcp::excerpt(&body))),
            (status, _) => Failure::new(Cause::HttpStatus, format!("{status} {}", mcp::excerpt(&body))),
        };
        Err(with_upstream(failure))
    }

    async fn ready(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, Failure> {
        if let Some(sender) = &mut self.sender
            && sender.ready().await.is_err()
        {
            self.sender = None;
        }
        if self.sender.is_none() {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|e| Failure::new(Cause::Connect, e.to_string()))?;
            let _ = stream.set_nodelay(true);
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| Failure::new(Cause::Connect, error_chain(&e)))?;
            tokio::spawn(connection);
            self.sender = Some(sender);
        }
        Ok(self.sender.as_mut().expect("set above"))
    }
}

/// The backend an error message of the gateway names: `Backend "alpha" is unavailable`.
pub fn backend_named(message: &str) -> Option<String> {
    let rest = message.strip_prefix("Backend \"")?;
    Some(rest.split('"').next()?.to_owned())
}

/// An error and its sources, joined: hyper's own message alone says little.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `GET http://{addr}{path}` on a fresh connection: status and body.
pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Bytes), String> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| error_chain(&e))?;
        tokio::spawn(connection);
        let request = http::Request::get(format!("http://{addr}{path}"))
            .header(http::header::HOST, addr.to_string())
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| error_chain(&e))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| error_chain(&e))?;
        Ok((status, body.to_bytes()))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_backend_of_gateway_errors() {
        assert_eq!(
            backend_named("Backend \"alpha\" is unavailable").as_deref(),
            Some("alpha")
        );
        assert_eq!(
            backend_named("Backend \"beta\" failed before answering: reset").as_deref(),
            Some("beta")
        );
        assert_eq!(backend_named("Invalid or expired requestState"), None);
    }

    #[test]
    fn only_process_failures_are_retried() {
        let retried: Vec<_> = Cause::ALL.into_iter().filter(|c| c.retryable()).collect();
        assert_eq!(retried.len(), 9);
        assert!(!Cause::WrongAnswer.retryable() && !Cause::RpcError.retryable());
        let labels: std::collections::HashSet<_> = Cause::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), Cause::ALL.len());
    }
}
