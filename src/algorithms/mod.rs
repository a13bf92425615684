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
pub(crate) mod ring;
mod sliding_log;
pub mod sliding_window;
pub mod smooth;
pub(crate) mod time_config;
pub(crate) mod virtual_time;

pub use crate::clock::MAX_CLOCK_LAG_NANOS;
pub use fixed_window::{Anchor, FixedWindow};
pub use gcra::{Gcra, LeakyBucket, TokenBucket};
pub use into_limiter::IntoLimiter;
#[cfg(not(floodgate_loom))]
pub use maintenance::{Maintenance, Sweep};
pub use packed_sliding::PackedSlidingWindow;
pub use ring::MAX_SLOTS;
pub use sliding_log::{MAX_SLIDING_LOG_CAPACITY, SlidingLog, SlidingLogLimiter};
pub use sliding_window::{SlidingWindow, SlidingWindowLimiter};
pub use smooth::{SmoothBursty, SmoothSnapshot, SmoothWarmingUp};
