//! The bare hyper reverse proxy the gateway is compared with; see `mrtr_bench::bare`.

#![forbid(unsafe_code)]

use clap::{Arg, Command};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let matches = Command::new("bare-proxy")
        .about("Bare hyper 1.x reverse proxy (pooled client, streamed bodies) for gateway-bench")
        .arg(Arg::new("listen").long("listen").default_value("127.0.0.1:0"))
        .arg(
            Arg::new("backend")
                .long("backend")
                .required(true)
                .help("Backend URL, http://host:port/path"),
        )
        .get_matches();
    let listen = matches.get_one::<String>("listen").expect("has a default");
    let backend = matches.get_one::<String>("backend").expect("required");
    let proxy = backend
        .parse()
        .ok()
        .and_then(mrtr_bench::bare::BareProxy::new)
        .ok_or_else(|| std::io::Error::other(format!("not an http URL: {backend}")))?;
    let listener = tokio::net::TcpListener::bind(listen.as_str()).await?;
    mrtr_bench::announce("bare-proxy", listener.local_addr()?);
    proxy.serve(listener).await
}
