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

use redis::Script;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::algorithms::Anchor;
use crate::algorithms::FixedWindow;
use crate::decision::ConfigError;

static ANCHORED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fixed_window.lua")));
/// Reads each key once for the whole batch: the hot-key case costs little more than one call.
static ANCHORED_BATCH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fixed_window_batch.lua")));
static ALIGNED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fixed_window_aligned.lua")));
static ALIGNED_BATCH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fixed_window_aligned_batch.lua")));

/// The window in milliseconds (validated whole when the limiter was built).
fn window_millis(window: &FixedWindow) -> u64 {
    u64::try_from(window.window().as_millis()).unwrap_or(u64::MAX)
}

/// One anchored fixed-window decision of a tally batch, as `fixed_window_batch.lua` decides it:
/// `state` is the counter and its TTL in ms as the script read them (a missing counter: 0 and
/// the window); `args` are `limit`, the window in ms.
fn replay(state: &mut [i64; 2], args: [u64; 4], _now: i64, n: u64) -> [i64; 5] {
    // The limit is under 2^24, the window under 2^51 ms (validated): both fit.
    let (limit, window_ms) = (args[0] as i64, args[1] as i64);
    let n = n as i64;
    let [count, ttl_ms] = state;
    if *count + n <= limit {
        if *count == 0 {
            // INCRBY from nothing opens the window.
            *ttl_ms = window_ms;
        }
        *count += n;
        return [1, limit, limit - *count, 0, *ttl_ms * 1_000];
    }
    // PTTL rounds down: under 1 ms left reads as 0; never announce a retry of nothing.
    let retry_us = (*ttl_ms).max(1) * 1_000;
    [0, limit, (limit - *count).max(0), retry_us, retry_us]
}

/// One aligned fixed-window decision of a tally batch, as `fixed_window_aligned_batch.lua`
/// decides it: `state` is the window index and its count as the script read them (the current
/// window and 0 for a missing or older one); `args` are `limit`, the window in µs. The window
/// ends at `(index + 1) × window` (under 2^53 µs: the window is under 2^51 µs, validated, and
/// the index at most the current one's, or a stored later one's, plus one).
fn replay_aligned(state: &mut [i64; 2], args: [u64; 4], now: i64, n: u64) -> [i64; 5] {
    let (limit, window) = (args[0] as i64, args[1] as i64);
    let [index, count] = state;
    let reset_us = (*index + 1) * window - now;
    if *count + n as i64 <= limit {
        *count += n as i64;
        return [1, limit, limit - *count, 0, reset_us];
    }
    [0, limit, (limit - *count).max(0), reset_us, reset_us]
}

impl sealed::Script for FixedWindow {
    type Local = FixedWindow;

    fn validate(&self) -> Result<(), ConfigError> {
        whole_millis(self.window(), "Redis fixed window").map(|_| ())
    }

    fn script(&self) -> &'static Script {
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
