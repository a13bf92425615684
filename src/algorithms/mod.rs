//! The algorithms. Each has one configuration type ([`Gcra`] with its aliases [`TokenBucket`] and
//! [`LeakyBucket`], [`FixedWindow`], [`PackedSlidingWindow`], [`SlidingWindow`], [`SlidingLog`]):
//! a plain `Clone + Debug` value that [`IntoLimiter::into_limiter`] turns into a local limiter,
//! and that the Redis and memcached limiters take as it is. The one-word algorithms
//! ([`Algorithm`](crate::Algorithm)) run in an [`AtomicLimiter`](crate::AtomicLimiter); the
//! sliding window in a [`SlidingWindowLimiter`] (a ring of words); the log in a
//! [`SlidingLogLimiter`] (per-permit timestamps in a ring).

mod fixed_window;
mod gcra;
mod into_limiter;
#[cfg(not(floodgate_loom))]
mod maintenance;
mod packed_sliding;
mod ring;
pub mod rolling;
mod sliding_log;
pub mod sliding_window;
pub mod smooth;
mod time_config;
pub(crate) mod virtual_time;

pub use crate::clock::MAX_CLOCK_LAG_NANOS;
pub use fixed_window::{Anchor, FixedWindow};
pub use gcra::{Gcra, LeakyBucket, TokenBucket};
pub use into_limiter::IntoLimiter;
#[cfg(not(floodgate_loom))]
pub use maintenance::Maintenance;
pub use packed_sliding::PackedSlidingWindow;
pub use ring::MAX_SLOTS;
pub use rolling::{NoSuchSeries, RollingCounter};
pub use sliding_log::{MAX_SLIDING_LOG_CAPACITY, SlidingLog, SlidingLogLimiter};
pub use sliding_window::{SlidingWindow, SlidingWindowLimiter};
pub use smooth::{SmoothBursty, SmoothSnapshot, SmoothWarmingUp};

/// A structure whose upkeep can run ahead of its callers ([`SlidingWindow`],
/// [`RollingCounter`]). Callers do the same work inline when it has not been done, so a sweep is
/// only ever an optimisation.
///
/// ```
/// use floodgate::algorithms::Sweep;
/// let counter = floodgate::RollingCounter::new(std::time::Duration::from_secs(1), 10, 1).unwrap();
/// Sweep::sweep(&counter);
/// ```
pub trait Sweep: Send + Sync + 'static {
    /// Prepares the current and future cells.
    fn sweep(&self);
}
