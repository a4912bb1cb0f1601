//! `mrtr-gateway`: a multi-backend MCP 2026-07-28 gateway that relays multi round-trip requests
//! (SEP-2322) statelessly, built on [`tower_mrtr::MrtrLayer`].
//!
//! [`start`] serves a [`GatewayConfig`] with a keyring until it is shut down; [`service`] is the
//! same stack as one tower service, to serve yourself. The stack is composed in one place,
//! [`app`], which reads outermost first (`docs/gateway.md`, "The stack", describes it for
//! operators).
//!
//! The source is sorted into rooms named for the stages a request meets, from the client to the
//! backend, each importing only rooms below it: `cli`, `app` (the composition root), `config`,
//! `ops`, `front`, `legacy`, `route`, `policy`, `audit` (the audit trail), `upstream` (every kind
//! of backend behind one seam), `auth`, `serve` (the HTTP server both listeners run), `store`
//! (the shared store of a fleet), `observe`, and the ground floor, `jsonrpc` and `tls`.
//! `CONTRIBUTING.md` has the table (what each holds and may import, where a
//! new feature goes), and a test holds the code to it.
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
mod audit;
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
pub mod store;
mod tasks;
pub mod tls;
mod upstream;

pub use app::{GatewayService, McpStack, RunningGateway, service, start, start_shared, start_with_keys};
pub use audit::{Audit, AuditOutput, AuditSettings};
pub use config::{AdvertiseUrl, GatewayConfig, LegacyEraPath, PositiveSeconds, Seconds, Settings};
pub use front::{Front, FrontBody, FrontFuture, FrontLayer, MCP_PATH};
pub use observe::logging::LogFormat;
pub use observe::trace::Traces;
pub use ops::live::Live;
pub use ops::readiness::{Readiness, ReadyRule};
pub use ops::{admin, reload};
pub use route::Proxy;
pub use route::headers::SUPPORTED_VERSIONS;
pub use route::pins::{PinEntry, PinKind, PinMode, PinningSettings, Pins, PinsFile, Unpinned};
pub use serve::drain::Lifecycle;
pub use tasks::Bridged;
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

    /// The members `jsonrpc::Members::of` finds in `text` (JSON already checked, on the hot
    /// path), as owned key and raw value texts.
    pub fn members_of(text: &str) -> Option<Vec<(String, String)>> {
        let members = crate::jsonrpc::Members::of(text)?;
        Some(
            members
                .0
                .into_iter()
                .map(|(k, v)| (k.into_owned(), v.to_owned()))
                .collect(),
        )
    }
}
