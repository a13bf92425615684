//! [`AtomicLimiter`]: one [`Algorithm`] over one cache-padded `AtomicU64`, reading one [`Clock`].

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::sync::{AtomicU64, Ordering};

use super::engine::{read_at_floor, update_at, update_timed};
use super::{Algorithm, Limiter};

/// A limiter: one [`Algorithm`] over one cache-padded `AtomicU64`, reading one [`Clock`].
///
/// ```
/// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
/// use std::time::Duration;
/// let limiter = AtomicLimiter::new(FixedWindow::new(100, Duration::from_secs(60)).unwrap());
/// assert!(limiter.try_acquire(1).unwrap().is_allowed());
/// ```
#[derive(Debug)]
pub struct AtomicLimiter<A, C = QuantaClock> {
    words: CachePadded<Words>,
    algorithm: A,
    clock: C,
}

/// The state word and its time floor, on one cache line.
#[derive(Debug)]
struct Words {
    state: AtomicU64,
    floor: AtomicU64,
}

impl<A: Algorithm> AtomicLimiter<A, QuantaClock> {
    /// A limiter on the default (quanta TSC) clock.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
    /// use std::time::Duration;
    /// let limiter = AtomicLimiter::new(FixedWindow::new(3, Duration::from_secs(1))?);
    /// assert_eq!(limiter.limit(), 3);
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, QuantaClock::new())
    }
}

impl<A: Algorithm, C: Clock> AtomicLimiter<A, C> {
    /// A limiter on `clock`.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let window = FixedWindow::new(1, Duration::from_secs(1))?;
    /// let limiter = AtomicLimiter::with_clock(window, clock.clone());
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// assert!(!limiter.try_acquire(1)?.is_allowed());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        AtomicLimiter {
            words: CachePadded::new(Words {
                state: AtomicU64::new(0),
                floor: AtomicU64::new(0),
            }),
            algorithm,
            clock,
        }
    }

    /// The algorithm and its live configuration.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow};
    /// use std::time::Duration;
    /// let limiter = AtomicLimiter::new(FixedWindow::new(3, Duration::from_secs(2))?);
    /// assert_eq!(limiter.algorithm().window(), Duration::from_secs(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The decision `n` permits would get now, without taking them (if allowed, `remaining` is
    /// what would be left after taking them).
    ///
    /// # Errors
    /// As [`Limiter::try_acquire`].
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    /// let window = FixedWindow::new(3, Duration::from_secs(1))?;
    /// let limiter = AtomicLimiter::with_clock(window, ManualClock::new());
    /// assert_eq!(limiter.peek(2)?.remaining(), 1);
    /// assert_eq!(limiter.available(), 3); // peeking took nothing
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek(&self, n: u32) -> Result<Decision, AcquireError> {
        self.algorithm.check_permits(n)?;
        // Acquire: pairs with the Release CAS, so the floor read below is the writer's or later
        // (loom `peek_floor.rs` fails with it Relaxed).
        let state = self.words.state.load(Ordering::Acquire);
        // Read after the load: a peek judges the state on a clock read newer than it.
        let now = self.now();
        let now = if A::NEEDS_TIME_FLOOR {
            // After the Acquire load above.
            read_at_floor(now, &self.words.floor)
        } else {
            now
        };
        Ok(self.algorithm.decide(state, now, n).decision)
    }

    /// Permits a request could take right now, without taking any (for a `RateLimit-Remaining`
    /// header before the request is handled).
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
    /// let l = AtomicLimiter::new(FixedWindow::new(5, std::time::Duration::from_secs(1)).unwrap());
    /// l.try_acquire(2).unwrap();
    /// assert_eq!(l.available(), 3);
    /// ```
    pub fn available(&self) -> u64 {
        match self.peek(1) {
            Ok(d) if d.is_allowed() => d.remaining() + 1,
            Ok(d) => d.remaining(),
            Err(_) => 0,
        }
    }

    /// Forgets all consumed permits: back to the fresh state.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    /// let window = FixedWindow::new(1, Duration::from_secs(1))?;
    /// let limiter = AtomicLimiter::with_clock(window, ManualClock::new());
    /// limiter.try_acquire(1)?;
    /// assert!(!limiter.try_acquire(1)?.is_allowed());
    /// limiter.reset();
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self) {
        // Release: as a CAS would; the floor is kept (it only ever holds past clock reads).
        self.words.state.store(0, Ordering::Release);
    }

    /// The `now` to give a bucket's live reconfiguration (`limiter.algorithm().set_rate(rate,
    /// limiter.change_instant())`, or `set_capacity`): the clock read raised to the time floor,
    /// so no earlier than any decision already published, less the floor's grain
    /// ([`FLOOR_GRAIN_NANOS`](crate::clock::FLOOR_GRAIN_NANOS): a decision less than a grain
    /// past the floor does not raise it). A change at an earlier instant applies from it: a
    /// bucket's debt is kept as measured there, so a drained bucket would be repaid at the new
    /// rate for the span the instant trails (see
    /// [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)): through this instant, a raise
    /// from `r` to `r'` frees at most what that grain accrues, ⌈16,384 ns × (r' − r)⌉ permits
    /// (at most one below about 61,000 per second, up to 16,384 at one per nanosecond).
    /// [`Limiter::set_limit`] reads its instant this way.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Limiter, ManualClock, Rate, TokenBucket};
    /// let clock = ManualClock::starting_at(5_000);
    /// let b = AtomicLimiter::with_clock(TokenBucket::new(Rate::per_second(1), 10)?, clock);
    /// assert!(b.try_acquire(10)?.is_allowed());
    /// b.algorithm().set_rate(Rate::per_second(10), b.change_instant())?;
    /// assert_eq!(b.available(), 0); // the 10 permits of debt are kept
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn change_instant(&self) -> u64 {
        let now = self.now();
        if A::NEEDS_TIME_FLOOR {
            read_at_floor(now, &self.words.floor)
        } else {
            now
        }
    }

    #[inline]
    fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// [`Limiter::try_acquire`] on the general engine, recording what the deciding step saw: the
    /// time it decided at and the word it published (for a lease's exact refund, see
    /// [`replace_word`](Self::replace_word)). For an allowed decision, `word` is the word this
    /// call's compare-exchange wrote.
    pub(crate) fn take_recorded(&self, n: u32) -> Result<(Decision, Written), AcquireError> {
        let mut decide = self.algorithm.decider(n)?;
        let mut written = Written { word: 0, now: 0 };
        let recording = |state: u64, now: u64| {
            let step = decide(state, now);
            written = Written {
                word: step.next.unwrap_or(state),
                now,
            };
            step
        };
        let words = &*self.words;
        let decision = if A::NEEDS_TIME_FLOOR {
            update_at(&words.state, &words.floor, || self.now(), recording)
        } else {
            update_timed(&words.state, || self.now(), recording)
        };
        Ok((decision, written))
    }

    /// Replaces the state word with `new` only if it is still exactly `expected`: a lease's
    /// refund, which is exact only on the word its lease wrote.
    pub(crate) fn replace_word(&self, expected: u64, new: u64) -> bool {
        // AcqRel / Acquire: as in `update` (a refund is one more write of the state word).
        self.words
            .state
            .compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Replaces the state word by `refund(word)` while that is `Some`, from whatever word is
    /// current (a compare-exchange loop): a lease's refund that is exact on any word `refund`
    /// accepts. Returns whether it was replaced.
    pub(crate) fn refund_word(&self, refund: impl Fn(u64) -> Option<u64>) -> bool {
        // AcqRel / Acquire: as in `update` (a refund is one more write of the state word).
        self.words
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, refund)
            .is_ok()
    }
}

