//! The sharded key → slot map behind [`Keyed`](super::Keyed) and
//! [`PenalizedKeyed`](super::PenalizedKeyed): ahash-sharded `RwLock<HashMap>`s, the cap, the
//! sweeps and the eviction order.
//!
//! Protocol (what the loom model in `loom-tests/tests/keyed.rs` checks):
//! - A check on a key that exists takes its shard's **read** lock, reads the clock *under that
//!   lock*, and updates the slot's word(s) with [`crate::limiter::update`]; several checks on one
//!   shard run in parallel.
//! - Inserting a key, sweeping and evicting take the shard's **write** lock, and read the clock
//!   under it. So an eviction at time `t` and a check on the same key are ordered by the lock: a
//!   check that runs before it sees the old word; one that runs after it read the clock after the
//!   evictor did (`now ≥ t` on a clock that is monotonic across threads), and since the evicted
//!   word was idle at `t`, it is idle at `now` too: the fresh word it starts from decides exactly
//!   as the old one would have.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use crossbeam_utils::CachePadded;

#[cfg(floodgate_loom)]
use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(floodgate_loom))]
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{KeyedStats, WhenFull};
use crate::clock::{Clock, MAX_CLOCK_LAG_NANOS};
use crate::sync::AtomicU64;

/// Most keys a shard holds when the shard count is chosen automatically: bounds the cost of one
/// sweep (a sweep looks at every key of one shard).
pub(crate) const KEYS_PER_SHARD_TARGET: usize = 4096;

/// Whether forgetting a slot at a given time would change a later decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Equal to a fresh slot: dropping it changes nothing.
    Idle,
    /// Holds state a fresh slot would not.
    Live {
        /// Permits the slot holds (what forgetting it would hand back); the eviction order.
        used: u64,
        /// Nanoseconds until it becomes idle if nobody touches it (`Decision::reset_after`).
        idle_in: u64,
    },
}

/// What a key maps to: one or more state words.
/// `R` is the configuration that gives the words meaning (the algorithm, the penalty).
pub(crate) trait KeySlot<R>: Default + Send + Sync + 'static {
    /// Whether the slot is idle at `now`.
    fn liveness(&self, rules: &R, now: u64) -> Liveness;
}

/// A new key could not get a slot: its shard is full of live keys and the policy is
/// [`WhenFull::DenyNewKeys`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Refused {
    /// Nanoseconds until some key of the shard may become idle (at least 1).
    pub(crate) retry_after: u64,
}

struct Shard<K, S> {
    map: HashMap<K, S, ahash::RandomState>,
    /// No key of this shard becomes idle before this time (a lower bound, kept by every sweep
    /// and insert): before it, a sweep would free nothing.
    next_idle_at: u64,
    /// Live keys to evict next under [`WhenFull::EvictLeastUsed`], fewest permits held last.
    victims: Vec<K>,
    inserts_since_sweep: usize,
    len_after_sweep: usize,
    evicted_idle: u64,
    evicted_live: u64,
    refused_new_keys: u64,
    sweeps: u64,
    /// The latest clock read at which a sweep or an eviction dropped a key of this shard. A key
    /// inserted afterwards is first decided no earlier than this (within the lag horizon): a
    /// dropped key was idle at the dropper's time, so a checker whose clock lags the dropper's
    /// must not start it afresh at its own, earlier time (where the old state may still have been
    /// live).
    dropped_at: u64,
}

/// One shard: its lock and map, and the time floor of its keys' state words (see
/// [`limiter::update_at`](crate::limiter::update_at)), on its own cache line(s).
struct ShardCell<K, S> {
    lock: RwLock<Shard<K, S>>,
    floor: AtomicU64,
}

impl<K, S> std::ops::Deref for ShardCell<K, S> {
    type Target = RwLock<Shard<K, S>>;

    fn deref(&self) -> &Self::Target {
        &self.lock
    }
}

type LockedShard<K, S> = CachePadded<ShardCell<K, S>>;

