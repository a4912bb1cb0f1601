//! What the layer counts, through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Behind the `metrics` cargo feature (off by default). The application installs a recorder
//! (for example `metrics-exporter-prometheus`); without the feature nothing is recorded and the
//! calls compile to nothing.
//!
//! | name | type | labels | counts |
//! |---|---|---|---|
//! | `mrtr_envelopes_sealed_total` | counter | `kind` | envelopes handed to clients |
//! | `mrtr_envelopes_opened_total` | counter | `kind` | envelopes that opened on a request |
//! | `mrtr_envelopes_refused_total` | counter | `kind`, `reason` | envelopes that did not open; `reason` is one of `too_long`, `not_an_envelope`, `encoding`, `truncated`, `unknown_version`, `unknown_key`, `authentication`, `malformed`, `expired` |
//! | `mrtr_requests_refused_total` | counter | `reason` | requests the layer answered itself instead of the inner service: `too_large`, `content_encoding`, `body_unreadable`, `parse_error`, `unreadable`, `batch`, `invalid_params`, `arguments_unbindable`, `invalid_envelope`, `too_many_rounds`, `state_not_accepted`, `principal_required`, `denied`, `missing_tasks_capability`, `mixed_task_routes`, `too_many_task_ids`, `header_mismatch` |
//! | `mrtr_answers_failed_closed_total` | counter | `reason` | backend answers replaced by a JSON-RPC error because they could not be relayed safely: `no_route`, `route_mismatch`, `unreadable`, `case_variant`, `state_not_a_string`, `seal_failed`, `envelope_too_long`, `arguments_unbindable`, `too_large`, `content_encoding`, `body_error`, `event_too_large`, `batch`, `request_not_read`, `task_id_not_a_string` |
//! | `mrtr_envelope_size_bytes` | histogram | `kind` | length of each envelope sealed |
//!
//! `kind` is `request_state` or `task_handle`, the two purposes the layer seals and opens. An
//! application's own purposes ([`Purpose::custom`]) are sealed and opened by the application
//! through [`Sealer`](crate::envelope::Sealer), which records no metrics, so they do not appear
//! here. Should the library ever count one, it is under the one fixed `kind` `custom`, never its
//! label: the set of label values stays bounded whatever labels an application picks.
//!
//! A refused envelope counts once under `mrtr_envelopes_refused_total` (why it did not open) and
//! once under `mrtr_requests_refused_total{reason="invalid_envelope"}` (what the client got).

use crate::envelope::Purpose;

/// Runs `$record!` with the `kind` label of `$purpose`, one of three fixed values, as a string
/// literal: the one place that maps purposes to labels. The `metrics` macros make a static key of
/// literal labels, where any other label value allocates a key per call.
macro_rules! with_kind {
    ($purpose:expr, $record:ident) => {
        if $purpose == Purpose::REQUEST_STATE {
            $record!("request_state")
        } else if $purpose == Purpose::TASK_HANDLE {
            $record!("task_handle")
        } else {
            $record!("custom")
        }
    };
}

/// The `kind` label of `purpose`.
fn kind(purpose: Purpose) -> &'static str {
    macro_rules! label {
        ($kind:literal) => {
            $kind
        };
    }
    with_kind!(purpose, label)
}

/// An envelope of `purpose`, `len` characters long, was handed to a client.
pub(crate) fn sealed(purpose: Purpose, len: usize) {
    #[cfg(feature = "metrics")]
    {
        macro_rules! record {
            ($kind:literal) => {{
                metrics::counter!("mrtr_envelopes_sealed_total", "kind" => $kind).increment(1);
                metrics::histogram!("mrtr_envelope_size_bytes", "kind" => $kind).record(len as f64);
            }};
        }
        with_kind!(purpose, record);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind(purpose), len);
}

/// An envelope of `purpose` opened.
pub(crate) fn opened(purpose: Purpose) {
    #[cfg(feature = "metrics")]
    {
        macro_rules! record {
            ($kind:literal) => {
                metrics::counter!("mrtr_envelopes_opened_total", "kind" => $kind).increment(1)
            };
        }
        with_kind!(purpose, record);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = kind(purpose);
}

/// An envelope of `purpose` did not open, for `reason`.
pub(crate) fn envelope_refused(purpose: Purpose, reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mrtr_envelopes_refused_total", "kind" => kind(purpose), "reason" => reason)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind(purpose), reason);
}

/// The layer answered a request itself, for `reason`.
pub(crate) fn request_refused(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mrtr_requests_refused_total", "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A backend answer failed closed, for `reason`.
pub(crate) fn failed_closed(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mrtr_answers_failed_closed_total", "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_bounded_whatever_the_label() {
        assert_eq!(kind(Purpose::REQUEST_STATE), "request_state");
        assert_eq!(kind(Purpose::TASK_HANDLE), "task_handle");
        for label in ["my-app/v1/resume-token", "other-app/v7/cursor"] {
            assert_eq!(kind(Purpose::custom(label, "token")), "custom");
        }
    }
}
