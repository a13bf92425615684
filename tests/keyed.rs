//! Keyed limiting on a ManualClock: exact per-key decisions, the cap, the eviction order, the
//! penalty box, IP keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::{
    Decision, FixedWindow, Gcra, IpKey, IpKeyer, Keyed, LeakyBucket, ManualClock, PenaltyBox, Rate,
    TokenBucket,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

#[test]
fn each_key_has_its_own_fixed_window() {
    let clock = ManualClock::new();
    let keyed: Keyed<String, _, _> =
        Keyed::builder(FixedWindow::aligned(3, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    for remaining in [2, 1, 0] {
        assert_eq!(
            keyed.try_acquire("a", 1).unwrap(),
            Decision::allow(3, remaining, SEC)
        );
    }
    clock.advance(Duration::from_millis(400));
    assert_eq!(
        keyed.try_acquire("a", 1).unwrap(),
        Decision::deny(3, 0, 600 * MS, 600 * MS)
    );
    assert_eq!(
        keyed.try_acquire("b", 2).unwrap(),
        Decision::allow(3, 1, 600 * MS)
    );
    assert_eq!(
        keyed.try_acquire("b", 2).unwrap(),
        Decision::deny(3, 1, 600 * MS, 600 * MS)
    );
    clock.advance(Duration::from_millis(600));
    assert_eq!(
        keyed.try_acquire("a", 3).unwrap(),
        Decision::allow(3, 0, SEC)
    );
    assert_eq!(
        keyed.try_acquire("b", 2).unwrap(),
        Decision::allow(3, 1, SEC)
    );
    assert!(keyed.try_acquire("b", 4).is_err());
    assert!(keyed.try_acquire("b", 0).is_err());
    assert_eq!(keyed.len(), 2);
}

#[test]
fn time_word_algorithms_per_key() {
    let clock = ManualClock::starting_at(10 * SEC);
    let gcra: Keyed<u64, _, _> = Keyed::builder(Gcra::new(Rate::per_second(10), 2).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let bucket: Keyed<u64, _, _> =
        Keyed::builder(TokenBucket::new(Rate::per_second(5), 5).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    let leaky: Keyed<u64, _, _> = Keyed::builder(LeakyBucket::new(Rate::per_second(4), 2).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(
        gcra.try_acquire(&1, 2).unwrap(),
        Decision::allow(2, 0, 200 * MS)
    );
    assert_eq!(
        gcra.try_acquire(&1, 1).unwrap(),
        Decision::deny(2, 0, 100 * MS, 200 * MS)
    );
    assert_eq!(
        gcra.try_acquire(&2, 1).unwrap(),
        Decision::allow(2, 1, 100 * MS)
    );
    assert_eq!(
        bucket.try_acquire(&1, 5).unwrap(),
        Decision::allow(5, 0, SEC)
    );
    assert_eq!(
        bucket.try_acquire(&1, 1).unwrap().retry_after(),
        Duration::from_millis(200)
    );
    assert_eq!(
        leaky.try_acquire(&1, 2).unwrap(),
        Decision::allow(2, 0, 500 * MS)
    );
    clock.advance(Duration::from_millis(250));
    assert_eq!(
        leaky.try_acquire(&1, 1).unwrap(),
        Decision::allow(2, 0, 500 * MS)
    );
    assert_eq!(
        bucket.try_acquire(&1, 1).unwrap(),
        Decision::allow(5, 0, 950 * MS)
    );
    assert_eq!(
        gcra.try_acquire(&1, 2).unwrap(),
        Decision::allow(2, 0, 200 * MS)
    );
}

#[test]
fn a_full_shard_of_live_keys_refuses_new_keys_until_one_goes_idle() {
    let clock = ManualClock::new();
    let one_per_10s = TokenBucket::new(Rate::new(1, Duration::from_secs(10)), 1).unwrap();
    let keyed: Keyed<u32, _, _> = Keyed::builder(one_per_10s)
        .clock(clock.clone())
        .max_keys(2)
        .shards(1)
        .build()
        .unwrap();
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    clock.set(SEC);
    assert!(keyed.try_acquire(&2, 1).unwrap().is_allowed());
    clock.set(2 * SEC);
    // Key 1's bucket is full again at 10 s: the first moment a slot can free up.
    assert_eq!(
        keyed.try_acquire(&3, 1).unwrap(),
        Decision::deny(1, 0, 8 * SEC, 8 * SEC)
    );
    assert_eq!(keyed.stats().refused_new_keys, 1);
    assert_eq!(keyed.stats().sweeps, 0, "nothing could be idle: no sweep");
    assert!(
        !keyed.try_acquire(&1, 1).unwrap().is_allowed(),
        "tracked keys keep their state"
    );
    clock.set(10 * SEC);
    assert_eq!(
        keyed.try_acquire(&3, 1).unwrap(),
        Decision::allow(1, 0, 10 * SEC)
    );
    let stats = keyed.stats();
    assert_eq!(
        (stats.keys, stats.evicted_idle, stats.evicted_live),
        (2, 1, 0)
    );
    assert_eq!(
        keyed.try_acquire(&2, 1).unwrap(),
        Decision::deny(1, 0, SEC, SEC)
    );
}

/// Inserts far below the cap do not keep the sweep schedule (no probe decision each); the
/// insert that brings the shard within an eighth of its cap judges every key. The schedule is
/// then the one an insert-by-insert probe keeps: the earliest idle time among all the keys,
/// including those inserted before the mark, and no sweep before it.
#[test]
fn the_sweep_schedule_counts_the_keys_inserted_far_below_the_cap() {
    let clock = ManualClock::new();
    let one_per_10s = TokenBucket::new(Rate::new(1, Duration::from_secs(10)), 1).unwrap();
    let keyed: Keyed<u32, _, _> = Keyed::builder(one_per_10s)
        .clock(clock.clone())
        .max_keys(16)
        .shards(1)
        .build()
        .unwrap();
    // Keys 0..8 at 0 s (idle from 10 s), far below the mark (14 of 16 keys).
    for key in 0..8 {
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
    }
    // Keys 8..16 at 1 s (idle from 11 s): the 14th key crosses the mark.
    clock.set(SEC);
    for key in 8..16 {
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
    }
    clock.set(2 * SEC);
    // Full of live keys: refused until 10 s, when keys 0..8 go idle (not 11 s, the idle time of
    // the keys inserted after the mark), and nothing is swept before.
    assert_eq!(
        keyed.try_acquire(&16, 1).unwrap(),
        Decision::deny(1, 0, 8 * SEC, 8 * SEC)
    );
    let stats = keyed.stats();
    assert_eq!((stats.sweeps, stats.refused_new_keys), (0, 1));
    clock.set(10 * SEC);
    assert_eq!(
        keyed.try_acquire(&16, 1).unwrap(),
        Decision::allow(1, 0, 10 * SEC)
    );
    let stats = keyed.stats();
    assert_eq!((stats.keys, stats.sweeps, stats.evicted_idle), (9, 1, 8));
}

#[test]
fn idle_keys_go_before_live_ones_and_the_least_used_live_key_goes_first() {
    let clock = ManualClock::new();
    let keyed: Keyed<&'static str, _, _> =
        Keyed::builder(TokenBucket::new(Rate::per_second(1), 10).unwrap())
            .clock(clock.clone())
            .max_keys(3)
            .shards(1)
            .when_full(WhenFull::EvictLeastUsed)
            .build()
            .unwrap();
    keyed.try_acquire(&"idle-soon", 1).unwrap();
    keyed.try_acquire(&"heavy", 9).unwrap();
    keyed.try_acquire(&"light", 3).unwrap();
    clock.set(SEC); // "idle-soon" is full again: forgetting it changes nothing
    keyed.try_acquire(&"new", 1).unwrap();
    let stats = keyed.stats();
    assert_eq!((stats.evicted_idle, stats.evicted_live), (1, 0));
    // Every key is live now; the one holding the fewest permits ("new": 1) goes.
    keyed.try_acquire(&"newer", 1).unwrap();
    assert_eq!(keyed.stats().evicted_live, 1);
    assert_eq!(
        keyed.peek(&"new", 1).unwrap().remaining(),
        9,
        "forgotten: fresh"
    );
    // The survivors decide as an unbounded limiter would: heavy took 9 at 0 s, 1 came back.
    assert_eq!(
        keyed.try_acquire(&"heavy", 2).unwrap(),
        Decision::allow(10, 0, 10 * SEC)
    );
    assert_eq!(
        keyed.try_acquire(&"light", 1).unwrap(),
        Decision::allow(10, 7, 3 * SEC)
    );
    assert_eq!(keyed.len(), 3);
}

/// `stats().sweeps` counts every pass that judges each key of a shard and drops the idle ones,
/// once: the sweep an eviction's rebuild runs (it judges every key to pick the live ones to
/// evict, and drops any idle one first) as much as one run because a key could be idle, or by
/// `retain_recent`. The eviction's went uncounted.
#[test]
fn a_sweep_inside_an_eviction_rebuild_is_counted_once() {
    let clock = ManualClock::new();
    let one_per_10s = TokenBucket::new(Rate::new(1, Duration::from_secs(10)), 1).unwrap();
    let keyed: Keyed<u32, _, _> = Keyed::builder(one_per_10s)
        .clock(clock.clone())
        .max_keys(2)
        .shards(1)
        .when_full(WhenFull::EvictLeastUsed)
        .build()
        .unwrap();
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    assert!(keyed.try_acquire(&2, 1).unwrap().is_allowed());
    assert_eq!(keyed.stats().sweeps, 0, "no pass over the keys yet");
    // Full of live keys (idle from 10 s): no sweep is due, but the eviction judges both keys.
    clock.set(SEC);
    assert!(keyed.try_acquire(&3, 1).unwrap().is_allowed());
    let stats = keyed.stats();
    assert_eq!(
        (stats.evicted_live, stats.evicted_idle, stats.sweeps),
        (1, 0, 1),
        "the eviction's pass is a sweep"
    );
    // At 11 s every key is idle: one due sweep with an eviction planned drops them, counted once.
    clock.set(11 * SEC);
    assert!(keyed.try_acquire(&4, 1).unwrap().is_allowed());
    let stats = keyed.stats();
    assert_eq!(
        (stats.evicted_live, stats.evicted_idle, stats.sweeps),
        (1, 2, 2)
    );
    // `retain_recent` sweeps each shard once.
    assert_eq!(keyed.retain_recent(), 0);
    assert_eq!(keyed.stats().sweeps, 3);
}

#[test]
fn retain_recent_and_shrink_drop_only_idle_keys() {
    let clock = ManualClock::new();
    let keyed: Keyed<u64, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1000), 5).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    for key in 0..100 {
        keyed.try_acquire(&key, 1 + (key % 5) as u32).unwrap();
    }
    // Key k holds 1 + k % 5 permits: idle after that many milliseconds.
    clock.set(2 * MS);
    assert_eq!(keyed.retain_recent(), 40);
    assert_eq!(keyed.peek(&2, 5).unwrap(), Decision::deny(5, 4, MS, MS));
    assert!(keyed.forget(&2));
    assert!(!keyed.forget(&2));
    clock.set(5 * MS);
    assert_eq!(keyed.shrink(), 59);
    assert!(keyed.is_empty());
    assert_eq!(keyed.stats().evicted_idle, 99);
}

#[test]
fn set_limit_applies_to_every_key() {
    let clock = ManualClock::new();
    let keyed: Keyed<u8, _, _> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
            .clock(clock)
            .build()
            .unwrap();
    keyed.try_acquire(&1, 1).unwrap();
    keyed.set_limit(3).unwrap();
    assert_eq!(keyed.try_acquire(&1, 1).unwrap().remaining(), 1);
    assert_eq!(keyed.try_acquire(&2, 3).unwrap().remaining(), 0);
    assert!(keyed.set_limit(0).is_err());
    assert_eq!(keyed.algorithm().window(), Duration::from_secs(1));
}

#[test]
fn bad_configurations_are_errors() {
    let window = || FixedWindow::new(1, Duration::from_secs(1)).unwrap();
    assert!(Keyed::builder(window()).max_keys(0).build::<u8>().is_err());
    assert!(Keyed::builder(window()).shards(3).build::<u8>().is_err());
    assert!(
        Keyed::builder(window())
            .max_keys(4)
            .shards(8)
            .build::<u8>()
            .is_err()
    );
    let keyed = Keyed::builder(window())
        .max_keys(10)
        .shards(4)
        .build::<u8>()
        .unwrap();
    assert_eq!((keyed.max_keys(), keyed.shards()), (8, 4));
    let small = Keyed::builder(window()).max_keys(5).build::<u8>().unwrap();
    assert_eq!((small.max_keys(), small.shards()), (5, 1));
    let big = Keyed::builder(window())
        .max_keys(1 << 20)
        .build::<u8>()
        .unwrap();
    assert!(
        big.shards() >= 256,
        "a sweep looks at no more than 4096 keys"
    );
    // By default a shard holds at least 64 keys of the cap (one shard below 128), so its fixed
    // part is shared by enough keys (tests/keyed_shard_bytes.rs measures the bytes).
    for cap in [64, 100, 127, 128, 255, 256, 1000, 4096, 100_000] {
        let keyed = Keyed::builder(window())
            .max_keys(cap)
            .build::<u8>()
            .unwrap();
        let per_shard = keyed.max_keys() / keyed.shards();
        assert!(per_shard >= 64, "cap {cap}: {} shards", keyed.shards());
        assert_eq!(keyed.max_keys() % keyed.shards(), 0);
    }
    let below = Keyed::builder(window())
        .max_keys(127)
        .build::<u8>()
        .unwrap();
    assert_eq!((below.max_keys(), below.shards()), (127, 1));
}

#[test]
fn penalty_box_blocks_repeat_offenders_per_key() {
    let clock = ManualClock::new();
    let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 2).unwrap())
        .clock(clock.clone())
        .build_with_penalty::<IpKey>(
            PenaltyBox::new(3, Duration::from_secs(10), Duration::from_secs(60)).unwrap(),
        )
        .unwrap();
    let keyer = IpKeyer::new();
    let attacker = keyer.key("2001:db8:bad::1".parse().unwrap());
    let neighbour = keyer.key("2001:db8:bad::2".parse().unwrap()); // same /56
    let other = keyer.key("2001:db8:600d::1".parse().unwrap());
    assert_eq!(attacker, neighbour);
    assert!(keyed.try_acquire(&attacker, 2).unwrap().is_allowed());
    assert_eq!(
        keyed.try_acquire(&attacker, 1).unwrap().retry_after(),
        Duration::from_secs(1)
    );
    clock.set(100 * MS);
    assert!(!keyed.try_acquire(&neighbour, 1).unwrap().is_allowed()); // strike 2
    assert!(!keyed.is_blocked(&attacker));
    clock.set(200 * MS);
    let blocked = keyed.try_acquire(&attacker, 1).unwrap(); // strike 3: blocked for 60 s
    assert_eq!(blocked, Decision::deny(2, 0, 60 * SEC, 60 * SEC));
    assert!(keyed.is_blocked(&attacker));
    assert!(keyed.try_acquire(&other, 2).unwrap().is_allowed());
    clock.set(59 * SEC);
    assert_eq!(
        keyed.try_acquire(&attacker, 1).unwrap().retry_after(),
        Duration::from_millis(1200)
    );
    assert_eq!(
        keyed.retain_recent(),
        1,
        "only `other` is idle; the blocked key stays"
    );
    clock.set(60 * SEC + 200 * MS);
    assert!(keyed.try_acquire(&attacker, 2).unwrap().is_allowed());
    assert!(!keyed.try_acquire(&attacker, 1).unwrap().is_allowed()); // strike 1 of a new record
    assert!(!keyed.is_blocked(&attacker));
    assert!(keyed.forget(&attacker));
    assert_eq!(keyed.len(), 0);
    assert_eq!(keyed.penalty().strikes(), 3);
}

#[test]
fn strikes_outside_the_span_do_not_block() {
    let clock = ManualClock::new();
    let keyed = Keyed::builder(FixedWindow::aligned(1, Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .build_with_penalty::<u8>(
            PenaltyBox::new(2, Duration::from_secs(1), Duration::from_secs(30)).unwrap(),
        )
        .unwrap();
    keyed.try_acquire(&1, 1).unwrap();
    assert!(!keyed.try_acquire(&1, 1).unwrap().is_allowed()); // strike 1 at 0 s
    clock.set(SEC);
    keyed.try_acquire(&1, 1).unwrap();
    assert_eq!(
        keyed.try_acquire(&1, 1).unwrap().retry_after(),
        Duration::from_secs(1)
    ); // new span
    assert!(!keyed.is_blocked(&1));
}

#[test]
fn a_lagging_clock_read_is_not_refused_for_the_lag() {
    // As for AtomicLimiter: a key's bucket of 2 at 10/s has one token left after a request at
    // 10 s; a core whose clock reads 3 ns behind is decided at the map's published time floor.
    let clock = ManualClock::starting_at(10 * SEC);
    let keyed: Keyed<u64, _, _> = Keyed::builder(Gcra::new(Rate::per_second(10), 2).unwrap())
        .max_keys(64)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(keyed.try_acquire(&7, 1).unwrap().is_allowed());
    clock.set(10 * SEC - 3);
    let lagged = keyed.try_acquire(&7, 1).unwrap();
    assert!(lagged.is_allowed(), "{lagged:?}");
    assert_eq!(lagged.remaining(), 0);
    assert!(!keyed.try_acquire(&7, 1).unwrap().is_allowed());
}

/// Drains `keys` keys (0..keys) at the clock's time, makes one admission on a new key (`far`)
/// `lead` ahead, and goes back: how many permits each drained key is admitted at the old time,
/// sweep after sweep, until one sweep admits nothing (at most 4 sweeps).
fn permits_per_sweep_after_a_lead<A: floodgate::Algorithm>(
    algorithm: A,
    drained_at: u64,
    lead: u64,
) -> Vec<Vec<u32>> {
    const KEYS: u32 = 256;
    let clock = ManualClock::starting_at(drained_at);
    let keyed: Keyed<u32, A, _> = Keyed::builder(algorithm)
        .clock(clock.clone())
        .max_keys(100_000)
        .shards(64)
        .build()
        .unwrap();
    for key in 0..KEYS {
        while keyed.admit(&key, 1).unwrap() {}
    }
    clock.set(drained_at + lead);
    assert!(
        keyed.admit(&1_000_000, 1).unwrap(),
        "the leaping read admits"
    );
    clock.set(drained_at);
    let mut sweeps = Vec::new();
    loop {
        let sweep: Vec<u32> = (0..KEYS)
            .map(|key| {
                let mut admitted = 0;
                while keyed.admit(&key, 1).unwrap() {
                    admitted += 1;
                }
                admitted
            })
            .collect();
        let done = sweep.iter().all(|&n| n == 0);
        sweeps.push(sweep);
        if done || sweeps.len() == 4 {
            return sweeps;
        }
    }
}

/// The cost of the map-wide time floor (README, "Time model"): one admission on ONE key whose
/// clock read is `lead` (≤ H) ahead raises the floor of the whole map, so every other time-word
/// key is decided at that later time until real time reaches it. Each key gains at most the
/// permits that accrue in `lead`, min(capacity, ⌈lead × rate⌉), once: the sweep after gains
/// nothing. A lead beyond H is ignored (never obeyed by a present-time reader), and the windows
/// have no floor at all. 256 keys over 64 shards: nearly all in other shards than the leaper.
#[test]
fn a_lead_on_one_key_lifts_every_bucket_key_once_by_at_most_what_accrues_in_it() {
    const T: u64 = 1_700_000_000 * SEC;
    let gcra = || Gcra::new(Rate::per_second(10), 3).unwrap();
    // Drained at T exactly: 250 ms accrue 2.5 permits, 2 whole ones (< capacity 3).
    let sweeps = permits_per_sweep_after_a_lead(gcra(), T, 250 * MS);
    assert_eq!(sweeps.len(), 2, "{sweeps:?}");
    assert!(sweeps[0].iter().all(|&n| n == 2), "{:?}", sweeps[0]);
    // 9 s (within H = 10 s) accrue 90: the capacity caps it.
    let sweeps = permits_per_sweep_after_a_lead(gcra(), T, 9 * SEC);
    assert_eq!(sweeps.len(), 2, "{sweeps:?}");
    assert!(sweeps[0].iter().all(|&n| n == 3), "{:?}", sweeps[0]);
    // Beyond H: the floor is a leaping clock's and is ignored; nothing is lifted.
    let sweeps = permits_per_sweep_after_a_lead(gcra(), T, 11 * SEC);
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
    // A fixed window pins its own window: no floor, nothing lifted.
    let window = FixedWindow::aligned(3, Duration::from_secs(1)).unwrap();
    let sweeps = permits_per_sweep_after_a_lead(window, T, 9 * SEC);
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
}

/// Set to a key's value to make hashing that key panic (see [`Touchy`]).
static PANIC_HASHING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A key whose `Hash` panics while [`PANIC_HASHING`] names it (a user's faulty `Hash`).
#[derive(Clone, PartialEq, Eq, Debug)]
struct Touchy(u64);

impl floodgate::Key for Touchy {
    type Cell = floodgate::keyed::OnceLockCell<Self>;
}

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        if PANIC_HASHING.load(std::sync::atomic::Ordering::SeqCst) == self.0 {
            panic!("hashing key {} failed", self.0);
        }
        self.0.hash(state);
    }
}

/// A one-shard map (room for 64 keys) of one-permit windows on a manual clock, holding `keys`,
/// each admitted once.
fn one_shard_holding<K: floodgate::Key>(
    keys: impl IntoIterator<Item = K>,
) -> Keyed<K, FixedWindow, ManualClock> {
    let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(ManualClock::new())
        .shards(1)
        .max_keys(64)
        .build()
        .unwrap();
    for key in keys {
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
    }
    keyed
}

/// A one-shard map of one-permit windows holding `keys` (each admitted once), after a `forget`
/// of `forgotten` whose rebuild unwound on hashing `panicking` (its shard's mutex poisoned).
fn after_an_unwound_rebuild(
    keys: std::ops::RangeInclusive<u64>,
    forgotten: u64,
    panicking: u64,
) -> Keyed<Touchy, FixedWindow, ManualClock> {
    let keyed = one_shard_holding(keys.map(Touchy));
    PANIC_HASHING.store(panicking, std::sync::atomic::Ordering::SeqCst);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        keyed.forget(&Touchy(forgotten))
    }));
    PANIC_HASHING.store(0, std::sync::atomic::Ordering::SeqCst);
    assert!(unwound.is_err(), "the rebuild hashes key {panicking}");
    keyed
}

