//! Callers whose clocks disagree by less than one precision cell still share one limit: each one
//! reads the cell after its own, where a caller whose clock runs ahead writes.

use std::sync::Barrier;
use std::time::Duration;

use floodgate::ManualClock;

use super::server::MemcachedServer;
use super::{SEC, T0, backend, decide, limiter, top_up};

/// 0.9 of a 1 s cell.
const SKEW: u64 = 9 * SEC / 10;

#[test]
fn a_caller_ahead_by_less_than_a_cell_writes_where_the_others_read() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    // T0 is mid-cell, so the fast clock is already in the next cell.
    let on_time = ManualClock::starting_at(T0);
    let ahead = ManualClock::starting_at(T0 + SKEW);
    let exact = limiter(&backend, "ahead", 3, 10, &on_time);
    let fast = limiter(&backend, "ahead", 3, 10, &ahead);
    let cell = exact.cell_index(T0);
    assert_eq!(fast.cell_index(T0 + SKEW), cell + 1);

    assert!(decide(&fast, "k", 3).is_allowed());
    assert_eq!(server.count(&fast.cell_key("k", cell + 1).unwrap()), 3);
    // The on-time caller is in `cell`, but counts `cell + 1`: the limit is taken.
    let denied = decide(&exact, "k", 1);
    assert!(!denied.is_allowed());
    assert_eq!(denied.remaining(), 0);
    // It comes back when `cell + 1` leaves the on-time caller's window: 10.5 s from T0.
    assert_eq!(
        denied.retry_after(),
        Duration::from_nanos(10 * SEC + SEC / 2)
    );
}

#[test]
fn a_caller_behind_by_less_than_a_cell_counts_what_the_others_wrote() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let on_time = ManualClock::starting_at(T0);
    let behind = ManualClock::starting_at(T0 - SKEW);
    let exact = limiter(&backend, "behind", 3, 10, &on_time);
    let slow = limiter(&backend, "behind", 3, 10, &behind);
    let cell = exact.cell_index(T0);
    assert_eq!(slow.cell_index(T0 - SKEW), cell - 1);

    assert!(decide(&exact, "k", 2).is_allowed());
    // The slow caller's window [cell - 10, cell] holds the on-time caller's cell.
    assert!(decide(&slow, "k", 1).is_allowed());
    assert!(!decide(&slow, "k", 1).is_allowed());
    assert!(!decide(&exact, "k", 1).is_allowed());
    assert_eq!(server.count(&slow.cell_key("k", cell - 1).unwrap()), 1);
}

#[test]
fn skewed_callers_racing_never_exceed_the_limit() {
    const LIMIT: u32 = 40;
    let server = MemcachedServer::start();
    let backend = backend(&server);
    // 0.1 s into a cell; the three clocks span 0.9 of a cell, so the slow one is in the cell
    // before the other two, and every pair is within the tolerance.
    let base = (T0 / SEC) * SEC + SEC / 10;
    let clocks = [
        ManualClock::starting_at(base - SKEW / 2),
        ManualClock::starting_at(base),
        ManualClock::starting_at(base + SKEW / 2),
    ];
    let limiters: Vec<_> = clocks
        .iter()
        .map(|clock| limiter(&backend, "race", LIMIT, 10, clock))
        .collect();
    let barrier = Barrier::new(9);
    let admitted: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..9)
            .map(|thread| {
                let (limiter, barrier) = (&limiters[thread % 3], &barrier);
                s.spawn(move || {
                    (0..15)
                        .map(|_| {
                            barrier.wait();
                            u64::from(decide(limiter, "k", 1).is_allowed())
                        })
                        .sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(admitted <= u64::from(LIMIT), "admitted {admitted}");
    let cell = base / SEC;
    assert_eq!(limiters[0].cell_index(base - SKEW / 2), cell - 1);
    assert!(server.count(&limiters[0].cell_key("k", cell - 1).unwrap()) > 0);
    // Every window holds both cells written (cell - 1 and cell): each caller tops up exactly.
    assert_eq!(admitted + top_up(&limiters[2], "k"), u64::from(LIMIT));
    assert!(!decide(&limiters[0], "k", 1).is_allowed());
    assert!(!decide(&limiters[1], "k", 1).is_allowed());
}
