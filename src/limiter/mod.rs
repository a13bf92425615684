//! What a limiter is and the machinery the packed-word limiters share:
//! - this file: the [`Limiter`] trait (what every limiter does, and its memory-ordering contract);
//! - [`Algorithm`] and [`Step`] (`algorithm.rs`): a packed-word algorithm as a pure decision;
//! - the engine (`engine.rs`): the one CAS loop (`update`) and its time-floored forms, which
//!   every packed-word limiter runs;
//! - [`AtomicLimiter`] (`atomic.rs`): one algorithm over one cache-padded word and one clock.

mod algorithm;
mod atomic;
mod engine;

pub use algorithm::{Algorithm, Step};
pub use atomic::AtomicLimiter;
pub(crate) use engine::*;

use std::time::Duration;

use crate::clock::Clock;
use crate::decision::{AcquireError, ConfigError, Decision};

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
    ///
    /// ```
    /// use floodgate::{AcquireError, AtomicLimiter, FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    /// let window = FixedWindow::new(3, Duration::from_secs(1))?;
    /// let limiter = AtomicLimiter::with_clock(window, ManualClock::new());
    /// let d = limiter.try_acquire(2)?;
    /// assert!(d.is_allowed());
    /// assert_eq!(d.remaining(), 1);
    /// assert!(!limiter.try_acquire(2)?.is_allowed()); // 2 > 1 left: denied, nothing taken
    /// assert!(limiter.try_acquire(1)?.is_allowed());
    /// assert!(matches!(limiter.try_acquire(0), Err(AcquireError::ZeroPermits)));
    /// assert!(limiter.try_acquire(4).is_err()); // above the limit: never admitted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError>;

    /// [`try_acquire`](Limiter::try_acquire) answering only whether the permits were taken:
    /// a decision `try_acquire` could have made, with the same effect, for a caller that needs no
    /// headers (governor's `check`, a bool). Called alone it is the very decision `try_acquire`
    /// would make; racing other calls, it is one `try_acquire` could have made in that race (a
    /// refusal decided on a state that was current when read). On [`AtomicLimiter`] it skips
    /// the [`Decision`]: the time-word buckets ([`Gcra`](crate::Gcra),
    /// [`TokenBucket`](crate::TokenBucket), [`LeakyBucket`](crate::LeakyBucket)),
    /// [`FixedWindow`](crate::FixedWindow) and the sliding window answer from a short path that
    /// computes none of its terms, as does [`Sharded`](crate::Sharded).
    ///
    /// # Errors
    /// As [`try_acquire`](Limiter::try_acquire).
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Gcra, Limiter, ManualClock, Rate};
    /// let limiter = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(1), 2)?, ManualClock::new());
    /// assert_eq!(limiter.admit(2), Ok(true));
    /// assert_eq!(limiter.admit(1), Ok(false)); // a denial takes nothing
    /// assert!(limiter.admit(0).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn admit(&self, n: u32) -> Result<bool, AcquireError> {
        self.try_acquire(n).map(|decision| decision.is_allowed())
    }

    /// One permit, now, without a `Result`: [`try_acquire(1)`](Limiter::try_acquire), the
    /// common case (governor's `check`). One permit is a valid request for every limit
    /// floodgate's own limiters accept (a configuration that could never grant one, such as a
    /// smooth rate whose single permit would book more than a year, is refused when it is set);
    /// a limiter whose `try_acquire(1)` errs all the same is reported as a denial whose
    /// `retry_after` and `reset_after` are `u64::MAX` nanoseconds (about 584 years: never; a
    /// [`Decision`] holds whole nanoseconds, so not `Duration::MAX`): `try_acquire` names the
    /// reason.
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
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Clock, FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let limiter = AtomicLimiter::with_clock(FixedWindow::new(1, Duration::from_secs(1))?, clock.clone());
    /// clock.advance(Duration::from_millis(5));
    /// assert_eq!(limiter.clock().now_nanos(), clock.now_nanos());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn clock(&self) -> &dyn Clock;

    /// Changes the limit live, from any thread: afterwards [`limit`](Limiter::limit) and the
    /// `limit` of every [`Decision`] report `limit`. One meaning for every limiter: the most
    /// permits one instant can grant, i.e. the window limit of a window, the capacity (burst)
    /// of a token bucket, leaky bucket or GCRA (their rate is changed with `set_rate`), and
    /// for the smooth limiters, whose `limit` is their rate in whole permits per second (rounded
    /// half up, at least 1; `set_limit` keeps a rate that already reports `limit`). Permits
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
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
    /// use std::time::Duration;
    /// let limiter = AtomicLimiter::new(FixedWindow::new(10, Duration::from_secs(1))?);
    /// assert_eq!(limiter.limit(), 10);
    /// limiter.set_limit(4)?;
    /// assert_eq!(limiter.limit(), 4);
    /// assert_eq!(limiter.try_acquire(1)?.limit(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn limit(&self) -> u64;

    /// Takes `n` permits, sleeping on the clock until they are granted. Returns how long it
    /// waited: the time that passed on the limiter's clock from its first denial to the grant (at
    /// least the sleeps it took; a sleep that ends late counts in full), zero when granted at once.
    /// The smooth limiters ([`SmoothBursty`](crate::SmoothBursty),
    /// [`SmoothWarmingUp`](crate::SmoothWarmingUp)) answer as Guava's `acquire` does: the sleep
    /// they asked for, which a sleep that ends late exceeds.
    ///
    /// # Errors
    /// As [`try_acquire`](Limiter::try_acquire): a request that could never be granted returns
    /// at once instead of waiting forever; [`AcquireError::PastEndOfTime`] when a wait would end
    /// past the end of the clock's `u64` timeline.
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Clock, FixedWindow, Limiter, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let window = AtomicLimiter::with_clock(FixedWindow::new(1, Duration::from_secs(1))?, clock.clone());
    /// assert_eq!(window.acquire(1)?, Duration::ZERO);
    /// assert_eq!(window.acquire(1)?, Duration::from_secs(1)); // until the next window
    /// assert_eq!(clock.now_nanos(), 1_000_000_000);
    /// assert!(window.acquire(2).is_err()); // above the limit: never, so no wait
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn acquire(&self, n: u32) -> Result<Duration, AcquireError> {
        let mut waited = Waited::default();
        loop {
            let decision = self.try_acquire(n)?;
            if decision.is_allowed() {
                return Ok(waited.so_far(self.clock()));
            }
            waited.sleep(self.clock(), decision.retry_after())?;
        }
    }

    /// Takes `n` permits if they can be had within `timeout`: sleeps only while the announced wait
    /// fits in what is left of the timeout, otherwise returns the denial at once, consuming nothing.
    /// What is left is measured on the limiter's clock (at least the sleeps taken so far), so a
    /// sleep that ends late, or a retry lost to other callers, never stretches the call past
    /// `timeout` by another sleep.
    ///
    /// # Errors
    /// As [`acquire`](Limiter::acquire).
    ///
    /// ```
    /// use floodgate::{AtomicLimiter, Clock, Gcra, Limiter, ManualClock, Rate};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 1)?, clock.clone());
    /// assert!(gcra.try_acquire_for(1, Duration::ZERO)?.is_allowed());
    /// // The next permit is 100 ms away: more than 50 ms, so no wait and nothing taken.
    /// let refused = gcra.try_acquire_for(1, Duration::from_millis(50))?;
    /// assert_eq!(refused.retry_after(), Duration::from_millis(100));
    /// assert_eq!(clock.now_nanos(), 0);
    /// assert!(gcra.try_acquire_for(1, Duration::MAX)?.is_allowed()); // slept 100 ms
    /// assert_eq!(clock.now_nanos(), 100_000_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_acquire_for(&self, n: u32, timeout: Duration) -> Result<Decision, AcquireError> {
        let mut waited = Waited::default();
        loop {
            let decision = self.try_acquire(n)?;
            let wait = decision.retry_after();
            if decision.is_allowed() {
                return Ok(decision);
            }
            // Before any sleep `so_far` is zero without a clock read: a wait longer than the
            // timeout is refused at once (the common fail-fast call pays no extra read).
            if wait > timeout.saturating_sub(waited.so_far(self.clock())) {
                return Ok(decision);
            }
            waited.sleep(self.clock(), wait)?;
        }
    }
}

/// How long a blocking call has waited: the time passed on the limiter's clock since its first
/// denial, and never less than the sleeps it took (a clock read that lags, as a coarse clock's
/// can, does not shorten the wait below what was slept).
#[derive(Default)]
struct Waited {
    /// The clock's reading at the first denial that slept; `None` before it (no clock read on a
    /// grant at once, nor on a refusal before any sleep).
    since: Option<u64>,
    slept: Duration,
}

impl Waited {
    /// Sleeps `wait` on `clock` (noting the clock's reading first if this is the first wait),
    /// unless the wait could never end ([`check_wait_ends`]).
    fn sleep(&mut self, clock: &dyn Clock, wait: Duration) -> Result<(), AcquireError> {
        if self.since.is_none() {
            self.since = Some(clock.now_nanos());
        }
        check_wait_ends(clock, wait)?;
        clock.sleep(wait);
        self.slept = self.slept.saturating_add(wait);
        Ok(())
    }

    fn so_far(&self, clock: &dyn Clock) -> Duration {
        match self.since {
            None => Duration::ZERO,
            Some(since) => self.slept.max(Duration::from_nanos(
                clock.now_nanos().saturating_sub(since),
            )),
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
