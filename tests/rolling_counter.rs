//! `stats::RollingCounter`: exact sums at cell and window boundaries, saturation, the end of the
//! `u64` timeline, and no lost or doubled count when adders race the clock across cell
//! boundaries (stray adds into stale cells, resets, large adds on the compare-exchange path).
//! On a `ManualClock`; nothing sleeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate::ManualClock;
use floodgate::stats::RollingCounter;
use floodgate::stats::rolling::MAX_CELL_COUNT;

const SECOND: u64 = 1_000_000_000;

/// 10 s in 10 cells: an add leaves the sum exactly when its cell leaves the window, not a
/// nanosecond before or after.
#[test]
fn a_count_leaves_the_window_with_its_cell() {
    let c = RollingCounter::with_clock(Duration::from_secs(10), 10, 2, ManualClock::new()).unwrap();
    c.add_at(0, 3, 2 * SECOND + 500).unwrap();
    c.add_at(1, 1, 3 * SECOND - 1).unwrap(); // cell 2, as the 3 of series 0
    c.add_at(1, 1, 3 * SECOND).unwrap(); // cell 3
    assert_eq!(c.sum_at(0, 2 * SECOND).unwrap(), 3);
    assert_eq!(c.sum_at(0, 12 * SECOND - 1).unwrap(), 3);
    assert_eq!(c.sum_at(0, 12 * SECOND).unwrap(), 0);
    assert_eq!(c.sum_at(1, 12 * SECOND - 1).unwrap(), 2);
    assert_eq!(c.sum_at(1, 12 * SECOND).unwrap(), 1);
    assert_eq!(c.sum_at(1, 13 * SECOND).unwrap(), 0);
    // Reading the past after the window moved on does not bring the count back wrongly.
    c.add_at(0, 5, 13 * SECOND).unwrap();
    assert_eq!(c.sum_at(0, 13 * SECOND).unwrap(), 5);
}

/// A cell saturates at `MAX_CELL_COUNT` instead of spilling into its round tag; the next cell
/// starts from zero.
#[test]
fn a_cell_saturates_and_the_next_starts_empty() {
    let c = RollingCounter::with_clock(Duration::from_secs(10), 10, 1, ManualClock::new()).unwrap();
    for _ in 0..20 {
        c.add_at(0, u32::MAX, 5).unwrap();
    }
    assert_eq!(c.sum_at(0, 5).unwrap(), MAX_CELL_COUNT);
    c.add_at(0, 7, SECOND).unwrap();
    assert_eq!(c.sum_at(0, SECOND).unwrap(), MAX_CELL_COUNT + 7);
    assert_eq!(c.sum_at(0, 10 * SECOND).unwrap(), 7);
}

/// The last nanosecond of the timeline is a time like any other.
#[test]
fn the_end_of_the_timeline_counts() {
    let c = RollingCounter::with_clock(Duration::from_secs(10), 10, 1, ManualClock::new()).unwrap();
    c.add_at(0, 4, u64::MAX - SECOND).unwrap();
    c.add_at(0, 5, u64::MAX).unwrap();
    assert_eq!(c.sum_at(0, u64::MAX).unwrap(), 9);
    c.sweep_at(u64::MAX);
}

/// Three adders race a clock that crosses `cells − 1` cell boundaries (so every add stays in
/// the window ending at the last time): the sum is exactly what they added, for small and large
/// rings, few and many future cells, adds on the `fetch_add` path and above `FAST_ADD_MAX`.
/// Each adder stops at `BUDGET`, so that the three together stay under `MAX_CELL_COUNT` even if
/// every add lands in one cell: a cell saturates by design (`a_cell_saturates_…`), and while the
/// clock's thread is descheduled on a loaded machine the adders can fill one cell that far
/// (CI once: 158.56e9 summed against 158.76e9 added, `cells 16 future 1`).
#[test]
fn adders_racing_the_clock_lose_and_double_nothing() {
    const BUDGET: u64 = MAX_CELL_COUNT / 3;
    for (cells, future, big) in [
        (2u32, 1u32, false),
        (4, 1, true),
        (3, 5, true),
        (16, 1, true),
    ] {
        for rep in 0..8u64 {
            let clock = ManualClock::new();
            let cell = 1_000u64;
            let start = rep * 7 * cell * u64::from(cells) + 3;
            clock.set(start);
            let window = Duration::from_nanos(cell * u64::from(cells));
            let c = Arc::new(
                RollingCounter::with_clock(window, cells, 1, clock.clone())
                    .unwrap()
                    .with_future_cells(future)
                    .unwrap(),
            );
            let stop = Arc::new(AtomicBool::new(false));
            let adders: Vec<_> = (0..3u32)
                .map(|t| {
                    let (c, stop) = (Arc::clone(&c), Arc::clone(&stop));
                    std::thread::spawn(move || {
                        let (mut total, mut i) = (0u64, 0u32);
                        while !stop.load(Ordering::SeqCst) {
                            let n = if big && (i + t) % 7 == 0 {
                                70_000
                            } else {
                                1 + i % 3
                            };
                            if total + u64::from(n) > BUDGET {
                                break;
                            }
                            c.add(0, n).unwrap();
                            total += u64::from(n);
                            i += 1;
                            if i % 64 == 0 {
                                c.sweep();
                            }
                        }
                        total
                    })
                })
                .collect();
            let end = start + (u64::from(cells) - 1) * cell;
            let mut now = start;
            while now < end {
                now = (now + 97).min(end);
                clock.set(now);
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
            let total: u64 = adders.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(
                c.sum(0).unwrap(),
                total,
                "cells {cells} future {future} rep {rep}"
            );
        }
    }
}
