//! The time-word core shared by [`TokenBucket`](super::TokenBucket),
//! [`LeakyBucket`](super::LeakyBucket) and [`Gcra`](super::Gcra).
//!
//! A token bucket of capacity `C` refilled one token per `T` ns, a leaky bucket (as a meter) of
//! capacity `C` draining one unit per `T` ns, and GCRA with emission interval `T` and burst `C`
//! admit exactly the same request sequences (ITU-T I.371 defines GCRA as the continuous-state
//! leaky bucket). floodgate stores all three as one time: the theoretical arrival time `tat`, the
//! instant at which the bucket is full (token bucket) or empty (leaky bucket) again. Tokens at
//! `now` are `C - (tat - now) / T`, so a fractional token is never rounded away: refill is time,
//! and time is kept to the nanosecond. The only rounding is of `T` itself to whole nanoseconds,
//! once, at configuration ([`Rate::nanos_per_permit`]).
//!
//! Layout: the whole word is `tat` in nanoseconds on the clock's timeline, see [`crate::packed`].

use std::time::Duration;

use crate::AcquireError;
use crate::decision::{ConfigError, Decision, Rate, check_permits};
use crate::limiter::Step;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Largest burst window `capacity × interval` accepted: 2^62 ns (146 years), so `now + tau`
/// stays meaningful on the Unix timeline.
pub(crate) const MAX_TAU_NANOS: u64 = 1 << 62;

/// Live configuration of a time-word bucket.
#[derive(Debug)]
pub(crate) struct VirtualTime {
    /// Nanoseconds one permit is worth.
    interval: AtomicU64,
    /// Permits the bucket holds.
    capacity: AtomicU64,
    /// The period of the configured rate, kept so `set_limit(n)` means "n per period".
    period: AtomicU64,
    /// The amount of the configured rate, kept so `rate()` reads back what was set (the
    /// interval is rounded, so `period / interval` need not give it back).
    amount: AtomicU32,
}

/// The pure decision over a time word.
///
/// ```text
/// base     = max(tat, now)            never moves back when `now` lags
/// new_tat  = base + n·T               (overflow past u64::MAX: denied)
/// allowed  ⇔ new_tat ≤ now + C·T
/// ```
#[inline]
pub(crate) fn decide_tat(tat: u64, now: u64, n: u32, interval: u64, capacity: u64) -> Step {
    let tau = capacity.saturating_mul(interval);
    let horizon = now.saturating_add(tau);
    let base = tat.max(now);
    let cost = u64::from(n).saturating_mul(interval);
    match base.checked_add(cost) {
        Some(new_tat) if new_tat <= horizon => Step::allow(
            new_tat,
            Decision::allow_scaled(capacity, horizon - new_tat, interval, new_tat - now),
        ),
        new_tat => {
            let retry = new_tat.map_or(u64::MAX, |t| t - horizon);
            Step::deny(Decision::deny_scaled(
                capacity,
                horizon.saturating_sub(base),
                interval,
                retry,
                base - now,
            ))
        }
    }
}

impl VirtualTime {
    pub(crate) fn new(rate: Rate, capacity: u32) -> Result<Self, ConfigError> {
        let interval = rate.nanos_per_permit()?;
        validate(interval, capacity)?;
        Ok(VirtualTime {
            interval: AtomicU64::new(interval),
            capacity: AtomicU64::new(u64::from(capacity)),
            period: AtomicU64::new(
                u64::try_from(rate.period().as_nanos())
                    .map_err(|_| ConfigError::DurationOverflow)?,
            ),
            amount: AtomicU32::new(rate.amount()),
        })
    }

    #[inline]
    pub(crate) fn interval(&self) -> u64 {
        // Relaxed: a single self-contained config value; a racing decision may use either value.
        self.interval.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        // Relaxed: as `interval`.
        self.capacity.load(Ordering::Relaxed)
    }

    /// The configured rate, as set (the interval that decides is rounded from it).
    pub(crate) fn rate(&self) -> Rate {
        // Relaxed: as `interval`; a rate read while another thread sets one may pair the new
        // amount with the old period (a diagnostic read, never used to decide).
        let period = self.period.load(Ordering::Relaxed);
        let amount = self.amount.load(Ordering::Relaxed);
        Rate::new(amount, Duration::from_nanos(period))
    }