/// A panic in a user's `Hash` while a rebuild moves keys (here `forget` of another key) loses no
/// key's state: the shard keeps its table. Found by review: the rebuild re-hashed the kept keys
/// after taking the old table apart, so the panic left the shard empty and every key of it was
/// admitted afresh (a lost admission per key).
#[test]
fn a_panic_in_hash_during_a_rebuild_keeps_every_key() {
    let keyed = after_an_unwound_rebuild(1..=8, 1, 5);
    for key in 1..=8 {
        assert!(
            !keyed.try_acquire(&Touchy(key), 1).unwrap().is_allowed(),
            "key {key} admitted twice in its window"
        );
    }
    assert_eq!(keyed.len(), 8);
}

/// After a rebuild that unwound (its shard's mutex poisoned, its table put back), a new key is
/// inserted through the poisoned mutex into the table that stayed: the insert that gets the
/// mutex at once (`try_lock` answering `Poisoned`) keeps its lookup's table and the empty slot
/// the lookup's search ended at. The key is admitted once in its window and counted; the keys
/// held before keep their admissions.
#[test]
fn a_new_key_after_a_rebuild_that_unwound_lands_in_the_table_that_stayed() {
    let keyed = after_an_unwound_rebuild(101..=108, 101, 105);
    for key in 109..=112 {
        assert!(
            keyed.try_acquire(&Touchy(key), 1).unwrap().is_allowed(),
            "new key {key} admitted through the poisoned mutex"
        );
        assert!(
            !keyed.try_acquire(&Touchy(key), 1).unwrap().is_allowed(),
            "new key {key} found again with its admission"
        );
    }
    for key in 101..=108 {
        assert!(!keyed.try_acquire(&Touchy(key), 1).unwrap().is_allowed());
    }
    assert_eq!(keyed.len(), 12);
    assert!(
        keyed.forget(&Touchy(101)),
        "a rebuild runs after the poisoning"
    );
    assert_eq!(keyed.len(), 11);
}

