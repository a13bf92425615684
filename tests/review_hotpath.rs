//! Review (h-review3) of this session's hot paths: decisions that differ from what the docs and
//! DESIGN.md ("Time is part of the protocol") promise. Deterministic: ManualClock only.

use std::time::Duration;

use floodgate::{ManualClock, Sharded};

/// `Sharded` docs: "Requests of one permit are never denied early ... a denial means every
/// stripe was full"; DESIGN.md: "A lagging reader is never refused because of its lag".
///
/// A reader lagging two windows (2 s here, well within the 10 s lag horizon; with 10 ms windows
/// a 20 ms CoarseClock lag does it) keeps the stripes' newer windows, as it should. But the
/// "all full" hint is keyed by the window of the *read*, not of the state it decided on: a
/// lagging scan that once saw every stripe full (window 10) leaves the mark of window 9, and two
/// windows later the same lagging read finds that mark and denies without borrowing, while
/// stripe 1 has room in the window the decision is about (11). A reader on time borrows it.
#[test]
fn a_lagging_reader_is_not_denied_by_an_old_window_s_all_full_hint() {
    let window = 1_000_000_000;
    let clock = ManualClock::starting_at(10 * window + 1);
    let sharded = Sharded::with_clock(4, Duration::from_nanos(window), 2, clock.clone()).unwrap();
    // Window 10: both stripes full (shares 2 and 2).
    for home in [0, 0, 1, 1] {
        assert!(sharded.try_acquire_on(home, 1).unwrap().is_allowed());
    }
    // A reader lagging one window (read in window 9) sees window 10 full everywhere: denied,
    // rightly, and the hint is set for the window of its read.
    clock.set(9 * window + 1);
    assert!(!sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    // Window 11: stripe 0 full again, stripe 1 holds one permit of two.
    clock.set(11 * window + 1);
    assert!(sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(sharded.try_acquire_on(1, 1).unwrap().is_allowed());
    // The same lagging read (window 9, 2 s behind) decides in window 11 (the stripes' newer
    // window, kept): one permit is left there, on stripe 1.
    clock.set(9 * window + 1);
    let lagging = sharded.try_acquire_on(0, 1).unwrap();
    assert!(
        lagging.is_allowed(),
        "a lagging reader was denied one permit while stripe 1 had room: {lagging:?}"
    );
}
