//! GCRA, the generic cell rate algorithm, as governor and redis-cell run it; the token bucket and
//! the leaky bucket (as a meter) are the same algorithm under other names.

use super::virtual_time::{VirtualTime, time_word_algorithm};
use crate::decision::{ConfigError, Rate};

/// GCRA: cells are emitted one per `T = period / amount`, with up to `burst` cells at once. The
/// state is the theoretical arrival time (TAT); a request for `n` cells conforms if
/// `max(TAT, now) + n·T ≤ now + burst·T`. Same parameters as governor's `Quota` (rate and burst)
/// and redis-cell's `CL.THROTTLE` (`burst` there counts one less).
///
/// A token bucket of capacity `C` refilled at `rate` and a leaky bucket (as a meter) of capacity
/// `C` draining at `rate` admit exactly the same request sequences, so all three are this one
/// type: [`TokenBucket`] and [`LeakyBucket`] are aliases of it, and
/// [`token_bucket`](Gcra::token_bucket) / [`leaky_bucket`](Gcra::leaky_bucket) spell the
/// constructor in their terms. Every constructor takes the rate first, then the burst
/// (capacity). The same value configures the local engine (`AtomicLimiter::new(gcra)`, or
/// [`into_limiter`](crate::IntoLimiter::into_limiter)), Redis (`RedisLimiter::new`) and the
/// keyed maps. Cloning copies the configuration in force (not the history of live changes).
///
/// ```
/// use floodgate::{AtomicLimiter, Gcra, Limiter, ManualClock, Rate};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(2), 2).unwrap(), clock.clone());
/// assert!(gcra.try_acquire(1).unwrap().is_allowed());
/// assert!(gcra.try_acquire(1).unwrap().is_allowed());
/// let d = gcra.try_acquire(1).unwrap();
/// assert!(!d.is_allowed());
/// assert_eq!(d.retry_after(), Duration::from_millis(500));
/// assert_eq!(d.reset_after(), Duration::from_secs(1));
/// ```
#[derive(Debug)]
pub struct Gcra {
    core: VirtualTime,
}

/// Token bucket: holds up to `capacity` tokens, refilled continuously at `refill` (a token every
/// `period / amount`); a request takes `n` tokens or is denied. Starts full.
///
/// The same algorithm as [`Gcra`] (an alias of it): `TokenBucket::new(refill, capacity)` is
/// [`Gcra::token_bucket`]. Stored as one time word: refill is computed from time, so fractional
/// tokens are never rounded away however often the bucket is checked.
///
/// ```
/// use floodgate::{AtomicLimiter, Limiter, ManualClock, Rate, TokenBucket};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let bucket = AtomicLimiter::with_clock(
///     TokenBucket::new(Rate::per_second(5), 10).unwrap(),
///     clock.clone(),
/// );
/// assert_eq!(bucket.try_acquire(10).unwrap().remaining(), 0);
/// let denied = bucket.try_acquire(1).unwrap();
/// assert_eq!(denied.retry_after(), Duration::from_millis(200));
/// clock.advance(Duration::from_millis(200));
/// assert!(bucket.try_acquire(1).unwrap().is_allowed());
/// ```
pub type TokenBucket = Gcra;

/// Leaky bucket as a meter: each request pours `n` units into a bucket of `capacity` that leaks
/// at `leak` (a unit every `period / amount`); a request that would overflow is denied and pours
/// nothing. Starts empty. `remaining` is the free room, `reset_after` the time until empty.
///
/// The meter is the mirror image of the token bucket (water level = capacity − tokens), so it is
/// the same algorithm as [`Gcra`] (an alias of it): `LeakyBucket::new(leak, capacity)` is
/// [`Gcra::leaky_bucket`].
///
/// ```
/// use floodgate::{AtomicLimiter, LeakyBucket, Limiter, ManualClock, Rate};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let meter = AtomicLimiter::with_clock(
///     LeakyBucket::new(Rate::per_second(1), 3).unwrap(),
///     clock.clone(),
/// );
/// assert!(meter.try_acquire(3).unwrap().is_allowed()); // full to the brim
/// assert_eq!(meter.try_acquire(1).unwrap().retry_after(), Duration::from_secs(1));
/// clock.advance(Duration::from_secs(3));
/// assert_eq!(meter.try_acquire(1).unwrap().remaining(), 2); // it drained
/// ```
pub type LeakyBucket = Gcra;