/// Set to a key's value to make the next drop of that key panic, once (see [`Brittle`]).
static PANIC_DROPPING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A key whose `Drop` panics once when [`PANIC_DROPPING`] names it (a user's faulty `Drop`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Brittle(u64);

impl floodgate::Key for Brittle {
    type Cell = floodgate::keyed::OnceLockCell<Self>;
}

impl Drop for Brittle {
    fn drop(&mut self) {
        let once = PANIC_DROPPING.compare_exchange(
            self.0,
            0,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
        );
        if once.is_ok() {
            panic!("dropping key {} failed", self.0);
        }
    }
}

/// A panic in a user's `Drop` of a key a rebuild drops (here the key `forget` names) loses no
/// other key's state: the rebuild publishes the new table before it drops the keys it let go.
/// Before, the drop ran while the keys were being moved, and the panic left the placeholder
/// table, which the next call replaced with an empty one: every key of the shard was admitted
/// afresh (a lost admission per key).
#[test]
fn a_panic_in_a_dropped_keys_drop_during_a_rebuild_keeps_every_other_key() {
    let keyed = one_shard_holding((1..=8).map(Brittle));
    PANIC_DROPPING.store(3, std::sync::atomic::Ordering::SeqCst);
    let unwound =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| keyed.forget(&Brittle(3))));
    assert!(unwound.is_err(), "the forgotten key's drop panics");
    assert_eq!(
        PANIC_DROPPING.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the panicking drop ran"
    );
    assert_eq!(keyed.len(), 7, "only the forgotten key is gone");
    for key in (1..=8).filter(|&key| key != 3) {
        assert!(
            !keyed.try_acquire(&Brittle(key), 1).unwrap().is_allowed(),
            "key {key} admitted twice in its window"
        );
    }
    assert!(
        keyed.try_acquire(&Brittle(3), 1).unwrap().is_allowed(),
        "the forgotten key starts over"
    );
    assert_eq!(keyed.len(), 8);
}

