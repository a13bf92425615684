//! The [`Limiter`] trait, the [`Algorithm`] trait for packed-word algorithms, and the one CAS loop
//! (`update`) that every packed-word limiter runs.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, FLOOR_GRAIN_NANOS, MAX_CLOCK_LAG_NANOS, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::sync::{AtomicU64, Ordering, fence};

/// What every floodgate limiter does.
///
/// Only [`try_acquire`](Limiter::try_acquire), [`clock`](Limiter::clock),
/// [`set_limit`](Limiter::set_limit) and [`limit`](Limiter::limit) are required;
/// the blocking calls are built on them.
///
/// # Memory ordering
/// What a limiter promises is the count: under any interleaving of threads (and the clock
/// behaviours of the README's time model), the permits granted never pass the algorithm's bound,
/// and a denial consumes nothing.
///
/// For [`AtomicLimiter`] and [`Keyed`](crate::Keyed) (one state word per limiter or key), a
/// grant also orders memory, as a lock would: the granting call publishes its state word with a
/// Release compare-exchange, and every decision reads the word it decides on with Acquire, so
/// everything a thread did before a granted `try_acquire` happens-before any later decision on
/// the same limiter (or key) that observes that grant (its own grant, or a denial computed from
/// it). Nothing else is ordered: a denial publishes nothing, and limiters built from several
/// words ([`SlidingWindow`](crate::SlidingWindow), [`Sharded`](crate::Sharded), the smooth
/// limiters, [`InFlight`](crate::concurrency::InFlight)'s queue) promise the count only. Do not
/// use a limiter to hand data between threads.
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

    /// One permit, now, without a `Result`: [`try_acquire(1)`](Limiter::try_acquire), the
    /// common case (governor's `check`). One permit is a valid request for every limit; the
    /// rare configuration that can never grant even one (a smooth limiter whose single permit
    /// would book more than a year) is reported as a denial whose `retry_after` is
    /// `Duration::MAX`: `try_acquire` names the reason.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Gcra, Limiter, Rate};
    /// let limiter = AtomicLimiter::new(Gcra::new(Rate::per_second(1), 1)?);
    /// assert!(limiter.check().is_allowed());
    /// assert!(!limiter.check().is_allowed());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn check(&self) -> Decision {
        self.try_acquire(1)
            .unwrap_or_else(|_| Decision::deny(self.limit(), 0, u64::MAX, u64::MAX))
    }

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
    /// let bucket = AtomicLimiter::new(TokenBucket::new(Rate::per_second(5), 10)?);
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
    /// at once instead of waiting forever; [`AcquireError::PastEndOfTime`] when a wait would end
    /// past the end of the clock's `u64` timeline.
    fn acquire(&self, n: u32) -> Result<Duration, AcquireError> {
        let mut waited = Duration::ZERO;
        loop {
            let decision = self.try_acquire(n)?;
            if decision.is_allowed() {
                return Ok(waited);
            }
            let wait = decision.retry_after();
            check_wait_ends(self.clock(), wait)?;
            self.clock().sleep(wait);
            waited = waited.saturating_add(wait);
        }
    }

    /// Takes `n` permits if they can be had within `timeout`: sleeps only while the announced wait
    /// fits in what is left of the timeout, otherwise returns the denial at once, consuming nothing.
    ///
    /// # Errors
    /// As [`acquire`](Limiter::acquire).
    fn try_acquire_for(&self, n: u32, timeout: Duration) -> Result<Decision, AcquireError> {
        let mut left = timeout;
        loop {
            let decision = self.try_acquire(n)?;
            let wait = decision.retry_after();
            if decision.is_allowed() || wait > left {
                return Ok(decision);
            }
            check_wait_ends(self.clock(), wait)?;
            self.clock().sleep(wait);
            left -= wait;
        }
    }
}

