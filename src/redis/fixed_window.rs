//! Fixed window on Redis: anchored (`INCRBY` + `PEXPIRE` on the first hit) or aligned to the
//! server's clock (`PEXPIREAT` at the window's end).
//!
//! Runs the local [`crate::FixedWindow`] configuration with the same semantics:
//! [`Anchor::FirstRequest`] opens a window at the first request (the window is the key's TTL);
//! [`Anchor::WallClock`] aligns windows to multiples of the window on the Redis server's clock.
//! A counter found without a TTL is repaired (given one) by the next decision. Redis expiries
//! are in milliseconds: a window that is not whole milliseconds is refused when the limiter is
//! built, not rounded.

use std::sync::LazyLock;

use super::lua_script::LuaScript;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::algorithms::Anchor;
use crate::algorithms::FixedWindow;
use crate::decision::ConfigError;

pub(super) static ANCHORED: LazyLock<LuaScript> =
    lua_script!("exact.lua", "count.lua", "decided.lua", "fixed_window.lua");
/// Reads each key once for the whole batch: the hot-key case costs little more than one call.
pub(super) static ANCHORED_BATCH: LazyLock<LuaScript> = lua_script!(
    "exact.lua",
    "count.lua",
    "tally.lua",
    "fixed_window_batch.lua"
);
pub(super) static ALIGNED: LazyLock<LuaScript> = lua_script!(
    "exact.lua",
    "count.lua",
    "aligned.lua",
    "decided.lua",
    "fixed_window_aligned.lua"
);
pub(super) static ALIGNED_BATCH: LazyLock<LuaScript> = lua_script!(
    "exact.lua",
    "count.lua",
    "aligned.lua",
    "tally.lua",
    "fixed_window_aligned_batch.lua"
);

/// The window in milliseconds (validated whole when the limiter was built).
fn window_millis(window: &FixedWindow) -> u64 {
    u64::try_from(window.window().as_millis()).unwrap_or(u64::MAX)
}

/// One anchored fixed-window decision of a tally batch, as `fixed_window_batch.lua` decides it:
/// `state` is the counter and its TTL in ms as the script read them (a missing counter: 0 and
/// the window); `args` are `limit`, the window in ms.
fn replay(state: &mut [i64; 2], args: [u64; 4], _now: i64, n: u64) -> Option<[i64; 5]> {
    let (limit, window_ms) = (i64::try_from(args[0]).ok()?, i64::try_from(args[1]).ok()?);
    let n = i64::try_from(n).ok()?;
    let [count, ttl_ms] = state;
    let after = count.checked_add(n)?;
    if after <= limit {
        if *count == 0 {
            // INCRBY from nothing opens the window.
            *ttl_ms = window_ms;
        }
        *count = after;
        return Some([
            1,
            limit,
            limit.checked_sub(after)?,
            0,
            ttl_ms.checked_mul(1_000)?,
        ]);
    }
    // PTTL rounds down: under 1 ms left reads as 0; never announce a retry of nothing.
    let retry_us = (*ttl_ms).max(1).checked_mul(1_000)?;
    Some([
        0,
        limit,
        limit.checked_sub(*count)?.max(0),
        retry_us,
        retry_us,
    ])
}

/// One aligned fixed-window decision of a tally batch, as `fixed_window_aligned_batch.lua`
/// decides it: `state` is the window index and its count as the script read them (the current
/// window and 0 for a missing or older one); `args` are `limit`, the window in µs. The window
/// ends at `(index + 1) × window` (under 2^53 µs: the script refuses a stored index whose
/// window ends later).
fn replay_aligned(state: &mut [i64; 2], args: [u64; 4], now: i64, n: u64) -> Option<[i64; 5]> {
    let (limit, window) = (i64::try_from(args[0]).ok()?, i64::try_from(args[1]).ok()?);
    let [index, count] = state;
    let reset_us = index
        .checked_add(1)?
        .checked_mul(window)?
        .checked_sub(now)?;
    let after = count.checked_add(i64::try_from(n).ok()?)?;
    if after <= limit {
        *count = after;
        return Some([1, limit, limit.checked_sub(after)?, 0, reset_us]);
    }
    Some([
        0,
        limit,
        limit.checked_sub(*count)?.max(0),
        reset_us,
        reset_us,
    ])
}

