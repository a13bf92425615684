//! [`KeyedInFlight`]: a concurrency limit per key ("20 requests in progress per API key"), in
//! floodgate's bounded sharded key map.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use super::word::MAX_IN_FLIGHT_LIMIT;
use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision, check_permits, validate_limit};
use crate::keyed::{Key, KeySlot, KeyedStats, Liveness, ShardedMap, WhenFull, sharded_map};
use crate::limiter::{Step, update};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// How long a shard full of keys with requests in progress waits before it looks for a key
/// that has drained again (1 ms). A key's permits can come back at any moment, so there is no
/// time until idle to wait for; this bounds the sweeps a flood of new keys can cause to one per
/// shard per millisecond, at the price of refusing a new key for up to 1 ms after room was made.
///
/// ```
/// assert_eq!(floodgate::concurrency::KEYED_SWEEP_BACKOFF_NANOS, 1_000_000);
/// ```
pub const KEYED_SWEEP_BACKOFF_NANOS: u64 = 1_000_000;

/// One key's permits in flight. Shared with that key's permits, so a permit gives back to the
/// counter it took from even if the key was dropped meanwhile (it never is while it holds
/// permits: see [`KeyedInFlight`]).
#[derive(Debug, Default)]
struct KeyCount {
    in_flight: AtomicU64,
}

/// The map's slot: the key's counter, shared with its permits.
#[derive(Debug, Default)]
struct KeySlotArc(Arc<KeyCount>);

impl KeySlot<()> for KeySlotArc {
    fn liveness(&self, _: &(), _now: u64) -> Liveness {
        // Relaxed: judged by a rebuild that owns the table (every taker that found this key in it
        // has finished adding; see keyed/shards.rs, whose `take_arc` Acquires their guards' drops),
        // so every add is seen, and a zero means every permit came back. An insert's passes
        // over the live table (`judge`, `idle_bound`) may read a stale count: they only decide
        // whether to rebuild (which judges again) and when to sweep, never drop a key.
        match self.0.in_flight.load(Ordering::Relaxed) {
            0 => Liveness::Idle,
            used => Liveness::Live {
                used,
                idle_in: KEYED_SWEEP_BACKOFF_NANOS,
            },
        }
    }
}

/// A concurrency limit per key: at most `limit` permits in flight for each key, `max_keys` keys
/// at most (bounded memory). A key with no permit in flight is idle and dropped by the map's
/// sweeps; **a key with permits in flight is never dropped**, so its count is exact. When a
/// shard is full of keys that all have requests in progress, a new key is refused (counted in
/// [`stats`](Self::stats)`.refused_new_keys`) until one drains: the map sweeps for drained keys
/// at most once per [`KEYED_SWEEP_BACKOFF_NANOS`] per shard.
///
/// Non-blocking only: a per-key concurrency limit answers at once (reject with 429 / 503).
///
/// ```
/// use floodgate::concurrency::KeyedInFlight;
/// let per_key: KeyedInFlight<String> = KeyedInFlight::new(2, 10_000)?;
/// let a = per_key.try_acquire("key-a", 1)?.expect("free");
/// let b = per_key.try_acquire("key-a", 1)?.expect("free");
/// assert!(per_key.try_acquire("key-a", 1)?.is_none()); // two in progress for key-a
/// assert!(per_key.try_acquire("key-b", 1)?.is_some()); // key-b has its own count
/// drop(a);
/// assert_eq!(per_key.in_flight("key-a"), 1);
/// # drop(b);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedInFlight<K: Key, C = QuantaClock> {
    map: ShardedMap<K, KeySlotArc>,
    limit: AtomicU32,
    clock: C,
}

impl<K: Key, C> fmt::Debug for KeyedInFlight<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedInFlight")
            // Relaxed: a snapshot for display.
            .field("limit", &self.limit.load(Ordering::Relaxed))
            .field("max_keys", &self.map.max_keys())
            .finish_non_exhaustive()
    }
}

impl<K> KeyedInFlight<K, QuantaClock>
where
    K: Key,
{
    /// At most `limit` permits in flight per key, at most `max_keys` keys held.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] / [`ConfigError::LimitTooLarge`] (above
    /// [`MAX_IN_FLIGHT_LIMIT`](super::MAX_IN_FLIGHT_LIMIT)); [`ConfigError::Invalid`] for
    /// `max_keys = 0`.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// assert!(KeyedInFlight::<u64>::new(20, 100_000).is_ok());
    /// assert!(KeyedInFlight::<u64>::new(20, 0).is_err());
    /// ```
    pub fn new(limit: u32, max_keys: usize) -> Result<Self, ConfigError> {
        Self::with_clock(limit, max_keys, QuantaClock::new())
    }
}

