//! [`StdioCommand`]: what a stdio backend is started with, as the operator gives it.

use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use crate::upstream::BackendSpecError;

/// The command a stdio backend is started with: a program, its arguments, the environment
/// variables it gets besides `PATH` and `HOME`, its working directory, whether each principal
/// gets a process of its own, and otherwise how many of the shared process's places one
/// principal may hold.
///
/// ```
/// use mrtr_gateway::StdioCommand;
///
/// let command = StdioCommand::parse("uvx 'mcp-server-fetch' --ignore-robots-txt")
///     .unwrap()
///     .with_env("LOG_LEVEL", "debug");
/// assert_eq!(command.to_string(), "uvx mcp-server-fetch --ignore-robots-txt");
/// assert!(StdioCommand::parse("").is_err());
/// assert!(StdioCommand::parse("node 'unclosed").is_err());
/// // Debug shows the environment's names, never its values (they may be credentials).
/// let command = command.with_env("API_TOKEN", "s3cret");
/// assert!(!format!("{command:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StdioCommand {
    pub(super) program: String,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) cwd: Option<PathBuf>,
    pub(super) per_principal: Option<NonZeroUsize>,
    pub(super) calls_per_principal: Option<NonZeroUsize>,
}

impl StdioCommand {
    /// The command `argv`: the program (looked up on `PATH` when it has no `/`), then its
    /// arguments, passed as they are (no shell).
    pub fn new<I, S>(argv: I) -> Result<Self, BackendSpecError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut argv = argv.into_iter().map(Into::into);
        let program = argv
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| BackendSpecError::new("a stdio backend's command is empty".to_owned()))?;
        Ok(Self {
            program,
            args: argv.collect(),
            env: Vec::new(),
            cwd: None,
            per_principal: None,
            calls_per_principal: None,
        })
    }

    /// A command line split as a POSIX shell splits words (quotes and backslashes), without
    /// running one: no expansion, no pipes, no redirections.
    pub fn parse(line: &str) -> Result<Self, BackendSpecError> {
        let words = shlex::split(line).ok_or_else(|| {
            BackendSpecError::new(format!("cannot split the command {line:?}: an unclosed quote?"))
        })?;
        Self::new(words)
    }

    /// Sets the variable `name` to `value` in the process's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the process in `dir` (the gateway's working directory otherwise).
    pub fn with_cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Starts one process per principal (the gateway's principal header's value), at most
    /// `max` at once per replica, instead of one that every client shares: for a server that
    /// keeps what one user does (files, memory, a login) where another would see it. One more
    /// process serves what has no principal: the health probe's requests.
    pub fn per_principal(mut self, max: NonZeroUsize) -> Self {
        self.per_principal = Some(max);
        self
    }

    /// The most processes of principals run at once per replica, when each principal gets its
    /// own.
    pub fn processes_per_principal(&self) -> Option<NonZeroUsize> {
        self.per_principal
    }

    /// Lets one principal hold at most `max` of the 64 places of requests in flight of the
    /// process every principal shares (calls waiting for a place count too; more are refused at
    /// once with a JSON-RPC error), instead of a quarter of them (16); requests without a
    /// principal are one group with the same share. A `max` of 64 or more lets one principal
    /// take every place (at most 64 calls at once, waiting ones included). No effect on a backend run [`per_principal`](Self::per_principal),
    /// whose processes each serve one principal.
    pub fn with_max_calls_per_principal(mut self, max: NonZeroUsize) -> Self {
        self.calls_per_principal = Some(max);
        self
    }

    /// The most places of the shared process one principal may hold, when set (else a quarter).
    pub fn max_calls_per_principal(&self) -> Option<NonZeroUsize> {
        self.calls_per_principal
    }
}

impl fmt::Display for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = std::iter::once(&self.program).chain(&self.args);
        match shlex::try_join(words.clone().map(String::as_str)) {
            Ok(line) => f.write_str(&line),
            // A word with a NUL byte cannot be quoted (nor started): shown unquoted.
            Err(_) => f.write_str(&words.cloned().collect::<Vec<_>>().join(" ")),
        }
    }
}

impl fmt::Debug for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("StdioCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &env)
            .field("cwd", &self.cwd)
            .field("per_principal", &self.per_principal)
            .field("calls_per_principal", &self.calls_per_principal)
            .finish()
    }
}
