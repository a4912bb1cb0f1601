//! [`BodyDeadline`]: a request body that must arrive in time, against clients that send a
//! byte a second and hold a request (and its buffer) open indefinitely.
//!
//! The timer is armed only when the body first has to wait for the client: a body that came
//! with its request head (nearly every MCP request) never creates one. From then on the whole
//! rest of the body must arrive within the timeout, or the body fails (the MRTR layer then
//! answers 400, `Request body could not be read`, and the connection closes).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_mrtr::BoxError;

/// Default time a request body may take once it has to be waited for.
pub(crate) const DEFAULT_REQUEST_BODY_TIMEOUT: Duration = Duration::from_secs(30);

pin_project! {
    /// A request body with a deadline; see the [module docs](self).
    #[derive(Debug)]
    pub struct BodyDeadline<B> {
        #[pin]
        inner: B,
        timeout: Duration,
        sleep: Option<Pin<Box<Sleep>>>,
    }
}

impl<B> BodyDeadline<B> {
    /// `inner`, which must arrive within `timeout` of its first wait.
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: None,
        }
    }
}

impl<B> Body for BodyDeadline<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let timeout = *this.timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match sleep.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                        "the request body did not arrive within {} s",
                        timeout.as_secs_f64()
                    )
                    .into()))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_that_came_with_its_head_needs_no_timer() {
        use http_body_util::BodyExt;
        let body = BodyDeadline::new(
            http_body_util::Full::new(bytes::Bytes::from("{}")),
            Duration::from_secs(1),
        );
        assert!(body.sleep.is_none());
        assert_eq!(body.collect().await.unwrap().to_bytes(), "{}");
    }
}
