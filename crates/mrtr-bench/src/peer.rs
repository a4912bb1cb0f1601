//! Another gateway measured beside ours (`gateway-bench --peer NAME=TEMPLATE`): started from a
//! command template in front of one mock backend, pinned like our hops, measured in the same
//! rounds, its answers compared as parsed messages ([`crate::messages`]).
//!
//! The template is a shell command line. The driver picks a free port and fills in the
//! placeholders, then runs `sh -c 'exec COMMAND'` in a process group of its own: the peer is
//! ready once its port accepts a connection, its CPU and peak RSS are those of every process in
//! the group (a launcher that does not `exec` adds its own, which is small), and the whole group
//! is killed at the end.
//!
//! | placeholder | value |
//! |---|---|
//! | `{port}` | the TCP port the peer must listen on, on 127.0.0.1 |
//! | `{listen}` | `127.0.0.1:{port}` |
//! | `{backend}` | the mock backend's MCP URL, `http://127.0.0.1:PORT/mcp` |
//! | `{backend_addr}` | the mock backend's `127.0.0.1:PORT` |
//! | `{dir}` | the run's directory for logs (a place for a config file) |
//!
//! `{{` and `}}` stand for braces, so that a shell's `${VAR}` is written `${{VAR}}`. The driver
//! sends its requests to `http://127.0.0.1:{port}` plus the peer's MCP path (`--peer-path
//! NAME=PATH`, `/mcp` unless given).
//!
//! ```
//! use mrtr_bench::peer::{Peer, Values};
//!
//! let peer = Peer::parse("agentgateway=scripts/peers/agentgateway.sh {port} {backend}").unwrap();
//! assert_eq!(peer.name, "agentgateway");
//! let values = Values { port: 4000, backend: "http://127.0.0.1:4001/mcp".into(), dir: "/tmp/run".into() };
//! assert_eq!(
//!     peer.command(&values).unwrap(),
//!     "scripts/peers/agentgateway.sh 4000 http://127.0.0.1:4001/mcp"
//! );
//! assert!(Peer::parse("x=gw --port {prot}").is_err()); // a misspelt placeholder
//! ```

use crate::workload::Hop;

/// A peer gateway, as given on the command line.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Its name in tables and messages (letters, digits, `-`, `_`, `.`).
    pub name: &'static str,
    /// The command template.
    pub template: String,
    /// Path of its MCP endpoint.
    pub path: String,
}

/// What the driver fills a template with.
#[derive(Clone, Debug)]
pub struct Values {
    /// The port the peer must listen on.
    pub port: u16,
    /// The mock backend's MCP URL.
    pub backend: String,
    /// The run's directory.
    pub dir: String,
}

/// Names our own hops and processes use, which a peer may not take.
const TAKEN: [&str; 7] = [
    "direct",
    "bare proxy",
    "bare-proxy",
    "gateway",
    "gateway-2",
    "backend-alpha",
    "backend-beta",
];

