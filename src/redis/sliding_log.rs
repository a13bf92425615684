//! Sliding log on Redis: a sorted set of timestamps, exact.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::decision::ConfigError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("sliding_log.lua")));

/// Sliding log on Redis: one sorted-set entry per admitted permit, scored with the server's time
/// in microseconds. Exact: at most `limit` permits in any `window`-long interval. A denial adds
/// no entry. Memory is one entry per permit in the window, so keep `limit` modest (logins,
/// password resets, expensive calls).
///
/// ```
/// use floodgate::redis::SlidingLog;
/// use std::time::Duration;
/// let log = SlidingLog::new(5, Duration::from_secs(900)).unwrap();
/// assert_eq!(log.window(), Duration::from_secs(900));
/// assert!(SlidingLog::new(0, Duration::from_secs(1)).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct SlidingLog {
    limit: u32,
    window_millis: u64,
}

impl SlidingLog {
    /// The largest limit: one request writes up to `n ≤ limit` sorted-set entries inside one
    /// script, during which Redis serves no other client, and a key holds up to `limit` entries.
    /// 10,000 entries take a few milliseconds and about 1 MB; a request of 10⁶ blocked a server
    /// for 2.4 s. Larger limits belong to [`SlidingWindow`](super::SlidingWindow) (constant
    /// memory, approximate) or [`FixedWindow`](super::FixedWindow).
    pub const MAX_LIMIT: u32 = 10_000;

    /// At most `limit` permits in any `window`. Requests ask for `1..=limit` permits, so `n`
    /// is capped by [`MAX_LIMIT`](Self::MAX_LIMIT) too.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::LimitTooLarge`] above
    /// [`MAX_LIMIT`](Self::MAX_LIMIT), [`ConfigError::ZeroPeriod`], [`ConfigError::Invalid`]
    /// for a window that is not whole milliseconds, [`ConfigError::DurationOverflow`].
    ///
    /// ```
    /// use floodgate::{redis::SlidingLog, ConfigError};
    /// use std::time::Duration;
    /// assert!(SlidingLog::new(5, Duration::from_secs(60)).is_ok());
    /// assert_eq!(SlidingLog::new(0, Duration::from_secs(60)).unwrap_err(), ConfigError::ZeroLimit);
    /// assert!(SlidingLog::new(5, Duration::from_micros(10)).is_err()); // not whole milliseconds
    /// let big = SlidingLog::new(1_000_000, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(big, ConfigError::LimitTooLarge { limit: 1_000_000, max: 10_000 });
    /// assert_eq!(big.to_string(), "limit 1000000 is above the supported maximum 10000");
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if limit > Self::MAX_LIMIT {
            return Err(ConfigError::LimitTooLarge {
                limit: u64::from(limit),
                max: u64::from(Self::MAX_LIMIT),
            });
        }
        Ok(SlidingLog {
            limit,
            window_millis: whole_millis(window, "Redis window")?,
        })
    }

    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// let log = floodgate::redis::SlidingLog::new(5, Duration::from_secs(60))?;
    /// assert_eq!(log.window(), Duration::from_secs(60));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_millis)
    }
}

impl sealed::Script for SlidingLog {
    /// During an outage: a local fixed window of the same length (coarser, same bound per window).
    type Local = crate::FixedWindow;

    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        &["sl", "sl:seq"]
    }

    fn args(&self, n: u32) -> [u64; 4] {
        [
            u64::from(self.limit),
            self.window_millis * 1_000,
            u64::from(n),
            0,
        ]
    }

    fn limit_u32(&self) -> u32 {
        self.limit
    }

    fn local(&self, limit: u32) -> Result<crate::FixedWindow, ConfigError> {
        crate::FixedWindow::new(limit, self.window())
    }
}

impl RedisAlgorithm for SlidingLog {}
