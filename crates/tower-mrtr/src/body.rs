//! The request body the inner service receives and the response body the client receives.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, header};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::BoxError;
use crate::sse::SseBody;

/// Whether a body's `Content-Encoding` leaves it readable as is: every value of every
/// `Content-Encoding` header, split on commas, is `identity` (empty list elements are ignored, as
/// HTTP lists allow). Checking only the first header would let `identity` followed by `gzip`
/// through.
pub(crate) fn is_identity_encoded(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONTENT_ENCODING).iter().all(is_identity)
}

/// Whether one `Content-Encoding` value lists no coding but `identity`.
pub(crate) fn is_identity(value: &http::HeaderValue) -> bool {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .all(|coding| coding.is_empty() || coding.eq_ignore_ascii_case(b"identity"))
}

pin_project! {
    /// The body of a request handed to the inner service: the client's own body, untouched and
    /// still streaming, or the buffered bytes of a POST the layer read (rewritten only if an
    /// envelope was opened).
    pub struct RequestBody<B> {
        #[pin]
        kind: RequestKind<B>,
    }
}

pin_project! {
    #[project = RequestKindProj]
    enum RequestKind<B> {
        Streaming { #[pin] body: B },
        Buffered { data: Option<Bytes> },
    }
}

impl<B> RequestBody<B> {
    /// Wraps a body that the layer did not read.
    pub fn new(body: B) -> Self {
        Self {
            kind: RequestKind::Streaming { body },
        }
    }

    /// A body of buffered bytes.
    pub fn buffered(data: Bytes) -> Self {
        Self {
            kind: RequestKind::Buffered {
                data: Some(data).filter(|d| !d.is_empty()),
            },
        }
    }

    /// The bytes of a buffered body not read yet (`None` for a streaming body), so that a
    /// service behind the layer can look at a request it read without taking the body apart.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tower_mrtr::RequestBody;
    ///
    /// let body = RequestBody::<http_body_util::Empty<Bytes>>::buffered(Bytes::from_static(b"{}"));
    /// assert_eq!(body.buffered_bytes().map(|b| &b[..]), Some(&b"{}"[..]));
    /// ```
    pub fn buffered_bytes(&self) -> Option<&Bytes> {
        match &self.kind {
            RequestKind::Buffered { data } => data.as_ref(),
            RequestKind::Streaming { .. } => None,
        }
    }
}

impl<B> fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            RequestKind::Streaming { .. } => f.write_str("RequestBody::Streaming"),
            RequestKind::Buffered { data } => {
                write!(
                    f,
                    "RequestBody::Buffered({} bytes)",
                    data.as_ref().map_or(0, Bytes::len)
                )
            }
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            RequestKindProj::Streaming { body } => {
                let frame = ready!(body.poll_frame(cx));
                Poll::Ready(frame.map(|r| r.map(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining())))))
            }
            RequestKindProj::Buffered { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Streaming { body } => body.is_end_stream(),
            RequestKind::Buffered { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Streaming { body } => body.size_hint(),
            RequestKind::Buffered { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

pin_project! {
    /// The body of a response from the layer: the backend's body untouched, a buffered (and
    /// possibly rewritten) JSON body, a stream rewritten event by event, or the layer's own error.
    pub struct ResponseBody<B> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseKindProj]
    enum ResponseKind<B> {
        Passthrough { #[pin] body: B },
        Full { data: Option<Bytes> },
        // Boxed: the stream's framer and rewriter are large, and every answer, JSON ones too, is
        // moved through the layers above at the size of the largest variant.
        Sse { body: Pin<Box<SseBody<B>>> },
    }
}

impl<B> ResponseBody<B> {
    /// Wraps a body the layer passes through untouched: what a layer *outside* `MrtrLayer`
    /// uses to answer early (a 401, a 429) with a body of the inner service's type.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use http_body_util::Full;
    /// use tower_mrtr::ResponseBody;
    ///
    /// let unauthorized: Response<ResponseBody<Full<Bytes>>> = Response::builder()
    ///     .status(StatusCode::UNAUTHORIZED)
    ///     .body(ResponseBody::new(Full::new(Bytes::from_static(b"sign in first"))))
    ///     .unwrap();
    /// # let _ = unauthorized;
    /// ```
    pub fn new(body: B) -> Self {
        Self::passthrough(body)
    }

    /// A body of the given bytes, whatever the inner body type: for early answers written by
    /// another layer. [`From`] conversions from `String`, `&'static str`, `Vec<u8>` and `Bytes`
    /// and [`Default`] (empty) do the same, so layers that build their own answers from those
    /// (tower-http's `ValidateRequestHeaderLayer` needs `Default`) stack outside `MrtrLayer`
    /// with no adapter.
    pub fn from_bytes(data: impl Into<Bytes>) -> Self {
        Self::full(data.into())
    }

    pub(crate) fn passthrough(body: B) -> Self {
        Self {
            kind: ResponseKind::Passthrough { body },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: ResponseKind::Full {
                data: Some(data).filter(|d| !d.is_empty()),
            },
        }
    }

    pub(crate) fn sse(body: SseBody<B>) -> Self {
        Self {
            kind: ResponseKind::Sse { body: Box::pin(body) },
        }
    }
}

impl<B> Default for ResponseBody<B> {
    /// An empty body.
    fn default() -> Self {
        Self::full(Bytes::new())
    }
}

impl<B> From<Bytes> for ResponseBody<B> {
    fn from(data: Bytes) -> Self {
        Self::full(data)
    }
}

impl<B> From<String> for ResponseBody<B> {
    fn from(text: String) -> Self {
        Self::full(Bytes::from(text))
    }
}

impl<B> From<&'static str> for ResponseBody<B> {
    fn from(text: &'static str) -> Self {
        Self::full(Bytes::from_static(text.as_bytes()))
    }
}

impl<B> From<Vec<u8>> for ResponseBody<B> {
    fn from(data: Vec<u8>) -> Self {
        Self::full(Bytes::from(data))
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match &self.kind {
            ResponseKind::Passthrough { .. } => "ResponseBody::Passthrough",
            ResponseKind::Full { .. } => "ResponseBody::Full",
            ResponseKind::Sse { .. } => "ResponseBody::Sse",
        })
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            ResponseKindProj::Passthrough { body } => {
                let frame = ready!(body.poll_frame(cx));
                Poll::Ready(frame.map(|r| {
                    r.map(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining())))
                        .map_err(Into::into)
                }))
            }
            ResponseKindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ResponseKindProj::Sse { body } => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Passthrough { body } => body.is_end_stream(),
            ResponseKind::Full { data } => data.is_none(),
            ResponseKind::Sse { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Passthrough { body } => body.size_hint(),
            ResponseKind::Full { data } => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            ResponseKind::Sse { body } => body.size_hint(),
        }
    }
}

