//! Load shedding: at most a configured number of requests in flight; the next one is answered
//! at once with HTTP 503, `Retry-After: 1` and a JSON-RPC error, instead of queueing and
//! growing memory (every request in flight may hold a buffered body of up to the body limit).
//!
//! The same as tower's `LoadShed` over `ConcurrencyLimit`, without their boxed error and
//! semaphore: the check is one atomic add on the hot path. A request counts from its arrival
//! until its response head (an SSE stream then runs on outside the count; what it holds is
//! bounded by the layer's event limit).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use tower_mrtr::error::OVERLOADED;

use crate::jsonrpc;

/// Default limit of requests in flight.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: NonZeroUsize = NonZeroUsize::new(1024).expect("not zero");

/// Counts requests in flight against a limit. Cheap to clone (shared count).
#[derive(Clone, Debug)]
pub(crate) struct LoadShed {
    in_flight: Arc<AtomicUsize>,
    max: usize,
}

/// One admitted request; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Admission(Arc<AtomicUsize>);

impl LoadShed {
    /// At most `max` requests in flight (`usize::MAX`: no limit).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            in_flight: Arc::default(),
            max,
        }
    }

    /// A place for one more request, if there is one.
    pub(crate) fn admit(&self) -> Option<Admission> {
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let admission = Admission(self.in_flight.clone());
        (before < self.max).then_some(admission)
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The answer to a request over the limit: 503, `Retry-After: 1`, a JSON-RPC error with a
/// `null` id (the body is not read: shedding must cost next to nothing).
pub(crate) fn overloaded() -> Response<Full<Bytes>> {
    let body = jsonrpc::error_body(None, OVERLOADED, "The gateway is overloaded; retry shortly", None);
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_freed_with_its_admission() {
        let shed = LoadShed::new(1);
        let first = shed.admit().expect("one fits");
        assert!(shed.admit().is_none());
        drop(first);
        assert!(shed.admit().is_some());
        assert_eq!(overloaded().status(), 503);
    }
}
