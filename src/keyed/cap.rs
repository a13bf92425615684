//! The cap on keys: what a full shard does with a new key ([`WhenFull`]) and the counters of
//! what the map did ([`KeyedStats`]).

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
/// `stats()` takes no lock: each shard's counters and key count are atomics written under the
/// shard's mutex and read without it, so a metrics scrape neither waits on inserts nor delays
/// them. A scrape concurrent with inserts reads the shards one after the other: its fields are
/// not a snapshot of the map at one moment, but each counter never goes back from one scrape to
/// a later one, an event that happened before the scrape (on its thread, or ordered before it)
/// is counted, and within a shard a key a sweep or an eviction dropped is never counted both in
/// `keys` and as dropped.
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
    /// Idle keys dropped (by sweeps, [`Keyed::retain_recent`](crate::Keyed::retain_recent), or
    /// eviction).
    pub evicted_idle: u64,
    /// Live keys evicted to make room ([`WhenFull::EvictLeastUsed`]); each may change decisions.
    pub evicted_live: u64,
    /// Requests from new keys denied for lack of room ([`WhenFull::DenyNewKeys`]).
    pub refused_new_keys: u64,
    /// Shard sweeps run: passes that judge every key of one shard and drop the idle ones, each
    /// counted once, whether run because some key could be idle, to pick the live keys an
    /// eviction batch takes ([`WhenFull::EvictLeastUsed`]; such a pass drops idle keys first), or
    /// by [`Keyed::retain_recent`](crate::Keyed::retain_recent) (one per shard). Also the
    /// judging passes a new key's insert runs on a shard below its cap, whether they drop the
    /// idle keys (at most a quarter of the keys live) or keep them all.
    pub sweeps: u64,
}
