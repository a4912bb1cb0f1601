//! The JSON response path: fuzzed backend answers (bytes, headers, status, route, limits) to
//! well-formed requests of every kind, through the whole `Mrtr` service. The input format is
//! described in `tower_mrtr_fuzz::answer`; the answer is `application/json` unless it says
//! otherwise.
//!
//! Invariants: no backend state or task id a lenient client could read as one reaches it (an
//! `input_required` with its raw `requestState`, a task result with its raw `taskId`); every
//! envelope the client gets opens, for its request, to what the backend sent, naming the backend
//! that answered; an answer with nothing to change is byte-identical; a compressed or misrouted
//! answer is a JSON-RPC error; answers to requests the layer need not read are untouched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_mrtr_fuzz::answer::{Mode, run};

fuzz_target!(|data: &[u8]| run(data, Mode::Json));
