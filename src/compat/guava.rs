//! Guava's `RateLimiter` vocabulary: [`GuavaRateLimiter`] on the smooth limiters.
//!
//! floodgate's own verbs on [`SmoothBursty`] and [`SmoothWarmingUp`] are the [`Limiter`] ones
//! (`try_acquire` → [`Decision`](crate::Decision), `acquire` → `Duration`, `try_acquire_for`),
//! plus `reserve`, `set_rate` and `rate`. A port that wants Guava's return types imports this
//! trait:
//!
//! | Guava | here |
//! |---|---|
//! | `double acquire(int permits)` (seconds slept) | [`GuavaRateLimiter::acquire_permits`] → `f64` |
//! | `boolean tryAcquire(int permits, Duration timeout)` | [`GuavaRateLimiter::try_acquire_timeout`] → `bool` |
//!
//! ```
//! use floodgate::compat::guava::GuavaRateLimiter;
//! use floodgate::{ManualClock, SmoothBursty};
//! use std::time::Duration;
//! let limiter = SmoothBursty::create_with_clock(5.0, ManualClock::new())?; // RateLimiter.create(5.0)
//! assert_eq!(limiter.acquire_permits(1)?, 0.0); // R0.00
//! assert_eq!(limiter.acquire_permits(1)?, 0.2); // R0.20, slept on the clock
//! assert!(!limiter.try_acquire_timeout(1, Duration::ZERO)?); // tryAcquire() = false
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use crate::algorithms::smooth::{SmoothBursty, SmoothWarmingUp};
use crate::clock::Clock;
use crate::decision::AcquireError;
use crate::limiter::Limiter;

mod sealed {
    /// Only the smooth limiters have Guava's semantics (pre-consumption, warm-up).
    pub trait Smooth {}
}

impl<C: Clock> sealed::Smooth for SmoothBursty<C> {}
impl<C: Clock> sealed::Smooth for SmoothWarmingUp<C> {}

/// Guava's `RateLimiter` method shapes on [`SmoothBursty`] and [`SmoothWarmingUp`]. Sealed.
///
/// ```
/// use floodgate::compat::guava::GuavaRateLimiter;
/// use floodgate::{ManualClock, SmoothBursty};
/// let clock = ManualClock::new();
/// let limiter = SmoothBursty::create_with_clock(2.0, clock.clone())?;
/// assert_eq!(limiter.acquire_permits(1)?, 0.0); // the first request is free
/// assert_eq!(limiter.acquire_permits(1)?, 0.5); // and the next pays for it: 1 / 2.0 s
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait GuavaRateLimiter: Limiter + sealed::Smooth {
    /// Guava's `acquire(permits)`: books `permits`, sleeps on the clock until the previous
    /// booking is paid, and returns the seconds it asked to sleep (microsecond precision, as
    /// Guava).
    ///
    /// The permits are granted at once whatever their number; the next caller pays for them.
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`] for `permits = 0` (Guava: `IllegalArgumentException`);
    /// [`AcquireError::BookingTooLong`] for a booking of more than a year (Guava books it; a
    /// rate the limiter accepted books one permit within a year, so only `permits > 1` can be);
    /// [`AcquireError::PastEndOfTime`] for a wait that would end past the end of the clock's
    /// timeline (Guava sleeps until `Long.MAX_VALUE` µs, as after a `Double.MIN_VALUE` rate).
    /// Nothing is booked on an error.
    ///
    /// ```
    /// use floodgate::compat::guava::GuavaRateLimiter;
    /// use floodgate::{AcquireError, ManualClock, SmoothBursty, SmoothWarmingUp};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let limiter = SmoothWarmingUp::create_with_clock(2.0, Duration::from_secs(4), clock)?;
    /// assert_eq!(limiter.acquire_permits(1)?, 0.0);
    /// assert!(limiter.acquire_permits(1)? > 0.5); // cold: slower than 1 / 2.0
    /// assert!(matches!(limiter.acquire_permits(u32::MAX), Err(AcquireError::BookingTooLong { .. })));
    /// let never = SmoothBursty::create_with_clock(f64::MIN_POSITIVE, ManualClock::new())?;
    /// assert_eq!(never.acquire_permits(1)?, 0.0); // free, then never again
    /// assert!(matches!(never.acquire_permits(1), Err(AcquireError::PastEndOfTime { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn acquire_permits(&self, permits: u32) -> Result<f64, AcquireError> {
        let waited = self.acquire(permits)?;
        Ok(waited.as_micros() as f64 / 1e6)
    }

    /// Guava's `tryAcquire(permits, timeout)`: if the limiter is free within `timeout`, books
    /// `permits`, sleeps until the previous booking is paid and returns `true`; otherwise
    /// returns `false` at once and changes nothing.
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`] for `permits = 0` (Guava: `IllegalArgumentException`);
    /// [`AcquireError::BookingTooLong`] for a booking of more than a year (`permits > 1` only,
    /// as for [`acquire_permits`](GuavaRateLimiter::acquire_permits)), also when the limiter is
    /// not free within `timeout`: the request is judged as booked when it would be free;
    /// [`AcquireError::PastEndOfTime`] when the limiter is free within `timeout` only after the
    /// end of the clock's timeline (a `false` would say the timeout was too short). Nothing is
    /// booked on an error.
    ///
    /// ```
    /// use floodgate::compat::guava::GuavaRateLimiter;
    /// use floodgate::{AcquireError, ManualClock, SmoothBursty};
    /// use std::time::Duration;
    /// let limiter = SmoothBursty::create_with_clock(5.0, ManualClock::new())?;
    /// assert!(limiter.try_acquire_timeout(1, Duration::ZERO)?);
    /// assert!(!limiter.try_acquire_timeout(1, Duration::ZERO)?);
    /// assert!(limiter.try_acquire_timeout(1, Duration::from_millis(200))?);
    /// let never = SmoothBursty::create_with_clock(f64::MIN_POSITIVE, ManualClock::new())?;
    /// assert!(never.try_acquire_timeout(1, Duration::ZERO)?);
    /// assert!(!never.try_acquire_timeout(1, Duration::from_secs(3600))?);
    /// assert!(matches!(
    ///     never.try_acquire_timeout(1, Duration::MAX),
    ///     Err(AcquireError::PastEndOfTime { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_acquire_timeout(&self, permits: u32, timeout: Duration) -> Result<bool, AcquireError> {
        Ok(self.try_acquire_for(permits, timeout)?.is_allowed())
    }
}

impl<C: Clock> GuavaRateLimiter for SmoothBursty<C> {}
impl<C: Clock> GuavaRateLimiter for SmoothWarmingUp<C> {}
