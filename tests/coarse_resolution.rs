//! `CoarseClock` resolutions: the one upkeep thread of the process runs at the finest resolution
//! among the live clocks, whatever order they are made and dropped in.
//!
//! Alone in its binary: the upkeep thread is process-wide, so no other test may hold a
//! `CoarseClock` while this one runs. Time is measured in the clock's own steps (the difference
//! of two consecutive distinct reads, which a loaded machine can only stretch, never shorten);
//! wall time is only a bound that fails on a hang.

use std::time::{Duration, Instant};

use floodgate::{Clock, CoarseClock};

/// A step of the coarse time below this is not the 1 s clock's.
const SHORT_STEP_NANOS: u64 = 500_000_000;

/// Waits until `clock` has taken five steps shorter than [`SHORT_STEP_NANOS`] (steps of the
/// 100 µs resolution; five, so that one early wake-up of a 1 s upkeep cannot pass for them).
/// Fails after 60 s of wall time: every step was as long as the 1 s resolution's.
fn assert_steps_finely(clock: &CoarseClock, when: &str) {
    const WANTED: usize = 5;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut short, mut steps) = (0, 0);
    let mut last = clock.now_nanos();
    while short < WANTED {
        let read = clock.now_nanos();
        if read != last {
            steps += 1;
            if read - last < SHORT_STEP_NANOS {
                short += 1;
            }
            last = read;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: {short} of {steps} steps of a 100 µs CoarseClock under 500 ms in 60 s: it \
             runs at the 1 s resolution of another clock"
        );
        std::thread::yield_now();
    }
}

/// Waits until `clock` moves; fails only on a hang (60 s of wall time).
fn assert_advances(clock: &CoarseClock, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let from = clock.now_nanos();
    while clock.now_nanos() == from {
        assert!(Instant::now() < deadline, "{when}: coarse time frozen");
        std::thread::yield_now();
    }
}

/// A clock asked for at 100 µs while a 1 s one is alive steps at 100 µs (the 1 s upkeep is woken
/// for it), and keeps doing so after the 1 s clock is dropped and while another 1 s one is made;
/// once the 100 µs clock is dropped, the 1 s clock alive still has its upkeep.
#[test]
fn the_upkeep_runs_at_the_finest_live_resolution() {
    let coarse = CoarseClock::with_resolution(Duration::from_secs(1)).unwrap();
    let fine = CoarseClock::with_resolution(Duration::from_micros(100)).unwrap();
    assert_steps_finely(&fine, "made while a 1 s clock is alive");
    assert_steps_finely(&coarse, "the 1 s clock, while a 100 µs clock is alive");
    drop(coarse);
    assert_steps_finely(&fine, "after the 1 s clock is dropped");
    let coarse = CoarseClock::with_resolution(Duration::from_secs(1)).unwrap();
    assert_steps_finely(&fine, "after another 1 s clock is made");
    drop(fine);
    assert_advances(&coarse, "the 1 s clock, after the 100 µs one is dropped");
}
