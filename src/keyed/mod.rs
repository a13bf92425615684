//! Keyed limiting: one limiter per key (client IP, user, API key) with bounded memory.
//!
//! [`Keyed`] keeps one packed state word per key for any [`Algorithm`], in an ahash-sharded map
//! of open-addressing tables. A check on a key that exists takes no lock: it finds the key's
//! slot in its shard's current table and updates the word with the one CAS loop
//! (`crate::limiter::update`), writing nothing shared but that word (a denial writes nothing).
//! New keys, sweeps and evictions take the shard's mutex.
//!
//! # Bounded memory
//! At most `max_keys` keys are held (split evenly across the shards). A key whose word is
//! [idle](Algorithm::is_idle) decides exactly as a fresh key would, so dropping it changes no
//! decision; such keys are dropped by sweeps run inside calls when a shard is full (and only
//! once some key can be idle), or on demand by [`Keyed::retain_recent`]; below the cap they are
//! kept, so a key used again after going idle is found in place. A sweep sizes the shard's table
//! to twice the keys it keeps, so the memory of a flood gone idle comes back without
//! [`Keyed::shrink`]. No background thread is needed.
//!
//! When a shard is full and **every** key in it is live, [`WhenFull`] decides: refuse the new key
//! (the default; counted in [`KeyedStats::refused_new_keys`]) or evict the live keys holding the
//! fewest permits, a batch at a time (counted in [`KeyedStats::evicted_live`]). Idle keys always
//! go first.
//!
//! # Guarantees
//! - A key that is never evicted live gets exactly the decisions of an unbounded map of
//!   limiters: dropping idle keys, and every race between a check and an insert or eviction,
//!   change nothing (a rebuild that drops keys waits until every check on the old table has
//!   committed before it reads the clock and judges; see `shards.rs`). This assumes a clock monotonic across threads; with
//!   [`QuantaClock`] a check on one core can read a time up to the TSC skew behind an eviction on
//!   another, as for any limiter.
//! - A key evicted live (only under [`WhenFull::EvictLeastUsed`]) restarts fresh: it can be
//!   admitted at most the permits it held again. Each such eviction is counted.
//! - The sweep schedule uses [`Decision::reset_after`] of a non-consuming probe as "time until
//!   idle". For the algorithms in this crate that is exact; an algorithm that overstated it would
//!   only make sweeps late (new keys refused, or a live key evicted, while an idle one waits).
//!
//! ```
//! use floodgate::{Keyed, ManualClock, Rate, TokenBucket};
//! let clock = ManualClock::new();
//! let per_user: Keyed<String, _, _> = Keyed::builder(TokenBucket::new(Rate::per_second(1), 2)?)
//!     .clock(clock.clone())
//!     .max_keys(10_000)
//!     .build()?;
//! assert!(per_user.try_acquire("alice", 2)?.is_allowed());
//! assert!(!per_user.try_acquire("alice", 1)?.is_allowed());
//! assert!(per_user.try_acquire("bob", 1)?.is_allowed()); // bob has his own bucket
//! assert_eq!(per_user.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod hashed;
mod ip;
mod penalty;
mod shards;

use std::borrow::Borrow;
use std::hash::Hash;

pub(crate) use builder::sharded_map;
pub use builder::{KeyedBuilder, MAX_SHARDS};
pub use hashed::HashedKey;
pub use ip::{IpKey, IpKeyer};
pub use penalty::{PenalizedKeyed, PenaltyBox};
pub(crate) use shards::{KeySlot, Liveness, ShardedMap};

use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::limiter::{Algorithm, read_at_floor, reads_after};
use crate::sync::{AtomicU64, Ordering};