/// What a recorded decision ([`AtomicLimiter::take_recorded`]) saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    /// The word published (the loaded word when nothing was written).
    pub(crate) word: u64,
    /// The time the decision ran at (the clock read raised to the time floor).
    pub(crate) now: u64,
}

/// A bucket's live reconfiguration at its [`change_instant`](AtomicLimiter::change_instant):
/// the safe form of `limiter.algorithm().set_rate(rate, now)`, which cannot be given an instant
/// trailing the decisions already published by more than the floor's grain (a raw read on a
/// core whose clock trails, see [`change_instant`](AtomicLimiter::change_instant)).
impl<C: Clock> AtomicLimiter<crate::Gcra, C> {
    /// Changes the rate live, at [`change_instant`](Self::change_instant) (see
    /// [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)): the debt held is kept, now
    /// repaid at the new rate, so a drained bucket stays drained.
    ///
    /// # Errors
    /// As [`TokenBucket::set_rate`](crate::TokenBucket::set_rate); the old rate then stays.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Limiter, ManualClock, Rate, TokenBucket};
    /// let b = AtomicLimiter::with_clock(TokenBucket::new(Rate::per_second(1), 10)?, ManualClock::new());
    /// assert!(b.try_acquire(10)?.is_allowed());
    /// b.set_rate(Rate::per_second(10))?;
    /// assert_eq!(b.available(), 0); // the 10 permits of debt are kept
    /// assert_eq!(b.algorithm().rate(), Rate::per_second(10));
    /// assert!(b.set_rate(Rate::per_second(0)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_rate(&self, rate: crate::Rate) -> Result<(), ConfigError> {
        self.algorithm().set_rate(rate, self.change_instant())
    }

    /// Changes the capacity (burst) live, at [`change_instant`](Self::change_instant) (see
    /// [`TokenBucket::set_capacity`](crate::TokenBucket::set_capacity)): the tokens held are
    /// kept, capped at the new capacity; the new room fills at the rate.
    ///
    /// # Errors
    /// As [`TokenBucket::set_capacity`](crate::TokenBucket::set_capacity).
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Limiter, ManualClock, Rate, TokenBucket};
    /// let b = AtomicLimiter::with_clock(TokenBucket::new(Rate::per_second(1), 10)?, ManualClock::new());
    /// assert!(b.try_acquire(10)?.is_allowed());
    /// b.set_capacity(20)?;
    /// assert_eq!(b.available(), 0); // raising the capacity frees nothing at once
    /// assert_eq!(b.algorithm().capacity(), 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_capacity(&self, capacity: u32) -> Result<(), ConfigError> {
        self.algorithm()
            .set_capacity(capacity, self.change_instant())
    }
}

impl<A: Algorithm, C: Clock> Limiter for AtomicLimiter<A, C> {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        let words = &*self.words;
        self.algorithm
            .acquire_word(&words.state, &words.floor, || self.now(), n)
    }

    #[inline]
    fn admit(&self, n: u32) -> Result<bool, AcquireError> {
        let words = &*self.words;
        self.algorithm
            .admit_word(&words.state, &words.floor, || self.now(), n)
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        // A past clock read, as in `peek`: the change takes effect no earlier than any decision
        // already published, less the floor's grain.
        self.algorithm.set_limit(limit, self.change_instant())
    }

    fn limit(&self) -> u64 {
        self.algorithm.limit()
    }
}
