//! [`PenalizedKeyed`]: a keyed limiter with a penalty box, a thin public type over
//! [`KeyedFacade`] with a jailed slot (the algorithm's word and the jail word) per key.

use std::borrow::Borrow;
use std::hash::Hash;

use super::cap::KeyedStats;
use super::facade::KeyedFacade;
use super::key::Key;
use super::penalty::{JailedSlot, PenaltyBox};
use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::limiter::Algorithm;

/// A [`Keyed`](crate::Keyed) limiter with a [`PenaltyBox`]: a key denied `strikes` times within
/// the span is refused everything for the block time. Built with
/// [`KeyedBuilder::build_with_penalty`](crate::keyed::KeyedBuilder::build_with_penalty). Each key holds
/// two words (the algorithm's and the jail word); a blocked key is evicted last.
///
/// ```
/// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
///     .clock(clock.clone())
///     .build_with_penalty::<u32>(PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60))?)?;
/// assert!(per_ip.try_acquire(&7, 1)?.is_allowed());
/// assert!(!per_ip.try_acquire(&7, 1)?.is_allowed()); // strike 1
/// let blocked = per_ip.try_acquire(&7, 1)?; // strike 2: blocked for a minute
/// assert_eq!(blocked.retry_after(), Duration::from_secs(60));
/// clock.advance(Duration::from_secs(30)); // the window has long reset, the block has not
/// assert!(!per_ip.try_acquire(&7, 1)?.is_allowed());
/// assert!(per_ip.is_blocked(&7));
/// clock.advance(Duration::from_secs(30));
/// assert!(per_ip.try_acquire(&7, 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PenalizedKeyed<K: Key, A, C = QuantaClock> {
    pub(super) facade: KeyedFacade<K, JailedSlot, A, PenaltyBox, C>,
}

impl<K, A, C> PenalizedKeyed<K, A, C>
where
    K: Key,
    A: Algorithm,
    C: Clock,
{
    /// One permit for `key`, now, without a `Result`: [`try_acquire(key, 1)`](Self::try_acquire)
    /// (governor's `check_key`). One permit is a valid request for every limit.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .build_with_penalty::<u64>(penalty)?;
    /// assert!(keyed.check(&7).is_allowed());
    /// assert!(!keyed.check(&7).is_allowed());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.facade.check(key)
    }

    /// As [`Keyed::try_acquire`](crate::Keyed::try_acquire), refusing a blocked key outright (`retry_after`
    /// = what is left of its block), and counting each denial as a strike.
    ///
    /// # Errors
    /// [`AcquireError`] when `n` is zero or above the capacity (not a strike).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new()).build_with_penalty::<u8>(penalty)?;
    /// assert!(keyed.try_acquire(&1, 1)?.is_allowed());
    /// assert_eq!(keyed.try_acquire(&1, 1)?.retry_after(), Duration::from_secs(60)); // one strike: blocked
    /// assert!(keyed.try_acquire(&1, 0).is_err()); // zero permits: an error, not a strike
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, n: u32) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.facade.try_acquire(key, n)
    }

    /// [`try_acquire`](Self::try_acquire) answering only whether the permits were taken: the
    /// same decision and the same writes (a blocked key is refused, a denial is a strike and may
    /// start a block), without the [`Decision`]'s terms
    /// ([`Keyed::admit`](crate::Keyed::admit) with the penalty box).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire) (an invalid `n` is not a strike).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let penalty = PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(clock.clone()).build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(keyed.admit(&1, 1), Ok(true));
    /// assert_eq!(keyed.admit(&1, 1), Ok(false)); // strike 1
    /// assert_eq!(keyed.admit(&1, 1), Ok(false)); // strike 2: blocked for a minute
    /// assert!(keyed.admit(&1, 2).is_err()); // above the capacity: an error, not a strike
    /// clock.advance(Duration::from_secs(30)); // the window has reset, the block has not
    /// assert_eq!(keyed.admit(&1, 1), Ok(false));
    /// assert!(keyed.is_blocked(&1));
    /// clock.advance(Duration::from_secs(30));
    /// assert_eq!(keyed.admit(&1, 1), Ok(true));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn admit<Q>(&self, key: &Q, n: u32) -> Result<bool, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.facade.admit(key, n)
    }

    /// Whether `key` is blocked now.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new()).build_with_penalty::<u8>(penalty)?;
    /// keyed.try_acquire(&1, 1)?;
    /// keyed.try_acquire(&1, 1)?; // denied: a strike, and one is enough
    /// assert!(keyed.is_blocked(&1) && !keyed.is_blocked(&2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_blocked<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.facade.peek_slot(key, |slot, now| {
            slot.is_some_and(|slot| slot.blocked_for(now).is_some())
        })
    }

    /// Lifts `key`'s block and forgets its strikes and its limiter state; returns whether it was
    /// held.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new()).build_with_penalty::<u8>(penalty)?;
    /// keyed.try_acquire(&1, 1)?;
    /// keyed.try_acquire(&1, 1)?; // blocked now
    /// assert!(keyed.forget(&1) && !keyed.forget(&2));
    /// assert!(keyed.try_acquire(&1, 1)?.is_allowed()); // a clean slate
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forget<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.facade.forget(key)
    }

    /// Drops every idle key (limiter idle, no strike in a live span, no block); returns how many.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .clock(clock.clone()).build_with_penalty::<u8>(penalty)?;
    /// keyed.try_acquire(&1, 1)?;
    /// clock.advance(Duration::from_secs(1)); // the window is over: key 1 is idle
    /// assert_eq!((keyed.retain_recent(), keyed.len()), (1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retain_recent(&self) -> usize {
        self.facade.retain_recent()
    }

    /// [`retain_recent`](Self::retain_recent), then gives the freed memory back.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .clock(clock.clone()).build_with_penalty::<u8>(penalty)?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert_eq!(keyed.shrink(), 0); // key 1 is still live
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(keyed.shrink(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shrink(&self) -> usize {
        self.facade.shrink()
    }

    /// Changes every key's limit live (see [`Algorithm::set_limit`]); the penalty box and the
    /// keys it holds are unchanged.
    ///
    /// # Errors
    /// As [`Algorithm::set_limit`]; the old limit then stays.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// keyed.set_limit(3)?;
    /// assert_eq!(keyed.try_acquire(&0, 1)?.remaining(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.facade.set_limit(limit)
    }

    /// The cap on keys held (`max_keys` rounded down to a multiple of the shard count).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .max_keys(10)
    ///     .shards(4)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(keyed.max_keys(), 8); // rounded down to a multiple of 4 shards
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.facade.max_keys()
    }

    /// The number of shards.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .shards(16)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(keyed.shards(), 16);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn shards(&self) -> usize {
        self.facade.shards()
    }

    /// Keys held now.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// keyed.try_acquire(&1, 1)?;
    /// keyed.try_acquire(&2, 1)?;
    /// assert_eq!(keyed.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.facade.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert!(keyed.is_empty());
    /// keyed.try_acquire(&1, 1)?;
    /// assert!(!keyed.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters: keys held, evictions, refusals, sweeps. Takes no lock (see [`KeyedStats`] for
    /// what a scrape concurrent with inserts reads).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .max_keys(1).shards(1).build_with_penalty::<u8>(penalty)?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert!(!keyed.try_acquire(&2, 1)?.is_allowed()); // no room for a second key
    /// assert_eq!(keyed.stats().refused_new_keys, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.facade.stats()
    }

    /// The penalty configuration.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(4, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(*keyed.penalty(), penalty);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn penalty(&self) -> &PenaltyBox {
        &self.facade.rules().extra
    }

    /// The algorithm every key runs.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(4, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(2))?)
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(keyed.algorithm().window(), Duration::from_secs(2));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.facade.rules().algorithm
    }

    /// The `now` to give a bucket's live reconfiguration (`keyed.algorithm().set_rate(rate,
    /// keyed.change_instant())`, or `set_capacity`), as
    /// [`Keyed::change_instant`](crate::Keyed::change_instant): the clock read raised to the
    /// map's time floor, no earlier than any decision already published, less the floor's grain.
    ///
    /// ```
    /// use floodgate::{Keyed, ManualClock, PenaltyBox, Rate, TokenBucket};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(4, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 10)?)
    ///     .clock(ManualClock::starting_at(7))
    ///     .build_with_penalty::<u8>(penalty)?;
    /// keyed.algorithm().set_rate(Rate::per_second(10), keyed.change_instant())?;
    /// assert_eq!(keyed.change_instant(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn change_instant(&self) -> u64 {
        self.facade.change_instant()
    }

    /// The clock.
    ///
    /// ```
    /// use floodgate::{Clock, FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(4, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .clock(ManualClock::starting_at(42))
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(keyed.clock().now_nanos(), 42);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        self.facade.clock()
    }
}

