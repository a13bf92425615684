//! [`Sharded`]: one fixed-window limit split across per-core stripes, so that allow-heavy
//! traffic from many cores does not bounce a single cache line.

use std::cell::Cell;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algorithms::FixedWindow;
use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::decision::{AcquireError, ConfigError, Decision, validate_limit};
use crate::limiter::{Algorithm, Limiter, reads_after, update_timed};
use crate::packed::{Divisor, MAX_COUNT, TAG_MASK, pack_window, unpack_window};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// A fixed-window limit of `limit` permits per wall-clock-aligned window, split across
/// `stripes` words, each on its own cache line.
///
/// Stripe `i` holds a share of the limit (`limit / stripes`, the first `limit % stripes` stripes
/// one more) as its own aligned [`FixedWindow`] word. A caller takes permits from its *home*
/// stripe (threads are numbered on first use and spread round-robin), so while shares last,
/// threads on different cores write different cache lines and throughput grows with cores. When
/// the home stripe cannot serve a request, the caller **borrows**: it tries the other stripes in
/// turn and takes from the first that has room.
///
/// # The global bound
/// All stripes use the same aligned windows, every permit is taken by one compare-exchange on one
/// stripe, and no stripe ever admits past its share. So the permits admitted in one window never
/// exceed the sum of the shares: **at most `limit` per window, exactly, under any interleaving**,
/// like [`FixedWindow::aligned`] (including its `2 × limit` across a window edge).
///
/// # How early it may deny
/// A stripe's count only grows within a window, so a stripe seen without room stays without room.
/// * Requests of one permit are **never denied early**, however unbalanced the load: a denial
///   means every stripe was full, i.e. all `limit` permits of the window were taken. Unbalanced
///   load costs speed (borrowers write other cores' cache lines), not admissions.
/// * A request of `n > 1` permits must fit in one stripe, so it may be denied while up to
///   `stripes × (n − 1)` permits are left in the window, scattered across stripes. For the same
///   reason one request can take at most the largest share (`ceil(limit / stripes)`); more is
///   [`AcquireError::ExceedsCapacity`].
/// * After [`set_limit`](Limiter::set_limit) raises the limit, a caller that saw every stripe full
///   just before may still deny until the window ends (the "all full" hint is advisory).
///
/// `remaining` in an allowing [`Decision`] is the serving stripe's remaining share (a lower bound
/// of the window's); in a denial it is the sum of what the stripes showed when scanned.
///
/// ```
/// use floodgate::{Limiter, ManualClock, Sharded};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let sharded = Sharded::with_clock(10, Duration::from_secs(1), 4, clock.clone()).unwrap();
/// assert_eq!(sharded.stripes(), 4);
/// // One thread alone still gets all 10 permits: it borrows from the other stripes.
/// for _ in 0..10 {
///     assert!(sharded.try_acquire(1).unwrap().is_allowed());
/// }
/// let denied = sharded.try_acquire(1).unwrap();
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Duration::from_secs(1));
/// clock.advance(Duration::from_secs(1)); // next window
/// assert!(sharded.try_acquire(1).unwrap().is_allowed());
/// ```
#[derive(Debug)]
pub struct Sharded<C = QuantaClock> {
    stripes: Box<[CachePadded<Stripe>]>,
    /// `window index + 1` of a window in which some caller saw every stripe full; 0 for none.
    all_full: CachePadded<AtomicU64>,
    limit: AtomicU32,
    /// The window length, as the stripes' own [`FixedWindow`]s divide by it.
    window: Divisor,
    clock: C,
}

/// One stripe: its share of the limit as an aligned fixed window, and its state word.
#[derive(Debug)]
struct Stripe {
    word: AtomicU64,
    window: FixedWindow,
}

impl Sharded<QuantaClock> {
    /// `limit` permits per aligned `window`, on the default clock, with one stripe per available
    /// core (rounded up to a power of two, and at most `limit`).
    ///
    /// # Errors
    /// As [`FixedWindow::aligned`], for the limit and for each stripe's share.
    ///
    /// ```
    /// use floodgate::{Limiter, Sharded};
    /// let sharded = Sharded::new(1000, std::time::Duration::from_secs(1)).unwrap();
    /// assert!(sharded.try_acquire(1).unwrap().is_allowed());
    /// assert_eq!(sharded.limit(), 1000);
    /// ```
    pub fn new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_clock(limit, window, cores, QuantaClock::new())
    }
}

