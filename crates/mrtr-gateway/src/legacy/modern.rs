//! The modern stack as the legacy front sees it: what it sends ([`ModernBody`]) and the one
//! bound every part of the front puts on the service it calls ([`ModernStack`]) and on that
//! service's answer bodies ([`ModernAnswer`]), written once instead of at every function.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use tower_mrtr::BoxError;
use tower_service::Service;

/// The body of a request the legacy front sends to the modern service: the client's own (a
/// modern request passed through) or one the front wrote.
pub type ModernBody<B> = Either<B, Full<Bytes>>;

/// The modern stack (the MRTR layer and the proxy) as the legacy front calls it with request
/// bodies `B`, answering with bodies [`Answer`](Self::Answer): cloned into the tasks that bridge
/// a call, so `Clone`, `Send`, `Sync` and `'static`, and its errors shown to the client, so
/// `Display`.
///
/// Implemented for every service that fits; it names a bound, nothing more. Generic code
/// writes `S: ModernStack<B, Answer = RB>, RB: ModernAnswer` (the binding names `RB` for an
/// impl, and Rust does not carry the associated type's bound over to `RB`).
pub trait ModernStack<B>:
    Service<
        Request<ModernBody<B>>,
        Response = Response<Self::Answer>,
        Future: Send + 'static,
        Error: std::fmt::Display + Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
    /// The body of the stack's answers.
    type Answer: ModernAnswer;
}

impl<S, B, RB> ModernStack<B> for S
where
    S: Service<
            Request<ModernBody<B>>,
            Response = Response<RB>,
            Future: Send + 'static,
            Error: std::fmt::Display + Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
    RB: ModernAnswer,
{
    type Answer = RB;
}

/// An answer body of the modern stack: bytes, read on other tasks, with errors the front can
/// box.
pub trait ModernAnswer: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static {}

impl<RB> ModernAnswer for RB where RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static {}
