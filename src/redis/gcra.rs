//! GCRA / token bucket on Redis: one key holding the theoretical arrival time.

use redis::Script;
use std::sync::LazyLock;

use super::limiter::{MAX_WINDOW_MILLIS, RedisAlgorithm, sealed};
use crate::decision::{ConfigError, Rate};

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("gcra.lua")));

/// GCRA (equivalently a token bucket) on Redis: the key holds the theoretical arrival time in
/// microseconds on the server's clock, exactly as the local [`crate::Gcra`] and
/// [`crate::TokenBucket`] hold it in nanoseconds; the key expires when the bucket is full again.
///
/// Time on Redis is in microseconds (the resolution of `TIME`), so the interval per permit is
/// `rate` rounded to whole microseconds: rates up to 1,000,000 per second.
///
/// ```
/// use floodgate::redis::Gcra;
/// use floodgate::Rate;
/// let g = Gcra::new(Rate::per_second(10), 20).unwrap();
/// assert_eq!(g.capacity(), 20);
/// let bucket = Gcra::token_bucket(Rate::per_second(3), 100).unwrap();
/// assert_eq!(bucket.micros_per_permit(), 333_333);
/// assert!(Gcra::new(Rate::per_second(2_000_000), 1).is_err()); // finer than 1 µs
/// ```
#[derive(Clone, Debug)]
pub struct Gcra {
    rate: Rate,
    interval_micros: u64,
    capacity: u32,
}

impl Gcra {
    /// Cells at `rate` with bursts of up to `burst` (as [`crate::Gcra::new`]).
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`], [`ConfigError::RateTooHigh`]
    /// when a permit is worth under 1 µs, [`ConfigError::RateRounding`] when whole microseconds
    /// per permit would change the rate by more than 0.1%, [`ConfigError::DurationOutOfRange`]
    /// when `burst` permits are worth over 2^51 µs (71 years).
    ///
    /// ```
    /// use floodgate::{redis::Gcra, ConfigError, Rate};
    /// let g = Gcra::new(Rate::per_second(100), 10)?;
    /// assert_eq!((g.capacity(), g.micros_per_permit()), (10, 10_000));
    /// assert_eq!(Gcra::new(Rate::per_second(100), 0).unwrap_err(), ConfigError::ZeroLimit);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(rate: Rate, burst: u32) -> Result<Self, ConfigError> {
        let nanos = rate.nanos_per_permit()?;
        if nanos < 1_000 {
            return Err(ConfigError::RateTooHigh {
                finest: std::time::Duration::from_micros(1),
            });
        }
        // Round to nearest without `nanos + 500` (which overflows for a rate near u64::MAX ns).
        let interval_micros = nanos / 1_000 + u64::from(nanos % 1_000 >= 500);
        // Whole microseconds must keep the rate within 0.1%, as `Rate::nanos_per_permit` does
        // for whole nanoseconds: |interval·amount − period| ≤ period / 1000.
        let period = rate.period().as_nanos();
        let kept = u128::from(interval_micros) * 1_000 * u128::from(rate.amount());
        if kept.abs_diff(period) * 1_000 > period {
            return Err(ConfigError::RateRounding {
                amount: rate.amount(),
                period: rate.period(),
                nanos_per_permit: interval_micros.saturating_mul(1_000),
            });
        }
        if burst == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        let tau_micros = u128::from(interval_micros) * u128::from(burst);
        if tau_micros > u128::from(MAX_WINDOW_MILLIS) * 1_000 {
            return Err(ConfigError::DurationOutOfRange {
                what: "redis::Gcra burst × interval per permit",
                value: std::time::Duration::from_micros(
                    u64::try_from(tau_micros).unwrap_or(u64::MAX),
                ),
                min: std::time::Duration::from_micros(1),
                max: std::time::Duration::from_millis(MAX_WINDOW_MILLIS),
            });
        }
        Ok(Gcra {
            rate,
            interval_micros,
            capacity: burst,
        })
    }

    /// A token bucket of `capacity` tokens refilled at `refill` (as [`crate::TokenBucket::new`]).
    ///
    /// # Errors
    /// As [`Gcra::new`].
    ///
    /// ```
    /// use floodgate::{redis::Gcra, Rate};
    /// let bucket = Gcra::token_bucket(Rate::per_second(5), 50)?;
    /// assert_eq!((bucket.capacity(), bucket.rate()), (50, Rate::per_second(5)));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn token_bucket(refill: Rate, capacity: u32) -> Result<Self, ConfigError> {
        Self::new(refill, capacity)
    }

    /// The burst capacity.
    ///
    /// ```
    /// use floodgate::{redis::Gcra, Rate};
    /// assert_eq!(Gcra::new(Rate::per_second(5), 7)?.capacity(), 7);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        u64::from(self.capacity)
    }

    /// The rate.
    ///
    /// ```
    /// use floodgate::{redis::Gcra, Rate};
    /// assert_eq!(Gcra::new(Rate::per_minute(30), 7)?.rate(), Rate::per_minute(30));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Microseconds one permit is worth.
    ///
    /// ```
    /// use floodgate::{redis::Gcra, Rate};
    /// assert_eq!(Gcra::new(Rate::per_minute(30), 7)?.micros_per_permit(), 2_000_000);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn micros_per_permit(&self) -> u64 {
        self.interval_micros
    }
}

