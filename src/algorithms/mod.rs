//! The algorithms. Each is a configuration plus a pure decision over one `u64` state word
//! ([`Algorithm`](crate::Algorithm)); [`AtomicLimiter`](crate::AtomicLimiter) runs it.

mod fixed_window;
mod gcra;
mod leaky_bucket;
pub mod smooth;
mod token_bucket;
pub(crate) mod virtual_time;

pub use fixed_window::{Anchor, FixedWindow};
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
pub use smooth::{SmoothBursty, SmoothSnapshot, SmoothWarmingUp};
pub use token_bucket::TokenBucket;
