//! The gateway's own HTTP checks, before anything reaches the MRTR layer: `Origin` and `Host`
//! validation against DNS rebinding (403), and the POST media types (415 for a body that is not
//! `application/json`, 406 for an `Accept` without both `application/json` and
//! `text/event-stream`).

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;

/// Which `Origin` values the gateway accepts.
#[derive(Clone, Debug)]
pub struct OriginPolicy {
    allowed: Vec<String>,
    loopback: bool,
}

impl OriginPolicy {
    /// Accepts requests without `Origin`, the listed origins (exact, case-insensitive) and, if
    /// `loopback`, any `http(s)://localhost|127.0.0.1|[::1]` origin on any port.
    pub fn new(allowed: impl IntoIterator<Item = String>, loopback: bool) -> Self {
        let allowed = allowed
            .into_iter()
            .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
            .collect();
        Self { allowed, loopback }
    }

    /// Whether a request with this `Origin` value (or none) may proceed.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else { return true };
        let origin = origin.to_ascii_lowercase();
        if self.allowed.contains(&origin) {
            return true;
        }
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        self.loopback && host.is_some_and(is_loopback_authority)
    }
}

/// Which `Host` values the gateway accepts (DNS-rebinding protection for loopback listeners).
#[derive(Clone, Debug)]
pub struct HostPolicy {
    /// Host names (without port) accepted; empty accepts any.
    allowed: Vec<String>,
}

impl HostPolicy {
    /// Accepts any `Host`.
    pub fn any() -> Self {
        Self { allowed: Vec::new() }
    }

    /// Accepts only these host names (any port).
    pub fn only(hosts: impl IntoIterator<Item = String>) -> Self {
        Self {
            allowed: hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
        }
    }

    /// Loopback names only: the default for a gateway listening on a loopback address.
    pub fn loopback() -> Self {
        Self::only(["localhost", "127.0.0.1", "[::1]"].map(String::from))
    }

    /// Whether a request with this `Host` value may proceed.
    pub fn allows(&self, host: Option<&str>) -> bool {
        if self.allowed.is_empty() {
            return true;
        }
        let Some(host) = host else { return false };
        let name = strip_port(host);
        self.allowed
            .iter()
            .any(|a| a.eq_ignore_ascii_case(name) || a.eq_ignore_ascii_case(host))
    }
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    authority.rsplit_once(':').map_or(authority, |(name, _)| name)
}

fn is_loopback_authority(authority: &str) -> bool {
    matches!(strip_port(authority), "localhost" | "127.0.0.1" | "[::1]")
}

/// The policies the guard enforces.
#[derive(Clone, Debug)]
pub(crate) struct Guard {
    pub(crate) origins: OriginPolicy,
    pub(crate) hosts: HostPolicy,
}

impl Guard {
    /// Checks a request's `Origin`, `Host` and, for a POST, its media types; the refusal to send
    /// if one fails. Reads headers in place: a request that passes costs no allocation.
    pub(crate) fn check<B>(&self, request: &Request<B>) -> Result<(), Refusal> {
        let headers = request.headers();
        let origin = headers.get(header::ORIGIN).map(|v| v.to_str().unwrap_or("\u{0}"));
        if !self.origins.allows(origin) {
            tracing::debug!(origin, "refused Origin");
            return Err(Refusal(StatusCode::FORBIDDEN, "Forbidden: Origin is not allowed"));
        }
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().host());
        if !self.hosts.allows(host) {
            tracing::debug!(host, "refused Host");
            return Err(Refusal(StatusCode::FORBIDDEN, "Forbidden: Host is not allowed"));
        }
        if request.method() == Method::POST {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !is_media_type(content_type, "application/json") {
                return Err(Refusal(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "Content-Type must be application/json",
                ));
            }
            if !accepts_json_and_sse(headers) {
                return Err(Refusal(
                    StatusCode::NOT_ACCEPTABLE,
                    "Accept must list application/json and text/event-stream",
                ));
            }
        }
        Ok(())
    }
}

