//! Running the gateway: the admin listener ([`admin`]: `/metrics`, `/healthz`, `/readyz`),
//! readiness and the backends' health probe ([`readiness`]), and reloading keys and the
//! listener certificate while it serves ([`reload`]), and the pins file (`pins.rs`); the proxy a config reload swaps (`live.rs`). Imports the request path's stages, never
//! the composition root (`app`) or [`crate::cli`].

pub mod admin;
pub(crate) mod live;
pub(crate) mod pins;
pub(crate) mod readiness;
pub mod reload;
