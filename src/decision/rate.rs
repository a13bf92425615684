//! [`Rate`]: how rates are written, and their one rounding to whole nanoseconds per permit.

use std::time::Duration;

use super::ConfigError;

/// A rate: `amount` permits per `period`.
///
/// ```
/// use floodgate::Rate;
/// use std::time::Duration;
/// let r = Rate::per_second(100);
/// assert_eq!(r, Rate::new(100, Duration::from_secs(1)));
/// assert_eq!(r.nanos_per_permit().unwrap(), 10_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u32,
    period: Duration,
}

impl Rate {
    /// `amount` permits per `period`.
    ///
    /// ```
    /// use floodgate::Rate;
    /// use std::time::Duration;
    /// let r = Rate::new(3, Duration::from_millis(30));
    /// assert_eq!(r.nanos_per_permit().unwrap(), 10_000_000);
    /// ```
    pub const fn new(amount: u32, period: Duration) -> Self {
        Rate { amount, period }
    }

    /// `amount` permits per second.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = floodgate::Rate::per_second(4);
    /// assert_eq!((r.amount(), r.period()), (4, Duration::from_secs(1)));
    /// ```
    pub const fn per_second(amount: u32) -> Self {
        Self::new(amount, Duration::from_secs(1))
    }

    /// `amount` permits per minute.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(floodgate::Rate::per_minute(6).period(), Duration::from_secs(60));
    /// assert_eq!(floodgate::Rate::per_minute(6).nanos_per_permit().unwrap(), 10_000_000_000);
    /// ```
    pub const fn per_minute(amount: u32) -> Self {
        Self::new(amount, Duration::from_secs(60))
    }

    /// `amount` permits per hour.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(floodgate::Rate::per_hour(1).period(), Duration::from_secs(3600));
    /// ```
    pub const fn per_hour(amount: u32) -> Self {
        Self::new(amount, Duration::from_secs(3600))
    }

    /// Permits per period.
    ///
    /// ```
    /// assert_eq!(floodgate::Rate::per_second(7).amount(), 7);
    /// ```
    pub const fn amount(&self) -> u32 {
        self.amount
    }

    /// The period.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = floodgate::Rate::new(1, Duration::from_millis(250));
    /// assert_eq!(r.period(), Duration::from_millis(250));
    /// ```
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The time one permit is worth, in whole nanoseconds (rounded to nearest). A rate that this
    /// rounding would change by more than 0.1% (at most [`MAX_RATE_ROUNDING_PER_MILLE`]‰) is
    /// refused rather than silently turned into another rate.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] for a zero amount, [`ConfigError::ZeroPeriod`] for a zero
    /// period, [`ConfigError::RateTooHigh`] when one permit would be worth less than 1 ns (and
    /// 1 ns would not keep the rate within 0.1%),
    /// [`ConfigError::RateRounding`] when whole nanoseconds cannot keep the rate within 0.1%,
    /// [`ConfigError::DurationOverflow`] for a period beyond `u64` nanoseconds.
    ///
    /// ```
    /// use floodgate::{ConfigError, Rate};
    /// use std::time::Duration;
    /// assert_eq!(Rate::new(3, Duration::from_micros(10)).nanos_per_permit(), Ok(3_333)); // −0.01%
    /// assert_eq!(Rate::per_second(0).nanos_per_permit(), Err(ConfigError::ZeroLimit));
    /// // 2 per ns is finer than the 1 ns step.
    /// assert!(matches!(
    ///     Rate::new(2, Duration::from_nanos(1)).nanos_per_permit(),
    ///     Err(ConfigError::RateTooHigh { .. })
    /// ));
    /// // 3 per 4 ns would become 1 per ns (+33%): refused.
    /// assert!(matches!(
    ///     Rate::new(3, Duration::from_nanos(4)).nanos_per_permit(),
    ///     Err(ConfigError::RateRounding { nanos_per_permit: 1, .. })
    /// ));
    /// ```
    pub fn nanos_per_permit(&self) -> Result<u64, ConfigError> {
        if self.amount == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if self.period.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        let period =
            u64::try_from(self.period.as_nanos()).map_err(|_| ConfigError::DurationOverflow)?;
        let amount = u64::from(self.amount);
        let interval = period / amount + u64::from(period % amount >= amount.div_ceil(2));
        let too_high = ConfigError::RateTooHigh {
            finest: Duration::from_nanos(1),
        };
        if interval == 0 {
            return Err(too_high);
        }
        // |interval·amount − period| ≤ period / 1000, in u128 (no overflow).
        let kept = u128::from(interval) * u128::from(amount);
        let error = kept.abs_diff(u128::from(period));
        if error * 1000 > u128::from(period) * u128::from(MAX_RATE_ROUNDING_PER_MILLE) {
            // Finer than one permit per nanosecond (and not within 0.1% of it): the step is the
            // constraint, not the rounding (0.5 to 1 ns per permit rounds up to 1 ns).
            if period < amount {
                return Err(too_high);
            }
            return Err(ConfigError::RateRounding {
                amount: self.amount,
                period: self.period,
                nanos_per_permit: interval,
            });
        }
        Ok(interval)
    }
}

/// The largest change, in per mille of the rate, that [`Rate::nanos_per_permit`] accepts from
/// rounding to whole nanoseconds per permit (1‰ = 0.1%).
///
/// ```
/// assert_eq!(floodgate::decision::MAX_RATE_ROUNDING_PER_MILLE, 1);
/// ```
pub const MAX_RATE_ROUNDING_PER_MILLE: u64 = 1;
