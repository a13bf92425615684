//! What a keyed map's key type must be ([`Key`]) and how a table's slot stores it: a key that
//! round-trips through a `u64` ([`WordKey`]) in one atomic word ([`WordCell`], a 16-byte slot
//! with a one-word algorithm), one that round-trips through two ([`PairKey`]) in two
//! ([`PairCell`], a 24-byte slot), any other key in a [`OnceLockCell`] (an `OnceLock<K>`).

use std::borrow::Cow;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use sealed::Records;

/// A key type of a keyed map ([`Keyed`](crate::Keyed), [`PenalizedKeyed`](crate::PenalizedKeyed),
/// [`KeyedInFlight`](crate::concurrency::KeyedInFlight)): hashable, comparable, cloneable and
/// shareable across threads, with the cell its slot stores it in.
///
/// The cell is [`WordCell<Self>`](WordCell) for a key that round-trips exactly through a `u64`
/// ([`WordKey`]: the integers up to 64 bits, `bool`, `char`, `()`, [`Ipv4Addr`]): the key is
/// held in one atomic word, so a slot of a `Keyed<u64, Gcra>` is 16 bytes. It is
/// [`PairCell<Self>`](PairCell) for a key that round-trips exactly through two ([`PairKey`]:
/// [`IpKey`](super::IpKey), [`HashedKey`](super::HashedKey), `u128`, `i128`, [`Ipv6Addr`]): two
/// atomic words, so a slot of a `Keyed<IpKey, Gcra>` is 24 bytes (32 in an `OnceLock`). Every
/// other key is held in an [`OnceLockCell<Self>`](OnceLockCell):
///
/// - strings: `String`, `&'static str`, `Box<str>`, `Arc<str>`, `Arc<String>`,
///   `Cow<'static, str>`;
/// - bytes: `Vec<u8>`, `Box<[u8]>`, `&'static [u8]`, `Arc<[u8]>`, `Arc<Vec<u8>>`,
///   `Cow<'static, [u8]>`;
/// - [`Duration`], [`IpAddr`], [`SocketAddr`], [`SocketAddrV4`], [`SocketAddrV6`];
/// - arrays `[T; N]`, `Option<T>` and tuples of two to six elements, of any
///   `Hash + Eq + Clone + Send + Sync + 'static` parts (`[u8; 16]`, `Option<u64>`,
///   `(String, u8, u8, u8)`: one generic impl each, so `[u8; 16]` cannot have a `PairCell`
///   of its own; key on `u128::from_be_bytes(bytes)` for that);
/// - [`AnyKey<K>`](AnyKey) for any `Hash + Eq + Clone + Send + Sync + 'static` `K`: the way to
///   key on a type of another crate (`uuid::Uuid`, `bytes::Bytes`), which the orphan rule keeps
///   you from giving a `Key` impl (see [`AnyKey`]).
///
/// A key type of your own crate needs one line,
/// `impl Key for T { type Cell = OnceLockCell<Self>; }`:
///
/// ```
/// use floodgate::keyed::{Key, OnceLockCell};
/// use floodgate::{Gcra, Keyed, ManualClock, Rate};
///
/// #[derive(Clone, PartialEq, Eq, Hash)]
/// struct Tenant {
///     name: String,
///     tier: u8,
/// }
///
/// impl Key for Tenant {
///     type Cell = OnceLockCell<Self>;
/// }
///
/// let per_tenant: Keyed<Tenant, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1), 1)?)
///     .clock(ManualClock::new())
///     .build()?;
/// let acme = Tenant { name: "acme".into(), tier: 1 };
/// assert!(per_tenant.try_acquire(&acme, 1)?.is_allowed());
/// assert!(!per_tenant.try_acquire(&acme, 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A key that fits in a word can use [`WordCell`] instead, with a [`WordKey`] impl (see there),
/// and one that fits in two words [`PairCell`], with a [`PairKey`] impl.
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {
    /// Where a slot stores the key: [`WordCell<Self>`](WordCell),
    /// [`PairCell<Self>`](PairCell) or [`OnceLockCell<Self>`](OnceLockCell).
    type Cell: KeyCell<Self>;
}

/// A cell that stores a key in a slot of a keyed map's table: [`WordCell`], [`PairCell`] or
/// [`OnceLockCell`] (sealed: the map's protocol relies on how each publishes its key).
pub trait KeyCell<K>: sealed::CellOps<K> {}