impl<C: Clock> Sharded<C> {
    /// `limit` permits per aligned `window` on `clock`, over `stripes` stripes: rounded up to a
    /// power of two, then down to the largest power of two not above `limit` (every stripe needs
    /// a share of at least one permit).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero stripes, [`ConfigError::TooLarge`] for more than
    /// [`MAX_STRIPES`]; otherwise as [`FixedWindow::aligned`].
    ///
    /// ```
    /// use floodgate::{ManualClock, Sharded};
    /// use std::time::Duration;
    /// let s = Sharded::with_clock(3, Duration::from_secs(1), 6, ManualClock::new()).unwrap();
    /// assert_eq!(s.stripes(), 2); // 6 -> 8 -> at most 3 -> 2
    /// assert!(Sharded::with_clock(3, Duration::from_secs(1), 0, ManualClock::new()).is_err());
    /// ```
    pub fn with_clock(
        limit: u32,
        window: Duration,
        stripes: usize,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if stripes == 0 {
            return Err(ConfigError::Invalid {
                what: "stripes",
                why: "a sharded limiter needs at least one stripe",
            });
        }
        if stripes > MAX_STRIPES {
            return Err(ConfigError::TooLarge {
                what: "Sharded stripes",
                value: u64::try_from(stripes).unwrap_or(u64::MAX),
                max: MAX_STRIPES as u64,
            });
        }
        // Validates the limit and window once, with the limiter's own error.
        FixedWindow::aligned(limit, window)?;
        // Not zero: `aligned` refuses a zero window.
        let window_divisor =
            Divisor::new(duration_to_nanos(window)).ok_or(ConfigError::ZeroPeriod)?;
        // `stripes ≤ MAX_STRIPES`, a power of two: no overflow.
        let wanted = stripes.next_power_of_two();
        let most = 1usize << (usize::BITS - 1 - (limit as usize).leading_zeros());
        let count = wanted.min(most);
        let stripes = (0..count)
            .map(|i| {
                Ok(CachePadded::new(Stripe {
                    word: AtomicU64::new(0),
                    window: FixedWindow::aligned(share(limit, count, i), window)?,
                }))
            })
            .collect::<Result<Box<[_]>, ConfigError>>()?;
        Ok(Sharded {
            stripes,
            all_full: CachePadded::new(AtomicU64::new(0)),
            limit: AtomicU32::new(limit),
            window: window_divisor,
            clock,
        })
    }