/// The sharded map. Rules (the algorithm, the penalty) are passed in by the owner.
pub(crate) struct ShardedMap<K, S> {
    shards: Box<[LockedShard<K, S>]>,
    hasher: ahash::RandomState,
    shard_mask: usize,
    shard_cap: usize,
    when_full: WhenFull,
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // A panic in a user's Hash/Eq poisons the lock; the map itself is never left half-updated.
    lock.read().unwrap_or_else(|poison| poison.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|poison| poison.into_inner())
}

impl<K, S> ShardedMap<K, S> {
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
}

impl<K, S> ShardedMap<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Default + Send + Sync + 'static,
{
    /// `shards` must be a power of two no larger than `max_keys` (checked by the builder).
    pub(crate) fn new(max_keys: usize, shards: usize, when_full: WhenFull) -> Self {
        debug_assert!(shards.is_power_of_two() && shards <= max_keys);
        let hasher = ahash::RandomState::new();
        let shards_vec: Vec<_> = (0..shards)
            .map(|_| {
                CachePadded::new(ShardCell {
                    floor: AtomicU64::new(0),
                    lock: RwLock::new(Shard {
                        map: HashMap::with_hasher(hasher.clone()),
                        next_idle_at: u64::MAX,
                        victims: Vec::new(),
                        inserts_since_sweep: 0,
                        len_after_sweep: 0,
                        evicted_idle: 0,
                        evicted_live: 0,
                        refused_new_keys: 0,
                        sweeps: 0,
                        dropped_at: 0,
                    }),
                })
            })
            .collect();
        ShardedMap {
            shards: shards_vec.into_boxed_slice(),
            hasher,
            shard_mask: shards - 1,
            shard_cap: max_keys / shards,
            when_full,
        }
    }

    #[inline]
    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> &ShardCell<K, S> {
        // Bits 32.. pick the shard: hashbrown indexes buckets by the low bits and tags them with
        // the top 7, so both stay fully random inside a shard.
        let hash = self.hasher.hash_one(key);
        &self.shards[(hash >> 32) as usize & self.shard_mask]
    }

    /// Runs `run(slot, now, floor)` on `key`'s slot, inserting a fresh slot if the key is new and
    /// there is room (see the module docs for the locking protocol). Reads the clock exactly once.
    /// `floor` is the shard's time floor, for algorithms that need one.
    #[inline]
    pub(crate) fn access<Q, R, T>(
        &self,
        key: &Q,
        clock: &impl Clock,
        rules: &R,
        run: impl FnOnce(&S, u64, &AtomicU64) -> T,
    ) -> Result<T, Refused>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        S: KeySlot<R>,
    {
        let shard = self.shard_of(key);
        {
            let guard = read(shard);
            if let Some(slot) = guard.map.get(key) {
                return Ok(run(slot, clock.now_nanos(), &shard.floor));
            }
        }
        let mut guard = write(shard);
        let now = clock.now_nanos();
        if let Some(slot) = guard.map.get(key) {
            // Inserted by another thread between our two locks.
            return Ok(run(slot, now, &shard.floor));
        }
        self.make_room(&mut guard, rules, now, clock)?;
        let floor = &shard.floor;
        let shard = &mut *guard;
        // A fresh slot is decided no earlier than the latest drop in this shard: the key may be
        // one that was dropped as idle on a clock ahead of ours. A drop time beyond the lag
        // horizon is a leaping clock's and is not obeyed.
        let now = if shard.dropped_at > now && shard.dropped_at - now <= MAX_CLOCK_LAG_NANOS {
            shard.dropped_at
        } else {
            now
        };
        let slot = shard.map.entry(key.to_owned()).or_default();
        let result = run(slot, now, floor);
        if let Liveness::Live { idle_in, .. } = slot.liveness(rules, now) {
            shard.next_idle_at = shard.next_idle_at.min(now.saturating_add(idle_in));
        }
        shard.inserts_since_sweep += 1;
        Ok(result)
    }

    /// Runs `run(slot, now)` if `key` is tracked; inserts nothing.
    pub(crate) fn peek<Q, R>(
        &self,
        key: &Q,
        clock: &impl Clock,
        run: impl FnOnce(Option<&S>, u64, &AtomicU64) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard_of(key);
        let guard = read(shard);
        run(guard.map.get(key), clock.now_nanos(), &shard.floor)
    }

