//! The backends' integration tests, one test binary: each module runs a backend directly under an
//! rmcp client.

mod client_error_status;
mod demo_client;