/// Every key's bucket reconfigured live at the map's
/// [`change_instant`](PenalizedKeyed::change_instant), as
/// [`Keyed::set_rate`](crate::Keyed::set_rate) does (the penalty box is unchanged).
impl<K, C> PenalizedKeyed<K, crate::Gcra, C>
where
    K: Key,
    C: Clock,
{
    /// Changes every key's rate live, as [`Keyed::set_rate`](crate::Keyed::set_rate).
    ///
    /// # Errors
    /// As [`TokenBucket::set_rate`](crate::TokenBucket::set_rate); the old rate then stays.
    ///
    /// ```
    /// use floodgate::{Keyed, ManualClock, PenaltyBox, Rate, TokenBucket};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(4, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 10)?)
    ///     .clock(ManualClock::new())
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert!(keyed.try_acquire(&1, 10)?.is_allowed());
    /// keyed.set_rate(Rate::per_second(10))?;
    /// assert!(!keyed.try_acquire(&1, 1)?.is_allowed()); // the debt is kept
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_rate(&self, rate: crate::Rate) -> Result<(), ConfigError> {
        self.facade
            .reconfigure(|bucket, now| bucket.set_rate(rate, now))
    }

    /// Changes every key's capacity live, as [`Keyed::set_capacity`](crate::Keyed::set_capacity).
    ///
    /// # Errors
    /// As [`TokenBucket::set_capacity`](crate::TokenBucket::set_capacity).
    ///
    /// ```
    /// use floodgate::{Keyed, ManualClock, PenaltyBox, Rate, TokenBucket};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(4, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 10)?)
    ///     .clock(ManualClock::new())
    ///     .build_with_penalty::<u8>(penalty)?;
    /// keyed.set_capacity(2)?;
    /// assert!(keyed.try_acquire(&1, 3).is_err()); // more than the capacity
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_capacity(&self, capacity: u32) -> Result<(), ConfigError> {
        self.facade
            .reconfigure(|bucket, now| bucket.set_capacity(capacity, now))
    }
}

impl<K: Key, A: std::fmt::Debug, C> std::fmt::Debug for PenalizedKeyed<K, A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.facade.debug("PenalizedKeyed", f)
    }
}