impl<K, C> KeyedInFlight<K, C>
where
    K: Key,
    C: Clock,
{
    /// As [`new`](KeyedInFlight::new), on `clock` (it only schedules the map's sweeps).
    ///
    /// # Errors
    /// As [`new`](KeyedInFlight::new).
    ///
    /// ```
    /// use floodgate::ManualClock;
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u32, _> = KeyedInFlight::with_clock(1, 8, ManualClock::new())?;
    /// assert!(keyed.try_acquire(&1, 1)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(limit: u32, max_keys: usize, clock: C) -> Result<Self, ConfigError> {
        validate_limit(limit, u64::from(MAX_IN_FLIGHT_LIMIT))?;
        Ok(KeyedInFlight {
            map: sharded_map(max_keys, None, WhenFull::DenyNewKeys)?,
            limit: AtomicU32::new(limit),
            clock,
        })
    }

    /// Takes `n` permits for `key` if `key` has room; never blocks. `Ok(None)` when the key is at
    /// its limit, or is new and its shard is full of keys with requests in progress.
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`]; [`AcquireError::ExceedsCapacity`] for `n` above the limit.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<String> = KeyedInFlight::new(3, 100)?;
    /// let permit = keyed.try_acquire("alice", 3)?.expect("free");
    /// assert_eq!(permit.permits(), 3);
    /// assert!(keyed.try_acquire("alice", 4).is_err()); // above the limit: never
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q, n: u32) -> Result<Option<KeyedPermit>, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Ok(self.take(key, n)?.1)
    }

    /// [`try_acquire`](Self::try_acquire) with its decision: the key's limit and the permits
    /// left for it after this take. A new key refused by a shard full of busy keys: none left,
    /// and a `retry_after` of the time until the map next looks for a drained key (at most
    /// [`KEYED_SWEEP_BACKOFF_NANOS`]), before which it refuses the key again whatever the busy
    /// keys do (as [`Keyed`](crate::Keyed) with [`WhenFull::DenyNewKeys`] answers with the first
    /// moment a slot can free up). No reset: a count frees when a request ends, not at a time.
    pub(crate) fn take<Q>(
        &self,
        key: &Q,
        n: u32,
    ) -> Result<(Decision, Option<KeyedPermit>), AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Relaxed: the limit is a configuration value on its own; a request judged by the limit
        // before or after a concurrent change is ordered before or after it.
        let limit = self.limit.load(Ordering::Relaxed);
        check_permits(n, u64::from(limit))?;
        let taken = self.map.access(key, &self.clock, &(), |slot, _, _| {
            let decision = update(&slot.0.in_flight, |count| decide(count, n, limit));
            let permit = decision.is_allowed().then(|| KeyedPermit {
                count: Arc::clone(&slot.0),
                permits: n,
            });
            (decision, permit)
        });
        Ok(taken.unwrap_or_else(|refused| {
            (
                Decision::deny(u64::from(limit), 0, refused.retry_after, 0),
                None,
            )
        }))
    }

    /// Permits in flight for `key` now (0 for a key not held).
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u8> = KeyedInFlight::new(3, 100)?;
    /// let _p = keyed.try_acquire(&7, 2)?;
    /// assert_eq!((keyed.in_flight(&7), keyed.in_flight(&8)), (2, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.peek(key, &self.clock, |slot, _, _| {
            // Acquire: pairs with the permits' Release `fetch_sub`.
            slot.map_or(0, |slot| slot.0.in_flight.load(Ordering::Acquire))
        })
    }

    /// Changes every key's limit live. Lowering it keeps the permits held; a key above the new
    /// limit admits nothing until it drains below it.
    ///
    /// # Errors
    /// As [`new`](KeyedInFlight::new); the old limit then stays.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u8> = KeyedInFlight::new(1, 100)?;
    /// keyed.set_limit(2)?;
    /// assert_eq!(keyed.limit(), 2);
    /// assert!(keyed.try_acquire(&0, 2)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        validate_limit(limit, u64::from(MAX_IN_FLIGHT_LIMIT))?;
        // Relaxed: as the load in `try_acquire`.
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    /// The per-key limit in force.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// assert_eq!(KeyedInFlight::<u8>::new(20, 10).unwrap().limit(), 20);
    /// ```
    pub fn limit(&self) -> u32 {
        // Relaxed: as the load in `try_acquire`.
        self.limit.load(Ordering::Relaxed)
    }

    /// Drops every key with nothing in flight; returns how many.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u8> = KeyedInFlight::new(1, 100)?;
    /// drop(keyed.try_acquire(&1, 1)?);
    /// let _held = keyed.try_acquire(&2, 1)?;
    /// assert_eq!(keyed.retain_busy(), 1); // key 1 drained; key 2 stays
    /// assert_eq!(keyed.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retain_busy(&self) -> usize {
        self.map.retain_recent(&self.clock, &())
    }

    /// Keys held now.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u8> = KeyedInFlight::new(1, 100)?;
    /// let _p = keyed.try_acquire(&1, 1)?;
    /// assert_eq!(keyed.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// assert!(KeyedInFlight::<u8>::new(1, 100).unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map's counters (keys held, idle keys dropped, new keys refused, sweeps). Takes no lock
    /// (see [`KeyedStats`] for what a scrape concurrent with inserts reads).
    ///
    /// ```
    /// use floodgate::ManualClock;
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u8, _> = KeyedInFlight::with_clock(1, 1, ManualClock::new())?;
    /// let _busy = keyed.try_acquire(&1, 1)?;
    /// assert!(keyed.try_acquire(&2, 1)?.is_none()); // full of busy keys
    /// assert_eq!(keyed.stats().refused_new_keys, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.map.stats()
    }
}

