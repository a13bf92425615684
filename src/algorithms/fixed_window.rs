//! Fixed window: at most `limit` permits per window, one packed word (see [`crate::packed`]).

use std::time::Duration;

use crate::clock::MAX_CLOCK_LAG_NANOS;
use crate::decision::AcquireError;
use crate::decision::{
    Answer, ConfigError, Decision, at_least_one, check_permits, validate_limit, window_nanos,
};
use crate::limiter::{Algorithm, Step, reads_after, update_timed};
use crate::packed::{
    Divisor, MAX_COUNT, TAG_MASK, TagDistance, pack_window, tag_distance, unpack_window,
};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Where windows start.
///
/// ```
/// use floodgate::algorithms::{Anchor, FixedWindow};
/// use floodgate::{AtomicLimiter, Limiter, ManualClock};
/// use std::time::Duration;
/// let minute = Duration::from_secs(60);
/// assert_eq!(FixedWindow::new(1, minute)?.anchor(), Anchor::FirstRequest);
/// assert_eq!(FixedWindow::aligned(1, minute)?.anchor(), Anchor::WallClock);
/// // Aligned: the first request at 0:30 opens the window 0:00–1:00, which ends at 1:00.
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_secs(30));
/// let limiter = AtomicLimiter::with_clock(
///     FixedWindow::with_anchor(1, minute, Anchor::WallClock)?,
///     clock.clone(),
/// );
/// assert_eq!(limiter.try_acquire(1)?.reset_after(), Duration::from_secs(30));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
/// State: `(tag, count)` in one word, see `crate::packed`. Limits up to 16,777,215 per window.
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
    window: Divisor,
    anchor: Anchor,
    /// Anchored windows store their start in units of `2^shift` ns (`window >> shift` is in
    /// `[65536, 131072)`), rounded up so a window never ends early: a window opens at most
    /// `window / 65536` after the request that opened it.
    shift: u32,
    /// `2^shift − 1`: the nanoseconds into a unit, masked (kept so a decision does not build it).
    unit_mask: u64,
    /// `2^shift`: a unit in nanoseconds (units scale to nanoseconds with one multiply by it, so
    /// the open-window case shifts by `shift` only once).
    unit: u64,
    /// `window >> shift`: whole units in a window.
    window_units: u64,
    /// Aligned: the last window index whose window ends by 2^64 ns (`2^64 / window − 1`), so
    /// `tag × window` for a tag up to it is its window's start, with no overflow.
    last_whole_tag: u64,
    /// How long after `now` a stored window may start and still be kept, in nanoseconds: a
    /// window opened by a clock read at most [`MAX_CLOCK_LAG_NANOS`] ahead of ours (another
    /// core's), which starts no later than that read (aligned: `H`) or the next unit after it
    /// (anchored, the start rounded up: `H + unit − 1`). A window starting later, judged on a
    /// clock read taken after the word was loaded (the engine re-reads), is a leaping clock's
    /// (or one aliased by 2^40 tag units of idleness): its count is folded into the window
    /// opening now. (Counted in whole windows, one or two windows ahead were kept, however
    /// long: a leap of up to two 60 s windows froze the limiter until that window ended.)
    max_lead: u64,
}

/// Copies the configuration in force (the limit as last set, the window, the anchor).
///
/// ```
/// use floodgate::{Algorithm, FixedWindow};
/// let w = FixedWindow::aligned(10, std::time::Duration::from_secs(60))?;
/// w.set_limit(4, 0)?;
/// let copy = w.clone();
/// assert_eq!((copy.limit(), copy.window(), copy.anchor()), (4, w.window(), w.anchor()));
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
impl Clone for FixedWindow {
    fn clone(&self) -> Self {
        FixedWindow {
            // Relaxed: a self-contained config value, as in `limit`.
            limit: AtomicU32::new(self.limit.load(Ordering::Relaxed)),
            window: self.window,
            anchor: self.anchor,
            shift: self.shift,
            unit_mask: self.unit_mask,
            unit: self.unit,
            window_units: self.window_units,
            last_whole_tag: self.last_whole_tag,
            max_lead: self.max_lead,
        }
    }
}

/// Anchored windows count their start in units of at most `window / 2^16`.
const ANCHOR_UNITS_LOG2: u32 = 16;

