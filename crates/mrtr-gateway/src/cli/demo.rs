//! `--demo`: two built-in MRTR backends (rmcp) served in-process behind the gateway.
//!
//! * `alpha` answers in `application/json`; `beta` answers in `text/event-stream`.
//! * Both offer `whoami`, `delete_branch` (one round) and `deploy` (two rounds), so those are
//!   exposed as `alpha__…` and `beta__…`; `provision_cluster` (alpha, three rounds),
//!   `archive_repo` and `migrate_database` (beta) keep their names. Both offer the prompt
//!   `release_notes` (one round) and a resource `demo://{alpha|beta}/audit-log` (one round).

use std::io;

use mrtr_backends::{DemoBackend, ResponseMode, ServedBackend, serve};

use crate::upstream::Backend;

/// The running demo backends.
#[derive(Debug)]
pub(super) struct DemoBackends {
    /// The backends to configure in the gateway.
    pub backends: Vec<Backend>,
    /// The servers (keep them alive while the gateway runs).
    pub servers: Vec<ServedBackend>,
}

/// Starts `alpha` (JSON) and `beta` (SSE) on ephemeral loopback ports.
pub(super) async fn start_backends() -> io::Result<DemoBackends> {
    let alpha = DemoBackend::alpha("alpha").map_err(io::Error::other)?;
    let beta = DemoBackend::beta("beta").map_err(io::Error::other)?;
    let alpha = serve(alpha, ResponseMode::Json).await?;
    let beta = serve(beta, ResponseMode::Sse).await?;
    let backends = vec![
        Backend::new("alpha", &alpha.url()).map_err(io::Error::other)?,
        Backend::new("beta", &beta.url()).map_err(io::Error::other)?,
    ];
    Ok(DemoBackends {
        backends,
        servers: vec![alpha, beta],
    })
}

/// What `--demo` prints once the gateway listens at `url`.
pub(super) fn instructions(url: &str) -> String {
    format!(
        r#"
mrtr-gateway demo: MCP endpoint {url}
  backends: alpha (JSON answers), beta (SSE answers), both built with rmcp

Try it with any MCP 2026-07-28 client, or with curl and jq (any POSIX shell):

  mcp() {{ curl -s {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' "$@" | sed -n 's/^data: //; /^{{/p'; }}
  META='"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{}}}}}}'

  # the merged tool list (shared names are prefixed: alpha__deploy, beta__deploy, ...)
  mcp -H 'Mcp-Method: tools/list' \
    -d '{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{'"$META"'}}}}' | jq -c '[.result.tools[].name]'

  # round 1: beta asks for confirmation; its requestState comes back sealed ("mrtr4....")
  mcp -H 'Mcp-Method: tools/call' -H 'Mcp-Name: beta__delete_branch' \
    -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"beta__delete_branch","arguments":{{"repo":"acme/api","branch":"old"}},'"$META"'}}}}' \
    | tee round1.json | jq .

  # round 2: answer and echo the sealed state, with the same arguments; the gateway sends it back to beta
  STATE=$(jq -r .result.requestState round1.json)
  mcp -H 'Mcp-Method: tools/call' -H 'Mcp-Name: beta__delete_branch' \
    -d '{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"beta__delete_branch","arguments":{{"repo":"acme/api","branch":"old"}},"inputResponses":{{"confirm_delete":{{"action":"accept","content":{{"confirm":true}}}}}},"requestState":"'"$STATE"'",'"$META"'}}}}' \
    | jq -c .result

Each step explained: the README's "Walkthrough". Stop with Ctrl-C.
"#
    )
}
