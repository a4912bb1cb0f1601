//! [`Outcome`]: what the layer did with a request, left in its answer's extensions for
//! observers outside the layer (a trace span, an access log), which see only the answer.

/// What the layer did with a request, in its answer's extensions. An answer without one was
/// relayed as the inner service gave it (a retry's answer too: the request carried its
/// [`PinnedRoute`] inward).
///
/// ```
/// use tower_mrtr::Outcome;
///
/// fn describe<B>(answer: &http::Response<B>) -> &'static str {
///     match answer.extensions().get::<Outcome>() {
///         Some(Outcome::Refused { reason }) => reason,
///         Some(Outcome::Sealed) => "sealed",
///         _ => "relayed",
///     }
/// }
/// # let answer = http::Response::new(());
/// # assert_eq!(describe(&answer), "relayed");
/// ```
///
/// [`PinnedRoute`]: crate::PinnedRoute
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The layer answered itself, refusing the request or failing closed on the inner service's
    /// answer; `reason` is the label of `mrtr_requests_refused_total` or, for an answer,
    /// `unrelayable` (its detail is in the debug log).
    Refused {
        /// A stable label (`invalid_envelope`, `denied`, `too_large`, …).
        reason: &'static str,
    },
    /// A JSON answer asking for input whose `requestState` the layer sealed. (An SSE answer's
    /// events are sealed as they stream, after its head has gone, so it carries no outcome.)
    Sealed,
}
