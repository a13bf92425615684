//! [`Sharded`]: one fixed-window limit split across per-core stripes, so that allow-heavy
//! traffic from many cores does not bounce a single cache line.

use std::cell::Cell;
use std::num::NonZeroU64;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algorithms::FixedWindow;
use crate::clock::{Clock, MAX_CLOCK_LAG_NANOS, QuantaClock, duration_to_nanos};
use crate::decision::{AcquireError, Answer, ConfigError, Decision, at_least_one, validate_limit};
use crate::limiter::{Algorithm, Limiter, reads_after, update_timed};
use crate::packed::{
    COUNT_BITS, Divisor, MAX_COUNT, TAG_MASK, TagDistance, pack_window, tag_distance, unpack_window,
};
use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering};

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
/// The bound holds for clock reads within the lag horizon of each other ([`MAX_CLOCK_LAG_NANOS`],
/// DESIGN.md's clock model). A read further behind a window a stripe holds is taken for a
/// leaping clock's, as [`FixedWindow`] takes it: the stripe's count is folded into the read's
/// window, and the later window opens afresh when reads reach it again, so that window may admit
/// up to `limit` more.
///
/// # How early it may deny
/// A stripe's count only grows within a window, so a stripe seen without room stays without room.
/// * Requests of one permit are **never denied early**, however unbalanced the load: a denial
///   means every stripe was full in the window the request was decided in, i.e. all `limit`
///   permits of that window were taken or charged by a lowering `set_limit` in that window (see
///   the last two points). (A caller whose clock read lags decides on a stripe
///   holding a newer window in that newer window, as [`FixedWindow`] does, and is denied only if
///   it is full.) Unbalanced load costs speed (borrowers write other cores' cache lines), not
///   admissions.
/// * A request of `n > 1` permits must fit in one stripe, so it may be denied while up to
///   `stripes × (n − 1)` permits are left in the window, scattered across stripes. For the same
///   reason one request can take at most the largest share (`ceil(limit / stripes)`); more is
///   [`AcquireError::ExceedsCapacity`].
/// * After [`set_limit`](Limiter::set_limit) raises the limit, a caller that saw every stripe full
///   just before may still deny until the window ends (the "all full" hint is advisory).
/// * A lowering charges each stripe's excess over its new share to the other stripes for the
///   rest of the window, also when the window as a whole admitted no more than the new limit
///   (the excess is per stripe: counts 4 and 5 under new shares 5 and 4 charge 1). A raise later
///   in the same window keeps those charges: until the window ends, up to the permits charged
///   are denied early (lowered from 12 to 9 and raised to 16 with 9 taken, the window admits 6
///   more, where [`FixedWindow`] admits 7).
/// * After [`set_limit`](Limiter::set_limit) lowers the limit, the window in progress admits at
///   most the larger of what it had admitted and the new limit (a stripe's excess over its new
///   share is charged to the others for that window), as [`FixedWindow`] would.
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
    /// The index of a window in which some caller, reading the clock in that window, saw every
    /// stripe full in it (none holding a window ahead); [`NO_HINT`] for none. Trusted only by a
    /// caller whose home stripe denied it in that same window: counts only grow within a
    /// window, so its `limit` permits are all taken.
    all_full: CachePadded<AtomicU64>,
    /// The index of a window some caller was in: a cache that spares the division when `now`
    /// is still in it (checked before use, so any value is harmless). Written by the callers that
    /// first find a newer window (a few writes per window, never back and forth between correct
    /// clocks), or find it more than [`MAX_CLOCK_LAG_NANOS`] ahead of their read (a leaping
    /// clock's), and only for windows of at least [`CACHED_WINDOW_NANOS`].
    recent: CachePadded<AtomicU64>,
    limit: AtomicU32,
    /// `stripes − 1` with the top bit set: a thread's number (below 2^63) masked by it is its
    /// home stripe, and the unnumbered thread's `usize::MAX` falls outside the stripes, so one
    /// bounds check both finds the stripe and catches a first use (issue 17).
    route: usize,
    /// Held by [`set_limit`](Limiter::set_limit) only: one split of the limit at a time.
    reconfigure: Mutex<()>,
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
            all_full: CachePadded::new(AtomicU64::new(NO_HINT)),
            recent: CachePadded::new(AtomicU64::new(0)),
            limit: AtomicU32::new(limit),
            route: (count - 1) | TOP_BIT,
            reconfigure: Mutex::new(()),
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
        self.try_acquire_at(home & (self.stripes.len() - 1), now, n)
    }

    /// [`acquire_at`](Self::acquire_at) on the calling thread's home stripe. The thread's
    /// number masked by `route` is its stripe when it is in range; otherwise (a first use, whose
    /// number is still `usize::MAX`, or a number of 2^63 or more) the out-of-line
    /// [`after_home`](Self::after_home) numbers the thread as [`home_stripe`] numbers it and
    /// decides on its stripe. The same stripe as `home_stripe() & (stripes − 1)`, with no test
    /// of its own for a first use: the bounds check is that test (issue 17). The two ways join
    /// on numbers ([`Found`]), as in `acquire_at`.
    #[inline(always)]
    fn acquire_here<A: Answer>(&self, now: u64, n: u32) -> Result<A, AcquireError> {
        let index = self.route & HOME.get();
        let found = if index < self.stripes.len() {
            match self.home(index, now, n) {
                Home::Done(found) => found,
                // The stripe found again out of line: the inlined part keeps no index for it.
                Home::Borrow { .. } | Home::Engine => self.after_home(now, THIS_THREAD, n)?,
            }
        } else {
            self.after_home(now, THIS_THREAD, n)?
        };
        Ok(self.answer(found))
    }

    /// [`acquire_at`](Self::acquire_at) answering a whole [`Decision`].
    #[inline(always)]
    fn try_acquire_at(&self, home: usize, now: u64, n: u32) -> Result<Decision, AcquireError> {
        self.acquire_at(home, now, n)
    }

    /// The common cases in one pass each, without the engine, deciding exactly as
    /// [`try_acquire_general`](Self::try_acquire_general) does there (`FixedWindow::decide` on
    /// an aligned window, through the same borrowing; the tests compare the two): the home
    /// stripe serves the request, or it is full and the "all full" hint for this window is set
    /// ([`home`](Self::home), inlined into every call), or it is full and the other stripes are
    /// tried in turn ([`after_home`](Self::after_home), out of line). Of the admission state it
    /// writes only the compare-exchange that admits (and the hint, as the general path does).
    /// Anything else goes to the general path before any write,
    /// which starts over from the same clock read: zero permits or more than the home stripe's
    /// share, a stripe holding a window ahead of `now` (another core's later read, or a leaping
    /// clock's), a lost compare-exchange.
    ///
    /// Both parts answer plain numbers ([`Found`]); the answer `A` (a [`Decision`], or the
    /// `bool` of [`admit`](Limiter::admit)) is built once, after they join, so the inlined part
    /// hands its numbers over in registers and a `bool` caller computes none of a `Decision`'s
    /// terms (nor loads the limit it reports).
    #[inline(always)]
    fn acquire_at<A: Answer>(&self, home: usize, now: u64, n: u32) -> Result<A, AcquireError> {
        let found = match self.home(home, now, n) {
            Home::Done(found) => found,
            // One out-of-line call for the rest, which looks at the home stripe again.
            Home::Borrow { .. } | Home::Engine => self.after_home(now, home, n)?,
        };
        Ok(self.answer(found))
    }

    /// The answer `A` of what a decision found, with the limit in force.
    #[inline(always)]
    fn answer<A: Answer>(&self, found: Found) -> A {
        // The limit is loaded only for an answer that reports it.
        let limit = if A::REPORTS_TERMS { self.limit() } else { 0 };
        match found {
            Found::Allowed { left, reset } => A::allowed(limit, left, 1, reset),
            Found::Denied {
                remaining,
                retry,
                reset,
            } => A::denied(limit, remaining, 1, retry, reset),
        }
    }

    /// The home stripe's part of [`acquire_at`](Self::acquire_at).
    #[inline(always)]
    fn home(&self, home: usize, now: u64, n: u32) -> Home {
        let permits = u64::from(n);
        let stripe = &self.stripes[home];
        let share = stripe.window.limit();
        // n in 1..=share: not zero, and within `max_request` (no share exceeds it). `n = 1`
        // always is (every share is at least 1: the constructor makes no more stripes than the
        // limit, and `set_limit` refuses a limit below the number of stripes; each stripe's
        // `FixedWindow` refuses a share of 0 besides), so a caller's literal 1 checks nothing,
        // and a 1 known only at run time in one comparison (issue 17). A share of 0 would still
        // admit nothing here: `take_short` finds `count + 1 > 0` full.
        if permits != 1 && permits.wrapping_sub(1) >= share {
            return Home::Engine;
        }
        let at = self.window_at(now);
        match take_short(stripe, share, &at, permits) {
            Take::Taken { left } => Home::Done(Found::Allowed {
                left,
                reset: at.until_end,
            }),
            // `count > 0` here (n ≤ share), so the home stripe's reset is the window's end.
            // Relaxed: an advisory hint, as in `try_acquire_general`.
            Take::Full { left } if self.all_full.load(Ordering::Relaxed) == at.mark() => {
                Home::Done(Found::Denied {
                    remaining: left,
                    retry: at_least_one(at.until_end),
                    reset: at.until_end,
                })
            }
            Take::Full { left } => Home::Borrow { left, at },
            Take::Engine => Home::Engine,
        }
    }

    /// Everything after the inlined [`home`](Self::home): the home stripe again (the first
    /// look wrote nothing, so this is a fresh start), then, when it is full and the hint is not
    /// set, the other stripes in turn, as the general path borrows; the general path for
    /// anything the short path does not serve.
    ///
    /// `home` is a stripe's index, or [`THIS_THREAD`] for the calling thread's stripe (found
    /// here, numbering the thread on its first use), so that the inlined part of
    /// [`acquire_here`](Self::acquire_here) keeps no index, nor the thread's number, for this
    /// call.
    #[inline(never)]
    fn after_home(&self, now: u64, home: usize, n: u32) -> Result<Found, AcquireError> {
        let home = match home {
            // The stripe `acquire_here`'s mask finds, the thread numbered on its first use.
            THIS_THREAD => home_stripe() & (self.stripes.len() - 1),
            home => home,
        };
        let (mut remaining, at) = match self.home(home, now, n) {
            Home::Done(found) => return Ok(found),
            Home::Borrow { left, at } => (left, at),
            Home::Engine => return self.try_acquire_general(home, now, n).map(Found::of),
        };
        let permits = u64::from(n);
        let mask = self.stripes.len() - 1;
        for step in 1..self.stripes.len() {
            let stripe = &self.stripes[(home + step) & mask];
            match take_short(stripe, stripe.window.limit(), &at, permits) {
                Take::Taken { left } => {
                    return Ok(Found::Allowed {
                        left,
                        reset: at.until_end,
                    });
                }
                Take::Full { left } => remaining += left,
                Take::Engine => return self.try_acquire_general(home, now, n).map(Found::of),
            }
        }
        if remaining == 0 && at.hintable(now) {
            // Relaxed: as in `try_acquire_general`.
            self.all_full.store(at.mark(), Ordering::Relaxed);
        }
        Ok(Found::Denied {
            remaining,
            retry: at_least_one(at.until_end),
            reset: at.until_end,
        })
    }

    /// The aligned window `now` falls in.
    #[inline(always)]
    fn window_at(&self, now: u64) -> WindowAt {
        let window = self.window.get();
        // Relaxed, pairs with nothing: a cache, no part of the admission protocol (the store in
        // `window_index`); the value is used only once `now` is checked to lie in its window.
        // It was a quotient of a clock read by `window` (or 0): the product cannot overflow.
        let recent = self.recent.load(Ordering::Relaxed);
        let into = now.wrapping_sub(recent * window);
        // Each branch gives the window's word with a count of 0 and its mark, so no value of
        // the index is kept beside them (a copy of the cached index in another register cost the
        // admission an instruction). Shifting out the index's top bits reduces it modulo 2^40,
        // as the tag.
        let (into, tagged, mark) = match into < window {
            // The cached index is below `u64::MAX − 1` (0, or a quotient by a window of at
            // least `CACHED_WINDOW_NANOS`): its own mark.
            true => (into, recent << COUNT_BITS, recent),
            false => self.window_divided(now),
        };
        WindowAt {
            tagged,
            until_end: window - into,
            mark,
        }
    }

    /// [`window_at`](Self::window_at)'s terms when the cached index is not `now`'s window:
    /// the time into the window, its word with a count of 0 and its mark, all computed out of
    /// line (an index returned, the caller kept it in a register of its own beside the mark).
    #[cold]
    #[inline(never)]
    fn window_divided(&self, now: u64) -> (u64, u64, u64) {
        let index = self.window_index(now);
        let into = now - index * self.window.get();
        (into, index << COUNT_BITS, index.min(u64::MAX - 1))
    }

    /// `now / window`, by division, cached for the next callers of
    /// [`window_at`](Self::window_at).
    #[cold]
    #[inline(never)]
    fn window_index(&self, now: u64) -> u64 {
        let index = self.window.divide(now);
        let window = self.window.get();
        if window >= CACHED_WINDOW_NANOS {
            // Relaxed: as the load in `window_at`.
            let recent = self.recent.load(Ordering::Relaxed);
            // Forward (as far as this caller saw): callers whose reads straddle a window's end
            // do not take turns rewriting it. Back only from a window starting more than the
            // lag horizon after this read, a leaping clock's (correct clocks' reads are closer):
            // one far-future read must not keep every call dividing until real time gets there.
            // `recent * window` was a clock read's quotient times `window`: no overflow.
            let leapt = recent * window > now.saturating_add(MAX_CLOCK_LAG_NANOS);
            if index > recent || leapt {
                self.recent.store(index, Ordering::Relaxed);
            }
        }
        index
    }

    /// Everything [`try_acquire_at`](Self::try_acquire_at) does not serve: the permit check,
    /// the home stripe through the engine, then borrowing from the other stripes.
    #[cold]
    #[inline(never)]
    fn try_acquire_general(&self, home: usize, now: u64, n: u32) -> Result<Decision, AcquireError> {
        #[cfg(test)]
        tests::GENERAL_CALLS.set(tests::GENERAL_CALLS.get() + 1);
        crate::decision::check_permits(n, self.max_request())?;
        let mask = self.stripes.len() - 1;
        let first = self.take(home, now, n);
        if first.decision.is_allowed() {
            return Ok(self.global(first.decision));
        }
        // Borrow. A hint that this window is already full everywhere spares the scan, for a
        // denial decided in this window (the read's) only: a lagging reader's home stripe may
        // hold a newer window, of which the hint says nothing.
        let at = self.window_at(now);
        let home_in_window = at.decided_in(now, &first);
        // Relaxed: an advisory hint; every admission is still decided by a stripe's own word.
        if home_in_window && self.all_full.load(Ordering::Relaxed) == at.mark() {
            return Ok(self.global(first.decision));
        }
        let mut remaining = first.decision.remaining();
        // The window is back to full capacity once every stripe is: the latest stripe reset
        // (the home stripe's alone is 0 when it is empty, e.g. for a request above its share).
        let mut reset = first.decision.reset_after();
        let mut all_in_window = home_in_window;
        for step in 1..self.stripes.len() {
            let taken = self.take((home + step) & mask, now, n);
            if taken.decision.is_allowed() {
                return Ok(self.global(taken.decision));
            }
            remaining += taken.decision.remaining();
            reset = reset.max(taken.decision.reset_after());
            all_in_window &= at.decided_in(now, &taken);
        }
        // Set only by a scan that found every stripe full in the read's window (none holding a
        // window ahead): the hint then says that all `limit` permits of that window are taken.
        if remaining == 0 && all_in_window && at.hintable(now) {
            // Relaxed: as the load above.
            self.all_full.store(at.mark(), Ordering::Relaxed);
        }
        let first = first.decision;
        let d = Decision::deny(
            self.limit(),
            remaining,
            duration_to_nanos(first.retry_after()),
            duration_to_nanos(reset),
        );
        Ok(d)
    }

    /// One stripe's decision, published through the one CAS loop, with the clock read it was
    /// decided at (`now`, or a fresh read the engine took for a leaping clock's state).
    #[inline]
    fn take(&self, index: usize, now: u64, n: u32) -> Taken {
        let stripe = &self.stripes[index];
        let mut decided_at = now;
        let decision = update_timed(
            &stripe.word,
            reads_after(now, || self.clock.now_nanos()),
            |state, now| {
                decided_at = now;
                stripe.window.decide(state, now, n)
            },
        );
        Taken {
            decision,
            decided_at,
        }
    }

    /// After [`set_limit`](Limiter::set_limit) stored the new shares (read at `now`): settles
    /// the windows in progress so that each admits at most the larger of what it had admitted
    /// and the new limit. A stripe holding more than its new share keeps its count (permits
    /// taken stay taken) and admits nothing more; its excess over the share is charged to the
    /// stripes below theirs, as permits of that window that nobody may take. Without it, every
    /// other stripe would still admit its whole new share: 16 over 4 stripes, 4 taken on one,
    /// lowered to 4, admitted 3 more.
    ///
    /// The windows settled are `now`'s and each window a stripe holds (with a count) that a
    /// reader within the lag horizon of `now` may still decide in: one ahead of `now`'s whose
    /// start is at most [`MAX_CLOCK_LAG_NANOS`] after `now` (another core's later read; its
    /// admissions were made before this call), and one behind whose end is less than
    /// [`MAX_CLOCK_LAG_NANOS`] before `now` (other cores whose reads lag this one's are still
    /// deciding in it: `now` may be past a window's end while they are not). They are settled
    /// oldest first. A stripe holding an older window than the one settled is charged in the
    /// settled one (a reader in its older window then decides in the newer one, as
    /// [`FixedWindow`] keeps a window ahead); if the window it holds is `now`'s or later, the
    /// charged word keeps at least its count, so that window's readers, now deciding on the
    /// charged word, are not handed back its permits. Charges land by compare-exchange: an
    /// admission racing them is decided again on the charged word. An admission racing the
    /// whole call may still use an old share.
    ///
    /// No list of windows is kept: each pass scans the stripes for the nearest window after the
    /// last one settled. The number of windows within the horizon has no small bound (a 1 ns
    /// window fits 2 × 10¹⁰ times in the 10 s either side of `now`), but a window to settle
    /// other than `now`'s is one some stripe holds, and a stripe holds one window: one scan of
    /// the stripes sees at most `stripes` windows, so `stripes + 1` passes settle every window
    /// held when the call began. The passes stop there: a window first written during the call
    /// belongs to admissions racing it.
    fn charge_excess(&self, now: u64) {
        let at = self.window_at(now);
        let window = self.window.get();
        let into = window - at.until_end;
        // The window `tag` as windows after `now`'s (negative: before it), if a reader within
        // the lag horizon may decide in it. The window `k ≥ 1` ahead starts
        // `(k − 1) × window + until_end` after `now`, as `FixedWindow` measures a lead; the
        // window `k` behind ends `(k − 1) × window + into` before `now`. `k < 2³⁹`: an `i64`.
        let offset = |tag: u64| match tag_distance(tag, at.tag()) {
            TagDistance::Same => Some(0),
            TagDistance::Ahead(k) => {
                let lead = (k - 1).saturating_mul(window).saturating_add(at.until_end);
                (lead <= MAX_CLOCK_LAG_NANOS).then_some(k as i64)
            }
            TagDistance::Behind(k) => {
                let ended = (k - 1).saturating_mul(window).saturating_add(into);
                (ended < MAX_CLOCK_LAG_NANOS).then_some(-(k as i64))
            }
        };
        // Every window at or before `settled` (as an offset) is settled.
        let mut settled = i64::MIN;
        for _ in 0..=self.stripes.len() {
            // The nearest window after `settled`: `now`'s, or one a stripe holds.
            let mut next = (settled < 0).then_some(0);
            for stripe in self.stripes.iter() {
                // Acquire: as the engine's load (`update`), pairs with the admitting
                // compare-exchanges' release.
                let (tag, count) = unpack_window(stripe.word.load(Ordering::Acquire));
                if count == 0 {
                    continue;
                }
                match offset(tag) {
                    Some(k) if k > settled && next.is_none_or(|next| k < next) => next = Some(k),
                    _ => {}
                }
            }
            let Some(k) = next else { return };
            self.charge_window(at.tag().wrapping_add_signed(k) & TAG_MASK, at.tag());
            settled = k;
        }
    }

    /// [`charge_excess`](Self::charge_excess) for the window `tag`, `now`'s (`base`), one ahead
    /// of it, or one behind it.
    fn charge_window(&self, tag: u64, base: u64) {
        let mut excess = 0u64;
        for stripe in self.stripes.iter() {
            // Acquire: as in `charge_excess`.
            let (stored, count) = unpack_window(stripe.word.load(Ordering::Acquire));
            if stored == tag {
                excess += count.saturating_sub(stripe.window.limit());
            }
        }
        for stripe in self.stripes.iter() {
            if excess == 0 {
                return;
            }
            let share = stripe.window.limit();
            // Acquire: as in `charge_excess`.
            let mut current = stripe.word.load(Ordering::Acquire);
            loop {
                let (stored, held) = unpack_window(current);
                let (count, kept) = match tag_distance(stored, tag) {
                    TagDistance::Same => (held, held),
                    // An older window, or none: `tag`'s count is zero. If it is `now`'s window
                    // or a later one (between `base` and `tag`), its readers decide in `tag`
                    // once charged: the charged word keeps its count, or they would take its
                    // permits again.
                    TagDistance::Behind(_) => match tag_distance(stored, base) {
                        TagDistance::Behind(_) => (0, 0),
                        TagDistance::Same | TagDistance::Ahead(_) => (0, held),
                    },
                    // A newer window (taken since the scan): not this one's to settle.
                    TagDistance::Ahead(_) if held == 0 => (0, 0),
                    TagDistance::Ahead(_) => break,
                };
                if count >= share {
                    break;
                }
                // `kept ≤ MAX_COUNT` (a count the word held): so is the new count.
                let charged = (count + excess.min(share - count)).max(kept);
                // The part of `tag`'s room the new count takes (it may exceed the share).
                let charge = charged.min(share) - count;
                // AcqRel / Acquire: as the engine's compare-exchange (`update`); pairs with the
                // admitting compare-exchanges, which then decide again on the charged word (and,
                // having acquired it, with the new share stored before it). The loom models of
                // `sharded_set_limit.rs` count a take racing the charge as admitted either way
                // (a take racing the whole call may use its old share), so they pass with this
                // weakened to Relaxed: the pairing is argued here, not model-checked.
                match stripe.word.compare_exchange(
                    current,
                    pack_window(tag, charged),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        excess = excess.saturating_sub(charge);
                        break;
                    }
                    Err(actual) => current = actual,
                }
            }
        }
    }

    /// A stripe's decision restated with the global limit.
    #[inline]
    fn global(&self, d: Decision) -> Decision {
        d.with_limit(self.limit())
    }
}

