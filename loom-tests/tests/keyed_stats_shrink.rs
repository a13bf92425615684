#![cfg(floodgate_loom)]
//! loom models of `Keyed::stats`, which reads each shard's counters and key count without the
//! shard's mutex (atomics written under it): a scrape racing a sweep never counts a dropped key
//! both as held and as dropped, its counters never go back, and a refusal ordered before a
//! scrape is counted by it.

use std::time::Duration;

use floodgate::keyed::{KeyedStats, WhenFull};
use floodgate::{FixedWindow, Keyed};
use floodgate_loom_tests::{ModelClock, model};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

/// One permit per aligned 10 ns window, two keys in one shard, refusing new keys when full.
fn full_shard(clock: &ModelClock) -> Arc<Keyed<u32, FixedWindow, ModelClock>> {
    let keyed = Arc::new(
        Keyed::builder(FixedWindow::aligned(1, Duration::from_nanos(10)).unwrap())
            .clock(clock.clone())
            .max_keys(2)
            .shards(1)
            .when_full(WhenFull::DenyNewKeys)
            .build()
            .unwrap(),
    );
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    assert!(keyed.try_acquire(&2, 1).unwrap().is_allowed());
    keyed
}

fn counters(stats: &KeyedStats) -> [u64; 4] {
    [
        stats.evicted_idle,
        stats.evicted_live,
        stats.refused_new_keys,
        stats.sweeps,
    ]
}

/// Keys 1 and 2 are idle at 10; A inserts key 3, whose sweep drops both (the rebuild sets the
/// key count to 0, then counts 2 dropped and 1 sweep; the insert sets the count to 1). Two
/// scrapes race it: neither counts more than the 3 keys there ever were (a dropped key held and
/// dropped at once), the second never reads a counter below the first, and after A the counts
/// are exact.
#[test]
fn a_scrape_racing_a_sweep_counts_no_key_twice_and_never_goes_back() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let keyed = full_shard(&clock);
        clock.advance(5); // real time 10
        let a = {
            let keyed = keyed.clone();
            thread::spawn(move || assert!(keyed.try_acquire(&3, 1).unwrap().is_allowed()))
        };
        let first = keyed.stats();
        let second = keyed.stats();
        a.join().unwrap();
        for scrape in [&first, &second] {
            assert!(
                scrape.keys as u64 + scrape.evicted_idle <= 3,
                "a dropped key counted as held too: {scrape:?}"
            );
        }
        for (before, after) in counters(&first).into_iter().zip(counters(&second)) {
            assert!(before <= after, "{first:?} then {second:?}");
        }
        let last = keyed.stats();
        assert_eq!(
            (
                last.keys,
                last.evicted_idle,
                last.sweeps,
                last.refused_new_keys
            ),
            (1, 2, 1, 0)
        );
    });
}

/// A new key is refused by the full shard of live keys on A, which then raises a flag: a scrape
/// that saw the flag counts the refusal.
#[test]
fn a_scrape_ordered_after_a_refusal_counts_it() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let keyed = full_shard(&clock);
        let done = Arc::new(AtomicBool::new(false));
        let a = {
            let (keyed, done) = (keyed.clone(), done.clone());
            thread::spawn(move || {
                assert!(!keyed.try_acquire(&3, 1).unwrap().is_allowed());
                // Release: pairs with the Acquire load below.
                done.store(true, Ordering::Release);
            })
        };
        // Acquire: pairs with A's Release store.
        let saw_refusal = done.load(Ordering::Acquire);
        let scrape = keyed.stats();
        a.join().unwrap();
        if saw_refusal {
            assert_eq!(scrape.refused_new_keys, 1, "{scrape:?}");
        }
        assert!(scrape.refused_new_keys <= 1);
        assert_eq!(scrape.keys, 2);
        assert_eq!(keyed.stats().refused_new_keys, 1);
    });
}

/// Keys the judging model inserts before time moves, so that B's insert judges the shard: a pass
/// runs only after half the table's slots of new keys since the last one (`JUDGE_EVERY` in
/// `src/keyed/shards.rs`; none runs during the setup, within the judging interval of the first
/// insert). With the growth rule of that file the setup's table has 511 slots, so 256 keys or
/// more do; 120 and 240 do not. The model fails, not passes, when no pass runs (it asserts the
/// idle keys were dropped).
const SETUP_KEYS: u64 = 350;

/// `JUDGE_INTERVAL_NANOS` in `src/keyed/shards.rs`: a shard is judged no earlier than this after
/// its first insert.
const JUDGE_INTERVAL_NANOS: u64 = 10_000_000_000;

/// The judging pass a new key's insert runs on a shard below its cap (issue 16): `SETUP_KEYS`
/// keys inserted at 5, all idle at `T` (the judging interval later, a multiple of 10), so B's
/// insert of key 1,000 finds at most a quarter of them live and rebuilds the shard to twice its
/// live keys, dropping the idle ones, while A checks key 1 (idle at `T`, so the rebuild may drop
/// it). A's admission in [T, T + 10) is never lost nor counted twice: the rebuild waits for the
/// check on the old table, and a check on the new table starts a fresh word no earlier than the
/// drop. The shard's memory comes back without `shrink()`.
#[test]
fn a_check_racing_a_judging_shrink_keeps_its_admission() {
    // The inserts of the setup make a few thousand branches.
    model(Some(100_000), || {
        let clock = ModelClock::starting_at(5);
        let keyed = Arc::new(
            Keyed::builder(FixedWindow::aligned(1, Duration::from_nanos(10)).unwrap())
                .clock(clock.clone())
                .max_keys(1_000)
                .shards(1)
                .build()
                .unwrap(),
        );
        for key in 1..=SETUP_KEYS {
            assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        }
        clock.advance(JUDGE_INTERVAL_NANOS + 5); // real time T = 10^10 + 10
        let a = {
            let keyed = keyed.clone();
            thread::spawn(move || keyed.try_acquire(&1, 1).unwrap().is_allowed())
        };
        let b = {
            let keyed = keyed.clone();
            thread::spawn(move || keyed.try_acquire(&1_000, 1).unwrap().is_allowed())
        };
        assert!(a.join().unwrap(), "key 1 has a permit in [T, T + 10)");
        assert!(b.join().unwrap());
        assert!(
            !keyed.try_acquire(&1, 1).unwrap().is_allowed(),
            "the permit of [T, T + 10) was taken"
        );
        let stats = keyed.stats();
        assert_eq!(stats.keys, 2, "{stats:?}");
        // Every idle key dropped: key 1 too when the rebuild judged it before A's check (A then
        // inserted it afresh).
        assert!(
            (SETUP_KEYS - 1..=SETUP_KEYS).contains(&stats.evicted_idle),
            "the judging pass dropped the idle keys: {stats:?}"
        );
    });
}
