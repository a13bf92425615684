//! [`HashedKey`]: a long key (a header value, a token, a URL) held as a 128-bit hash, so an
//! 8 KiB key costs 16 bytes per entry instead of its length.

use std::sync::OnceLock;

/// A key held as a 128-bit hash of its bytes: two independent ahash hashes with seeds drawn once
/// per process. Use it as the key type of a [`Keyed`](super::Keyed) map when keys are long or
/// unbounded (anything a client can send): every entry then costs the same as a `u128` key
/// (24 bytes a slot with a one-word algorithm), whatever the key's length, and hashing happens once, before the lookup.
///
/// Two different keys share a limiter only if both 64-bit halves collide, which takes about
/// 2^64 distinct keys by chance; the seeds are random and secret to the process, so a client
/// cannot aim for a collision without seeing hashes. Equal keys hash equal within a process (not
/// across processes: do not store or send a `HashedKey`).
///
/// ```
/// use floodgate::keyed::HashedKey;
/// use floodgate::{Gcra, Keyed, Rate};
/// let per_token: Keyed<HashedKey, _> = Keyed::new(Gcra::new(Rate::per_second(1), 1)?, 1_000)?;
/// let token = "x".repeat(8 * 1024); // an 8 KiB header value
/// assert!(per_token.try_acquire(&HashedKey::new(token.as_bytes()), 1)?.is_allowed());
/// assert!(!per_token.try_acquire(&HashedKey::new(token.as_bytes()), 1)?.is_allowed());
/// assert!(per_token.try_acquire(&HashedKey::new(b"another token"), 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashedKey([u64; 2]);

impl HashedKey {
    /// The key of `bytes`.
    ///
    /// ```
    /// use floodgate::keyed::HashedKey;
    /// assert_eq!(HashedKey::new(b"alice"), HashedKey::new(b"alice"));
    /// assert_ne!(HashedKey::new(b"alice"), HashedKey::new(b"bob"));
    /// ```
    pub fn new(bytes: &[u8]) -> HashedKey {
        let [first, second] = seeds();
        HashedKey([first.hash_one(bytes), second.hash_one(bytes)])
    }
}

impl From<&str> for HashedKey {
    /// The key of the string's bytes.
    ///
    /// ```
    /// use floodgate::keyed::HashedKey;
    /// assert_eq!(HashedKey::from("alice"), HashedKey::new(b"alice"));
    /// ```
    fn from(key: &str) -> HashedKey {
        HashedKey::new(key.as_bytes())
    }
}

/// The two hashes as they are: a key of a keyed map is held in a
/// [`PairCell`](super::PairCell), so a slot of a `Keyed<HashedKey, Gcra>` is 24 bytes.
impl super::PairKey for HashedKey {
    #[inline(always)]
    fn to_pair(self) -> [u64; 2] {
        self.0
    }
    #[inline(always)]
    fn from_pair(pair: [u64; 2]) -> Self {
        HashedKey(pair)
    }
}

impl super::Key for HashedKey {
    type Cell = super::PairCell<Self>;
}

/// The process's two hash seeds, drawn on first use.
fn seeds() -> &'static [ahash::RandomState; 2] {
    static SEEDS: OnceLock<[ahash::RandomState; 2]> = OnceLock::new();
    SEEDS.get_or_init(|| [ahash::RandomState::new(), ahash::RandomState::new()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_halves_are_independent_and_the_size_is_bounded() {
        let key = HashedKey::new(&[7u8; 8192]);
        assert_ne!(key.0[0], key.0[1], "two seeds, two hashes");
        assert_eq!(size_of::<HashedKey>(), 16);
        // A slot of a `Keyed<HashedKey, _>` map: the key's two words and the state word (see
        // `a_pair_keys_slot_is_twenty_four_bytes` in `shards.rs`).
    }
}
