//! What a keyed map's key type must be ([`Key`]) and how a table's slot stores it: a key that
//! round-trips through a `u64` ([`WordKey`]) in one atomic word ([`WordCell`], a 16-byte slot
//! with a one-word algorithm), any other key in a [`OnceLockCell`] (an `OnceLock<K>`).

use std::borrow::Cow;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// A key type of a keyed map ([`Keyed`](crate::Keyed), [`PenalizedKeyed`](crate::PenalizedKeyed),
/// [`KeyedInFlight`](crate::concurrency::KeyedInFlight)): hashable, comparable, cloneable and
/// shareable across threads, with the cell its slot stores it in.
///
/// The cell is [`WordCell<Self>`](WordCell) for a key that round-trips exactly through a `u64`
/// ([`WordKey`]: the integers up to 64 bits, `bool`, `char`, `()`, [`Ipv4Addr`]): the key is
/// held in one atomic word, so a slot of a `Keyed<u64, Gcra>` is 16 bytes. Every other key is
/// held in an [`OnceLockCell<Self>`](OnceLockCell):
///
/// - strings: `String`, `&'static str`, `Box<str>`, `Arc<str>`, `Arc<String>`,
///   `Cow<'static, str>`;
/// - bytes: `Vec<u8>`, `Box<[u8]>`, `&'static [u8]`, `Arc<[u8]>`, `Arc<Vec<u8>>`,
///   `Cow<'static, [u8]>`;
/// - `u128`, `i128`, [`Duration`], [`IpAddr`], [`Ipv6Addr`], [`SocketAddr`],
///   [`SocketAddrV4`], [`SocketAddrV6`], [`HashedKey`](super::HashedKey),
///   [`IpKey`](super::IpKey);
/// - arrays `[T; N]`, `Option<T>` and tuples of two to six elements, of any
///   `Hash + Eq + Clone + Send + Sync + 'static` parts (`[u8; 16]`, `Option<u64>`,
///   `(String, u8, u8, u8)`);
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
/// A key that fits in a word can use [`WordCell`] instead, with a [`WordKey`] impl (see there).
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {
    /// Where a slot stores the key: [`WordCell<Self>`](WordCell) or
    /// [`OnceLockCell<Self>`](OnceLockCell).
    type Cell: KeyCell<Self>;
}

/// A cell that stores a key in a slot of a keyed map's table: [`WordCell`] or [`OnceLockCell`]
/// (sealed: the map's protocol relies on how each publishes its key).
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
impl<K: Key> KeyCell<K> for OnceLockCell<K> {}

pub(crate) mod sealed {
    use super::AtomicUsize;

    /// What a table does with a slot's key cell. `zero` is the table's record of the slot that
    /// holds the key whose word is 0 (`usize::MAX` when none; only [`WordCell`](super::WordCell)
    /// tables set it), `index` the cell's slot.
    pub trait CellOps<K>: Send + Sync + 'static + Sized {
        /// An empty cell.
        fn empty() -> Self;

        /// What [`publish`](Self::publish) stores: the key, or its word.
        type Staged;

        /// Runs `f` on the key the cell holds, `None` when it is empty. A key read here was
        /// published after its slot's state word was written (see [`publish`](Self::publish)),
        /// and that write is visible to the caller.
        fn with_key<R>(
            &self,
            zero: &AtomicUsize,
            index: usize,
            f: impl FnOnce(&K) -> R,
        ) -> Option<R>;

        /// Whether the cell holds a key, as [`with_key`](Self::with_key) tells it (with the same
        /// orderings), without making the key: no user code runs (a rebuild's second pass and
        /// an insert after its key is counted rely on it).
        fn is_set(&self, zero: &AtomicUsize, index: usize) -> bool;

        /// `key` made ready to publish: any user code it takes (a [`WordKey`](super::WordKey)'s
        /// `to_word`) runs here, before the slot's first decision, so a panic in it leaves the
        /// slot untouched.
        fn stage(key: K) -> Self::Staged;

        /// Publishes the staged key in this empty cell (under the shard's mutex, after the slot's
        /// state word is written). Runs no user code.
        fn publish(&self, zero: &AtomicUsize, index: usize, staged: Self::Staged);
    }
}

impl<K> WordCell<K> {
    /// The word of the key the cell holds, `None` when it is empty.
    #[inline(always)]
    fn held_word(&self, zero: &AtomicUsize, index: usize) -> Option<u64> {
        // Acquire: pairs with the Release store of the word in `publish`, which follows the
        // slot's state word: a reader that finds the key reads that state or a later one.
        let word = self.word.load(Ordering::Acquire);
        // Acquire: pairs with the Release store of the zero key's index in `publish`, which
        // follows its slot's state word, as above. A word 0 is an empty slot's unless the table
        // records this slot as the zero key's (a slot holding another key never reads 0 once
        // that key's word is published; the zero key's slot keeps word 0 for the table's life).
        if word == 0 && zero.load(Ordering::Acquire) != index {
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
    fn with_key<R>(&self, zero: &AtomicUsize, index: usize, f: impl FnOnce(&K) -> R) -> Option<R> {
        self.held_word(zero, index)
            .map(|word| f(&K::from_word(word)))
    }

    #[inline(always)]
    fn is_set(&self, zero: &AtomicUsize, index: usize) -> bool {
        self.held_word(zero, index).is_some()
    }

    #[inline(always)]
    fn stage(key: K) -> u64 {
        key.to_word()
    }

    fn publish(&self, zero: &AtomicUsize, index: usize, word: u64) {
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
}

impl<K: Key> sealed::CellOps<K> for OnceLockCell<K> {
    type Staged = K;

    #[inline(always)]
    fn empty() -> Self {
        OnceLockCell(OnceLock::new())
    }

    #[inline(always)]
    fn with_key<R>(
        &self,
        _zero: &AtomicUsize,
        _index: usize,
        f: impl FnOnce(&K) -> R,
    ) -> Option<R> {
        // `OnceLock::get` is an Acquire read of the state `set` completes with Release, after
        // the slot's state word was written.
        self.0.get().map(f)
    }

    #[inline(always)]
    fn is_set(&self, _zero: &AtomicUsize, _index: usize) -> bool {
        // As `with_key`.
        self.0.get().is_some()
    }

    #[inline(always)]
    fn stage(key: K) -> K {
        key
    }

    fn publish(&self, _zero: &AtomicUsize, _index: usize, key: K) {
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
    u128,
    i128,
    IpAddr,
    Ipv6Addr,
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6,
    Duration,
    Cow<'static, str>,
    Cow<'static, [u8]>,
    Arc<[u8]>,
    Arc<String>,
    Arc<Vec<u8>>,
    super::HashedKey,
    super::IpKey,
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
