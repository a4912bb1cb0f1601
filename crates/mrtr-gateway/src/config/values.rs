//! The types of the settings' values that need more than a number or a string, each read the
//! same way on the command line (`FromStr`, clap's value parser) and in the config file
//! (`Deserialize`), and shown as they are written (`Display`, for `--help`'s defaults): a flag
//! and its file key accept exactly the same values.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http::HeaderName;
use serde::de::{self, Deserializer, Visitor};

/// A duration in seconds, decimals allowed (`0`, `4`, `0.5`), at least zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seconds(pub Duration);

/// A duration in seconds, decimals allowed (`4`, `0.5`), above zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PositiveSeconds(pub Duration);

/// The longest duration a setting takes: 100 years. Every duration becomes a deadline (now plus
/// the duration) somewhere, in the gateway, hyper or tokio, and a longer one than the clock can
/// hold would panic there on every connection; 100 years is "never" for any timeout.
const MAX_SECONDS: f64 = 100.0 * 365.0 * 24.0 * 3600.0;

/// `value` seconds as a duration: above zero if `positive`, else at least zero; at most
/// [`MAX_SECONDS`].
fn duration(value: f64, positive: bool) -> Result<Duration, String> {
    if value > MAX_SECONDS {
        return Err(format!(
            "expected at most {MAX_SECONDS} seconds (100 years), got {value}"
        ));
    }
    let allowed = if positive { value > 0.0 } else { value >= 0.0 };
    allowed
        .then(|| Duration::try_from_secs_f64(value).ok())
        .flatten()
        .ok_or_else(|| {
            let what = if positive { "a positive" } else { "a non-negative" };
            format!("expected {what} number of seconds, got {value}")
        })
}

fn number(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .map_err(|_| format!("expected a number of seconds, got {text:?}"))
}

/// Reads a TOML number, integer or float, as seconds.
struct SecondsVisitor {
    positive: bool,
}

impl Visitor<'_> for SecondsVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.positive {
            "a positive number of seconds"
        } else {
            "a non-negative number of seconds"
        })
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Duration, E> {
        duration(value as f64, self.positive).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Duration, E> {
        duration(value as f64, self.positive).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Duration, E> {
        duration(value, self.positive).map_err(E::custom)
    }
}

/// Seconds as written: `4`, `0.5` (the shortest decimal that reads back the same).
fn write_seconds(f: &mut fmt::Formatter<'_>, value: Duration) -> fmt::Result {
    write!(f, "{}", value.as_secs_f64())
}

// The two types differ only in their bound: one macro keeps their reading and writing identical.
macro_rules! seconds_type {
    ($name:ident, $positive:expr) => {
        impl FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                duration(number(text)?, $positive).map(Self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer
                    .deserialize_any(SecondsVisitor {
                        positive: $positive,
                    })
                    .map(Self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_seconds(f, self.0)
            }
        }

        impl From<$name> for Duration {
            fn from(seconds: $name) -> Duration {
                seconds.0
            }
        }
    };
}

seconds_type!(Seconds, false);
seconds_type!(PositiveSeconds, true);

impl Seconds {
    /// `secs` whole seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }
}

impl PositiveSeconds {
    /// `secs` whole seconds; `None` for zero.
    pub const fn from_secs(secs: u64) -> Option<Self> {
        if secs == 0 {
            None
        } else {
            Some(Self(Duration::from_secs(secs)))
        }
    }
}

/// The name of a variable of the gateway's environment passed on to stdio servers
/// (`--stdio-pass-env`): letters, digits and `_`, not starting with a digit, and never one of the
/// gateway's own secrets (`MRTR_KEYS`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct PassedVar(pub(crate) String);

impl FromStr for PassedVar {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        let well_formed = name.chars().next().is_some_and(|c| !c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !well_formed {
            return Err(format!("{name:?} is not an environment variable's name"));
        }
        if name == "MRTR_KEYS" {
            return Err("MRTR_KEYS holds the gateway's keys and is never passed on".to_owned());
        }
        Ok(Self(name.to_owned()))
    }
}

/// The legacy-era path (`--legacy-era-path`): an absolute path of letters, digits and `-._~/`,
/// other than `/mcp` and the well-known paths the gateway serves (`/.well-known/…`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct LegacyEraPath(pub(crate) String);

impl FromStr for LegacyEraPath {
    type Err = String;

    fn from_str(path: &str) -> Result<Self, String> {
        let well_formed = path.len() > 1
            && path.len() <= 256
            && path.starts_with('/')
            && path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~/".contains(c));
        if !well_formed {
            return Err(format!(
                "{path:?} is not a path the gateway can serve: '/' then letters, digits and -._~/ (at most 256)"
            ));
        }
        if path == crate::front::MCP_PATH || path.starts_with("/.well-known/") {
            return Err(format!("{path:?} is a path the gateway serves already"));
        }
        Ok(Self(path.to_owned()))
    }
}

impl LegacyEraPath {
    /// The path, to share.
    pub(crate) fn shared(&self) -> std::sync::Arc<str> {
        self.0.as_str().into()
    }
}

/// This replica's own address for other replicas (`--advertise-url`): an absolute `http://` or
/// `https://` URL with a host, no query or fragment; without a path (or `/`) it means the MCP
/// endpoint, `/mcp`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct AdvertiseUrl(pub(crate) String);

impl FromStr for AdvertiseUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{text:?} is not a URL other replicas can reach this one at: {why}");
        let uri: http::Uri = text.parse().map_err(|e| bad(&format!("{e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(bad("it needs http:// or https://"));
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("it needs a host (the pod IP in Kubernetes)"));
        }
        if uri.query().is_some() || text.contains('#') {
            return Err(bad("no query or fragment"));
        }
        let path = match uri.path() {
            "" | "/" => crate::front::MCP_PATH,
            path => path,
        };
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let scheme = uri.scheme_str().unwrap_or_default();
        Ok(Self(format!("{scheme}://{authority}{path}")))
    }
}

