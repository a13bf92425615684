//! [`KeyedBuilder`]: the cap, the shards, the policy, the clock.

use super::cap::WhenFull;
use super::facade::KeyedFacade;
use super::key::Key;
use super::limiter::Keyed;
use super::penalized::PenalizedKeyed;
use super::penalty::PenaltyBox;
use super::shards::{KEYS_PER_SHARD_TARGET, ShardedMap};
use super::slot::{LimiterSlot, Rules};
use crate::clock::{Clock, QuantaClock};
use crate::decision::ConfigError;
use crate::limiter::Algorithm;

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
    K: Key,
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
    algorithm: A,
    clock: C,
    max_keys: usize,
    shards: Option<usize>,
    when_full: WhenFull,
}

impl<A: Algorithm, C: Clock> KeyedBuilder<A, C> {
    /// Reads time from `clock` instead.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let keyed: Keyed<u8, _, _> =
    ///     Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?).clock(clock.clone()).build()?;
    /// assert!(keyed.try_acquire(&0, 1)?.is_allowed() && !keyed.try_acquire(&0, 1)?.is_allowed());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(keyed.try_acquire(&0, 1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// ```
    /// use floodgate::{ConfigError, FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let window = || FixedWindow::new(1, Duration::from_secs(1));
    /// let keyed: Keyed<u8, _> = Keyed::builder(window()?).max_keys(8).shards(1).build()?;
    /// assert_eq!(keyed.max_keys(), 8);
    /// assert!(Keyed::builder(window()?).max_keys(0).build::<u8>().is_err());
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The number of shards: a power of two, at most `max_keys` and at most [`MAX_SHARDS`]
    /// (65,536). Each shard is allocated up front with its first table: about 630 bytes on
    /// x86-64 (its mutex and counters, a cache-padded table header and record, 6 slots), 41 MB
    /// for 65,536 shards, before any key (`tests/keyed_shard_bytes.rs`). The cap is split
    /// evenly, so a shard is full at `max_keys / shards` keys, and its fixed part (about 520
    /// bytes, its first table's slots aside) is shared by those keys: a `u64` key costs about
    /// 21.5 bytes at the cap with 4,096 keys a shard, 29.9 with 64, 89.5 with 8.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let window = || FixedWindow::new(1, Duration::from_secs(1));
    /// let keyed: Keyed<u8, _> = Keyed::builder(window()?).max_keys(100).shards(8).build()?;
    /// assert_eq!((keyed.shards(), keyed.max_keys()), (8, 96)); // 12 keys a shard
    /// assert!(Keyed::builder(window()?).shards(3).build::<u8>().is_err()); // not a power of two
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// What a full shard of live keys does with a new key.
    ///
    /// ```
    /// use floodgate::keyed::WhenFull;
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// let keyed: Keyed<u8, _, _> = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .max_keys(1)
    ///     .shards(1)
    ///     .when_full(WhenFull::EvictLeastUsed)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// keyed.try_acquire(&1, 1)?;
    /// assert!(keyed.try_acquire(&2, 1)?.is_allowed()); // key 1 was evicted to make room
    /// assert_eq!(keyed.stats().evicted_live, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// The limiter's map, with `extra` beside the algorithm in its rules: the one place both
    /// `build`s go through.
    fn facade<K, S, E>(self, extra: E) -> Result<KeyedFacade<K, S, A, E, C>, ConfigError>
    where
        K: Key,
        S: LimiterSlot<A, E>,
    {
        let map = sharded_map(self.max_keys, self.shards, self.when_full)?;
        let rules = Rules {
            algorithm: self.algorithm,
            extra,
        };
        Ok(KeyedFacade::new(map, rules, self.clock))
    }

    /// A keyed limiter for keys of type `K`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `max_keys = 0`, or a shard count that is not a power of two
    /// or exceeds `max_keys`; [`ConfigError::TooLarge`] for more than [`MAX_SHARDS`] shards.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// let window = FixedWindow::new(5, Duration::from_secs(1))?;
    /// let keyed: Keyed<String, _> = Keyed::builder(window).build()?;
    /// assert_eq!(keyed.try_acquire("a", 2)?.remaining(), 3);
    /// assert!(keyed.max_keys() <= 100_000); // the default cap, rounded to the shards
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build<K>(self) -> Result<Keyed<K, A, C>, ConfigError>
    where
        K: Key,
    {
        Ok(Keyed {
            facade: self.facade(())?,
        })
    }