/// A key that round-trips exactly through a `u64`, so a [`WordCell`] can hold it:
/// `K::from_word(k.to_word()) == k` for every `k`, and two keys are equal exactly when their
/// words are. A map calls `from_word` only on words `to_word` gave. An impl that breaks this
/// gives wrong answers (a key found as another), never memory unsafety. A panic in `to_word` or
/// `from_word` fails the call it happens in, as one in `Hash` or `Eq` does, and loses no key's
/// state.
///
/// ```
/// use floodgate::keyed::{Key, WordCell, WordKey};
/// use floodgate::{Gcra, Keyed, ManualClock, Rate};
///
/// #[derive(Clone, Copy, PartialEq, Eq, Hash)]
/// struct UserId(u32);
///
/// impl WordKey for UserId {
///     fn to_word(self) -> u64 {
///         u64::from(self.0)
///     }
///     fn from_word(word: u64) -> Self {
///         UserId(word as u32)
///     }
/// }
///
/// impl Key for UserId {
///     type Cell = WordCell<Self>;
/// }
///
/// let per_user: Keyed<UserId, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1), 1)?)
///     .clock(ManualClock::new())
///     .build()?;
/// assert!(per_user.try_acquire(&UserId(0), 1)?.is_allowed());
/// assert!(!per_user.try_acquire(&UserId(0), 1)?.is_allowed());
/// assert!(per_user.try_acquire(&UserId(7), 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait WordKey: Copy {
    /// The key's word.
    fn to_word(self) -> u64;
    /// The key whose word is `word` (only ever called with a word [`to_word`](Self::to_word)
    /// gave).
    fn from_word(word: u64) -> Self;
}

/// A slot's key held in one atomic word (see [`WordKey`]): 8 bytes, no state of its own.
///
/// An empty slot's word is 0, and so is the word of the key whose word is 0 (the "zero key",
/// e.g. `0u64`): the table records the one slot holding the zero key, if any, and a reader that
/// reads a word 0 reads that record to tell the two apart. So every key value is usable, none
/// reserved.
///
/// ```
/// use floodgate::keyed::{Key, WordCell};
/// fn cell_of<K: Key<Cell = WordCell<K>>>() {}
/// cell_of::<u64>();
/// cell_of::<std::net::Ipv4Addr>();
/// assert_eq!(std::mem::size_of::<WordCell<u64>>(), 8);
/// ```
pub struct WordCell<K> {
    word: AtomicU64,
    key: PhantomData<fn() -> K>,
}

/// A key that round-trips exactly through two `u64` words, so a [`PairCell`] can hold it:
/// `K::from_pair(k.to_pair()) == k` for every `k`, and two keys are equal exactly when their
/// pairs are. A map calls `from_pair` only on pairs `to_pair` gave. An impl that breaks this
/// gives wrong answers (a key found as another), never memory unsafety. A panic in `to_pair` or
/// `from_pair` fails the call it happens in, as one in `Hash` or `Eq` does, and loses no key's
/// state.
///
/// ```
/// use floodgate::keyed::{Key, PairCell, PairKey};
/// use floodgate::{Gcra, Keyed, ManualClock, Rate};
///
/// #[derive(Clone, Copy, PartialEq, Eq, Hash)]
/// struct Session {
///     user: u64,
///     device: u32,
/// }
///
/// impl PairKey for Session {
///     fn to_pair(self) -> [u64; 2] {
///         [self.user, u64::from(self.device)]
///     }
///     fn from_pair([user, device]: [u64; 2]) -> Self {
///         Session { user, device: device as u32 }
///     }
/// }
///
/// impl Key for Session {
///     type Cell = PairCell<Self>;
/// }
///
/// let per_session: Keyed<Session, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1), 1)?)
///     .clock(ManualClock::new())
///     .build()?;
/// let phone = Session { user: 7, device: 0 };
/// assert!(per_session.try_acquire(&phone, 1)?.is_allowed());
/// assert!(!per_session.try_acquire(&phone, 1)?.is_allowed());
/// assert!(per_session.try_acquire(&Session { user: 7, device: 1 }, 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait PairKey: Copy {
    /// The key's two words.
    fn to_pair(self) -> [u64; 2];
    /// The key whose words are `pair` (only ever called with a pair
    /// [`to_pair`](Self::to_pair) gave).
    fn from_pair(pair: [u64; 2]) -> Self;
}

