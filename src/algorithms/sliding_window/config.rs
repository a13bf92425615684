//! The sliding window's configuration: a plain value, run locally by
//! [`SlidingWindowLimiter`](super::SlidingWindowLimiter), or on Redis and memcached.

use std::time::Duration;

use super::MAX_LIMIT;
use crate::algorithms::ring::RingGeometry;
use crate::decision::{ConfigError, validate_limit};

/// A sliding window of cells: at most `limit` permits in any `cells` consecutive cells of
/// `window / cells` each. A plain, validated configuration value (`Clone`, `Debug`, `Eq`): the
/// local engine runs it as a [`SlidingWindowLimiter`](super::SlidingWindowLimiter)
/// ([`into_limiter`](crate::IntoLimiter::into_limiter)), and the same value is what
/// `RedisLimiter::new` and `MemcachedLimiter::new` take (they check their own constraints, e.g.
/// whole-millisecond cells on Redis, when the limiter is built).
///
/// ```
/// use floodgate::{IntoLimiter, Limiter, SlidingWindow};
/// use std::time::Duration;
/// // 100 per minute, counted in 60 one-second cells.
/// let config = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
/// assert_eq!((config.limit(), config.cell()), (100, Duration::from_secs(1)));
/// let limiter = config.clone().into_limiter();
/// assert!(limiter.try_acquire(1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    pub(super) limit: u32,
    pub(super) geometry: RingGeometry,
}

impl SlidingWindow {
    /// `limit` permits per `window`, cut into `cells` cells, with `max(1, cells / 4)` future
    /// cells for the local ring's sweep.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::LimitTooLarge`] above 16,777,215,
    /// [`ConfigError::ZeroPeriod`], [`ConfigError::DurationOutOfRange`] (a window past `u64` nanoseconds), and
    /// [`ConfigError::Indivisible`] for a window that does not divide into whole-nanosecond
    /// cells, [`ConfigError::TooLarge`] for more than 65,536 slots, and [`ConfigError::Invalid`]
    /// for zero cells.
    ///
    /// ```
    /// use floodgate::SlidingWindow;
    /// use std::time::Duration;
    /// let w = SlidingWindow::new(100, Duration::from_secs(60), 6)?;
    /// assert_eq!((w.cells(), w.future_cells()), (6, 1));
    /// assert!(SlidingWindow::new(0, Duration::from_secs(60), 6).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn new(limit: u32, window: Duration, cells: u32) -> Result<Self, ConfigError> {
        Self::with_parts(limit, window, cells, (cells / 4).max(1))
    }

    /// The same window with `future` pre-stamped cells (the local ring then has `cells + future`
    /// slots, rounded up to a power of two). More future cells let a sweep that runs less often than once per cell still
    /// prepare every cell before it is used. Redis and memcached ignore it.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero future cells, [`ConfigError::TooLarge`] for more than
    /// 65,536 slots.
    ///
    /// ```
    /// let w = floodgate::SlidingWindow::new(5, std::time::Duration::from_secs(1), 10)?;
    /// assert_eq!(w.with_future_cells(30)?.future_cells(), 30);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_future_cells(self, future: u32) -> Result<Self, ConfigError> {
        Self::with_parts(self.limit, self.window(), self.cells(), future)
    }

    /// Validates the whole configuration at once.
    pub(crate) fn with_parts(
        limit: u32,
        window: Duration,
        cells: u32,
        future: u32,
    ) -> Result<Self, ConfigError> {
        validate_limit(limit, MAX_LIMIT)?;
        Ok(SlidingWindow {
            limit,
            geometry: RingGeometry::new(window, cells, future)?,
        })
    }

    /// The limit per window.
    ///
    /// ```
    /// let w = floodgate::SlidingWindow::new(5, std::time::Duration::from_secs(1), 10)?;
    /// assert_eq!(w.limit(), 5);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// let w = floodgate::SlidingWindow::new(5, Duration::from_secs(60), 60)?;
    /// assert_eq!(w.window(), Duration::from_secs(60));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.geometry.window_nanos())
    }

    /// Cells per window.
    ///
    /// ```
    /// let w = floodgate::SlidingWindow::new(5, std::time::Duration::from_secs(60), 60)?;
    /// assert_eq!(w.cells(), 60);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn cells(&self) -> u32 {
        // At most MAX_SLOTS (validated).
        self.geometry.cells as u32
    }

    /// The length of one cell: `window / cells`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let w = floodgate::SlidingWindow::new(5, Duration::from_secs(60), 120)?;
    /// assert_eq!(w.cell(), Duration::from_millis(500));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn cell(&self) -> Duration {
        Duration::from_nanos(self.geometry.cell_nanos)
    }

    /// Future cells the local ring's sweep pre-stamps.
    ///
    /// ```
    /// let w = floodgate::SlidingWindow::new(5, std::time::Duration::from_secs(60), 60)?;
    /// assert_eq!(w.future_cells(), 15); // default: a quarter of the cells, at least one
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn future_cells(&self) -> u32 {
        // At most MAX_SLOTS (validated).
        self.geometry.future as u32
    }
}
