//! # floodgate
//!
//! Lock-free, exact, model-checked rate limiting. Every algorithm keeps its whole state in one
//! `AtomicU64` and decides with one pure function and one compare-exchange; a denial writes
//! nothing.
//!
//! ```
//! use floodgate::{AtomicLimiter, FixedWindow, Gcra, Limiter, Rate};
//! use std::time::Duration;
//!
//! // 100 requests per minute, windows aligned to the wall clock.
//! let per_minute = AtomicLimiter::new(FixedWindow::aligned(100, Duration::from_secs(60))?);
//! // 10 per second with bursts of 20.
//! let smooth = AtomicLimiter::new(Gcra::new(Rate::per_second(10), 20)?);
//!
//! let decision = smooth.try_acquire(1)?;
//! if decision.is_allowed() {
//!     // serve; put decision.remaining() in a RateLimit-Remaining header
//! } else {
//!     // 429, Retry-After: decision.retry_after()
//! }
//! assert!(per_minute.try_acquire(1)?.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! New here? The [`guide`] goes from the use case (a global limit, per IP over HTTP, per user,
//! a Guava port, shared via Redis, HTTP + Redis, migrating from tower_governor) to the type and
//! the few lines that set it up.
//!
//! Pieces: [`Clock`]s ([`QuantaClock`] default, [`CoarseClock`], [`MonotonicClock`],
//! [`ManualClock`] for tests), the [`Decision`] every check returns, the [`Limiter`] trait, the
//! [`Algorithm`] trait for packed-word algorithms and [`AtomicLimiter`] that runs one.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithms;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod async_acquire;
pub mod backend;
pub mod clock;
pub mod compat;
pub mod concurrency;
pub mod decision;
// Documentation only: the narrative from use cases to types. Its links reach items of every
// feature, so builds without all of them leave some unresolved (docs.rs builds with all).
#[cfg_attr(
    not(all(
        feature = "axum",
        feature = "redis",
        feature = "memcached",
        feature = "metrics",
        feature = "tracing"
    )),
    allow(rustdoc::broken_intra_doc_links, rustdoc::private_intra_doc_links)
)]
pub mod guide;
pub mod keyed;
pub mod lease;
pub mod limiter;
#[cfg(feature = "memcached")]
#[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
pub mod memcached;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod middleware;
#[cfg(any(feature = "metrics", feature = "tracing"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
pub mod observe;
#[cfg(not(any(feature = "metrics", feature = "tracing")))]
mod observe;
pub(crate) mod packed;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
pub mod sharded;
pub mod stats;
mod sync;

#[cfg(not(floodgate_loom))]
pub use algorithms::Maintenance;
pub use algorithms::PackedSlidingWindow;
pub use algorithms::{Anchor, FixedWindow, Gcra, IntoLimiter, LeakyBucket, TokenBucket};
pub use algorithms::{SlidingLog, SlidingLogLimiter, SlidingWindow, SlidingWindowLimiter};
pub use algorithms::{SmoothBursty, SmoothSnapshot, SmoothWarmingUp};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use async_acquire::{AsyncLimiter, TokioClock};
pub use clock::{Clock, CoarseClock, ManualClock, MonotonicClock, QuantaClock};
pub use concurrency::adaptive::{AdaptiveInFlight, Aimd, Gradient2, Vegas};
pub use concurrency::{InFlight, InFlightPermit, KeyedInFlight, KeyedPermit, OwnedInFlightPermit};
pub use decision::{AcquireError, ConfigError, Decision, Rate};
pub use keyed::{IpKey, IpKeyer, Key, Keyed, PenalizedKeyed, PenaltyBox};
pub use lease::PerCore;
pub use limiter::{Algorithm, AtomicLimiter, Limiter};

/// Internals the loom models in `loom-tests/` drive directly (the CAS engine, the window
/// layout). Exists only under `--cfg floodgate_loom`: never part of the public API.
#[cfg(floodgate_loom)]
#[doc(hidden)]
pub mod loom_internals {
    use crate::Decision;
    use crate::limiter::Step;
    pub use crate::packed::unpack_window;

    /// The send turns of the Redis backend's coalescing ([`crate::backend::Turns`]).
    #[derive(Debug)]
    pub struct TurnsProbe(crate::backend::Turns);

    impl TurnsProbe {
        /// At most `max` turns at a time.
        pub fn new(max: u32) -> Self {
            TurnsProbe(crate::backend::Turns::new(max))
        }

        /// Takes a turn if fewer than `within` are out.
        pub fn take(&self, within: u32) -> bool {
            self.0.take(within)
        }

        /// After pushing work: takes a turn if fewer than `within()` are out.
        pub fn after_push(&self, within: impl FnOnce() -> u32) -> bool {
            self.0.after_push(within)
        }

        /// Gives a turn back, retaking it if `queued()` (turns it may take; 0: none).
        pub fn give_back(&self, queued: impl FnOnce() -> u32) -> bool {
            self.0.give_back(queued)
        }

        /// Turns taken.
        pub fn taken(&self) -> u32 {
            self.0.taken()
        }
    }

    /// The server-clock offset the Redis backend learns ([`crate::backend::ServerOffset`]),
    /// driven with raw samples.
    #[derive(Debug)]
    pub struct ServerOffsetProbe(crate::backend::ServerOffset);

    impl Default for ServerOffsetProbe {
        fn default() -> Self {
            ServerOffsetProbe(crate::backend::ServerOffset::new())
        }
    }

    impl ServerOffsetProbe {
        /// A sample: the server read `server_micros` after the request was sent at
        /// `sent_micros` and before its reply arrived at `received_micros`.
        pub fn sample(&self, server_micros: u64, sent_micros: u64, received_micros: u64) {
            self.0.sample(server_micros, sent_micros, received_micros);
        }

