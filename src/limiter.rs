//! The [`Limiter`] trait, the [`Algorithm`] trait for packed-word algorithms, and the one CAS loop
//! ([`update`]) that every packed-word limiter runs.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::sync::{AtomicU64, Ordering};

/// What every floodgate limiter does.
///
/// Only [`try_acquire`](Limiter::try_acquire), [`clock`](Limiter::clock),
/// [`set_limit`](Limiter::set_limit) and [`limit`](Limiter::limit) are required;
/// the blocking calls are built on them.
///
/// ```
/// use floodgate::{AtomicLimiter, Gcra, Limiter, ManualClock, Rate};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let limiter = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 1).unwrap(), clock.clone());
/// assert_eq!(limiter.acquire(1).unwrap(), Duration::ZERO);
/// assert_eq!(limiter.acquire(1).unwrap(), Duration::from_millis(100)); // slept on the clock
/// assert!(!limiter.try_acquire_for(1, Duration::from_millis(50)).unwrap().is_allowed());
/// ```
pub trait Limiter: Send + Sync {
    /// Takes `n` permits if they are available now; never blocks. A denial consumes nothing.
    ///
    /// # Errors
    /// [`AcquireError`] when `n` is zero or above the capacity (no wait would ever admit it).
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError>;

    /// The clock this limiter reads and sleeps on.
    fn clock(&self) -> &dyn Clock;

    /// Changes the limit live, from any thread: afterwards [`limit`](Limiter::limit) and the
    /// `limit` of every [`Decision`] report `limit`. One meaning for every limiter: the most
    /// permits one instant can grant, i.e. the window limit of a window, the capacity (burst)
    /// of a token bucket, leaky bucket or GCRA (their rate is changed with `set_rate`), and
    /// for the smooth limiters, whose `limit` is their rate, permits per second. Permits
    /// already taken stay taken; a bucket keeps its tokens, capped at the new capacity.
    ///
    /// # Errors
    /// [`ConfigError`] for a limit the algorithm cannot hold; the old limit then stays.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Limiter, Rate, TokenBucket};
    /// let bucket = AtomicLimiter::new(TokenBucket::new(10, Rate::per_second(5))?);
    /// bucket.set_limit(20)?;
    /// assert_eq!(bucket.limit(), 20); // the capacity, as every Decision reports it
    /// assert_eq!(bucket.algorithm().rate(), Rate::per_second(5)); // the rate is unchanged
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError>;

    /// The limit in force: the `limit` of every [`Decision`] (see
    /// [`set_limit`](Limiter::set_limit)).
    fn limit(&self) -> u64;

    /// Takes `n` permits, sleeping on the clock until they are granted. Returns how long it slept.
    ///
    /// # Errors
    /// As [`try_acquire`](Limiter::try_acquire): a request that could never be granted returns
    /// at once instead of waiting forever.
    fn acquire(&self, n: u32) -> Result<Duration, AcquireError> {
        let mut waited = Duration::ZERO;
        loop {
            let decision = self.try_acquire(n)?;
            if decision.is_allowed() {
                return Ok(waited);
            }
            let wait = decision.retry_after();
            self.clock().sleep(wait);
            waited = waited.saturating_add(wait);
        }
    }

    /// Takes `n` permits if they can be had within `timeout`: sleeps only while the announced wait
    /// fits in what is left of the timeout, otherwise returns the denial at once, consuming nothing.
    ///
    /// # Errors
    /// As [`try_acquire`](Limiter::try_acquire).
    fn try_acquire_for(&self, n: u32, timeout: Duration) -> Result<Decision, AcquireError> {
        let mut left = timeout;
        loop {
            let decision = self.try_acquire(n)?;
            let wait = decision.retry_after();
            if decision.is_allowed() || wait > left {
                return Ok(decision);
            }
            self.clock().sleep(wait);
            left -= wait;
        }
    }
}

