//! Real threads on hot and cold keys: exact admitted counts, inserts and sweeps racing checks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::{Clock, FixedWindow, Gcra, Keyed, ManualClock, Rate};

const THREADS: u64 = 4;
const LIMIT: u32 = 50;
const COLD_KEYS: u64 = 2_000;

/// Every thread hammers key 0 and walks all cold keys; time stands still, so each key admits
/// exactly `min(attempts, LIMIT)`.
#[test]
fn hot_and_cold_keys_admit_exactly_their_limit() {
    let keyed: Arc<Keyed<u64, _, _>> = Arc::new(
        Keyed::builder(FixedWindow::new(LIMIT, Duration::from_secs(60)).unwrap())
            .clock(ManualClock::new())
            .max_keys(4_096)
            .build()
            .unwrap(),
    );
    let admitted: Arc<Vec<AtomicU64>> =
        Arc::new((0..=COLD_KEYS).map(|_| AtomicU64::new(0)).collect());
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let keyed = Arc::clone(&keyed);
            let admitted = Arc::clone(&admitted);
            thread::spawn(move || {
                for round in 0..COLD_KEYS {
                    // Interleave: a hot check, then a cold key (each thread starts elsewhere).
                    let cold = 1 + (round + thread * 500) % COLD_KEYS;
                    for key in [0, cold] {
                        if keyed.try_acquire(&key, 1).unwrap().is_allowed() {
                            // Relaxed: a counter read after join.
                            admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    // Relaxed: after join.
    let counts: Vec<u64> = admitted.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    assert_eq!(counts[0], u64::from(LIMIT), "hot key");
    assert!(
        counts[1..].iter().all(|&c| c == THREADS),
        "each cold key was tried THREADS times"
    );
    assert_eq!(keyed.len() as u64, COLD_KEYS + 1);
    assert_eq!(
        keyed.stats().evicted_live + keyed.stats().refused_new_keys,
        0
    );
}

/// A small cap, keys going idle while a thread moves the clock: inserts, sweeps and evictions
/// race checks. With `DenyNewKeys` no live key is ever forgotten, so each key admits at most
/// what one unbounded GCRA limiter could over the elapsed time: `burst + elapsed / interval`.
///
/// The overlap is forced, not hoped for: the run is `ROUNDS` rounds, and in each one every
/// worker makes `BATCH` checks while the ticker moves the clock by `ROUND_ADVANCE` in 100 µs
/// steps, all of them meeting at a barrier before the next round. So, whatever the scheduling:
/// * key 0 is first checked in round 1, when at most 16 keys exist (the cap is 64 over 4
///   shards of 16), so it is inserted and admitted: the hot key is served;
/// * the workers touch about 8 cold keys per round (`i = 2·thread + …`), so after a few rounds
///   the shards fill with keys whose last use is at least two rounds (6 ms, twice the 3 ms a
///   burst of 3 at 1,000/s keeps a key live) old: the next new key sweeps idle keys.
#[test]
fn sweeps_racing_checks_never_admit_beyond_the_rate() {
    const ROUNDS: u64 = 200;
    const BATCH: u64 = 6;
    const STEPS_PER_ROUND: u64 = 30;
    for when_full in [WhenFull::DenyNewKeys, WhenFull::EvictLeastUsed] {
        let clock = ManualClock::new();
        let keyed: Arc<Keyed<u64, _, _>> = Arc::new(
            Keyed::builder(Gcra::new(Rate::per_second(1_000), 3).unwrap())
                .clock(clock.clone())
                .max_keys(64)
                .shards(4)
                .when_full(when_full)
                .build()
                .unwrap(),
        );
        const KEYS: u64 = 200;
        let admitted: Arc<Vec<AtomicU64>> =
            Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
        let round_end = Arc::new(Barrier::new(THREADS as usize + 1));
        let ticker = {
            let clock = clock.clone();
            let round_end = Arc::clone(&round_end);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    for _ in 0..STEPS_PER_ROUND {
                        clock.advance(Duration::from_micros(100));
                        thread::yield_now();
                    }
                    round_end.wait();
                }
            })
        };
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let keyed = Arc::clone(&keyed);
                let admitted = Arc::clone(&admitted);
                let round_end = Arc::clone(&round_end);
                thread::spawn(move || {
                    let mut i = thread * 2;
                    for _ in 0..ROUNDS {
                        for _ in 0..BATCH {
                            // A skewed mix: key 0 is hot, the others cycle.
                            let key = if i % 3 == 0 { 0 } else { i % KEYS };
                            if keyed.try_acquire(&key, 1).unwrap().is_allowed() {
                                // Relaxed: a counter read after join.
                                admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                            }
                            i += 1;
                        }
                        round_end.wait();
                    }
                })
            })
            .collect();
        ticker.join().unwrap();
        for worker in workers {
            worker.join().unwrap();
        }
        let elapsed_ms = clock.now_nanos() / 1_000_000;
        let stats = keyed.stats();
        assert!(stats.keys <= 64, "{stats:?}");
        eprintln!("{when_full:?}: {stats:?}, {elapsed_ms} ms");
        assert!(
            stats.evicted_idle > 0,
            "idle keys were swept while checks ran"
        );
        let per_key_bound = 3 + elapsed_ms;
        // Relaxed: after join.
        let counts: Vec<u64> = admitted.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        match when_full {
            WhenFull::DenyNewKeys => {
                assert_eq!(stats.evicted_live, 0);
                for (key, &count) in counts.iter().enumerate() {
                    assert!(
                        count <= per_key_bound,
                        "key {key}: {count} > {per_key_bound}"
                    );
                }
                assert!(counts[0] > 0, "the hot key was served");
            }
            WhenFull::EvictLeastUsed => {
                // A live eviction hands back at most the 3 permits of a burst.
                let total: u64 = counts.iter().sum();
                let bound = KEYS * per_key_bound + 3 * stats.evicted_live;
                assert!(total <= bound, "{total} > {bound}");
                assert_eq!(stats.refused_new_keys, 0);
            }
        }
    }
}
