//! Issue 16's insert cuts, reviewed: a growth rebuild reads each old cell once
//! (its key's hash, with the slot listed) and then moves the listed slots (358e5b8). A panic in
//! the user's code it runs (`Hash`, a `PairKey`'s `from_pair`) at any call of the insert that
//! grows a shard loses no key and leaves the count right, for pair keys stored as (0, 0)
//! (the table's `zero` record), (0, x) and (x, 0) (which read like a pair caught half-written,
//! the `inserting` record) and for `OnceLock` keys; the shard grows again afterwards.

use std::cell::Cell;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};

use floodgate::keyed::{Key, OnceLockCell, PairCell, PairKey};
use floodgate::{FixedWindow, Keyed, ManualClock};

#[path = "support/one_a_minute.rs"]
mod one_a_minute;
use one_a_minute::one_a_minute;

thread_local! {
    /// Calls of the keys' user code (`Hash`, `from_pair`) on this thread; the call numbered
    /// `PANIC_AT` panics (0: none).
    static CALLS: Cell<u64> = const { Cell::new(0) };
    static PANIC_AT: Cell<u64> = const { Cell::new(0) };
}

/// One call of a key's user code: panics if it is the call `PANIC_AT` names.
fn user_code() {
    let calls = CALLS.get() + 1;
    CALLS.set(calls);
    assert!(calls != PANIC_AT.get(), "user code panics on call {calls}");
}

/// A pair key of a user's own whose `Hash` and `from_pair` count their calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Pair([u64; 2]);

impl Hash for Pair {
    fn hash<H: Hasher>(&self, state: &mut H) {
        user_code();
        self.0.hash(state);
    }
}

impl PairKey for Pair {
    fn to_pair(self) -> [u64; 2] {
        self.0
    }
    fn from_pair(pair: [u64; 2]) -> Self {
        user_code();
        Pair(pair)
    }
}

impl Key for Pair {
    type Cell = PairCell<Self>;
}

/// A key held in an `OnceLock` whose `Hash` counts its calls.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Boxed(u64);

impl Hash for Boxed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        user_code();
        self.0.hash(state);
    }
}

impl Key for Boxed {
    type Cell = OnceLockCell<Self>;
}

/// Holding `keys[..5]`, the insert of `keys[5]` grows the shard; a panic at each of the user
/// code calls that insert makes, in turn: the keys held keep their windows, the count is right,
/// the key whose insert panicked is fresh, and later inserts grow the shard again.
fn a_panic_at_any_call_of_a_growing_insert_loses_no_key<K: Key + Debug>(keys: &[K]) {
    assert!(keys.len() >= 20);
    let (held, rest) = keys.split_at(5);
    let grower = &rest[0];
    let fill = |keyed: &Keyed<K, FixedWindow, ManualClock>| {
        for key in held {
            assert!(keyed.try_acquire(key, 1).unwrap().is_allowed(), "{key:?}");
        }
    };
    let keyed = one_a_minute::<K>();
    fill(&keyed);
    CALLS.set(0);
    assert!(keyed.try_acquire(grower, 1).unwrap().is_allowed());
    let calls = CALLS.get();
    // The growth hashes every key it moves (and a pair key's `from_pair` makes each).
    assert!(calls > held.len() as u64, "{calls} calls: no growth");
    for panic_at in 1..=calls {
        let keyed = one_a_minute::<K>();
        fill(&keyed);
        CALLS.set(0);
        PANIC_AT.set(panic_at);
        let result = catch_unwind(AssertUnwindSafe(|| keyed.try_acquire(grower, 1)));
        PANIC_AT.set(0);
        let inserted = match result {
            Ok(decision) => {
                assert!(decision.unwrap().is_allowed(), "call {panic_at}");
                true
            }
            Err(_) => false,
        };
        let count = held.len() + usize::from(inserted);
        assert_eq!(keyed.len(), count, "call {panic_at} of {calls}");
        for key in held {
            assert!(
                !keyed.try_acquire(key, 1).unwrap().is_allowed(),
                "call {panic_at} of {calls}: {key:?} lost its window"
            );
        }
        assert_eq!(
            keyed.try_acquire(grower, 1).unwrap().is_allowed(),
            !inserted,
            "call {panic_at} of {calls}: {grower:?}"
        );
        // The shard grows on past its next growths, every key kept.
        for key in &rest[1..] {
            assert!(keyed.try_acquire(key, 1).unwrap().is_allowed(), "{key:?}");
        }
        assert_eq!(keyed.len(), keys.len(), "call {panic_at} of {calls}");
        for key in keys {
            assert!(
                !keyed.try_acquire(key, 1).unwrap().is_allowed(),
                "call {panic_at} of {calls}: {key:?} after the growths"
            );
        }
    }
}

/// The words a pair is stored as (each XOR its constant of `PairCell::MASKS`).
fn stored_as([high, low]: [u64; 2]) -> [u64; 2] {
    let masks = PairCell::<u128>::MASKS;
    [high ^ masks[0], low ^ masks[1]]
}

#[test]
fn a_panic_in_hash_or_from_pair_during_a_growth_loses_no_pair_key() {
    // Stored (0, 0), (0, 5) and (5, 0) among the five keys the growth moves, and keys whose
    // half-written pairs read as those.
    let mut keys: Vec<Pair> = [[0, 0], [9, 9], [0, 5], [5, 0], [7, 5]]
        .map(|stored| Pair(stored_as(stored)))
        .to_vec();
    keys.extend((1..=20).map(|x| Pair(stored_as([5, 100 + x]))));
    a_panic_at_any_call_of_a_growing_insert_loses_no_key(&keys);
}

#[test]
fn a_panic_in_hash_during_a_growth_loses_no_once_lock_key() {
    let keys: Vec<Boxed> = (0..25).map(Boxed).collect();
    a_panic_at_any_call_of_a_growing_insert_loses_no_key(&keys);
}
