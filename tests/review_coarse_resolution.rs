//! Review (h-review3) of the one-load `CoarseClock`: two resolutions at once.
//!
//! Alone in its binary: the upkeep thread is process-wide, so no other test may hold a
//! `CoarseClock` while this one runs.

use std::time::{Duration, Instant};

use floodgate::{Clock, CoarseClock};

/// A clock asked for at 100 µs while a 1 s one is alive gets the 1 s clock's steps, silently,
/// and keeps them after the 1 s clock is dropped (it is then the only clock in the process):
/// a window or refill on it happens up to a second late, 10,000 times the lag it asked for, and
/// the type's docs ("How far it lags": one `resolution`) say otherwise. Expected: the upkeep
/// runs at the finest resolution of the live clocks (or the call is refused with an error).
///
/// Three consecutive steps of the 100 µs clock must take well under a second; on today's code
/// they take two to three seconds (1 s periods), whatever the load. Real time is only the bound.
#[test]
fn a_finer_clock_is_not_silently_given_a_coarser_live_clock_s_resolution() {
    let coarse = CoarseClock::with_resolution(Duration::from_secs(1)).unwrap();
    let fine = CoarseClock::with_resolution(Duration::from_micros(100)).unwrap();
    drop(coarse);
    let start = Instant::now();
    for _ in 0..3 {
        let from = fine.now_nanos();
        while fine.now_nanos() == from {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "coarse time frozen"
            );
            std::thread::yield_now();
        }
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(900),
        "three steps of a 100 µs CoarseClock took {took:?}: it runs at the 1 s resolution of a \
         clock that was alive when it was built"
    );
}