/// The outcome of one pure decision: the [`Decision`], and the state word to publish
/// (`None` when nothing changes, which is always the case for a denial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The state word to compare-exchange in, or `None` to return without writing.
    pub next: Option<u64>,
    /// The answer for the caller.
    pub decision: Decision,
}

impl Step {
    /// An admitted request that moves the state to `next`.
    ///
    /// ```
    /// use floodgate::{Decision, Step};
    /// let d = Decision::allow(5, 4, 0);
    /// let step = Step::allow(42, d);
    /// assert_eq!((step.next, step.decision), (Some(42), d));
    /// ```
    #[inline]
    pub const fn allow(next: u64, decision: Decision) -> Self {
        Step {
            next: Some(next),
            decision,
        }
    }

    /// A denied request: no write.
    ///
    /// ```
    /// use floodgate::{Decision, Step};
    /// let step = Step::deny(Decision::deny(5, 0, 10, 10));
    /// assert_eq!(step.next, None); // a denial never writes
    /// assert!(!step.decision.is_allowed());
    /// ```
    #[inline]
    pub const fn deny(decision: Decision) -> Self {
        Step {
            next: None,
            decision,
        }
    }
}

/// An algorithm whose whole per-limiter state is one `u64`, decided by a pure function.
///
/// The state word `0` must mean "fresh": a limiter (or a key of a [`Keyed`](crate) map) starts
/// there. Configuration lives in the algorithm value and may change live through atomics.
///
/// ```
/// use floodgate::{Algorithm, FixedWindow};
/// use std::time::Duration;
/// let window = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
/// let step = window.decide(0, 0, 1);
/// assert!(step.decision.is_allowed());
/// let denied = window.decide(step.next.unwrap(), 0, 1);
/// assert!(!denied.decision.is_allowed() && denied.next.is_none());
/// ```
pub trait Algorithm: Send + Sync + 'static {
    /// Whether decisions need a time floor: `now` raised to the latest clock read that any writer
    /// published (see [`update_at`]). An algorithm whose state does not record when it was written
    /// (a time word: token bucket, leaky bucket, GCRA) needs it, or a reader whose clock lags
    /// the last writer's (TSC skew between cores) would be refused permits that had accrued.
    /// Algorithms whose state pins its own window (fixed window) do not.
    const NEEDS_TIME_FLOOR: bool = false;

    /// Validates `n` against the configuration in force.
    ///
    /// # Errors
    /// [`AcquireError`] for `n = 0` or `n` above the capacity.
    fn check_permits(&self, n: u32) -> Result<(), AcquireError>;

    /// The decision for `n` permits at `now` (nanoseconds on the clock's timeline) given `state`.
    /// Pure: it reads the configuration and its arguments and nothing else. It must never move
    /// state backwards when `now` is behind the time the state was written at.
    fn decide(&self, state: u64, now: u64, n: u32) -> Step;

    /// Whether `state` at `now` would decide every later request exactly as the fresh state `0`
    /// would, so it can be forgotten (evicted) without changing any decision.
    fn is_idle(&self, state: u64, now: u64) -> bool;

    /// Changes the limit live at `now` (nanoseconds on the clock's timeline: the instant the
    /// change takes effect, for algorithms whose state is a time). The same quantity that
    /// [`limit`](Algorithm::limit) and every [`Decision`] report; see [`Limiter::set_limit`].
    ///
    /// # Errors
    /// [`ConfigError`] for a limit the algorithm cannot hold.
    fn set_limit(&self, limit: u32, now: u64) -> Result<(), ConfigError>;

    /// The limit in force: the `limit` of every [`Decision`].
    fn limit(&self) -> u64;
}