/// What a full shard does with a new key when none of its keys is idle.
///
/// ```
/// use floodgate::keyed::WhenFull;
/// assert_eq!(WhenFull::default(), WhenFull::DenyNewKeys);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WhenFull {
    /// Deny requests from keys not already tracked until some key becomes idle (the denial's
    /// `retry_after` says when that can first happen). Keys already tracked are never
    /// disturbed, so a flood of new keys cannot reset the counts of the keys it competes with.
    #[default]
    DenyNewKeys,
    /// Make room by evicting the live keys holding the fewest permits, so forgetting them hands
    /// back as few permits as possible: an eighth of the shard (at most 1,024 keys) at a time,
    /// chosen by a scan of the shard, so a flood of new keys costs O(1) amortized. Not LRU:
    /// recency would cost a write on every check, including denials, and 8 more bytes a key.
    EvictLeastUsed,
}

/// Counters of a keyed limiter, summed over its shards.
///
/// ```
/// use floodgate::{FixedWindow, Keyed, ManualClock};
/// use std::time::Duration;
/// let keyed: Keyed<u64, _, _> = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
///     .clock(ManualClock::new())
///     .max_keys(1)
///     .build()?;
/// keyed.try_acquire(&1, 1)?;
/// assert!(!keyed.try_acquire(&2, 1)?.is_allowed()); // full of live keys: a new key is refused
/// assert_eq!(keyed.stats().refused_new_keys, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys held now.
    pub keys: usize,
    /// The cap (`max_keys` rounded down to a multiple of the shard count).
    pub max_keys: usize,
    /// Idle keys dropped (by sweeps, [`Keyed::retain_recent`], or eviction).
    pub evicted_idle: u64,
    /// Live keys evicted to make room ([`WhenFull::EvictLeastUsed`]); each may change decisions.
    pub evicted_live: u64,
    /// Requests from new keys denied for lack of room ([`WhenFull::DenyNewKeys`]).
    pub refused_new_keys: u64,
    /// Shard sweeps run.
    pub sweeps: u64,
}

/// One key's state: the algorithm's word.
#[derive(Default)]
pub(crate) struct WordSlot {
    state: AtomicU64,
}

/// Idle, or how many permits the word holds and when it turns idle, from a probe that asks for
/// more than any capacity (a denial, so it consumes nothing and reports the exact state).
pub(crate) fn word_liveness<A: Algorithm>(algorithm: &A, state: u64, now: u64) -> Liveness {
    if algorithm.is_idle(state, now) {
        return Liveness::Idle;
    }
    let probe = algorithm.decide(state, now, u32::MAX).decision;
    Liveness::Live {
        used: algorithm.limit().saturating_sub(probe.remaining()).max(1),
        idle_in: duration_to_nanos(probe.reset_after()).max(1),
    }
}

impl<A: Algorithm> KeySlot<A> for WordSlot {
    fn liveness(&self, algorithm: &A, now: u64) -> Liveness {
        // Relaxed: a snapshot of one self-contained word, taken by a rebuild that owns the table
        // (every check on it has finished) or by the inserter (a lower bound of its idle time).
        word_liveness(algorithm, self.state.load(Ordering::Relaxed), now)
    }
}

/// Per-key limiting: one [`Algorithm`] state word per key, bounded memory. See the
/// [module docs](self) for the guarantees.
///
/// ```
/// use floodgate::{FixedWindow, Keyed, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let keyed: Keyed<String, _, _> =
///     Keyed::builder(FixedWindow::new(2, Duration::from_secs(1))?)
///         .clock(clock.clone())
///         .build()?;
/// assert_eq!(keyed.try_acquire("a", 1)?.remaining(), 1);
/// assert_eq!(keyed.try_acquire("a", 1)?.remaining(), 0);
/// assert!(!keyed.try_acquire("a", 1)?.is_allowed());
/// clock.advance(Duration::from_secs(1));
/// assert!(keyed.try_acquire("a", 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Keyed<K, A, C = QuantaClock> {
    map: ShardedMap<K, WordSlot>,
    algorithm: A,
    clock: C,
}