pin_project! {
    /// Reads a whole body into one [`Bytes`], refusing more than `limit` bytes.
    ///
    /// A body that arrives in one frame (most MCP messages) is kept as that frame, with no copy
    /// and no allocation; more frames are gathered into one buffer.
    pub(crate) struct ReadBody<B> {
        #[pin]
        body: B,
        limit: usize,
        first: Option<Bytes>,
        rest: BytesMut,
        read: usize,
    }
}

/// Why [`ReadBody`] stopped.
#[derive(Debug)]
pub(crate) enum ReadBodyError {
    /// More than the limit.
    TooLarge,
    /// The body itself failed.
    Body(BoxError),
}

impl<B> ReadBody<B> {
    pub(crate) fn new(body: B, limit: usize) -> Self {
        Self {
            body,
            limit,
            first: None,
            rest: BytesMut::new(),
            read: 0,
        }
    }
}

impl<B> Future for ReadBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Output = Result<Bytes, ReadBodyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let Some(frame) = ready!(this.body.as_mut().poll_frame(cx)) else {
                let body = match this.first.take() {
                    Some(first) => first,
                    None => std::mem::take(this.rest).freeze(),
                };
                return Poll::Ready(Ok(body));
            };
            // Trailers carry nothing the layer reads; they are not forwarded with a buffered body.
            let Ok(mut data) = frame.map_err(|e| ReadBodyError::Body(e.into()))?.into_data() else {
                continue;
            };
            let len = data.remaining();
            *this.read = this.read.saturating_add(len);
            if *this.read > *this.limit {
                return Poll::Ready(Err(ReadBodyError::TooLarge));
            }
            if len == 0 {
                continue;
            }
            let chunk = data.copy_to_bytes(len);
            if this.first.is_none() && this.rest.is_empty() {
                *this.first = Some(chunk);
            } else {
                if let Some(first) = this.first.take() {
                    this.rest.reserve(first.len() + chunk.len());
                    this.rest.extend_from_slice(&first);
                }
                this.rest.extend_from_slice(&chunk);
            }
        }
    }
}