/// One stripe (`share`: its limit, as loaded by the caller) for `n ≥ 1` permits at `at`,
/// as `FixedWindow::decide` on an aligned window, when the stripe's word holds `at`'s
/// window, an older one, or nothing.
#[inline(always)]
fn take_short(stripe: &Stripe, share: u64, at: &WindowAt, n: u64) -> Take {
    // Acquire: as the engine's load (`update`); the word is the only state decided on.
    let current = stripe.word.load(Ordering::Acquire);
    // A word of `at`'s window is `at.tagged + count` (`count ≤ MAX_COUNT` below the tag), so
    // one subtraction gives its count, and any other word is more than `MAX_COUNT` away from
    // `at.tagged` (wrapping). For those: zero if the stored window is older (up to 2^39
    // windows behind, as `tag_distance` reads it) or empty; a window ahead goes to the engine.
    let count = match current.wrapping_sub(at.tagged) {
        count if count <= MAX_COUNT => count,
        _ => {
            let (stored, count) = unpack_window(current);
            let behind = at.tag().wrapping_sub(stored) & TAG_MASK;
            if count == 0 || behind <= TAG_MASK >> 1 {
                0
            } else {
                return Take::Engine;
            }
        }
    };
    let taken = count + n;
    if taken > share {
        return Take::Full {
            left: share.saturating_sub(count),
        };
    }
    // The new word is `pack_window(at.tag(), taken)`: `taken ≤ share ≤ MAX_COUNT`.
    debug_assert!(taken <= MAX_COUNT);
    // AcqRel / Acquire: as the engine's compare-exchange (`update`).
    match stripe.word.compare_exchange(
        current,
        at.tagged | taken,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Take::Taken {
            left: share - taken,
        },
        Err(_) => Take::Engine,
    }
}

