//! Keyed limiting: one limiter per key (client IP, user, API key) with bounded memory.
//!
//! [`Keyed`] keeps one packed state word per key for any [`Algorithm`](crate::Algorithm), in an ahash-sharded map
//! of open-addressing tables. A check on a key that exists takes no lock: it finds the key's
//! slot in its shard's current table and updates the word with the one CAS loop
//! (`crate::limiter::update`), writing nothing shared but that word and, for the time-word
//! algorithms (GCRA, token and leaky bucket), the map's time floor, raised by an admission whose
//! clock read is a grain (16,384 ns) past it, so about once per grain (a denial writes nothing).
//! New keys, sweeps and evictions take the shard's mutex.
//!
//! # Bounded memory
//! At most `max_keys` keys are held (split evenly across the shards). A key whose word is
//! [idle](crate::Algorithm::is_idle) decides exactly as a fresh key would, so dropping it changes no
//! decision; such keys are dropped by sweeps run inside calls when a shard is full (and only
//! once some key can be idle), or on demand by [`Keyed::retain_recent`]. Below the cap a new
//! key's insert judges its shard now and then (when its table has room for more than 64 keys,
//! after half its slots' worth of new keys, once some key live at the last judging can be idle,
//! and at most once per 10 s, the first time 10 s after the shard's first insert): if at most a
//! quarter of its keys are live, the idle ones are dropped; otherwise they are kept, so in a
//! shard in steady use a key used again after going idle is found in place. (A judging cannot
//! tell a flood gone idle from keys in use that are idle between their uses: the 10 s bound keeps
//! a key in use from being re-inserted more than once per 10 s.) A sweep sizes the shard's table to twice the keys it keeps, so the memory of a flood
//! gone idle comes back without [`Keyed::shrink`] when the next new keys reach its shards. A
//! shard no new key reaches keeps its table and its idle keys until [`Keyed::retain_recent`] or
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
//!   [`QuantaClock`](crate::QuantaClock) a check on one core can read a time up to the TSC skew behind an eviction on
//!   another, as for any limiter.
//! - The time-word algorithms (GCRA, token and leaky bucket) share one time floor per map: where
//!   clock reads disagree, a key may be decided at the latest clock read of another key's
//!   admission (at most `H` ahead), gaining at most min(capacity, ⌈lead × rate⌉) permits early,
//!   once. See [`Keyed`], "One time floor per map".
//! - A key evicted live (only under [`WhenFull::EvictLeastUsed`]) restarts fresh: it can be
//!   admitted at most the permits it held again. Each such eviction is counted.
//! - The sweep schedule uses [`Decision::reset_after`](crate::Decision::reset_after) of a non-consuming probe as "time until
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
mod cap;
mod facade;
mod hashed;
mod ip;
mod key;
mod limiter;
mod penalized;
mod penalty;
mod shards;
mod slot;

pub(crate) use builder::sharded_map;
pub use builder::{KeyedBuilder, MAX_SHARDS};
pub use cap::{KeyedStats, WhenFull};
pub use hashed::HashedKey;
pub use ip::{IpKey, IpKeyer};
pub use key::{AnyKey, Key, KeyCell, OnceLockCell, PairCell, PairKey, WordCell, WordKey};
pub use limiter::Keyed;
pub use penalized::PenalizedKeyed;
pub use penalty::PenaltyBox;
pub(crate) use shards::{KeySlot, Liveness, ShardedMap};
