//! Review of the 16-byte keyed slots (issue 16): a `WordKey` of a user's own whose `to_word`
//! panics, and the zero key through the rebuilds and wrappers `keyed_zero_key.rs` does not
//! reach (shrink to fit, `PenalizedKeyed`, `KeyedInFlight`).

use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use floodgate::keyed::{Key, WordCell, WordKey};
use floodgate::{FixedWindow, Keyed, ManualClock};

#[path = "support/one_a_minute.rs"]
mod one_a_minute;
use one_a_minute::one_a_minute;

/// A word key of a user's own whose `to_word` panics on one value (13), and whose keys all hash
/// alike, so each new key goes to the first empty slot of one probe sequence.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Picky(u64);

impl Hash for Picky {
    fn hash<H: Hasher>(&self, _state: &mut H) {}
}

impl WordKey for Picky {
    fn to_word(self) -> u64 {
        assert!(self.0 != 13, "13 has no word");
        self.0
    }
    fn from_word(word: u64) -> Self {
        Picky(word)
    }
}

impl Key for Picky {
    type Cell = WordCell<Self>;
}

/// A panic in a user's `to_word` (user code, as `Hash` and `Eq` are) on a new key's insert
/// leaves no trace: the key is not counted, and the slot the insert chose is not left holding
/// that key's first decision for the next key to land there.
#[test]
fn a_to_word_that_panics_on_insert_leaves_no_decision_behind() {
    let keyed = one_a_minute::<Picky>();
    let panicked = catch_unwind(AssertUnwindSafe(|| keyed.try_acquire(&Picky(13), 1)));
    assert!(panicked.is_err(), "to_word panicked");
    // Picky(5) goes to the slot Picky(13)'s insert chose: a fresh key, its own permit.
    assert!(
        keyed.try_acquire(&Picky(5), 1).unwrap().is_allowed(),
        "a new key decided on the word of another's failed insert"
    );
    assert!(!keyed.try_acquire(&Picky(5), 1).unwrap().is_allowed());
    assert_eq!(keyed.len(), 1, "a key that is not held is not counted");
    assert_eq!(keyed.stats().keys, 1);
    // The map still works for the other keys, key 0 among them.
    assert!(keyed.try_acquire(&Picky(0), 1).unwrap().is_allowed());
    assert!(!keyed.try_acquire(&Picky(0), 1).unwrap().is_allowed());
    assert_eq!(keyed.len(), 2);
}

/// Key 0 through `shrink` (a rebuild sized to the keys kept, off its growth-sized table):
/// kept with its window while the idle keys around it go.
#[test]
fn the_zero_key_survives_a_shrink_with_its_window() {
    let clock = ManualClock::new();
    let keyed: Keyed<u64, FixedWindow, ManualClock> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
            .clock(clock.clone())
            .max_keys(4096)
            .shards(1)
            .build()
            .unwrap();
    for key in 1..500u64 {
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
    }
    clock.advance(Duration::from_secs(61));
    // Key 0 (and 7) decided after the others went idle: live through the shrink.
    assert!(keyed.try_acquire(&0u64, 1).unwrap().is_allowed());
    assert!(keyed.try_acquire(&7u64, 1).unwrap().is_allowed());
    assert_eq!(keyed.shrink(), 498, "keys 1..500 but 7");
    assert_eq!(keyed.len(), 2);
    assert!(!keyed.try_acquire(&0u64, 1).unwrap().is_allowed(), "kept");
    assert!(!keyed.try_acquire(&7u64, 1).unwrap().is_allowed(), "kept");
    assert!(keyed.try_acquire(&1u64, 1).unwrap().is_allowed());
    assert_eq!(keyed.len(), 3, "key 1 dropped, inserted again");
    assert!(
        !keyed.try_acquire(&0u64, 1).unwrap().is_allowed(),
        "key 0 still found"
    );
}

