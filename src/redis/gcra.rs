//! GCRA / token bucket on Redis: one key holding the theoretical arrival time.
//!
//! Runs the local [`crate::Gcra`] configuration (and so [`crate::TokenBucket`] and
//! [`crate::LeakyBucket`]). The key holds the theoretical arrival time in microseconds on the
//! server's clock, exactly as the local engine holds it in nanoseconds; it expires when the
//! bucket is full again. Time on Redis is in microseconds (the resolution of `TIME`), so the
//! interval per permit is the rate rounded to whole microseconds: rates up to 1,000,000 per
//! second, checked when the limiter is built.

use super::lua_script::LuaScript;
use std::sync::LazyLock;
use std::time::Duration;

use super::limiter::{MAX_WINDOW_MILLIS, RedisAlgorithm, sealed};
use crate::algorithms::Gcra;
use crate::decision::{ConfigError, Rate};

pub(super) static SCRIPT: LazyLock<LuaScript> = lua_script!("exact.lua", "decided.lua", "gcra.lua");
/// Reads each key once for the whole batch: the hot-key case costs little more than one call.
pub(super) static BATCH: LazyLock<LuaScript> =
    lua_script!("exact.lua", "tally.lua", "gcra_batch.lua");

/// The interval per permit in whole microseconds, rounded to nearest (at least 1).
fn interval_micros(gcra: &Gcra) -> u64 {
    let nanos = gcra.nanos_per_permit();
    // Round to nearest without `nanos + 500` (which overflows for a rate near u64::MAX ns).
    (nanos / 1_000 + u64::from(nanos % 1_000 >= 500)).max(1)
}

/// What Redis adds to the local checks: a permit worth at least 1 µs, whole microseconds per
/// permit within 0.1% of the rate, and a burst window within Lua's exact integers.
fn validate(gcra: &Gcra) -> Result<(), ConfigError> {
    let rate = gcra.rate();
    let nanos = gcra.nanos_per_permit();
    if nanos < 1_000 {
        return Err(ConfigError::RateTooHigh {
            finest: Duration::from_micros(1),
        });
    }
    let interval_micros = interval_micros(gcra);
    // Whole microseconds must keep the rate within 0.1%, as `Rate::nanos_per_permit` does for
    // whole nanoseconds: |interval·amount − period| ≤ period / 1000.
    let period = rate.period().as_nanos();
    let kept = u128::from(interval_micros) * 1_000 * u128::from(rate.amount());
    if kept.abs_diff(period) * 1_000 > period {
        return Err(ConfigError::RateRounding {
            amount: rate.amount(),
            period: rate.period(),
            nanos_per_permit: interval_micros.saturating_mul(1_000),
        });
    }
    let tau_micros = u128::from(interval_micros) * u128::from(gcra.capacity());
    if tau_micros > u128::from(MAX_WINDOW_MILLIS) * 1_000 {
        return Err(ConfigError::DurationOutOfRange {
            what: "Redis GCRA burst × interval per permit",
            value: Duration::from_micros(u64::try_from(tau_micros).unwrap_or(u64::MAX)),
            min: Duration::from_micros(1),
            max: Duration::from_millis(MAX_WINDOW_MILLIS),
        });
    }
    Ok(())
}

/// One GCRA decision of a tally batch, as `gcra_batch.lua` decides it: `state[0]` is the TAT in
/// µs as the script read it (`now` for a missing key); `args` are the interval per permit in µs
/// and the capacity. Lua computes in doubles, exact here (the TAT and `now` under 2^53: the
/// script reads no other TAT, the client accepts no other state; `capacity × interval` under
/// 2^51, validated; the arithmetic checked all the same: `None` past `i64`), and its
/// `math.floor(x / interval)` is `div_euclid` (a quotient within 1/interval of an integer
/// below it cannot round up to it under 2^53).
fn replay(state: &mut [i64; 2], args: [u64; 4], now: i64, n: u64) -> Option<[i64; 5]> {
    let interval = i64::try_from(args[0]).ok()?;
    let capacity = i64::try_from(args[1]).ok()?;
    let horizon = now.checked_add(capacity.checked_mul(interval)?)?;
    let tat = &mut state[0];
    let base = (*tat).max(now);
    let new_tat = base.checked_add(i64::try_from(n).ok()?.checked_mul(interval)?)?;
    if new_tat <= horizon {
        *tat = new_tat;
        let remaining = horizon.checked_sub(new_tat)?.checked_div_euclid(interval)?;
        return Some([1, capacity, remaining, 0, new_tat.checked_sub(now)?]);
    }
    let remaining = horizon.checked_sub(base)?.checked_div_euclid(interval)?;
    Some([
        0,
        capacity,
        remaining,
        new_tat.checked_sub(horizon)?,
        base.checked_sub(now)?,
    ])
}

