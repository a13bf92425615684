//! [`DenyCache`]: after the store denies a key, deny that key locally until the store's
//! `retry_after`, without a round trip.

use std::fmt;

use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::decision::{ConfigError, Decision};
use crate::keyed::{HashedKey, KeySlot, Liveness, ShardedMap, WhenFull, sharded_map};
use crate::sync::{AtomicU64, Ordering};

/// Keys a [`DenyCache`] holds unless told otherwise.
pub const DENY_CACHE_MAX_KEYS: usize = 65_536;

const N_BITS: u32 = 24;
const N_MASK: u64 = (1 << N_BITS) - 1;
/// 40 bits of milliseconds since the cache was made (34 years; later times saturate).
const TIME_MAX: u64 = (1 << (64 - N_BITS)) - 1;
const NANOS_PER_MS: u64 = 1_000_000;

/// One key's denial, in one word: the permits denied (bits 0..24; 0 = none) and the time, in
/// whole milliseconds since the cache's base, until which a request for as many is denied
/// (rounded down, so the cache never denies past the store's own `retry_after`).
/// `reset` is the store's `reset_after` deadline in the same milliseconds, rounded down too, so
/// a local `reset_after` is never later than the store's (rounded up, it could read up to a
/// millisecond past it: a 60 s window reporting a reset 60.0004 s away). It only informs the
/// local denial's `reset_after`, so a torn read of the pair is harmless.
#[derive(Default)]
struct DenySlot {
    word: AtomicU64,
    reset: AtomicU64,
}

/// What gives a slot's time meaning.
struct Base(u64);

impl Base {
    fn ms(&self, now: u64) -> u64 {
        (now.saturating_sub(self.0) / NANOS_PER_MS).min(TIME_MAX)
    }

    fn nanos(&self, ms: u64) -> u64 {
        self.0.saturating_add(ms.saturating_mul(NANOS_PER_MS))
    }
}

impl KeySlot<Base> for DenySlot {
    fn liveness(&self, base: &Base, now: u64) -> Liveness {
        // Relaxed: the word is self-contained; it guards no other memory (all its writes are
        // single stores of whole words).
        let until = base.nanos(self.word.load(Ordering::Relaxed) >> N_BITS);
        if until <= now {
            Liveness::Idle
        } else {
            Liveness::Live {
                used: 1,
                idle_in: until - now,
            }
        }
    }

    const COPIES: bool = true;

    #[inline(always)]
    fn copy(&self) -> Option<Self> {
        // Relaxed (both): a table the rebuild owns (see `KeySlot::copy`).
        Some(DenySlot {
            word: AtomicU64::new(self.word.load(Ordering::Relaxed)),
            reset: AtomicU64::new(self.reset.load(Ordering::Relaxed)),
        })
    }
}

/// A local cache of a distributed limiter's denials: once the store denies `n` permits for a key
/// with `retry_after`, requests for **`n` or more** permits on that key are denied locally until
/// then, without a round trip ([`check`](Self::check)); smaller requests still go to the store.
/// Sound because a store that cannot grant `n` before `retry_after` cannot grant more either.
///
/// The local denial has `remaining = 0` and a `retry_after` that shrinks as the clock moves, to
/// the store's deadline (rounded down to the millisecond, measured from a clock read taken
/// *before* the store call, so it never outlasts the store's). Memory is bounded: at most
/// `max_keys` keys in a sharded map (no global lock; lookups take one shard's read lock);
/// expired denials are dropped first, then any, when a shard is full. A key is held as its
/// 128-bit hash ([`HashedKey`](crate::keyed::HashedKey)), so an entry costs the same bytes
/// whatever the key's length. Each local denial is
/// counted ([`denied_locally`](Self::denied_locally)).
///
/// ```
/// use floodgate::backend::DenyCache;
/// use floodgate::{Clock, Decision, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let cache = DenyCache::with_clock(1_000, clock.clone())?;
/// let asked_at = clock.now_nanos();
/// cache.record("alice", 2, &Decision::deny(10, 0, 3_000_000_000, 3_000_000_000), asked_at);
/// assert!(cache.check("alice", 1, 10).is_none()); // fewer permits: ask the store
/// let local = cache.check("alice", 2, 10).expect("denied locally");
/// assert_eq!((local.is_allowed(), local.remaining()), (false, 0));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(cache.check("alice", 5, 10).unwrap().retry_after(), Duration::from_secs(2));
/// clock.advance(Duration::from_secs(2));
/// assert!(cache.check("alice", 2, 10).is_none()); // over: ask the store again
/// assert_eq!(cache.denied_locally(), 2);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
pub struct DenyCache<C = QuantaClock> {
    /// Keys held as 128-bit hashes ([`HashedKey`]): a key costs the same whatever its length
    /// (a client controls it), and two keys share a denial only if both 64-bit halves collide.
    map: ShardedMap<HashedKey, DenySlot>,
    base: Base,
    clock: C,
    denied_locally: AtomicU64,
}

