//! Waiting for permits on tokio without blocking a runtime thread (feature `tokio`).
//!
//! [`AsyncLimiter`] gives every [`Limiter`] `acquire_async(n)` and
//! `try_acquire_for_async(n, timeout)`; [`Keyed`](crate::Keyed) gets the same two per key
//! (`acquire_async(&key, n)`, `try_acquire_for_async(&key, n, timeout)`). [`TokioClock`] reads
//! tokio's clock, so a limiter can run on tokio's paused test time.
//!
//! # How they wait
//! Each attempt is one non-blocking check (`try_acquire`). A denial announces its
//! `retry_after`; the future sleeps that long with [`tokio::time::sleep`] (never less: tokio's
//! timer rounds deadlines *up* to its millisecond tick) and checks again. No spinning, no blocking
//! sleep, no thread parked. Waiters are not queued: after a wait each one races the others for the
//! permits, as the blocking [`Limiter::acquire`] does, so under contention a waiter may be denied
//! again and wait again, and a request for many permits can be starved by a stream of single
//! ones. [`Fair`] queues waiters in FIFO order instead (only the head of the line retries), so
//! every request is served in turn.
//!
//! # Cancellation
//! Dropping the future at any point consumes nothing it did not grant. Permits are taken only by
//! the check that *grants* them, and that check runs inside the same `poll` that then returns
//! `Ready` (there is no `.await` between a grant and the return); every earlier check was a
//! denial, and a denial consumes nothing. So a dropped future has taken either nothing, or (only
//! if it was dropped after completing) exactly the permits it reported. `tokio::time::timeout`
//! and `select!` around these calls are safe.
//!
//! ```
//! use floodgate::async_acquire::AsyncLimiter;
//! use floodgate::{AtomicLimiter, Gcra, Rate, TokioClock};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), floodgate::AcquireError> {
//! // On tokio's clock: under `start_paused` time jumps straight to each wake-up.
//! let limiter = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 1).unwrap(), TokioClock::new());
//! assert_eq!(limiter.acquire_async(1).await?, Duration::ZERO);
//! assert_eq!(limiter.acquire_async(1).await?, Duration::from_millis(100)); // waited, not blocked
//! // Gives up at once (consuming nothing) when the wait would not fit in the timeout.
//! let d = limiter.try_acquire_for_async(1, Duration::from_millis(50)).await?;
//! assert!(!d.is_allowed());
//! # Ok(()) }
//! ```

mod fair;
mod keyed;
mod tokio_clock;

use std::future::Future;
use std::time::Duration;

pub use fair::Fair;
pub use tokio_clock::TokioClock;

use crate::clock::Clock;
use crate::decision::{AcquireError, Decision};
use crate::limiter::Limiter;

/// Async waiting for every [`Limiter`]: implemented for all of them.
///
/// The returned futures are `Send` and borrow the limiter (share it with `Arc` across tasks).
/// See the [module docs](self) for how they wait and what a dropped future consumed (nothing).
///
/// ```
/// use floodgate::async_acquire::AsyncLimiter;
/// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Arc::new(AtomicLimiter::new(FixedWindow::new(100, Duration::from_secs(1))?));
/// let task = {
///     let limiter = Arc::clone(&limiter);
///     tokio::spawn(async move { limiter.acquire_async(1).await })
/// };
/// assert_eq!(task.await??, Duration::ZERO);
/// assert!(limiter.acquire_async(101).await.is_err()); // can never be granted: no wait
/// # Ok(()) }
/// ```
pub trait AsyncLimiter: Limiter {
    /// Takes `n` permits, waiting (asynchronously) until they are granted. Returns how long it
    /// waited, measured on the limiter's clock (zero when granted at once).
    ///
    /// # Errors
    /// As [`Limiter::try_acquire`]: a request that could never be granted returns at once.
    ///
    /// ```
    /// use floodgate::async_acquire::AsyncLimiter;
    /// use floodgate::{AtomicLimiter, Gcra, Rate, TokioClock};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 1)?, TokioClock::new());
    /// assert_eq!(gcra.acquire_async(1).await?, Duration::ZERO);
    /// // Spent: it waits (on tokio's paused time) one interval for the next permit.
    /// assert_eq!(gcra.acquire_async(1).await?, Duration::from_millis(100));
    /// assert!(gcra.acquire_async(2).await.is_err()); // above the capacity: at once
    /// # Ok(()) }
    /// ```
    fn acquire_async(&self, n: u32) -> impl Future<Output = Result<Duration, AcquireError>> + Send;