/// `Ok` when a wait of `wait` from `clock`'s reading now ends on the clock's `u64` timeline;
/// otherwise [`AcquireError::PastEndOfTime`]: the wait could never end, and a blocking call
/// must return instead of sleeping and retrying forever.
///
/// # Errors
/// [`AcquireError::PastEndOfTime`] when `now + wait` passes `u64::MAX` nanoseconds.
pub(crate) fn check_wait_ends(clock: &dyn Clock, wait: Duration) -> Result<(), AcquireError> {
    let now_nanos = clock.now_nanos();
    let ends = u64::try_from(wait.as_nanos())
        .ok()
        .and_then(|wait| now_nanos.checked_add(wait));
    match ends {
        Some(_) => Ok(()),
        None => Err(AcquireError::PastEndOfTime { now_nanos, wait }),
    }
}

/// The outcome of one pure decision: the [`Decision`], and the state word to publish
/// (`None` when nothing changes, which is always the case for an ordinary denial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The state word to compare-exchange in, or `None` to return without writing.
    pub next: Option<u64>,
    /// The answer for the caller.
    pub decision: Decision,
    /// The decision judged the state to be further ahead of `now` than the lag horizon
    /// ([`MAX_CLOCK_LAG_NANOS`](crate::clock::MAX_CLOCK_LAG_NANOS)): written by a clock that
    /// leaped. The engine accepts such a step only when `now` was read *after* the state word was
    /// loaded; otherwise it reads the clock again and decides again, so a thread that was
    /// preempted between its clock read and its compare-exchange can never take newer state for
    /// a leap (see [`update_timed`]). A smooth limiter's refusal by a booking that far ahead
    /// (which may be legitimate) is marked too: the floored engine then also makes sure the word
    /// is still the one it decided on (see `update_floored_leap`).
    pub(crate) leap: bool,
}

impl Step {
    /// An admitted request that moves the state to `next`.
    ///
    /// ```
    /// use floodgate::{Decision, limiter::Step};
    /// let d = Decision::allow(5, 4, 0);
    /// let step = Step::allow(42, d);
    /// assert_eq!((step.next, step.decision), (Some(42), d));
    /// ```
    #[inline]
    pub const fn allow(next: u64, decision: Decision) -> Self {
        Step {
            next: Some(next),
            decision,
            leap: false,
        }
    }

    /// A denied request: no write.
    ///
    /// ```
    /// use floodgate::{Decision, limiter::Step};
    /// let step = Step::deny(Decision::deny(5, 0, 10, 10));
    /// assert_eq!(step.next, None); // a denial never writes
    /// assert!(!step.decision.is_allowed());
    /// ```
    #[inline]
    pub const fn deny(decision: Decision) -> Self {
        Step {
            next: None,
            decision,
            leap: false,
        }
    }

    /// A denial that still writes `repaired`: the state was left by a leaping clock and is put
    /// back in range (the one kind of denial that writes; it happens once per leap).
    ///
    /// ```
    /// use floodgate::{Decision, limiter::Step};
    /// let step = Step::repair(7, Decision::deny(5, 0, 10, 10)).after_leap();
    /// assert_eq!(step.next, Some(7));
    /// assert!(step.is_after_leap() && !step.decision.is_allowed());
    /// ```
    #[inline]
    pub const fn repair(repaired: u64, decision: Decision) -> Self {
        Step {
            next: Some(repaired),
            decision,
            leap: false,
        }
    }

    /// A step that writes `next` when it is `Some`, whatever the decision (a strike recorded
    /// against a denied key, a booking of the smooth limiters).
    #[inline]
    pub(crate) const fn new(next: Option<u64>, decision: Decision) -> Self {
        Step {
            next,
            decision,
            leap: false,
        }
    }

    /// Marks the step as judging the state to be a leaping clock's (see the field docs): the
    /// engine then makes sure `now` is a clock read taken after the state was loaded.
    ///
    /// ```
    /// use floodgate::{Decision, limiter::Step};
    /// assert!(Step::allow(1, Decision::allow(2, 1, 0)).after_leap().is_after_leap());
    /// assert!(!Step::allow(1, Decision::allow(2, 1, 0)).is_after_leap());
    /// ```
    #[inline]
    pub const fn after_leap(mut self) -> Self {
        self.leap = true;
        self
    }

