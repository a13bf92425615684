//! [`KeyedFacade`]: the map-facing code of a keyed limiter, written once over its slot type.
//! [`Keyed`](crate::Keyed) (a [`WordSlot`](super::slot::WordSlot) per key) and
//! [`PenalizedKeyed`](crate::PenalizedKeyed) (a jailed slot per key) are thin public types over
//! it.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use super::cap::KeyedStats;
use super::key::Key;
use super::shards::{Missed, ShardedMap};
use super::slot::{LimiterSlot, Rules};
use crate::clock::Clock;
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::limiter::{Algorithm, read_at_floor};
use crate::sync::{AtomicU64, Ordering};

/// A keyed limiter over slots of type `S`: the map, the rules its slots are read with, the clock.
pub(crate) struct KeyedFacade<K: Key, S, A, E, C> {
    map: ShardedMap<K, S>,
    rules: Rules<A, E>,
    clock: C,
}

impl<K: Key, S, A, E, C> KeyedFacade<K, S, A, E, C> {
    pub(crate) fn new(map: ShardedMap<K, S>, rules: Rules<A, E>, clock: C) -> Self {
        KeyedFacade { map, rules, clock }
    }

    pub(crate) fn rules(&self) -> &Rules<A, E> {
        &self.rules
    }

    pub(crate) fn clock(&self) -> &C {
        &self.clock
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.map.max_keys()
    }

    pub(crate) fn shards(&self) -> usize {
        self.map.shard_count()
    }

    /// The public type's `Debug`: its name, the algorithm and the map's shape.
    pub(crate) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result
    where
        A: fmt::Debug,
    {
        f.debug_struct(name)
            .field("algorithm", &self.rules.algorithm)
            .field("max_keys", &self.map.max_keys())
            .field("shards", &self.map.shard_count())
            .finish_non_exhaustive()
    }

    /// The map itself (tests look at its memory).
    #[cfg(test)]
    pub(crate) fn map(&self) -> &ShardedMap<K, S> {
        &self.map
    }
}