impl Gcra {
    /// Cells at `rate`, with bursts of up to `burst` cells.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] for a zero burst or amount, [`ConfigError::ZeroPeriod`],
    /// [`ConfigError::RateTooHigh`] above one permit per nanosecond,
    /// [`ConfigError::RateRounding`] for a rate that whole nanoseconds per permit cannot keep
    /// within 0.1% ([`Rate::nanos_per_permit`]), [`ConfigError::DurationOverflow`] for a period
    /// beyond `u64` nanoseconds, [`ConfigError::DurationOutOfRange`] when the whole burst
    /// (`burst` × the interval per permit) is worth over 2^62 ns.
    ///
    /// ```
    /// use floodgate::{Gcra, Rate};
    /// let g = Gcra::new(Rate::per_minute(60), 5).unwrap();
    /// assert_eq!(g.capacity(), 5);
    /// assert_eq!(g.nanos_per_permit(), 1_000_000_000);
    /// assert!(Gcra::new(Rate::per_second(1), 0).is_err());
    /// ```
    pub fn new(rate: Rate, burst: u32) -> Result<Self, ConfigError> {
        Ok(Gcra {
            core: VirtualTime::new(rate, burst)?,
        })
    }

    /// A token bucket of `capacity` tokens refilled at `refill` (starts full). The same
    /// configuration as `Gcra::new(refill, capacity)`.
    ///
    /// # Errors
    /// As [`Gcra::new`].
    ///
    /// ```
    /// use floodgate::{Gcra, Rate};
    /// let bucket = Gcra::token_bucket(Rate::per_second(10), 100)?;
    /// assert_eq!((bucket.rate(), bucket.capacity()), (Rate::per_second(10), 100));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn token_bucket(refill: Rate, capacity: u32) -> Result<Self, ConfigError> {
        Self::new(refill, capacity)
    }

    /// A leaky bucket (as a meter) of `capacity` units draining at `leak` (starts empty). The
    /// same configuration as `Gcra::new(leak, capacity)`.
    ///
    /// # Errors
    /// As [`Gcra::new`].
    ///
    /// ```
    /// use floodgate::{Gcra, Rate};
    /// let meter = Gcra::leaky_bucket(Rate::per_second(1), 3)?;
    /// assert_eq!((meter.rate(), meter.capacity()), (Rate::per_second(1), 3));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn leaky_bucket(leak: Rate, capacity: u32) -> Result<Self, ConfigError> {
        Self::new(leak, capacity)
    }
}

/// Copies the configuration in force (rate and burst); the copy has no history of live changes.
///
/// ```
/// use floodgate::{Gcra, Rate};
/// let g = Gcra::new(Rate::per_second(5), 10)?;
/// g.set_capacity(4, 0)?;
/// let copy = g.clone();
/// assert_eq!((copy.rate(), copy.capacity()), (Rate::per_second(5), 4));
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
impl Clone for Gcra {
    fn clone(&self) -> Self {
        Gcra {
            core: self.core.fresh_copy(),
        }
    }
}

time_word_algorithm!(Gcra);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AtomicLimiter, Limiter, ManualClock};
    use std::time::Duration;

    #[test]
    fn the_three_names_admit_the_same_sequences() {
        let clock = ManualClock::new();
        let make = |g: Gcra| AtomicLimiter::with_clock(g, clock.clone());
        let rate = Rate::per_second(4);
        let limiters = [
            make(Gcra::new(rate, 3).unwrap()),
            make(Gcra::token_bucket(rate, 3).unwrap()),
            make(Gcra::leaky_bucket(rate, 3).unwrap()),
        ];
        for step in 0..40u32 {
            let n = 1 + step % 3;
            let decisions: Vec<_> = limiters.iter().map(|l| l.try_acquire(n).unwrap()).collect();
            assert!(decisions.windows(2).all(|w| w[0] == w[1]), "{decisions:?}");
            clock.advance(Duration::from_millis(90));
        }
    }

    #[test]
    fn a_clone_is_a_fresh_bucket_with_the_configuration_in_force() {
        let g = Gcra::new(Rate::per_second(10), 10).unwrap();
        g.set_rate(Rate::per_second(2), 5_000).unwrap();
        let copy = g.clone();
        assert_eq!(copy.rate(), Rate::per_second(2));
        assert_eq!(copy.nanos_per_permit(), 500_000_000);
        let limiter = AtomicLimiter::with_clock(copy, ManualClock::new());
        assert!(limiter.try_acquire(10).unwrap().is_allowed());
    }
}