/// A slot's key held in two atomic words (see [`PairKey`]): 16 bytes, no state of its own, so a
/// slot of a `Keyed<IpKey, Gcra>` is 24 bytes.
///
/// Each word is stored XOR its constant of [`MASKS`](Self::MASKS), so that keys with a zero
/// word (every IPv4 [`IpKey`](super::IpKey), every IPv6 network of a prefix up to /64, every
/// `u128` below 2^64) store two nonzero words, but for the one of each whose other word equals
/// its constant (the `u128` `MASKS[1]`; the /64 network whose high word is `MASKS[0]`). An empty slot's words are 0. The key whose stored
/// words are both 0 (its words equal to `MASKS`) is recorded by the table, as
/// [`WordCell`]'s zero key is, and never written. A key with exactly one stored word 0 (a word
/// equal to its constant) reads, while another key's two words are being published, like that
/// key's half-written pair: a reader that reads one zero word checks the table's record of the
/// slot being published (one more load, taken on those keys only) and, when it names this slot,
/// looks again under the shard's mutex. So every key value is usable, none reserved, and a
/// lookup takes no lock.
///
/// ```
/// use floodgate::keyed::{Key, PairCell};
/// fn cell_of<K: Key<Cell = PairCell<K>>>() {}
/// cell_of::<floodgate::IpKey>();
/// cell_of::<floodgate::keyed::HashedKey>();
/// cell_of::<u128>();
/// cell_of::<std::net::Ipv6Addr>();
/// assert_eq!(std::mem::size_of::<PairCell<u128>>(), 16);
/// ```
pub struct PairCell<K> {
    words: [AtomicU64; 2],
    key: PhantomData<fn() -> K>,
}

impl<K> PairCell<K> {
    /// What each of a key's two words is XORed with before it is stored: the first 4 bytes of
    /// the SHA-256 of `floodgate PairCell high` and of `floodgate PairCell low`, made odd, each
    /// a sign-extended 32-bit value (an x86-64 instruction's immediate: no 64-bit constant is
    /// loaded per lookup). The high word's is positive, the low word's negative, so an IPv4
    /// [`IpKey`](super::IpKey) (high word 0, low word `0x0000_ffff_…`) and an IPv6 network's
    /// zero low word store nonzero words. A key word equal to its constant (a high word
    /// `0x5c9a_4633`, the unallocated network `0:0:5c9a:4633::/64`; a low word
    /// `0xffff_ffff_fdf0_f61f`) costs one more load to find.
    /// The key whose words are these is held without being written (see [`PairCell`]), and a
    /// key with one word equal to its constant costs one more load to find.
    ///
    /// ```
    /// use floodgate::keyed::PairCell;
    /// use floodgate::{FixedWindow, Keyed};
    /// let [high, low] = PairCell::<u128>::MASKS;
    /// let masked = (u128::from(high) << 64) | u128::from(low); // stored as two zero words
    /// let keyed: Keyed<u128, _> = Keyed::new(FixedWindow::new(1, std::time::Duration::from_secs(60))?, 100)?;
    /// assert!(keyed.try_acquire(&masked, 1)?.is_allowed());
    /// assert!(!keyed.try_acquire(&masked, 1)?.is_allowed());
    /// assert!(keyed.try_acquire(&(masked ^ 1), 1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const MASKS: [u64; 2] = [0x0000_0000_5c9a_4633, 0xffff_ffff_fdf0_f61f];
}

/// A slot's key held in an [`OnceLock`], for any [`Key`]: the key type's size plus the
/// `OnceLock`'s state (16 bytes for a `u64`, padded).
///
/// ```
/// use floodgate::keyed::{Key, OnceLockCell};
/// fn cell_of<K: Key<Cell = OnceLockCell<K>>>() {}
/// cell_of::<String>();
/// cell_of::<std::net::IpAddr>();
/// ```
pub struct OnceLockCell<K>(OnceLock<K>);

impl<K: Key + WordKey> KeyCell<K> for WordCell<K> {}
impl<K: Key + PairKey> KeyCell<K> for PairCell<K> {}
impl<K: Key> KeyCell<K> for OnceLockCell<K> {}

pub(crate) mod sealed {
    use super::{AtomicUsize, Ordering};
    use crossbeam_utils::CachePadded;

    /// A table's records of single slots, beside the slots' address in its header (which every
    /// lookup loads): the zero key's slot there (read whenever a probe meets an empty slot,
    /// written once per table); the slot being published on a line of its own, allocated with
    /// the table (written twice by every insert of a [`PairCell`](super::PairCell) key, read
    /// only by a lookup that reads one zero word: beside the slots' address each insert would
    /// take that line from every other core's checks).
    pub struct Records {
        /// The slot holding the key whose word is 0 ([`WordCell`](super::WordCell)) or whose
        /// stored words are both 0 ([`PairCell`](super::PairCell)), `usize::MAX` when none:
        /// published once, with Release, after that slot's state word (see the cells'
        /// `publish`); such a slot reads as an empty one.
        pub zero: AtomicUsize,
        /// The slot whose [`PairCell`](super::PairCell) words are being published, `usize::MAX`
        /// when none (see `PairCell`'s `publish`): written only under the shard's mutex.
        pub inserting: Box<CachePadded<AtomicUsize>>,
    }

    impl Records {
        pub(crate) fn new() -> Self {
            Records {
                zero: AtomicUsize::new(usize::MAX),
                inserting: Box::new(CachePadded::new(AtomicUsize::new(usize::MAX))),
            }
        }

