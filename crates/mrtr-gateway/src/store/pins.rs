//! Pins learned by the fleet (`[pinning]` with `unpinned = "learn"` and a shared store): the
//! first definition any replica saw of a tool, prompt or resource template is the fleet's pin,
//! so that a replica started after a backend changed a tool judges it against what the others
//! learned, not against the changed definition.
//!
//! One round trip per listing that brings names this replica has not pinned yet: an atomic Lua
//! script that, for each key, sets the pin if none is set (`SET NX`) and answers the pin in
//! force (the one just set, or the one another replica set first). A pin's key is
//! `<prefix>:v1:pin:<backend>:<kind>:<32 hex digits of the name's SHA-256>` (the name is the
//! backend's, of any length); its value is the digest, a newline, and the canonical definition
//! when it was kept. Pins do not expire: re-pinning a learned definition means deleting its key
//! (or every key of a backend, `<prefix>:v1:pin:<backend>:*`), as `docs/operations.md` shows.

use sha2::{Digest, Sha256};

/// See the [module docs](self).
const LUA: &str = r"
local pins = {}
for i = 1, #KEYS do
  if redis.call('SET', KEYS[i], ARGV[i], 'NX') then
    pins[i] = ARGV[i]
  else
    pins[i] = redis.call('GET', KEYS[i])
  end
end
return pins
";

/// Most pins claimed in one script run: a backend listing thousands of names makes several
/// round trips rather than one the store takes long to run.
pub(crate) const MAX_CLAIMS_PER_RUN: usize = 256;

/// One pin this replica would set: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PinClaim {
    /// The backend's configured name.
    pub(crate) backend: String,
    /// `tool`, `prompt` or `resource_template`.
    pub(crate) kind: &'static str,
    /// The backend's own name of it.
    pub(crate) name: String,
    /// `sha256:` and hex, as the pins file writes it.
    pub(crate) digest: String,
    /// The canonical definition, when kept.
    pub(crate) definition: Option<String>,
}

/// The pin in force for a claim: its digest and, when kept, its canonical definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FleetPin {
    /// `sha256:` and hex.
    pub(crate) digest: String,
    /// The canonical definition, when kept.
    pub(crate) definition: Option<String>,
}

/// The script, with the key prefix of this deployment.
pub(super) struct PinScript {
    script: redis::Script,
    prefix: String,
}

impl PinScript {
    pub(super) fn new(prefix: &str) -> Self {
        Self {
            script: redis::Script::new(LUA),
            prefix: format!("{prefix}:v1:pin:"),
        }
    }

    fn key(&self, claim: &PinClaim) -> String {
        let name = Sha256::digest(claim.name.as_bytes());
        let mut hex = [0; 32];
        let name = base16ct::lower::encode_str(&name[..16], &mut hex).unwrap_or_default();
        format!("{}{}:{}:{name}", self.prefix, claim.backend, claim.kind)
    }

    /// Claims `claims` (at most [`MAX_CLAIMS_PER_RUN`]) in one run: the pin in force for each,
    /// in order.
    pub(super) async fn run(
        &self,
        connection: &mut impl redis::aio::ConnectionLike,
        claims: &[PinClaim],
    ) -> redis::RedisResult<Vec<FleetPin>> {
        let mut invocation = self.script.prepare_invoke();
        for claim in claims {
            invocation.key(self.key(claim)).arg(value(claim));
        }
        let answer: Vec<Option<String>> = invocation.invoke_async(connection).await?;
        let pins: Option<Vec<FleetPin>> = answer.iter().map(|value| read(value.as_deref()?)).collect();
        pins.filter(|pins| pins.len() == claims.len()).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "the shared store's pins answered something else",
            ))
        })
    }
}

/// A pin as the store keeps it: the digest, then the definition on the next line.
fn value(claim: &PinClaim) -> String {
    match &claim.definition {
        Some(definition) => format!("{}\n{definition}", claim.digest),
        None => claim.digest.clone(),
    }
}

/// A stored pin read back; `None` for anything that is not one (a key someone else wrote).
fn read(value: &str) -> Option<FleetPin> {
    let (digest, definition) = match value.split_once('\n') {
        Some((digest, definition)) => (digest, Some(definition.to_owned())),
        None => (value, None),
    };
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| FleetPin {
        digest: digest.to_owned(),
        definition,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(definition: Option<&str>) -> PinClaim {
        PinClaim {
            backend: "alpha".into(),
            kind: "tool",
            name: "a name of any length".into(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            definition: definition.map(str::to_owned),
        }
    }

    #[test]
    fn a_pin_reads_back_as_it_was_written() {
        for definition in [None, Some(r#"{"description":"two\nlines","name":"x"}"#)] {
            let claim = claim(definition);
            let read = read(&value(&claim)).expect("a pin");
            assert_eq!(read.digest, claim.digest);
            assert_eq!(read.definition, claim.definition);
        }
    }

    #[test]
    fn what_is_not_a_pin_is_refused() {
        for bad in [
            "",
            "sha256:",
            "sha256:xyz",
            "md5:00",
            &format!("sha256:{}", "g".repeat(64)),
        ] {
            assert_eq!(read(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_name_the_backend_and_kind_and_hide_the_name() {
        let script = PinScript::new("mrtr");
        let key = script.key(&claim(None));
        assert!(key.starts_with("mrtr:v1:pin:alpha:tool:"), "{key}");
        assert_eq!(key.len(), "mrtr:v1:pin:alpha:tool:".len() + 32);
    }
}