    /// Whether the step judged the state to be a leaping clock's.
    ///
    /// ```
    /// use floodgate::{Decision, limiter::Step};
    /// assert!(!Step::deny(Decision::deny(1, 0, 1, 1)).is_after_leap());
    /// ```
    #[inline]
    pub const fn is_after_leap(&self) -> bool {
        self.leap
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
    /// published (see `update_at`). An algorithm whose state does not record when it was written
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

    /// [`check_permits`](Algorithm::check_permits), then the decider one call uses for every
    /// attempt of its compare-exchange loop: `decide(state, now, n)` for this `n`. An algorithm
    /// whose configuration is several values read together (the time-word buckets' snapshot)
    /// reads it once here and only checks on each attempt that it is still in force, instead of
    /// reading it again between the state load and the compare-exchange.
    ///
    /// # Errors
    /// As [`check_permits`](Algorithm::check_permits).
    ///
    /// ```
    /// use floodgate::{Algorithm, FixedWindow};
    /// use std::time::Duration;
    /// let window = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
    /// let mut decide = window.decider(1).unwrap();
    /// assert!(decide(0, 0).decision.is_allowed());
    /// assert!(window.decider(2).is_err()); // above the limit
    /// ```
    #[inline(always)]
    fn decider(&self, n: u32) -> Result<impl FnMut(u64, u64) -> Step + '_, AcquireError> {
        self.check_permits(n)?;
        Ok(move |state, now| self.decide(state, now, n))
    }

    /// One request for `n` permits on a state word and its time floor, reading the clock through
    /// `read_clock` (first read: the call's time; later reads: fresh ones, taken only where the
    /// engine must confirm a leap): `update_at` over the [`decider`](Algorithm::decider) when
    /// [`NEEDS_TIME_FLOOR`](Algorithm::NEEDS_TIME_FLOOR), else `update_timed` (the floor
    /// unused). An algorithm may serve its common case on a shorter path that decides exactly
    /// as that engine does.
    ///
    /// # Errors
    /// As [`check_permits`](Algorithm::check_permits).
    ///
    /// ```
    /// use floodgate::{Algorithm, Gcra, Rate};
    /// use std::sync::atomic::AtomicU64;
    /// let gcra = Gcra::new(Rate::per_second(1), 2)?;
    /// let (word, floor) = (AtomicU64::new(0), AtomicU64::new(0));
    /// let now = 1_000_000_000;
    /// assert!(gcra.acquire_word(&word, &floor, || now, 2)?.is_allowed());
    /// assert!(!gcra.acquire_word(&word, &floor, || now, 1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    fn acquire_word(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<Decision, AcquireError> {
        let decide = self.decider(n)?;
        Ok(if Self::NEEDS_TIME_FLOOR {
            update_at(word, floor, read_clock, decide)
        } else {
            update_timed(word, read_clock, decide)
        })
    }

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
#[inline]
pub(crate) fn update(word: &AtomicU64, mut decide: impl FnMut(u64) -> Step) -> Decision {
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

/// [`update`] for decisions that depend on a clock read: `read_clock` is called once up front
/// and again only when a step judged its state to be a leaping clock's
/// ([`Step::is_after_leap`]) on a read that was taken *before* that state was loaded. So a step
/// that discards or folds far-ahead state is always based on a clock read newer than the state:
/// a thread preempted between its clock read and its compare-exchange (for any length of time)
/// finds newer state on its retry, reads the clock again, and decides on the present, never
/// re-opening a window that newer threads have filled.
#[inline]
pub(crate) fn update_timed(
    word: &AtomicU64,
    mut read_clock: impl FnMut() -> u64,
    mut decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    let mut now = read_clock();
    // Acquire: as in `update`.
    let mut current = word.load(Ordering::Acquire);
    // Whether `now` was read after `current` was loaded.
    let mut fresh = false;
    loop {
        let step = decide(current, now);
        if step.leap && !fresh {
            now = read_clock();
            fresh = true;
            continue;
        }
        let Some(next) = step.next else {
            return step.decision;
        };
        if next == current {
            return step.decision;
        }
        // AcqRel / Acquire: as in `update`.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return step.decision,
            Err(actual) => {
                current = actual;
                fresh = false;
            }
        }
    }
}

