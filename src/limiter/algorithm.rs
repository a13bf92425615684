//! [`Algorithm`]: a packed-word rate-limiting algorithm as a pure decision on one `u64`, and
//! [`Step`], what one decision produces.

use crate::decision::{AcquireError, ConfigError, Decision};
use crate::sync::AtomicU64;

use super::engine::{update_at, update_timed};

/// The outcome of one pure decision: the [`Decision`], and the state word to publish
/// (`None` when nothing changes, which is always the case for an ordinary denial).
///
/// ```
/// use floodgate::limiter::{Algorithm, Step};
/// use floodgate::{Decision, FixedWindow};
/// use std::time::Duration;
/// let window = FixedWindow::new(1, Duration::from_secs(1))?;
/// let first = window.decide(0, 1_000, 1); // fresh state word 0, at t = 1 µs
/// assert!(first.decision.is_allowed());
/// let word = first.next.expect("an admission writes the word");
/// let second = window.decide(word, 2_000, 1);
/// assert!(!second.decision.is_allowed());
/// assert_eq!(second.next, None); // a denial writes nothing
/// assert_eq!(Step::deny(second.decision).next, None);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
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

    /// [`acquire_word`](Algorithm::acquire_word) answering only whether the request was
    /// admitted: the same decision, the same writes, for callers that need nothing else
    /// ([`Limiter::admit`](crate::Limiter::admit)). An algorithm with a short path serves it
    /// without building the [`Decision`].
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
    /// assert!(gcra.admit_word(&word, &floor, || now, 2)?);
    /// assert!(!gcra.admit_word(&word, &floor, || now, 1)?);
    /// assert!(gcra.admit_word(&word, &floor, || now, 3).is_err()); // above the capacity
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    fn admit_word(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<bool, AcquireError> {
        self.acquire_word(word, floor, read_clock, n)
            .map(|decision| decision.is_allowed())
    }

    /// Whether `state` at `now` would decide every later request exactly as the fresh state `0`
    /// would, so it can be forgotten (evicted) without changing any decision.
    fn is_idle(&self, state: u64, now: u64) -> bool;

    /// Changes the limit live at `now` (nanoseconds on the clock's timeline: the instant the
    /// change takes effect, for algorithms whose state is a time). The same quantity that
    /// [`limit`](Algorithm::limit) and every [`Decision`] report; see [`Limiter::set_limit`](crate::Limiter::set_limit).
    ///
    /// # Errors
    /// [`ConfigError`] for a limit the algorithm cannot hold.
    fn set_limit(&self, limit: u32, now: u64) -> Result<(), ConfigError>;

    /// The limit in force: the `limit` of every [`Decision`].
    fn limit(&self) -> u64;
}
