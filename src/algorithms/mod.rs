//! The algorithms. Each is a configuration plus a pure decision over one `u64` state word
//! ([`Algorithm`](crate::Algorithm)); [`AtomicLimiter`](crate::AtomicLimiter) runs it. The sliding
//! window ([`SlidingWindow`]) and the [`RollingCounter`] are rings of such words instead;
//! [`PackedSlidingWindow`] is a sliding window in one word; [`SlidingLog`] is an exact log of
//! per-permit timestamps in a ring.

mod fixed_window;
mod gcra;
mod leaky_bucket;
#[cfg(not(floodgate_loom))]
mod maintenance;
mod packed_sliding;
mod ring;
pub mod rolling;
mod sliding_log;
pub mod sliding_window;
pub mod smooth;
mod time_config;
mod token_bucket;
pub(crate) mod virtual_time;

pub use crate::clock::MAX_CLOCK_LAG_NANOS;
pub use fixed_window::{Anchor, FixedWindow};
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
#[cfg(not(floodgate_loom))]
pub use maintenance::Maintenance;
pub use packed_sliding::PackedSlidingWindow;
pub use ring::MAX_SLOTS;
pub use rolling::{NoSuchSeries, RollingCounter};
pub use sliding_log::{MAX_SLIDING_LOG_CAPACITY, SlidingLog};
pub use sliding_window::SlidingWindow;
pub use smooth::{SmoothBursty, SmoothSnapshot, SmoothWarmingUp};
pub use token_bucket::TokenBucket;

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