    /// A keyed limiter with a [`PenaltyBox`]: a key denied `penalty.strikes()` times within
    /// its span is blocked for its block time.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed, ManualClock, PenaltyBox};
    /// use std::time::Duration;
    /// let penalty = PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60))?;
    /// let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new())
    ///     .build_with_penalty::<u8>(penalty)?;
    /// assert_eq!(keyed.penalty().strikes(), 2);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn build_with_penalty<K>(
        self,
        penalty: PenaltyBox,
    ) -> Result<PenalizedKeyed<K, A, C>, ConfigError>
    where
        K: Key,
    {
        Ok(PenalizedKeyed {
            facade: self.facade(penalty)?,
        })
    }
}

/// The validated sharded map of a keyed limiter: `max_keys ≥ 1`, and `shards` (when given) a
/// power of two within `1..=min(max_keys, MAX_SHARDS)`; otherwise the default for `max_keys`.
pub(crate) fn sharded_map<K, S>(
    max_keys: usize,
    shards: Option<usize>,
    when_full: WhenFull,
) -> Result<ShardedMap<K, S>, ConfigError>
where
    K: Key,
    S: Default + Send + Sync + 'static,
{
    if max_keys == 0 {
        return Err(ConfigError::Invalid {
            what: "max_keys",
            why: "must be at least 1",
        });
    }
    let shards = match shards {
        Some(shards) if shards > MAX_SHARDS => {
            return Err(ConfigError::TooLarge {
                what: "Keyed shards",
                value: u64::try_from(shards).unwrap_or(u64::MAX),
                max: MAX_SHARDS as u64,
            });
        }
        Some(shards) if !shards.is_power_of_two() || shards > max_keys => {
            return Err(ConfigError::Invalid {
                what: "shards",
                why: "must be a power of two no larger than max_keys",
            });
        }
        Some(shards) => shards,
        None => default_shards(max_keys),
    };
    Ok(ShardedMap::new(max_keys, shards, when_full))
}

/// The most shards a [`Keyed`] map may have (they are allocated when it is built).
///
/// ```
/// use floodgate::{ConfigError, FixedWindow, Keyed, keyed::MAX_SHARDS};
/// use std::time::Duration;
/// let window = FixedWindow::new(5, Duration::from_secs(1))?;
/// let err = Keyed::builder(window).max_keys(usize::MAX).shards(1 << 40).build::<u8>().unwrap_err();
/// assert_eq!(err, ConfigError::TooLarge { what: "Keyed shards", value: 1 << 40, max: MAX_SHARDS as u64 });
/// # Ok::<(), ConfigError>(())
/// ```
pub const MAX_SHARDS: usize = 1 << 16;

/// The fewest keys of the cap a default shard holds (unless the cap itself is smaller: one
/// shard). A shard's fixed part, about 520 bytes on x86-64 besides its table, is shared by its
/// keys: with 64 of them a `u64` key costs about 30 bytes at the cap, under issue 16's 32; with
/// 8 (the rule before) about 90. Fewer shards cost only inserts (a check takes no shard lock).
const MIN_KEYS_PER_SHARD: usize = 64;

/// Shards: 4 per core, or enough that no shard holds more than [`KEYS_PER_SHARD_TARGET`] keys
/// (bounding a sweep) if that is more, rounded up to a power of two; then at most
/// [`MAX_SHARDS`] (so from 2^28 + 2^16 keys on a shard holds more) and at most one per
/// [`MIN_KEYS_PER_SHARD`] keys of the cap (at least 1). The README's "Keyed limiting" section says
/// the same.
fn default_shards(max_keys: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    let wanted = (cores * 4)
        .max(max_keys.div_ceil(KEYS_PER_SHARD_TARGET))
        .next_power_of_two()
        .min(MAX_SHARDS);
    let most = (max_keys / MIN_KEYS_PER_SHARD).max(1);
    // Largest power of two ≤ most.
    let most = 1usize << (usize::BITS - 1 - most.leading_zeros());
    wanted.min(most)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FixedWindow;
    use std::time::Duration;

    #[test]
    fn shards_beyond_the_bound_are_refused_before_allocating() {
        let window = || FixedWindow::new(5, Duration::from_secs(1)).unwrap();
        for shards in [MAX_SHARDS * 2, 1 << 40] {
            let err = Keyed::builder(window())
                .max_keys(usize::MAX)
                .shards(shards)
                .build::<u8>()
                .unwrap_err();
            assert_eq!(
                err,
                ConfigError::TooLarge {
                    what: "Keyed shards",
                    value: shards as u64,
                    max: MAX_SHARDS as u64
                }
            );
            assert!(err.to_string().contains("65536"), "{err}");
        }
        let most = Keyed::builder(window())
            .max_keys(usize::MAX)
            .shards(MAX_SHARDS)
            .build::<u8>()
            .unwrap();
        assert_eq!(most.shards(), MAX_SHARDS);
    }
}