impl<A: Algorithm> Keyed<(), A, QuantaClock> {
    /// Starts building a keyed limiter running `algorithm` for every key.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let keyed: Keyed<u32, _> = Keyed::builder(FixedWindow::new(3, Duration::from_secs(1))?)
    ///     .max_keys(64)
    ///     .build()?;
    /// assert_eq!(keyed.try_acquire(&7, 1)?.remaining(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(algorithm: A) -> KeyedBuilder<A, QuantaClock> {
        KeyedBuilder {
            algorithm,
            clock: QuantaClock::new(),
            max_keys: 100_000,
            shards: None,
            when_full: WhenFull::DenyNewKeys,
        }
    }
}

impl<K, A> Keyed<K, A, QuantaClock>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
{
    /// A keyed limiter holding at most `max_keys` keys, with the defaults of [`KeyedBuilder`].
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `max_keys = 0`.
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate};
    /// let keyed = Keyed::new(Gcra::new(Rate::per_second(5), 5)?, 10_000)?;
    /// assert!(keyed.try_acquire(&42u64, 1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(algorithm: A, max_keys: usize) -> Result<Self, ConfigError> {
        Keyed::builder(algorithm).max_keys(max_keys).build()
    }
}

impl<K, A, C> Keyed<K, A, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
    C: Clock,
{
    /// One permit for `key`, now, without a `Result`: [`try_acquire(key, 1)`](Self::try_acquire)
    /// (governor's `check_key`). One permit is a valid request for every limit.
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate};
    /// let keyed: Keyed<u64, _> = Keyed::new(Gcra::new(Rate::per_second(1), 1)?, 100)?;
    /// assert!(keyed.check(&7).is_allowed());
    /// assert!(!keyed.check(&7).is_allowed());
    /// assert!(keyed.check(&8).is_allowed());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.try_acquire(key, 1)
            .unwrap_or_else(|_| Decision::deny(self.algorithm.limit(), 0, u64::MAX, u64::MAX))
    }

    /// Takes `n` permits from `key`'s limiter if they are available now; never blocks. A new key
    /// starts fresh. A denial writes nothing shared.
    ///
    /// # Errors
    /// [`AcquireError`] when `n` is zero or above the capacity.
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate};
    /// let keyed: Keyed<String, _> = Keyed::new(Gcra::new(Rate::per_second(1), 1)?, 100)?;
    /// assert!(keyed.try_acquire("10.0.0.1", 1)?.is_allowed()); // &str looks up String keys
    /// assert!(keyed.try_acquire("10.0.0.1", 2).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, n: u32) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.algorithm.check_permits(n)?;
        let algorithm = &self.algorithm;
        let decided = self
            .map
            .access(key, &self.clock, algorithm, |slot, now, floor| {
                decide_slot(algorithm, &slot.state, floor, now, &self.clock, n)
            });
        decided.unwrap_or_else(|refused| {
            let limit = algorithm.limit();
            Ok(Decision::deny(
                limit,
                0,
                refused.retry_after,
                refused.retry_after,
            ))
        })
    }

    /// The decision `n` permits would get now for `key`, without taking them or inserting it.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate};
    /// let keyed: Keyed<u64, _> = Keyed::new(Gcra::new(Rate::per_second(1), 3)?, 100)?;
    /// assert_eq!(keyed.peek(&7, 1)?.remaining(), 2);
    /// assert!(keyed.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek<Q>(&self, key: &Q, n: u32) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.algorithm.check_permits(n)?;
        Ok(self.map.peek(key, &self.clock, |slot, now, floor| {
            // Acquire: pairs with the Release CAS of `update_at`, so the floor read next is the
            // key's last writer's or later.
            let state = slot.map_or(0, |slot| slot.state.load(Ordering::Acquire));
            let now = if A::NEEDS_TIME_FLOOR {
                // After the Acquire load above.
                read_at_floor(now, floor)
            } else {
                now
            };
            self.algorithm.decide(state, now, n).decision
        }))
    }

    /// Drops every key that is idle now (decides as a fresh key would); returns how many.
    /// Never changes a decision.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let keyed: Keyed<u32, _, _> = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert_eq!(keyed.retain_recent(), 0); // key 1 is live until its window ends
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(keyed.retain_recent(), 1);
    /// assert!(keyed.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retain_recent(&self) -> usize {
        self.map.retain_recent(&self.clock, &self.algorithm)
    }

    /// [`retain_recent`](Self::retain_recent), then gives the freed memory back to the allocator.
    /// Returns how many keys were dropped.
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, ManualClock, Rate};
    /// let clock = ManualClock::new();
    /// let keyed: Keyed<u32, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1000), 1)?)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// for key in 0..1000 { keyed.try_acquire(&key, 1)?; }
    /// clock.advance(std::time::Duration::from_millis(1));
    /// assert_eq!(keyed.shrink(), 1000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shrink(&self) -> usize {
        let dropped = self.retain_recent();
        self.map.shrink_to_fit(&self.clock, &self.algorithm);
        dropped
    }

    /// Forgets `key` (it starts fresh next time); returns whether it was held.
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate};
    /// let keyed: Keyed<u64, _> = Keyed::new(Gcra::new(Rate::per_second(1), 1)?, 10)?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert!(keyed.forget(&1));
    /// assert!(keyed.try_acquire(&1, 1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forget<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove(key, &self.clock, &self.algorithm)
    }

    /// Changes every key's limit live (see [`Algorithm::set_limit`]).
    ///
    /// # Errors
    /// As [`Algorithm::set_limit`]; the old limit then stays.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// let keyed: Keyed<u8, _> = Keyed::new(FixedWindow::new(1, std::time::Duration::from_secs(1))?, 10)?;
    /// keyed.set_limit(3)?;
    /// assert_eq!(keyed.try_acquire(&0, 1)?.remaining(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.algorithm.set_limit(limit, self.clock.now_nanos())?;
        // A new configuration may bring idle times forward: let the next inserts sweep.
        self.map.forget_idle_bounds();
        Ok(())
    }

    /// Keys held now.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// let window = FixedWindow::new(5, std::time::Duration::from_secs(1))?;
    /// let keyed: Keyed<u8, _> = Keyed::new(window, 10)?;
    /// keyed.try_acquire(&1, 1)?;
    /// keyed.try_acquire(&2, 1)?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert_eq!(keyed.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// let window = FixedWindow::new(5, std::time::Duration::from_secs(1))?;
    /// let keyed: Keyed<u8, _> = Keyed::new(window, 10)?;
    /// assert!(keyed.is_empty());
    /// keyed.try_acquire(&1, 1)?;
    /// assert!(!keyed.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cap on keys held (`max_keys` rounded down to a multiple of the shard count).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _> =
    ///     Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?).max_keys(10).shards(4).build()?;
    /// assert_eq!(keyed.max_keys(), 8); // rounded down to a multiple of 4 shards
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.map.max_keys()
    }

    /// The number of shards.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _> =
    ///     Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?).shards(16).build()?;
    /// assert_eq!(keyed.shards(), 16);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn shards(&self) -> usize {
        self.map.shard_count()
    }

    /// Counters: keys held, evictions, refusals, sweeps.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .max_keys(1).shards(1).clock(ManualClock::new()).build()?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert!(!keyed.try_acquire(&2, 1)?.is_allowed()); // full: the new key is refused
    /// let stats = keyed.stats();
    /// assert_eq!((stats.keys, stats.refused_new_keys), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.map.stats()
    }

    /// The algorithm every key runs, with its live configuration.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _> = Keyed::new(FixedWindow::new(5, Duration::from_secs(2))?, 10)?;
    /// assert_eq!(keyed.algorithm().window(), Duration::from_secs(2));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock.
    ///
    /// ```
    /// use floodgate::{Clock, FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .clock(ManualClock::starting_at(42)).build()?;
    /// assert_eq!(keyed.clock().now_nanos(), 42);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<K, A: std::fmt::Debug, C> std::fmt::Debug for Keyed<K, A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyed")
            .field("algorithm", &self.algorithm)
            .field("max_keys", &self.map.max_keys())
            .field("shards", &self.map.shard_count())
            .finish_non_exhaustive()
    }
}

