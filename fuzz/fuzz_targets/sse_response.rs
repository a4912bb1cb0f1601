//! The SSE path: fuzzed `text/event-stream` answers cut at arbitrary chunk boundaries, with
//! stalls, resets and trailers, to well-formed requests of every kind, through the whole `Mrtr`
//! service. The input format is described in `tower_mrtr_fuzz::answer`.
//!
//! Invariants: those of `json_response`, event by event (an `input_required` in any event is
//! sealed or the stream ends with an error event; keep-alives, ids and other events pass byte
//! for byte), plus: what the client receives does not depend on the chunk boundaries or stalls
//! (envelopes aside, whose nonces are random), and a backend that fails mid-stream makes the
//! client's stream fail too, never end cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_mrtr_fuzz::answer::{Mode, run};

fuzz_target!(|data: &[u8]| run(data, Mode::Sse));
