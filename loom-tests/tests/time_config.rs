//! loom model of the time-word buckets' configuration ring (`algorithms::time_config`) as the
//! short path reads it: a hot slot's fields loaded unchecked, then validated by `recheck` (its
//! Acquire fence and its Acquire load of the generation), against a setter that laps the ring
//! (eight changes: generation 8 rewrites generation 0's slot). The reader does what
//! `VirtualTime::short` does: generation 0's copy first, without a prior load of the generation,
//! then, if `recheck` names another generation, that generation's copy, validated again.
//!
//! Each generation `g` has interval = capacity = `g + 1` (`ConfigProbe`), so a validated read
//! that mixes generations, or reads a slot not yet visible (zeros), fails the model. It fails with
//! `recheck`'s load of the generation weakened to Relaxed (checked when it was added).
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_config`
#![cfg(floodgate_loom)]

use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate::loom_internals::ConfigProbe;
use floodgate_loom_tests::model;
use loom::sync::Arc;
use loom::thread;

/// Changes the setter makes: one lap of the eight-slot ring.
const CHANGES: u64 = 8;

/// Generation `g`'s hot fields: `(interval, capacity, tau)`.
fn hot_of(generation: u64) -> (u64, u64, u64) {
    let value = generation + 1;
    (value, value, value * value)
}

#[test]
fn short_path_reads_are_validated_across_a_lap() {
    // Executions that validated generation 0's copy, and a later generation's: the model must
    // reach both (plain counters, outside loom's view).
    static VALIDATED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    model(None, || {
        let probe = Arc::new(ConfigProbe::default());
        let setter = {
            let probe = probe.clone();
            thread::spawn(move || {
                for _ in 0..CHANGES {
                    probe.publish_next();
                }
            })
        };
        let first = probe.read_hot(0);
        match probe.recheck() {
            0 => {
                assert_eq!(
                    first,
                    hot_of(0),
                    "generation 0's copy validated a torn read"
                );
                VALIDATED[0].fetch_add(1, Ordering::Relaxed);
            }
            generation => {
                let again = probe.read_hot(generation);
                if probe.recheck() == generation {
                    assert_eq!(
                        again,
                        hot_of(generation),
                        "generation {generation}'s copy validated a torn read"
                    );
                    VALIDATED[1].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        setter.join().unwrap();
    });
    assert!(
        VALIDATED
            .iter()
            .all(|count| count.load(Ordering::Relaxed) > 0),
        "both copies validated in some execution: {VALIDATED:?}"
    );
}