        /// The zero key's slot, read by this thread where no other writes it (a table the
        /// caller owns or holds the mutex of).
        pub(crate) fn zero_owned(&self) -> usize {
            // Relaxed: the caller's own view (see above).
            self.zero.load(Ordering::Relaxed)
        }
    }

    /// What a table does with a slot's key cell. `records` are the table's records (see
    /// [`Records`]), `index` the cell's slot.
    pub trait CellOps<K>: Send + Sync + 'static + Sized {
        /// An empty cell.
        fn empty() -> Self;

        /// Whether the lock-free lookup tests a key's home slot before its probe loop (see
        /// `Table::search` in `shards.rs`): a code-layout choice, measured per cell type; the
        /// same loads and tests either way.
        const HOME_FIRST: bool = false;

        /// What [`publish`](Self::publish) stores: the key, or its word.
        type Staged;

        /// Runs `f` on the key the cell holds, `None` when it is empty. A key read here was
        /// published after its slot's state word was written (see [`publish`](Self::publish)),
        /// and that write is visible to the caller.
        fn with_key<R>(
            &self,
            records: &Records,
            index: usize,
            f: impl FnOnce(&K) -> R,
        ) -> Option<R>;

        /// Whether the cell holds a key, without making the key: no user code runs (a rebuild's
        /// second pass and an insert after its key is counted rely on it). Called only where no
        /// key is being published in the table: under the shard's mutex, or on a table this
        /// thread owns.
        fn is_set(&self, records: &Records, index: usize) -> bool;

        /// `key` made ready to publish: any user code it takes (a [`WordKey`](super::WordKey)'s
        /// `to_word`, a [`PairKey`](super::PairKey)'s `to_pair`) runs here, before the slot's first decision, so a panic in it leaves the
        /// slot untouched.
        fn stage(key: K) -> Self::Staged;

        /// Publishes the staged key in this empty cell (under the shard's mutex, after the slot's
        /// state word is written). Runs no user code.
        fn publish(&self, records: &Records, index: usize, staged: Self::Staged);

        /// Whether [`copy`](Self::copy) copies every cell of the type (a key held in words, no
        /// key value to clone or drop): a growth rebuild then copies the table in one pass,
        /// leaving the old one whole (see `ShardedMap::copy_all` in `shards.rs`).
        const COPIES: bool = false;

        /// A copy of the cell, for a rebuild that owns the table (no reader holds it): runs no
        /// user code. `None` where the type does not copy (`COPIES` false).
        fn copy(&self) -> Option<Self> {
            None
        }
    }
}

impl<K> WordCell<K> {
    /// The word of the key the cell holds, `None` when it is empty.
    #[inline(always)]
    fn held_word(&self, records: &Records, index: usize) -> Option<u64> {
        // Acquire: pairs with the Release store of the word in `publish`, which follows the
        // slot's state word: a reader that finds the key reads that state or a later one.
        let word = self.word.load(Ordering::Acquire);
        // Acquire: pairs with the Release store of the zero key's index in `publish`, which
        // follows its slot's state word, as above. A word 0 is an empty slot's unless the table
        // records this slot as the zero key's (a slot holding another key never reads 0 once
        // that key's word is published; the zero key's slot keeps word 0 for the table's life).
        if word == 0 && records.zero.load(Ordering::Acquire) != index {
            return None;
        }
        Some(word)
    }
}

impl<K: Key + WordKey> sealed::CellOps<K> for WordCell<K> {
    #[inline(always)]
    fn empty() -> Self {
        WordCell {
            word: AtomicU64::new(0),
            key: PhantomData,
        }
    }

    type Staged = u64;

    #[inline(always)]
    fn with_key<R>(&self, records: &Records, index: usize, f: impl FnOnce(&K) -> R) -> Option<R> {
        self.held_word(records, index)
            .map(|word| f(&K::from_word(word)))
    }

    #[inline(always)]
    fn is_set(&self, records: &Records, index: usize) -> bool {
        self.held_word(records, index).is_some()
    }

    #[inline(always)]
    fn stage(key: K) -> u64 {
        key.to_word()
    }

    fn publish(&self, records: &Records, index: usize, word: u64) {
        let zero = &records.zero;
        if word == 0 {
            // Relaxed: a check of this thread's own view; the record is written only under the
            // shard's mutex (here), which this thread holds and which orders any earlier
            // write, or in a table no reader holds yet (`Table::put`), once per table.
            debug_assert_eq!(zero.load(Ordering::Relaxed), usize::MAX);
            // Release: pairs with the Acquire load in `with_key`; the slot's state word was
            // written before.
            zero.store(index, Ordering::Release);
        } else {
            // Release: pairs with the Acquire load in `with_key`; the slot's state word was
            // written before.
            self.word.store(word, Ordering::Release);
        }
    }

