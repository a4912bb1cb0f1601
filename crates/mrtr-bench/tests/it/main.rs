//! The benchmark's integration tests, one test binary.

mod peer;