/// Key 0 in a `PenalizedKeyed`: struck out and blocked, its block its own, lifted by `forget`.
#[test]
fn a_penalized_zero_key_is_blocked_and_forgotten_like_any_other() {
    use floodgate::PenaltyBox;
    let penalty = PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(ManualClock::new())
        .max_keys(64)
        .shards(1)
        .build_with_penalty::<u64>(penalty)
        .unwrap();
    assert!(keyed.check(&0).is_allowed());
    assert!(keyed.check(&1).is_allowed());
    assert!(!keyed.check(&0).is_allowed() && !keyed.check(&0).is_allowed());
    assert!(keyed.is_blocked(&0), "two strikes");
    assert!(!keyed.is_blocked(&1));
    assert!(!keyed.is_blocked(&2), "not held");
    assert_eq!(keyed.len(), 2);
    assert!(keyed.forget(&0) && !keyed.forget(&0));
    assert!(!keyed.is_blocked(&0));
    assert!(keyed.check(&0).is_allowed());
    assert!(!keyed.check(&1).is_allowed(), "key 1 kept its window");
}

/// Key 0 in a `KeyedInFlight`: its own permits, held across other keys' inserts and the growth
/// they bring, dropped by `retain_busy` only once returned.
#[test]
fn an_in_flight_zero_key_holds_its_permits_across_growth() {
    use floodgate::concurrency::KeyedInFlight;
    let keyed: KeyedInFlight<u64> = KeyedInFlight::new(2, 4096).unwrap();
    let a = keyed.try_acquire(&0, 2).unwrap().expect("free");
    assert!(keyed.try_acquire(&0, 1).unwrap().is_none(), "at its limit");
    let mut held = Vec::new();
    for key in 1..300u64 {
        held.push(keyed.try_acquire(&key, 1).unwrap().expect("free"));
    }
    assert_eq!((keyed.in_flight(&0), keyed.in_flight(&1)), (2, 1));
    assert!(
        keyed.try_acquire(&0, 1).unwrap().is_none(),
        "moved with its count"
    );
    drop(held);
    assert_eq!(keyed.retain_busy(), 299);
    assert_eq!(keyed.len(), 1, "key 0 busy");
    drop(a);
    assert_eq!(keyed.in_flight(&0), 0);
    assert_eq!(keyed.retain_busy(), 1);
    assert_eq!(keyed.len(), 0);
    let b = keyed.try_acquire(&0, 2).unwrap();
    assert!(b.is_some(), "fresh");
}

thread_local! {
    /// `Counted::from_word` calls on this thread; the call numbered `PANIC_AT` panics.
    static FROM_WORD_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static PANIC_AT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A word key of a user's own whose `from_word` can be made to panic on its `n`th call (user
/// code, run on lookups, as `Eq` is). Keys hash by fours (0 to 3 alike, ...), so a rebuild
/// moving them into a new table finds slots taken along their probe sequences.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Counted(u64);

impl Hash for Counted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.0 / 4).hash(state);
    }
}

impl WordKey for Counted {
    fn to_word(self) -> u64 {
        self.0
    }
    fn from_word(word: u64) -> Self {
        let calls = FROM_WORD_CALLS.get() + 1;
        FROM_WORD_CALLS.set(calls);
        assert!(calls != PANIC_AT.get(), "from_word panics on call {calls}");
        Counted(word)
    }
}

impl Key for Counted {
    type Cell = WordCell<Self>;
}

/// A panic in a user's `from_word` at any point of an insert, the growth rebuild it brings
/// among them, loses none of the keys held and leaves the count right: a rebuild runs the
/// user's code only before it takes the old table apart (its pass 1), as it does `Hash` and
/// `Eq`, so a panic there puts the old table back.
#[test]
fn a_from_word_that_panics_during_a_growth_loses_no_key() {
    // The first insert that grows the shard: it runs `from_word` on every key (pass 1).
    let keyed = one_a_minute::<Counted>();
    let mut growth = None;
    for key in 0..64u64 {
        FROM_WORD_CALLS.set(0);
        assert!(keyed.try_acquire(&Counted(key), 1).unwrap().is_allowed());
        let calls = FROM_WORD_CALLS.get();
        if calls > key {
            growth = Some((key, calls));
            break;
        }
    }
    let (grower, calls) = growth.expect("a growth within 64 keys");
    for panic_at in 1..=calls {
        let keyed = one_a_minute::<Counted>();
        for key in 0..grower {
            assert!(keyed.try_acquire(&Counted(key), 1).unwrap().is_allowed());
        }
        FROM_WORD_CALLS.set(0);
        PANIC_AT.set(panic_at);
        let result = catch_unwind(AssertUnwindSafe(|| {
            keyed
                .try_acquire(&Counted(grower), 1)
                .map(|d| d.is_allowed())
        }));
        PANIC_AT.set(0);
        let held = match result {
            Ok(allowed) => {
                assert!(allowed.unwrap(), "call {panic_at}: {grower} fresh");
                grower + 1
            }
            Err(_) => grower,
        };
        assert_eq!(keyed.len(), held as usize, "call {panic_at} of {calls}");
        for key in 0..grower {
            assert!(
                !keyed.try_acquire(&Counted(key), 1).unwrap().is_allowed(),
                "call {panic_at} of {calls}: key {key} lost its window"
            );
        }
        assert_eq!(keyed.len(), held as usize, "call {panic_at} of {calls}");
    }
}