    const COPIES: bool = true;

    #[inline(always)]
    fn copy(&self) -> Option<Self> {
        Some(WordCell {
            // Relaxed: a table the rebuild owns: no reader holds it, and `take_arc`'s Acquire made
            // every publish in it visible.
            word: AtomicU64::new(self.word.load(Ordering::Relaxed)),
            key: PhantomData,
        })
    }
}

impl<K> PairCell<K> {
    /// The stored words of the key the cell holds, `None` when it is empty: the lock-free
    /// lookup's read.
    ///
    /// A cell's words go from 0 to their final values once per table (a rebuild moves cells into
    /// a new table only before publishing it, and never clears one), each with a Release store
    /// after the slot's state word (see `publish`). Two nonzero words are therefore both final:
    /// the key. Two zero words are an empty slot unless the table records this slot as the key
    /// stored as two zeros (the record is published with Release after the state word, as in
    /// [`WordCell`]). Exactly one zero word is either a key with one stored word 0, complete, or
    /// the two words of another key caught between their stores: `settle` tells them apart.
    #[inline(always)]
    fn held_pair(&self, records: &Records, index: usize) -> Option<[u64; 2]> {
        // Acquire (both): pairs with the Release stores of the words in `publish`, which follow
        // the slot's state word (a reader that finds the key reads that state or a later one)
        // and the Release store of this slot's index in `inserting` (read by `settle`).
        let high = self.words[0].load(Ordering::Acquire);
        let low = self.words[1].load(Ordering::Acquire);
        if high != 0 && low != 0 {
            return Some([high, low]);
        }
        self.settle(records, index, [high, low])
    }

    /// [`held_pair`](Self::held_pair) for words that read one or two zeros.
    #[inline(never)]
    #[cold]
    fn settle(&self, records: &Records, index: usize, [high, low]: [u64; 2]) -> Option<[u64; 2]> {
        if high == 0 && low == 0 {
            // Acquire: pairs with the Release store of the index in `publish` (after the slot's
            // state word).
            return (records.zero.load(Ordering::Acquire) == index).then_some([0, 0]);
        }
        // One word is nonzero, so its Acquire load above read the value `publish` stored with
        // Release after its `inserting.store(index)`: that store happens-before this load, which
        // therefore reads `index` or a value after it in `inserting`'s modification order.
        // Acquire: pairs with the Release stores of `inserting` in `publish`.
        if records.inserting.load(Ordering::Acquire) == index {
            // Possibly half-written: read as empty, so the lookup goes to the shard's mutex,
            // under which the publish has finished.
            return None;
        }
        // A later value is this publish's `usize::MAX`, stored with Release after both words, or
        // a later publish's slot index, stored with Release under the mutex this publish
        // released after its words: either way, the Acquire load above synchronised with a
        // store that both words' stores happen-before, so the reload below reads the final word
        // (0 only where the key's stored word is 0). Relaxed: that happens-before is the
        // Acquire load of `inserting`'s (pairing as above), and the slot's state word was
        // ordered before the word this reader read nonzero (its Acquire load in `held_pair`);
        // the loom models pass with these reloads Relaxed or Acquire alike.
        Some(if high == 0 {
            [self.words[0].load(Ordering::Relaxed), low]
        } else {
            [high, self.words[1].load(Ordering::Relaxed)]
        })
    }

    /// The key of the stored words `pair`.
    #[inline(always)]
    fn unmask([high, low]: [u64; 2]) -> [u64; 2] {
        [high ^ Self::MASKS[0], low ^ Self::MASKS[1]]
    }
}

impl<K: Key + PairKey> sealed::CellOps<K> for PairCell<K> {
    #[inline(always)]
    fn empty() -> Self {
        PairCell {
            words: [AtomicU64::new(0), AtomicU64::new(0)],
            key: PhantomData,
        }
    }

    /// The stored words (the key's words XOR [`MASKS`](PairCell::MASKS)).
    type Staged = [u64; 2];

    /// Measured (callgrind, `examples/keyed_instructions`, instructions a call): in the loop
    /// a hot pair key's lookup jumped into it from its preheader and computed the slot's
    /// address apart; with the home slot first, `ip-hot-allow` 210 -> 206, `ip-hot-deny` 202
    /// -> 199, `ip-churn-1k` 212.9 -> 209.2, `ip-churn-100k` 223.2 -> 218.2. Word keys keep
    /// the loop alone: for them the compiler merged the two again, and the hit path took 2
    /// more (`hot-allow` 192 -> 194, `churn-1k` 191.7 -> 193.5).
    const HOME_FIRST: bool = true;

