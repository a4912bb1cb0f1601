//! The command line and environment of the `axum_gateway` and `hyper_proxy` examples.
//!
//! ```text
//! EXAMPLE LISTEN BACKEND [BACKEND...]     serve MCP at http://LISTEN/mcp
//! EXAMPLE --mint-token SUBJECT            print a bearer token for SUBJECT, valid for an hour
//! ```
//!
//! `BACKEND` is `name=url[,target...]` ([`BackendSpec`]); the first backend also serves
//! everything not routed to another one. The keyring comes from `MRTR_KEYS`
//! (`kid:base64url-key,...`), the JWT secret from `JWT_SECRET` (at least 32 bytes).
//!
//! ```
//! use mrtr_examples::cli::{Command, parse};
//!
//! let env = |name: &str| match name {
//!     "JWT_SECRET" => Some("0123456789abcdef0123456789abcdef".to_owned()),
//!     _ => None,
//! };
//! let Ok(Command::MintToken { subject, .. }) = parse(["--mint-token", "alice"].map(String::from), env) else {
//!     panic!()
//! };
//! assert_eq!(subject, "alice");
//! // Serving needs a keyring too.
//! assert!(parse(["127.0.0.1:8080", "a=http://127.0.0.1:9001/mcp"].map(String::from), env).is_err());
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use tower_mrtr::Keyring;

use crate::forward::BackendSpec;

/// The audience the examples' tokens are minted for and checked against.
pub const AUDIENCE: &str = "mcp-gateway";

/// The environment variable holding the keyring.
pub const KEYS_ENV: &str = "MRTR_KEYS";

/// The environment variable holding the JWT secret.
pub const SECRET_ENV: &str = "JWT_SECRET";

/// Shortest accepted `JWT_SECRET`, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_SECRET_LEN: usize = 32;

/// How long a `--mint-token` token is valid.
pub const MINTED_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// What to do.
#[derive(Debug)]
pub enum Command {
    /// Serve.
    Run(Settings),
    /// Print a token for `subject`.
    MintToken {
        /// Who the token names.
        subject: String,
        /// The HS256 secret.
        secret: Secret,
    },
}

/// Everything an example needs to serve.
#[derive(Debug)]
pub struct Settings {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The backends, the default first.
    pub backends: Vec<BackendSpec>,
    /// The keys envelopes are sealed with.
    pub keyring: Keyring,
    /// The HS256 secret tokens are verified with.
    pub jwt_secret: Secret,
}

/// A secret, redacted in `Debug`.
#[derive(Clone)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Usage text for errors.
pub const USAGE: &str = "usage: EXAMPLE LISTEN name=url[,target...] [name=url[,target...]...]\n       \
    EXAMPLE --mint-token SUBJECT\n(environment: MRTR_KEYS, JWT_SECRET)";

/// Reads the arguments (without the program name) and the environment.
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Command, String> {
    let secret = || {
        let secret = env(SECRET_ENV).ok_or("set JWT_SECRET to a random secret of at least 32 bytes")?;
        if secret.len() < MIN_SECRET_LEN {
            return Err(format!("JWT_SECRET must have at least {MIN_SECRET_LEN} bytes"));
        }
        Ok(Secret(secret.into_bytes()))
    };
    let mut args = args.into_iter();
    let first = args.next().ok_or(USAGE)?;
    if first == "--mint-token" {
        let subject = args.next().ok_or("--mint-token needs a subject")?;
        return Ok(Command::MintToken {
            subject,
            secret: secret()?,
        });
    }
    let listen = first
        .parse()
        .map_err(|e| format!("invalid listen address {first:?}: {e}"))?;
    let backends = args
        .map(|spec| spec.parse())
        .collect::<Result<Vec<BackendSpec>, _>>()?;
    if backends.is_empty() {
        return Err(USAGE.to_owned());
    }
    let keyring = env(KEYS_ENV)
        .ok_or("set MRTR_KEYS to kid:base64url-key[,...] (mrtr-gateway --generate-key k1 makes one)")?
        .parse()
        .map_err(|e| format!("MRTR_KEYS: {e}"))?;
    Ok(Command::Run(Settings {
        listen,
        backends,
        keyring,
        jwt_secret: secret()?,
    }))
}

/// Reads the process's arguments and environment: the settings to serve with, or `None` once a
/// `--mint-token` token has been printed.
pub fn from_process() -> Result<Option<Settings>, String> {
    match parse(std::env::args().skip(1), |name| std::env::var(name).ok())? {
        Command::Run(settings) => Ok(Some(settings)),
        Command::MintToken { subject, secret } => {
            let token = crate::auth::mint(&secret.0, AUDIENCE, &subject, MINTED_TOKEN_TTL)
                .map_err(|e| format!("cannot mint a token: {e}"))?;
            println!("{token}");
            Ok(None)
        }
    }
}

/// Logs to stderr: `RUST_LOG` if set, else `info` with the MRTR layer's refusal reasons
/// (`tower_mrtr=debug`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_mrtr=debug"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
