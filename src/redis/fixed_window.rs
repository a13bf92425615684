//! Fixed window on Redis: anchored (`INCRBY` + `PEXPIRE` on the first hit) or aligned to the
//! server's clock (`PEXPIREAT` at the window's end).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::algorithms::Anchor;
use crate::decision::ConfigError;

static ANCHORED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fixed_window.lua")));
static ALIGNED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fixed_window_aligned.lua")));

/// Fixed window counter on Redis: at most `limit` permits per window, exactly, across every
/// process sharing the key. Same semantics as the local [`crate::FixedWindow`]:
/// [`Anchor::FirstRequest`] opens a window at the first request (the window is the key's TTL);
/// [`Anchor::WallClock`] aligns windows to multiples of the window on the Redis server's clock.
/// A counter found without a TTL is repaired (given one) by the next decision.
///
/// ```
/// use floodgate::redis::FixedWindow;
/// use std::time::Duration;
/// let w = FixedWindow::aligned(100, Duration::from_secs(60)).unwrap();
/// assert_eq!(w.window(), Duration::from_secs(60));
/// // Redis expiries are in milliseconds: finer windows are refused, not rounded.
/// assert!(FixedWindow::new(1, Duration::from_micros(1500)).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct FixedWindow {
    limit: u32,
    window_millis: u64,
    anchor: Anchor,
}

impl FixedWindow {
    /// `limit` permits per `window`, windows opening at the first request.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`], [`ConfigError::Invalid`] for a
    /// window that is not whole milliseconds, [`ConfigError::DurationOverflow`] past 2^51 µs.
    ///
    /// ```
    /// use floodgate::redis::FixedWindow;
    /// use floodgate::{Anchor, ConfigError};
    /// use std::time::Duration;
    /// assert_eq!(FixedWindow::new(10, Duration::from_secs(1))?.anchor(), Anchor::FirstRequest);
    /// assert_eq!(FixedWindow::new(0, Duration::from_secs(1)).unwrap_err(), ConfigError::ZeroLimit);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        Self::with_anchor(limit, window, Anchor::FirstRequest)
    }

    /// `limit` permits per `window`, windows aligned to the server's clock.
    ///
    /// # Errors
    /// As [`FixedWindow::new`].
    ///
    /// ```
    /// use floodgate::{redis::FixedWindow, Anchor};
    /// use std::time::Duration;
    /// let w = FixedWindow::aligned(10, Duration::from_secs(60))?;
    /// assert_eq!(w.anchor(), Anchor::WallClock);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn aligned(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        Self::with_anchor(limit, window, Anchor::WallClock)
    }

    /// `limit` permits per `window` with the given anchor.
    ///
    /// # Errors
    /// As [`FixedWindow::new`].
    ///
    /// ```
    /// use floodgate::{redis::FixedWindow, Anchor};
    /// use std::time::Duration;
    /// let w = FixedWindow::with_anchor(10, Duration::from_millis(250), Anchor::WallClock)?;
    /// assert_eq!((w.window(), w.anchor()), (Duration::from_millis(250), Anchor::WallClock));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_anchor(limit: u32, window: Duration, anchor: Anchor) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        Ok(FixedWindow {
            limit,
            window_millis: whole_millis(window, "Redis window")?,
            anchor,
        })
    }

    /// The window length.
    ///
    /// ```
    /// use floodgate::redis::FixedWindow;
    /// use std::time::Duration;
    /// assert_eq!(FixedWindow::new(10, Duration::from_secs(5))?.window(), Duration::from_secs(5));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_millis)
    }

    /// Where windows start.
    ///
    /// ```
    /// use floodgate::{redis::FixedWindow, Anchor};
    /// use std::time::Duration;
    /// assert_eq!(FixedWindow::aligned(10, Duration::from_secs(5))?.anchor(), Anchor::WallClock);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn anchor(&self) -> Anchor {
        self.anchor
    }
}

impl sealed::Script for FixedWindow {
    type Local = crate::FixedWindow;

    fn script(&self) -> &'static Script {
        match self.anchor {
            Anchor::FirstRequest => &ANCHORED,
            Anchor::WallClock => &ALIGNED,
        }
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        match self.anchor {
            Anchor::FirstRequest => &["fw"],
            Anchor::WallClock => &["fwa"],
        }
    }

    fn args(&self, n: u32) -> [u64; 4] {
        let window = match self.anchor {
            Anchor::FirstRequest => self.window_millis,
            Anchor::WallClock => self.window_millis * 1_000,
        };
        [u64::from(self.limit), window, u64::from(n), 0]
    }

    fn limit_u32(&self) -> u32 {
        self.limit
    }

    fn local(&self, limit: u32) -> Result<crate::FixedWindow, ConfigError> {
        crate::FixedWindow::with_anchor(limit, self.window(), self.anchor)
    }
}

impl RedisAlgorithm for FixedWindow {}
