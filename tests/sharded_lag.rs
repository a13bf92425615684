//! `Sharded` and a lagging clock read: a reader whose read lags the stripes' window decides in
//! their newer window (as `FixedWindow` keeps a newer window) and is never refused one permit
//! while a stripe has room there, whatever the "all full" hint says of another window.
//! Deterministic: ManualClock only.

use std::time::Duration;

use floodgate::{ManualClock, Sharded};

const WINDOW: u64 = 1_000_000_000;

/// Two stripes of two permits on a 1 s window, the clock in window `index`.
fn sharded(index: u64) -> (Sharded<ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(index * WINDOW + 1);
    let sharded = Sharded::with_clock(4, Duration::from_nanos(WINDOW), 2, clock.clone()).unwrap();
    (sharded, clock)
}

/// `Sharded` docs: "Requests of one permit are never denied early ... a denial means every
/// stripe was full in the window the request was decided in"; DESIGN.md: "A lagging reader is
/// never refused because of its lag".
///
/// A reader lagging two windows (2 s here, well within the 10 s lag horizon; with 10 ms windows
/// a 20 ms CoarseClock lag does it) keeps the stripes' newer windows. A lagging scan that once
/// saw every stripe full in window 10 from a read in window 9 must leave no hint for window 9:
/// two windows later the same lagging read would find it and deny without borrowing, while
/// stripe 1 has room in window 11, the window the decision is about.
#[test]
fn a_lagging_reader_is_not_denied_by_an_old_window_s_all_full_hint() {
    let (sharded, clock) = sharded(10);
    // Window 10: both stripes full (shares 2 and 2).
    for home in [0, 0, 1, 1] {
        assert!(sharded.try_acquire_on(home, 1).unwrap().is_allowed());
    }
    // A reader lagging one window (read in window 9) sees window 10 full everywhere: denied,
    // rightly.
    clock.set(9 * WINDOW + 1);
    assert!(!sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    // Window 11: stripe 0 full again, stripe 1 holds one permit of two.
    clock.set(11 * WINDOW + 1);
    assert!(sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(sharded.try_acquire_on(1, 1).unwrap().is_allowed());
    // The same lagging read (window 9, 2 s behind) decides in window 11 (the stripes' newer
    // window, kept): one permit is left there, on stripe 1.
    clock.set(9 * WINDOW + 1);
    let lagging = sharded.try_acquire_on(0, 1).unwrap();
    assert!(
        lagging.is_allowed(),
        "a lagging reader was denied one permit while stripe 1 had room: {lagging:?}"
    );
    assert!(
        !sharded.try_acquire_on(0, 1).unwrap().is_allowed(),
        "window 11 is full now"
    );
}

/// The hint of the read's own window, set rightly (every stripe was full in window 9), says
/// nothing of the newer window a lagging reader's home stripe holds: the reader borrows there.
#[test]
fn a_lagging_reader_is_not_denied_by_its_read_window_s_hint_while_a_newer_window_has_room() {
    let (sharded, clock) = sharded(9);
    for home in [0, 0, 1, 1] {
        assert!(sharded.try_acquire_on(home, 1).unwrap().is_allowed());
    }
    // Every stripe full in window 9: denied, and the hint says so for window 9.
    assert!(!sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    // Window 10: stripe 0 full, stripe 1 holds one permit of two.
    clock.set(10 * WINDOW + 1);
    assert!(sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(sharded.try_acquire_on(1, 1).unwrap().is_allowed());
    // A read lagging into window 9 decides on stripe 0 in window 10 (full), then borrows.
    clock.set(9 * WINDOW + 1);
    let lagging = sharded.try_acquire_on(0, 1).unwrap();
    assert!(
        lagging.is_allowed(),
        "a lagging reader was denied by window 9's hint while stripe 1 had room in window 10: \
         {lagging:?}"
    );
    // Window 10 is full now, for the lagging reader and a reader on time alike.
    assert!(!sharded.try_acquire_on(1, 1).unwrap().is_allowed());
    clock.set(10 * WINDOW + 1);
    assert!(!sharded.try_acquire_on(1, 1).unwrap().is_allowed());
}