impl sealed::Script for Gcra {
    /// During an outage: a local GCRA with the share applied to both rate and burst.
    type Local = crate::Gcra;

    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        &["gcra"]
    }

    fn args(&self, n: u32) -> [u64; 4] {
        [
            self.interval_micros,
            u64::from(self.capacity),
            u64::from(n),
            0,
        ]
    }

    fn limit_u32(&self) -> u32 {
        self.capacity
    }

    fn local(&self, burst: u32) -> Result<crate::Gcra, ConfigError> {
        // The same share of the rate as of the burst.
        let amount = u64::from(self.rate.amount()) * u64::from(burst) / u64::from(self.capacity);
        let amount = u32::try_from(amount.max(1)).unwrap_or(u32::MAX);
        crate::Gcra::new(Rate::new(amount, self.rate.period()), burst)
    }
}

impl RedisAlgorithm for Gcra {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Algorithm as _;
    use crate::redis::limiter::sealed::Script as _;

    #[test]
    fn settings_beyond_the_bounds_are_config_errors() {
        let slow = Rate::new(1, std::time::Duration::from_nanos(u64::MAX));
        match Gcra::new(slow, 1) {
            Err(ConfigError::DurationOutOfRange { value, max, .. }) => {
                assert_eq!(max.as_micros(), u128::from(MAX_WINDOW_MILLIS) * 1_000);
                assert!(value > max, "{value:?}");
            }
            other => panic!("{other:?}"),
        }
        // 300,000/s is 3.33 µs per permit: 3 µs would be +11%.
        assert!(matches!(
            Gcra::new(Rate::per_second(300_000), 1),
            Err(ConfigError::RateRounding {
                amount: 300_000,
                nanos_per_permit: 3_000,
                ..
            })
        ));
        assert!(Gcra::new(Rate::per_second(250_000), 1).is_ok()); // 4 µs exactly
        let err = Gcra::new(Rate::per_second(1), u32::MAX).unwrap_err();
        assert!(err.to_string().contains("redis::Gcra"), "{err}");
    }

    #[test]
    fn local_twin_scales_rate_and_burst_together() {
        let g = Gcra::new(Rate::per_second(100), 40).unwrap();
        let local = g.local(10).unwrap();
        assert_eq!(local.capacity(), 10);
        assert_eq!(local.rate(), Rate::per_second(25));
        assert_eq!(g.micros_per_permit() * 100, 1_000_000);
        assert_eq!(local.limit(), 10);
    }
}