    /// The number of stripes (a power of two).
    ///
    /// ```
    /// use floodgate::{ManualClock, Sharded};
    /// let s = Sharded::with_clock(100, std::time::Duration::from_secs(1), 3, ManualClock::new());
    /// assert_eq!(s.unwrap().stripes(), 4);
    /// ```
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// The window length.
    ///
    /// ```
    /// use floodgate::{ManualClock, Sharded};
    /// use std::time::Duration;
    /// let s = Sharded::with_clock(100, Duration::from_secs(1), 2, ManualClock::new()).unwrap();
    /// assert_eq!(s.window(), Duration::from_secs(1));
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window.get())
    }

    /// The largest number of permits one request can take: the largest stripe share,
    /// `ceil(limit / stripes)`.
    ///
    /// ```
    /// use floodgate::{Limiter, ManualClock, Sharded};
    /// use std::time::Duration;
    /// let s = Sharded::with_clock(10, Duration::from_secs(1), 4, ManualClock::new()).unwrap();
    /// assert_eq!(s.max_request(), 3);
    /// assert!(s.try_acquire(4).is_err());
    /// ```
    pub fn max_request(&self) -> u64 {
        // Computed from the global limit, never read from stripe 0: reading a stripe's cache
        // line on every call would bounce it between that stripe's owner and everyone else.
        // The stripe count is a power of two: a shift, not a division.
        let shift = self.stripes.len().trailing_zeros();
        (self.limit() + (1 << shift) - 1) >> shift
    }

    /// Takes `n` permits with `home` (reduced modulo [`stripes`](Sharded::stripes)) as the home
    /// stripe. [`try_acquire`](Limiter::try_acquire) calls this with the calling thread's stripe;
    /// call it directly to pin a caller to a stripe (tests, models, a thread pool that knows its
    /// worker index).
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`], or [`AcquireError::ExceedsCapacity`] above
    /// [`max_request`](Sharded::max_request).
    ///
    /// ```
    /// use floodgate::{ManualClock, Sharded};
    /// use std::time::Duration;
    /// let s = Sharded::with_clock(4, Duration::from_secs(1), 2, ManualClock::new()).unwrap();
    /// assert_eq!(s.try_acquire_on(0, 2).unwrap().remaining(), 0); // stripe 0's share is gone
    /// assert!(s.try_acquire_on(0, 2).unwrap().is_allowed()); // borrowed from stripe 1
    /// assert!(!s.try_acquire_on(1, 1).unwrap().is_allowed());
    /// ```
    #[inline]
    pub fn try_acquire_on(&self, home: usize, n: u32) -> Result<Decision, AcquireError> {
        let now = self.clock.now_nanos();
        let home = home & (self.stripes.len() - 1);
        match self.try_home(home, now, n) {
            Some(decision) => Ok(decision),
            None => self.try_acquire_general(home, now, n),
        }
    }

    /// The common case in one pass, without the engine: the home stripe's word holds the window
    /// of `now` (or an older one, or nothing), and either serves the request with one
    /// compare-exchange that lands, or is full and the "all full" hint for this window is set.
    /// It decides exactly as [`take`](Self::take) and [`try_acquire_general`]
    /// (Self::try_acquire_general) do there (`FixedWindow::decide` on an aligned window; the
    /// tests compare the two) and writes nothing but that compare-exchange. `None` for anything
    /// else: zero permits or more than the stripe's share, a window ahead of `now` (another
    /// core's later read, or a leaping clock's), a lost compare-exchange, a full stripe without
    /// the hint (borrowing); the general path then starts over from the same clock read.
    #[inline(always)]
    fn try_home(&self, home: usize, now: u64, n: u32) -> Option<Decision> {
        let stripe = &self.stripes[home];
        let share = stripe.window.limit();
        let n = u64::from(n);
        // n in 1..=share: not zero, and within `max_request` (no share exceeds it).
        if n.wrapping_sub(1) >= share {
            return None;
        }
        let index = self.window.divide(now);
        let window = self.window.get();
        let until_end = window - (now - index * window);
        let tag = index & TAG_MASK;
        // Acquire: as the engine's load (`update`); the word is the only state decided on.
        let current = stripe.word.load(Ordering::Acquire);
        let (stored, count) = unpack_window(current);
        // The stored window's count if it is `now`'s; zero if it is older (up to 2^39 windows
        // behind, as `tag_distance` reads it) or empty; a window ahead goes to the engine.
        let behind = tag.wrapping_sub(stored) & TAG_MASK;
        let count = if behind == 0 {
            count
        } else if count == 0 || behind <= TAG_MASK >> 1 {
            0
        } else {
            return None;
        };
        let taken = count + n;
        if taken <= share {
            // AcqRel / Acquire: as the engine's compare-exchange (`update`).
            return stripe
                .word
                .compare_exchange(
                    current,
                    pack_window(tag, taken),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .ok()
                .map(|_| Decision::allow(self.limit(), share - taken, until_end));
        }
        // Denied by the home stripe: `count > 0` here (n ≤ share), so the stripe's window is
        // `now`'s. Relaxed: an advisory hint, as in `try_acquire_general`.
        if self.all_full.load(Ordering::Relaxed) != index.saturating_add(1) {
            return None;
        }
        Some(Decision::deny(
            self.limit(),
            share.saturating_sub(count),
            until_end,
            until_end,
        ))
    }

    /// Everything [`try_home`](Self::try_home) does not serve: the permit check, the home
    /// stripe through the engine, then borrowing from the other stripes.
    #[cold]
    #[inline(never)]
    fn try_acquire_general(&self, home: usize, now: u64, n: u32) -> Result<Decision, AcquireError> {
        crate::decision::check_permits(n, self.max_request())?;
        let mask = self.stripes.len() - 1;
        let first = self.take(home, now, n);
        if first.is_allowed() {
            return Ok(self.global(first));
        }
        // Borrow. A hint that this window is already full everywhere spares the scan.
        let window_mark = self.window.divide(now).saturating_add(1);
        // Relaxed: an advisory hint; every admission is still decided by a stripe's own word.
        if self.all_full.load(Ordering::Relaxed) == window_mark {
            return Ok(self.global(first));
        }
        let mut remaining = first.remaining();
        for step in 1..self.stripes.len() {
            let decision = self.take((home + step) & mask, now, n);
            if decision.is_allowed() {
                return Ok(self.global(decision));
            }
            remaining += decision.remaining();
        }
        if remaining == 0 {
            // Relaxed: as the load above.
            self.all_full.store(window_mark, Ordering::Relaxed);
        }
        let d = Decision::deny(
            self.limit(),
            remaining,
            duration_to_nanos(first.retry_after()),
            duration_to_nanos(first.reset_after()),
        );
        Ok(d)
    }

    /// One stripe's decision, published through the one CAS loop.
    #[inline]
    fn take(&self, index: usize, now: u64, n: u32) -> Decision {
        let stripe = &self.stripes[index];
        update_timed(
            &stripe.word,
            reads_after(now, || self.clock.now_nanos()),
            |state, now| stripe.window.decide(state, now, n),
        )
    }

    /// A stripe's decision restated with the global limit.
    #[inline]
    fn global(&self, d: Decision) -> Decision {
        d.with_limit(self.limit())
    }
}

