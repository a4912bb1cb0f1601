//! `[shared-store]` in the config file, and `--shared-store URL` on the command line (which sets
//! the table's `url`, the other keys keeping their defaults or the file's values).
//!
//! ```
//! use mrtr_gateway::store::{OnStoreError, SharedStoreSettings};
//!
//! let table: SharedStoreSettings = toml::from_str("url = \"redis://10.0.0.5:6379/2\"\nsingle-use = true").unwrap();
//! assert!(table.single_use);
//! assert_eq!(table.on_store_error, OnStoreError::Deny);
//! assert!(toml::from_str::<SharedStoreSettings>("url = \"redis://:hunter2@10.0.0.5\"").is_err());
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

/// The default of `timeout`: long enough for a store across a zone (a few milliseconds), short
/// enough that an outage costs a request no more than this.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// The default of `password-env`.
pub const DEFAULT_PASSWORD_ENV: &str = "MRTR_SHARED_STORE_PASSWORD";

/// What a request that needs the store gets when the store does not answer in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// Refused: `503` with `Retry-After: 1` and a JSON-RPC error. The default: a limit or a
    /// single-use promise that silently stops holding is worse than a refusal an operator sees.
    #[default]
    Deny,
    /// Served as if the store had admitted it: limits and single use do not hold meanwhile.
    Allow,
}

impl fmt::Display for OnStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Deny => "deny",
            Self::Allow => "allow",
        })
    }
}

/// The store's address: `redis://HOST[:PORT][/DB]` or `rediss://…` (TLS, verified against the
/// system's roots), optionally with a user name (`redis://gateway@HOST`), never a password.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(String);

impl StoreUrl {
    /// The address as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(super) fn connection_info(&self) -> Result<redis::ConnectionInfo, String> {
        redis::IntoConnectionInfo::into_connection_info(self.0.as_str())
            .map_err(|e| format!("[shared-store] url: {e}"))
    }
}

impl FromStr for StoreUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let scheme = text.split_once("://").map(|(scheme, _)| scheme);
        if !matches!(scheme, Some("redis" | "rediss" | "valkey" | "valkeys")) {
            return Err("expected redis://HOST[:PORT][/DB] or rediss://HOST[:PORT][/DB]".to_owned());
        }
        if text.contains('#') {
            // redis-rs reads `#insecure` as "do not verify the certificate".
            return Err("a fragment (such as #insecure) is not accepted: TLS is always verified".to_owned());
        }
        let url = Self(text.to_owned());
        let info = url
            .connection_info()
            .map_err(|e| e.replace("[shared-store] url: ", ""))?;
        if info.redis_settings().password().is_some() {
            return Err(format!(
                "the URL carries a password; give it in the environment variable named by password-env (default {DEFAULT_PASSWORD_ENV})"
            ));
        }
        Ok(url)
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The `[shared-store]` table; see the [module docs](self) and `docs/operations.md`, "Running a
/// fleet".
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct SharedStoreSettings {
    /// Where the store is.
    pub url: StoreUrl,
    /// The environment variable holding the store's password (`AUTH`), if it has one.
    #[serde(default = "default_password_env")]
    pub password_env: String,
    /// Whether a request state opens at most once in the fleet.
    #[serde(default)]
    pub single_use: bool,
    /// What a request needing the store gets when it does not answer in time.
    #[serde(default)]
    pub on_store_error: OnStoreError,
    /// How long one store operation may take, in seconds.
    #[serde(default = "default_timeout", deserialize_with = "timeout")]
    pub timeout: Duration,
    /// What every key the gateway writes begins with (one store can serve several deployments).
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
}

impl SharedStoreSettings {
    /// The table with only `url` given.
    pub fn new(url: StoreUrl) -> Self {
        Self {
            url,
            password_env: default_password_env(),
            single_use: false,
            on_store_error: OnStoreError::default(),
            timeout: DEFAULT_TIMEOUT,
            key_prefix: default_key_prefix(),
        }
    }

    /// How long one operation may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl FromStr for SharedStoreSettings {
    type Err = String;

    /// `--shared-store URL`.
    fn from_str(text: &str) -> Result<Self, String> {
        text.parse().map(Self::new)
    }
}

fn default_password_env() -> String {
    DEFAULT_PASSWORD_ENV.to_owned()
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

fn default_key_prefix() -> String {
    "mrtr".to_owned()
}

/// Seconds, above zero and at most a minute (an operation that may take longer holds a request
/// that long on every outage).
fn timeout<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let seconds = f64::deserialize(deserializer)?;
    if !(seconds > 0.0 && seconds <= 60.0) {
        return Err(serde::de::Error::custom(format!(
            "expected a number of seconds above 0 and at most 60, got {seconds}"
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_as_they_are_read() {
        for good in [
            "redis://127.0.0.1:6379",
            "rediss://store.internal/3",
            "redis://gateway@10.0.0.5",
        ] {
            assert!(good.parse::<StoreUrl>().is_ok(), "{good}");
        }
        for (bad, problem) in [
            ("http://127.0.0.1:6379", "expected redis://"),
            ("127.0.0.1:6379", "expected redis://"),
            ("unix:///run/redis.sock", "expected redis://"),
            ("redis://:s3cret@127.0.0.1", "carries a password"),
            ("redis://user:s3cret@127.0.0.1", "carries a password"),
            ("rediss://127.0.0.1/#insecure", "always verified"),
        ] {
            let error = bad.parse::<StoreUrl>().unwrap_err();
            assert!(
                error.contains(problem) && !error.contains("s3cret"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_table_has_defaults_and_bounds() {
        let table: SharedStoreSettings = toml::from_str("url = \"redis://127.0.0.1\"").unwrap();
        assert_eq!(
            table,
            SharedStoreSettings::new("redis://127.0.0.1".parse().unwrap())
        );
        assert_eq!(table.timeout(), DEFAULT_TIMEOUT);
        let table: SharedStoreSettings =
            toml::from_str("url = \"redis://127.0.0.1\"\non-store-error = \"allow\"\ntimeout = 0.05")
                .unwrap();
        assert_eq!(table.on_store_error, OnStoreError::Allow);
        assert_eq!(table.timeout(), Duration::from_millis(50));
        for bad in [
            "timeout = 0",
            "timeout = 61",
            "on-store-error = \"maybe\"",
            "password = \"x\"",
        ] {
            assert!(
                toml::from_str::<SharedStoreSettings>(&format!("url = \"redis://127.0.0.1\"\n{bad}"))
                    .is_err(),
                "{bad}"
            );
        }
    }
}