impl sealed::Script for Gcra {
    /// During an outage: a local GCRA with the share applied to both rate and burst.
    type Local = Gcra;

    fn validate(&self) -> Result<(), ConfigError> {
        validate(self)
    }

    fn script(&self) -> &'static LuaScript {
        &SCRIPT
    }

    fn batch_script(&self) -> sealed::Batch {
        sealed::Batch::Tally(&BATCH, replay)
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        &["gcra"]
    }

    fn args(&self, n: u32) -> [u64; 4] {
        [interval_micros(self), self.capacity(), u64::from(n), 0]
    }

    fn limit_u32(&self) -> u32 {
        // The capacity is validated to fit a u32.
        u32::try_from(self.capacity()).unwrap_or(u32::MAX)
    }

    fn local(&self, burst: u32) -> Result<Gcra, ConfigError> {
        // The same share of the rate as of the burst.
        let rate = self.rate();
        let amount = u64::from(rate.amount()) * u64::from(burst) / self.capacity().max(1);
        let amount = u32::try_from(amount.max(1)).unwrap_or(u32::MAX);
        Gcra::new(Rate::new(amount, rate.period()), burst)
    }
}

/// GCRA (and so the token and leaky buckets) on Redis.
impl RedisAlgorithm for Gcra {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::limiter::sealed::Script as _;

    #[test]
    fn a_replay_past_i64_is_none_never_a_panic_or_a_wrapped_admission() {
        let (now, args) = (1 << 50, [1_000_000, 10, 1, 0]);
        assert_eq!(replay(&mut [i64::MAX, 0], args, now, 1), None);
        assert_eq!(
            replay(&mut [0, 0], [1 << 62, 10, 1, 0], now, 1),
            None,
            "the horizon"
        );
        assert_eq!(
            replay(&mut [0, 0], [u64::MAX, 1, 1, 0], now, 1),
            None,
            "the interval"
        );
        // In range: a TAT far ahead is denied, as the script denies it (remaining as its floor).
        let far = now + 20_000_000;
        let denied = replay(&mut [far, 0], args, now, 1).unwrap();
        assert_eq!(denied, [0, 10, -10, 11_000_000, 20_000_000]);
    }

    #[test]
    fn settings_beyond_the_bounds_are_config_errors() {
        // 2^52 µs per permit: fine locally (under 2^62 ns), past Lua's exact integers on Redis.
        let slow = Rate::new(1, Duration::from_micros(1 << 52));
        match validate(&Gcra::new(slow, 1).unwrap()) {
            Err(ConfigError::DurationOutOfRange { value, max, .. }) => {
                assert_eq!(max.as_micros(), u128::from(MAX_WINDOW_MILLIS) * 1_000);
                assert!(value > max, "{value:?}");
            }
            other => panic!("{other:?}"),
        }
        // 300,000/s is 3.33 µs per permit: 3 µs would be +11%.
        assert!(matches!(
            validate(&Gcra::new(Rate::per_second(300_000), 1).unwrap()),
            Err(ConfigError::RateRounding {
                amount: 300_000,
                nanos_per_permit: 3_000,
                ..
            })
        ));
        assert!(validate(&Gcra::new(Rate::per_second(250_000), 1).unwrap()).is_ok()); // 4 µs
        let err = validate(&Gcra::new(Rate::per_second(1), u32::MAX).unwrap()).unwrap_err();
        assert!(err.to_string().contains("Redis GCRA"), "{err}");
    }

    #[test]
    fn a_rate_finer_than_a_microsecond_names_the_microsecond() {
        // Fine for the local engine (500 ns per permit), too fine for Redis's clock.
        let gcra = Gcra::new(Rate::per_second(2_000_000), 1).unwrap();
        let err = validate(&gcra).unwrap_err();
        assert_eq!(
            err,
            ConfigError::RateTooHigh {
                finest: Duration::from_micros(1)
            }
        );
        assert!(err.to_string().contains("1µs"), "{err}");
    }

    #[test]
    fn local_twin_scales_rate_and_burst_together() {
        let g = Gcra::new(Rate::per_second(100), 40).unwrap();
        let local = g.local(10).unwrap();
        assert_eq!(local.capacity(), 10);
        assert_eq!(local.rate(), Rate::per_second(25));
        assert_eq!(g.args(1), [10_000, 40, 1, 0]);
        assert_eq!(crate::Algorithm::limit(&local), 10);
    }
}