/// The most stripes a [`Sharded`] limiter may ask for (each is a cache line allocated up front).
///
/// ```
/// use floodgate::{ConfigError, ManualClock, Sharded, sharded::MAX_STRIPES};
/// use std::time::Duration;
/// let err = Sharded::with_clock(1000, Duration::from_secs(1), usize::MAX, ManualClock::new());
/// assert_eq!(
///     err.unwrap_err(),
///     ConfigError::TooLarge { what: "Sharded stripes", value: u64::MAX, max: MAX_STRIPES as u64 }
/// );
/// ```
pub const MAX_STRIPES: usize = 4096;

/// Stripe `index`'s share of `limit` over `count` stripes: `limit / count`, plus one for the
/// first `limit % count` stripes. The shares sum to `limit`.
fn share(limit: u32, count: usize, index: usize) -> u32 {
    let count = count as u32;
    limit / count + u32::from((index as u32) < limit % count)
}

thread_local! {
    /// The calling thread's home stripe number; `usize::MAX` until its first use.
    static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's home stripe number: threads are numbered round-robin on first use.
#[inline]
pub(crate) fn home_stripe() -> usize {
    let index = HOME.get();
    if index == usize::MAX {
        return number_this_thread();
    }
    index
}

/// Numbers the calling thread (its first [`home_stripe`]).
#[cold]
#[inline(never)]
fn number_this_thread() -> usize {
    // std atomics on purpose: this only spreads threads over stripes, it is no part of the
    // admission protocol (a collision costs speed, never correctness), so loom need not see it.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // Relaxed: a ticket counter; only uniqueness of the numbers matters.
    let index = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    HOME.set(index);
    index
}

impl<C: Clock> Limiter for Sharded<C> {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        self.try_acquire_on(home_stripe(), n)
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    /// Splits the new limit across the stripes, one stripe at a time: while it runs, a window may
    /// admit up to the larger of the old and the new limit. Counts already taken stay taken.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a limit below the number of stripes (each needs a share of
    /// one permit); otherwise as [`FixedWindow::aligned`] (the constructor's own check: the
    /// whole limit at most 16,777,215). The old limit then stays.
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        // The constructor's check, so a limit it refuses cannot be set later.
        validate_limit(limit, MAX_COUNT)?;
        let count = self.stripes.len();
        if (limit as usize) < count {
            return Err(ConfigError::Invalid {
                what: "limit",
                why: "a sharded limit must be at least its number of stripes",
            });
        }
        if u64::from(share(limit, count, 0)) > MAX_COUNT {
            return Err(ConfigError::LimitTooLarge {
                limit: u64::from(limit),
                max: MAX_COUNT * count as u64,
            });
        }
        let now = self.clock.now_nanos();
        for (index, stripe) in self.stripes.iter().enumerate() {
            stripe.window.set_limit(share(limit, count, index), now)?;
        }
        // Relaxed: a self-contained config value, as FixedWindow's limit.
        self.limit.store(limit, Ordering::Relaxed);
        // Relaxed: forget the "all full" hint; see the type's docs for the race this leaves.
        self.all_full.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn limit(&self) -> u64 {
        // Relaxed: as set_limit.
        u64::from(self.limit.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_sum_to_the_limit() {
        for limit in [1u32, 2, 3, 7, 8, 1000, 1001] {
            for count in [1usize, 2, 4, 8] {
                let total: u32 = (0..count).map(|i| share(limit, count, i)).sum();
                assert_eq!(total, limit, "limit {limit} over {count}");
                assert!((0..count).all(|i| share(limit, count, i) >= limit / count as u32));
            }
        }
    }

    #[test]
    fn set_limit_refuses_what_the_constructor_refuses() {
        let clock = crate::ManualClock::new();
        let window = Duration::from_secs(1);
        let sharded = Sharded::with_clock(1000, window, 4, clock.clone()).unwrap();
        let too_large = u32::try_from(MAX_COUNT + 1).unwrap();
        let refused = Sharded::with_clock(too_large, window, 4, clock).unwrap_err();
        assert_eq!(sharded.set_limit(too_large).unwrap_err(), refused);
        assert_eq!(
            refused,
            ConfigError::LimitTooLarge {
                limit: MAX_COUNT + 1,
                max: MAX_COUNT
            }
        );
        assert_eq!(sharded.limit(), 1000);
        sharded
            .set_limit(u32::try_from(MAX_COUNT).unwrap())
            .unwrap();
    }

    #[test]
    fn stripes_beyond_the_bound_are_refused_before_allocating() {
        let clock = crate::ManualClock::new();
        let window = Duration::from_secs(1);
        for stripes in [MAX_STRIPES + 1, usize::MAX] {
            assert!(matches!(
                Sharded::with_clock(1000, window, stripes, clock.clone()),
                Err(ConfigError::TooLarge { max, .. }) if max == MAX_STRIPES as u64
            ));
        }
        let most = Sharded::with_clock(u32::MAX >> 8, window, MAX_STRIPES, clock).unwrap();
        assert_eq!(most.stripes(), MAX_STRIPES);
    }

    /// The short path decides exactly as the general one wherever it answers (same decision,
    /// same words after), over every kind of stored window (this one, older ones, ahead near and
    /// far, 2^39 windows either way, across the tag's wrap), every count up to past the share,
    /// every request size from 0 to past the share, at a window's first, middle and last
    /// nanosecond, with the other stripe open or full and the "all full" hint set or not; and it
    /// serves every case it is there for.
    #[test]
    fn the_short_path_decides_as_the_general_one() {
        const WINDOW: u64 = 1_000;
        const SHARE: u64 = 3;
        let clock = crate::ManualClock::new();
        let make = |words: [u64; 2], hint: u64| {
            let s = Sharded::with_clock(6, Duration::from_nanos(WINDOW), 2, clock.clone());
            let s = s.unwrap();
            for (stripe, word) in s.stripes.iter().zip(words) {
                stripe.word.store(word, Ordering::Relaxed);
            }
            s.all_full.store(hint, Ordering::Relaxed);
            s
        };
        let words = |s: &Sharded<crate::ManualClock>| {
            s.stripes
                .iter()
                .map(|st| st.word.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        let half = 1u64 << 39;
        let (mut allowed, mut denied) = (0, 0);
        for index in [5, 1 << 20, TAG_MASK + 7] {
            for offset in [0, 1, 500, WINDOW - 1] {
                let now = index * WINDOW + offset;
                clock.set(now);
                for delta in [
                    0,
                    1,
                    2,
                    3,
                    1 << 20,
                    half - 1,
                    half,
                    half + 1,
                    0u64.wrapping_sub(1),
                ] {
                    // The stored window is `delta` behind `now`'s (wrapping: 2^40 - 1 is 1 ahead).
                    let stored = index.wrapping_sub(delta) & TAG_MASK;
                    for count in 0..=SHARE + 1 {
                        for other in [0, SHARE] {
                            for hint in [0, index + 1] {
                                for n in 0..=SHARE as u32 + 2 {
                                    let state =
                                        [pack_window(stored, count), pack_window(index, other)];
                                    let (short, general) = (make(state, hint), make(state, hint));
                                    let fast = short.try_home(0, now, n);
                                    let older = delta != 0 && delta <= half - 1;
                                    let open = delta == 0 || count == 0 || older;
                                    if open
                                        && n >= 1
                                        && (if delta == 0 { count } else { 0 }) + u64::from(n)
                                            <= SHARE
                                    {
                                        assert!(fast.is_some(), "{delta} {count} {n}: not served");
                                    }
                                    let Some(fast) = fast else { continue };
                                    let slow = general.try_acquire_general(0, now, n).unwrap();
                                    let case = format!(
                                        "now {now} delta {delta} count {count} other {other} hint {hint} n {n}"
                                    );
                                    assert_eq!(fast, slow, "{case}");
                                    assert_eq!(words(&short), words(&general), "{case}");
                                    if fast.is_allowed() {
                                        allowed += 1;
                                    } else {
                                        denied += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(allowed > 100 && denied > 10, "{allowed} {denied}");
    }

    #[test]
    fn threads_get_distinct_home_stripes() {
        let here = home_stripe();
        assert_eq!(home_stripe(), here, "stable within a thread");
        let there = std::thread::spawn(home_stripe).join().unwrap();
        assert_ne!(here, there);
    }
}
