//! [`Sharded`]: one fixed-window limit split across per-core stripes, so that allow-heavy
//! traffic from many cores does not bounce a single cache line.

use std::cell::Cell;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algorithms::FixedWindow;
use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::decision::{AcquireError, ConfigError, Decision, validate_limit};
use crate::limiter::{Algorithm, Limiter, reads_after, update_timed};
use crate::packed::MAX_COUNT;
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
    window_nanos: u64,
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
            window_nanos: duration_to_nanos(window),
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
        Duration::from_nanos(self.window_nanos)
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
    pub fn try_acquire_on(&self, home: usize, n: u32) -> Result<Decision, AcquireError> {
        crate::decision::check_permits(n, self.max_request())?;
        let now = self.clock.now_nanos();
        let mask = self.stripes.len() - 1;
        let home = home & mask;
        let first = self.take(home, now, n);
        if first.is_allowed() {
            return Ok(self.global(first));
        }
        // Borrow. A hint that this window is already full everywhere spares the scan.
        let window_mark = (now / self.window_nanos).saturating_add(1);
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

/// The calling thread's home stripe number: threads are numbered round-robin on first use.
pub(crate) fn home_stripe() -> usize {
    // std atomics on purpose: this only spreads threads over stripes, it is no part of the
    // admission protocol (a collision costs speed, never correctness), so loom need not see it.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    HOME.with(|home| {
        let mut index = home.get();
        if index == usize::MAX {
            // Relaxed: a ticket counter; only uniqueness of the numbers matters.
            index = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            home.set(index);
        }
        index
    })
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

    #[test]
    fn threads_get_distinct_home_stripes() {
        let here = home_stripe();
        assert_eq!(home_stripe(), here, "stable within a thread");
        let there = std::thread::spawn(home_stripe).join().unwrap();
        assert_ne!(here, there);
    }
}