/// The aligned window a clock read falls in, as the short path uses it.
struct WindowAt {
    /// `pack_window(tag, 0)`: the word of this window with a count of 0 (see
    /// [`tag`](Self::tag)).
    tagged: u64,
    /// Nanoseconds from the read to the window's end.
    until_end: u64,
    /// The "all full" hint's value for this window (see [`mark`](Self::mark)).
    mark: u64,
}

impl WindowAt {
    /// The window's tag (its index modulo 2^40), as the stripes' words hold it: the top 40 bits
    /// of [`tagged`](Self::tagged).
    #[inline(always)]
    fn tag(&self) -> u64 {
        self.tagged >> COUNT_BITS
    }

    /// The "all full" hint's value for this window: its index, except that the last two
    /// windows of time (indices `u64::MAX − 1` and `u64::MAX`, reachable with 1 ns windows only)
    /// share the mark `u64::MAX − 1`, so that no window's mark is [`NO_HINT`]. Kept in the
    /// struct, computed by [`window_at`](Sharded::window_at): on its common branch (the cached
    /// index, of a window of at least [`CACHED_WINDOW_NANOS`], or window 0) the index is never
    /// either, and the mark is the index itself, with no arithmetic (the hint was `index + 1`
    /// with 0 for none: the saturating addition cost every full home stripe three instructions,
    /// issue 17).
    #[inline(always)]
    fn mark(&self) -> u64 {
        self.mark
    }