    #[inline(always)]
    fn with_key<R>(&self, records: &Records, index: usize, f: impl FnOnce(&K) -> R) -> Option<R> {
        self.held_pair(records, index)
            .map(|pair| f(&K::from_pair(Self::unmask(pair))))
    }

    #[inline(always)]
    fn is_set(&self, records: &Records, index: usize) -> bool {
        // Under the mutex or on an owned table (see the trait): no publish is under way, so a
        // nonzero word is a key's, and two zero words are empty unless recorded. Acquire, as in
        // `held_pair` (no more than the mutex already gives).
        self.words[0].load(Ordering::Acquire) != 0
            || self.words[1].load(Ordering::Acquire) != 0
            || records.zero_owned() == index
    }

    #[inline(always)]
    fn stage(key: K) -> [u64; 2] {
        // Masked the same way `unmask` undoes.
        Self::unmask(key.to_pair())
    }

    fn publish(&self, records: &Records, index: usize, [high, low]: [u64; 2]) {
        if high == 0 && low == 0 {
            // Relaxed: a check of this thread's own view, as in `WordCell::publish`.
            debug_assert_eq!(records.zero_owned(), usize::MAX);
            // Release: pairs with the Acquire load in `settle`; the slot's state word was
            // written before. The words stay 0.
            records.zero.store(index, Ordering::Release);
            return;
        }
        // Release: pairs with the Acquire load in `settle` of a reader that reads this value
        // for another slot, published later or earlier in this table: everything before this
        // thread took the mutex (an earlier publish's words among it) happens-before what that
        // reader reloads. For this slot's own readers the words' Release stores below order
        // this store before them.
        records.inserting.store(index, Ordering::Release);
        // Release (both): pairs with the Acquire loads in `held_pair` and `settle`; the slot's
        // state word and the `inserting` store were written before.
        self.words[0].store(high, Ordering::Release);
        self.words[1].store(low, Ordering::Release);
        // Release: pairs with the Acquire load in `settle`: a reader that reads this value (or
        // a later one, see there) reads both words as stored.
        records.inserting.store(usize::MAX, Ordering::Release);
    }

    const COPIES: bool = true;

    #[inline(always)]
    fn copy(&self) -> Option<Self> {
        // Relaxed (both): a table the rebuild owns, as `WordCell::copy`.
        Some(PairCell {
            words: [
                AtomicU64::new(self.words[0].load(Ordering::Relaxed)),
                AtomicU64::new(self.words[1].load(Ordering::Relaxed)),
            ],
            key: PhantomData,
        })
    }
}

impl<K: Key> sealed::CellOps<K> for OnceLockCell<K> {
    type Staged = K;

    #[inline(always)]
    fn empty() -> Self {
        OnceLockCell(OnceLock::new())
    }

    #[inline(always)]
    fn with_key<R>(&self, _records: &Records, _index: usize, f: impl FnOnce(&K) -> R) -> Option<R> {
        // `OnceLock::get` is an Acquire read of the state `set` completes with Release, after
        // the slot's state word was written.
        self.0.get().map(f)
    }

    #[inline(always)]
    fn is_set(&self, _records: &Records, _index: usize) -> bool {
        // As `with_key`.
        self.0.get().is_some()
    }

    #[inline(always)]
    fn stage(key: K) -> K {
        key
    }

    fn publish(&self, _records: &Records, _index: usize, key: K) {
        let set = self.0.set(key);
        debug_assert!(set.is_ok(), "an empty slot is set only under the mutex");
    }
}

macro_rules! word_keys {
    ($($t:ty => |$k:ident| $to:expr, |$w:ident| $from:expr;)*) => {$(
        impl WordKey for $t {
            #[inline(always)]
            fn to_word(self) -> u64 {
                let $k = self;
                $to
            }
            #[inline(always)]
            fn from_word(word: u64) -> Self {
                let $w = word;
                $from
            }
        }
        impl Key for $t {
            type Cell = WordCell<Self>;
        }
    )*};
}

// Signed integers keep their bits (`as` between same-width types, then zero-extended), so every
// value round-trips; `from_word` truncates the words `to_word` gave back to the same bits.
word_keys! {
    u64 => |k| k, |w| w;
    u32 => |k| u64::from(k), |w| w as u32;
    u16 => |k| u64::from(k), |w| w as u16;
    u8 => |k| u64::from(k), |w| w as u8;
    usize => |k| k as u64, |w| w as usize;
    i64 => |k| k as u64, |w| w as i64;
    i32 => |k| u64::from(k as u32), |w| w as u32 as i32;
    i16 => |k| u64::from(k as u16), |w| w as u16 as i16;
    i8 => |k| u64::from(k as u8), |w| w as u8 as i8;
    isize => |k| k as u64, |w| w as isize;
    bool => |k| u64::from(k), |w| w != 0;
    // A `char`'s word is a scalar value, so `from_word` of it never falls back.
    char => |k| u64::from(u32::from(k)), |w| char::from_u32(w as u32).unwrap_or('\0');
    () => |_k| 0, |_w| ();
    Ipv4Addr => |k| u64::from(u32::from(k)), |w| Ipv4Addr::from(w as u32);
}

