//! [`Fair`]: async waiting in FIFO order for any [`Limiter`], so a request for many permits is
//! never starved by a stream of single ones.

use std::fmt;
use std::time::Duration;

use super::wait_for_grant;
use crate::concurrency::InFlight;
use crate::decision::AcquireError;
use crate::limiter::Limiter;

/// A [`Limiter`] whose async waiters queue in FIFO order: only the waiter at the head of the
/// line retries (sleeping out each denial's `retry_after` on tokio's timer); the others wait,
/// without timers or retries, until the head has its permits. Feature `tokio`.
///
/// **Why.** [`AsyncLimiter::acquire_async`](super::AsyncLimiter::acquire_async) does not queue:
/// after each sleep the waiter races every other caller. A request for 10 permits from a token
/// bucket then needs 10 tokens at once, while each request for 1 takes a token as soon as it
/// refills, so under a steady stream of single requests the big one can wait forever. Behind
/// `Fair`, single requests that arrive while the big one waits queue behind it: the bucket fills
/// up to 10, the big request takes them, and the line moves on.
///
/// **How.** The line is an [`InFlight`] with a limit of 1 (its fair FIFO queue, with hand-off
/// to the next waiter): holding its permit is being the head. A call that finds nobody waiting
/// tries the limiter directly (one load of the line's word more than the limiter alone) and
/// returns at once if granted; otherwise it joins the line.
///
/// **What it covers.** Only calls made through this `Fair` queue. Calls made on the limiter
/// itself (`fair.limiter().try_acquire(..)`) still race the head. A request for zero permits
/// fails at once; one above the capacity fails when it reaches the head of the line (the
/// capacity in force then decides), at once if nobody waits. Dropping the future (a timeout, a
/// `select!`) gives up its place, and the head's place passes to the next waiter; a dropped
/// future has taken nothing. Wrap it in `tokio::time::timeout` to bound the wait. One line per
/// `Fair`: for a [`Keyed`](crate::Keyed) limiter the line would be shared by all keys, so `Fair`
/// takes single limiters only.
///
/// ```
/// use floodgate::async_acquire::Fair;
/// use floodgate::{AtomicLimiter, Limiter, Rate, TokenBucket, TokioClock};
/// use std::sync::Arc;
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), floodgate::AcquireError> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap(); // one token per 100 ms
/// let fair = Arc::new(Fair::new(AtomicLimiter::with_clock(bucket, TokioClock::starting_at(0))));
/// fair.acquire_async(10).await?; // empty now
/// let big = tokio::spawn({
///     let fair = Arc::clone(&fair);
///     async move { fair.acquire_async(10).await }
/// });
/// tokio::task::yield_now().await; // the big request is at the head of the line
/// let small = tokio::spawn({
///     let fair = Arc::clone(&fair);
///     async move { fair.acquire_async(1).await }
/// });
/// // The big request is served first, when the bucket is full again; then the small one.
/// assert_eq!(big.await.unwrap()?, Duration::from_secs(1));
/// assert_eq!(small.await.unwrap()?, Duration::from_millis(1_100));
/// # Ok(()) }
/// ```
pub struct Fair<L> {
    limiter: L,
    /// The line: holding its one permit is being the head, the only waiter that retries.
    line: InFlight,
}

impl<L: fmt::Debug> fmt::Debug for Fair<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fair")
            .field("limiter", &self.limiter)
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl<L: Limiter> Fair<L> {
    /// FIFO async waiting for `limiter`.
    ///
    /// ```
    /// use floodgate::async_acquire::Fair;
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
    /// let fair = Fair::new(AtomicLimiter::new(FixedWindow::new(100, std::time::Duration::from_secs(1))?));
    /// assert_eq!(fair.limiter().limit(), 100);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn new(limiter: L) -> Self {
        Fair {
            limiter,
            line: InFlight::new(1).expect("a limit of 1 is valid"),
        }
    }

    /// Takes `n` permits, waiting (asynchronously) in line until they are granted. Returns how
    /// long it waited, on the limiter's clock (zero when granted at once).
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`] at once for `n = 0`; otherwise as [`Limiter::try_acquire`],
    /// once the call is at the head of the line (at once if nobody waits): a request that could
    /// never be granted never waits for permits.
    ///
    /// ```
    /// use floodgate::async_acquire::Fair;
    /// use floodgate::{AtomicLimiter, Gcra, Rate, TokioClock};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), floodgate::AcquireError> {
    /// let gcra = Gcra::new(Rate::per_second(10), 1).unwrap();
    /// let fair = Fair::new(AtomicLimiter::with_clock(gcra, TokioClock::starting_at(0)));
    /// assert_eq!(fair.acquire_async(1).await?, Duration::ZERO);
    /// assert_eq!(fair.acquire_async(1).await?, Duration::from_millis(100));
    /// assert!(fair.acquire_async(2).await.is_err()); // above the burst: never
    /// # Ok(()) }
    /// ```
    pub async fn acquire_async(&self, n: u32) -> Result<Duration, AcquireError> {
        if n == 0 {
            // Invalid for every limiter: no need to wait in line to be told.
            return Err(AcquireError::ZeroPermits);
        }
        let clock = self.limiter.clock();
        let start = clock.now_nanos();
        // Nobody in line (or at its head): try at once.
        if self.line.available() > 0 && self.limiter.try_acquire(n)?.is_allowed() {
            return Ok(Duration::ZERO);
        }
        // One permit never exceeds a limit of 1, and the line's limit never changes.
        let head = self
            .line
            .acquire_async(1)
            .await
            .expect("the line's one permit is always grantable");
        let first = self.limiter.try_acquire(n)?;
        // Only the head sleeps and retries; the grant and the return happen in one poll, so a
        // future dropped while it waits has taken nothing.
        wait_for_grant(clock, None, first, || self.limiter.try_acquire(n)).await?;
        drop(head); // the next waiter is the head now
        Ok(Duration::from_nanos(
            clock.now_nanos().saturating_sub(start),
        ))
    }
}

impl<L> Fair<L> {
    /// Callers waiting in line now, the head included.
    ///
    /// ```
    /// use floodgate::async_acquire::Fair;
    /// use floodgate::{AtomicLimiter, FixedWindow};
    /// let fair = Fair::new(AtomicLimiter::new(FixedWindow::new(5, std::time::Duration::from_secs(1))?));
    /// assert_eq!(fair.waiting(), 0);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn waiting(&self) -> usize {
        self.line.in_flight() as usize + self.line.waiters()
    }

    /// The limiter (calls made on it directly do not queue).
    ///
    /// ```
    /// use floodgate::async_acquire::Fair;
    /// use floodgate::{AtomicLimiter, FixedWindow, Limiter};
    /// let fair = Fair::new(AtomicLimiter::new(FixedWindow::new(5, std::time::Duration::from_secs(1))?));
    /// fair.limiter().set_limit(10)?;
    /// assert_eq!(fair.limiter().limit(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}
