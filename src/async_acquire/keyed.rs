//! Async waiting per key on [`Keyed`].

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::wait_for_grant;
use crate::clock::Clock;
use crate::decision::{AcquireError, Decision};
use crate::keyed::{Key, Keyed};
use crate::limiter::Algorithm;

impl<K, A, C> Keyed<K, A, C>
where
    K: Key,
    A: Algorithm,
    C: Clock,
{
    /// Takes `n` permits from `key`'s limiter, waiting asynchronously (tokio's timer, never a
    /// blocked thread) until they are granted; returns how long it waited on the limiter's clock.
    /// A dropped future has consumed nothing (see [`async_acquire`](crate::async_acquire)).
    /// Feature `tokio`.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire): a request that could never be granted returns at once.
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate, TokioClock};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed: Keyed<String, _, _> = Keyed::builder(Gcra::new(Rate::per_second(2), 1)?)
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// assert_eq!(keyed.acquire_async("alice", 1).await?, Duration::ZERO);
    /// assert_eq!(keyed.acquire_async("alice", 1).await?, Duration::from_millis(500));
    /// assert_eq!(keyed.acquire_async("bob", 1).await?, Duration::ZERO);
    /// # Ok(()) }
    /// ```
    pub async fn acquire_async<Q>(&self, key: &Q, n: u32) -> Result<Duration, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        let first = self.try_acquire(key, n)?;
        let granted =
            wait_for_grant(self.clock(), None, first, || self.try_acquire(key, n)).await?;
        Ok(granted.waited)
    }

    /// Takes `n` permits from `key`'s limiter if they can be had within `timeout`: waits only
    /// while the announced wait fits in what is left of the timeout, otherwise returns the denial
    /// at once, consuming nothing. Feature `tokio`.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, TokioClock};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed: Keyed<u64, _, _> = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(TokioClock::starting_at(0))
    ///     .build()?;
    /// assert!(keyed.try_acquire_for_async(&7, 1, Duration::ZERO).await?.is_allowed());
    /// // The next window opens in 1 s: more than 500 ms, so no wait at all.
    /// assert!(!keyed.try_acquire_for_async(&7, 1, Duration::from_millis(500)).await?.is_allowed());
    /// assert!(keyed.try_acquire_for_async(&7, 1, Duration::from_secs(1)).await?.is_allowed());
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for_async<Q>(
        &self,
        key: &Q,
        n: u32,
        timeout: Duration,
    ) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        let first = self.try_acquire(key, n)?;
        let granted = wait_for_grant(self.clock(), Some(timeout), first, || {
            self.try_acquire(key, n)
        })
        .await?;
        Ok(granted.decision)
    }
}