/// A clock reader for [`update_timed`] / [`update_at`] whose first read is one already taken
/// (`first`), and every later read a fresh one from `clock`.
#[inline]
pub(crate) fn reads_after(first: u64, mut clock: impl FnMut() -> u64) -> impl FnMut() -> u64 {
    let mut first = Some(first);
    move || first.take().unwrap_or_else(&mut clock)
}

/// The units a time floor counts in: the lag horizon and the floor's grain, in the units of the
/// clock values it holds (nanoseconds for [`update_at`]; the smooth limiters count µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FloorUnits {
    /// A floor further ahead of a fresh clock read than this was published by a leaping clock.
    pub(crate) horizon: u64,
    /// A writer raises the floor only when its time passed the floor by at least this much.
    pub(crate) grain: u64,
}

/// The floor of the smooth limiters, in microseconds.
pub(crate) const MICROS_FLOOR: FloorUnits = FloorUnits {
    horizon: MAX_CLOCK_LAG_NANOS / 1_000,
    grain: 1,
};

/// The floor of the time-word buckets, in nanoseconds.
pub(crate) const NANOS_FLOOR: FloorUnits = FloorUnits {
    horizon: MAX_CLOCK_LAG_NANOS,
    grain: FLOOR_GRAIN_NANOS,
};

/// The time a decision runs at, given a clock read and the floor: `max(clock, floor)` while the
/// floor is within the lag horizon of the read, else `None` (the floor is a leaping clock's, or
/// the read is stale: read the clock again to tell which).
#[inline]
pub(crate) fn floored(clock_now: u64, floor_now: u64, units: FloorUnits) -> Option<u64> {
    (floor_now <= clock_now.saturating_add(units.horizon)).then(|| clock_now.max(floor_now))
}

/// The time a read that writes nothing (a peek, a setter's change instant) runs at: `clock_now`
/// raised to the floor while the floor is within the lag horizon, the clock alone beyond it (a
/// leaping clock's floor is never obeyed). The floor load is Relaxed: a peek takes it after its
/// Acquire load of the state word (which pairs with the writer's Release CAS); a setter only
/// needs some past clock read.
#[inline]
pub(crate) fn read_at_floor(clock_now: u64, floor: &AtomicU64) -> u64 {
    floored(clock_now, floor.load(Ordering::Relaxed), NANOS_FLOOR).unwrap_or(clock_now)
}

/// [`update_timed`] with a time floor: every decision runs at `max(clock, floor)`, and a writer
/// whose time passed the floor by the floor's grain ([`FLOOR_GRAIN_NANOS`]) raises it before it
/// publishes its word, so a reader that sees the word also sees a floor at most one grain behind
/// the writer's clock. A reader whose clock lags (another core's TSC) is then decided at the
/// writer's time less at most one grain: never moved back, never refused for more than one grain
/// of its lag. The floor is a clock value some thread read before this call observed its
/// effect, so it is never later than the real time of the call: nothing is admitted early.
///
/// **Bounded**: a floor more than [`MAX_CLOCK_LAG_NANOS`] ahead of a clock read is never obeyed.
/// The clock is read again (a stale read, preempted since, becomes fresh); a floor still that far
/// ahead of a fresh read was published by a leaping clock: the decision runs at the fresh read,
/// and a writing step puts the floor back to it. So one far-future read costs at most one
/// extra clock read per call until the next write, never a frozen limiter.
/// A denial writes nothing; raising the floor is the admission's second atomic operation only
/// once per grain of time.
#[inline]
pub(crate) fn update_at(
    word: &AtomicU64,
    floor: &AtomicU64,
    read_clock: impl FnMut() -> u64,
    decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    update_floored(word, floor, NANOS_FLOOR, read_clock, decide)
}

