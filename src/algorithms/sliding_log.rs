//! Local sliding log: the timestamp of every admitted permit, in a bounded lock-free ring, for an
//! exact "at most `limit` in any window-long span".
//!
//! # Guarantee
//! Every admitted permit is stamped with the time it was decided at. For every half-open span
//! `(x − window, x]`, the permits stamped inside it never exceed the limit, under every
//! interleaving (a request for `n` is admitted at `t` iff the permit `limit − n + 1` admissions
//! back was stamped at or before `t − window`). Time is kept to the nanosecond: no cells, no
//! approximation. Denials are real, except in one case: a permit whose admitter has committed
//! but not yet written its stamp (a thread preempted between those two steps) still counts, so
//! once its true stamp is a window old it can deny a request, for as long as that thread stays
//! preempted (a window or more after its admission). The log never over-admits for it.
//!
//! # When to pick it over [`SlidingWindow`](super::SlidingWindow)
//! The sliding window is cell-approximate (a window-long span that starts inside a cell may hold
//! up to the limit plus that cell's admissions) and costs 16 bytes per ring slot (`cells + future`
//! rounded up to a power of two) whatever the limit; the log is exact and costs 16 bytes per
//! permit of capacity, so it suits small strict limits (5 login attempts per 15 minutes), up to
//! [`MAX_SLIDING_LOG_CAPACITY`] permits.
//!
//! # Time
//! The log runs on a time floor (see [`update_at`](crate::limiter::update_at)) raised on every
//! admission, so stamps are non-decreasing in admission order and a reader whose clock lags the
//! last admitter's is decided at the admitter's time (never refused for its lag, never stamping
//! before it). A floor more than the lag horizon
//! [`MAX_CLOCK_LAG_NANOS`](crate::clock::MAX_CLOCK_LAG_NANOS) ahead of a fresh clock read is a
//! leaping clock's and is not obeyed; a stamp more than the horizon ahead of the decision time
//! is a leaping clock's and counts as expired. So a leap never freezes the log: a leaped stamp
//! holds nothing up beyond the permits admitted before it (the log judges in admission order),
//! and what a leap costs is the leaper's own permits (at most `n` per leaping call), which the
//! log then forgets.
//!
//! # Protocol
//! `head` counts the permits ever admitted. A request for `n` at `now` (floored) reads `head = s`
//! and the slot of permit `q = s + n − 1 − limit`; it commits with one compare-exchange
//! `s → s + n` and then stamps the slots of permits `s .. s + n` with `(permit + 1, now)` (one
//! 128-bit word each, written only forwards: a slot already stamped by a later lap is left).
//! A slot that does not yet hold `q`'s stamp (its admitter is between its commit and its stamp)
//! counts as not expired. A denial re-reads `head` and decides again if it moved, so it is
//! judged on one consistent snapshot.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::smooth::wide::AtomicWide;
use crate::clock::{Clock, MAX_CLOCK_LAG_NANOS, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision, check_permits, validate_limit};
use crate::limiter::{FloorUnits, Limiter, floored, move_floor};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The largest capacity (and so limit) of a [`SlidingLogLimiter`]: 4,096 permits (64 KiB of stamps).
///
/// ```
/// assert_eq!(floodgate::algorithms::MAX_SLIDING_LOG_CAPACITY, 4_096);
/// ```
pub const MAX_SLIDING_LOG_CAPACITY: u32 = 4_096;

/// The log's floor: raised by every admission that moves time (grain 1 ns), so it is the newest
/// stamp exactly.
const LOG_FLOOR: FloorUnits = FloorUnits {
    horizon: MAX_CLOCK_LAG_NANOS,
    grain: 1,
};

