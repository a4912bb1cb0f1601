//! The benchmark's mock MCP backend; see `mrtr_bench::backend`.

#![forbid(unsafe_code)]

use clap::{Arg, ArgAction, Command};
use mrtr_bench::backend::{self, Era};

fn main() -> std::io::Result<()> {
    let matches = Command::new("mock-backend")
        .about("Fast mock MCP backend for gateway-bench: JSON, SSE and MRTR answers")
        .arg(Arg::new("listen").long("listen").default_value("127.0.0.1:0"))
        .arg(
            Arg::new("legacy")
                .long("legacy")
                .action(ArgAction::SetTrue)
                .help("Speak the initialize era (2025-11-25, with a session) instead of 2026-07-28"),
        )
        .arg(
            Arg::new("stdio")
                .long("stdio")
                .action(ArgAction::SetTrue)
                .help("Serve over stdin and stdout (one JSON-RPC message per line) instead of --listen"),
        )
        .arg(
            Arg::new("work-us")
                .long("work-us")
                .value_parser(clap::value_parser!(u64))
                .default_value("0")
                .help("With --stdio: microseconds of CPU spent on each message before it is answered"),
        )
        .get_matches();
    let era = if matches.get_flag("legacy") {
        Era::Legacy
    } else {
        Era::Modern
    };
    if matches.get_flag("stdio") {
        let work = *matches.get_one::<u64>("work-us").expect("has a default");
        return backend::serve_stdio(era, std::time::Duration::from_micros(work));
    }
    let listen = matches.get_one::<String>("listen").expect("has a default");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let listener = tokio::net::TcpListener::bind(listen.as_str()).await?;
            mrtr_bench::announce("mock-backend", listener.local_addr()?);
            backend::serve_era(listener, era).await
        })
}
