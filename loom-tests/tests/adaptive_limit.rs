//! loom model of `AdaptiveInFlight`: samples applied by racing threads leave the in-flight limit
//! at the algorithm's limit (the newest state's), whatever order their limit changes land in.
#![cfg(floodgate_loom)]

use std::sync::Arc;

use floodgate::ManualClock;
use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd, Sample};
use floodgate_loom_tests::model;
use loom::thread;

const DROP: Sample = Sample {
    rtt_nanos: 1_000,
    in_flight: 1,
    dropped: true,
};

/// AIMD from 3 (bounds 1..=10), every sample to the algorithm: `sample` recorded on one model
/// thread races a drop recorded on another; returns the limiter once both are in. Both run on
/// model threads of their own: with `sample` recorded on the thread that built the limiter,
/// loom explored 261 and 140 executions of the two models.
fn racing_a_drop(sample: Sample) -> Arc<AdaptiveInFlight<Aimd, ManualClock>> {
    let limiter = Arc::new(
        AdaptiveInFlight::with_clock(Aimd::new(3, 1, 10).unwrap(), ManualClock::new()).window(None),
    );
    let recorders: Vec<_> = [DROP, sample]
        .into_iter()
        .map(|sample| {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.record(&sample))
        })
        .collect();
    for recorder in recorders {
        recorder.join().unwrap();
    }
    limiter
}

/// Two racing drops take the limit 3 → 2 → 1, in whichever order their `set_limit`s land; a
/// third drop keeps the algorithm at its floor, 1. The limit in force must then be 1, not a
/// stale 2 left by the slower thread.
#[test]
fn racing_samples_leave_the_newest_limit_in_force() {
    model(None, || {
        let limiter = racing_a_drop(DROP);
        limiter.record(&DROP);
        assert_eq!(
            limiter.limit(),
            1,
            "the limit in force trails the algorithm's"
        );
    });
}

/// A success at the limit (+1) races a drop (× 0.9, floored). Either order ends at 3
/// (3 → 4 → 3, or 3 → 2 → 3), and so must the limit in force, not the 4 or the 2 of the slower
/// thread's `set_limit`.
#[test]
fn a_raise_racing_a_back_off_leaves_the_newest_limit_in_force() {
    model(None, || {
        let limiter = racing_a_drop(Sample {
            in_flight: 3,
            dropped: false,
            ..DROP
        });
        assert_eq!(
            limiter.limit(),
            3,
            "the limit in force trails the algorithm's"
        );
    });
}
