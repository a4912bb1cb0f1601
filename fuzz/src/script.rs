//! The text format of the request and answer targets' inputs: an options line, header lines, a
//! blank line, and a body in which `@E<n>@` stands for a minted envelope ([`crate::mint`]).
//!
//! ```text
//! POST principal split=10,40
//! content-type: application/json
//! mcp-method: tools/call
//!
//! {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deploy","requestState":"@E0@"}}
//! ```
//!
//! Options are words (`principal`) or `name=value` pairs (`split=10,40`); unknown ones are
//! ignored, so any mutation still parses. A header line that is not a valid header is skipped.
//! Placeholders are substituted in header values too (an `Mcp-Name` must name a task handle).
//!
//! ```
//! use tower_mrtr_fuzz::script::Script;
//!
//! let script = Script::parse(b"POST limit=64\nmcp-method: ping\n\n{}");
//! assert_eq!(script.number("limit"), Some(64));
//! assert_eq!(script.headers.len(), 1);
//! assert_eq!(script.body, b"{}");
//! ```

use http::{HeaderName, HeaderValue};

use crate::mint::substitute;

/// Largest number an option may give (sizes, positions): keeps every run small and fast.
pub const MAX_NUMBER: usize = 1 << 20;

/// A parsed input.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// The words of the options line.
    pub options: Vec<String>,
    /// Header lines, in order (repeats kept).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body, placeholders substituted.
    pub body: Vec<u8>,
    /// The body as written, before substitution.
    pub template: Vec<u8>,
}

impl Script {
    /// Parses an input; never fails.
    pub fn parse(input: &[u8]) -> Self {
        let (head, template) = match find(input, b"\n\n") {
            Some(at) => (&input[..at], &input[at + 2..]),
            None => (input, &input[input.len()..]),
        };
        let mut lines = head.split(|&b| b == b'\n');
        let options = lines
            .next()
            .map(|line| {
                String::from_utf8_lossy(line)
                    .split_ascii_whitespace()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let headers = lines.filter_map(header_line).collect();
        Self {
            options,
            headers,
            body: substitute(template),
            template: template.to_vec(),
        }
    }

    /// Whether the word `name` is among the options.
    pub fn flag(&self, name: &str) -> bool {
        self.options.iter().any(|o| o == name)
    }

    /// The value of option `name=value`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find_map(|o| o.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
    }

    /// The value of `name=N`, at most [`MAX_NUMBER`].
    pub fn number(&self, name: &str) -> Option<usize> {
        self.value(name)?.parse::<usize>().ok().map(|n| n.min(MAX_NUMBER))
    }

    /// The values of `name=A,B,C` (each at most [`MAX_NUMBER`]; at most 64 of them).
    pub fn numbers(&self, name: &str) -> Vec<usize> {
        self.value(name)
            .map(|list| {
                list.split(',')
                    .filter_map(|n| n.parse::<usize>().ok())
                    .map(|n| n.min(MAX_NUMBER))
                    .take(64)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first option word.
    pub fn first(&self) -> Option<&str> {
        self.options.first().map(String::as_str)
    }
}

fn header_line(line: &[u8]) -> Option<(HeaderName, HeaderValue)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let colon = line.iter().position(|&b| b == b':')?;
    let name = HeaderName::from_bytes(line[..colon].trim_ascii()).ok()?;
    let value = HeaderValue::from_bytes(&substitute(line[colon + 1..].trim_ascii_start())).ok()?;
    Some((name, value))
}

/// The first position of `needle` in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Cuts `bytes` at `cuts` (taken modulo its length + 1, sorted): the chunks, empty ones kept.
pub fn chunks(bytes: &[u8], cuts: &[usize]) -> Vec<bytes::Bytes> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut at = 0;
    for cut in cuts {
        out.push(bytes::Bytes::copy_from_slice(&bytes[at..cut]));
        at = cut;
    }
    out.push(bytes::Bytes::copy_from_slice(&bytes[at..]));
    out
}
