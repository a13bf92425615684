//! [`Keyed`]: a keyed limiter with one algorithm word per key, a thin public type over
//! [`KeyedFacade`].

use std::borrow::Borrow;
use std::hash::Hash;

use super::cap::KeyedStats;
use super::facade::KeyedFacade;
use super::key::Key;
use super::slot::WordSlot;
use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::limiter::Algorithm;

/// Per-key limiting: one [`Algorithm`] state word per key, bounded memory. See the
/// [module docs](crate::keyed) for the guarantees.
///
/// # Which algorithms
/// Every [`Algorithm`]: its whole state is one `u64` word, decided by one CAS loop, which is what
/// lets a check on a held key take no lock and write nothing but that word (and, for the
/// time-word algorithms, the map's time floor about once per grain: see "One time floor per
/// map" below), and a rebuild judge and move a key by its word. That covers [`FixedWindow`](crate::FixedWindow) (up to 2^24 − 1
/// per window), [`Gcra`](crate::Gcra) (= token / leaky bucket), and
/// [`PackedSlidingWindow`](crate::PackedSlidingWindow), a sliding window whose ring of counts is
/// packed into the word (2 cells up to 65,535 per window, 8 cells up to 15).
///
/// [`SlidingWindow`](crate::SlidingWindow) with larger limits is not a keyed algorithm: its
/// [`SlidingWindowLimiter`](crate::SlidingWindowLimiter) is a ring of `cells + future` cell
/// words (rounded up to a power of two) plus as many marks, and a `head` and a `base` word on
/// their own cache lines, and a crossing into a new cell writes several of them (seal, mark,
/// publish), so it is not one word one CAS can decide. Its memory per key would be 16 bytes a
/// ring slot plus a 384-byte struct: for 60 one-second cells (15 future cells by default, 75
/// slots rounded up to 128) 128 × 16 + 384 = 2,432 bytes in three allocations, against 16-byte
/// slots for a `u64` key here (21 to 43 bytes a live key with the table's slack, the load running
/// from 3/8 after a growth to 3/4; about 21.3 bytes a key of the cap at the cap, plus each
/// shard's fixed part, about 520 bytes shared by its keys, see
/// [`KeyedBuilder::shards`](crate::keyed::KeyedBuilder::shards); 24-byte slots
/// for a 128-bit key such as [`IpKey`](crate::IpKey)), some 57 to 114 times more: 243 MB
/// instead of 2.1 to 4.3 MB for 100,000 `u64` keys. For a
/// large per-key limit without the fixed window's edge burst, use `Gcra` (a smooth rate with a
/// burst), or `PackedSlidingWindow` with 2 cells up to 65,535.
///
/// # One time floor per map
/// The time-word algorithms ([`Gcra`](crate::Gcra), `TokenBucket` and `LeakyBucket`, and any
/// [`Algorithm`] with [`NEEDS_TIME_FLOOR`](Algorithm::NEEDS_TIME_FLOOR)) decide at
/// `max(clock read, floor)`, the floor being the latest clock read that an admission on **any
/// key of the map** published (to within 16,384 ns, [`FLOOR_GRAIN_NANOS`](crate::clock::FLOOR_GRAIN_NANOS);
/// a floor more than `H` = [`MAX_CLOCK_LAG_NANOS`](crate::clock::MAX_CLOCK_LAG_NANOS) ahead of a
/// read is ignored), so a core whose clock lags another's is not refused permits that have
/// accrued. On a clock monotonic across threads the floor is never ahead of a read and changes
/// nothing. Where reads disagree (TSC skew, one leaping read), an admission on one key whose
/// read was `lead` (≤ `H`) ahead lets every other time-word key be decided at that later time
/// until real time reaches it: each key gains the permits that accrue in `lead`, at most
/// min(capacity, ⌈lead × rate⌉), early and once (its word is then written at the floor's time,
/// so a second pass gains nothing). The windows ([`FixedWindow`](crate::FixedWindow),
/// [`PackedSlidingWindow`](crate::PackedSlidingWindow)) have no floor: no key is decided at
/// another's time. [`PenalizedKeyed`](crate::PenalizedKeyed) decides its algorithm word so too,
/// and its penalty box at the checker's own read. (The floor used to be one per shard: the same
/// reach among the keys of a shard. One per map spares a second locked operation on nearly
/// every admission when the keys in use are spread over many shards.)
///
/// ```
/// use floodgate::{Gcra, Keyed, ManualClock, Rate};
/// const T: u64 = 1_000_000_000_000;
/// let clock = ManualClock::starting_at(T);
/// let keyed: Keyed<u32, _, _> =
///     Keyed::builder(Gcra::new(Rate::per_second(10), 3)?).clock(clock.clone()).build()?;
/// while keyed.admit(&1, 1)? {} // key 1 drained at T
/// clock.set(T + 250_000_000); // one read 250 ms ahead, on key 2
/// assert!(keyed.admit(&2, 1)?);
/// clock.set(T); // back at T, key 1 is decided at key 2's time:
/// assert!(keyed.admit(&1, 1)? && keyed.admit(&1, 1)?); // the 2 whole permits of 250 ms
/// assert!(!keyed.admit(&1, 1)?); // and no more
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
pub struct Keyed<K: Key, A, C = QuantaClock> {
    pub(super) facade: KeyedFacade<K, WordSlot, A, (), C>,
}