#[test]
fn a_bad_permit_count_is_an_error_on_every_path_and_inserts_nothing() {
    // The lock-free path of a held key leaves the check of `n` to the key's slot; a new key is
    // checked before it is inserted; a blocked key of a PenalizedKeyed is checked before its
    // block is reported. Each path names the constraint and the bad value.
    use floodgate::AcquireError;
    let too_many = AcquireError::ExceedsCapacity {
        requested: 3,
        capacity: 2,
    };
    let keyed: Keyed<u64, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1), 2).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(keyed.try_acquire(&1, 0), Err(AcquireError::ZeroPermits));
    assert_eq!(keyed.try_acquire(&1, 3), Err(too_many));
    assert!(keyed.is_empty(), "a refused request inserts no key");
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    assert_eq!(keyed.try_acquire(&1, 0), Err(AcquireError::ZeroPermits));
    assert_eq!(keyed.try_acquire(&1, 3), Err(too_many));
    assert_eq!(keyed.try_acquire(&1, 1).unwrap().remaining(), 0);

    let window = FixedWindow::aligned(2, Duration::from_secs(1)).unwrap();
    let jailed = Keyed::builder(window)
        .clock(ManualClock::new())
        .build_with_penalty::<u8>(
            PenaltyBox::new(1, Duration::from_secs(1), Duration::from_secs(30)).unwrap(),
        )
        .unwrap();
    assert_eq!(jailed.try_acquire(&1, 3), Err(too_many));
    assert!(jailed.is_empty());
    assert!(jailed.try_acquire(&1, 2).unwrap().is_allowed());
    assert!(!jailed.try_acquire(&1, 1).unwrap().is_allowed()); // one strike: blocked
    assert!(jailed.is_blocked(&1));
    assert_eq!(jailed.try_acquire(&1, 0), Err(AcquireError::ZeroPermits));
    assert_eq!(jailed.try_acquire(&1, 3), Err(too_many));
    assert_eq!(
        jailed.try_acquire(&1, 1).unwrap().retry_after(),
        Duration::from_secs(30)
    );
}

