//! Leaky bucket as a meter: a water level that drains at a rate; overflow is denied.

use super::virtual_time::{VirtualTime, time_word_algorithm};
use crate::decision::{ConfigError, Rate};

/// Leaky bucket as a meter: each request pours `n` units into a bucket of `capacity` that leaks
/// at `leak` (a unit every `period / amount`); a request that would overflow is denied and pours
/// nothing. Starts empty. `remaining` is the free room, `reset_after` the time until empty.
///
/// The meter is the mirror image of the token bucket (water level = capacity − tokens) and is
/// stored the same way, as the time at which the bucket is empty again (see `crate::packed`).
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
#[derive(Debug)]
pub struct LeakyBucket {
    core: VirtualTime,
}

impl LeakyBucket {
    /// A bucket of `capacity` units draining at `leak`.
    ///
    /// # Errors
    /// As [`TokenBucket::new`](crate::TokenBucket::new).
    ///
    /// ```
    /// use floodgate::{LeakyBucket, Rate};
    /// assert!(LeakyBucket::new(Rate::per_second(1), 0).is_err());
    /// ```
    pub fn new(leak: Rate, capacity: u32) -> Result<Self, ConfigError> {
        Ok(LeakyBucket {
            core: VirtualTime::new(leak, capacity)?,
        })
    }
}

time_word_algorithm!(LeakyBucket);