/// The window in force at `now` for a given state.
struct Current {
    tag: u64,
    count: u64,
    /// Nanoseconds from `now` to the end of the window.
    until_end: u64,
    /// The stored window started more than `max_lead` after `now`: a leaping clock's. Its count is
    /// folded into the window opening now (no admission forgotten) and the word is rewritten.
    leap: bool,
}

impl FixedWindow {
    /// `limit` permits per `window`, windows opening at the first request ([`Anchor::FirstRequest`]).
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`],
    /// [`ConfigError::LimitTooLarge`] above 16,777,215, [`ConfigError::DurationOutOfRange`] for a
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
        validate_limit(limit, MAX_COUNT)?;
        let window_nanos = window_nanos("fixed window", window)?;
        let window = Divisor::new(window_nanos).ok_or(ConfigError::ZeroPeriod)?;
        let shift = (63 - window_nanos.leading_zeros()).saturating_sub(ANCHOR_UNITS_LOG2);
        // A read lagging by up to the horizon sees a window that starts at most `H` after it
        // (anchored: plus the start's round-up, less than a unit).
        let max_lead = match anchor {
            Anchor::WallClock => MAX_CLOCK_LAG_NANOS,
            Anchor::FirstRequest => MAX_CLOCK_LAG_NANOS + ((1u64 << shift) - 1),
        };
        Ok(FixedWindow {
            limit: AtomicU32::new(limit),
            window,
            anchor,
            shift,
            unit_mask: (1u64 << shift) - 1,
            unit: 1u64 << shift,
            window_units: window_nanos >> shift,
            // At most 2^64 − 1 (a 1 ns window): fits.
            last_whole_tag: ((1u128 << 64) / u128::from(window_nanos) - 1) as u64,
            max_lead,
        })
    }

    /// The window length.
    ///
    /// ```
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let w = FixedWindow::new(10, Duration::from_millis(1500))?;
    /// assert_eq!(w.window(), Duration::from_millis(1500));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window.get())
    }

    /// Where windows start.
    ///
    /// ```
    /// use floodgate::{Anchor, FixedWindow};
    /// use std::time::Duration;
    /// assert_eq!(FixedWindow::new(10, Duration::from_secs(1))?.anchor(), Anchor::FirstRequest);
    /// assert_eq!(FixedWindow::aligned(10, Duration::from_secs(1))?.anchor(), Anchor::WallClock);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn anchor(&self) -> Anchor {
        self.anchor
    }

    /// The stored window `tag` (holding `count`), starting `lead` nanoseconds after `now`: a
    /// later clock read's, kept, while it starts at most `max_lead` after `now` (`H`: a lagging
    /// read's lag); further ahead, `None`: a leaping clock's.
    #[inline(always)]
    fn ahead(&self, tag: u64, count: u64, lead: u64, window: u64) -> Option<Current> {
        (lead <= self.max_lead).then(|| Current {
            tag,
            count,
            until_end: lead.saturating_add(window),
            leap: false,
        })
    }

    /// Always inlined: out of line (as a binary with many limiters compiled it), the returned
    /// `Current` goes through memory, a call and a store-to-load chain on every decision.
    ///
    /// `terms`: whether the caller uses `until_end` (false for a bool answer, which lets the
    /// anchored window's common case skip its time compare). The result is the same either way;
    /// only the code differs.
    #[inline(always)]
    fn current(&self, state: u64, now: u64, terms: bool) -> Current {
        let (tag, count) = unpack_window(state);
        match self.anchor {
            Anchor::WallClock => {
                let window = self.window.get();
                // The stored window, if `now` lies in it, with one multiply instead of the
                // division: window `tag` spans `[tag × window, (tag + 1) × window)` when its index
                // is below 2^40 (every window of 2^24 ns or more on the Unix timeline until
                // 2262). `now` in that span makes `index` = `tag`, so this is the `Same` case
                // below (or, with a zero count, the window `index` opening: the same answer).
                // An index of 2^40 or more never passes (its tag is its low bits: a span far
                // behind `now`). `tag ≤ last_whole_tag` keeps the span's end within 2^64, so the
                // product does not overflow and a start past `now` wraps to a difference of at
                // least `window` (one comparison rejects both sides).
                if tag <= self.last_whole_tag {
                    let elapsed = now.wrapping_sub(tag * window);
                    if elapsed < window {
                        return Current {
                            tag,
                            count,
                            until_end: window - elapsed,
                            leap: false,
                        };
                    }
                }
                let index = self.window.divide(now);
                let until_end = window - (now - index * window);
                let mut leap = false;
                if count > 0 {
                    match tag_distance(tag, index & TAG_MASK) {
                        TagDistance::Same => {
                            return Current {
                                tag,
                                count,
                                until_end,
                                leap,
                            };
                        }
                        // Written by a thread whose clock read later: kept, never moved back.
                        // (A zero count pins nothing: the fresh state's tag 0 is no window.)
                        // The stored window starts `lead` after `now`.
                        TagDistance::Ahead(k) => {
                            let lead = (k - 1).saturating_mul(window).saturating_add(until_end);
                            match self.ahead(tag, count, lead, window) {
                                Some(kept) => return kept,
                                None => leap = true,
                            }
                        }
                        TagDistance::Behind(_) => {}
                    }
                }
                Current {
                    tag: index & TAG_MASK,
                    count: if leap { count } else { 0 },
                    until_end,
                    leap,
                }
            }
            Anchor::FirstRequest => {
                let now_units = now >> self.shift;
                // Whole units in a window: bounds every distance before it is shifted back to
                // nanoseconds, so no shift can overflow.
                let window_units = self.window_units;
                // The common case first: the stored window started at most a window's units
                // before `now` (`tag_distance` would say `Same` or `Behind(k ≤ window_units)`:
                // `window_units` < 2^17 is far below the 2^39 at which a distance reads as
                // ahead), and is still open.
                let behind = now_units.wrapping_sub(tag) & TAG_MASK;
                // Without terms, in one comparison: fewer whole units behind than a window holds
                // is open with no time compare (`elapsed` < `behind + 1` units ≤ `window_units`
                // units ≤ `window`); `until_end` is never used (the compiler drops it, and with
                // it the offset into the unit, computed below only for the other cases). With
                // terms, `window − elapsed` is needed anyway: its subtraction is the compare.
                if !terms && count > 0 && behind < window_units {
                    let into_unit = now & self.unit_mask;
                    return Current {
                        tag,
                        count,
                        until_end: self.window.get() - (behind * self.unit + into_unit),
                        leap: false,
                    };
                }
                let into_unit = now & self.unit_mask;
                let mut leap = false;
                if count > 0 {
                    let window = self.window.get();
                    if behind <= window_units {
                        // `behind × unit` is `behind << shift` (≤ window: no overflow); the sum
                        // is below window + unit.
                        let elapsed = behind * self.unit + into_unit;
                        if elapsed < window {
                            return Current {
                                tag,
                                count,
                                until_end: window - elapsed,
                                leap,
                            };
                        }
                    } else {
                        // One unit ahead, the start of a window opened within this unit (rounded
                        // up to the next): as `Ahead(1)` below, decided in one comparison where
                        // `until_end` is not used (a coarse clock's whole first tick).
                        if !terms && behind == TAG_MASK {
                            return Current {
                                tag,
                                count,
                                until_end: window.saturating_add(self.unit - into_unit),
                                leap,
                            };
                        }
                        match tag_distance(tag, now_units & TAG_MASK) {
                            // A start ahead of `now` is the rounding up, or a later clock read
                            // by another thread: kept. Starting more than `max_lead` after
                            // `now`: a leaping clock's window. (`k ≥ 1`: the start is
                            // `k` units on from `now`'s unit, past `now`.)
                            TagDistance::Ahead(k) => {
                                let lead = k.saturating_mul(self.unit) - into_unit;
                                match self.ahead(tag, count, lead, window) {
                                    Some(kept) => return kept,
                                    None => leap = true,
                                }
                            }
                            // Closed (`Same` is the case above).
                            TagDistance::Behind(_) | TagDistance::Same => {}
                        }
                    }
                }
                // No open window: one opens now, its start rounded up to the next unit.
                let round_up = if into_unit == 0 {
                    0
                } else {
                    self.unit_mask + 1 - into_unit
                };
                Current {
                    tag: (now_units + u64::from(into_unit != 0)) & TAG_MASK,
                    count: if leap { count } else { 0 },
                    until_end: self.window.get().saturating_add(round_up),
                    leap,
                }
            }
        }
    }
}

