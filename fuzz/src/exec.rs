//! Driving in-memory futures and bodies without a runtime.
//!
//! Everything the targets run is in memory: the inner services answer at once and bodies yield
//! their frames on demand (at most a [`Stall`](crate::relay::Step::Stall) that wakes itself). A
//! future that stays pending for long is therefore a lost wake-up or a hang, which is a finding.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Body;
use http_body_util::BodyExt;

/// Polls before [`block_on`] declares a hang. Each stall costs one poll, and inputs are small.
const MAX_POLLS: usize = 1 << 20;

/// Runs `future` to completion on this thread.
///
/// ```
/// assert_eq!(tower_mrtr_fuzz::exec::block_on(async { 1 + 1 }), 2);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..MAX_POLLS {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("a future on in-memory input never completed: lost wake-up or hang");
}

/// What a client receives of a body: its data frames in order, its trailers, and whether it
/// ended with an error (a reset stream) rather than cleanly.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Received {
    /// Data frames, in order (empty frames kept: they are legal).
    pub frames: Vec<Bytes>,
    /// Trailers, if the body sent any.
    pub trailers: Option<HeaderMap>,
    /// Whether the body ended with an error.
    pub error: bool,
}

impl Received {
    /// The data frames concatenated.
    pub fn bytes(&self) -> Vec<u8> {
        self.frames.concat()
    }
}

/// Reads a body to its end (or its first error).
pub fn collect<B>(body: B) -> Received
where
    B: Body<Data = Bytes>,
{
    block_on(async move {
        let mut body = pin!(body);
        let mut received = Received::default();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => received.frames.push(data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            received.trailers = Some(trailers);
                        }
                    }
                },
                Err(_) => {
                    received.error = true;
                    break;
                }
            }
        }
        received
    })
}
