//! A `tasks/*` for a bridged task of another replica, handed to that replica ([`Owners`]): the
//! task's id names the URL its owner advertised (`advertise-url`), sealed with the rest of the
//! client's handle, so the request goes there as the client sent it (the handle written back in
//! place of the task's id, the client's credentials kept) and the owner checks it again. What
//! the owner answers comes back to the client; an owner that cannot be reached or answer in time
//! is an error here, which the bridge turns into a failed task. Imports [`super`]'s constants
//! and the ground floor (`tls`), and the header helpers of `upstream`'s HTTP door.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::upstream::body::{ProxyBody, full};
use crate::upstream::http::forward::{drop_headers, error_chain, response_drops};

/// Set on a request one replica hands to another, with the sender's URL: a request that carries
/// it is answered where it lands, never handed on again, so a misconfigured fleet (an
/// `advertise-url` naming the load balancer) cannot bounce a request between replicas.
pub(super) const FORWARDED_BY: HeaderName = HeaderName::from_static("mrtr-forwarded-by");

/// How long the owner may take to accept the connection: replicas are on one network.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the owner may take to answer in full: it answers a `tasks/*` from memory.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

type OwnerClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP client toward the other replicas; see the [module docs](self).
#[derive(Clone, Debug)]
pub(super) struct Owners {
    client: OwnerClient,
    /// This replica's name in [`FORWARDED_BY`]: its own URL, or `unadvertised`.
    me: HeaderValue,
    /// Largest answer read from an owner.
    max_answer: usize,
}

impl Owners {
    pub(super) fn new(advertise: Option<&str>, max_answer: usize) -> Self {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        http.enforce_http(false);
        // Replicas on https:// are checked against the system's roots, as backends are by default.
        let tls = crate::tls::BackendTls::default()
            .client_config()
            .unwrap_or_else(|_| crate::tls::empty_roots_config());
        let client = Client::builder(TokioExecutor::new()).build(crate::tls::connector(tls, http));
        let me = advertise
            .and_then(|url| HeaderValue::from_str(url).ok())
            .unwrap_or(HeaderValue::from_static("unadvertised"));
        Self {
            client,
            me,
            max_answer,
        }
    }

    /// Sends the client's request (`parts`, and `body` with the backend-side `task_id` where the
    /// client wrote `handle`) to the owner at `url`, and reads its answer whole; why not, as a
    /// sentence for the client.
    pub(super) async fn forward(
        &self,
        url: &str,
        parts: &Parts,
        body: &[u8],
        task_id: &str,
        handle: &str,
    ) -> Result<Response<ProxyBody>, String> {
        let uri: Uri = url.parse().map_err(|_| "its URL does not parse".to_owned())?;
        let body = restored(body, task_id, handle).ok_or("the request names no task id")?;
        let mut headers = parts.headers.clone();
        // Hop-by-hop headers only (the answers' list): the owner authenticates the client again,
        // so its credentials go along, unlike toward a backend.
        drop_headers(&mut headers, response_drops);
        headers.remove(header::CONTENT_LENGTH);
        // The answer goes back through this replica's MRTR layer, which reads it in clear.
        headers.remove(header::ACCEPT_ENCODING);
        if !headers.contains_key(header::HOST)
            && let Some(host) = parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            // HTTP/2 names the host in the URI only; the owner's Host guard wants the client's.
            headers.insert(header::HOST, host);
        }
        if let Ok(name) = HeaderValue::from_str(handle) {
            headers.insert(HeaderName::from_static("mcp-name"), name);
        }
        headers.insert(FORWARDED_BY, self.me.clone());
        let mut request = Request::post(uri)
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        *request.headers_mut() = headers;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| error_chain(&e))?;
            let (mut head, body) = response.into_parts();
            let bytes = Limited::new(body, self.max_answer)
                .collect()
                .await
                .map_err(|e| format!("its answer was cut off or too large: {e}"))?
                .to_bytes();
            drop_headers(&mut head.headers, response_drops);
            head.headers.remove(header::CONTENT_LENGTH);
            Ok::<_, String>(Response::from_parts(head, full(bytes)))
        };
        match tokio::time::timeout(ANSWER_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("it did not answer within {} s", ANSWER_TIMEOUT.as_secs())),
        }
    }
}

/// `body` with its one `"task_id"` string replaced by `"handle"` (the MRTR layer spliced the
/// one in place of the other; a task id is 128 random bits, so it occurs once).
fn restored(body: &[u8], task_id: &str, handle: &str) -> Option<Bytes> {
    let quoted = format!("\"{task_id}\"");
    let at = memchr::memmem::find(body, quoted.as_bytes())?;
    let mut out = BytesMut::with_capacity(body.len() + handle.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(b"\"");
    out.extend_from_slice(handle.as_bytes());
    out.extend_from_slice(b"\"");
    out.extend_from_slice(&body[at + quoted.len()..]);
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handle_goes_back_where_the_task_id_is_and_nothing_else_changes() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"mrtr-bridged.ab.cd","_meta":{}}}"#;
        let restored = restored(body, "mrtr-bridged.ab.cd", "mrtr4.HANDLE").unwrap();
        assert_eq!(
            &restored[..],
            br#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"mrtr4.HANDLE","_meta":{}}}"#
        );
        assert!(super::restored(body, "mrtr-bridged.other", "h").is_none());
    }
}