impl FixedWindow {
    /// The short path of one request: every case but a leap (a stored window further ahead than
    /// a lagging read explains), decided exactly as [`decide`](Algorithm::decide) decides it (the
    /// tests compare the two) and written with one compare-exchange, without the general engine's
    /// leap and re-read bookkeeping. A lost compare-exchange decides again on the winner's word
    /// with the same clock read, as `update_timed` does; a leap, or `n` outside `1..=limit`, goes
    /// to the general engine, which starts over with that read.
    #[inline(always)]
    fn short<A: Answer>(
        &self,
        word: &AtomicU64,
        mut read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<A, AcquireError> {
        let limit = self.limit();
        let now = read_clock();
        // Acquire: as in `update`.
        let mut current = word.load(Ordering::Acquire);
        // `n` in `1..=limit`, in one comparison: `n − 1 ≤ limit − 1` (`n = 0` wraps to
        // `u32::MAX`, above any `limit − 1`; a limit is at least 1). Written so, a caller's
        // literal 1 checks nothing (`0 ≤ x` always holds).
        if u64::from(n.wrapping_sub(1)) <= limit.wrapping_sub(1) {
            loop {
                let Current {
                    tag,
                    count,
                    until_end,
                    leap,
                } = self.current(current, now, A::REPORTS_TERMS);
                if leap {
                    break;
                }
                let taken = count + u64::from(n);
                if taken > limit {
                    // `until_end` ≥ 1; a fresh window (count 0) resets at once, as in `decide`.
                    let reset = if count == 0 { 0 } else { until_end };
                    return Ok(A::denied(
                        limit,
                        limit.saturating_sub(count),
                        1,
                        at_least_one(until_end),
                        reset,
                    ));
                }
                // AcqRel / Acquire: as in `update`.
                match word.compare_exchange(
                    current,
                    pack_window(tag, taken),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(A::allowed(limit, limit - taken, 1, until_end)),
                    Err(actual) => current = actual,
                }
            }
        }
        self.general(word, reads_after(now, read_clock), n)
    }

    /// The general engine for one request: `update_timed` over the decider.
    #[cold]
    #[inline(never)]
    fn general<A: Answer>(
        &self,
        word: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<A, AcquireError> {
        Ok(A::of(update_timed(word, read_clock, self.decider(n)?)))
    }
}

impl Algorithm for FixedWindow {
    #[inline(always)]
    fn acquire_word(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<Decision, AcquireError> {
        // A window pins its own time: no floor (NEEDS_TIME_FLOOR is false).
        let _ = floor;
        self.short(word, read_clock, n)
    }

    #[inline(always)]
    fn admit_word(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<bool, AcquireError> {
        let _ = floor;
        self.short(word, read_clock, n)
    }

    #[inline]
    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        check_permits(n, self.limit())
    }

    #[inline]
    fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        let limit = self.limit();
        let Current {
            tag,
            count,
            until_end,
            leap,
        } = self.current(state, now, true);
        let taken = count + u64::from(n);
        let step = if taken <= limit {
            Step::allow(
                pack_window(tag, taken),
                Decision::allow(limit, limit - taken, until_end),
            )
        } else {
            let reset = if count == 0 { 0 } else { until_end };
            let denial = Decision::deny(limit, limit.saturating_sub(count), until_end, reset);
            if leap {
                // The folded window is written even though the request is denied, so the
                // window's end is the same for every later caller (one write per leap).
                Step::repair(pack_window(tag, count.min(MAX_COUNT)), denial)
            } else {
                Step::deny(denial)
            }
        };
        if leap { step.after_leap() } else { step }
    }

    fn is_idle(&self, state: u64, now: u64) -> bool {
        self.current(state, now, true).count == 0
    }

    fn set_limit(&self, limit: u32, _now: u64) -> Result<(), ConfigError> {
        validate_limit(limit, MAX_COUNT)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::MAX_COUNT;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]
        /// The short path (`acquire_word`, `admit_word`) decides and writes exactly as the
        /// general engine (`update_timed` over `decide`), inside its domain (the window open at
        /// the read) and out of it (new windows, windows behind and ahead, leaps, bad `n`).
        #[test]
        fn short_path_decides_as_the_engine(
            // (3 × 2^62: the window after the first ends past 2^64 ns.)
            window in prop_oneof![
                1u64..1_000,
                1_000u64..10_000_000_000,
                Just(u64::MAX / 3),
                Just(3 << 62),
            ],
            limit in 1u32..20,
            aligned in any::<bool>(),
            clock in prop_oneof![4 => 0u64..100_000_000_000, 1 => Just(u64::MAX - 7)],
            // The stored window: the one open at the read (most cases), or a few windows / units
            // off it either way, or anywhere (a leap, or aliased by idleness).
            tag_offset in prop_oneof![6 => Just(0i64), 2 => -3i64..4, 1 => any::<i64>()],
            // Or about a whole window back (the open window's last units and the first closed
            // one): added to the offset above.
            window_back in prop_oneof![3 => Just(None), 1 => (-2i64..=2).prop_map(Some)],
            count in prop_oneof![1 => Just(0u64), 6 => 0u64..25, 1 => Just(MAX_COUNT)],
            n in prop_oneof![6 => 1u32..5, 1 => 0u32..40],
        ) {
            let anchor = if aligned { Anchor::WallClock } else { Anchor::FirstRequest };
            let fixed = FixedWindow::with_anchor(limit, Duration::from_nanos(window), anchor)
                .unwrap();
            let unit = match anchor {
                Anchor::WallClock => fixed.window.divide(clock),
                Anchor::FirstRequest => clock >> fixed.shift,
            };
            let back = window_back.map_or(0, |d| {
                let window_units = match anchor {
                    Anchor::WallClock => 1,
                    Anchor::FirstRequest => fixed.window_units,
                };
                d - window_units as i64
            });
            let tag = unit.wrapping_add_signed(tag_offset.wrapping_add(back)) & TAG_MASK;
            let state = pack_window(tag, count);
            // A later read, for the engine's re-reads on a leap.
            let reads = |first: u64| {
                let mut reads = [first, first.saturating_add(1_000)].into_iter();
                move || reads.next().unwrap_or(u64::MAX)
            };
            let (word_a, word_b, word_c) =
                (AtomicU64::new(state), AtomicU64::new(state), AtomicU64::new(state));
            let floor = AtomicU64::new(0);
            let short = fixed.acquire_word(&word_a, &floor, reads(clock), n);
            let admitted = fixed.admit_word(&word_c, &floor, reads(clock), n);
            let general = fixed
                .decider(n)
                .map(|decide| update_timed(&word_b, reads(clock), decide));
            prop_assert_eq!(short, general);
            prop_assert_eq!(admitted, general.map(|d| d.is_allowed()));
            let word_b = word_b.into_inner();
            prop_assert_eq!(word_a.into_inner(), word_b);
            prop_assert_eq!(word_c.into_inner(), word_b);
            // The aligned window's cases against the plain division (the engine shares them).
            if aligned {
                let want = aligned_model(&fixed, state, clock);
                for terms in [false, true] {
                    let got = fixed.current(state, clock, terms);
                    prop_assert_eq!((got.tag & TAG_MASK, got.count, got.until_end, got.leap), want);
                }
            }
        }
    }

    /// `current` of an aligned window as the division and `tag_distance` give it: `(tag, count,
    /// until_end, leap)`.
    fn aligned_model(fixed: &FixedWindow, state: u64, now: u64) -> (u64, u64, u64, bool) {
        let (tag, count) = unpack_window(state);
        let window = fixed.window.get();
        let index = now / window;
        let until_end = window - now % window;
        let mut leap = false;
        if count > 0 {
            match tag_distance(tag, index & TAG_MASK) {
                TagDistance::Same => return (tag, count, until_end, false),
                TagDistance::Ahead(k) => {
                    // The stored window's start, exactly (u128: no saturation).
                    let start = (u128::from(index) + u128::from(k)) * u128::from(window);
                    let lead = start - u128::from(now);
                    if lead > u128::from(fixed.max_lead) {
                        leap = true;
                    } else {
                        let until_end =
                            u64::try_from(lead + u128::from(window)).unwrap_or(u64::MAX);
                        return (tag, count, until_end, false);
                    }
                }
                TagDistance::Behind(_) => {}
            }
        }
        (
            index & TAG_MASK,
            if leap { count } else { 0 },
            until_end,
            leap,
        )
    }
}
