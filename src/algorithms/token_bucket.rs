//! Token bucket: `capacity` tokens, refilled continuously at a rate.

use super::virtual_time::{VirtualTime, time_word_algorithm};
use crate::decision::{ConfigError, Rate};

/// Token bucket: holds up to `capacity` tokens, refilled continuously at `refill` (a token every
/// `period / amount`); a request takes `n` tokens or is denied. Starts full.
///
/// Stored as one time word (see `crate::packed`): refill is computed from time, so fractional
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
#[derive(Debug)]
pub struct TokenBucket {
    core: VirtualTime,
}

impl TokenBucket {
    /// A bucket of `capacity` tokens refilled at `refill`.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] for a zero capacity or amount, [`ConfigError::ZeroPeriod`],
    /// [`ConfigError::RateTooHigh`] above one token per nanosecond,
    /// [`ConfigError::DurationOverflow`] when refilling the whole bucket takes over 2^62 ns.
    ///
    /// ```
    /// use floodgate::{Rate, TokenBucket};
    /// let b = TokenBucket::new(Rate::per_second(10), 100).unwrap();
    /// assert_eq!(b.nanos_per_permit(), 100_000_000);
    /// ```
    pub fn new(refill: Rate, capacity: u32) -> Result<Self, ConfigError> {
        Ok(TokenBucket {
            core: VirtualTime::new(refill, capacity)?,
        })
    }
}

time_word_algorithm!(TokenBucket);
