//! Harness shared by the fuzz targets in `fuzz_targets/`.
//!
//! Every target asserts what the relay promises, not only that it does not panic:
//!
//! * no raw backend state or task id (the scripted backends write markers, [`MARKERS`]) in any
//!   byte a client can see, wherever a lenient client could read it as one ([`oracle`]);
//! * no request reaching the inner service with a `requestState` or task id the backend did not
//!   mint, or pinned to another backend than the one that minted it ([`oracle::check_forwarded`]);
//! * answers byte-identical when nothing in them needed changing, and streams identical whatever
//!   their chunk boundaries;
//! * every envelope handed to a client opens, under the binding of its request, to what the
//!   backend sent.
//!
//! Inputs are small text formats ([`script`]), so seed corpora are readable files (under
//! `fuzz/seeds/`) taken from the tests' inputs, and libFuzzer's mutations stay meaningful.
//! Envelopes are deterministic ([`mint`]): a crash reproduces from its input alone.
//!
//! Nothing here does I/O: bodies are in memory and futures are driven by [`exec::block_on`].

pub mod answer;
pub mod backend;
pub mod exec;
pub mod lenient;
pub mod mint;
pub mod oracle;
pub mod relay;
pub mod reserialise;
pub mod script;

/// Prefixes of the markers the scripted backends put into their states and task ids. None of
/// them may reach a client where it would be read as a state or a task id.
pub const MARKERS: [&str; 2] = ["BKSTATE-", "BKTASK-"];
