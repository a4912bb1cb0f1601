//! The `mrtr-gateway` binary: its command line and config file ([`parse`]), `--demo`
//! (`demo.rs`) and the run from start to drain ([`run()`]). The top room: it imports the
//! composition root, `ops` and the stages, and nothing imports it.
//!
//! Every flag is a field of [`Settings`], which is also the config file's key
//! (`file.rs`); a flag given on the command line wins over the file, the file over the flag's
//! default. `--backend` flags replace the file's `[[backend]]` sections.

#[cfg(feature = "demo")]
mod demo;
mod file;
mod pin;
mod reload;
mod run;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use clap::parser::ValueSource;
use clap::{Args, Command as Clap, FromArgMatches};
use tower_mrtr::KeyringHandle;

pub use self::run::run;
use crate::config::{GatewayConfig, Settings};
use crate::ops::reload::{KeysFile, parse_keys};
use crate::tls::ListenerTls;

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
  in --demo mode, which generates an ephemeral key. A --keys-file is re-read on SIGHUP and when
  it changes (rotation without restarts); a file that does not parse keeps the keys in use.

CONFIG FILE:
  --config FILE takes every option below as a TOML key of the same name (without '--'), plus
  [[backend]] sections with url, timeout, TLS files and headers (credentials for the backend).
  Options given on the command line win. See docs/gateway.toml.

LOGGING:
  Logs go to stderr, filtered by RUST_LOG (default 'info,rmcp=warn'), as text or, with
  --log-format json, one JSON object per line. Every request gets an access log line at info
  (target mrtr_gateway::access: method, target, backend, status, duration; never bodies,
  envelopes or credentials); RUST_LOG=info,mrtr_gateway::access=off turns it off.

OVERLOAD AND SLOW PEERS:
  Over --max-in-flight requests the gateway answers 503 with Retry-After: 1 and a JSON-RPC
  error at once. Request bodies must arrive within --request-body-timeout, request heads within
  --client-idle-timeout (which also closes idle client connections); backend answers that send
  nothing for --backend-stall-timeout (stdio backends: --stdio-stall-timeout) are ended (SSE:
  with a JSON-RPC error event). One principal holds at most max-calls-per-principal (16) of the
  64 places of a stdio process every principal shares.

SIGNALS:
  SIGTERM drains: /readyz turns 503, answers carry 'Connection: close', the listener closes after
  --drain-delay, and open requests and streams get until --drain-timeout; then exit 0.
  SIGHUP re-reads the keys file, the listener certificate, the pins file and the config file
  (backends, [[policy]], [[rate-limit]] and [oauth] apply; other settings need a restart).

PINNING:
  mrtr-gateway pin --config FILE > pins.toml lists every configured backend's tools, prompts and
  resource templates and prints their definitions' digests, for [pinning] file = 'pins.toml'.

EXAMPLES:
  mrtr-gateway --demo
  (umask 077 && mrtr-gateway --generate-key k1 > keys)   # once; every replica reads this file
  mrtr-gateway --keys-file keys --listen 127.0.0.1:8080 \\
      --backend github=http://127.0.0.1:9001/mcp --backend jira=https://jira.internal/mcp
  mrtr-gateway --config /etc/mrtr/gateway.toml --admin-listen 0.0.0.0:9090";

/// What the binary was asked to do.
#[derive(Debug)]
pub enum Command {
    /// Serve.
    Run(Box<Run>),
    /// Print a fresh keyring entry with this key id, and exit.
    GenerateKey(String),
    /// Print the pins of the configured backends' definitions as they are now (`pin`), and exit.
    Pin(Box<GatewayConfig>),
}

/// Where the keyring comes from.
#[derive(Debug)]
pub enum Keys {
    /// `MRTR_KEYS`: fixed for the life of the process.
    Fixed(KeyringHandle),
    /// `--keys-file`: re-read on SIGHUP and on change.
    File(Arc<KeysFile>),
}

impl Keys {
    /// The handle the gateway reads the keyring through.
    pub fn handle(&self) -> KeyringHandle {
        match self {
            Self::Fixed(keyring) => keyring.clone(),
            Self::File(file) => file.handle().clone(),
        }
    }
}

/// A run, resolved: the settings with their backends and listener TLS loaded, and the keys.
#[derive(Debug)]
pub struct Run {
    /// Keys from `MRTR_KEYS` or `--keys-file`, if any (`--demo` runs without).
    pub keys: Option<Keys>,
    /// The gateway's configuration; `config.settings` holds every setting as given.
    pub config: GatewayConfig,
    /// The `--config` file, re-read while the gateway runs (`reload.rs`).
    file: Option<reload::ConfigFile>,
}

