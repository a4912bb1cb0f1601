//! The body of every answer the proxy gives: a backend's body, streamed through as it arrives,
//! or one the gateway wrote itself (errors, merged lists). A concrete type rather than a boxed
//! one, so that no answer pays an allocation and a virtual call per frame for the choice.
//!
//! ```
//! use http_body::Body as _;
//!
//! let body = mrtr_gateway::body::full("{}".into());
//! assert_eq!(body.size_hint().exact(), Some(2));
//! ```

use bytes::Bytes;
use http_body_util::{Either, Full};

use crate::relay::BackendBody;

/// A backend's streamed body (`Left`, see [`crate::relay`]) or the gateway's own (`Right`).
pub type ProxyBody = Either<BackendBody, Full<Bytes>>;

/// The gateway's own body of `bytes`.
pub fn full(bytes: Bytes) -> ProxyBody {
    Either::Right(Full::new(bytes))
}
