//! The one check a request makes of the store: an atomic Lua script, one round trip
//! (`EVALSHA`; the script is loaded once per store start, on its first `NOSCRIPT`).
//!
//! Its keys: `KEYS[1]`, the envelope of a retry (`<prefix>:v1:env:<id>`, 48 hex digits); then
//! one key per limit that applies to the request (`policy/rate.rs` names them). Its arguments:
//! the mode (`0`: no envelope; `1`: the envelope's first use is part of its call; `2`: the same,
//! and a second use is refused), the envelope's remaining lifetime in milliseconds, the check's
//! own random token (the value the envelope's key is set to), then per limit its emission
//! interval and its tolerance (interval × burst) in microseconds.
//!
//! What it does, in this order:
//! 1. with an envelope: `SET key token NX PX lifetime`. Set: the envelope's first use in the
//!    fleet, part of the call its round 1 paid for, admitted without touching a limit. Not set:
//!    a replay, refused in mode 2, counted as a new call otherwise;
//! 2. for each limit in turn, GCRA on the store's own clock (`TIME`, so replicas' clocks do not
//!    matter): the theoretical arrival time `tat` (stored, or now), `allow_at = max(tat, now) +
//!    interval − tolerance`; after `now` the request is refused with the wait, else the new
//!    `tat` is stored with an expiry at the moment the bucket is full again. As in the process,
//!    the limits before a refusing one have been counted.
//!
//! Its answer: `{0}` admitted, `{1}` a replay refused, `{2, index, wait µs}` refused by the
//! limit at `index` (0-based among the limits passed).
//!
//! A check that timed out may still run: the store answers late, or had not read it yet. When
//! the request it was for is then refused (`on-store-error = "deny"`), [`Script::release`]
//! takes the envelope's record back, a second script that deletes the key only if it still holds
//! this check's token (so that a record another check made stays). It goes out on the same
//! multiplexed connection after the check, and Redis runs one connection's commands in order, so
//! a check that was sent runs before its release. Without the release, the client's retry of a
//! request refused `503` would find its state spent and be refused `-32602`.

use std::time::Duration;

use tower_mrtr::EnvelopeId;

/// See the [module docs](self).
const LUA: &str = r"
local mode = ARGV[1]
if mode ~= '0' then
  if redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[2]) then
    return {0}
  end
  if mode == '2' then
    return {1}
  end
end
if #KEYS < 2 then
  return {0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
for i = 2, #KEYS do
  local interval = tonumber(ARGV[2 * i])
  local tolerance = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now) or now
  if tat < now then
    tat = now
  end
  local next_tat = tat + interval
  local allow_at = next_tat - tolerance
  if allow_at > now then
    return {2, i - 2, math.ceil(allow_at - now)}
  end
  redis.call('SET', KEYS[i], string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1)
end
return {0}
";

/// The release (see the [module docs](self)): deletes the envelope's key if it holds the token.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// A retry's envelope, as the check records it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EnvelopeUse {
    /// Its id.
    pub(crate) id: EnvelopeId,
    /// How long it still opens (the key lives that long).
    pub(crate) lifetime: Duration,
    /// Whether a second use is refused (single use), rather than counted as a call.
    pub(crate) single_use: bool,
    /// This check's own value for the envelope's key, random, so that a release takes back this
    /// check's record and no other's.
    pub(crate) token: u64,
}

/// One cell taken from one limit.
#[derive(Clone, Debug)]
pub(crate) struct Take {
    /// The bucket's key (the limit's name and version, the principal and tool).
    pub(crate) key: String,
    /// The time one request is worth.
    pub(crate) interval: Duration,
    /// `interval` × burst: how far ahead of now the bucket may run.
    pub(crate) tolerance: Duration,
}

/// What a request is to the store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Check<'a> {
    /// A retry's envelope, when one is recorded.
    pub(crate) envelope: Option<EnvelopeUse>,
    /// The limits that apply, in order.
    pub(crate) takes: &'a [Take],
}

/// The store's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go on.
    Admitted,
    /// A single-use envelope presented again.
    Replayed,
    /// Refused by the limit at this index of [`Check::takes`], for this long.
    Limited {
        /// Which.
        limit: usize,
        /// How long until the limit admits it.
        wait: Duration,
    },
}

/// The script, with the key prefix of this deployment.
pub(super) struct Script {
    script: redis::Script,
    envelope_prefix: String,
}

impl Script {
    pub(super) fn new(prefix: &str) -> Self {
        Self {
            script: redis::Script::new(LUA),
            envelope_prefix: format!("{prefix}:v1:env:"),
        }
    }

    pub(super) async fn run(
        &self,
        connection: &mut impl redis::aio::ConnectionLike,
        check: &Check<'_>,
    ) -> redis::RedisResult<Verdict> {
        let mut invocation = self.script.prepare_invoke();
        match check.envelope {
            Some(envelope) => {
                invocation
                    .key(self.envelope_key(&envelope))
                    .arg(if envelope.single_use { "2" } else { "1" })
                    .arg(envelope.lifetime.as_millis().max(1) as u64)
                    .arg(envelope.token);
            }
            None => {
                // A key and arguments all the same, so that the limits' own keep their places.
                invocation.key(&self.envelope_prefix).arg("0").arg(0).arg(0);
            }
        }
        for take in check.takes {
            invocation
                .key(&take.key)
                .arg(take.interval.as_secs_f64() * 1e6)
                .arg(take.tolerance.as_secs_f64() * 1e6);
        }
        let answer: Vec<i64> = invocation.invoke_async(connection).await?;
        verdict(&answer).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "the shared store's check answered something else",
            ))
        })
    }
}

impl Script {
    fn envelope_key(&self, envelope: &EnvelopeUse) -> String {
        format!("{}{}", self.envelope_prefix, envelope.id)
    }

    /// Takes back the record `envelope`'s check made, if it made one (see the [module
    /// docs](self)). `EVAL`, not `EVALSHA`: it is rare, and one command keeps it in order behind
    /// the check on the connection (a `NOSCRIPT` would add a load and a second try).
    pub(super) async fn release(
        &self,
        connection: &mut impl redis::aio::ConnectionLike,
        envelope: &EnvelopeUse,
    ) -> redis::RedisResult<()> {
        redis::cmd("EVAL")
            .arg(RELEASE)
            .arg(1)
            .arg(self.envelope_key(envelope))
            .arg(envelope.token)
            .query_async::<i64>(connection)
            .await
            .map(drop)
    }
}

/// The script's answer read (see the [module docs](self)).
fn verdict(answer: &[i64]) -> Option<Verdict> {
    match answer {
        [0] => Some(Verdict::Admitted),
        [1] => Some(Verdict::Replayed),
        [2, limit, wait] => Some(Verdict::Limited {
            limit: usize::try_from(*limit).ok()?,
            wait: Duration::from_micros(u64::try_from(*wait).ok()?),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly() {
        assert_eq!(verdict(&[0]), Some(Verdict::Admitted));
        assert_eq!(verdict(&[1]), Some(Verdict::Replayed));
        assert_eq!(
            verdict(&[2, 1, 1500]),
            Some(Verdict::Limited {
                limit: 1,
                wait: Duration::from_micros(1500)
            })
        );
        for bad in [&[][..], &[3], &[2, -1, 5], &[2, 0, -5], &[0, 0]] {
            assert_eq!(verdict(bad), None, "{bad:?}");
        }
    }
}
