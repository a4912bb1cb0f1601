//! The benchmark's mock MCP backend; see `mrtr_bench::backend`.

#![forbid(unsafe_code)]

use clap::{Arg, Command};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let matches = Command::new("mock-backend")
        .about("Fast mock MCP backend for gateway-bench: JSON, SSE and MRTR answers")
        .arg(Arg::new("listen").long("listen").default_value("127.0.0.1:0"))
        .get_matches();
    let listen = matches.get_one::<String>("listen").expect("has a default");
    let listener = tokio::net::TcpListener::bind(listen.as_str()).await?;
    mrtr_bench::announce("mock-backend", listener.local_addr()?);
    mrtr_bench::backend::serve(listener).await
}
