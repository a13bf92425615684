//! loom models of the sample windows of `AdaptiveInFlight` (`concurrency/adaptive/window.rs`)
//! under the time model: samples from several threads race the window's closing, their clock
//! reads interleaved with every step, one of them possibly leaping. Checked: every sample is in
//! exactly one window (those closed, and the one still open); one window end is closed at most
//! once; a reader past the end closes it unless another did; a leaped end is closed by the
//! next reader on time.
#![cfg(floodgate_loom)]

use floodgate::Clock;
use floodgate::loom_internals::WindowProbe;
use floodgate_loom_tests::{ModelClock, model};
use loom::sync::Arc;
use loom::thread;

/// Window length in the models (ns).
const WINDOW: u64 = 10;

/// One record on `clock`: the time it read, and the size of the window it closed.
fn record(probe: &WindowProbe, clock: &ModelClock) -> (u64, Option<u32>) {
    let now = clock.now_nanos();
    (now, probe.record(1, now))
}

/// Two threads record two samples each while a third moves time to the window's end: all four
/// samples are accounted for, at most one window closes (the next end is out of reach), and if
/// any record read the end, a window closed.
#[test]
fn racing_samples_land_in_exactly_one_window() {
    model(None, || {
        let clock = ModelClock::starting_at(0);
        let probe = Arc::new(WindowProbe::new(WINDOW, 1, 0));
        let recorders: Vec<_> = (0..2)
            .map(|_| {
                let (probe, clock) = (probe.clone(), clock.clone());
                thread::spawn(move || vec![record(&probe, &clock), record(&probe, &clock)])
            })
            .collect();
        clock.advance(WINDOW);
        let results: Vec<(u64, Option<u32>)> = recorders
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let closed: Vec<u32> = results.iter().filter_map(|r| r.1).collect();
        let counted: u32 = closed.iter().sum::<u32>() + probe.open_count();
        assert_eq!(counted, 4, "{results:?}");
        assert!(closed.len() <= 1, "one end closed twice: {results:?}");
        if results.iter().any(|&(now, _)| now >= WINDOW) {
            assert_eq!(
                closed.len(),
                1,
                "a reader past the end left it open: {results:?}"
            );
        }
    });
}

/// A leaping reader closes the first window and sets the next end far ahead; a reader on time
/// (racing it, in any order) must not leave that end standing: after both, a record at the
/// current real time plus one window closes a window.
#[test]
fn a_leaped_end_does_not_freeze_the_windows() {
    model(None, || {
        let clock = ModelClock::starting_at(WINDOW);
        let probe = Arc::new(WindowProbe::new(WINDOW, 1, 0));
        let leaper = {
            let (probe, clock) = (probe.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::leap_next_read(1_000 * WINDOW);
                record(&probe, &clock)
            })
        };
        let on_time = record(&probe, &clock);
        let leaped = leaper.join().unwrap();
        // One window had ended at `WINDOW`: someone closed it.
        let closed = usize::from(on_time.1.is_some()) + usize::from(leaped.1.is_some());
        assert!(closed >= 1, "{on_time:?} {leaped:?}");
        // Whatever end the race left, a reader one window and a half later closes it: either
        // the end passed, or it lies more than two windows ahead (set from the leap).
        clock.advance(WINDOW + WINDOW / 2);
        let later = record(&probe, &clock);
        assert!(later.1.is_some(), "{on_time:?} {leaped:?} {later:?}");
        let closed = [on_time.1, leaped.1, later.1];
        let total = closed.iter().flatten().sum::<u32>() + probe.open_count();
        assert_eq!(total, 3);
    });
}