/// The one CAS loop: load the word, decide, publish with one compare-exchange against the exact
/// word the decision was computed from, retry on conflict. A step without `next` (a denial)
/// returns without writing, so a limiter under attack keeps its cache line shared.
///
/// ```
/// use floodgate::limiter::{update, Step};
/// use floodgate::Decision;
/// use std::sync::atomic::AtomicU64;
/// let word = AtomicU64::new(1);
/// let d = update(&word, |s| Step::allow(s + 1, Decision::allow(9, 9 - s, 0)));
/// assert_eq!(d.remaining(), 8);
/// assert_eq!(word.into_inner(), 2);
/// ```
#[inline]
pub fn update(word: &AtomicU64, mut decide: impl FnMut(u64) -> Step) -> Decision {
    // Acquire: a state word comes with everything its writer did before publishing it (the time
    // floor of `update_at`); the word itself needs no more than a total order on one location.
    let mut current = word.load(Ordering::Acquire);
    loop {
        let step = decide(current);
        let Some(next) = step.next else {
            return step.decision;
        };
        if next == current {
            return step.decision;
        }
        // AcqRel: Release publishes what was written before (the time floor) with the word;
        // Acquire on failure, as the load above. `actual` is the exact word the retry decides on.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return step.decision,
            Err(actual) => current = actual,
        }
    }
}

/// [`update`] with a time floor: every decision runs at `max(clock_now, floor)`, and a writer
/// raises the floor to its `now` before it publishes a word, so a reader that sees the word also
/// sees a floor at least as late as the writer's clock. A reader whose clock lags (another core's
/// TSC) is then decided at the writer's time: never moved back, never refused for the lag. The
/// floor is a clock value some thread read before this call observed its effect, so it is never
/// later than the real time of the call: nothing is admitted early. A denial writes nothing.
///
/// ```
/// use floodgate::limiter::{update_at, Step};
/// use floodgate::Decision;
/// use std::sync::atomic::AtomicU64;
/// let (word, floor) = (AtomicU64::new(0), AtomicU64::new(0));
/// update_at(&word, &floor, 100, |_, now| Step::allow(now, Decision::allow(1, 0, 0)));
/// // A lagging clock read (90) decides at the floor (100).
/// update_at(&word, &floor, 90, |_, now| { assert_eq!(now, 100); Step::deny(Decision::deny(1, 0, 1, 0)) });
/// ```
#[inline]
pub fn update_at(
    word: &AtomicU64,
    floor: &AtomicU64,
    clock_now: u64,
    mut decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    update(word, |state| {
        // Relaxed: ordered after the Acquire load of `state` in `update`, which synchronizes
        // with the Release CAS that followed the writer's floor raise.
        let floor_now = floor.load(Ordering::Relaxed);
        let now = clock_now.max(floor_now);
        let step = decide(state, now);
        if step.next.is_some() && now > floor_now {
            // Relaxed: published to readers by the Release CAS of `update` that follows.
            floor.fetch_max(now, Ordering::Relaxed);
        }
        step
    })
}

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
        let now = self.now();
        // Acquire: pairs with the Release CAS, so the floor read below is the writer's or later.
        let state = self.words.state.load(Ordering::Acquire);
        let now = if A::NEEDS_TIME_FLOOR {
            // Relaxed: ordered by the Acquire load above.
            now.max(self.words.floor.load(Ordering::Relaxed))
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

    #[inline]
    fn now(&self) -> u64 {
        self.clock.now_nanos()
    }
}

impl<A: Algorithm, C: Clock> Limiter for AtomicLimiter<A, C> {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        self.algorithm.check_permits(n)?;
        let now = self.now();
        let words = &*self.words;
        Ok(if A::NEEDS_TIME_FLOOR {
            update_at(&words.state, &words.floor, now, |state, now| {
                self.algorithm.decide(state, now, n)
            })
        } else {
            update(&words.state, |state| self.algorithm.decide(state, now, n))
        })
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        let now = if A::NEEDS_TIME_FLOOR {
            // Relaxed: a past clock read, as in `peek`; the change takes effect no earlier than
            // any decision already published.
            self.now().max(self.words.floor.load(Ordering::Relaxed))
        } else {
            self.now()
        };
        self.algorithm.set_limit(limit, now)
    }

    fn limit(&self) -> u64 {
        self.algorithm.limit()
    }
}