impl<C> fmt::Debug for DenyCache<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenyCache")
            .field("max_keys", &self.map.max_keys())
            // Relaxed: a statistics snapshot.
            .field(
                "denied_locally",
                &self.denied_locally.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

impl DenyCache<QuantaClock> {
    /// A cache of at most `max_keys` keys on the default clock.
    ///
    /// # Errors
    /// As [`with_clock`](Self::with_clock).
    ///
    /// ```
    /// assert!(floodgate::backend::DenyCache::new(0).is_err());
    /// ```
    pub fn new(max_keys: usize) -> Result<Self, ConfigError> {
        Self::with_clock(max_keys, QuantaClock::new())
    }
}

impl<C: Clock> DenyCache<C> {
    /// A cache of at most `max_keys` keys whose deadlines run on `clock` (the clock the caller
    /// reads before each store call).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `max_keys = 0`.
    ///
    /// ```
    /// use floodgate::backend::DenyCache;
    /// use floodgate::ManualClock;
    /// let cache = DenyCache::with_clock(100, ManualClock::new())?;
    /// assert!(cache.is_empty());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_clock(max_keys: usize, clock: C) -> Result<Self, ConfigError> {
        let map = sharded_map(max_keys, None, WhenFull::EvictLeastUsed).map_err(|_| {
            ConfigError::Invalid {
                what: "deny cache max_keys",
                why: "must be at least 1 (0 given)",
            }
        })?;
        Ok(DenyCache {
            map,
            base: Base(clock.now_nanos()),
            clock,
            denied_locally: AtomicU64::new(0),
        })
    }

    /// The local denial for `n` permits on `key` of a limit of `limit`, if the store denied at
    /// least as few permits on it and its `retry_after` has not passed; `None`: ask the store.
    ///
    /// ```
    /// use floodgate::backend::DenyCache;
    /// use floodgate::ManualClock;
    /// let cache = DenyCache::with_clock(100, ManualClock::new())?;
    /// assert!(cache.check("nobody", 1, 10).is_none());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check(&self, key: &str, n: u32, limit: u64) -> Option<Decision> {
        let denial = self
            .map
            .peek(&HashedKey::from(key), &self.clock, |slot, now, _| {
                // Relaxed: as in `liveness`.
                let slot = slot?;
                let word = slot.word.load(Ordering::Relaxed);
                let denied_n = word & N_MASK;
                let until = self.base.nanos(word >> N_BITS);
                (denied_n != 0 && u64::from(n) >= denied_n && now < until).then(|| {
                    // Relaxed: as in `liveness`; see `DenySlot`.
                    let reset = self.base.nanos(slot.reset.load(Ordering::Relaxed));
                    let retry = until - now;
                    Decision::deny(limit, 0, retry, reset.saturating_sub(now).max(retry))
                })
            })?;
        // Relaxed: a statistics counter; no other memory depends on it.
        self.denied_locally.fetch_add(1, Ordering::Relaxed);
        Some(denial)
    }

    /// Remembers the store's `decision` for `n` permits on `key`, if it is a denial:
    /// `asked_at` is this cache's clock read taken before the store was called. Allowed
    /// decisions, denials shorter than a millisecond and `n` over 16,777,215 are not kept.
    ///
    /// ```
    /// use floodgate::backend::DenyCache;
    /// use floodgate::{Decision, ManualClock};
    /// let cache = DenyCache::with_clock(100, ManualClock::new())?;
    /// cache.record("k", 1, &Decision::allow(10, 9, 0), 0);
    /// assert!(cache.is_empty());
    /// cache.record("k", 1, &Decision::deny(10, 0, 5_000_000, 5_000_000), 0);
    /// assert_eq!(cache.len(), 1);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn record(&self, key: &str, n: u32, decision: &Decision, asked_at: u64) {
        if decision.is_allowed() || u64::from(n) > N_MASK {
            return;
        }
        let until_nanos = asked_at.saturating_add(duration_to_nanos(decision.retry_after()));
        let until = self.base.ms(until_nanos);
        if self.base.nanos(until) <= asked_at {
            return;
        }
        let word = (until << N_BITS) | u64::from(n);
        // Rounded down, as `until`: the store's reset is at least `reset_after` from `asked_at`.
        let reset = self
            .base
            .ms(asked_at.saturating_add(duration_to_nanos(decision.reset_after())));
        let key = HashedKey::from(key);
        let _ = self
            .map
            .access(&key, &self.clock, &self.base, |slot, _, _| {
                // Relaxed: as in `liveness`. The latest denial wins: each was true when made.
                slot.reset.store(reset, Ordering::Relaxed);
                // Relaxed: as above.
                slot.word.store(word, Ordering::Relaxed);
            });
    }

    /// A read of the cache's clock (for `record`'s `asked_at`).
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// Requests denied locally so far.
    ///
    /// ```
    /// assert_eq!(floodgate::backend::DenyCache::new(10)?.denied_locally(), 0);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn denied_locally(&self) -> u64 {
        // Relaxed: a statistics counter; no other memory depends on it.
        self.denied_locally.load(Ordering::Relaxed)
    }

    /// Keys held now (expired ones included until a sweep drops them).
    ///
    /// ```
    /// assert_eq!(floodgate::backend::DenyCache::new(10)?.len(), 0);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// assert!(floodgate::backend::DenyCache::new(10)?.is_empty());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys held (`max_keys`, rounded down to a multiple of the shard count).
    ///
    /// ```
    /// assert!(floodgate::backend::DenyCache::new(1000)?.max_keys() <= 1000);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.map.max_keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    #[test]
    fn denies_larger_requests_until_the_deadline_measured_from_the_ask() {
        let clock = ManualClock::starting_at(1_700_000_000_000_000_000);
        let cache = DenyCache::with_clock(16, clock.clone()).unwrap();
        let asked = clock.now_nanos();
        clock.advance(Duration::from_millis(7)); // the round trip
        cache.record("k", 3, &Decision::deny(10, 1, 100 * MS, 400 * MS), asked);
        assert!(cache.check("k", 2, 10).is_none());
        let d = cache.check("k", 3, 10).unwrap();
        assert_eq!(d.retry_after(), Duration::from_millis(93));
        assert_eq!((d.limit(), d.remaining()), (10, 0));
        assert_eq!(d.reset_after(), Duration::from_millis(393));
        clock.advance(Duration::from_millis(92));
        assert_eq!(
            cache.check("k", 9, 10).unwrap().retry_after(),
            Duration::from_millis(1)
        );
        clock.advance(Duration::from_millis(1));
        assert!(cache.check("k", 3, 10).is_none());
        assert!(cache.check("other", 3, 10).is_none());
        assert_eq!(cache.denied_locally(), 2);
    }

    #[test]
    fn a_local_denial_never_reads_later_than_the_stores() {
        // Asked off the millisecond grid, answered later: neither local field may exceed what
        // the store said, less the time since the ask (the store's deadlines are at least that
        // far from the ask). Rounding the reset up once made a 60 s log's reset read 60.0004 s.
        let minute = 60_000 * MS;
        for offset in [0, 1, 300_000, 400_000, MS - 1] {
            for elapsed in [0, 1, 100_000, 600_000, MS, 7 * MS + 3] {
                for (retry, reset) in [
                    (minute - 300_000, minute - 300_000),
                    (1_500_000, minute - 1),
                ] {
                    let clock = ManualClock::new();
                    let cache = DenyCache::with_clock(16, clock.clone()).unwrap();
                    clock.advance(Duration::from_nanos(offset));
                    let asked = clock.now_nanos();
                    cache.record("k", 1, &Decision::deny(3, 0, retry, reset), asked);
                    clock.advance(Duration::from_nanos(elapsed));
                    let case = format!("offset {offset}, elapsed {elapsed}, {retry}/{reset}");
                    let Some(local) = cache.check("k", 1, 3) else {
                        // Only once the rounded-down retry has passed.
                        assert!(elapsed + MS > retry, "{case}");
                        continue;
                    };
                    assert!(
                        local.retry_after() <= Duration::from_nanos(retry - elapsed),
                        "{case}"
                    );
                    assert!(
                        local.reset_after() <= Duration::from_nanos(reset - elapsed),
                        "{case}"
                    );
                    assert!(local.retry_after() <= local.reset_after(), "{case}");
                }
            }
        }
    }

    #[test]
    fn sub_millisecond_denials_and_huge_n_are_not_kept_and_times_round_down() {
        let clock = ManualClock::new();
        let cache = DenyCache::with_clock(16, clock.clone()).unwrap();
        cache.record("k", 1, &Decision::deny(10, 0, MS - 1, MS), 0);
        cache.record("big", 1 << 24, &Decision::deny(10, 0, 10 * MS, MS), 0);
        assert!(cache.is_empty());
        cache.record("k", 1, &Decision::deny(10, 0, 2 * MS - 1, MS), 0);
        assert_eq!(
            cache.check("k", 1, 10).unwrap().retry_after(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn memory_is_bounded_and_expired_keys_go_first() {
        let clock = ManualClock::new();
        let cache = DenyCache::with_clock(64, clock.clone()).unwrap();
        let long = Decision::deny(10, 0, 60_000 * MS, 60_000 * MS);
        for i in 0..10_000 {
            cache.record(&format!("k{i}"), 1, &long, clock.now_nanos());
            assert!(cache.len() <= 64);
        }
        // A hot key recorded last is held.
        cache.record("hot", 1, &long, clock.now_nanos());
        assert!(cache.check("hot", 1, 10).is_some());
        clock.advance(Duration::from_secs(61));
        let short = Decision::deny(10, 0, 1_000 * MS, 1_000 * MS);
        cache.record("fresh", 1, &short, clock.now_nanos());
        assert!(cache.check("fresh", 1, 10).is_some());
        assert!(cache.len() <= 64);
        assert!(DenyCache::with_clock(0, ManualClock::new()).is_err());
    }
}
