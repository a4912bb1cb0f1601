//! A soak of `mrtr-gateway` through a real load balancer (issue 11, deliverable 2).
//!
//! `mrtr-soak` starts two backends (`alpha`, the demo backend answering in SSE, with one-, two-
//! and three-round MRTR tools; `beta`, the task fixture answering in JSON), two gateway replicas
//! sharing one keys file, and nginx round-robin in front of them with no stickiness, so the
//! rounds of a flow land on different replicas. Then N simulated users run MRTR flows, task
//! flows and plain calls through nginx for T seconds while a fault schedule rotates the key in
//! three steps by editing the keys file, kills `alpha` with `kill -9` and restarts it, and
//! restarts one replica (SIGTERM, drain, start). Users retry what failed because a process was
//! down, at most three times with backoff, as real clients do; a flow that still fails is lost.
//! With `--shared-store`, the replicas share a `redis-server` (a limit every request counts
//! against) and the schedule also kills it with `kill -9` and restarts it, empty.
//!
//! The report lists flows and rounds, every failed attempt by cause and by second, each
//! explained by a fault window or not, lost flows (must be 0), round latencies and the memory and
//! descriptors of every process, sampled every second.
//!
//! Modules, in the order a request meets them: [`mcp`] (messages), [`client`] (one attempt and
//! its cause), [`flows`] (users, flows, retries), [`stats`] (what users record), [`fleet`] (the
//! processes), [`schedule`] (the faults), [`sampler`] (`/proc`), [`report`], [`run`].
//!
//! Run it with `bash scripts/soak.sh` (see `docs/reliability.md`).

#![forbid(unsafe_code)]

pub mod client;
pub mod fleet;
pub mod flows;
pub mod mcp;
pub mod report;
pub mod run;
pub mod sampler;
pub mod schedule;
pub mod stats;