/// An exact sliding log: at most `limit` permits in any window-long span, from per-permit
/// timestamps. A plain, validated configuration value (`Clone`, `Debug`, `Eq`): the local engine
/// runs it as a [`SlidingLogLimiter`] ([`into_limiter`](crate::IntoLimiter::into_limiter)), and
/// the same value is what `RedisLimiter::new` takes (a window of whole milliseconds there,
/// checked when the limiter is built).
///
/// ```
/// use floodgate::{IntoLimiter, Limiter, SlidingLog};
/// use std::time::Duration;
/// // 5 login attempts per 15 minutes, exactly.
/// let config = SlidingLog::new(5, Duration::from_secs(900))?;
/// assert_eq!((config.limit(), config.capacity()), (5, 5));
/// let attempts = config.into_limiter();
/// assert!(attempts.try_acquire(5)?.is_allowed());
/// assert!(!attempts.try_acquire(1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u32,
    window_nanos: u64,
    capacity: u32,
}

impl SlidingLog {
    /// At most `limit` permits in any `window`; capacity `limit`.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`]; [`ConfigError::LimitTooLarge`] above
    /// [`MAX_SLIDING_LOG_CAPACITY`]; [`ConfigError::ZeroPeriod`] for a zero window;
    /// [`ConfigError::DurationOutOfRange`] for a window beyond `u64` nanoseconds.
    ///
    /// ```
    /// use floodgate::{ConfigError, SlidingLog};
    /// use std::time::Duration;
    /// assert_eq!(SlidingLog::new(5, Duration::from_secs(60))?.window(), Duration::from_secs(60));
    /// assert_eq!(SlidingLog::new(0, Duration::from_secs(60)), Err(ConfigError::ZeroLimit));
    /// assert!(SlidingLog::new(4_097, Duration::from_secs(60)).is_err());
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        validate_limit(limit, u64::from(MAX_SLIDING_LOG_CAPACITY))?;
        let window_nanos = crate::decision::window_nanos("sliding log window", window)?;
        Ok(SlidingLog {
            limit,
            window_nanos,
            capacity: limit,
        })
    }

    /// The same log with room for `capacity` stamps, so that a local limiter's
    /// [`set_limit`](Limiter::set_limit) can raise the limit up to `capacity` later.
    ///
    /// # Errors
    /// [`ConfigError::LimitTooLarge`] for a capacity above [`MAX_SLIDING_LOG_CAPACITY`] or below
    /// the limit.
    ///
    /// ```
    /// use floodgate::{ConfigError, SlidingLog};
    /// use std::time::Duration;
    /// let log = SlidingLog::new(2, Duration::from_secs(1))?;
    /// assert_eq!(log.with_capacity(10)?.capacity(), 10);
    /// assert_eq!(log.with_capacity(1), Err(ConfigError::LimitTooLarge { limit: 2, max: 1 }));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn with_capacity(self, capacity: u32) -> Result<Self, ConfigError> {
        validate_limit(capacity, u64::from(MAX_SLIDING_LOG_CAPACITY))?;
        validate_limit(self.limit, u64::from(capacity))?;
        Ok(SlidingLog { capacity, ..self })
    }

    /// The limit per window.
    ///
    /// ```
    /// assert_eq!(floodgate::SlidingLog::new(3, std::time::Duration::from_secs(1))?.limit(), 3);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window.
    ///
    /// ```
    /// use std::time::Duration;
    /// let log = floodgate::SlidingLog::new(3, Duration::from_secs(900))?;
    /// assert_eq!(log.window(), Duration::from_secs(900));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos)
    }

    /// Stamps a local log holds: the largest limit its `set_limit` accepts.
    ///
    /// ```
    /// assert_eq!(floodgate::SlidingLog::new(3, std::time::Duration::from_secs(1))?.capacity(), 3);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// An exact sliding-log limiter: at most `limit` permits in any window-long span, from
