//! Fixed window: at most `limit` permits per window, one packed word (see [`crate::packed`]).

use std::time::Duration;

use crate::AcquireError;
use crate::decision::{ConfigError, Decision, check_permits};
use crate::limiter::{Algorithm, Step};
use crate::packed::{MAX_COUNT, TAG_MASK, TagDistance, pack_window, tag_distance, unpack_window};
use crate::sync::{AtomicU32, Ordering};

/// Where windows start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Anchor {
    /// A window opens at the first request after the previous one ended (the classic counter:
    /// `if now - start >= window { start = now; count = 0 }`).
    FirstRequest,
    /// Windows are aligned to multiples of the window length on the clock's timeline, which for
    /// the real clocks is Unix time: a 1-minute window runs 12:00:00–12:01:00 (Redis `EXPIREAT`).
    WallClock,
}

/// Fixed window counter: admits at most `limit` permits per window, exactly, under any
/// interleaving. A client can still send `2 × limit` across a window edge (`limit` at 0:59 and
/// `limit` at 1:00); the sliding window exists to close that gap.
///
/// State: `(tag, count)` in one word, see [`crate::packed`]. Limits up to 16,777,215 per window.
///
/// ```
/// use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let limiter = AtomicLimiter::with_clock(
///     FixedWindow::aligned(2, Duration::from_secs(60)).unwrap(),
///     clock.clone(),
/// );
/// clock.set(59_000_000_000); // 0:59
/// assert!(limiter.try_acquire(2).unwrap().is_allowed());
/// let denied = limiter.try_acquire(1).unwrap();
/// assert_eq!(denied.retry_after(), Duration::from_secs(1));
/// clock.set(60_000_000_000); // 1:00, a new window
/// assert!(limiter.try_acquire(2).unwrap().is_allowed());
/// ```
#[derive(Debug)]
pub struct FixedWindow {
    limit: AtomicU32,
    window_nanos: u64,
    anchor: Anchor,
    /// Anchored windows store their start in units of `2^shift` ns (`window >> shift` is in
    /// `[65536, 131072)`), rounded up so a window never ends early: a window opens at most
    /// `window / 65536` after the request that opened it.
    shift: u32,
}

/// Anchored windows count their start in units of at most `window / 2^16`.
const ANCHOR_UNITS_LOG2: u32 = 16;

/// The window in force at `now` for a given state.
struct Current {
    tag: u64,
    count: u64,
    end: u64,
}