impl<K, A, C> Keyed<K, A, C>
where
    K: Key,
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
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.facade.check(key)
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
        self.facade.try_acquire(key, n)
    }

    /// [`try_acquire`](Self::try_acquire) answering only whether the permits were taken: the
    /// same decision and the same writes (a denial writes nothing), without the [`Decision`]'s
    /// terms ([`Limiter::admit`](crate::Limiter::admit) for one key). governor's `check_key`
    /// answers an admission as `admit` does (`Ok(())`), but a denial with `NotUntil`, the
    /// earliest time to retry, which `admit` does not compute: on denials the equal-work
    /// comparison is [`check`](Self::check) / [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::{Gcra, Keyed, Rate};
    /// let keyed: Keyed<u64, _> = Keyed::new(Gcra::new(Rate::per_second(1), 2)?, 100)?;
    /// assert_eq!(keyed.admit(&7, 2), Ok(true));
    /// assert_eq!(keyed.admit(&7, 1), Ok(false)); // a denial takes nothing
    /// assert_eq!(keyed.admit(&8, 1), Ok(true)); // key 8 has its own bucket
    /// assert!(keyed.admit(&7, 3).is_err()); // above the capacity
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn admit<Q>(&self, key: &Q, n: u32) -> Result<bool, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.facade.admit(key, n)
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
        self.facade.peek(key, n)
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
        self.facade.retain_recent()
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
        self.facade.shrink()
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
        self.facade.forget(key)
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
        self.facade.set_limit(limit)
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
        self.facade.len()
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
        self.facade.max_keys()
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
        self.facade.shards()
    }

    /// Counters: keys held, evictions, refusals, sweeps. Takes no lock (see [`KeyedStats`] for
    /// what a scrape concurrent with inserts reads).
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
        self.facade.stats()
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
        &self.facade.rules().algorithm
    }

    /// The `now` to give a bucket's live reconfiguration (`keyed.algorithm().set_rate(rate,
    /// keyed.change_instant())`, or `set_capacity`): the clock read raised to the map's time
    /// floor, so no earlier than any decision already published on any key, less the floor's
    /// grain (as [`AtomicLimiter::change_instant`](crate::AtomicLimiter::change_instant)). A change at an
    /// earlier instant applies from it: a drained key would be repaid at the new rate for the
    /// span it trails (see [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)).
    /// [`set_limit`](Self::set_limit) reads its instant this way.
    ///
    /// ```
    /// use floodgate::{Keyed, ManualClock, Rate, TokenBucket};
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(TokenBucket::new(Rate::per_second(1), 10)?)
    ///     .clock(ManualClock::starting_at(7)).build()?;
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
    /// use floodgate::{Clock, FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1))?)
    ///     .clock(ManualClock::starting_at(42)).build()?;
    /// assert_eq!(keyed.clock().now_nanos(), 42);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        self.facade.clock()
    }
}