#[test]
fn a_blocked_key_whose_limiter_is_idle_is_still_evicted_last() {
    // README: "Blocked keys are evicted last." A block outlives the limiter's own state (here
    // a bucket full again after 1 s, a block of 60 s): the key must not become the first
    // eviction candidate then, or any new key lifts the block by evicting it.
    let clock = ManualClock::new();
    let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 2).unwrap())
        .clock(clock.clone())
        .max_keys(3)
        .shards(1)
        .when_full(WhenFull::EvictLeastUsed)
        .build_with_penalty::<&'static str>(
            PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(60)).unwrap(),
        )
        .unwrap();
    assert!(keyed.try_acquire(&"attacker", 2).unwrap().is_allowed());
    assert!(!keyed.try_acquire(&"attacker", 1).unwrap().is_allowed()); // blocked for 60 s
    clock.set(5 * SEC); // the bucket is full again; the block has 55 s left
    assert!(keyed.is_blocked(&"attacker"));
    assert!(keyed.try_acquire(&"a", 2).unwrap().is_allowed()); // 2 permits held
    assert!(keyed.try_acquire(&"b", 2).unwrap().is_allowed()); // 2 permits held
    // Full of live keys: a new key evicts the one holding the fewest permits, not the blocked one.
    assert!(keyed.try_acquire(&"new", 1).unwrap().is_allowed());
    assert_eq!(keyed.stats().evicted_live, 1);
    assert!(
        keyed.is_blocked(&"attacker"),
        "the block was lifted by an eviction"
    );
    assert!(!keyed.try_acquire(&"attacker", 1).unwrap().is_allowed());
}

