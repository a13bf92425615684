//! Review of the keyed map as it is now (issue 16): defects found, each with the test that
//! failed before its fix.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use floodgate::limiter::Step;
use floodgate::{
    AcquireError, Algorithm, ConfigError, FixedWindow, Gcra, Keyed, ManualClock, Rate,
};

thread_local! {
    /// Whether the next decision of a [`Fragile`] algorithm on this thread panics.
    static PANIC_NEXT: Cell<bool> = const { Cell::new(false) };
}

/// A fixed window of a user's own whose decision panics once when [`PANIC_NEXT`] says so: a
/// panic in user code run under a shard's mutex (`Algorithm::decide`).
struct Fragile(FixedWindow);

impl Algorithm for Fragile {
    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        self.0.check_permits(n)
    }
    fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        assert!(!PANIC_NEXT.replace(false), "the user's decision panics");
        self.0.decide(state, now, n)
    }
    fn is_idle(&self, state: u64, now: u64) -> bool {
        self.0.is_idle(state, now)
    }
    fn set_limit(&self, limit: u32, now: u64) -> Result<(), ConfigError> {
        self.0.set_limit(limit, now)
    }
    fn limit(&self) -> u64 {
        self.0.limit()
    }
}

/// A panic in the decision of the insert that fills a shard whose cap is below 8 (where the
/// insert that reaches `shard_cap - shard_cap / 8` is the one that fills it, and computes the
/// sweep schedule after its decision) left the schedule unset (`u64::MAX`): the shard, full,
/// never swept again, and refused every new key for good (`retry_after` about 584 years), even
/// while it held an idle key (the one whose decision panicked, never admitted) and long after
/// every other key had gone idle. `lock`'s comment in `shards.rs` promises that a panic under
/// the mutex leaves nothing that breaks a later call. Now the full shard sweeps as it does
/// without the panic.
#[test]
fn a_panic_in_the_decision_that_fills_a_small_shard_leaves_it_sweeping() {
    let clock = ManualClock::new();
    let keyed: Keyed<u64, Fragile, ManualClock> = Keyed::builder(Fragile(
        FixedWindow::new(1, Duration::from_secs(1)).unwrap(),
    ))
    .clock(clock.clone())
    .max_keys(4)
    .shards(1)
    .build()
    .unwrap();
    for key in 1..=3 {
        assert!(keyed.check(&key).is_allowed(), "key {key}");
    }
    PANIC_NEXT.set(true);
    let filled = catch_unwind(AssertUnwindSafe(|| keyed.check(&4)));
    assert!(filled.is_err(), "the decision of key 4 panicked");
    assert!(!PANIC_NEXT.get());
    assert_eq!(keyed.len(), 4, "key 4 is held, fresh: idle");
    // Full, with key 4 idle: a sweep drops it and the new key gets its room (as `peek`, which
    // takes nothing, says first).
    assert!(keyed.peek(&5, 1).unwrap().is_allowed());
    let fifth = keyed.check(&5);
    assert!(
        fifth.is_allowed(),
        "refused with an idle key held: {fifth:?}"
    );
    assert_eq!(keyed.len(), 4);
    assert_eq!(keyed.stats().evicted_idle, 1);
    // Full of live keys now: refused until their windows end, at most 1 s from now.
    let refused = keyed.check(&6);
    assert!(!refused.is_allowed());
    assert!(
        refused.retry_after() <= Duration::from_secs(1),
        "{refused:?}"
    );
    // Every window over: every key idle, so the new key gets the room a sweep makes.
    clock.advance(Duration::from_secs(1));
    assert!(keyed.check(&6).is_allowed());
    assert_eq!(keyed.stats().refused_new_keys, 1);
    // Key 4 was never admitted: fresh, as a key the map never held.
    assert!(keyed.check(&4).is_allowed());
}

/// The docs said a check on a key the map holds "writes nothing shared but the key's word"
/// (`keyed/mod.rs`, the protocol in `shards.rs`, the README). For a time-word algorithm it also
/// raises the map's time floor (at most about once per 16 µs grain): an admission on held key 2
/// read 250 ms ahead lets key 1, drained, be decided at key 2's time. Passes before and after the
/// docs were corrected: it pins what they now say.
#[test]
fn a_check_on_a_held_key_also_writes_the_maps_time_floor() {
    const T: u64 = 1_000_000_000_000;
    let clock = ManualClock::starting_at(T);
    let keyed: Keyed<u32, _, _> = Keyed::builder(Gcra::new(Rate::per_second(10), 3).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(keyed.admit(&2, 1).unwrap(), "key 2 inserted");
    let mut drained = 0;
    while keyed.admit(&1, 1).unwrap() {
        drained += 1;
    }
    assert_eq!(drained, 3, "key 1 drained at T");
    assert_eq!(keyed.len(), 2);
    clock.set(T + 250_000_000);
    assert!(
        keyed.admit(&2, 1).unwrap(),
        "a check on held key 2, 250 ms ahead"
    );
    assert_eq!(keyed.len(), 2, "no insert");
    clock.set(T);
    // Back at T, key 1 is decided at key 2's time: the 2 whole permits of 250 ms, no more.
    assert!(keyed.admit(&1, 1).unwrap() && keyed.admit(&1, 1).unwrap());
    assert!(!keyed.admit(&1, 1).unwrap());
    assert!(keyed.change_instant() >= T + 250_000_000 - floodgate::clock::FLOOR_GRAIN_NANOS);
}

/// The same panic in a shard whose cap is 8 or more, in the decision of a new key past the mark
/// (`shard_cap - shard_cap / 8`, where each insert lowers the sweep schedule to its key's idle
/// time after the decision): the key is held, idle (its decision never ran), and the schedule
/// did not count it, so the full shard refused new keys while holding it, until the other keys'
/// idle time (`keyed_edges.rs` pins that a full shard never refuses a new key while it holds an
/// idle one). Now the schedule is a sweep due at once until the decision is in.
#[test]
fn a_panic_in_a_new_keys_decision_past_the_mark_leaves_no_idle_key_behind_a_refusal() {
    let clock = ManualClock::new();
    let keyed: Keyed<u64, Fragile, ManualClock> = Keyed::builder(Fragile(
        FixedWindow::new(1, Duration::from_secs(1)).unwrap(),
    ))
    .clock(clock.clone())
    .max_keys(16)
    .shards(1)
    .build()
    .unwrap();
    // 14 = 16 - 16 / 8: the mark.
    for key in 1..=14 {
        assert!(keyed.check(&key).is_allowed(), "key {key}");
    }
    PANIC_NEXT.set(true);
    let past = catch_unwind(AssertUnwindSafe(|| keyed.check(&15)));
    assert!(past.is_err(), "the decision of key 15 panicked");
    assert!(!PANIC_NEXT.get());
    assert!(keyed.check(&16).is_allowed(), "fills the shard");
    assert_eq!(keyed.len(), 16, "key 15 held, idle");
    // Full, holding idle key 15: a sweep drops it and the new key gets its room.
    let new = keyed.check(&17);
    assert!(new.is_allowed(), "refused while key 15 is idle: {new:?}");
    assert_eq!(keyed.stats().evicted_idle, 1);
    assert_eq!(keyed.stats().refused_new_keys, 0);
    // Full of live keys: refused until their windows end.
    let refused = keyed.check(&18);
    assert!(!refused.is_allowed());
    assert_eq!(refused.retry_after(), Duration::from_secs(1));
}
