//! Command-line options of the `mrtr-gateway` binary.
//!
//! ```
//! use mrtr_gateway::cli::{Command, parse};
//!
//! let env = |_: &str| None;
//! let Command::Run(settings) = parse(["mrtr-gateway", "--demo"], env).unwrap() else { panic!() };
//! assert!(settings.demo && settings.keyring.is_none());
//! assert_eq!(settings.listen.to_string(), "127.0.0.1:8080");
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command as Clap, value_parser};
use http::HeaderName;
use tower_mrtr::Keyring;

use crate::{Backend, GatewayConfig, HostPolicy, OriginPolicy};

/// Environment variable holding the keyring.
pub const KEYS_ENV: &str = "MRTR_KEYS";

const ABOUT: &str = "A multi-backend MCP (2026-07-28) gateway that relays multi round-trip requests \
statelessly: backend requestState is sealed (XChaCha20-Poly1305) together with the backend that \
minted it, so any replica holding the same keys can route the retry.";

const AFTER_HELP: &str = "\
KEYS:
  The keyring comes from the environment variable MRTR_KEYS or from --keys-file, in the form
  'kid:base64url-32-bytes[,kid:base64url-32-bytes...]'; the first key seals, every key opens.
  Generate an entry with --generate-key KID. Without keys the gateway refuses to start, except
  in --demo mode, which generates an ephemeral key.

EXAMPLES:
  mrtr-gateway --demo
  MRTR_KEYS=\"$(mrtr-gateway --generate-key k1)\" mrtr-gateway --listen 127.0.0.1:8080 \\
      --backend github=http://127.0.0.1:9001/mcp --backend jira=http://127.0.0.1:9002/mcp";

/// What the binary was asked to do.
#[derive(Debug)]
pub enum Command {
    /// Serve.
    Run(Box<Settings>),
    /// Print a fresh keyring entry with this key id, and exit.
    GenerateKey(String),
}

/// Parsed settings for a run.
#[derive(Debug)]
pub struct Settings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Start the two built-in demo backends.
    pub demo: bool,
    /// Keys from `MRTR_KEYS` or `--keys-file`, if any.
    pub keyring: Option<Keyring>,
    /// Everything else.
    pub config: GatewayConfig,
}

fn command() -> Clap {
    let secs = |name: &'static str, default: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("SECONDS")
            .default_value(default)
            .value_parser(value_parser!(u64))
            .help(help)
    };
    Clap::new("mrtr-gateway")
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .after_help(AFTER_HELP)
        .arg(
            Arg::new("listen")
                .long("listen")
                .value_name("ADDR")
                .default_value("127.0.0.1:8080")
                .value_parser(value_parser!(SocketAddr))
                .help("Address to serve MCP on, at the path /mcp (port 0 picks a free port)"),
        )
        .arg(
            Arg::new("backend")
                .long("backend")
                .value_name("NAME=URL")
                .action(ArgAction::Append)
                .value_parser(|s: &str| s.parse::<Backend>())
                .help("A backend's Streamable HTTP endpoint (http:// only); repeat for several. NAME is its route and name prefix"),
        )
        .arg(
            Arg::new("demo")
                .long("demo")
                .action(ArgAction::SetTrue)
                .help("Start two built-in MRTR demo backends (alpha: JSON answers, beta: SSE answers) and print how to try them; uses an ephemeral key unless keys are given"),
        )
        .arg(
            Arg::new("keys-file")
                .long("keys-file")
                .value_name("PATH")
                .help("Read the keyring from a file instead of MRTR_KEYS (entries separated by commas or newlines, '#' starts a comment line)"),
        )
        .arg(
            Arg::new("generate-key")
                .long("generate-key")
                .value_name("KID")
                .help("Print a new keyring entry 'KID:key' and exit"),
        )
        .arg(
            Arg::new("principal-header")
                .long("principal-header")
                .value_name("NAME")
                .value_parser(|s: &str| s.parse::<HeaderName>())
                .help("Bind every sealed requestState to this request header's value (set by an authenticating proxy in front, which must strip it from client requests)"),
        )
        .arg(
            Arg::new("allowed-origin")
                .long("allowed-origin")
                .value_name("ORIGIN")
                .action(ArgAction::Append)
                .help("A browser Origin to accept (e.g. https://app.example.com); repeat for several. Requests without Origin are always accepted"),
        )
        .arg(
            Arg::new("no-loopback-origins")
                .long("no-loopback-origins")
                .action(ArgAction::SetTrue)
                .help("Refuse http(s)://localhost, 127.0.0.1 and [::1] origins, which are accepted by default"),
        )
        .arg(
            Arg::new("allowed-host")
                .long("allowed-host")
                .value_name("HOST")
                .action(ArgAction::Append)
                .help("A Host header value to accept (any port); repeat for several. Default: loopback names when listening on a loopback address, any Host otherwise"),
        )
        .arg(secs("catalog-ttl", "30", "How long backend tool/prompt/resource lists are trusted before they are listed again on demand"))
        .arg(secs("envelope-ttl", "600", "How long a sealed requestState stays valid"))
        .arg(secs("backend-timeout", "60", "How long to wait for a backend's response headers"))
        .arg(
            Arg::new("max-request-body")
                .long("max-request-body")
                .value_name("BYTES")
                .default_value("2097152")
                .value_parser(value_parser!(usize))
                .help("Largest request body accepted (HTTP 413 above)"),
        )
}

