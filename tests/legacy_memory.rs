//! What a legacy call waiting for its client's answers holds: at most 64 KiB, plus its
//! connection's read buffer (at most `--max-header-bytes`, 64 KiB by default), plus its own
//! request (`docs/operations.md`, "Legacy clients"), measured as the live heap of the whole
//! process (gateway, backend and a raw client on one thread) across 100 such calls, with a
//! small request and with a 100 kB one.
//!
//! A test binary of its own: it counts every allocation of the process (a counting global
//! allocator), so no other test may run beside it.

use std::alloc::System;

use mrtr_backends::{ResponseMode, SuiteFixture, serve};
use mrtr_gateway::{Backend, GatewayConfig};
use mrtr_test_support::gateway::{gateway, keyring};
use mrtr_test_support::wait::TIMEOUT;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The documented bound per waiting call, besides its read buffer and its own request.
const BOUND: usize = 64 * 1024;

/// Opens `n` legacy calls that wait for an elicitation's answer, each on a raw
/// connection that reads only until the elicitation request arrived.
async fn waiting_calls(addr: std::net::SocketAddr, request: &str, n: usize) -> Vec<TcpStream> {
    let mut calls = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        while !seen.windows(19).any(|w| w == b"elicitation/create\"") {
            let read = match tokio::time::timeout(TIMEOUT, stream.read(&mut buffer)).await {
                Ok(read) => read.unwrap(),
                Err(_) => panic!(
                    "call {}: no elicitation yet: {}",
                    calls.len(),
                    String::from_utf8_lossy(&seen)
                ),
            };
            assert!(read > 0, "the call ended: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buffer[..read]);
        }
        calls.push(stream);
    }
    calls
}

#[tokio::test]
async fn a_waiting_call_holds_its_request_and_a_bounded_rest() -> anyhow::Result<()> {
    let backend = serve(SuiteFixture::new()?, ResponseMode::Sse).await?;
    let mut config = GatewayConfig::new(vec![Backend::new("suite", &backend.url())?]);
    // One session opens all 110 calls, so its own limits must let them wait.
    config.settings.legacy_max_waiting_calls_per_session = 1000.try_into()?;
    config.settings.legacy_max_waiting_answers_per_session = 1000.try_into()?;
    let bound = BOUND + config.settings.max_header_bytes;
    let gateway = gateway(config, keyring()).await?;
    let addr = gateway.addr();
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "memory", "version": "0"}}});
    let opened = reqwest::Client::new()
        .post(gateway.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await?;
    let session = opened.headers()["mcp-session-id"].to_str()?.to_owned();

    for pad in [0, 100_000] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "test_elicitation", "arguments": {"message": "Name?", "pad": "x".repeat(pad)}}})
        .to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\nmcp-session-id: {session}\r\n\
             mcp-protocol-version: 2025-11-25\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        // Warm up first: pools, buffers and caches that every call shares are not its own.
        let warm = waiting_calls(addr, &request, 10).await;
        let region = Region::new(GLOBAL);
        let calls = waiting_calls(addr, &request, 100).await;
        let change = region.change();
        let per_call = change.bytes_allocated.saturating_sub(change.bytes_deallocated) / calls.len();
        println!(
            "request {} B: {per_call} B of live heap per waiting call",
            body.len()
        );
        assert!(
            per_call <= bound + body.len(),
            "{per_call} B per waiting call, above {bound} B + its {} B request",
            body.len()
        );
        drop((warm, calls));
    }
    gateway.shutdown().await?;
    backend.shutdown().await?;
    Ok(())
}
