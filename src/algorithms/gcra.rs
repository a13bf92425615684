//! GCRA, the generic cell rate algorithm, as governor and redis-cell run it.

use super::virtual_time::{VirtualTime, time_word_algorithm};
use crate::decision::{ConfigError, Rate};

/// GCRA: cells are emitted one per `T = period / amount`, with up to `burst` cells at once. The
/// state is the theoretical arrival time (TAT); a request for `n` cells conforms if
/// `max(TAT, now) + n·T ≤ now + burst·T`. Same parameters as governor's `Quota` (rate and burst)
/// and redis-cell's `CL.THROTTLE` (`burst` there counts one less).
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

impl Gcra {
    /// Cells at `rate`, with bursts of up to `burst` cells.
    ///
    /// # Errors
    /// As [`TokenBucket::new`](crate::TokenBucket::new).
    ///
    /// ```
    /// use floodgate::{Gcra, Rate};
    /// let g = Gcra::new(Rate::per_minute(60), 5).unwrap();
    /// assert_eq!(g.capacity(), 5);
    /// ```
    pub fn new(rate: Rate, burst: u32) -> Result<Self, ConfigError> {
        Ok(Gcra {
            core: VirtualTime::new(rate, burst)?,
        })
    }
}

time_word_algorithm!(Gcra);
