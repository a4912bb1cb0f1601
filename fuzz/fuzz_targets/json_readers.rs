//! The two JSON readers of `tower-mrtr` side by side: the fast one (`jsonrpc/scan.rs`) and
//! serde_json's, on arbitrary bytes read as a request and as an answer.
//!
//! Invariant: whatever the fast reader accepts, the serde reader reads exactly the same (the
//! same id, method, params or result members, or the same refusal if it refuses it: the fast
//! reader must then not have accepted it). The other targets reach the readers through the whole
//! service, where debug assertions compare them too; this one reaches them with nothing around.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tower_mrtr::fuzzing::compare_readers(data));