impl FixedWindow {
    /// `limit` permits per `window`, windows opening at the first request ([`Anchor::FirstRequest`]).
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`],
    /// [`ConfigError::LimitTooLarge`] above 16,777,215, [`ConfigError::DurationOverflow`] for a
    /// window beyond `u64` nanoseconds (584 years).
    ///
    /// ```
    /// let w = floodgate::FixedWindow::new(10, std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(w.anchor(), floodgate::Anchor::FirstRequest);
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        Self::with_anchor(limit, window, Anchor::FirstRequest)
    }

    /// `limit` permits per `window`, windows aligned to the clock ([`Anchor::WallClock`]).
    ///
    /// # Errors
    /// As [`FixedWindow::new`].
    ///
    /// ```
    /// let w = floodgate::FixedWindow::aligned(10, std::time::Duration::from_secs(60)).unwrap();
    /// assert_eq!(w.window(), std::time::Duration::from_secs(60));
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
    /// use floodgate::{Anchor, FixedWindow};
    /// assert!(FixedWindow::with_anchor(1, std::time::Duration::ZERO, Anchor::WallClock).is_err());
    /// ```
    pub fn with_anchor(limit: u32, window: Duration, anchor: Anchor) -> Result<Self, ConfigError> {
        validate_limit(limit)?;
        if window.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        let window_nanos =
            u64::try_from(window.as_nanos()).map_err(|_| ConfigError::DurationOverflow)?;
        let shift = (63 - window_nanos.leading_zeros()).saturating_sub(ANCHOR_UNITS_LOG2);
        Ok(FixedWindow {
            limit: AtomicU32::new(limit),
            window_nanos,
            anchor,
            shift,
        })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos)
    }

    /// Where windows start.
    pub fn anchor(&self) -> Anchor {
        self.anchor
    }

    fn current(&self, state: u64, now: u64) -> Current {
        let (tag, count) = unpack_window(state);
        match self.anchor {
            Anchor::WallClock => {
                let index = now / self.window_nanos;
                let end_of = |index: u64| index.saturating_add(1).saturating_mul(self.window_nanos);
                match tag_distance(tag, index & TAG_MASK) {
                    TagDistance::Same => Current {
                        tag,
                        count,
                        end: end_of(index),
                    },
                    // Written by a thread whose clock read later: keep it, never go back.
                    // (A zero count pins nothing: the fresh state's tag 0 is not a window.)
                    TagDistance::Ahead(k) if count > 0 => Current {
                        tag,
                        count,
                        end: end_of(index.saturating_add(k)),
                    },
                    TagDistance::Behind(_) | TagDistance::Ahead(_) => Current {
                        tag: index & TAG_MASK,
                        count: 0,
                        end: end_of(index),
                    },
                }
            }
            Anchor::FirstRequest => {
                let now_units = now >> self.shift;
                let start_units = match tag_distance(tag, now_units & TAG_MASK) {
                    TagDistance::Same => Some(now_units),
                    // A start ahead of `now` is the rounding up, or a later clock read by
                    // another thread: kept. Further ahead than one window can only be a state
                    // aliased by 2^40 units of idleness: it is stale.
                    TagDistance::Ahead(k) if (k << self.shift) <= self.window_nanos => {
                        Some(now_units.saturating_add(k))
                    }
                    TagDistance::Ahead(_) => None,
                    TagDistance::Behind(k) => now_units.checked_sub(k),
                };
                if count > 0 {
                    if let Some(start_units) = start_units {
                        let end = self.anchored_end(start_units);
                        if now < end {
                            return Current { tag, count, end };
                        }
                    }
                }
                // No open window: one opens now, its start rounded up to the next unit.
                let unit_mask = (1u64 << self.shift) - 1;
                let start_units = now_units + u64::from(now & unit_mask != 0);
                Current {
                    tag: start_units & TAG_MASK,
                    count: 0,
                    end: self.anchored_end(start_units),
                }
            }
        }
    }

    fn anchored_end(&self, start_units: u64) -> u64 {
        let end = (u128::from(start_units) << self.shift) + u128::from(self.window_nanos);
        u64::try_from(end).unwrap_or(u64::MAX)
    }
}

fn validate_limit(limit: u32) -> Result<(), ConfigError> {
    if limit == 0 {
        Err(ConfigError::ZeroLimit)
    } else if u64::from(limit) > MAX_COUNT {
        Err(ConfigError::LimitTooLarge {
            limit: u64::from(limit),
            max: MAX_COUNT,
        })
    } else {
        Ok(())
    }
}

impl Algorithm for FixedWindow {
    #[inline]
    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        check_permits(n, self.limit())
    }

    #[inline]
    fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        let limit = self.limit();
        let Current { tag, count, end } = self.current(state, now);
        let until_end = end.saturating_sub(now);
        let taken = count + u64::from(n);
        if taken <= limit {
            Step::allow(
                pack_window(tag, taken),
                Decision::allow(limit, limit - taken, until_end),
            )
        } else {
            let reset = if count == 0 { 0 } else { until_end };
            Step::deny(Decision::deny(
                limit,
                limit.saturating_sub(count),
                until_end,
                reset,
            ))
        }
    }

    fn is_idle(&self, state: u64, now: u64) -> bool {
        self.current(state, now).count == 0
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        validate_limit(limit)?;
        // Relaxed: a single self-contained config value; a racing decision may use either limit.
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    fn limit(&self) -> u64 {
        // Relaxed: see set_limit.
        u64::from(self.limit.load(Ordering::Relaxed))
    }
}
