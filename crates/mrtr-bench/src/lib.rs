//! The project's benchmarks, all in this one crate.
//!
//! Side-by-side load benchmark of `mrtr-gateway` (issue 9): the gateway as operators deploy it,
//! against a bare hyper reverse proxy (the limit of one hop) and against the backend called
//! directly, all in front of the same fast mock MCP backend. Its binaries:
//!
//! * `mock-backend`: the MCP backend ([`backend`]): JSON and SSE answers, MRTR rounds with a
//!   state of chosen size that it checks on round 2; in the `initialize` era (`--legacy`) and
//!   over stdio (`--stdio`) for the cells of legacy and stdio backends;
//! * `bare-proxy`: hyper server, hyper-util pooled client, bodies streamed, nothing parsed
//!   ([`bare`]);
//! * `gateway-bench`: starts those and `mrtr-gateway` pinned with `taskset`, drives every cell
//!   through every hop in interleaved rounds (a stdio cell also straight over the mock's pipes,
//!   [`pipe`]), checks every answer ([`workload`]) and prints
//!   req/s, latency and hop CPU ratios, peak RSS ([`report`]); with `--callgrind`, instructions
//!   per request instead; with `--peer`, another gateway beside ours in the same rounds
//!   ([`peer`]), its answers compared as parsed messages ([`messages`]);
//! * `overload-bench`: a slow backend behind the gateway, offered ten times the load it sustains,
//!   to show that load shedding keeps memory bounded and that the gateway recovers
//!   ([`overload`]);
//! * `scale-bench`: the cost per client connection, and thousands of them at once ([`scale`]);
//!   with `--listens N`, N `subscriptions/listen` streams open at once and a notification
//!   reaching all of them ([`listens`]).
//!
//! Run it with `bash scripts/bench-gateway.sh` (see `docs/benchmarks.md`).
//!
//! The library, `tower-mrtr`, alone (each binary's own docs say how to run it):
//!
//! * `loopback-load`: one forwarding proxy, bare and wrapped in `MrtrLayer`, under keep-alive
//!   load on 127.0.0.1 in one process;
//! * `envelope-cost` and `layer-cost`: loops of seals and opens, or of requests through the layer
//!   with no network and no scheduler, to be counted under callgrind;
//! * the criterion benches, `benches/mrtr.rs` (`cargo bench -p mrtr-bench --bench mrtr`).
//!
//! `json-validators/` is a workspace of its own (its `run.sh`), comparing JSON validators the
//! layer could have used, so that their dependencies stay out of this workspace's lock file.

#![forbid(unsafe_code)]

pub mod backend;
pub mod bare;
pub mod driver;
pub mod listens;
pub mod load;
pub mod mcp;
pub mod messages;
pub mod overload;
pub mod peer;
pub mod pipe;
pub mod procs;
pub mod report;
pub mod scale;
pub mod workload;

/// Prints `NAME listening on http://ADDR/mcp`, the line the driver waits for.
pub fn announce(name: &str, addr: std::net::SocketAddr) {
    println!("{name} listening on http://{addr}/mcp");
}