/// Whether the `Accept` headers list both `application/json` and `text/event-stream` (or `*/*`).
fn accepts_json_and_sse(headers: &http::HeaderMap) -> bool {
    // What clients send: one header, exactly this, compared in place without splitting.
    const USUAL: &[u8] = b"application/json, text/event-stream";
    let accept = headers.get_all(header::ACCEPT);
    let mut values = accept.iter();
    if let (Some(only), None) = (values.next(), values.next())
        && only.as_bytes().eq_ignore_ascii_case(USUAL)
    {
        return true;
    }
    // One pass over the listed media ranges (parameters ignored).
    let (mut json, mut sse) = (false, false);
    for range in accept
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let media = range.split(';').next().unwrap_or("").trim();
        let any = media == "*/*";
        json |= any || media.eq_ignore_ascii_case("application/json");
        sse |= any || media.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

/// Whether a `Content-Type` value names exactly the media type `expected` (parameters such as
/// `charset` aside, case aside): `application/jsonx` is not `application/json`.
fn is_media_type(value: &str, expected: &str) -> bool {
    // The usual value is exactly `expected`: compared in place, without splitting.
    if value.len() == expected.len() {
        return value.eq_ignore_ascii_case(expected);
    }
    value
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(expected))
}

/// Why the guard refused a request: the status and the `text/plain` explanation to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal(pub(crate) StatusCode, pub(crate) &'static str);

impl Refusal {
    /// The refusal as the gateway's answer.
    pub(crate) fn into_response(self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from_static(self.1.as_bytes())));
        *response.status_mut() = self.0;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let loopback = HostPolicy::loopback();
        assert!(loopback.allows(Some("127.0.0.1:8080")));
        assert!(loopback.allows(Some("LOCALHOST")));
        assert!(loopback.allows(Some("[::1]:9")));
        assert!(!loopback.allows(Some("evil.example:8080")));
        assert!(!loopback.allows(None));
        assert!(HostPolicy::any().allows(Some("anything")));
        assert!(HostPolicy::only(["gw.internal".to_owned()]).allows(Some("gw.internal:443")));
        assert!(HostPolicy::only(["GW.internal".to_owned()]).allows(Some("gw.INTERNAL")));
    }

    #[test]
    fn origins_without_loopback() {
        let policy = OriginPolicy::new([], false);
        assert!(!policy.allows(Some("http://localhost:3000")));
        assert!(policy.allows(None));
        assert!(!policy.allows(Some("http://localhost.evil.example")));
        assert!(!OriginPolicy::new([], true).allows(Some("http://localhost.evil.example")));
    }

    #[test]
    fn origins_without_a_browser_configured_or_loopback_pass() {
        let policy = OriginPolicy::new(["https://app.example.com".to_owned()], true);
        assert!(policy.allows(None)); // not a browser
        assert!(policy.allows(Some("https://app.example.com"))); // configured
        assert!(policy.allows(Some("http://localhost:5173"))); // loopback page
        assert!(!policy.allows(Some("https://evil.example")));
        assert!(!policy.allows(Some("null")));
    }

    #[test]
    fn accept_must_list_json_and_sse_in_any_form() {
        let accepts = |values: &[&'static str]| {
            let mut headers = http::HeaderMap::new();
            for value in values {
                headers.append(header::ACCEPT, HeaderValue::from_static(value));
            }
            accepts_json_and_sse(&headers)
        };
        assert!(accepts(&["application/json, text/event-stream"]));
        assert!(accepts(&["Application/JSON, Text/Event-Stream"]));
        assert!(accepts(&["text/event-stream;q=0.9,application/json"]));
        assert!(accepts(&["application/json", "text/event-stream"]));
        assert!(accepts(&["*/*"]));
        assert!(!accepts(&["application/json"]));
        assert!(!accepts(&["application/json, text/event-streams"]));
        assert!(!accepts(&["application/json, text/html"]));
        assert!(!accepts(&[]));
    }

    #[test]
    fn a_post_must_name_application_json_exactly() {
        let guard = Guard {
            origins: OriginPolicy::new([], true),
            hosts: HostPolicy::any(),
        };
        let post = |content_type: &str| {
            let request = Request::post("/mcp")
                .header(header::CONTENT_TYPE, content_type)
                .header(header::ACCEPT, "application/json, text/event-stream")
                .body(())
                .unwrap();
            guard.check(&request).map_err(|refusal| refusal.0)
        };
        assert_eq!(post("application/json"), Ok(()));
        assert_eq!(post("Application/JSON; charset=utf-8"), Ok(()));
        assert_eq!(post(" application/json ;charset=utf-8"), Ok(()));
        for refused in [
            "application/jsonx",
            "application/json-seq",
            "application/json5",
            "text/json",
            "",
        ] {
            assert_eq!(
                post(refused),
                Err(StatusCode::UNSUPPORTED_MEDIA_TYPE),
                "{refused:?}"
            );
        }
    }
}