/// per-permit timestamps (see the `sliding_log` module docs).
///
/// ```
/// use floodgate::{Limiter, ManualClock, SlidingLogLimiter};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// // 3 login attempts per 15 minutes, exactly.
/// let attempts = SlidingLogLimiter::with_clock(3, Duration::from_secs(900), clock.clone())?;
/// for minute in [0, 5, 10] {
///     clock.set(minute * 60_000_000_000);
///     assert!(attempts.try_acquire(1)?.is_allowed());
/// }
/// clock.set(14 * 60_000_000_000);
/// let denied = attempts.try_acquire(1)?;
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Duration::from_secs(60)); // the minute-0 attempt expires at 15
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SlidingLogLimiter<C = QuantaClock> {
    words: CachePadded<Words>,
    /// `(permit + 1) << 64 | stamp` of the newest permit stamped in each slot (`0`: none yet).
    slots: Box<[AtomicWide]>,
    limit: AtomicU32,
    window: u64,
    clock: C,
}

#[derive(Debug)]
struct Words {
    /// Permits admitted ever.
    head: AtomicU64,
    /// The newest decision time any admitter published (the time floor).
    floor: AtomicU64,
}

impl SlidingLogLimiter<QuantaClock> {
    /// At most `limit` permits in any `window`, on the default clock; capacity `limit`.
    ///
    /// # Errors
    /// As [`with_capacity`](SlidingLogLimiter::with_capacity).
    ///
    /// ```
    /// use floodgate::{Limiter, SlidingLogLimiter};
    /// let log = SlidingLogLimiter::new(5, std::time::Duration::from_secs(60))?;
    /// assert!(log.try_acquire(5)?.is_allowed());
    /// assert!(!log.try_acquire(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        Self::with_capacity(limit, window, limit, QuantaClock::new())
    }
}

