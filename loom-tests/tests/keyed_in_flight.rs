#![cfg(floodgate_loom)]
//! loom model of `KeyedInFlight` (`concurrency/keyed.rs`): a key's counter (the CAS loop of
//! `take`, the Release `fetch_sub` of a permit's drop) racing the map's sweep, which drops a key
//! it judges idle (`KeySlotArc::liveness`) to make room for a new one. A key holding a permit
//! must never be dropped: a dropped key's next taker would start from a fresh counter and be
//! admitted past the limit.

use floodgate::concurrency::KeyedInFlight;
use floodgate_loom_tests::{ModelClock, model};
use loom::sync::Arc;
use loom::thread;

/// Real time past the sweep backoff, so a full shard sweeps at once.
const NOW: u64 = 1_000_000_000;

/// One permit per key, room for one key. A takes key 1's permit and holds it; B takes key 2's
/// (a new key in a full map: the sweep may drop key 1 only if it is idle), drops it, and takes
/// key 1's. Never do A and B hold key 1's permit at once, and key 1's count stays exact.
fn held_key_model(preinsert: bool) {
    model(None, move || {
        let keyed: Arc<KeyedInFlight<u32, ModelClock>> =
            Arc::new(KeyedInFlight::with_clock(1, 1, ModelClock::starting_at(NOW)).unwrap());
        if preinsert {
            // Key 1 in the map, idle: A finds it lock-free while B's sweep may drop it.
            drop(keyed.try_acquire(&1, 1).unwrap().unwrap());
        }
        let a = {
            let keyed = keyed.clone();
            thread::spawn(move || keyed.try_acquire(&1, 1).unwrap())
        };
        let b = {
            let keyed = keyed.clone();
            thread::spawn(move || {
                drop(keyed.try_acquire(&2, 1).unwrap());
                keyed.try_acquire(&1, 1).unwrap()
            })
        };
        let held_a = a.join().unwrap();
        let held_b = b.join().unwrap();
        assert!(
            !(held_a.is_some() && held_b.is_some()),
            "two permits of key 1 in flight at once (limit 1)"
        );
        let held = u64::from(held_a.is_some()) + u64::from(held_b.is_some());
        assert_eq!(keyed.in_flight(&1), held, "key 1's count is exact");
    });
}

/// Key 1 is new: A inserts it (under the shard's lock) while B's new key 2 may take its place.
#[test]
fn a_held_key_is_never_swept_and_its_limit_holds() {
    held_key_model(false);
}

/// Key 1 is in the map and idle: A's lock-free take races B's sweep, which may drop key 1 only
/// before A found it (the sweep's rebuild waits for every check on the old table).
#[test]
fn a_key_taken_during_a_sweep_is_never_dropped() {
    held_key_model(true);
}

/// Key 1 is in the map: A and B take its one permit at once (the counter's CAS loop).
#[test]
fn two_takers_of_one_key_never_both_get_its_last_permit() {
    model(None, || {
        let keyed: Arc<KeyedInFlight<u32, ModelClock>> =
            Arc::new(KeyedInFlight::with_clock(1, 4, ModelClock::starting_at(NOW)).unwrap());
        drop(keyed.try_acquire(&1, 1).unwrap().unwrap());
        let take = || {
            let keyed = keyed.clone();
            thread::spawn(move || keyed.try_acquire(&1, 1).unwrap())
        };
        let (a, b) = (take(), take());
        let (held_a, held_b) = (a.join().unwrap(), b.join().unwrap());
        assert!(
            held_a.is_some() != held_b.is_some(),
            "exactly one of two takers gets key 1's one permit"
        );
        assert_eq!(keyed.in_flight(&1), 1);
    });
}