macro_rules! pair_keys {
    ($($t:ty => |$k:ident| $to:expr, |$p:ident| $from:expr;)*) => {$(
        impl PairKey for $t {
            #[inline(always)]
            fn to_pair(self) -> [u64; 2] {
                let $k = self;
                $to
            }
            #[inline(always)]
            fn from_pair(pair: [u64; 2]) -> Self {
                let $p = pair;
                $from
            }
        }
        impl Key for $t {
            type Cell = PairCell<Self>;
        }
    )*};
}

/// The high and low halves of a 128-bit number.
#[inline(always)]
fn halves(bits: u128) -> [u64; 2] {
    [(bits >> 64) as u64, bits as u64]
}

/// The 128-bit number of two halves.
#[inline(always)]
fn joined([high, low]: [u64; 2]) -> u128 {
    (u128::from(high) << 64) | u128::from(low)
}

// `i128` keeps its bits, as the signed word keys do. `IpKey` and `HashedKey` have their
// impls beside their private fields (`ip.rs`, `hashed.rs`).
pair_keys! {
    u128 => |k| halves(k), |p| joined(p);
    i128 => |k| halves(k as u128), |p| joined(p) as i128;
    Ipv6Addr => |k| halves(k.to_bits()), |p| Ipv6Addr::from_bits(joined(p));
}

macro_rules! once_lock_keys {
    ($($t:ty),* $(,)?) => {$(
        impl Key for $t {
            type Cell = OnceLockCell<Self>;
        }
    )*};
}

once_lock_keys!(
    String,
    &'static str,
    Box<str>,
    Arc<str>,
    Vec<u8>,
    Box<[u8]>,
    &'static [u8],
    IpAddr,
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6,
    Duration,
    Cow<'static, str>,
    Cow<'static, [u8]>,
    Arc<[u8]>,
    Arc<String>,
    Arc<Vec<u8>>,
);

// Tuples of any keyable parts, up to six (pairs and triples as before).
macro_rules! tuple_keys {
    ($(($($t:ident),+))*) => {$(
        impl<$($t),+> Key for ($($t,)+)
        where
            $($t: Hash + Eq + Clone + Send + Sync + 'static,)+
        {
            type Cell = OnceLockCell<Self>;
        }
    )*};
}

tuple_keys! {
    (A, B)
    (A, B, C)
    (A, B, C, D)
    (A, B, C, D, E)
    (A, B, C, D, E, F)
}

impl<T, const N: usize> Key for [T; N]
where
    T: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Cell = OnceLockCell<Self>;
}

impl<T> Key for Option<T>
where
    T: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Cell = OnceLockCell<Self>;
}

/// Any `Hash + Eq + Clone + Send + Sync + 'static` type as a [`Key`], held in an
/// [`OnceLockCell`]: the way to key a map on a type of another crate (`uuid::Uuid`,
/// `bytes::Bytes`, ...), which cannot get a `Key` impl of its own in your crate (the orphan
/// rule).
///
/// It hashes, compares and orders exactly as its inner key (a transparent newtype: its hash is
/// the inner key's hash), so it costs nothing but the name. Look a key up by `&AnyKey(k)`: the
/// maps' lookups take a `&Q` whose owned form is the key type (`Q: ToOwned<Owned = K>`), which
/// the inner type's own `ToOwned` (itself) is not, so `map.check(&k)` does not compile even
/// though `AnyKey<K>` could borrow as `K`.
///
/// ```
/// use floodgate::keyed::AnyKey;
/// use floodgate::{Gcra, Keyed, ManualClock, Rate};
///
/// // Stands in for a type of another crate, e.g. `uuid::Uuid`: no `Key` impl of its own.
/// mod other_crate {
///     #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
///     pub struct Uuid(pub u128);
/// }
/// use other_crate::Uuid;
///
/// let per_session: Keyed<AnyKey<Uuid>, _, _> =
///     Keyed::builder(Gcra::new(Rate::per_second(1), 1)?)
///         .clock(ManualClock::new())
///         .build()?;
/// let session = Uuid(0x1234);
/// assert!(per_session.try_acquire(&AnyKey(session), 1)?.is_allowed());
/// assert!(!per_session.try_acquire(&AnyKey(session), 1)?.is_allowed());
/// assert!(per_session.check(&AnyKey::from(Uuid(0x5678))).is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct AnyKey<K>(pub K);