impl AdvertiseUrl {
    /// The URL, with the MCP endpoint's path, to share.
    pub(crate) fn shared(&self) -> std::sync::Arc<str> {
        self.0.as_str().into()
    }
}

/// A checked text value (a newtype over the `String` its `FromStr` accepted): read from the
/// config file through the same check (`TryFrom<String>`, for serde's `try_from`), shown as
/// written (`Display`).
macro_rules! checked_text {
    ($($name:ident),+) => {$(
        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(text: String) -> Result<Self, String> {
                text.parse()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}

checked_text!(PassedVar, LegacyEraPath, AdvertiseUrl);

/// A request header name on the command line.
pub(crate) fn header_name(text: &str) -> Result<HeaderName, String> {
    text.parse::<HeaderName>()
        .map_err(|e| format!("not a header name: {e}"))
}

/// serde: a header name that is present (a key left out keeps the default).
pub(crate) fn de_some_header_name<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<HeaderName>, D::Error> {
    let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
    header_name(&text).map(Some).map_err(de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_variables_are_names_and_never_the_keys() {
        assert_eq!("SSL_CERT_FILE".parse::<PassedVar>().unwrap().0, "SSL_CERT_FILE");
        assert_eq!("https_proxy".parse::<PassedVar>().unwrap().0, "https_proxy");
        for bad in ["", "A=B", "1X", "A B", "MRTR_KEYS"] {
            assert!(bad.parse::<PassedVar>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_advertised_url_names_the_mcp_endpoint_of_one_host() {
        let url = |text: &str| text.parse::<AdvertiseUrl>().map(|u| u.0);
        assert_eq!(url("http://10.0.3.7:8080").unwrap(), "http://10.0.3.7:8080/mcp");
        assert_eq!(url("http://10.0.3.7:8080/").unwrap(), "http://10.0.3.7:8080/mcp");
        assert_eq!(
            url("https://gw-0.gw:8443/mcp").unwrap(),
            "https://gw-0.gw:8443/mcp"
        );
        assert_eq!(url("http://[::1]:80/mcp").unwrap(), "http://[::1]:80/mcp");
        for refused in [
            "10.0.3.7:8080",
            "ftp://h/mcp",
            "http:///mcp",
            "http://h/mcp?x=1",
            "http://h/mcp#f",
            "",
        ] {
            assert!(url(refused).is_err(), "{refused:?}");
        }
    }

    #[derive(serde::Deserialize)]
    struct File {
        any: Seconds,
        positive: PositiveSeconds,
    }

    #[test]
    fn seconds_read_alike_on_the_command_line_and_in_the_file() {
        let file: File = toml::from_str("any = 0\npositive = 0.5\n").unwrap();
        assert_eq!(file.any, "0".parse().unwrap());
        assert_eq!(file.positive, "0.5".parse().unwrap());
        assert_eq!(file.positive.0, Duration::from_millis(500));
        assert_eq!(
            " 4 ".parse::<PositiveSeconds>().unwrap().0,
            Duration::from_secs(4)
        );
        for refused in ["0", "-1", "x", "inf", "NaN", "1e300", "1e19", "3153600001"] {
            assert!(refused.parse::<PositiveSeconds>().is_err(), "{refused}");
        }
        assert_eq!(
            "1e19".parse::<Seconds>().unwrap_err(),
            "expected at most 3153600000 seconds (100 years), got 10000000000000000000"
        );
        assert_eq!(
            "3153600000".parse::<Seconds>().unwrap().0,
            Duration::from_secs(100 * 365 * 24 * 3600)
        );
        assert!("-0.5".parse::<Seconds>().is_err());
        let error = toml::from_str::<File>("any = 1\npositive = 0\n").err().unwrap();
        assert!(
            error
                .message()
                .contains("expected a positive number of seconds, got 0"),
            "{error}"
        );
        let error = toml::from_str::<File>("any = \"30s\"\npositive = 1\n")
            .err()
            .unwrap();
        assert!(
            error.message().contains("a non-negative number of seconds"),
            "{error}"
        );
    }

    #[test]
    fn seconds_show_as_written() {
        assert_eq!(Seconds::from_secs(30).to_string(), "30");
        assert_eq!("0.5".parse::<PositiveSeconds>().unwrap().to_string(), "0.5");
        assert_eq!("2.5".parse::<Seconds>().unwrap().to_string(), "2.5");
    }
}