/// [`update_at`] with the floor counted in `units`.
#[inline]
pub(crate) fn update_floored(
    word: &AtomicU64,
    floor: &AtomicU64,
    units: FloorUnits,
    read_clock: impl FnMut() -> u64,
    mut decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    // A retry keeps its clock read: a bucket judges a leaped state from the word itself
    // (`Step::after_leap`), so a leaper's retry that lands after a repair is repaired again.
    floored_loop(word, floor, units, false, read_clock, |state, now, _| {
        decide(state, now)
    })
}

/// [`update_floored`] whose `decide` also gets the leap: how far a leaping clock's floor was
/// ahead of the fresh read `now` (0 when the floor is in range). A state published with that
/// floor was booked on the leaping clock, and may be moved back by it.
///
/// Such a state is judged a leap only through the floor, so every retry after a lost
/// compare-exchange decides on a new clock read. Kept, a leaper's read would decide its retry at
/// the leapt time again, after a repairer's word had landed; its word lands without raising the
/// floor (already at the leapt value, or seen so by its Relaxed load), and the repairer's
/// compare-exchange then lowers that floor: a leaped booking under an in-range floor, which no
/// reader moves back, freezes the limiter for the whole leap (found by the loom model
/// `loom-tests/tests/time_smooth_leap.rs`).
#[inline]
pub(crate) fn update_floored_leap(
    word: &AtomicU64,
    floor: &AtomicU64,
    units: FloorUnits,
    read_clock: impl FnMut() -> u64,
    decide: impl FnMut(u64, u64, u64) -> Step,
) -> Decision {
    floored_loop(word, floor, units, true, read_clock, decide)
}

/// The loop of [`update_floored`] and [`update_floored_leap`]; `read_on_retry`: a retry after a
/// lost compare-exchange reads the clock again (fresh) instead of keeping its read.
#[inline]
fn floored_loop(
    word: &AtomicU64,
    floor: &AtomicU64,
    units: FloorUnits,
    read_on_retry: bool,
    mut read_clock: impl FnMut() -> u64,
    mut decide: impl FnMut(u64, u64, u64) -> Step,
) -> Decision {
    let mut clock_now = read_clock();
    // Acquire: a state word comes with the floor its writer raised before publishing it.
    let mut current = word.load(Ordering::Acquire);
    let mut fresh = false;
    loop {
        // Relaxed: ordered after the Acquire load (or failed CAS) that produced `current`, which
        // synchronizes with the Release CAS that followed the writer's floor raise.
        let floor_now = floor.load(Ordering::Relaxed);
        let (now, floor_leaped) = match floored(clock_now, floor_now, units) {
            Some(now) => (now, false),
            None if !fresh => {
                clock_now = read_clock();
                fresh = true;
                continue;
            }
            None => (clock_now, true),
        };
        let leap = if floor_leaped { floor_now - now } else { 0 };
        let step = decide(current, now, leap);
        if step.leap && !fresh {
            clock_now = read_clock();
            fresh = true;
            continue;
        }
        let Some(next) = step.next else {
            if step.leap {
                // A refusal by a state beyond the horizon under an in-range floor (the smooth
                // limiters' long booking): legitimate, or `current` is older than the floor
                // just loaded: a repair replaced it and lowered the floor in between. No
                // compare-exchange checks a refusal, so check that the word is still the one
                // decided on. Acquire fence: pairs with the Release of that floor lowering
                // (below), which read `floor_now`; the word load then sees the repair.
                fence(Ordering::Acquire);
                // Acquire: as the first load.
                let again = word.load(Ordering::Acquire);
                if again != current {
                    current = again;
                    fresh = false;
                    continue;
                }
            }
            return step.decision;
        };
        if next == current {
            return step.decision;
        }
        if !floor_leaped && now >= floor_now.saturating_add(units.grain) {
            // Relaxed: published to readers by the Release CAS below.
            floor.fetch_max(now, Ordering::Relaxed);
        }
        // AcqRel / Acquire: as in `update`.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                if floor_leaped {
                    // A floor a leaping clock left more than the horizon ahead of this fresh read
                    // goes back to it, only once this thread's word (which put the leaped state
                    // back in range) has landed: until then every reader still sees the leaped
                    // floor and judges the leaped word as a leap too. A reader that sees the old
                    // floor with a repaired word only re-reads its clock (the repaired word is in
                    // range); if another thread moved the floor meanwhile, its value stands.
                    // Release: pairs with the Acquire fence of a refusal that loaded the leaped
                    // word before this repair and this floor after it (above).
                    let _ = floor.compare_exchange(
                        floor_now,
                        now,
                        Ordering::Release,
                        Ordering::Relaxed,
                    );
                }
                return step.decision;
            }
            Err(actual) => {
                current = actual;
                // A read taken after the failed compare-exchange loaded `actual` is fresh.
                fresh = read_on_retry;
                if read_on_retry {
                    clock_now = read_clock();
                }
            }
        }
    }
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
        // Acquire: pairs with the Release CAS, so the floor read below is the writer's or later.
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
}