    /// Takes `n` permits if they can be had within `timeout`: waits only while the announced wait
    /// fits in what is left of the timeout (measured on the limiter's clock), otherwise returns
    /// the denial at once, consuming nothing.
    ///
    /// # Errors
    /// As [`Limiter::try_acquire`].
    ///
    /// ```
    /// use floodgate::async_acquire::AsyncLimiter;
    /// use floodgate::{AtomicLimiter, Gcra, Rate, TokioClock};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 1)?, TokioClock::new());
    /// let ms = Duration::from_millis;
    /// assert!(gcra.try_acquire_for_async(1, Duration::ZERO).await?.is_allowed());
    /// // The next permit is 100 ms away: a shorter timeout is denied at once (consuming nothing),
    /// // a longer one waits for it.
    /// assert!(!gcra.try_acquire_for_async(1, ms(50)).await?.is_allowed());
    /// assert!(gcra.try_acquire_for_async(1, ms(200)).await?.is_allowed());
    /// # Ok(()) }
    /// ```
    fn try_acquire_for_async(
        &self,
        n: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<Decision, AcquireError>> + Send;
}

impl<L: Limiter + ?Sized> AsyncLimiter for L {
    async fn acquire_async(&self, n: u32) -> Result<Duration, AcquireError> {
        let first = self.try_acquire(n)?;
        let granted = wait_for_grant(self.clock(), None, first, || self.try_acquire(n)).await?;
        Ok(granted.waited)
    }

    async fn try_acquire_for_async(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        let first = self.try_acquire(n)?;
        let granted =
            wait_for_grant(self.clock(), Some(timeout), first, || self.try_acquire(n)).await?;
        Ok(granted.decision)
    }
}

/// The end of a wait: the last decision (allowed, or the denial that did not fit the budget) and
/// how long was waited on the limiter's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waited {
    pub(crate) decision: Decision,
    pub(crate) waited: Duration,
}

/// Given the decision of a first attempt, sleeps out each denial's `retry_after` on tokio's timer
/// and attempts again, until a grant, or (with a `budget`) until the announced wait no longer fits
/// in what is left of the budget. Elapsed time is read from `clock`, the limiter's own clock, only
/// on this slow path. Cancellation-safe as long as `attempt` is: nothing is held across a sleep.
pub(crate) async fn wait_for_grant(
    clock: &dyn Clock,
    budget: Option<Duration>,
    first: Decision,
    mut attempt: impl FnMut() -> Result<Decision, AcquireError>,
) -> Result<Waited, AcquireError> {
    let mut decision = first;
    // Granted at once, or a first wait that does not fit the budget: nothing waited, and no
    // clock read (the common fail-fast call pays none).
    if decision.is_allowed() || budget.is_some_and(|budget| decision.retry_after() > budget) {
        return Ok(Waited {
            decision,
            waited: Duration::ZERO,
        });
    }
    let start = clock.now_nanos();
    loop {
        let waited = Duration::from_nanos(clock.now_nanos().saturating_sub(start));
        if decision.is_allowed() {
            return Ok(Waited { decision, waited });
        }
        // A denial's retry_after is at least 1 ns (Decision::deny), and tokio rounds a deadline up
        // to its next millisecond tick: every sleep lets time pass, so this loop cannot spin.
        let wait = decision.retry_after();
        if let Some(budget) = budget
            && wait > budget.saturating_sub(waited)
        {
            return Ok(Waited { decision, waited });
        }
        crate::limiter::check_wait_ends(clock, wait)?;
        tokio::time::sleep(wait).await;
        decision = attempt()?;
    }
}
