//! `mrtr-gateway`: a multi-backend MCP 2026-07-28 gateway that relays multi round-trip requests
//! (SEP-2322) statelessly, built on [`tower_mrtr::MrtrLayer`].
//!
//! [`start`] serves a [`GatewayConfig`] with a keyring until it is shut down; [`service`] is the
//! same stack as one tower service, to serve yourself. The stack is composed in one place,
//! [`app`], which reads outermost first (`docs/gateway.md`, "The stack", describes it for
//! operators).
//!
//! The source is sorted into rooms named for the stages a request meets, from the client to the
//! backend; each room imports only rooms below it in this table:
//!
//! | room | what it holds |
//! |---|---|
//! | `cli` | the binary: flags and config file (one declaration of every setting), `--demo`, the run |
//! | `app` | the composition root: the stack outermost first, the running gateway |
//! | `config` | [`GatewayConfig`], what the composition root is given |
//! | `ops` | the admin listener, readiness and the health probe, key and certificate reload |
//! | `front` | the accept loop, the HTTP layers, `Origin`/`Host` checks, shedding, deadlines, drain, request metrics |
//! | `legacy` | clients of the `initialize` era, bridged to the modern stack |
//! | `route` | the [`Proxy`] the MRTR layer wraps: routing, fan-out, the catalog, mirrored-header checks |
//! | `policy` | what a caller may call (`[[policy]]`) and how often (`[[rate-limit]]`) |
//! | `upstream` | backends, forwarding, backend bodies and their SSE reader, per-backend health state |
//! | `auth` | who a request comes from: the OAuth resource server (bearer tokens, the issuer's keys, the metadata) |
//! | `observe` | metric names and handles, the access log, logging (imports no stage) |
//! | `jsonrpc`, `tls` | the ground floor: JSON-RPC codes and bodies, TLS material |
//!
//! A new backend transport goes in `upstream`, a new way of knowing the caller in `auth`, a
//! new rule on what callers may do in `policy`, another check on client requests in `front`, a new admin endpoint in `ops`, a new setting in `cli`'s settings.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use mrtr_gateway::{GatewayConfig, start};
//!
//! let config = GatewayConfig::new(vec![
//!     "alpha=http://127.0.0.1:9001/mcp".parse()?,
//!     "beta=http://127.0.0.1:9002/mcp".parse()?,
//! ]);
//! let keyring = std::env::var("MRTR_KEYS")?.parse()?;
//! let gateway = start(config, keyring, "127.0.0.1:8080".parse()?).await?;
//! println!("serving MCP at {}", gateway.url());
//! gateway.wait().await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
mod front;
mod jsonrpc;
pub mod legacy;
mod observe;
mod ops;
pub mod policy;
mod route;
mod serve;
pub mod tls;
mod upstream;

pub use app::{GatewayService, McpStack, RunningGateway, service, start, start_shared, start_with_keys};
pub use config::{GatewayConfig, PositiveSeconds, Seconds, Settings};
pub use front::{Front, FrontBody, FrontFuture, FrontLayer, MCP_PATH};
pub use observe::logging::LogFormat;
pub use observe::trace::Traces;
pub use ops::readiness::{Readiness, ReadyRule};
pub use ops::{admin, reload};
pub use route::Proxy;
pub use route::headers::SUPPORTED_VERSIONS;
pub use serve::drain::Lifecycle;
pub use upstream::era::Era;
pub use upstream::stdio::StdioCommand;
pub use upstream::{Backend, BackendSpecError};

/// What the fuzz targets (`fuzz/`) exercise of the gateway's insides; not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::jsonrpc::{RawObject, error_body, rename_path, rename_target, set_param};
    pub use crate::legacy::session::SESSION_PURPOSE;
    pub use crate::ops::reload::parse_keys;
    pub use crate::route::catalog::{Names, SEPARATOR, expose};
}
