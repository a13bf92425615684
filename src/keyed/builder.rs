//! [`KeyedBuilder`]: the cap, the shards, the policy, the clock.

use std::hash::Hash;

use super::penalty::{PenalizedKeyed, PenaltyBox};
use super::shards::{KEYS_PER_SHARD_TARGET, ShardedMap};
use super::{Keyed, WhenFull};
use crate::clock::{Clock, QuantaClock};
use crate::decision::ConfigError;
use crate::limiter::Algorithm;

/// Builds a [`Keyed`] or [`PenalizedKeyed`] limiter. Defaults: [`QuantaClock`], 100,000 keys,
/// [`WhenFull::DenyNewKeys`], shards chosen from the core count and the cap.
///
/// ```
/// use floodgate::keyed::WhenFull;
/// use floodgate::{Gcra, Keyed, Rate};
/// let keyed: Keyed<u64, Gcra> = Keyed::builder(Gcra::new(Rate::per_second(10), 5)?)
///     .max_keys(1_000_000)
///     .when_full(WhenFull::EvictLeastUsed)
///     .shards(64)
///     .build()?;
/// assert_eq!(keyed.max_keys(), 1_000_000);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct KeyedBuilder<A, C = QuantaClock> {
    pub(super) algorithm: A,
    pub(super) clock: C,
    pub(super) max_keys: usize,
    pub(super) shards: Option<usize>,
    pub(super) when_full: WhenFull,
}

impl<A: Algorithm, C: Clock> KeyedBuilder<A, C> {
    /// Reads time from `clock` instead.
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<A, C2> {
        KeyedBuilder {
            algorithm: self.algorithm,
            clock,
            max_keys: self.max_keys,
            shards: self.shards,
            when_full: self.when_full,
        }
    }

    /// The most keys held at once (at least 1).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The number of shards: a power of two, at most `max_keys`. The cap is split evenly, so a
    /// shard is full at `max_keys / shards` keys.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// What a full shard of live keys does with a new key.
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    fn map<K, S>(&self) -> Result<ShardedMap<K, S>, ConfigError>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        S: Default + Send + Sync + 'static,
    {
        if self.max_keys == 0 {
            return Err(ConfigError::Invalid {
                what: "max_keys",
                why: "must be at least 1",
            });
        }
        let shards = match self.shards {
            Some(shards) if !shards.is_power_of_two() || shards > self.max_keys => {
                return Err(ConfigError::Invalid {
                    what: "shards",
                    why: "must be a power of two no larger than max_keys",
                });
            }
            Some(shards) => shards,
            None => default_shards(self.max_keys),
        };
        Ok(ShardedMap::new(self.max_keys, shards, self.when_full))
    }

    /// A keyed limiter for keys of type `K`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `max_keys = 0`, or a shard count that is not a power of two
    /// or exceeds `max_keys`.
    pub fn build<K>(self) -> Result<Keyed<K, A, C>, ConfigError>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
    {
        Ok(Keyed {
            map: self.map()?,
            algorithm: self.algorithm,
            clock: self.clock,
        })
    }

    /// A keyed limiter with a [`PenaltyBox`]: a key denied `penalty.strikes()` times within
    /// its span is blocked for its block time.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_with_penalty<K>(
        self,
        penalty: PenaltyBox,
    ) -> Result<PenalizedKeyed<K, A, C>, ConfigError>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
    {
        Ok(PenalizedKeyed::from_parts(
            self.map()?,
            self.algorithm,
            penalty,
            self.clock,
        ))
    }
}

/// Shards: 4 per core, at least enough that no shard holds more than
/// [`KEYS_PER_SHARD_TARGET`] keys (bounding a sweep), at most one per 8 keys of the cap.
fn default_shards(max_keys: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    let wanted = (cores * 4)
        .max(max_keys.div_ceil(KEYS_PER_SHARD_TARGET))
        .next_power_of_two()
        .min(1 << 16);
    let most = (max_keys / 8).max(1);
    // Largest power of two ≤ most.
    let most = 1usize << (usize::BITS - 1 - most.leading_zeros());
    wanted.min(most)
}