#[test]
fn a_block_shorter_than_the_span_does_not_keep_new_keys_out_after_it_ends() {
    // A strike that starts a block brings the key's idle time forward (from the span's end to
    // the block's): a full shard must not go on refusing new keys until the span's end.
    let clock = ManualClock::new();
    let keyed = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .max_keys(1)
        .shards(1)
        .build_with_penalty::<u8>(
            PenaltyBox::new(2, Duration::from_secs(600), Duration::from_secs(1)).unwrap(),
        )
        .unwrap();
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    assert!(!keyed.try_acquire(&1, 1).unwrap().is_allowed()); // strike 1: the span runs to 600 s
    clock.set(SEC);
    // Full of a live key (its strike is recorded until 600 s): refused.
    assert!(!keyed.try_acquire(&2, 1).unwrap().is_allowed());
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    assert!(!keyed.try_acquire(&1, 1).unwrap().is_allowed()); // strike 2: blocked to 2 s
    assert!(keyed.is_blocked(&1));
    clock.set(3 * SEC); // block over, window over, record clean: key 1 is idle
    assert!(!keyed.is_blocked(&1));
    let new = keyed.try_acquire(&2, 1).unwrap();
    assert!(
        new.is_allowed(),
        "refused a new key for {:?}",
        new.retry_after()
    );
}