impl<C: Clock> SlidingLogLimiter<C> {
    /// At most `limit` permits in any `window`, on `clock`; capacity `limit`.
    ///
    /// # Errors
    /// As [`with_capacity`](SlidingLogLimiter::with_capacity).
    ///
    /// ```
    /// use floodgate::{Limiter, ManualClock, SlidingLogLimiter};
    /// let log = SlidingLogLimiter::with_clock(1, std::time::Duration::from_secs(1), ManualClock::new())?;
    /// assert_eq!(log.limit(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(limit: u32, window: Duration, clock: C) -> Result<Self, ConfigError> {
        Self::with_capacity(limit, window, limit, clock)
    }

    /// At most `limit` permits in any `window`, with room for `capacity` stamps, so that
    /// [`set_limit`](Limiter::set_limit) can raise the limit up to `capacity` later.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`]; [`ConfigError::LimitTooLarge`] for a capacity above
    /// [`MAX_SLIDING_LOG_CAPACITY`] or a limit above the capacity; [`ConfigError::ZeroPeriod`]
    /// for a zero window; [`ConfigError::DurationOutOfRange`] for a window beyond `u64`
    /// nanoseconds.
    ///
    /// ```
    /// use floodgate::{ConfigError, Limiter, ManualClock, SlidingLogLimiter};
    /// use std::time::Duration;
    /// let log = SlidingLogLimiter::with_capacity(2, Duration::from_secs(1), 10, ManualClock::new())?;
    /// log.set_limit(10)?;
    /// assert_eq!(log.set_limit(11), Err(ConfigError::LimitTooLarge { limit: 11, max: 10 }));
    /// assert!(SlidingLogLimiter::with_capacity(1, Duration::from_secs(1), 4_097, ManualClock::new()).is_err());
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn with_capacity(
        limit: u32,
        window: Duration,
        capacity: u32,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let config = SlidingLog::new(limit, window)?.with_capacity(capacity)?;
        Ok(Self::from_config(&config, clock))
    }

    /// A fresh log running `config` on `clock` (what [`IntoLimiter`](crate::IntoLimiter) does).
    pub(crate) fn from_config(config: &SlidingLog, clock: C) -> Self {
        SlidingLogLimiter {
            words: CachePadded::new(Words {
                head: AtomicU64::new(0),
                floor: AtomicU64::new(0),
            }),
            slots: (0..config.capacity).map(|_| AtomicWide::new(0)).collect(),
            limit: AtomicU32::new(config.limit),
            window: config.window_nanos,
            clock,
        }
    }

    /// The configuration in force (the limit as last set).
    ///
    /// ```
    /// use floodgate::{Limiter, SlidingLog, SlidingLogLimiter};
    /// use std::time::Duration;
    /// let log = SlidingLogLimiter::new(5, Duration::from_secs(60))?;
    /// log.set_limit(3)?;
    /// assert_eq!(log.config(), SlidingLog::new(3, Duration::from_secs(60))?.with_capacity(5)?);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn config(&self) -> SlidingLog {
        SlidingLog {
            // Relaxed: as the load in `try_acquire`.
            limit: self.limit.load(Ordering::Relaxed),
            window_nanos: self.window,
            capacity: self.capacity(),
        }
    }

    /// The window.
    ///
    /// ```
    /// use std::time::Duration;
    /// let log = floodgate::SlidingLogLimiter::new(3, Duration::from_secs(900))?;
    /// assert_eq!(log.window(), Duration::from_secs(900));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// Stamps the log can hold: the largest limit [`set_limit`](Limiter::set_limit) accepts.
    ///
    /// ```
    /// assert_eq!(floodgate::SlidingLogLimiter::new(3, std::time::Duration::from_secs(1))?.capacity(), 3);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Bytes of memory the log holds (its words and its stamps).
    ///
    /// ```
    /// let log = floodgate::SlidingLogLimiter::new(4_096, std::time::Duration::from_secs(1))?;
    /// assert!(log.memory_bytes() >= 64 * 1024);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + std::mem::size_of_val(&*self.slots)
    }

    /// Permit `p`'s stamp, given that `head` is past `p`: `None` while it is pending (committed,
    /// stamp not written yet), and possibly a later lap's stamp (then `head` moved on, and the
    /// caller decides again).
    fn stamp_of(&self, p: u64) -> Option<u64> {
        let slot = &self.slots[(p % self.slots.len() as u64) as usize];
        // Acquire: pairs with the Release update of the stamper (its stamp is complete).
        let word = slot.load(Ordering::Acquire);
        ((word >> 64) as u64 > p).then_some(word as u64)
    }

    /// Whether permit `p` no longer counts at `now`: stamped a window ago, or by a leaping clock
    /// (more than the lag horizon ahead). A pending stamp still counts, and so does one whose
    /// window ends past the end of the `u64` timeline (it never expires).
    fn expired(&self, p: u64, now: u64) -> bool {
        self.stamp_of(p).is_some_and(|at| {
            at.checked_add(self.window).is_some_and(|end| end <= now)
                || at > now.saturating_add(MAX_CLOCK_LAG_NANOS)
        })
    }

    /// Permits among `from .. to` still in the window at `now`: a binary search for the first
    /// one that has not expired (stamps are non-decreasing in admission order). Advisory: it
    /// only feeds `remaining`.
    fn live_in(&self, from: u64, to: u64, now: u64) -> u64 {
        let (mut lo, mut hi) = (from, to);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.expired(mid, now) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        to - lo
    }

    /// The decision for `n` permits at `now` given `head = s`: whether to admit, and the
    /// [`Decision`]. `newest` bounds the newest stamp (the floor; `now` after a leap).
    fn judge(&self, s: u64, now: u64, n: u32, limit: u32, newest: u64) -> (bool, Decision) {
        let limit64 = u64::from(limit);
        let total = s + u64::from(n);
        // A window that ends past the timeline never ends: `u64::MAX` ("never").
        let until_all_expire = |newest: u64| {
            newest
                .checked_add(self.window)
                .map_or(u64::MAX, |end| end.saturating_sub(now))
        };
        // Permit `q = total − 1 − limit` must have expired; none while the log is not yet full.
        match total.checked_sub(limit64 + 1) {
            Some(q) if !self.expired(q, now) => {
                let at = self.stamp_of(q).unwrap_or(newest);
                let remaining =
                    limit64.saturating_sub(self.live_in(s.saturating_sub(limit64), s, now));
                let decision = Decision::deny(
                    limit64,
                    remaining,
                    until_all_expire(at),
                    until_all_expire(newest),
                );
                (false, decision)
            }
            _ => {
                let live = self.live_in(total.saturating_sub(limit64), s, now) + u64::from(n);
                let reset = until_all_expire(newest.max(now));
                (
                    true,
                    Decision::allow(limit64, limit64.saturating_sub(live), reset),
                )
            }
        }
    }

    /// Writes the stamps of permits `s .. s + n`, forwards only.
    fn stamp(&self, s: u64, n: u32, now: u64) {
        for p in s..s + u64::from(n) {
            let slot = &self.slots[(p % self.slots.len() as u64) as usize];
            let word = (u128::from(p + 1) << 64) | u128::from(now);
            // Release: pairs with the Acquire load of `stamp_of`. A later lap's stamp is kept.
            let _ = slot.fetch_update(Ordering::Release, Ordering::Relaxed, |old| {
                ((old >> 64) as u64 <= p).then_some(word)
            });
        }
    }

    fn decide(&self, n: u32, limit: u32) -> Decision {
        let words = &*self.words;
        let mut clock_now = self.clock.now_nanos();
        let mut fresh = false;
        // Acquire: a head comes with the floor its admitter raised before committing it.
        let mut head = words.head.load(Ordering::Acquire);
        loop {
            // SeqCst (here and on the raise): the floor holds clock reads, and a reader that
            // sees one must also see that time as passed — also when the raiser's commit failed
            // and no Release/Acquire pair on `head` links the two (loom found a weaker load
            // deciding a call at a time after its own return). On x86-64 a SeqCst load is a
            // plain load and the raise is a locked RMW either way.
            let floor_now = words.floor.load(Ordering::SeqCst);
            let (now, leaped) = match floored(clock_now, floor_now, LOG_FLOOR) {
                Some(now) => (now, false),
                None if !fresh => {
                    clock_now = self.clock.now_nanos();
                    fresh = true;
                    continue;
                }
                // A leaping clock's floor: decided on the fresh read.
                None => (clock_now, true),
            };
            let newest = if leaped { now } else { floor_now };
            let (admit, decision) = self.judge(head, now, n, limit, newest);
            if !admit {
                // Acquire: as above. A moved head may have re-stamped what was read: again.
                let again = words.head.load(Ordering::Acquire);
                if again == head {
                    return decision;
                }
                head = again;
                fresh = false;
                continue;
            }
            if !leaped && now > floor_now {
                // SeqCst: as the load above.
                words.floor.fetch_max(now, Ordering::SeqCst);
            }
            // AcqRel: Release publishes the floor raise with the head; Acquire as the load.
            match words.head.compare_exchange_weak(
                head,
                head + u64::from(n),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.stamp(head, n, now);
                    if leaped {
                        // Put a leaping clock's floor back to this fresh read, once this
                        // admission landed (as `update_floored_leap` does); if another thread
                        // moved it meanwhile (another repair, to its own earlier read), raise it
                        // to this read, as `update_floored_leap` does. SeqCst: as above.
                        move_floor(
                            &words.floor,
                            floor_now,
                            now,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                    }
                    return decision;
                }
                Err(actual) => {
                    head = actual;
                    fresh = false;
                }
            }
        }
    }
}

impl<C: Clock> Limiter for SlidingLogLimiter<C> {
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        // Relaxed: a configuration value; a request is judged by the limit before or after a
        // concurrent change.
        let limit = self.limit.load(Ordering::Relaxed);
        check_permits(n, u64::from(limit))?;
        Ok(self.decide(n, limit))
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    /// Changes the limit live, up to the capacity. Stamps already taken stay: lowering the
    /// limit admits nothing until the window holds fewer than the new limit.
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        validate_limit(limit, u64::from(self.capacity()))?;
        // Relaxed: as the load in `try_acquire`.
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    fn limit(&self) -> u64 {
        // Relaxed: as the load in `try_acquire`.
        u64::from(self.limit.load(Ordering::Relaxed))
    }
}