    /// Whether the hint may be set to [`mark`](Self::mark) by a scan at the read `now` (of this
    /// window): the mark names this window alone (all but the last two windows of time, which
    /// share theirs: a hint set in the first would deny in the second without borrowing), and
    /// the window ends within a `u64`, as [`decided_in`](Self::decided_in) requires on the
    /// general path (so both paths write the same hint). Checked where the hint is set (a
    /// denial's scan), not where it is read (the short path's every full home stripe). So the
    /// hint is never set to the last two windows' shared mark: there it is never trusted.
    #[inline(always)]
    fn hintable(&self, now: u64) -> bool {
        // `mark < u64::MAX − 1` is `index < u64::MAX − 1`: the mark is the index below it.
        self.mark < u64::MAX - 1 && now.checked_add(self.until_end).is_some()
    }

    /// Whether `taken`, a stripe's denial on the read `now` this window was computed from, was
    /// decided in this window: an aligned window's denial says how long until the window it
    /// decided in ends, so the two windows end at the same instant; a stripe's window ahead (a
    /// lagging read keeps it) ends later. `false` where an end does not fit in a `u64` (the
    /// hint is then neither set nor trusted: speed, never a decision).
    fn decided_in(&self, now: u64, taken: &Taken) -> bool {
        let retry = duration_to_nanos(taken.decision.retry_after());
        let end = now.checked_add(self.until_end);
        end.is_some() && taken.decided_at.checked_add(retry) == end
    }
}