/// Parses the command line; `env` reads environment variables (`MRTR_KEYS`).
pub fn parse<I, T>(args: I, env: impl Fn(&str) -> Option<String>) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut clap = command();
    let matches = clap.try_get_matches_from_mut(args)?;
    if let Some(kid) = matches.get_one::<String>("generate-key") {
        return Ok(Command::GenerateKey(kid.clone()));
    }
    settings(&matches, env)
        .map(|s| Command::Run(Box::new(s)))
        .map_err(|message| clap.error(clap::error::ErrorKind::ValueValidation, message))
}

fn settings(m: &ArgMatches, env: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let demo = m.get_flag("demo");
    let backends: Vec<Backend> = m
        .get_many::<Backend>("backend")
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let mut names: Vec<&str> = backends.iter().map(Backend::name).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("backend name {:?} is used twice", w[0]));
    }
    if backends.is_empty() && !demo {
        return Err("no backend: give --backend NAME=URL (at least once) or --demo".to_owned());
    }
    let keyring = match (
        m.get_one::<String>("keys-file"),
        env(KEYS_ENV).filter(|k| !k.trim().is_empty()),
    ) {
        (Some(_), Some(_)) => return Err(format!("set either {KEYS_ENV} or --keys-file, not both")),
        (Some(path), None) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read --keys-file {path}: {e}"))?;
            Some(parse_keys(&text).map_err(|e| format!("invalid keyring in {path}: {e}"))?)
        }
        (None, Some(keys)) => {
            Some(parse_keys(&keys).map_err(|e| format!("invalid keyring in {KEYS_ENV}: {e}"))?)
        }
        (None, None) => None,
    };
    if keyring.is_none() && !demo {
        return Err(format!(
            "no keys: set {KEYS_ENV} (or --keys-file) to 'kid:base64url-key,...'; generate one with `mrtr-gateway --generate-key k1`. \
             Every replica must share the same keyring."
        ));
    }
    let secs = |name: &str| Duration::from_secs(*m.get_one::<u64>(name).expect("has a default"));
    let origins = m
        .get_many::<String>("allowed-origin")
        .into_iter()
        .flatten()
        .cloned();
    let mut config = GatewayConfig::new(backends);
    config.principal_header = m.get_one::<HeaderName>("principal-header").cloned();
    config.origins = OriginPolicy::new(origins, !m.get_flag("no-loopback-origins"));
    config.hosts = m
        .get_many::<String>("allowed-host")
        .map(|hosts| HostPolicy::only(hosts.cloned()));
    config.catalog_ttl = secs("catalog-ttl");
    config.envelope_ttl = secs("envelope-ttl");
    config.backend_timeout = secs("backend-timeout");
    config.max_request_body = *m.get_one::<usize>("max-request-body").expect("has a default");
    Ok(Settings {
        listen: *m.get_one::<SocketAddr>("listen").expect("has a default"),
        demo,
        keyring,
        config,
    })
}

/// Parses a keyring written with commas and/or newlines between entries, ignoring `#` lines.
pub fn parse_keys(text: &str) -> Result<Keyring, tower_mrtr::KeyringError> {
    let entries: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    entries.join(",").parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], keys: Option<&str>) -> Result<Settings, String> {
        let keys = keys.map(str::to_owned);
        match parse(
            std::iter::once("mrtr-gateway").chain(args.iter().copied()),
            |_| keys.clone(),
        ) {
            Ok(Command::Run(s)) => Ok(*s),
            Ok(Command::GenerateKey(_)) => Err("generate".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn refuses_to_start_without_keys_outside_demo() {
        let error = run(&["--backend", "a=http://127.0.0.1:1/mcp"], None).unwrap_err();
        assert!(error.contains("no keys: set MRTR_KEYS"), "{error}");
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let settings = run(
            &[
                "--backend",
                "a=http://127.0.0.1:1/mcp",
                "--principal-header",
                "x-user",
            ],
            Some(&keys),
        )
        .unwrap();
        assert_eq!(settings.keyring.unwrap().active_key_id().as_str(), "k1");
        assert_eq!(settings.config.principal_header.unwrap().as_str(), "x-user");
    }

    #[test]
    fn refuses_bad_backends() {
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        assert!(run(&[], Some(&keys)).unwrap_err().contains("no backend"));
        assert!(
            run(
                &["--backend", "a=http://x/mcp", "--backend", "a=http://y/mcp"],
                Some(&keys)
            )
            .unwrap_err()
            .contains("twice")
        );
        assert!(run(&["--backend", "a__b=http://x/mcp"], Some(&keys)).is_err());
    }

    #[test]
    fn keys_files_accept_newlines_and_comments() {
        let a = Keyring::generate("new").unwrap().to_config_string();
        let b = Keyring::generate("old").unwrap().to_config_string();
        let ring = parse_keys(&format!("# active first\n{}\n{}\n", *a, *b)).unwrap();
        assert_eq!(ring.active_key_id().as_str(), "new");
        assert_eq!(ring.len(), 2);
    }
}