/// What a recorded decision ([`AtomicLimiter::take_recorded`]) saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    /// The word published (the loaded word when nothing was written).
    pub(crate) word: u64,
    /// The time the decision ran at (the clock read raised to the time floor).
    pub(crate) now: u64,
}

impl<A: Algorithm, C: Clock> Limiter for AtomicLimiter<A, C> {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        let words = &*self.words;
        self.algorithm
            .acquire_word(&words.state, &words.floor, || self.now(), n)
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        let now = if A::NEEDS_TIME_FLOOR {
            // A past clock read, as in `peek`: the change takes effect no earlier than any
            // decision already published.
            read_at_floor(self.now(), &self.words.floor)
        } else {
            self.now()
        };
        self.algorithm.set_limit(limit, now)
    }

    fn limit(&self) -> u64 {
        self.algorithm.limit()
    }
}

#[cfg(test)]
mod internal_examples {
    //! The examples of crate-internal items (doc tests run only on public ones).

    #[test]
    fn check_wait_ends_example() {
        use crate::{AcquireError, ManualClock, limiter::check_wait_ends};
        use std::time::Duration;
        let clock = ManualClock::starting_at(u64::MAX - 10);
        assert!(check_wait_ends(&clock, Duration::from_nanos(10)).is_ok());
        assert!(matches!(
            check_wait_ends(&clock, Duration::from_nanos(11)),
            Err(AcquireError::PastEndOfTime {
                now_nanos: 18_446_744_073_709_551_605,
                ..
            })
        ));
    }

    #[test]
    fn update_example() {
        use crate::Decision;
        use crate::limiter::{Step, update};
        use std::sync::atomic::AtomicU64;
        let word = AtomicU64::new(1);
        let d = update(&word, |s| Step::allow(s + 1, Decision::allow(9, 9 - s, 0)));
        assert_eq!(d.remaining(), 8);
        assert_eq!(word.into_inner(), 2);
    }

    #[test]
    fn update_timed_example() {
        use crate::Decision;
        use crate::limiter::{Step, update_timed};
        use std::sync::atomic::AtomicU64;
        let word = AtomicU64::new(1_000);
        let mut reads = vec![5, 2_000].into_iter(); // a stale read, then a fresh one
        let d = update_timed(
            &word,
            || reads.next().unwrap(),
            |state, now| {
                let step = Step::allow(now, Decision::allow(1, 0, 0));
                if state > now + 100 {
                    step.after_leap()
                } else {
                    step
                }
            },
        );
        assert!(d.is_allowed());
        assert_eq!(word.into_inner(), 2_000); // decided on the fresh read
    }

    #[test]
    fn update_at_example() {
        use crate::Decision;
        use crate::limiter::{Step, update_at};
        use std::sync::atomic::AtomicU64;
        let (word, floor) = (AtomicU64::new(0), AtomicU64::new(0));
        update_at(
            &word,
            &floor,
            || 100_000,
            |_, now| Step::allow(now, Decision::allow(1, 0, 0)),
        );
        // A lagging clock read (90 µs) decides at the floor (100 µs).
        update_at(
            &word,
            &floor,
            || 90_000,
            |_, now| {
                assert_eq!(now, 100_000);
                Step::deny(Decision::deny(1, 0, 1, 0))
            },
        );
    }
}