/// One decision on a key's state word, through [`Algorithm::acquire_word`] with the shard's
/// time floor (used by algorithms that need one, [`Algorithm::NEEDS_TIME_FLOOR`]), so a reader
/// whose clock lags the key's last writer is decided at the writer's time, exactly as
/// [`AtomicLimiter`](crate::AtomicLimiter) does. `now` is the clock read taken under the
/// shard's lock; `clock` reads again where the engine must confirm a leap.
///
/// # Errors
/// As [`Algorithm::check_permits`], for a capacity lowered since the caller checked `n`.
#[inline]
fn decide_slot<A: Algorithm>(
    algorithm: &A,
    state: &AtomicU64,
    floor: &AtomicU64,
    now: u64,
    clock: &impl Clock,
    n: u32,
) -> Result<Decision, AcquireError> {
    algorithm.acquire_word(state, floor, reads_after(now, || clock.now_nanos()), n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindow, ManualClock};
    use std::time::Duration;

    /// A flood of keys that goes idle gives its memory back at the next sweep, with no explicit
    /// `shrink()`: the shards follow their keys down.
    #[test]
    fn a_sweep_hands_back_the_memory_of_a_flood_gone_idle() {
        let clock = ManualClock::new();
        let keyed: Keyed<u64, _, _> =
            Keyed::builder(FixedWindow::new(5, Duration::from_secs(1)).unwrap())
                .clock(clock.clone())
                .max_keys(100_000)
                .shards(4)
                .build()
                .unwrap();
        for key in 0..40_000u64 {
            assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        }
        assert!(keyed.map.capacity() >= 40_000);
        clock.advance(Duration::from_secs(2)); // every window over: every key idle
        assert_eq!(keyed.retain_recent(), 40_000);
        assert!(
            keyed.map.capacity() < 2_000,
            "{} slots kept",
            keyed.map.capacity()
        );
        // A shard that still holds keys keeps room for them (no shrink below twice its keys).
        for key in 0..1_000u64 {
            assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        }
        clock.advance(Duration::from_millis(500));
        assert_eq!(keyed.retain_recent(), 0);
        assert!(keyed.map.capacity() >= 1_000);
    }

    /// A flood that fills the map to its cap and goes idle: the next new keys sweep their full
    /// shards, which shrink to twice the keys they keep, with no `retain_recent` or `shrink()`.
    /// Below the cap idle keys stay (a key used again is not re-inserted).
    #[test]
    fn new_keys_after_a_flood_gone_idle_hand_its_memory_back() {
        let clock = ManualClock::new();
        let keyed: Keyed<u64, _, _> =
            Keyed::builder(FixedWindow::new(5, Duration::from_secs(1)).unwrap())
                .clock(clock.clone())
                .max_keys(40_000)
                .shards(4)
                .build()
                .unwrap();
        // More keys than the cap: every shard fills up, the rest are refused.
        for key in 0..60_000u64 {
            keyed.try_acquire(&key, 1).unwrap();
        }
        assert_eq!(keyed.len(), 40_000);
        let flooded = keyed.map.capacity();
        assert!(flooded >= 40_000);
        clock.advance(Duration::from_secs(2)); // every window over: every key idle
        for key in 60_000..60_100u64 {
            assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        }
        assert_eq!(keyed.len(), 100, "the idle flood was swept");
        assert!(
            keyed.map.capacity() < 1_000,
            "{} slots kept of {flooded}",
            keyed.map.capacity()
        );
        assert_eq!(keyed.stats().evicted_idle, 40_000);
        // Below the cap, keys gone idle are kept and found again in place.
        clock.advance(Duration::from_secs(2));
        for key in 60_000..60_100u64 {
            assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        }
        let stats = keyed.stats();
        assert_eq!((stats.keys, stats.evicted_idle), (100, 40_000));
    }
}
