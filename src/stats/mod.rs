//! Counters that measure rather than limit: the [`RollingCounter`] (event counts per series over
//! the last window, e.g. an error rate for a circuit breaker) and its [`NoSuchSeries`] error.
//!
//! (Named `stats`, not `metrics`: the `metrics` feature is the export of floodgate's own
//! decisions to the `metrics` crate, see `observe`.)
//!
//! ```
//! use floodgate::stats::RollingCounter;
//! use std::time::Duration;
//! let (requests, failures) = (0, 1);
//! let counter = RollingCounter::new(Duration::from_secs(10), 10, 2)?;
//! counter.add(requests, 4)?;
//! counter.add(failures, 1)?;
//! assert_eq!(counter.ratio(failures, requests)?, Some(0.25));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod rolling;

pub use rolling::{NoSuchSeries, RollingCounter};