#[test]
fn a_blocked_keys_reset_after_covers_its_limiter_refilling() {
    // `reset_after` is when the limiter is back to full capacity: the strike that starts a block
    // says so (the later of the block's end and the bucket's refill); later denials during the
    // block must not say less.
    let clock = ManualClock::new();
    let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 100).unwrap())
        .clock(clock.clone())
        .build_with_penalty::<u8>(
            PenaltyBox::new(1, Duration::from_secs(10), Duration::from_secs(1)).unwrap(),
        )
        .unwrap();
    assert!(keyed.try_acquire(&1, 100).unwrap().is_allowed());
    let blocking = keyed.try_acquire(&1, 1).unwrap();
    assert_eq!(blocking.retry_after(), Duration::from_secs(1));
    assert_eq!(blocking.reset_after(), Duration::from_secs(100));
    clock.set(500 * MS);
    let blocked = keyed.try_acquire(&1, 1).unwrap();
    assert_eq!(blocked.retry_after(), Duration::from_millis(500));
    assert_eq!(blocked.reset_after(), Duration::from_millis(99_500));
}

/// A key whose `Clone` (the copy an insert stores, made under the shard's mutex) stops for key 99
/// until the test says go: it holds its shard's mutex meanwhile.
#[derive(Debug, PartialEq, Eq, Hash)]
struct HeldKey(u32);

impl floodgate::Key for HeldKey {
    type Cell = floodgate::keyed::OnceLockCell<Self>;
}

/// For key 99's clone: says "inside" on the first channel, then waits (bounded) for the second.
/// Whether the go came in time is left in `PEEKED_IN_TIME`.
static HOLD: std::sync::Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>> =
    std::sync::Mutex::new(None);
static PEEKED_IN_TIME: AtomicBool = AtomicBool::new(false);

impl Clone for HeldKey {
    fn clone(&self) -> Self {
        if self.0 == 99
            && let Some((inside, go)) = HOLD.lock().unwrap().take()
        {
            inside.send(()).unwrap();
            // A bound on the wait so a peek that takes the mutex fails the test instead of
            // hanging it: that peek can only return after this clone does.
            let in_time = go.recv_timeout(Duration::from_secs(10)).is_ok();
            PEEKED_IN_TIME.store(in_time, Ordering::SeqCst);
        }
        HeldKey(self.0)
    }
}

/// Issue 16: the read path takes no lock. `peek` on a key the map does not hold, in a shard below
/// its cap, and `len`, answer while another thread holds the shard's mutex (inserting a key);
/// they used to wait for the mutex to read the shard's key count.
#[test]
fn peek_on_an_absent_key_below_the_cap_takes_no_lock() {
    let keyed: Keyed<HeldKey, _, _> =
        Keyed::builder(TokenBucket::new(Rate::per_second(1), 2).unwrap())
            .clock(ManualClock::new())
            .max_keys(4)
            .shards(1)
            .build()
            .unwrap();
    assert!(keyed.try_acquire(&HeldKey(1), 1).unwrap().is_allowed());
    let (inside_tx, inside) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    *HOLD.lock().unwrap() = Some((inside_tx, go_rx));
    std::thread::scope(|scope| {
        let inserter = scope.spawn(|| keyed.try_acquire(&HeldKey(99), 1).unwrap());
        inside.recv().unwrap(); // the inserter holds the shard's mutex now
        let peeked = keyed.peek(&HeldKey(5), 2).unwrap();
        // `len` takes no lock either (it read every shard's count under its mutex).
        let held = keyed.len();
        let _ = go.send(());
        assert_eq!(held, 1, "the key being inserted is not counted yet");
        assert!(inserter.join().unwrap().is_allowed());
        assert_eq!(
            peeked,
            Decision::allow(2, 0, 2 * SEC),
            "room: a fresh key's answer"
        );
    });
    assert!(
        PEEKED_IN_TIME.load(Ordering::SeqCst),
        "peek on an absent key waited for the shard's mutex"
    );
    // At the cap the same peek refuses, as the next try does.
    for key in [2, 3] {
        assert!(keyed.try_acquire(&HeldKey(key), 1).unwrap().is_allowed());
    }
    assert_eq!(keyed.len(), 4);
    let peeked = keyed.peek(&HeldKey(5), 1).unwrap();
    assert!(!peeked.is_allowed(), "{peeked:?}");
    assert_eq!(keyed.try_acquire(&HeldKey(5), 1).unwrap(), peeked);
}