        /// The offset kept.
        pub fn offset(&self) -> Option<u64> {
            self.0.offset()
        }
    }
    /// When the Redis backend last read a reply ([`crate::backend::LastReply`]), driven with
    /// raw µs.
    #[derive(Debug, Default)]
    pub struct LastReplyProbe(crate::backend::LastReply);

    impl LastReplyProbe {
        /// A reply arrived at `micros`.
        pub fn record(&self, micros: u64) {
            self.0.record(micros);
        }

        /// A reply to a call sent at `micros` (a cluster master's), kept only if later than
        /// the time held.
        pub fn record_if_later(&self, micros: u64) {
            self.0.record_if_later(micros);
        }

        /// Whether a reply arrived less than `within_micros` before `now_micros`.
        pub fn answered_within(&self, now_micros: u64, within_micros: u64) -> bool {
            self.0.answered_within(now_micros, within_micros)
        }

        /// The time recorded, in one load (`None`: no reply yet).
        pub fn last(&self) -> Option<u64> {
            self.0.last()
        }
    }

    /// The configuration ring of the time-word buckets
    /// ([`crate::algorithms::time_config::ConfigStore`]), driven directly: generation `g` has
    /// interval = capacity = `g + 1` (so tau = `(g + 1)²`), so a read mixing two generations'
    /// values, or a slot not yet written (all 0), is told apart from a generation's own.
    #[derive(Debug)]
    pub struct ConfigProbe(crate::algorithms::time_config::ConfigStore);

    impl Default for ConfigProbe {
        fn default() -> Self {
            ConfigProbe(crate::algorithms::time_config::ConfigStore::new(
                crate::algorithms::time_config::Snapshot {
                    generation: 0,
                    interval: 1,
                    capacity: 1,
                    changed_at: 0,
                    settled_at: 0,
                    settled_by: 0,
                },
            ))
        }
    }

    impl ConfigProbe {
        /// Publishes the next generation `g` (interval = capacity = `g + 1`), as a setter does.
        pub fn publish_next(&self) {
            let replaced = self.0.replace(|_, current| {
                let value = current.generation + 2;
                Ok::<_, ()>(Some(crate::algorithms::time_config::Snapshot {
                    interval: value,
                    capacity: value,
                    ..current
                }))
            });
            replaced.expect("the probe's snapshots are valid");
        }

        /// The short path's unchecked reads of `generation`'s hot slot: `(interval, capacity,
        /// tau)`, valid only if [`recheck`](Self::recheck) returns `generation` afterwards.
        pub fn read_hot(&self, generation: u64) -> (u64, u64, u64) {
            let hot = self.0.hot(generation);
            (hot.interval(), hot.capacity(), hot.tau())
        }

        /// The short path's validation (`ConfigStore::recheck`): the generation in force.
        pub fn recheck(&self) -> u64 {
            self.0.recheck()
        }
    }

    use crate::sync::AtomicU64;

    /// The sample windows of `AdaptiveInFlight`, driven with raw samples.
    #[derive(Debug)]
    pub struct WindowProbe(crate::concurrency::adaptive::window::Windows);

    impl WindowProbe {
        /// Windows of `duration_nanos` that need `min_samples`, the first opening at `now`.
        pub fn new(duration_nanos: u64, min_samples: u32, now: u64) -> Self {
            let window = crate::concurrency::adaptive::SampleWindow::new(
                std::time::Duration::from_nanos(duration_nanos),
                min_samples,
            )
            .expect("a valid window");
            WindowProbe(crate::concurrency::adaptive::window::Windows::new(
                window, now,
            ))
        }

        /// Records a sample of `rtt_nanos` taken at `now`: the number of samples of the
        /// window this call closed, if it closed one.
        pub fn record(&self, rtt_nanos: u64, now: u64) -> Option<u32> {
            let sample = crate::concurrency::adaptive::Sample {
                rtt_nanos,
                in_flight: 1,
                dropped: false,
            };
            self.0
                .record(&sample, now)
                .map(crate::concurrency::adaptive::window::count)
        }

        /// Samples in the open window.
        pub fn open_count(&self) -> u32 {
            self.0.open_count()
        }
    }

    /// One lease served lock-free (`lease::LeaseSlot`, the serving side of
    /// `redis::LeasedKey`), driven directly.
    #[derive(Debug)]
    pub struct LeaseSlotProbe(crate::lease::LeaseSlot);

    impl Default for LeaseSlotProbe {
        fn default() -> Self {
            LeaseSlotProbe(crate::lease::LeaseSlot::new())
        }
    }

    impl LeaseSlotProbe {
        /// Serves `n` permits: the permits left after them and the clock read, if served.
        pub fn serve(&self, n: u32, clock: &dyn crate::Clock) -> Option<(u64, u64)> {
            self.0.serve(n, clock)
        }

        /// Retires the lease (owner only): its unserved permits.
        pub fn retire(&self) -> u64 {
            self.0.retire()
        }

        /// Publishes a lease of `left` permits served until `expires_at` (owner only).
        pub fn publish(&self, left: u32, expires_at: u64) {
            self.0.publish(left, expires_at);
        }
    }

    /// The engine's CAS loop (`limiter::update`).
    pub fn update(word: &AtomicU64, decide: impl FnMut(u64) -> Step) -> Decision {
        crate::limiter::update(word, decide)
    }

    /// The engine's CAS loop with a time floor (`limiter::update_at`).
    pub fn update_at(
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        decide: impl FnMut(u64, u64) -> Step,
    ) -> Decision {
        crate::limiter::update_at(word, floor, read_clock, decide)
    }
}
pub use sharded::Sharded;

/// The README's code blocks, compiled and run as doctests so the quick start cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
