//! How the gateway reports what it does: metric names and handles ([`metrics`]), the access log
//! ([`access`]), where log lines go ([`logging`]) and OpenTelemetry traces ([`trace`]). Imports no stage of the request path (no
//! `front`, `legacy`, `route`, `upstream`, `ops` or `cli`): every stage reports through it.

pub(crate) mod access;
pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod trace;
