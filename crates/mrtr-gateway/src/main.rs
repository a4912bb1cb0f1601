//! The `mrtr-gateway` binary; see `mrtr-gateway --help` and `docs/gateway.md`.

#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> std::process::ExitCode {
    mrtr_gateway::cli::run(std::env::args_os(), |name| std::env::var(name).ok()).await
}