    pub(crate) fn set_rate(&self, rate: Rate) -> Result<(), ConfigError> {
        let interval = rate.nanos_per_permit()?;
        let capacity = u32::try_from(self.capacity()).unwrap_or(u32::MAX);
        validate(interval, capacity)?;
        let period =
            u64::try_from(rate.period().as_nanos()).map_err(|_| ConfigError::DurationOverflow)?;
        // Relaxed: independent config values; the product is saturated where it is used.
        self.period.store(period, Ordering::Relaxed);
        self.amount.store(rate.amount(), Ordering::Relaxed);
        self.interval.store(interval, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn set_capacity(&self, capacity: u32) -> Result<(), ConfigError> {
        validate(self.interval(), capacity)?;
        // Relaxed: as set_rate.
        self.capacity.store(u64::from(capacity), Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        // Relaxed: as set_rate.
        let period = self.period.load(Ordering::Relaxed);
        self.set_rate(Rate::new(limit, Duration::from_nanos(period)))
    }

    #[inline]
    pub(crate) fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        check_permits(n, self.capacity())
    }

    #[inline]
    pub(crate) fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        decide_tat(state, now, n, self.interval(), self.capacity())
    }

    #[inline]
    pub(crate) fn is_idle(&self, state: u64, now: u64) -> bool {
        state <= now
    }
}

fn validate(interval: u64, capacity: u32) -> Result<(), ConfigError> {
    if capacity == 0 {
        return Err(ConfigError::ZeroLimit);
    }
    match interval.checked_mul(u64::from(capacity)) {
        Some(tau) if tau <= MAX_TAU_NANOS => Ok(()),
        _ => Err(ConfigError::DurationOverflow),
    }
}

/// Implements [`Algorithm`](crate::Algorithm) and the shared setters for a wrapper around
/// [`VirtualTime`] in a field named `core`.
macro_rules! time_word_algorithm {
    ($ty:ident) => {
        impl $crate::limiter::Algorithm for $ty {
            const NEEDS_TIME_FLOOR: bool = true;

            #[inline]
            fn check_permits(&self, n: u32) -> Result<(), $crate::AcquireError> {
                self.core.check_permits(n)
            }

            #[inline]
            fn decide(&self, state: u64, now: u64, n: u32) -> $crate::limiter::Step {
                self.core.decide(state, now, n)
            }

            #[inline]
            fn is_idle(&self, state: u64, now: u64) -> bool {
                self.core.is_idle(state, now)
            }

            fn set_limit(&self, limit: u32) -> Result<(), $crate::ConfigError> {
                self.core.set_limit(limit)
            }

            #[inline]
            fn limit(&self) -> u64 {
                self.core.capacity()
            }
        }

        impl $ty {
            /// Changes the rate live (the capacity stays). Time already booked stays booked.
            ///
            /// # Errors
            /// As the constructor's rate checks; the old rate then stays.
            ///
            /// ```
            /// // Shown on `TokenBucket`; `LeakyBucket` and `Gcra` have the same method.
            /// use floodgate::{Rate, TokenBucket};
            /// let b = TokenBucket::new(10, Rate::per_second(5))?;
            /// b.set_rate(Rate::per_second(20))?;
            /// assert_eq!((b.rate(), b.capacity()), (Rate::per_second(20), 10));
            /// assert!(b.set_rate(Rate::per_second(0)).is_err());
            /// assert_eq!(b.rate(), Rate::per_second(20)); // the old rate stays
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn set_rate(&self, rate: $crate::Rate) -> Result<(), $crate::ConfigError> {
                self.core.set_rate(rate)
            }

            /// Changes the capacity (burst) live.
            ///
            /// # Errors
            /// [`ConfigError::ZeroLimit`](crate::ConfigError::ZeroLimit), or
            /// [`ConfigError::DurationOverflow`](crate::ConfigError::DurationOverflow) when
            /// capacity × interval passes 2^62 ns.
            ///
            /// ```
            /// // Shown on `TokenBucket`; `LeakyBucket` and `Gcra` have the same method.
            /// use floodgate::{ConfigError, Rate, TokenBucket};
            /// let b = TokenBucket::new(10, Rate::per_second(5))?;
            /// b.set_capacity(3)?;
            /// assert_eq!(b.capacity(), 3);
            /// assert_eq!(b.set_capacity(0), Err(ConfigError::ZeroLimit));
            /// # Ok::<(), ConfigError>(())
            /// ```
            pub fn set_capacity(&self, capacity: u32) -> Result<(), $crate::ConfigError> {
                self.core.set_capacity(capacity)
            }

            /// The rate in force.
            ///
            /// ```
            /// // Shown on `TokenBucket`; `LeakyBucket` and `Gcra` have the same method.
            /// use floodgate::{Rate, TokenBucket};
            /// use std::time::Duration;
            /// let b = TokenBucket::new(10, Rate::new(4, Duration::from_secs(2)))?;
            /// assert_eq!(b.rate(), Rate::new(4, Duration::from_secs(2)));
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn rate(&self) -> $crate::Rate {
                self.core.rate()
            }

            /// The capacity (burst) in force.
            ///
            /// ```
            /// // Shown on `TokenBucket`; `LeakyBucket` and `Gcra` have the same method.
            /// use floodgate::{Rate, TokenBucket};
            /// let b = TokenBucket::new(10, Rate::per_second(5))?;
            /// assert_eq!(b.capacity(), 10);
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn capacity(&self) -> u64 {
                self.core.capacity()
            }

            /// Nanoseconds one permit is worth (the rate, rounded once to whole nanoseconds).
            ///
            /// ```
            /// // Shown on `TokenBucket`; `LeakyBucket` and `Gcra` have the same method.
            /// use floodgate::{Rate, TokenBucket};
            /// let b = TokenBucket::new(10, Rate::per_second(3))?;
            /// assert_eq!(b.nanos_per_permit(), 333_333_333); // 1 s / 3, rounded to nearest
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn nanos_per_permit(&self) -> u64 {
                self.core.interval()
            }
        }
    };
}
pub(crate) use time_word_algorithm;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_at_the_end_of_time_is_denied_not_wrapped() {
        // tat near u64::MAX: a further request would pass the end of the timeline.
        let step = decide_tat(u64::MAX - 5, u64::MAX - 10, 1, 10, 3);
        assert!(!step.decision.is_allowed());
        assert_eq!(step.next, None);
        assert_eq!(step.decision.retry_after(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn capacity_times_interval_is_bounded() {
        assert_eq!(
            VirtualTime::new(Rate::new(1, Duration::from_secs(1 << 40)), 1 << 31).unwrap_err(),
            ConfigError::DurationOverflow
        );
    }
}