/// Key 0 through a judging pass (the sweep an insert runs when a shard is well over its live
/// keys, below its cap): kept with its window while the idle keys around it go.
#[test]
fn the_zero_key_survives_a_judging_pass_with_its_window() {
    let clock = ManualClock::new();
    let keyed: Keyed<u64, FixedWindow, ManualClock> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
            .clock(clock.clone())
            .max_keys(1 << 16)
            .shards(1)
            .build()
            .unwrap();
    for key in 1..=1000u64 {
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
    }
    clock.advance(Duration::from_secs(61));
    assert!(keyed.try_acquire(&0u64, 1).unwrap().is_allowed());
    // New live keys until an insert judges the shard and drops the 1,000 idle ones.
    let mut fresh = 0u64;
    while keyed.len() as u64 == 1001 + fresh && fresh < 10_000 {
        fresh += 1;
        assert!(
            keyed
                .try_acquire(&(100_000 + fresh), 1)
                .unwrap()
                .is_allowed()
        );
    }
    assert_eq!(
        keyed.len() as u64,
        1 + fresh,
        "a pass dropped the idle keys"
    );
    assert_eq!(keyed.stats().evicted_idle, 1000);
    assert!(
        !keyed.try_acquire(&0u64, 1).unwrap().is_allowed(),
        "key 0 kept"
    );
    for key in 1..=fresh {
        assert!(!keyed.try_acquire(&(100_000 + key), 1).unwrap().is_allowed());
    }
    assert_eq!(keyed.len() as u64, 1 + fresh);
}

/// Every built-in word key's word round-trips, and distinct keys of a type have distinct words
/// (so no two keys share a slot), at the edges of each type's range.
#[test]
fn built_in_word_keys_round_trip_with_distinct_words() {
    use std::collections::HashSet;
    use std::net::Ipv4Addr;
    fn check<K: WordKey + PartialEq + std::fmt::Debug>(keys: &[K]) {
        let mut words = HashSet::new();
        for &key in keys {
            assert_eq!(K::from_word(key.to_word()), key);
            assert!(words.insert(key.to_word()), "{key:?} shares its word");
        }
    }
    check(&[0u64, 1, u64::MAX, u64::MAX - 1, 1 << 63]);
    check(&[0i64, 1, -1, i64::MIN, i64::MAX, -2]);
    check(&[0u32, 1, u32::MAX]);
    check(&[0i32, 1, -1, i32::MIN, i32::MAX]);
    check(&[0u16, u16::MAX]);
    check(&[0i16, -1, i16::MIN, i16::MAX]);
    check(&[0u8, 1, u8::MAX]);
    check(&[0i8, -1, i8::MIN, i8::MAX]);
    check(&[0usize, 1, usize::MAX]);
    check(&[0isize, -1, isize::MIN, isize::MAX]);
    check(&[false, true]);
    check(&['\0', 'a', '\u{d7ff}', '\u{e000}', char::MAX]);
    check(&[()]);
    check(&[
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(1, 2, 3, 4),
        Ipv4Addr::new(4, 3, 2, 1),
        Ipv4Addr::BROADCAST,
    ]);
    // The word of an address is its number, most significant octet first.
    assert_eq!(Ipv4Addr::new(1, 2, 3, 4).to_word(), 0x0102_0304);
}