    /// Frees one slot in a full shard, or sweeps a growing one. Errs when the shard is full of
    /// live keys and the policy refuses new keys.
    fn make_room<R>(
        &self,
        shard: &mut Shard<K, S>,
        rules: &R,
        now: u64,
        clock: &impl Clock,
    ) -> Result<(), Refused>
    where
        S: KeySlot<R>,
    {
        let full = shard.map.len() >= self.shard_cap;
        let grown = shard.inserts_since_sweep >= shard.len_after_sweep.max(64);
        if !full && !grown {
            return Ok(());
        }
        // Dropping a key judges it idle at `now`: a second read guards that judgement against a
        // one-shot leaping read (which would drop keys live at the present time).
        let now = judge_time(now, clock);
        // Before `next_idle_at` no key is idle, so a sweep would find nothing: skipping it is
        // what keeps a flood of new keys against a full shard of live keys O(1) per call.
        if now >= shard.next_idle_at {
            sweep(shard, rules, now);
        }
        if shard.map.len() < self.shard_cap {
            return Ok(());
        }
        match self.when_full {
            WhenFull::DenyNewKeys => {
                shard.refused_new_keys += 1;
                Err(Refused {
                    retry_after: shard.next_idle_at.saturating_sub(now).max(1),
                })
            }
            WhenFull::EvictLeastUsed => {
                loop {
                    if shard.victims.is_empty() {
                        pick_victims(shard, rules, now);
                    }
                    let Some(victim) = shard.victims.pop() else {
                        // Unreachable with shard_cap ≥ 1: a full shard has a key to pick.
                        return Err(Refused { retry_after: 1 });
                    };
                    if let Some(slot) = shard.map.remove(&victim) {
                        shard.dropped_at = latest_drop(shard.dropped_at, now);
                        match slot.liveness(rules, now) {
                            Liveness::Idle => shard.evicted_idle += 1,
                            Liveness::Live { .. } => shard.evicted_live += 1,
                        }
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Drops every idle key of every shard; returns how many.
    pub(crate) fn retain_recent<R>(&self, clock: &impl Clock, rules: &R) -> usize
    where
        S: KeySlot<R>,
    {
        self.shards
            .iter()
            .map(|shard| {
                let mut guard = write(shard);
                let now = judge_time(clock.now_nanos(), clock);
                sweep(&mut guard, rules, now)
            })
            .sum()
    }

    /// Gives back the memory of dropped keys (after [`retain_recent`](Self::retain_recent)).
    pub(crate) fn shrink_to_fit(&self) {
        for shard in self.shards.iter() {
            let mut guard = write(shard);
            guard.map.shrink_to_fit();
            guard.victims.shrink_to_fit();
        }
    }

    /// Forgets `key`; returns whether it was tracked.
    pub(crate) fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        write(self.shard_of(key)).map.remove(key).is_some()
    }

    /// Makes the next insert into every shard sweep again (after a configuration change that may
    /// bring idle times forward).
    pub(crate) fn forget_idle_bounds(&self) {
        for shard in self.shards.iter() {
            let mut guard = write(shard);
            guard.next_idle_at = 0;
            guard.victims.clear();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| read(shard).map.len()).sum()
    }

    /// Slots the shards' maps have room for (their memory, in keys).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| read(shard).map.capacity())
            .sum()
    }

    pub(crate) fn stats(&self) -> KeyedStats {
        let mut stats = KeyedStats {
            keys: 0,
            max_keys: self.max_keys(),
            evicted_idle: 0,
            evicted_live: 0,
            refused_new_keys: 0,
            sweeps: 0,
        };
        for shard in self.shards.iter() {
            let guard = read(shard);
            stats.keys += guard.map.len();
            stats.evicted_idle += guard.evicted_idle;
            stats.evicted_live += guard.evicted_live;
            stats.refused_new_keys += guard.refused_new_keys;
            stats.sweeps += guard.sweeps;
        }
        stats
    }
}

/// The shard's latest drop time after a drop at `now`: the later of the two, except that a
/// recorded time beyond the lag horizon (a leaping read's) is replaced, so one leap cannot turn
/// the protection off until real time reaches it.
fn latest_drop(recorded: u64, now: u64) -> u64 {
    if recorded > now.saturating_add(MAX_CLOCK_LAG_NANOS) {
        now
    } else {
        recorded.max(now)
    }
}

/// The time a sweep or an eviction judges idleness at: the earlier of `first` and a second
/// read, so one leaping clock read cannot make keys that are live now look idle. (Sweeps are off
/// the hot path; the second read costs one clock read per sweep or eviction.)
fn judge_time(first: u64, clock: &impl Clock) -> u64 {
    first.min(clock.now_nanos())
}

/// Drops the shard's idle keys and recomputes its `next_idle_at`. Returns how many it dropped.
fn sweep<K: Hash + Eq, R, S: KeySlot<R>>(shard: &mut Shard<K, S>, rules: &R, now: u64) -> usize {
    let before = shard.map.len();
    let mut next_idle_at = u64::MAX;
    shard.map.retain(|_, slot| match slot.liveness(rules, now) {
        Liveness::Idle => false,
        Liveness::Live { idle_in, .. } => {
            next_idle_at = next_idle_at.min(now.saturating_add(idle_in));
            true
        }
    });
    let dropped = before - shard.map.len();
    shard.next_idle_at = next_idle_at;
    shard.inserts_since_sweep = 0;
    shard.len_after_sweep = shard.map.len();
    shard.evicted_idle += dropped as u64;
    shard.sweeps += 1;
    if dropped > 0 {
        shard.dropped_at = latest_drop(shard.dropped_at, now);
        // Victims picked earlier may be gone; pick afresh when next needed.
        shard.victims.clear();
        give_back(shard);
    }
    dropped
}

/// Below this many slots of capacity a shard keeps its memory (shrinking it would only be
/// undone by the next few inserts).
const SHRINK_FLOOR: usize = 256;

/// After a sweep, hands a shard's memory back once it holds less than a quarter of what it has
/// room for (a flood of keys gone idle), keeping room for twice what is left: the map follows
/// its keys down as it followed them up, with no explicit `shrink()`, and the 4× hysteresis keeps
/// a shard whose size swings within 2× from reallocating. Done by the sweep, under the write lock
/// it already holds, at a cost in proportion to the keys kept (the sweep's own cost).
fn give_back<K: Hash + Eq, S>(shard: &mut Shard<K, S>) {
    let (len, capacity) = (shard.map.len(), shard.map.capacity());
    if capacity > SHRINK_FLOOR && capacity / 4 > len {
        shard.map.shrink_to((2 * len).max(SHRINK_FLOOR / 2));
        shard.victims.shrink_to_fit();
    }
}

/// Fills `victims` with the keys holding the fewest permits, a quarter of the shard at a time
/// (so picking costs O(1) amortised per eviction), the fewest last so `pop` takes it first.
fn pick_victims<K: Hash + Eq + Clone, R, S: KeySlot<R>>(
    shard: &mut Shard<K, S>,
    rules: &R,
    now: u64,
) {
    let mut candidates: Vec<(u64, &K)> = shard
        .map
        .iter()
        .map(|(key, slot)| match slot.liveness(rules, now) {
            Liveness::Idle => (0, key),
            Liveness::Live { used, .. } => (used, key),
        })
        .collect();
    let batch = (candidates.len() / 4).clamp(1, 1024);
    if candidates.len() > batch {
        candidates.select_nth_unstable_by_key(batch - 1, |&(used, _)| used);
        candidates.truncate(batch);
    }
    // Most permits first: `pop` takes the fewest.
    candidates.sort_unstable_by_key(|&(used, _)| std::cmp::Reverse(used));
    let chosen: Vec<K> = candidates.into_iter().map(|(_, key)| key.clone()).collect();
    shard.victims = chosen;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_time_beyond_the_horizon_is_replaced_not_kept() {
        let now = 100 * MAX_CLOCK_LAG_NANOS;
        assert_eq!(latest_drop(now - 5, now), now);
        assert_eq!(latest_drop(now + 5, now), now + 5); // a clock ahead within the horizon
        // A leaping read's drop time would otherwise switch the protection off until real time
        // reaches it (every later drop absorbed by the max).
        assert_eq!(latest_drop(now + MAX_CLOCK_LAG_NANOS + 1, now), now);
    }
}