/// The program's command line: every [`Settings`] field as a flag, with the help texts above.
fn command() -> Clap {
    // After the settings' arguments, so that their type's doc comment is not taken for the
    // program's description.
    Settings::augment_args(Clap::new("mrtr-gateway"))
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .long_about(None)
        .after_help(AFTER_HELP)
        .subcommand(
            Clap::new("pin")
                .about("Print the digests of the configured backends' tool, prompt and resource-template definitions as a pins file ([pinning] file), and exit")
                .arg(
                    clap::Arg::new("config")
                        .long("config")
                        .value_name("FILE")
                        .required(true)
                        .value_parser(clap::value_parser!(PathBuf))
                        .help("The gateway's config file, whose backends are listed"),
                ),
        )
}

/// Parses the command line; `env` reads environment variables (`MRTR_KEYS`, header sources).
pub fn parse<I, T>(args: I, env: impl Fn(&str) -> Option<String>) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut clap = command();
    let mut matches = clap
        .try_get_matches_from_mut(args)
        .map_err(|error| without_credentials(error, &mut clap))?;
    if let Some(kid) = matches.get_one::<String>("generate_key") {
        return Ok(Command::GenerateKey(kid.clone()));
    }
    if let Some(pin) = matches.subcommand_matches("pin") {
        let path = pin.get_one::<PathBuf>("config").cloned().unwrap_or_default();
        let settings =
            file::load(&path).map_err(|m| clap.error(clap::error::ErrorKind::ValueValidation, m))?;
        let backends = resolve_backends(&settings, &env)
            .map_err(|m| clap.error(clap::error::ErrorKind::ValueValidation, m))?;
        let mut config = GatewayConfig::new(backends);
        config.settings = settings;
        return Ok(Command::Pin(Box::new(config)));
    }
    let path = matches.get_one::<PathBuf>("config").cloned();
    let settings = match &path {
        Some(path) => match file::load(path) {
            Ok(settings) => settings,
            Err(message) => return Err(clap.error(clap::error::ErrorKind::ValueValidation, message)),
        },
        None => Settings::default(),
    };
    let delay_given = matches.value_source("drain_delay") == Some(ValueSource::CommandLine)
        || settings.drain_delay != Settings::default().drain_delay;
    // What the command line gave wins over the file: only those values are applied (the
    // defaults are in the file's settings already).
    let defaulted: Vec<String> = matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) != Some(ValueSource::CommandLine))
        .map(|id| id.as_str().to_owned())
        .collect();
    for id in defaulted {
        let _ = matches.try_clear_id(&id);
    }
    let mut settings = merged(settings, &matches)?;
    if settings.demo && !delay_given {
        // No load balancer watches a demo's /readyz: a stop need not wait for one to notice.
        settings.drain_delay = crate::config::Seconds::from_secs(0);
    }
    let file = path.map(|path| reload::ConfigFile::new(path, matches));
    resolve(settings, &env)
        .map(|mut run| {
            run.config.reloadable = file.is_some();
            Command::Run(Box::new(Run { file, ..run }))
        })
        .map_err(|message| clap.error(clap::error::ErrorKind::ValueValidation, message))
}

/// The file's `settings` with what the command line gave (`matches`, holding only that) over
/// them.
fn merged(mut settings: Settings, matches: &clap::ArgMatches) -> Result<Settings, clap::Error> {
    let file_store = settings.shared_store.take();
    settings.update_from_arg_matches(matches)?;
    // `--shared-store URL` sets the url of the file's table, keeping its other keys.
    settings.shared_store = match (file_store, settings.shared_store.take()) {
        (Some(mut table), Some(given)) => {
            table.url = given.url;
            Some(table)
        }
        (table, given) => given.or(table),
    };
    Ok(settings)
}

/// clap repeats a refused value in its message; a backend URL refused for carrying
/// `user:password@` must not reach the log that way, so such a value is left out.
fn without_credentials(error: clap::Error, clap: &mut Clap) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidValue) else {
        return error;
    };
    if error.kind() != ErrorKind::ValueValidation || !value.contains('@') {
        return error;
    }
    let arg = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.clone(),
        _ => "an option".to_owned(),
    };
    let reason = std::error::Error::source(&error).map_or_else(String::new, |e| format!(": {e}"));
    clap.error(
        ErrorKind::ValueValidation,
        format!("invalid value for '{arg}'{reason}"),
    )
}

