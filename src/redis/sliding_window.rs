//! Sliding window of cells on Redis (the seeds' `precision`).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::decision::ConfigError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("sliding_window.lua")));

/// Sliding window of cells on Redis: the window is divided into cells of `precision` (aligned
/// to the server's clock), and a request is admitted if the permits taken in the current cell and
/// the ones before it, `window` in all, plus `n` fit the limit. A finer precision follows the
/// true sliding window more closely and costs more fields: one hash field per cell, all in one
/// key (so one hash tag, one slot).
///
/// ```
/// use floodgate::redis::SlidingWindow;
/// use std::time::Duration;
/// let w = SlidingWindow::new(1000, Duration::from_secs(3600), Duration::from_secs(60)).unwrap();
/// assert_eq!(w.cells(), 60);
/// assert!(SlidingWindow::new(10, Duration::from_secs(10), Duration::from_secs(3)).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct SlidingWindow {
    limit: u32,
    window_millis: u64,
    cell_millis: u64,
}

/// Most cells per window (a decision reads every cell).
pub const MAX_CELLS: u64 = 1024;

impl SlidingWindow {
    /// `limit` permits per sliding `window`, counted in cells of `precision`.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`], [`ConfigError::Invalid`] when the
    /// window or precision is not whole milliseconds, the window is not a whole number of cells,
    /// or there are more than [`MAX_CELLS`] cells; [`ConfigError::DurationOverflow`].
    ///
    /// ```
    /// use floodgate::redis::SlidingWindow;
    /// use std::time::Duration;
    /// let w = SlidingWindow::new(100, Duration::from_secs(60), Duration::from_secs(1))?;
    /// assert_eq!(w.cells(), 60);
    /// assert!(SlidingWindow::new(100, Duration::from_secs(60), Duration::from_secs(7)).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn new(limit: u32, window: Duration, precision: Duration) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        let window_millis = whole_millis(window, "Redis window")?;
        let cell_millis = whole_millis(precision, "Redis precision")?;
        if window_millis % cell_millis != 0 {
            return Err(ConfigError::Invalid {
                what: "precision",
                why: "the window must be a whole number of cells",
            });
        }
        if window_millis / cell_millis > MAX_CELLS {
            return Err(ConfigError::Invalid {
                what: "precision",
                why: "at most 1024 cells per window",
            });
        }
        Ok(SlidingWindow {
            limit,
            window_millis,
            cell_millis,
        })
    }

    /// The window length.
    ///
    /// ```
    /// use floodgate::redis::SlidingWindow;
    /// use std::time::Duration;
    /// let w = SlidingWindow::new(100, Duration::from_secs(60), Duration::from_secs(1))?;
    /// assert_eq!(w.window(), Duration::from_secs(60));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_millis)
    }

    /// The cell length.
    ///
    /// ```
    /// use floodgate::redis::SlidingWindow;
    /// use std::time::Duration;
    /// let w = SlidingWindow::new(100, Duration::from_secs(60), Duration::from_millis(500))?;
    /// assert_eq!(w.precision(), Duration::from_millis(500));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn precision(&self) -> Duration {
        Duration::from_millis(self.cell_millis)
    }

    /// Cells per window.
    ///
    /// ```
    /// use floodgate::redis::SlidingWindow;
    /// use std::time::Duration;
    /// let w = SlidingWindow::new(100, Duration::from_secs(60), Duration::from_millis(500))?;
    /// assert_eq!(w.cells(), 120);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn cells(&self) -> u64 {
        self.window_millis / self.cell_millis
    }
}

impl sealed::Script for SlidingWindow {
    /// During an outage: a local fixed window of the same length (coarser, same bound per window).
    type Local = crate::FixedWindow;

    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        &["sw"]
    }

    fn args(&self, n: u32) -> [u64; 4] {
        [
            u64::from(self.limit),
            self.cell_millis * 1_000,
            self.cells(),
            u64::from(n),
        ]
    }

    fn limit_u32(&self) -> u32 {
        self.limit
    }

    fn local(&self, limit: u32) -> Result<crate::FixedWindow, ConfigError> {
        crate::FixedWindow::new(limit, self.window())
    }
}

impl RedisAlgorithm for SlidingWindow {}