/// One stripe's decision on the general path, and the clock read it was decided at.
struct Taken {
    decision: Decision,
    decided_at: u64,
}

/// What the short path made of one stripe.
enum Take {
    /// Admitted: the compare-exchange landed; `left`: what the stripe has left.
    Taken { left: u64 },
    /// The request does not fit in the stripe's window; `left`: what the stripe has left
    /// (`share − count`, 0 for a count above a lowered share), as its denial reports it.
    Full { left: u64 },
    /// Not the short path's case (a window ahead, a lost compare-exchange): nothing was written.
    Engine,
}

/// What a decision found, as plain numbers: the inlined and the out-of-line parts of
/// [`Sharded::acquire_at`] join on these, and the answer is built once, after the join.
#[derive(Clone, Copy)]
enum Found {
    /// Admitted: `left`, what the serving stripe has left; `reset`, nanoseconds to the
    /// window's end.
    Allowed { left: u64, reset: u64 },
    /// Denied: the `remaining` reported, the retry and the reset, in nanoseconds.
    Denied {
        remaining: u64,
        retry: NonZeroU64,
        reset: u64,
    },
}

impl Found {
    /// What the general path's `decision` found (its limit is the global one, restated when
    /// the answer is built).
    fn of(decision: Decision) -> Self {
        let reset = duration_to_nanos(decision.reset_after());
        match decision.is_allowed() {
            true => Found::Allowed {
                left: decision.remaining(),
                reset,
            },
            false => Found::Denied {
                remaining: decision.remaining(),
                retry: at_least_one(duration_to_nanos(decision.retry_after())),
                reset,
            },
        }
    }
}

/// What the short path made of the home stripe.
enum Home {
    /// Admitted there, or denied by the "all full" hint.
    Done(Found),
    /// Full (`left`: what it has left), no hint: the other stripes are tried, at `at`.
    Borrow { left: u64, at: WindowAt },
    /// Not the short path's case: the general path.
    Engine,
}

/// The "all full" hint of no window (see [`Sharded`]'s `all_full`): `u64::MAX`, no window's
/// [`mark`](WindowAt::mark).
const NO_HINT: u64 = u64::MAX;

/// [`Sharded::after_home`]'s `home` for the calling thread's stripe: no stripe's index (there
/// are at most [`MAX_STRIPES`]).
const THIS_THREAD: usize = usize::MAX;

/// The top bit of a `usize`, set in [`Sharded`]'s `route`.
const TOP_BIT: usize = 1 << (usize::BITS - 1);