/// The backends `settings` name, resolved (TLS files, header sources), each name used once.
fn resolve_backends(
    settings: &Settings,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<crate::upstream::Backend>, String> {
    let backends = settings
        .backend
        .iter()
        .map(|spec| spec.resolve(settings.backend_ca.as_deref(), env))
        .collect::<Result<Vec<_>, _>>()?;
    let mut names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("backend name {:?} is used twice", w[0]));
    }
    Ok(backends)
}

/// Checks the settings as a whole and loads what they name: backends (their TLS files and
/// header sources), the keys, the listener's certificate.
fn resolve(settings: Settings, env: &impl Fn(&str) -> Option<String>) -> Result<Run, String> {
    if settings.demo && !cfg!(feature = "demo") {
        return Err(
            "--demo needs the demo backends, which this build leaves out (cargo feature `demo`)".to_owned(),
        );
    }
    let backends = checked_backends(&settings, env)?;
    let keys = match (
        &settings.keys_file,
        env(KEYS_ENV).filter(|k| !k.trim().is_empty()),
    ) {
        (Some(_), Some(_)) => return Err(format!("set either {KEYS_ENV} or --keys-file, not both")),
        (Some(path), None) => Some(Keys::File(Arc::new(KeysFile::load(path.clone())?))),
        (None, Some(keys)) => Some(Keys::Fixed(KeyringHandle::new(
            parse_keys(&keys).map_err(|e| format!("invalid keyring in {KEYS_ENV}: {e}"))?,
        ))),
        (None, None) => None,
    };
    if keys.is_none() && !settings.demo {
        return Err(format!(
            "no keys: set {KEYS_ENV} (or --keys-file) to 'kid:base64url-key,...'; generate one with `mrtr-gateway --generate-key k1`. \
             Every replica must share the same keyring."
        ));
    }
    let listener_tls = match (&settings.tls_cert, &settings.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(
            ListenerTls::load(cert.clone(), key.clone()).map_err(|e| e.to_string())?,
        )),
        (None, None) => None,
        _ => return Err("--tls-cert and --tls-key go together".to_owned()),
    };
    if settings.drain_delay > settings.drain_timeout {
        return Err("--drain-delay must not exceed --drain-timeout".to_owned());
    }
    let mut config = GatewayConfig::new(backends);
    config.listener_tls = listener_tls;
    config.settings = settings;
    let config = config.resolve_settings_in(env)?;
    Ok(Run {
        keys,
        config,
        file: None,
    })
}

