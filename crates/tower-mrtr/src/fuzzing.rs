//! Entry points for the fuzz targets in `fuzz/` only: `cargo fuzz` builds with `--cfg fuzzing`,
//! and nothing else compiles this module. Not part of the API.

use crate::jsonrpc::{parse_answer_strict, parse_strict, scan};

/// Reads `body` as a request and as an answer with the fast reader; whatever it accepts, the
/// serde reader must read the same. Panics (a finding) if they disagree.
pub fn compare_readers(body: &[u8]) {
    if let Some(fast) = scan::request(body) {
        assert_eq!(
            Ok(fast),
            parse_strict(body),
            "the fast reader read a request otherwise"
        );
    }
    if let Some(fast) = scan::answer(body) {
        assert_eq!(
            Ok(fast),
            parse_answer_strict(body),
            "the fast reader read an answer otherwise"
        );
    }
}