impl Peer {
    /// Reads `NAME=TEMPLATE`; the path is `/mcp` until [`Peer::set_path`].
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, template) = spec
            .split_once('=')
            .ok_or_else(|| format!("--peer {spec:?}: expected NAME=COMMAND_TEMPLATE"))?;
        let name = name.trim();
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || !name.chars().all(valid) || TAKEN.contains(&name) {
            return Err(format!(
                "--peer {spec:?}: the name must be letters, digits, '-', '_' or '.', and not one of {TAKEN:?}"
            ));
        }
        if template.trim().is_empty() {
            return Err(format!("--peer {spec:?}: empty command template"));
        }
        let peer = Peer {
            // One short string per peer for the whole run, so that a hop stays a small `Copy` key.
            name: Box::leak(name.to_owned().into_boxed_str()),
            template: template.to_owned(),
            path: "/mcp".to_owned(),
        };
        // Fail on a misspelt placeholder now, not after the backends have started.
        peer.command(&Values {
            port: 1,
            backend: "http://127.0.0.1:1/mcp".to_owned(),
            dir: "/tmp".to_owned(),
        })
        .map_err(|e| format!("--peer {spec:?}: {e}"))?;
        Ok(peer)
    }

    /// Sets the MCP path (`--peer-path NAME=PATH`).
    pub fn set_path(&mut self, path: &str) -> Result<(), String> {
        if !path.starts_with('/') || path.contains(char::is_whitespace) {
            return Err(format!(
                "--peer-path {}={path:?}: a path starts with '/'",
                self.name
            ));
        }
        self.path = path.to_owned();
        Ok(())
    }

    /// The hop it is.
    pub fn hop(&self) -> Hop {
        Hop::Peer(self.name)
    }

    /// The command line with its placeholders filled in.
    pub fn command(&self, values: &Values) -> Result<String, String> {
        let port = values.port.to_string();
        let listen = format!("127.0.0.1:{port}");
        let backend_addr = values
            .backend
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_default()
            .to_owned();
        let lookup = |name: &str| -> Option<&str> {
            Some(match name {
                "port" => &port,
                "listen" => &listen,
                "backend" => &values.backend,
                "backend_addr" => &backend_addr,
                "dir" => &values.dir,
                _ => return None,
            })
        };
        let mut out = String::with_capacity(self.template.len() + 64);
        let mut rest = self.template.as_str();
        while let Some(at) = rest.find(['{', '}']) {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("{{").or_else(|| tail.strip_prefix("}}")) {
                out.push_str(&tail[..1]);
                rest = after;
                continue;
            }
            let Some(inner) = tail.strip_prefix('{') else {
                return Err("a lone '}' in the template (write '}}' for a brace)".to_owned());
            };
            let end = inner
                .find('}')
                .ok_or("an unclosed '{' in the template (write '{{' for a brace)")?;
            let value = lookup(&inner[..end]).ok_or_else(|| {
                format!(
                    "unknown placeholder {{{}}} (known: {{port}} {{listen}} {{backend}} {{backend_addr}} {{dir}})",
                    &inner[..end]
                )
            })?;
            // Values go into a shell command line unquoted, so they must not need quoting.
            let plain = |c: char| c.is_ascii_alphanumeric() || "._-:/@+,=".contains(c);
            if !value.chars().all(plain) {
                return Err(format!(
                    "{{{}}} = {value:?} would need shell quoting",
                    &inner[..end]
                ));
            }
            out.push_str(value);
            rest = &inner[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        Values {
            port: 4321,
            backend: "http://127.0.0.1:999/mcp".to_owned(),
            dir: "/tmp/gateway-bench-1".to_owned(),
        }
    }

    #[test]
    fn every_placeholder_and_escape_is_filled_in() {
        let peer = Peer::parse(
            "p=run --listen {listen} --port={port} {backend} {backend_addr} {dir}/p.yaml ${{BIN}} '{{}}'",
        )
        .unwrap();
        assert_eq!(
            peer.command(&values()).unwrap(),
            "run --listen 127.0.0.1:4321 --port=4321 http://127.0.0.1:999/mcp 127.0.0.1:999 /tmp/gateway-bench-1/p.yaml ${BIN} '{}'"
        );
        assert_eq!(peer.path, "/mcp");
        assert_eq!(peer.hop(), Hop::Peer("p"));
    }

    #[test]
    fn bad_specs_are_refused() {
        for spec in [
            "no-template",
            "=cmd",
            "p=",
            "gateway=cmd",
            "bare proxy=cmd",
            "a b=cmd",
            "p=cmd {nope}",
            "p=cmd {port",
            "p=cmd }",
        ] {
            assert!(Peer::parse(spec).is_err(), "{spec}");
        }
        let mut peer = Peer::parse("p=cmd").unwrap();
        assert!(peer.set_path("mcp").is_err());
        peer.set_path("/v1/mcp").unwrap();
        assert_eq!(peer.path, "/v1/mcp");
        let unsafe_dir = Values {
            dir: "/tmp/a b".to_owned(),
            ..values()
        };
        assert!(Peer::parse("p=cmd {dir}").unwrap().command(&unsafe_dir).is_err());
    }
}