impl sealed::Script for FixedWindow {
    type Local = FixedWindow;

    fn validate(&self) -> Result<(), ConfigError> {
        whole_millis(self.window(), "Redis fixed window").map(|_| ())
    }

    fn script(&self) -> &'static LuaScript {
        match self.anchor() {
            Anchor::FirstRequest => &ANCHORED,
            Anchor::WallClock => &ALIGNED,
        }
    }

    fn batch_script(&self) -> sealed::Batch {
        match self.anchor() {
            Anchor::FirstRequest => sealed::Batch::Tally(&ANCHORED_BATCH, replay),
            Anchor::WallClock => sealed::Batch::Tally(&ALIGNED_BATCH, replay_aligned),
        }
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        match self.anchor() {
            Anchor::FirstRequest => &["fw"],
            Anchor::WallClock => &["fwa"],
        }
    }

    fn args(&self, n: u32) -> [u64; 4] {
        let millis = window_millis(self);
        let window = match self.anchor() {
            Anchor::FirstRequest => millis,
            Anchor::WallClock => millis.saturating_mul(1_000),
        };
        [crate::Algorithm::limit(self), window, u64::from(n), 0]
    }

    fn limit_u32(&self) -> u32 {
        // At most 16,777,215 (validated by the local constructor).
        u32::try_from(crate::Algorithm::limit(self)).unwrap_or(u32::MAX)
    }

    fn local(&self, limit: u32) -> Result<FixedWindow, ConfigError> {
        FixedWindow::with_anchor(limit, self.window(), self.anchor())
    }
}

/// The fixed window on Redis.
impl RedisAlgorithm for FixedWindow {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::limiter::sealed::Script as _;
    use std::time::Duration;

    #[test]
    fn a_replay_past_i64_is_none_never_a_panic_or_a_wrapped_admission() {
        let args = [10, 600_000, 1, 0];
        assert_eq!(replay(&mut [i64::MAX, 600_000], args, 0, 1), None);
        assert_eq!(replay(&mut [i64::MIN, 600_000], args, 0, 1), None);
        assert_eq!(
            replay(&mut [5, i64::MAX], args, 0, 1),
            None,
            "the TTL in µs"
        );
        let aligned = [10, 600_000_000, 1, 0];
        assert_eq!(replay_aligned(&mut [i64::MAX, 0], aligned, 0, 1), None);
        assert_eq!(
            replay_aligned(&mut [1 << 40, 0], aligned, 0, 1),
            None,
            "the window end"
        );
        assert_eq!(replay_aligned(&mut [0, i64::MAX], aligned, 0, 1), None);
        // In range: decided as the scripts decide.
        let mut state = [9, 1_000];
        assert_eq!(
            replay(&mut state, args, 0, 1),
            Some([1, 10, 0, 0, 1_000_000])
        );
        assert_eq!(
            replay(&mut state, args, 0, 1),
            Some([0, 10, 0, 1_000_000, 1_000_000])
        );
    }

    #[test]
    fn a_window_redis_cannot_keep_names_the_millisecond_and_the_window() {
        let fine = FixedWindow::new(1, Duration::from_micros(1500)).unwrap();
        let err = fine.validate().unwrap_err();
        assert_eq!(
            err,
            ConfigError::NotWhole {
                what: "Redis fixed window",
                value: Duration::from_micros(1500),
                unit: Duration::from_millis(1),
            }
        );
        assert!(err.to_string().contains("1.5ms"), "{err}");
        let aligned = FixedWindow::aligned(7, Duration::from_secs(60)).unwrap();
        assert_eq!(aligned.validate(), Ok(()));
        assert_eq!(aligned.args(2), [7, 60_000_000, 2, 0]);
        assert_eq!(aligned.key_suffixes(), ["fwa"]);
    }

    #[test]
    fn a_window_too_long_for_lua_names_the_range_not_the_milliseconds() {
        let long = FixedWindow::new(1, Duration::from_secs(u64::MAX / 1_000_000_000)).unwrap();
        match long.validate() {
            Err(ConfigError::DurationOutOfRange {
                what, value, max, ..
            }) => {
                assert_eq!(what, "Redis fixed window");
                assert!(value > max);
            }
            other => panic!("{other:?}"),
        }
    }
}
