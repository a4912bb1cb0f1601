//! The gateway's integration tests, one test binary: a module per concern, each running the
//! gateway in process or as its binary (`CARGO_BIN_EXE_mrtr-gateway`). Run one module's tests
//! with `cargo test --workspace --test it -- tls::`.

mod access_log;
mod audit_sink;
mod backend_eras;
mod backend_health;
mod config_reload;
mod credentials;
mod drain;
mod http_layers;
mod legacy_backends;
mod no_resend;
mod operations;
mod overload;
mod pins_file;
mod principals;
mod processes;
mod stdio_backends;
mod tls;
mod transport;