/// The backends `settings` configure, resolved and checked with the settings they depend on
/// (at start and at each reload of the config file).
fn checked_backends(
    settings: &Settings,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<crate::upstream::Backend>, String> {
    let backends = resolve_backends(settings, env)?;
    if settings.principal_header.is_none()
        && settings.oauth.is_none()
        && let Some(backend) = backends
            .iter()
            .find(|b| b.command().is_some_and(|c| c.processes_per_principal().is_some()))
    {
        return Err(format!(
            "backend {:?}: process-per-principal needs principal-header (the header that names each request's principal) or [oauth]",
            backend.name()
        ));
    }
    if backends.is_empty() && !settings.demo {
        return Err(
            "no backend: give --backend NAME=URL (at least once), [[backend]] in --config, or --demo"
                .to_owned(),
        );
    }
    settings.one_principal_source()?;
    Ok(backends)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower_mrtr::Keyring;

    use super::*;
    use crate::ops::readiness::ReadyRule;
    use crate::upstream::Backend;

    /// `docs/gateway.md`'s table of options has a row for every option, so that a new one
    /// cannot go undocumented there.
    #[test]
    fn the_options_table_lists_every_option() {
        let doc = include_str!("../../../../docs/gateway.md");
        let command = command();
        let missing: Vec<&str> = command
            .get_arguments()
            .filter_map(clap::Arg::get_long)
            .filter(|long| *long != "help" && *long != "version")
            .filter(|long| {
                let (spaced, quoted) = (format!("`--{long} "), format!("`--{long}`"));
                // The option's first cell, which may name two options.
                !doc.lines().filter_map(|line| line.strip_prefix("| ")).any(|row| {
                    let cell = row.split(" | ").next().unwrap_or_default();
                    cell.contains(&spaced) || cell.contains(&quoted)
                })
            })
            .collect();
        assert!(
            missing.is_empty(),
            "docs/gateway.md's options table lacks {missing:?}"
        );
    }

    fn parsed(args: &[&str], keys: Option<&str>) -> Result<Run, String> {
        let keys = keys.map(str::to_owned);
        match parse(
            std::iter::once("mrtr-gateway").chain(args.iter().copied()),
            |_| keys.clone(),
        ) {
            Ok(Command::Run(s)) => Ok(*s),
            Ok(Command::GenerateKey(_)) => Err("generate".into()),
            Ok(Command::Pin(_)) => Err("pin".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// clap repeats a refused value; a URL's credentials must not reach the log that way, from
    /// the command line or from the file.
    #[test]
    fn a_url_with_credentials_is_refused_without_showing_them() {
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let error = parsed(
            &["--backend", "crm=http://user:s3cret@127.0.0.1:9001/mcp"],
            Some(&keys),
        )
        .unwrap_err();
        assert!(
            error.contains("--backend") && error.contains("carries credentials"),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
        let text = "[[backend]]\nname = \"crm\"\nurl = \"http://user:s3cret@127.0.0.1:9001/mcp\"\n";
        let error = file::parse(text, "t.toml").unwrap_err();
        assert!(
            error.contains("t.toml:3") && error.contains("carries credentials"),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
        // Other refused values are still shown, which is what helps.
        let error = parsed(&["--max-rounds", "zero"], Some(&keys)).unwrap_err();
        assert!(error.contains("'zero'"), "{error}");
    }

    #[test]
    fn refuses_to_start_without_keys_outside_demo() {
        let error = parsed(&["--backend", "a=http://127.0.0.1:1/mcp"], None).unwrap_err();
        assert!(error.contains("no keys: set MRTR_KEYS"), "{error}");
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let settings = parsed(
            &[
                "--backend",
                "a=http://127.0.0.1:1/mcp",
                "--principal-header",
                "x-user",
            ],
            Some(&keys),
        )
        .unwrap();
        let Some(Keys::Fixed(keyring)) = settings.keys else {
            panic!("keys from the environment")
        };
        assert_eq!(keyring.load().active_key_id().as_str(), "k1");
        assert_eq!(
            settings.config.settings.principal_header.unwrap().as_str(),
            "x-user"
        );
    }

    #[test]
    fn refuses_bad_backends() {
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        assert!(parsed(&[], Some(&keys)).unwrap_err().contains("no backend"));
        assert!(
            parsed(
                &["--backend", "a=http://x/mcp", "--backend", "a=http://y/mcp"],
                Some(&keys)
            )
            .unwrap_err()
            .contains("twice")
        );
        assert!(parsed(&["--backend", "a__b=http://x/mcp"], Some(&keys)).is_err());
    }

    #[test]
    fn processes_per_principal_need_a_principal_header() {
        let dir = std::env::temp_dir().join(format!("mrtr-cli-pp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            "[[backend]]\nname = \"fs\"\ncommand = [\"x\"]\nprocess-per-principal = true\n",
        )
        .unwrap();
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let path = config.to_str().unwrap();
        let error = parsed(&["--config", path], Some(&keys)).unwrap_err();
        assert!(
            error.contains("process-per-principal needs principal-header"),
            "{error}"
        );
        let run = parsed(&["--config", path, "--principal-header", "x-user"], Some(&keys)).unwrap();
        assert!(
            run.config.backends[0]
                .command()
                .unwrap()
                .processes_per_principal()
                .is_some()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(feature = "demo")]
    #[test]
    fn a_demo_stops_without_a_drain_delay_unless_one_is_given() {
        let demo = parsed(&["--demo"], None).unwrap();
        assert_eq!(demo.config.settings.drain_delay.0, Duration::ZERO);
        let given = parsed(&["--demo", "--drain-delay", "3"], None).unwrap();
        assert_eq!(given.config.settings.drain_delay.0, Duration::from_secs(3));
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let served = parsed(&["--backend", "a=http://127.0.0.1:1/mcp"], Some(&keys)).unwrap();
        assert_eq!(served.config.settings.drain_delay.0, Duration::from_secs(5));
    }

    #[test]
    fn flags_override_the_config_file() {
        let dir = std::env::temp_dir().join(format!("mrtr-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            "listen = \"127.0.0.1:7000\"\ndrain-timeout = 20\nready-backends = \"all\"\n\
             [[backend]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\ntimeout = 3\n",
        )
        .unwrap();
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let path = config.to_str().unwrap();
        let from_file = parsed(&["--config", path], Some(&keys)).unwrap();
        assert_eq!(from_file.config.settings.listen.port(), 7000);
        assert_eq!(from_file.config.settings.drain_timeout.0, Duration::from_secs(20));
        assert_eq!(from_file.config.settings.ready_backends, ReadyRule::All);
        assert_eq!(
            from_file.config.backends[0].timeout(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            from_file.config.settings.drain_delay.0,
            Duration::from_secs(5),
            "the flag's default"
        );

        let overridden = parsed(
            &[
                "--config",
                path,
                "--listen",
                "127.0.0.1:7001",
                "--drain-timeout",
                "9",
                "--backend",
                "b=http://127.0.0.1:2/mcp",
            ],
            Some(&keys),
        )
        .unwrap();
        assert_eq!(overridden.config.settings.listen.port(), 7001);
        assert_eq!(overridden.config.settings.drain_timeout.0, Duration::from_secs(9));
        assert_eq!(
            overridden.config.settings.ready_backends,
            ReadyRule::All,
            "not given: still the file's"
        );
        let names: Vec<&str> = overridden.config.backends.iter().map(Backend::name).collect();
        assert_eq!(names, ["b"]);

        std::fs::write(&config, "listen = \"127.0.0.1:7000\"\nlisten_port = 1\n").unwrap();
        let error = parsed(&["--config", path], Some(&keys)).unwrap_err();
        assert!(
            error.contains(&format!("{path}:2: listen_port: unknown field")),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--shared-store URL` replaces the url of the file's `[shared-store]` table and keeps its
    /// other keys; a password in the URL is refused, in the flag as in the file.
    #[test]
    fn the_shared_store_flag_sets_the_files_url() {
        let dir = std::env::temp_dir().join(format!("mrtr-cli-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            "[shared-store]\nurl = \"redis://10.0.0.5:6379/2\"\nsingle-use = true\ntimeout = 0.1\n\
             [[backend]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n",
        )
        .unwrap();
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let path = config.to_str().unwrap();
        let store = |run: &Run| run.config.shared_store.as_ref().unwrap().settings().clone();
        let from_file = store(&parsed(&["--config", path], Some(&keys)).unwrap());
        assert_eq!(from_file.url.as_str(), "redis://10.0.0.5:6379/2");
        assert!(from_file.single_use);
        let flagged = parsed(
            &["--config", path, "--shared-store", "redis://127.0.0.1:7777"],
            Some(&keys),
        );
        let flagged = store(&flagged.unwrap());
        assert_eq!(flagged.url.as_str(), "redis://127.0.0.1:7777");
        assert_eq!(
            (flagged.single_use, flagged.timeout()),
            (true, Duration::from_millis(100))
        );
        let alone = parsed(
            &[
                "--backend",
                "a=http://127.0.0.1:1/mcp",
                "--shared-store",
                "redis://127.0.0.1",
            ],
            Some(&keys),
        );
        assert!(!store(&alone.unwrap()).single_use);
        let error = parsed(
            &[
                "--backend",
                "a=http://127.0.0.1:1/mcp",
                "--shared-store",
                "redis://:pw@127.0.0.1",
            ],
            Some(&keys),
        )
        .unwrap_err();
        assert!(
            error.contains("MRTR_SHARED_STORE_PASSWORD") && !error.contains("pw@"),
            "{error}"
        );
        let none = parsed(&["--backend", "a=http://127.0.0.1:1/mcp"], Some(&keys)).unwrap();
        assert!(none.config.shared_store.is_none() && none.config.rate_limits.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn https_backends_load_their_tls_files_at_start() {
        let keys = Keyring::generate("k1").unwrap().to_config_string();
        let error = parsed(
            &[
                "--backend",
                "a=https://127.0.0.1:1/mcp",
                "--backend-ca",
                "/nonexistent/ca.pem",
            ],
            Some(&keys),
        )
        .unwrap_err();
        assert!(
            error.contains("backend \"a\"") && error.contains("/nonexistent/ca.pem"),
            "{error}"
        );
        let error = parsed(
            &["--backend", "a=http://127.0.0.1:1/mcp", "--tls-cert", "/x.pem"],
            Some(&keys),
        )
        .unwrap_err();
        assert!(error.contains("--tls-cert and --tls-key go together"), "{error}");
    }
}