/// Admit iff `count + n ≤ limit`; a denial writes nothing.
fn decide(count: u64, n: u32, limit: u32) -> Step {
    let limit = u64::from(limit);
    let free = limit.saturating_sub(count);
    if u64::from(n) > free {
        return Step::deny(Decision::deny(limit, free, 1, 0));
    }
    Step::allow(
        count + u64::from(n),
        Decision::allow(limit, free - u64::from(n), 0),
    )
}

/// Permits held for one key of a [`KeyedInFlight`], given back to that key when dropped (also
/// on a panic or a cancelled future). `'static`: it owns a share of the key's counter.
///
/// ```
/// use floodgate::concurrency::KeyedInFlight;
/// let keyed: KeyedInFlight<String> = KeyedInFlight::new(1, 10)?;
/// let permit = keyed.try_acquire("k", 1)?.unwrap();
/// std::thread::spawn(move || drop(permit)).join().unwrap();
/// assert_eq!(keyed.in_flight("k"), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a permit is given back as soon as it is dropped"]
#[derive(Debug)]
pub struct KeyedPermit {
    count: Arc<KeyCount>,
    permits: u32,
}

impl KeyedPermit {
    /// Permits held.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// let keyed: KeyedInFlight<u8> = KeyedInFlight::new(5, 10)?;
    /// assert_eq!(keyed.try_acquire(&1, 4)?.unwrap().permits(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }
}

impl Drop for KeyedPermit {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the key's next taker (`update`), so the holder's
        // work happens before. Never borrows: these permits were added by this permit's take.
        self.count
            .in_flight
            .fetch_sub(u64::from(self.permits), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    const MS: u64 = 1_000_000;

    /// A new key refused by a shard full of busy keys is told to come back when the map will next
    /// look for a drained key (its sweep back-off), not in 1 ns: before that moment the map
    /// refuses it whatever the busy keys do, so an earlier retry is refused again.
    #[test]
    fn a_refused_new_key_is_told_when_the_map_next_looks_for_room() {
        let clock = ManualClock::new();
        let keyed: KeyedInFlight<u32, _> = KeyedInFlight::with_clock(1, 1, clock.clone()).unwrap();
        let busy = keyed.take(&1, 1).unwrap().1.expect("room");
        let (refused, none) = keyed.take(&2, 1).unwrap();
        assert!(none.is_none());
        assert_eq!(refused, Decision::deny(1, 0, KEYED_SWEEP_BACKOFF_NANOS, 0));
        clock.set(400_000);
        drop(busy); // drained, but the map looks only at the back-off's end
        let (refused, none) = keyed.take(&2, 1).unwrap();
        assert!(none.is_none());
        assert_eq!(refused.retry_after().as_nanos(), 600_000);
        clock.set(MS - 1);
        assert_eq!(keyed.take(&2, 1).unwrap().0.retry_after().as_nanos(), 1);
        clock.set(MS);
        assert!(
            keyed.take(&2, 1).unwrap().1.is_some(),
            "told 1 ms: room at 1 ms"
        );
        // A sweep that finds every key busy schedules the next one a back-off later.
        let (refused, _) = keyed.take(&3, 1).unwrap();
        assert_eq!(
            refused.retry_after().as_nanos(),
            u128::from(KEYED_SWEEP_BACKOFF_NANOS)
        );
        assert_eq!(keyed.stats().refused_new_keys, 4);
    }
}