/// The shortest window [`Sharded`] caches (`recent`): shorter ones would have every caller
/// rewrite the cache's line at every window.
const CACHED_WINDOW_NANOS: u64 = 1 << 20;

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
        let now = self.clock.now_nanos();
        self.acquire_here(now, n)
    }

    /// The same decision and writes as [`try_acquire`](Limiter::try_acquire), answering only
    /// whether the permits were taken: the short path computes none of a `Decision`'s terms.
    ///
    /// # Errors
    /// As [`try_acquire`](Limiter::try_acquire).
    ///
    /// ```
    /// use floodgate::{Limiter, ManualClock, Sharded};
    /// use std::time::Duration;
    /// let s = Sharded::with_clock(2, Duration::from_secs(1), 2, ManualClock::new()).unwrap();
    /// assert_eq!(s.admit(1), Ok(true));
    /// assert_eq!(s.admit(1), Ok(true)); // borrowed from the other stripe
    /// assert_eq!(s.admit(1), Ok(false)); // a denial takes nothing
    /// assert!(s.admit(0).is_err());
    /// ```
    #[inline]
    fn admit(&self, n: u32) -> Result<bool, AcquireError> {
        let now = self.clock.now_nanos();
        self.acquire_here(now, n)
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    /// Splits the new limit across the stripes. While it runs, a racing admission may still use
    /// its stripe's old share. Once it has returned, the window in progress admits at most the
    /// larger of what it had admitted and the new limit, in total: counts already taken stay
    /// taken, a stripe above its new share admits nothing more, and its excess is charged to the
    /// stripes below theirs for the rest of that window (also in a window a stripe holds ahead
    /// or behind, within the lag horizon: the window other cores' reads may still be in when
    /// `set_limit`'s read is past its end). A raise in the same window does not give the charge back: that
    /// window admits up to the raised limit less the charge; the next has all of it. Calls of
    /// `set_limit` run one at a time (a lock, taken by nothing else).
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
        // One reconfiguration at a time: two interleaved splits would leave shares from both,
        // summing to neither limit. A poisoned lock guards nothing broken (no panic can happen
        // while it is held, and the shares are rewritten in full): its guard is taken anyway.
        let _one_at_a_time = self
            .reconfigure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = self.clock.now_nanos();
        for (index, stripe) in self.stripes.iter().enumerate() {
            stripe.window.set_limit(share(limit, count, index), now)?;
        }
        // Relaxed: a self-contained config value, as FixedWindow's limit.
        self.limit.store(limit, Ordering::Relaxed);
        self.charge_excess(now);
        // Relaxed: forget the "all full" hint; see the type's docs for the race this leaves.
        self.all_full.store(NO_HINT, Ordering::Relaxed);
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

    thread_local! {
        /// Calls of `try_acquire_general` on this thread: whether the short path served a call.
        pub(super) static GENERAL_CALLS: Cell<u64> = const { Cell::new(0) };
    }

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
    /// same words and hint after), over every kind of stored window on both stripes (this one,
    /// older ones, ahead near and far, 2^39 windows either way, across the tag's wrap), counts
    /// up to past the share, request sizes from 0 to past the shares (3 and 2: unequal), either
    /// home, at a window's first, middle and last nanosecond, with the "all full" hint set or
    /// not; and it serves every case it is there for. The `bool` form (`admit`'s) answers
    /// whether the general path admits, with the same writes, in every case.
    #[test]
    fn the_short_path_decides_as_the_general_one() {
        // Below and at the length from which the window index is cached.
        for window in [1_000, CACHED_WINDOW_NANOS] {
            short_path_decides_as_the_general_one(window);
        }
    }

    /// Two stripes of `limit` over `window` ns on `clock`, with the stripes' words and the
    /// all-full hint set as given.
    fn with_words(
        limit: u32,
        window: u64,
        clock: &crate::ManualClock,
        words: [u64; 2],
        hint: u64,
    ) -> Sharded<crate::ManualClock> {
        let s = Sharded::with_clock(limit, Duration::from_nanos(window), 2, clock.clone());
        let s = s.unwrap();
        // Relaxed: single-threaded test setup and inspection (no other thread sees `s`).
        for (stripe, word) in s.stripes.iter().zip(words) {
            stripe.word.store(word, Ordering::Relaxed);
        }
        s.all_full.store(hint, Ordering::Relaxed);
        s
    }

    /// The stripes' words and the all-full hint.
    fn state(s: &Sharded<crate::ManualClock>) -> (Vec<u64>, u64) {
        // Relaxed: as in `with_words`.
        let words = s.stripes.iter().map(|st| st.word.load(Ordering::Relaxed));
        (
            words.collect::<Vec<_>>(),
            s.all_full.load(Ordering::Relaxed),
        )
    }

    fn short_path_decides_as_the_general_one(window: u64) {
        const LIMIT: u32 = 5;
        let clock = crate::ManualClock::new();
        let make = |words: [u64; 2], hint: u64| with_words(LIMIT, window, &clock, words, hint);
        let half = 1u64 << 39;
        // How far the stored window is behind `now`'s (wrapping: 2^40 - 1 is 1 ahead).
        let deltas = [0, 1, 3, 1 << 20, half - 1, half, half + 1, TAG_MASK];
        let is_older = |delta: u64| delta != 0 && delta < half;
        let (mut allowed, mut denied, mut borrowed) = (0, 0, 0);
        for index in [5, TAG_MASK + 7] {
            for offset in [0, window / 2, window - 1] {
                let now = index * window + offset;
                clock.set(now);
                for (home_delta, other_delta) in deltas
                    .iter()
                    .flat_map(|&h| [0, 1, half, TAG_MASK].into_iter().map(move |o| (h, o)))
                {
                    for (home_count, other_count) in
                        (0..=4).flat_map(|h| (0..=3).map(move |o| (h, o)))
                    {
                        for (home, hint, n) in (0..2).flat_map(|home| {
                            // None, this window's, and the window before's (stale).
                            [NO_HINT, index, index - 1]
                                .into_iter()
                                .flat_map(move |hint| (0..=5).map(move |n| (home, hint, n)))
                        }) {
                            let other = 1 - home;
                            let mut words = [0; 2];
                            words[home] = pack_window(index.wrapping_sub(home_delta), home_count);
                            words[other] =
                                pack_window(index.wrapping_sub(other_delta), other_count);
                            let (short, general) = (make(words, hint), make(words, hint));
                            // `admit`'s answer: whether the general path admits, with the
                            // same writes, served or not.
                            let admit = make(words, hint);
                            let admitted = admit.acquire_at::<bool>(home, now, n);
                            let calls = GENERAL_CALLS.get();
                            let fast = short.try_acquire_at(home, now, n);
                            let fast = (GENERAL_CALLS.get() == calls).then(|| fast.unwrap());
                            // What the short path is there for.
                            let count_now = |delta, count| if delta == 0 { count } else { 0 };
                            let open = |delta, count| delta == 0 || count == 0 || is_older(delta);
                            let home_share = share(LIMIT, 2, home);
                            let home_full = count_now(home_delta, home_count) + u64::from(n)
                                > u64::from(home_share);
                            if (1..=home_share).contains(&n)
                                && open(home_delta, home_count)
                                && (!home_full || hint == index || open(other_delta, other_count))
                            {
                                assert!(fast.is_some(), "{home_delta} {home_count} {n}: unserved");
                            }
                            let slow = general.try_acquire_general(home, now, n);
                            assert_eq!(admitted, slow.map(|d| d.is_allowed()));
                            let Some(fast) = fast else {
                                if slow.is_ok() {
                                    assert_eq!(state(&admit), state(&general));
                                }
                                continue;
                            };
                            let slow = slow.unwrap();
                            let case = format!(
                                "now {now} home {home} deltas {home_delta} {other_delta} \
                                 counts {home_count} {other_count} hint {hint} n {n}"
                            );
                            assert_eq!(fast, slow, "{case}");
                            assert_eq!(state(&short), state(&general), "{case}");
                            assert_eq!(state(&admit), state(&general), "{case}");
                            if !fast.is_allowed() {
                                denied += 1;
                            } else if home_full {
                                borrowed += 1;
                            } else {
                                allowed += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(
            allowed > 100 && denied > 100 && borrowed > 100,
            "{allowed} {denied} {borrowed}"
        );
    }

    /// [`the_short_path_decides_as_the_general_one`] at the extremes: the largest limit
    /// (shares 8,388,608 and 8,388,607, counts up to `MAX_COUNT`), 1 ns and 3 ns windows with
    /// indices at the tag's wrap and at the end of time, requests of 0, 1, around each share
    /// and `u32::MAX`. The `Decision`, the `bool` and the words written are the general path's.
    #[test]
    fn the_short_path_decides_as_the_general_one_at_the_extremes() {
        let limit = MAX_COUNT as u32;
        let clock = crate::ManualClock::new();
        let make = |window: u64, words: [u64; 2], hint: u64| {
            with_words(limit, window, &clock, words, hint)
        };
        let half = 1u64 << 39;
        let (s0, s1) = (u64::from(share(limit, 2, 0)), u64::from(share(limit, 2, 1)));
        let counts = [0, 1, s1 - 1, s1, s0, MAX_COUNT];
        let sizes = [0, 1, 2, s1 - 1, s1, s0, s0 + 1, u64::from(u32::MAX)].map(|n| n as u32);
        let mut served = 0u64;
        for (window, index) in [1u64, 3].into_iter().flat_map(|window| {
            let last = u64::MAX / window;
            [TAG_MASK, TAG_MASK + 1, last - 2, last - 1, last].map(move |i| (window, i))
        }) {
            for offset in (0..window).filter(|o| {
                index
                    .checked_mul(window)
                    .and_then(|start| start.checked_add(*o))
                    .is_some()
            }) {
                let now = index * window + offset;
                clock.set(now);
                for (home_delta, other_delta) in [0, 1, half, TAG_MASK]
                    .into_iter()
                    .flat_map(|h| [0, 1, half, TAG_MASK].map(move |o| (h, o)))
                {
                    for (home_count, other_count) in
                        counts.into_iter().flat_map(|h| counts.map(move |o| (h, o)))
                    {
                        for (home, hint, n) in (0..2).flat_map(|home| {
                            // The hint as a denial's scan may set it (never to the last two
                            // windows' shared mark, `hintable`), in a window whose end fits
                            // a `u64` (in the last one, the general path does not trust it:
                            // there it is set only with every stripe full, which it says).
                            // `NO_HINT` is the index of the last 1 ns window: never its mark.
                            let end = index.checked_add(1).and_then(|i| i.checked_mul(window));
                            [NO_HINT]
                                .into_iter()
                                .chain(end.and(Some(index)).filter(|_| index < u64::MAX - 1))
                                .flat_map(move |hint| sizes.map(move |n| (home, hint, n)))
                        }) {
                            let mut words = [0; 2];
                            words[home] = pack_window(index.wrapping_sub(home_delta), home_count);
                            words[1 - home] =
                                pack_window(index.wrapping_sub(other_delta), other_count);
                            let short = make(window, words, hint);
                            let general = make(window, words, hint);
                            let admit = make(window, words, hint);
                            let calls = GENERAL_CALLS.get();
                            let fast = short.try_acquire_at(home, now, n);
                            served += u64::from(GENERAL_CALLS.get() == calls);
                            let slow = general.try_acquire_general(home, now, n);
                            let admitted = admit.acquire_at::<bool>(home, now, n);
                            let case = format!(
                                "window {window} now {now} home {home} deltas {home_delta} \
                                 {other_delta} counts {home_count} {other_count} hint {hint} n {n}"
                            );
                            assert_eq!(fast, slow, "{case}");
                            assert_eq!(admitted, slow.map(|d| d.is_allowed()), "{case}");
                            assert_eq!(state(&short), state(&general), "{case}");
                            assert_eq!(state(&admit), state(&general), "{case}");
                        }
                    }
                }
            }
        }
        assert!(served > 10_000, "{served}");
    }

    /// The "all full" hint names a window by its index + 1, which saturates: with 1 ns windows
    /// the last two windows of time (indices `u64::MAX − 1` and `u64::MAX`) would share the
    /// mark `u64::MAX`. A hint set in the first of them must not deny in the second: the short
    /// path (which trusts the hint without the general path's check that the denial's window
    /// ends within `u64`) borrowed nothing there: it denied the window's second permit, which
    /// the general path takes from stripe 1.
    #[test]
    fn the_all_full_hint_of_the_second_last_window_of_time_does_not_deny_in_the_last() {
        let clock = crate::ManualClock::new();
        let s = Sharded::with_clock(2, Duration::from_nanos(1), 2, clock.clone()).unwrap();
        // Window u64::MAX − 1: both permits, then a denial that finds every stripe full.
        clock.set(u64::MAX - 1);
        assert!(s.try_acquire_on(0, 1).unwrap().is_allowed());
        assert!(s.try_acquire_on(0, 1).unwrap().is_allowed());
        assert!(!s.try_acquire_on(0, 1).unwrap().is_allowed());
        // Window u64::MAX: two permits again, the second borrowed from stripe 1.
        clock.set(u64::MAX);
        assert!(s.try_acquire_on(0, 1).unwrap().is_allowed());
        let second = s.try_acquire_on(0, 1).unwrap();
        assert!(second.is_allowed(), "{second:?}");
        assert!(!s.try_acquire_on(0, 1).unwrap().is_allowed());
        // The same through `admit`, and on the general path, on fresh limiters.
        for general in [false, true] {
            let s = Sharded::with_clock(2, Duration::from_nanos(1), 2, clock.clone()).unwrap();
            let take = |now: u64| match general {
                true => s.try_acquire_general(0, now, 1).unwrap().is_allowed(),
                false => s.acquire_at::<bool>(0, now, 1).unwrap(),
            };
            assert_eq!(
                [take(u64::MAX - 1), take(u64::MAX - 1), take(u64::MAX - 1)],
                [true, true, false]
            );
            assert_eq!(
                [take(u64::MAX), take(u64::MAX), take(u64::MAX)],
                [true, true, false],
                "general {general}"
            );
        }
    }

    /// The cached window index is used only while a read lies in its window: every read gets
    /// the window division gives, going forward, back (a lagging core) and across edges; the
    /// cache is filled for long windows and left alone for short ones.
    #[test]
    fn the_cached_window_is_the_divided_one() {
        let clock = crate::ManualClock::new();
        for (window, cached) in [
            (CACHED_WINDOW_NANOS, true),
            (CACHED_WINDOW_NANOS - 1, false),
        ] {
            let s = Sharded::with_clock(4, Duration::from_nanos(window), 2, clock.clone());
            let s = s.unwrap();
            let base = 7 * window;
            let offsets = [
                0,
                1,
                window - 1,
                window,
                3 * window + 5,
                window + 2,
                0,
                5 * window,
            ];
            for now in offsets
                .map(|offset| base + offset)
                .into_iter()
                .chain([0, 1, u64::MAX])
            {
                let at = s.window_at(now);
                let index = now / window;
                assert_eq!(
                    (at.mark, at.tag(), at.tagged),
                    (
                        index.min(u64::MAX - 1),
                        index & TAG_MASK,
                        index << COUNT_BITS
                    ),
                    "{window} {now}"
                );
                assert_eq!(at.until_end, window - now % window, "{window} {now}");
            }
            // Relaxed: single-threaded test (as in `make` above); the cache pairs with nothing.
            let recent = s.recent.load(Ordering::Relaxed);
            assert_eq!(recent, if cached { u64::MAX / window } else { 0 });
        }
    }

    /// One far-future clock read (a TSC glitch, a ManualClock set ahead and back) does not
    /// disable the window cache for the length of the leap: a cache that only moved forward
    /// would have every call divide until real time reached the leapt window (the short path's
    /// saving lost for a day; decisions stay right). A cached window more than the lag horizon
    /// ahead of a read is a leaping clock's, and is replaced.
    #[test]
    fn a_leaped_read_does_not_pin_the_window_cache_ahead() {
        let window = CACHED_WINDOW_NANOS * 1_000; // about 1 s
        let now = 1_700_000_000_000_000_000;
        let clock = crate::ManualClock::starting_at(now);
        let s = Sharded::with_clock(1_000, Duration::from_nanos(window), 2, clock.clone());
        let s = s.unwrap();
        assert!(s.try_acquire_on(0, 1).unwrap().is_allowed());
        // Relaxed: single-threaded test; the cache pairs with nothing.
        assert_eq!(s.recent.load(Ordering::Relaxed), now / window);
        clock.set(now + 86_400_000_000_000); // a one-day leap, read once
        let _ = s.try_acquire_on(0, 1).unwrap();
        clock.set(now + window); // the present again, one window later
        for _ in 0..3 {
            let _ = s.try_acquire_on(1, 1).unwrap();
        }
        assert_eq!(
            s.recent.load(Ordering::Relaxed),
            (now + window) / window,
            "the cache still holds the leapt window: every call divides until real time gets there"
        );
    }

    /// `try_acquire` and `admit` find the thread's stripe through `route`: an unnumbered
    /// thread is numbered by its first call and served by `home_stripe() & (stripes − 1)`, as
    /// is a thread whose number has the top bit set (out of `route`'s range: reduced on the way
    /// out of line, not renumbered), and a numbered thread by its number's stripe. With that
    /// stripe full, the next call borrows from the next stripe in turn (`after_home` finds the
    /// thread's stripe again).
    #[test]
    fn calls_take_from_the_thread_s_numbered_stripe() {
        // The stripe each of two admissions wrote (count 1 each: shares of 1) on a fresh limiter.
        fn served(call: fn(&Sharded<crate::ManualClock>) -> bool) -> [usize; 2] {
            let s = Sharded::with_clock(8, Duration::from_secs(1), 8, crate::ManualClock::new());
            let s = s.unwrap();
            // Relaxed: single-threaded.
            let written = |s: &Sharded<crate::ManualClock>| -> Vec<usize> {
                (0..s.stripes())
                    .filter(|&i| s.stripes[i].word.load(Ordering::Relaxed) != 0)
                    .collect()
            };
            assert!(call(&s));
            let first = written(&s);
            assert_eq!(
                first.len(),
                1,
                "one stripe served the one permit: {first:?}"
            );
            assert!(call(&s));
            let both = written(&s);
            assert_eq!(both.len(), 2, "another stripe served the second: {both:?}");
            let second = both.iter().copied().find(|&i| i != first[0]).unwrap();
            [first[0], second]
        }
        let calls: [fn(&Sharded<crate::ManualClock>) -> bool; 2] = [
            |s| s.try_acquire(1).unwrap().is_allowed(),
            |s| s.admit(1).unwrap(),
        ];
        for call in calls {
            // A fresh thread: unnumbered until the call.
            let (stripes, number) = std::thread::spawn(move || {
                assert_eq!(HOME.get(), usize::MAX);
                let stripes = served(call);
                (stripes, HOME.get())
            })
            .join()
            .unwrap();
            assert_ne!(number, usize::MAX, "the first call numbers the thread");
            assert_eq!(stripes, [number & 7, (number + 1) & 7]);
            // Numbered: every number's stripe, in and out of `route`'s range.
            for number in [0, 3, 5, 7, 8, 13, TOP_BIT | 6, TOP_BIT | 9, usize::MAX - 1] {
                let stripes = std::thread::spawn(move || {
                    HOME.set(number);
                    let stripes = served(call);
                    assert_eq!(HOME.get(), number, "a numbered thread is not renumbered");
                    stripes
                })
                .join()
                .unwrap();
                let home = number & 7;
                assert_eq!(stripes, [home, (home + 1) & 7], "number {number:#x}");
            }
        }
    }

    #[test]
    fn threads_get_distinct_home_stripes() {
        let here = home_stripe();
        assert_eq!(home_stripe(), here, "stable within a thread");
        let there = std::thread::spawn(home_stripe).join().unwrap();
        assert_ne!(here, there);
    }
}