impl<K, S, A, E, C> KeyedFacade<K, S, A, E, C>
where
    K: Key,
    S: LimiterSlot<A, E>,
    A: Algorithm,
    C: Clock,
{
    /// `try_acquire(key, 1)`, a failure (a capacity lowered to zero meanwhile) read as a denial
    /// with no time to wait.
    #[inline]
    pub(crate) fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let rules = &self.rules;
        // Carried out as plain words (`DecisionWords`): the `Decision` is built after the
        // table guard is let go, not moved across its drop.
        Decision::from_words(self.decide(
            key,
            1,
            |slot: &S, now, floor: &AtomicU64| {
                slot.acquire(rules, floor, now, &self.clock, 1)
                    .unwrap_or_else(|_| self.zero_capacity())
                    .to_words()
            },
            Decision::to_words,
            |_| self.zero_capacity().to_words(),
        ))
    }

    /// The denial [`check`](Self::check) reads a refused single permit as.
    #[cold]
    fn zero_capacity(&self) -> Decision {
        Decision::deny(self.rules.algorithm.limit(), 0, u64::MAX, u64::MAX)
    }

    /// Decides `n` permits on `key`'s slot (inserted if new and there is room); a new key refused
    /// for lack of room is denied until some key of its shard can be idle. A held key's slot
    /// checks `n` itself ([`LimiterSlot::acquire`]); a new key is inserted only for a valid `n`.
    #[inline]
    pub(crate) fn try_acquire<Q>(&self, key: &Q, n: u32) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let rules = &self.rules;
        self.decide(
            key,
            n,
            |slot: &S, now, floor: &AtomicU64| slot.acquire(rules, floor, now, &self.clock, n),
            Ok,
            Err,
        )
    }

    /// [`try_acquire`](Self::try_acquire) answering only whether the permits were taken
    /// ([`LimiterSlot::admit`]): the same decision and the same writes.
    #[inline]
    pub(crate) fn admit<Q>(&self, key: &Q, n: u32) -> Result<bool, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let rules = &self.rules;
        self.decide(
            key,
            n,
            |slot: &S, now, floor: &AtomicU64| slot.admit(rules, floor, now, &self.clock, n),
            |_| Ok(false),
            Err,
        )
    }

    /// Runs `decide` on `key`'s slot: lock-free if the key is held, else through
    /// [`insert`](Self::insert), where a new key refused for lack of room gets the answer
    /// `denied` makes of its denial, and an invalid `n` the one `failed` makes of the error.
    /// The one path of [`check`](Self::check), [`try_acquire`](Self::try_acquire) and
    /// [`admit`](Self::admit), each answering in its own type (`check` reads a failure as a
    /// denial inside `decide` itself, which keeps its hot path free of a `Result`).
    #[inline(always)]
    fn decide<Q, T>(
        &self,
        key: &Q,
        n: u32,
        decide: impl Fn(&S, u64, &AtomicU64) -> T + Copy,
        denied: impl FnOnce(Decision) -> T,
        failed: impl FnOnce(AcquireError) -> T,
    ) -> T
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.map.hash(key);
        self.map.get_or(key, hash, &self.clock, decide, |missed| {
            self.insert(key, hash, n, decide, denied, missed)
                .unwrap_or_else(failed)
        })
    }

    /// The path of a key the lock-free lookup did not find: checks `n`, then runs `decide` on
    /// the key's slot under the shard's mutex (inserting it if there is room); a new key refused
    /// for lack of room gets a denial until some key of its shard can be idle, as `denied`
    /// wraps it.
    #[inline(never)]
    fn insert<Q, T>(
        &self,
        key: &Q,
        hash: u64,
        n: u32,
        decide: impl FnOnce(&S, u64, &AtomicU64) -> T,
        denied: impl FnOnce(Decision) -> T,
        missed: Missed<K, S>,
    ) -> Result<T, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let algorithm = &self.rules.algorithm;
        algorithm.check_permits(n)?;
        let decided = self
            .map
            .insert_inline(key, hash, &self.clock, &self.rules, decide, missed);
        Ok(decided.unwrap_or_else(|refused| {
            denied(Decision::deny(
                algorithm.limit(),
                0,
                refused.retry_after,
                refused.retry_after,
            ))
        }))
    }

    /// The decision `n` permits would get now on `key`'s algorithm word, taking nothing and
    /// inserting nothing.
    pub(crate) fn peek<Q>(&self, key: &Q, n: u32) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let algorithm = &self.rules.algorithm;
        algorithm.check_permits(n)?;
        let (decision, absent, now) = self.map.peek(key, &self.clock, |slot, now, floor| {
            // Acquire: pairs with the Release CAS of `update_at`, so the floor read next is the
            // key's last writer's or later.
            let state = slot.map_or(0, |slot| slot.state().load(Ordering::Acquire));
            let now = if A::NEEDS_TIME_FLOOR {
                // After the Acquire load above.
                read_at_floor(now, floor)
            } else {
                now
            };
            (
                algorithm.decide(state, now, n).decision,
                slot.is_none(),
                now,
            )
        });
        // A key the map does not hold is decided as a fresh one only if it could be inserted:
        // in a shard full of live keys `try_acquire` refuses it, and so does `peek`.
        if absent
            && let Some(retry) = self
                .map
                .refuses_new_key(self.map.hash(key), &self.rules, now)
        {
            return Ok(Decision::deny(algorithm.limit(), 0, retry, retry));
        }
        Ok(decision)
    }

    /// Runs `run(slot, now)` on `key`'s slot if it is held; inserts nothing.
    pub(crate) fn peek_slot<Q, T>(&self, key: &Q, run: impl FnOnce(Option<&S>, u64) -> T) -> T
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map
            .peek(key, &self.clock, |slot, now, _floor| run(slot, now))
    }

    pub(crate) fn retain_recent(&self) -> usize {
        self.map.retain_recent(&self.clock, &self.rules)
    }

    pub(crate) fn shrink(&self) -> usize {
        let dropped = self.retain_recent();
        self.map.shrink_to_fit(&self.clock, &self.rules);
        dropped
    }

    pub(crate) fn forget<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove(key, &self.clock, &self.rules)
    }

    /// A clock read raised to the map's time floor: no earlier than any decision already
    /// published on any key, less the floor's grain (as `AtomicLimiter::change_instant`). A bucket's reconfiguration
    /// keeps the debt measured at its change instant, so an instant trailing the writers' (a
    /// setter on a core whose clock lags) would refill every key for the span it trails.
    pub(crate) fn change_instant(&self) -> u64 {
        let now = self.clock.now_nanos();
        if A::NEEDS_TIME_FLOOR {
            read_at_floor(now, self.map.floor())
        } else {
            now
        }
    }

    pub(crate) fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.reconfigure(|algorithm, now| algorithm.set_limit(limit, now))
    }

    /// Applies a live change to the algorithm at [`change_instant`](Self::change_instant).
    pub(crate) fn reconfigure(
        &self,
        change: impl FnOnce(&A, u64) -> Result<(), ConfigError>,
    ) -> Result<(), ConfigError> {
        change(&self.rules.algorithm, self.change_instant())?;
        // A new configuration may bring idle times forward: let the next inserts sweep.
        self.map.forget_idle_bounds();
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn stats(&self) -> KeyedStats {
        self.map.stats()
    }
}
