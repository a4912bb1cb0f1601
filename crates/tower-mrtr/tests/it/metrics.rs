//! What the `metrics` feature counts, read back from a recorder.

use futures_util::FutureExt;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde_json::Value;
use tower::Layer;
use tower_mrtr::{Keyring, MrtrLayer};

use crate::common::*;

/// One recorded metric: name, labels, value.
type Recorded = (String, Vec<(String, String)>, DebugValue);

/// The value of counter `name` with exactly these labels, 0 if it was never incremented.
fn counter(snapshot: &[Recorded], name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshot
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
        })
        .map_or(0, |(_, _, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
}

/// Every service here answers at once, so the recorder (local to this thread) sees everything.
fn run<F: std::future::Future>(future: F) -> F::Output {
    future.now_or_never().expect("ready at once")
}

#[test]
fn seals_opens_refusals_and_fail_closed_answers_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let layer = MrtrLayer::new(Keyring::generate("k1").unwrap());
        let backend = Backend::new();
        let envelope = run(send(
            layer.layer(backend.service(Some("a"), |r: &Value| input_required(r, Some(r#""s""#)))),
            post(&tool_call(1, "t", None)),
        ))
        .envelope();
        run(send(
            layer.layer(backend.service(Some("a"), |r: &Value| complete(r, "a"))),
            post(&tool_call(2, "t", Some(&envelope))),
        ));
        // An edit in the middle always decodes (the last character may carry unused bits, where
        // an edit can fail as an encoding error instead): it fails authentication.
        let middle = envelope.len() / 2;
        let swapped = if &envelope[middle..=middle] == "x" {
            "y"
        } else {
            "x"
        };
        let tampered = format!("{}{swapped}{}", &envelope[..middle], &envelope[middle + 1..]);
        run(send(
            layer.layer(must_not_be_called()),
            post(&tool_call(3, "t", Some(&tampered))),
        ));
        run(send(layer.layer(must_not_be_called()), post("{} x")));
        run(send(
            layer.layer(backend.service(None, |r: &Value| input_required(r, Some(r#""s""#)))),
            post(&tool_call(4, "t", None)),
        ));
    });
    let snapshot: Vec<Recorded> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect();
    let kind = [("kind", "request_state")];
    assert_eq!(counter(&snapshot, "mrtr_envelopes_sealed_total", &kind), 1);
    assert_eq!(counter(&snapshot, "mrtr_envelopes_opened_total", &kind), 1);
    assert_eq!(
        counter(
            &snapshot,
            "mrtr_envelopes_refused_total",
            &[("kind", "request_state"), ("reason", "authentication")]
        ),
        1
    );
    assert_eq!(
        counter(
            &snapshot,
            "mrtr_requests_refused_total",
            &[("reason", "invalid_envelope")]
        ),
        1
    );
    assert_eq!(
        counter(
            &snapshot,
            "mrtr_requests_refused_total",
            &[("reason", "parse_error")]
        ),
        1
    );
    assert_eq!(
        counter(
            &snapshot,
            "mrtr_answers_failed_closed_total",
            &[("reason", "no_route")]
        ),
        1
    );
    assert!(
        snapshot.iter().any(|(n, _, v)| n == "mrtr_envelope_size_bytes"
            && matches!(v, DebugValue::Histogram(h) if h.len() == 1))
    );
}
