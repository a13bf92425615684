//! [`IntoLimiter`]: the one way from an algorithm's configuration to a local limiter.

use super::{SlidingLog, SlidingLogLimiter, SlidingWindow, SlidingWindowLimiter};
use crate::clock::{Clock, QuantaClock};
use crate::limiter::{Algorithm, AtomicLimiter, Limiter};

/// A configuration the local engine can run: every algorithm's configuration type
/// ([`Gcra`](crate::Gcra) and its aliases, [`FixedWindow`](crate::FixedWindow),
/// [`PackedSlidingWindow`](crate::PackedSlidingWindow), [`SlidingWindow`], [`SlidingLog`])
/// becomes a [`Limiter`] the same way, whatever state the limiter keeps (one word for the
/// [`Algorithm`]s, in an [`AtomicLimiter`]; a ring for the sliding window and the log). The same
/// configuration values are what the Redis and memcached limiters take.
///
/// ```
/// use floodgate::{FixedWindow, Gcra, IntoLimiter, Limiter, ManualClock, Rate, SlidingLog};
/// use std::time::Duration;
/// let per_minute = FixedWindow::new(100, Duration::from_secs(60))?.into_limiter();
/// let smooth = Gcra::new(Rate::per_second(10), 20)?.into_limiter();
/// let logins = SlidingLog::new(5, Duration::from_secs(900))?
///     .into_limiter_with_clock(ManualClock::new()); // tests: a clock they drive
/// assert!(per_minute.try_acquire(1)?.is_allowed() && smooth.try_acquire(20)?.is_allowed());
/// assert_eq!(logins.limit(), 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait IntoLimiter: Sized {
    /// The local limiter that runs this configuration on a clock `C`.
    type Limiter<C: Clock>: Limiter;

    /// A fresh limiter running this configuration on `clock`.
    ///
    /// ```
    /// use floodgate::{IntoLimiter, Limiter, ManualClock, SlidingWindow};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindow::new(1, Duration::from_secs(1), 4)?.into_limiter_with_clock(clock.clone());
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// assert!(!limiter.try_acquire(1)?.is_allowed());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn into_limiter_with_clock<C: Clock>(self, clock: C) -> Self::Limiter<C>;

    /// A fresh limiter running this configuration on the default clock ([`QuantaClock`]).
    ///
    /// ```
    /// use floodgate::{FixedWindow, IntoLimiter, Limiter};
    /// let limiter = FixedWindow::new(3, std::time::Duration::from_secs(1))?.into_limiter();
    /// assert_eq!(limiter.limit(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn into_limiter(self) -> Self::Limiter<QuantaClock> {
        self.into_limiter_with_clock(QuantaClock::new())
    }
}

/// A one-word algorithm runs in an [`AtomicLimiter`] (`into_limiter()` is `AtomicLimiter::new`).
impl<A: Algorithm> IntoLimiter for A {
    type Limiter<C: Clock> = AtomicLimiter<A, C>;

    fn into_limiter_with_clock<C: Clock>(self, clock: C) -> AtomicLimiter<A, C> {
        AtomicLimiter::with_clock(self, clock)
    }
}

/// The sliding window runs in a [`SlidingWindowLimiter`].
impl IntoLimiter for SlidingWindow {
    type Limiter<C: Clock> = SlidingWindowLimiter<C>;

    fn into_limiter_with_clock<C: Clock>(self, clock: C) -> SlidingWindowLimiter<C> {
        SlidingWindowLimiter::from_config(&self, clock)
    }
}

/// The sliding log runs in a [`SlidingLogLimiter`].
impl IntoLimiter for SlidingLog {
    type Limiter<C: Clock> = SlidingLogLimiter<C>;

    fn into_limiter_with_clock<C: Clock>(self, clock: C) -> SlidingLogLimiter<C> {
        SlidingLogLimiter::from_config(&self, clock)
    }
}