/// Every key's bucket reconfigured live at the map's
/// [`change_instant`](Keyed::change_instant): the safe form of
/// `keyed.algorithm().set_rate(rate, now)`, which also lets the next inserts sweep keys the new
/// configuration makes idle sooner.
impl<K, C> Keyed<K, crate::Gcra, C>
where
    K: Key,
    C: Clock,
{
    /// Changes every key's rate live (see
    /// [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)): each key's debt is kept, now
    /// repaid at the new rate.
    ///
    /// # Errors
    /// As [`TokenBucket::set_rate`](crate::TokenBucket::set_rate); the old rate then stays.
    ///
    /// ```
    /// use floodgate::{Keyed, ManualClock, Rate, TokenBucket};
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(TokenBucket::new(Rate::per_second(1), 10)?)
    ///     .clock(ManualClock::new()).build()?;
    /// assert!(keyed.try_acquire(&1, 10)?.is_allowed());
    /// keyed.set_rate(Rate::per_second(10))?;
    /// assert!(!keyed.try_acquire(&1, 1)?.is_allowed()); // the debt is kept
    /// assert_eq!(keyed.algorithm().rate(), Rate::per_second(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_rate(&self, rate: crate::Rate) -> Result<(), ConfigError> {
        self.facade
            .reconfigure(|bucket, now| bucket.set_rate(rate, now))
    }

    /// Changes every key's capacity live (see
    /// [`TokenBucket::set_capacity`](crate::TokenBucket::set_capacity)).
    ///
    /// # Errors
    /// As [`TokenBucket::set_capacity`](crate::TokenBucket::set_capacity).
    ///
    /// ```
    /// use floodgate::{Keyed, ManualClock, Rate, TokenBucket};
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(TokenBucket::new(Rate::per_second(1), 10)?)
    ///     .clock(ManualClock::new()).build()?;
    /// keyed.set_capacity(2)?;
    /// assert!(keyed.try_acquire(&1, 3).is_err()); // more than the capacity
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_capacity(&self, capacity: u32) -> Result<(), ConfigError> {
        self.facade
            .reconfigure(|bucket, now| bucket.set_capacity(capacity, now))
    }
}