impl<K> From<K> for AnyKey<K> {
    fn from(key: K) -> Self {
        AnyKey(key)
    }
}

impl<K> Key for AnyKey<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Cell = OnceLockCell<Self>;
}

#[cfg(test)]
mod tests {
    use super::sealed::{CellOps, Records};
    use super::*;

    /// A `PairCell`'s reads in each state a publish passes through, on one thread: a pair with
    /// one zero word is the key's while no publish of its slot is under way, and read as empty
    /// while one is (a reader then looks again under the mutex); two zero words are empty
    /// unless the table records the slot as the key stored as two zeros.
    #[test]
    fn a_half_written_pair_reads_as_empty_only_while_its_slot_is_published() {
        let records = Records::new();
        let cell = <PairCell<u128> as CellOps<u128>>::empty();
        let held = |index| cell.held_pair(&records, index);
        assert_eq!(held(3), None, "empty");
        // Slot 3's publish of a key stored as (5, 7), half done.
        records.inserting.store(3, Ordering::Relaxed);
        cell.words[0].store(5, Ordering::Relaxed);
        assert_eq!(
            held(3),
            None,
            "caught between its stores: not the key stored as (5, 0)"
        );
        // Another slot's publish under way (a stale read, or the next insert's): this slot's
        // words are complete as read again.
        records.inserting.store(9, Ordering::Relaxed);
        assert_eq!(held(3), Some([5, 0]), "a key stored as (5, 0)");
        cell.words[1].store(7, Ordering::Relaxed);
        assert_eq!(held(3), Some([5, 7]), "the second word read again");
        records.inserting.store(usize::MAX, Ordering::Relaxed);
        assert_eq!(held(3), Some([5, 7]));

        let cell = <PairCell<u128> as CellOps<u128>>::empty();
        let held = |index| cell.held_pair(&records, index);
        cell.words[1].store(7, Ordering::Relaxed);
        assert_eq!(held(4), Some([0, 7]), "a key stored as (0, 7)");
        records.inserting.store(4, Ordering::Relaxed);
        assert_eq!(held(4), None);
        records.inserting.store(usize::MAX, Ordering::Relaxed);

        let cell = <PairCell<u128> as CellOps<u128>>::empty();
        assert_eq!(cell.held_pair(&records, 6), None);
        assert!(!cell.is_set(&records, 6));
        records.zero.store(6, Ordering::Relaxed);
        assert_eq!(
            cell.held_pair(&records, 6),
            Some([0, 0]),
            "the recorded slot"
        );
        assert!(cell.is_set(&records, 6));
        assert_eq!(cell.held_pair(&records, 5), None, "another slot");
        let masked =
            (u128::from(PairCell::<u128>::MASKS[0]) << 64) | u128::from(PairCell::<u128>::MASKS[1]);
        assert_eq!(cell.with_key(&records, 6, |&key| key), Some(masked));
    }

    /// A key is staged as its words XOR the masks, so keys with a zero word (IPv4 `IpKey`s,
    /// /64 networks, small `u128`s) store two nonzero words, and only the key equal to the
    /// masks stores two zeros (published through the table's record).
    #[test]
    fn keys_are_stored_masked() {
        let stage = <PairCell<u128> as CellOps<u128>>::stage;
        let [high, low] = PairCell::<u128>::MASKS;
        assert_eq!(stage(0), [high, low]);
        assert_eq!(stage(1), [high, low ^ 1]);
        assert_eq!(stage(1 << 64), [high ^ 1, low]);
        assert_eq!(stage((u128::from(high) << 64) | u128::from(low)), [0, 0]);
        assert!(high % 2 == 1 && low % 2 == 1 && high != low);
        let keyer = crate::IpKeyer::new();
        for ip in ["192.0.2.1", "2001:db8:1::"] {
            let key = keyer.key(ip.parse().unwrap());
            let stored = <PairCell<crate::IpKey> as CellOps<_>>::stage(key);
            assert!(stored[0] != 0 && stored[1] != 0, "{ip}");
        }
        let records = Records::new();
        let cell = <PairCell<u128> as CellOps<u128>>::empty();
        cell.publish(&records, 2, stage(0));
        assert_eq!(cell.with_key(&records, 2, |&key| key), Some(0));
        assert_eq!(records.inserting.load(Ordering::Relaxed), usize::MAX);
        let cell = <PairCell<u128> as CellOps<u128>>::empty();
        cell.publish(&records, 3, [0, 0]);
        assert_eq!(
            records.zero.load(Ordering::Relaxed),
            3,
            "recorded, not written"
        );
        assert_eq!(cell.words[0].load(Ordering::Relaxed), 0);
    }
}
