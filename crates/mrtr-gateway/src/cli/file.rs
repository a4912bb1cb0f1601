//! `--config gateway.toml`: the [`Settings`] as a TOML file, each key named like its flag
//! (without `--`), plus `[[backend]]` sections for the backends ([`BackendSpec`]: URL, timeouts,
//! TLS files, static headers). Flags given on the command line override the file (see
//! [`crate::cli`]). `docs/gateway.toml` is a complete, commented example.
//!
//! Unknown keys and bad values are errors that name the file, the line, the section and the key.
//! Header values (credentials) are only read when the backends are resolved, from the file
//! itself, an environment variable or a file, and never appear in an error message or in
//! `Debug` output.
//!
//! [`BackendSpec`]: crate::config::BackendSpec

use std::ops::Range;
use std::path::Path;

use crate::config::Settings;

/// Reads and parses the file at `path`.
pub(super) fn load(path: &Path) -> Result<Settings, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    parse(&text, &path.display().to_string())
}

/// Parses config text over the settings' defaults; `origin` names it in errors.
pub(super) fn parse(text: &str, origin: &str) -> Result<Settings, String> {
    toml::from_str(text).map_err(|e| Locator { text, origin }.error(e.span(), e.message()))
}

/// Turns byte spans into `file:line: [section] key: message`.
struct Locator<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Locator<'_> {
    fn error(&self, span: Option<Range<usize>>, message: &str) -> String {
        let Some(span) = span else {
            return format!("{}: {message}", self.origin);
        };
        let start = span.start.min(self.text.len());
        let line = self.text[..start].matches('\n').count() + 1;
        let line_text = self.text.lines().nth(line - 1).unwrap_or_default();
        // The key is what stands before `=` on that line; the section is the last header above.
        let key = line_text
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| !k.is_empty());
        let section = self.text[..start]
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| l.starts_with('['))
            .map(|s| format!("{s} "))
            .unwrap_or_default();
        let message = message.trim();
        match key {
            Some(key) => format!("{}:{line}: {section}{key}: {message}", self.origin),
            None => format!("{}:{line}: {section}{message}", self.origin),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::BackendUrl;
    use crate::config::{BackendSpec, Seconds};
    use crate::observe::logging::LogFormat;
    use crate::ops::readiness::ReadyRule;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// Every key of the config file, top level and `[[backend]]`, with a value other than its
    /// default.
    const EVERY_KEY: &str = r#"
listen = "0.0.0.0:8080"
admin-listen = "0.0.0.0:9090"
keys-file = "/etc/mrtr/keys"
principal-header = "x-user"
allowed-origin = ["https://app.example.com"]
no-loopback-origins = true
allowed-host = ["mcp.example.com"]
catalog-ttl = 31
envelope-ttl = 601
backend-timeout = 61
max-request-body = 1000
reload-interval = 2
health-interval = 3
ready-backends = "all"
drain-delay = 4
drain-timeout = 25
backend-idle-timeout = 2.5
backend-stall-timeout = 120
max-in-flight = 64
request-body-timeout = 10
client-idle-timeout = 20
max-header-bytes = 16384
max-headers = 50
max-connections = 2000
log-format = "json"
tls-cert = "/etc/mrtr/tls.crt"
tls-key = "/etc/mrtr/tls.key"
backend-ca = "/etc/mrtr/ca.pem"

[[backend]]
name = "a"
url = "http://127.0.0.1:9001/mcp"

[[backend]]
name = "b"
url = "https://b.internal/mcp"
era = "legacy"
timeout = 5
idle-timeout = 0.5
stall-timeout = 30
ca-file = "/etc/mrtr/b-ca.pem"
client-cert = "/etc/mrtr/b.crt"
client-key = "/etc/mrtr/b.key"
headers.x-tenant = { value = "acme" }
"#;

    #[test]
    fn every_flag_has_a_key() {
        let file = parse(EVERY_KEY, "t.toml").unwrap();
        assert_eq!(file.admin_listen.unwrap().port(), 9090);
        assert_eq!(file.keys_file.as_deref(), Some(Path::new("/etc/mrtr/keys")));
        assert_eq!(file.principal_header.as_ref().map(|h| h.as_str()), Some("x-user"));
        assert_eq!(file.allowed_origin, ["https://app.example.com"]);
        assert!(file.no_loopback_origins);
        assert_eq!(file.allowed_host, ["mcp.example.com"]);
        let seconds = |s: Seconds| s.0.as_secs();
        assert_eq!(
            (
                seconds(file.catalog_ttl),
                seconds(file.envelope_ttl),
                seconds(file.backend_timeout)
            ),
            (31, 601, 61)
        );
        assert_eq!(file.max_request_body, 1000);
        assert_eq!(file.reload_interval.0, Duration::from_secs(2));
        assert_eq!(file.health_interval.map(|s| s.0), Some(Duration::from_secs(3)));
        assert_eq!(file.ready_backends, ReadyRule::All);
        assert_eq!((seconds(file.drain_delay), seconds(file.drain_timeout)), (4, 25));
        assert_eq!(file.backend_idle_timeout.0, Duration::from_millis(2500));
        assert_eq!(file.backend_stall_timeout.0, Duration::from_secs(120));
        assert_eq!(
            (file.max_in_flight.get(), file.max_header_bytes, file.max_headers),
            (64, 16384, 50)
        );
        assert_eq!(file.max_connections.get(), 2000);
        assert_eq!(file.request_body_timeout.0, Duration::from_secs(10));
        assert_eq!(file.client_idle_timeout.0, Duration::from_secs(20));
        assert_eq!(file.log_format, LogFormat::Json);
        assert_eq!(file.tls_cert.as_deref(), Some(Path::new("/etc/mrtr/tls.crt")));
        assert_eq!(file.tls_key.as_deref(), Some(Path::new("/etc/mrtr/tls.key")));
        assert_eq!(file.backend_ca.as_deref(), Some(Path::new("/etc/mrtr/ca.pem")));
    }

    #[test]
    fn every_backend_setting_has_a_key() {
        let file = parse(EVERY_KEY, "t.toml").unwrap();
        assert_eq!(file.backend.len(), 2);
        let b = &file.backend[1];
        assert_eq!(
            (b.name.as_str(), b.url.as_ref().map(BackendUrl::as_str)),
            ("b", Some("https://b.internal/mcp"))
        );
        assert_eq!(
            (file.backend[0].era, b.era),
            (None, Some(crate::upstream::era::Era::Legacy))
        );
        assert_eq!(b.timeout.map(|s| s.0), Some(Duration::from_secs(5)));
        assert_eq!(b.idle_timeout.map(|s| s.0), Some(Duration::from_millis(500)));
        assert_eq!(b.stall_timeout.map(|s| s.0), Some(Duration::from_secs(30)));
        assert_eq!(b.ca_file.as_deref(), Some(Path::new("/etc/mrtr/b-ca.pem")));
        assert_eq!(b.client_cert.as_deref(), Some(Path::new("/etc/mrtr/b.crt")));
        assert_eq!(b.client_key.as_deref(), Some(Path::new("/etc/mrtr/b.key")));
        let a = file.backend[0].resolve(None, &no_env).unwrap();
        assert_eq!(a.endpoint(), "http://127.0.0.1:9001/mcp");
        let tenant = BackendSpec {
            url: Some("http://b.internal/mcp".to_owned().try_into().unwrap()),
            ..b.clone()
        };
        let tenant = BackendSpec {
            ca_file: None,
            client_cert: None,
            client_key: None,
            ..tenant
        };
        let resolved = tenant.resolve(None, &no_env).unwrap();
        assert_eq!(resolved.headers()["x-tenant"], "acme");
        assert_eq!(resolved.era(), crate::upstream::era::Era::Legacy);
        let zero = parse("backend-idle-timeout = 0\n", "t.toml").unwrap_err();
        assert!(zero.contains("t.toml:1") && zero.contains("positive"), "{zero}");
    }

    /// The documented example stays valid: every key it shows parses.
    #[test]
    fn the_documented_example_parses() {
        let env = |name: &str| (name == "JIRA_MCP_TOKEN").then(|| "t".to_owned());
        let file = parse(include_str!("../../../../docs/gateway.toml"), "docs/gateway.toml").unwrap();
        assert_eq!(file.backend.len(), 4);
        assert_eq!(file.keys_file.as_deref(), Some(Path::new("/etc/mrtr/keys/keys")));
        assert!(file.backend[3].client_cert.is_some());
        let audit = file.audit.as_ref().expect("an [audit] table");
        assert_eq!(
            (audit.output, audit.record_arguments.len()),
            (crate::AuditOutput::File, 2)
        );
        let pinning = file.pinning.as_ref().expect("a [pinning] table");
        assert_eq!(
            (pinning.mode, pinning.unpinned),
            (crate::PinMode::Enforce, crate::Unpinned::Hold)
        );
        let memory_env = |name: &str| (name == "NODE_EXTRA_CA_CERTS").then(|| "/etc/ca.pem".to_owned());
        let memory = file.backend[2].resolve(None, &memory_env).unwrap();
        assert_eq!(
            memory.endpoint(),
            "stdio: npx -y @modelcontextprotocol/server-memory"
        );
        // The plain-HTTP backend with a header from the environment resolves as documented.
        let jira = file.backend.iter().find(|b| !b.headers.is_empty()).unwrap();
        if jira
            .url
            .as_ref()
            .is_some_and(|u| u.as_str().starts_with("http://"))
        {
            assert!(jira.resolve(None, &env).is_ok());
        }
    }

    /// The OAuth example parses, and its resource server, policy and limits build.
    #[test]
    fn the_documented_oauth_example_builds() {
        let file = parse(
            include_str!("../../../../docs/gateway-oauth.toml"),
            "docs/gateway-oauth.toml",
        )
        .unwrap();
        let oauth = file.oauth.clone().expect("an [oauth] table");
        assert_eq!(oauth.audience, "https://mcp.example.com/mcp");
        assert_eq!((file.policy.len(), file.rate_limit.len()), (3, 3));
        let mut config = crate::GatewayConfig::new(Vec::new());
        config.settings = file;
        let config = config.resolve_settings().unwrap();
        assert!(config.auth.is_some() && config.policy.is_some() && config.rate_limits.is_some());
        assert_eq!(config.principal_header(), Some(crate::auth::PRINCIPAL_HEADER));
    }

    /// And it names every setting, so that a new one cannot go undocumented there: each
    /// option's key appears as `key =` (or, for a table, `[key]`), set or commented out.
    #[test]
    fn the_documented_example_names_every_setting() {
        use clap::Args;
        let example = include_str!("../../../../docs/gateway.toml");
        // Not file keys: read before the file, or given as `[[backend]]` sections, or a
        // try-out switch.
        let not_in_files = ["config", "generate-key", "backend", "demo"];
        let command = Settings::augment_args(clap::Command::new("t"));
        let missing: Vec<&str> = command
            .get_arguments()
            .filter_map(clap::Arg::get_long)
            .filter(|long| !not_in_files.contains(long))
            .filter(|long| {
                !example.lines().any(|line| {
                    let line = line.trim_start_matches('#').trim_start();
                    line.strip_prefix(long)
                        .is_some_and(|rest| rest.trim_start().starts_with('='))
                        // A table's flag (`--shared-store`) is its table's header.
                        || line.starts_with(&format!("[{long}]"))
                })
            })
            .collect();
        assert!(missing.is_empty(), "docs/gateway.toml lacks {missing:?}");
    }

    #[test]
    fn errors_name_the_line_and_the_key() {
        let cases = [
            ("listen = \"nowhere\"\n", "t.toml:1: listen:"),
            ("\n\ndrain-timeout = \"30s\"\n", "t.toml:3: drain-timeout:"),
            ("ready-backends = \"most\"\n", "t.toml:1: ready-backends:"),
            (
                "reload-interval = 0\n",
                "t.toml:1: reload-interval: expected a positive number of seconds, got 0",
            ),
            ("max-in-flight = 0\n", "t.toml:1: max-in-flight:"),
            (
                "listen = \"127.0.0.1:7000\"\nlisten_port = 1\n",
                "t.toml:2: listen_port: unknown field",
            ),
            (
                "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\ntimout = 3\n",
                "t.toml:4: [[backend]] timout: unknown field `timout`",
            ),
            (
                "[[backend]]\nname = \"a b\"\nurl = \"http://x/mcp\"\n",
                "t.toml:2: [[backend]] name:",
            ),
            (
                "[[backend]]\nname = \"a\"\nurl = \"ftp://x/mcp\"\n",
                "t.toml:3: [[backend]] url:",
            ),
            (
                "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\nheaders.x = { value = \"v\", env = \"E\" }\n",
                "t.toml:4: [[backend]] headers.x: give exactly one of value, env or file",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text, "t.toml").unwrap_err();
            assert!(
                error.starts_with(expected),
                "{text:?} gave {error:?}, expected {expected:?}"
            );
        }
    }

    #[test]
    fn stdio_backends_from_the_file_and_the_command_line() {
        let file = parse(
            "[[backend]]\nname = \"fs\"\ncommand = [\"node\", \"server.js\", \"/srv/a b\"]\nenv.TOKEN = { env = \"FS_TOKEN\" }\nenv.MODE = \"ro\"\ncwd = \"/srv\"\n",
            "t.toml",
        )
        .unwrap();
        let env = |name: &str| (name == "FS_TOKEN").then(|| "s3cret".to_owned());
        let fs = file.backend[0].resolve(None, &env).unwrap();
        assert_eq!(fs.endpoint(), "stdio: node server.js '/srv/a b'");
        let command = format!("{:?}", fs.command().unwrap());
        assert!(
            command.contains("TOKEN") && command.contains("MODE") && !command.contains("s3cret"),
            "{command}"
        );
        assert!(
            file.backend[0]
                .resolve(None, &no_env)
                .unwrap_err()
                .contains("FS_TOKEN")
        );

        let cli: BackendSpec = "fs=stdio:node server.js '/srv/a b'".parse().unwrap();
        assert_eq!(
            cli.resolve(None, &no_env).unwrap().endpoint(),
            "stdio: node server.js '/srv/a b'"
        );
        assert!("fs=stdio:".parse::<BackendSpec>().is_err());

        let per_principal = |extra: &str| {
            let text = format!(
                "[[backend]]\nname = \"fs\"\ncommand = [\"x\"]\nprocess-per-principal = true\n{extra}"
            );
            let file = parse(&text, "t.toml").unwrap();
            let backend = file.backend[0].resolve(None, &no_env).unwrap();
            backend
                .command()
                .unwrap()
                .processes_per_principal()
                .map(|n| n.get())
        };
        assert_eq!(per_principal(""), Some(16));
        assert_eq!(per_principal("max-processes = 3"), Some(3));
        assert!(
            parse(
                "[[backend]]\nname = \"fs\"\ncommand = [\"x\"]\nmax-processes = 0\n",
                "t.toml"
            )
            .is_err()
        );
        assert!("fs=stdio:node 'x".parse::<BackendSpec>().is_err());

        for (text, problem) in [
            (
                "url = \"http://127.0.0.1:1/mcp\"\ncommand = [\"x\"]",
                "exactly one of url or command",
            ),
            ("", "exactly one of url or command"),
            ("command = []", "command is empty"),
            (
                "command = [\"x\"]\nheaders.a = { value = \"b\" }",
                "for an HTTP backend",
            ),
            (
                "url = \"http://127.0.0.1:1/mcp\"\ncwd = \"/\"",
                "for a stdio backend",
            ),
            (
                "url = \"http://127.0.0.1:1/mcp\"\nprocess-per-principal = true",
                "for a stdio backend",
            ),
            (
                "command = [\"x\"]\nmax-processes = 4",
                "max-processes goes with process-per-principal",
            ),
        ] {
            let file = parse(&format!("[[backend]]\nname = \"x\"\n{text}\n"), "t.toml").unwrap();
            let error = file.backend[0].resolve(None, &no_env).unwrap_err();
            assert!(error.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn header_sources_and_their_errors_never_show_values() {
        let dir = std::env::temp_dir().join(format!("mrtr-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "from-file-secret\n").unwrap();
        let text = format!(
            "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\n\
             headers.authorization = {{ file = {:?}, prefix = \"Bearer \" }}\n\
             headers.x-api-key = {{ env = \"API_KEY\" }}\n\
             headers.x-literal = {{ value = \"literal-secret\" }}\n",
            token.display().to_string()
        );
        let env = |name: &str| (name == "API_KEY").then(|| "from-env-secret".to_owned());
        let file = parse(&text, "t.toml").unwrap();
        let debug = format!("{file:?}");
        assert!(!debug.contains("secret"), "{debug}");
        let backend = file.backend[0].resolve(None, &env).unwrap();
        let headers = backend.headers();
        assert_eq!(headers["authorization"], "Bearer from-file-secret");
        assert_eq!(headers["x-api-key"], "from-env-secret");
        assert!(headers["authorization"].is_sensitive());
        let debug = format!("{backend:?}");
        assert!(!debug.contains("secret"), "{debug}");

        let error = file.backend[0].resolve(None, &no_env).unwrap_err();
        assert!(error.contains("API_KEY is not set"), "{error}");
        let bad =
            "[[backend]]\nname = \"a\"\nurl = \"http://x/mcp\"\nheaders.x = { value = \"se\\ncret\" }\n";
        let error = parse(bad, "t.toml").unwrap().backend[0]
            .resolve(None, &no_env)
            .unwrap_err();
        assert!(
            error.contains("cannot carry") && !error.contains("cret"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