impl<K: Key, A: std::fmt::Debug, C> std::fmt::Debug for Keyed<K, A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.facade.debug("Keyed", f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::shards::JUDGE_INTERVAL_NANOS;
    use crate::{FixedWindow, ManualClock};
    use std::time::Duration;

    /// A keyed fixed window of 5 a second per key on `clock`, for at most `max_keys` keys in
    /// `shards` shards.
    fn five_a_second(
        clock: &ManualClock,
        max_keys: usize,
        shards: usize,
    ) -> Keyed<u64, FixedWindow, ManualClock> {
        Keyed::builder(FixedWindow::new(5, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .max_keys(max_keys)
            .shards(shards)
            .build()
            .unwrap()
    }

    /// One permit for each of `keys`, each admitted.
    #[track_caller]
    fn admit_each(keyed: &Keyed<u64, FixedWindow, ManualClock>, keys: std::ops::Range<u64>) {
        for key in keys {
            assert!(
                keyed.try_acquire(&key, 1).unwrap().is_allowed(),
                "key {key}"
            );
        }
    }

    /// A flood of keys that goes idle gives its memory back at the next sweep, with no explicit
    /// `shrink()`: the shards follow their keys down.
    #[test]
    fn a_sweep_hands_back_the_memory_of_a_flood_gone_idle() {
        let clock = ManualClock::new();
        let keyed = five_a_second(&clock, 100_000, 4);
        admit_each(&keyed, 0..40_000);
        assert!(keyed.facade.map().capacity() >= 40_000);
        clock.advance(Duration::from_secs(2)); // every window over: every key idle
        assert_eq!(keyed.retain_recent(), 40_000);
        assert!(
            keyed.facade.map().capacity() < 2_000,
            "{} slots kept",
            keyed.facade.map().capacity()
        );
        // A shard that still holds keys keeps room for them (no shrink below twice its keys).
        admit_each(&keyed, 0..1_000);
        clock.advance(Duration::from_millis(500));
        assert_eq!(keyed.retain_recent(), 0);
        assert!(keyed.facade.map().capacity() >= 1_000);
    }

    /// A flood that fills the map to its cap and goes idle: the next new keys sweep their full
    /// shards, which shrink to twice the keys they keep, with no `retain_recent` or `shrink()`.
    /// Below the cap idle keys of a small shard stay (a key used again is not re-inserted).
    #[test]
    fn new_keys_after_a_flood_gone_idle_hand_its_memory_back() {
        let clock = ManualClock::new();
        let keyed = five_a_second(&clock, 40_000, 4);
        // More keys than the cap: every shard fills up, the rest are refused.
        for key in 0..60_000u64 {
            keyed.try_acquire(&key, 1).unwrap();
        }
        assert_eq!(keyed.len(), 40_000);
        let flooded = keyed.facade.map().capacity();
        assert!(flooded >= 40_000);
        clock.advance(Duration::from_secs(2)); // every window over: every key idle
        admit_each(&keyed, 60_000..60_100);
        assert_eq!(keyed.len(), 100, "the idle flood was swept");
        assert!(
            keyed.facade.map().capacity() < 1_000,
            "{} slots kept of {flooded}",
            keyed.facade.map().capacity()
        );
        assert_eq!(keyed.stats().evicted_idle, 40_000);
        // Below the cap, in shards too small to be judged (room for at most 64 keys), keys gone
        // idle are kept and found again in place.
        clock.advance(Duration::from_secs(2));
        admit_each(&keyed, 60_000..60_100);
        let stats = keyed.stats();
        assert_eq!((stats.keys, stats.evicted_idle), (100, 40_000));
    }

    /// Issue 16: a flood that grows shards below their cap and goes idle hands its memory back
    /// with no `retain_recent()` or `shrink()`: the next new keys of each shard judge it (at most
    /// a quarter of its keys live) and rebuild it to twice its live keys. Shards grown but not
    /// filled kept their tables and idle keys until an explicit call.
    #[test]
    fn new_keys_after_a_flood_below_the_cap_gone_idle_hand_its_memory_back() {
        let clock = ManualClock::new();
        let keyed = five_a_second(&clock, 100_000, 4);
        // 20,000 keys: about 5,000 a shard, a fifth of its cap of 25,000.
        admit_each(&keyed, 0..20_000);
        let flooded = keyed.facade.map().capacity();
        assert!(flooded >= 20_000);
        clock.advance(Duration::from_secs(2)); // every window over: every key idle
        // Within the judging interval of the shards' first inserts: nothing is judged yet.
        admit_each(&keyed, 20_000..20_100);
        assert_eq!(keyed.stats().evicted_idle, 0);
        clock.advance(Duration::from_nanos(JUDGE_INTERVAL_NANOS));
        admit_each(&keyed, 20_100..20_200);
        let stats = keyed.stats();
        assert_eq!(
            (stats.keys, stats.evicted_idle),
            (100, 20_100),
            "the idle flood was dropped"
        );
        assert!(
            keyed.facade.map().capacity() < 1_000,
            "{} slots kept of {flooded}",
            keyed.facade.map().capacity()
        );
    }

    /// Review: rebuilds of every kind (growth, judging sweep, sweep at the cap, `forget`,
    /// `retain_recent`, `shrink`) interleaved at random lose no key that holds state and keep
    /// no key twice: a key admitted within its window is refused a second permit whatever
    /// rebuilt its shard since, and right after `retain_recent` the key count is exactly the
    /// keys still in their windows.
    #[test]
    fn random_rebuilds_lose_and_duplicate_no_key() {
        let clock = ManualClock::new();
        let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .max_keys(512)
            .shards(2)
            .when_full(crate::keyed::WhenFull::DenyNewKeys)
            .build::<u64>()
            .unwrap();
        let mut admitted: std::collections::HashMap<u64, u64> = Default::default();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut forgets, mut retains, mut shrinks) = (0, 0, 0);
        for _ in 0..40_000 {
            let now = clock.now_nanos();
            let live = |at: &u64| now < at + 1_000_000_000;
            match next() % 20 {
                0..=13 => {
                    let key = next() % 700;
                    let held = admitted.get(&key).is_some_and(live);
                    match keyed.try_acquire(&key, 1) {
                        Ok(d) if d.is_allowed() => {
                            assert!(!held, "key {key} admitted twice in its window");
                            admitted.insert(key, now);
                        }
                        _ => {}
                    }
                }
                14 => {
                    let key = next() % 700;
                    keyed.forget(&key);
                    admitted.remove(&key);
                    forgets += 1;
                }
                15 => {
                    keyed.retain_recent();
                    let holding = admitted.values().filter(|at| live(at)).count();
                    assert_eq!(keyed.stats().keys, holding, "keys after retain_recent");
                    retains += 1;
                }
                16 => {
                    keyed.shrink();
                    shrinks += 1;
                }
                17 => clock.advance(Duration::from_nanos(JUDGE_INTERVAL_NANOS + next() % 1_000)),
                _ => clock.advance(Duration::from_nanos(next() % 300_000_000)),
            }
        }
        let stats = keyed.stats();
        assert!(forgets > 1_000 && retains > 1_000 && shrinks > 1_000);
        assert!(stats.sweeps > 0 && stats.evicted_idle > 0, "{stats:?}");
    }

    /// A `ManualClock` whose next read, once armed, is `leap` ahead (a one-shot TSC glitch).
    #[derive(Clone)]
    struct LeapOnce {
        base: ManualClock,
        leap: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl crate::Clock for LeapOnce {
        fn now_nanos(&self) -> u64 {
            let leap = self.leap.swap(0, std::sync::atomic::Ordering::SeqCst);
            self.base.now_nanos() + leap
        }
        fn sleep(&self, duration: Duration) {
            self.base.sleep(duration);
        }
    }

    /// Review: the judging interval is counted on a fresh read, not on an insert's one leaping
    /// read. A shard's first insert at 0, a flood gone idle by 2 s: an insert at 2 s whose read
    /// leaped 10 s ahead found the interval over and ran the pass (its liveness on the fresh
    /// read), dropping the 20,000 keys 8 s before the interval allows (a key in steady use is
    /// dropped this way more than once per interval).
    #[test]
    fn a_leaping_read_does_not_judge_a_shard_within_the_interval() {
        let base = ManualClock::new();
        let clock = LeapOnce {
            base: base.clone(),
            leap: std::sync::Arc::default(),
        };
        let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .max_keys(100_000)
            .shards(1)
            .build::<u64>()
            .unwrap();
        for key in 0..20_000u64 {
            assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        }
        base.advance(Duration::from_secs(2)); // every window over: every key idle
        clock
            .leap
            .store(JUDGE_INTERVAL_NANOS, std::sync::atomic::Ordering::SeqCst);
        assert!(keyed.try_acquire(&20_000, 1).unwrap().is_allowed());
        assert_eq!(
            clock.leap.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "the insert read the leap"
        );
        let stats = keyed.stats();
        assert_eq!(
            (stats.keys, stats.evicted_idle),
            (20_001, 0),
            "judged 2 s after the shard's first insert"
        );
        // The interval over on the clock: the next new key judges the shard and drops the
        // flood (key 20,000 was decided at its leaping read, in the window now in progress).
        base.advance(Duration::from_nanos(JUDGE_INTERVAL_NANOS));
        assert!(keyed.try_acquire(&20_001, 1).unwrap().is_allowed());
        let stats = keyed.stats();
        assert_eq!((stats.keys, stats.evicted_idle), (2, 20_000));
    }

    /// Issue 16: keys walked round robin, each idle between its uses (a 1 ms window, used every
    /// 10 ms) are found in place, not dropped and re-inserted. A judging pass on insert judged
    /// a shard whose keys were still being inserted (the walk's first round): at most a quarter
    /// live, so it dropped the idle ones, whose next use re-inserted them, which judged again:
    /// keyed churn over 100,000 keys ran 3.2x slower than before judging existed. Now a shard is
    /// judged at most once per `JUDGE_INTERVAL_NANOS` (10 s), the first time that long after its
    /// first insert: a walk of 25 s drops each key at most twice.
    #[test]
    fn keys_used_round_robin_and_idle_between_uses_are_not_reinserted() {
        let clock = ManualClock::new();
        let keyed = Keyed::builder(FixedWindow::new(5, Duration::from_millis(1)).unwrap())
            .clock(clock.clone())
            .max_keys(10_000)
            .shards(1)
            .build::<u64>()
            .unwrap();
        let keys = 400u64;
        let step = Duration::from_micros(25); // a round of 400 keys: 10 ms
        let walk = |rounds: u64| {
            for _ in 0..rounds {
                for key in 0..keys {
                    clock.advance(step);
                    assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
                }
            }
        };
        walk(20); // 200 ms
        let stats = keyed.stats();
        assert_eq!(
            (stats.keys, stats.evicted_idle),
            (keys as usize, 0),
            "keys in use were dropped"
        );
        walk(2_480); // to 25 s
        let stats = keyed.stats();
        assert_eq!(stats.keys, keys as usize);
        assert!(
            stats.evicted_idle <= 2 * keys,
            "{} drops: more than one per key per judging interval",
            stats.evicted_idle
        );
    }

    /// The other side: a shard below its cap in steady use (more than a quarter of its keys live)
    /// keeps its idle keys when a new key judges it, so a key used again after going idle is
    /// found in place, not re-inserted. The judging pass counts as a sweep, and runs once enough
    /// new keys came since the last pass (half the table's slots), not on every new key.
    #[test]
    fn a_shard_in_steady_use_keeps_its_idle_keys() {
        let clock = ManualClock::new();
        let keyed = five_a_second(&clock, 10_000, 1);
        admit_each(&keyed, 0..400);
        let slots = keyed.facade.map().capacity();
        // Every key idle, and past the judging interval.
        clock.advance(Duration::from_nanos(JUDGE_INTERVAL_NANOS) + Duration::from_secs(2));
        admit_each(&keyed, 0..200); // found in place: live again
        let before = keyed.stats();
        assert_eq!((before.keys, before.evicted_idle), (400, 0));
        // New keys until one judges the shard: 200 + m of 400 + m keys live, more than a
        // quarter, so nothing is dropped.
        let mut new_keys = 0u64;
        while keyed.stats().sweeps == before.sweeps {
            assert!(
                new_keys < slots as u64,
                "no judging pass after {new_keys} new keys"
            );
            assert!(
                keyed
                    .try_acquire(&(400 + new_keys), 1)
                    .unwrap()
                    .is_allowed()
            );
            new_keys += 1;
        }
        assert!(new_keys > 1, "a pass waits for more new keys than one");
        let stats = keyed.stats();
        assert_eq!(
            (stats.keys, stats.evicted_idle),
            (400 + new_keys as usize, 0)
        );
        assert_eq!(stats.sweeps, before.sweeps + 1, "one judging pass");
        assert!(keyed.facade.map().capacity() >= slots, "no shrink");
        let len = keyed.len();
        // An idle key used again is found in place.
        assert!(keyed.try_acquire(&300, 1).unwrap().is_allowed());
        assert_eq!(keyed.len(), len);
    }
}