/// A key whose `Hash` stops for key 99 until the test says go, while an insert of it holds its
/// shard's mutex (an insert hashes the key again under the mutex when its table is rebuilt, and
/// its `Clone` runs there: this type stops in `Clone`, as `HeldKey`, with its own channels).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ScrapedKey(u32);

impl floodgate::Key for ScrapedKey {
    type Cell = floodgate::keyed::OnceLockCell<Self>;
}

static SCRAPE_HOLD: std::sync::Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>> =
    std::sync::Mutex::new(None);
static SCRAPED_IN_TIME: AtomicBool = AtomicBool::new(false);

impl Clone for ScrapedKey {
    fn clone(&self) -> Self {
        if self.0 == 99
            && let Some((inside, go)) = SCRAPE_HOLD.lock().unwrap().take()
        {
            inside.send(()).unwrap();
            // Bounded, so a `stats` that takes the mutex fails the test instead of hanging it.
            let in_time = go.recv_timeout(Duration::from_secs(10)).is_ok();
            SCRAPED_IN_TIME.store(in_time, Ordering::SeqCst);
        }
        ScrapedKey(self.0)
    }
}

/// Issue 16: `stats()` takes no lock. A metrics scrape answers while another thread holds the
/// shard's mutex (inserting a key), with the counts as they were before that insert; it used to
/// lock every shard's mutex, so it waited on inserts and delayed them.
#[test]
fn stats_answers_while_an_insert_holds_the_shards_mutex() {
    let clock = ManualClock::new();
    let keyed: Keyed<ScrapedKey, _, _> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .max_keys(2)
            .shards(1)
            .build()
            .unwrap();
    // Counters that are not zero: a refused new key, then a sweep that drops an idle key.
    assert!(keyed.try_acquire(&ScrapedKey(1), 1).unwrap().is_allowed());
    assert!(keyed.try_acquire(&ScrapedKey(2), 1).unwrap().is_allowed());
    assert!(!keyed.try_acquire(&ScrapedKey(3), 1).unwrap().is_allowed());
    clock.set(SEC); // both keys idle: the next new key sweeps them
    assert!(keyed.try_acquire(&ScrapedKey(3), 1).unwrap().is_allowed());
    let before = keyed.stats();
    assert_eq!(
        (
            before.keys,
            before.evicted_idle,
            before.refused_new_keys,
            before.sweeps
        ),
        (1, 2, 1, 1)
    );
    let (inside_tx, inside) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    *SCRAPE_HOLD.lock().unwrap() = Some((inside_tx, go_rx));
    std::thread::scope(|scope| {
        let inserter = scope.spawn(|| keyed.try_acquire(&ScrapedKey(99), 1).unwrap());
        inside.recv().unwrap(); // the inserter holds the shard's mutex now
        let scraped = keyed.stats();
        let _ = go.send(());
        assert!(inserter.join().unwrap().is_allowed());
        assert!(
            SCRAPED_IN_TIME.load(Ordering::SeqCst),
            "stats() waited for the shard's mutex"
        );
        assert_eq!(scraped, before, "the key being inserted is not counted yet");
    });
    assert_eq!(keyed.stats().keys, 2);
}

/// A growth rebuild (a table three-quarters full in a shard below its cap) judges nothing: keys
/// idle by then stay, and it counts no sweep and no eviction, whether it copies the keys in one
/// pass (word and pair keys: `copy_all`, which reads no clock) or moves them in two (`OnceLock`
/// keys, which read the clock but drop nothing). Before the one-pass growth (issue 16) neither
/// kind dropped a key on growth; this pins that the one pass changed nothing there.
#[test]
fn a_growth_keeps_idle_keys_and_counts_no_sweep() {
    fn grow_past_idle_keys<K: floodgate::Key>(key: impl Fn(u64) -> K) {
        let clock = ManualClock::new();
        let keyed: Keyed<K, _, _> =
            Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
                .clock(clock.clone())
                .max_keys(64)
                .shards(1)
                .build()
                .unwrap();
        // The shard's first table (7 slots) takes 5 keys: the sixth key's insert grows it.
        for i in 1..=5 {
            assert!(keyed.try_acquire(&key(i), 1).unwrap().is_allowed());
        }
        clock.advance(Duration::from_secs(3_600)); // every key idle
        assert!(keyed.try_acquire(&key(6), 1).unwrap().is_allowed());
        let stats = keyed.stats();
        assert_eq!(
            (
                stats.keys,
                stats.sweeps,
                stats.evicted_idle,
                stats.evicted_live
            ),
            (6, 0, 0, 0),
            "{}",
            std::any::type_name::<K>()
        );
        assert_eq!(keyed.len(), 6);
    }
    grow_past_idle_keys(|i| i); // u64: WordCell, one pass
    grow_past_idle_keys(|i| (u128::from(i) << 70) | u128::from(i)); // PairCell, one pass
    grow_past_idle_keys(|i| format!("key-{i}")); // OnceLockCell, two passes
}
