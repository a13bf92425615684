//! Sliding-window lease refunds under the time model (`floodgate_loom_tests::ModelClock`): a
//! lease's `give_back` races an admission and a cell rotation (the crossing that seals the
//! lease's cell), the reuse of the lease's slot by a later cell, or a rewind after a leap that
//! re-opens the lease's cell. The ring is the one of `time_rings.rs`: 2 cells of 10 ns plus 2
//! future cells (4 slots). Every model asserts:
//! * **exactness** (the lease module's rule 2): once every thread is done, the window counts
//!   exactly the permits admitted plus the lease's, less the unused ones if and only if
//!   `give_back` said it took them back (a refund into a sealed cell would leave `base`'s
//!   published sum counting them: the window would count 2 more than it says; a refund into a
//!   reused slot would take them out of the later cell's count);
//! * **the window's promise**: the permits of admissions (the lease's served one included) lying
//!   inside any closed real span of `window − cell − 1` = 9 ns are at most the limit.
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test sliding_window_refund -- --test-threads=1`
#![cfg(floodgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use floodgate::lease::LeaseSource;
use floodgate::{Decision, Limiter, SlidingWindowLimiter};
use floodgate_loom_tests::{Admitted, ModelClock, join_all, max_in_span, model, take};
use loom::thread;

const CELL: u64 = 10;
const LIMIT: u32 = 3;

fn window(clock: &ModelClock) -> Arc<SlidingWindowLimiter<ModelClock>> {
    let w =
        SlidingWindowLimiter::with_clock(LIMIT, Duration::from_nanos(2 * CELL), 2, clock.clone())
            .unwrap()
            .with_future_cells(2)
            .unwrap();
    Arc::new(w)
}

/// The permits the window counts, from a peek of one permit: an allowed peek leaves
/// `limit − counted − 1`, a refused one reports `limit − counted`.
fn counted(peek: Decision) -> u64 {
    let limit = u64::from(LIMIT);
    if peek.is_allowed() {
        limit - peek.remaining() - 1
    } else {
        limit - peek.remaining()
    }
}

/// At real time 5 (cell 0) the window leases all 3 permits; the lease serves 1 there. R gives
/// the 2 unused back while A asks for 1 and the driver moves time into cell 1 and asks for 1
/// (its crossing seals cell 0, unless A's does). The refund lands iff it comes before the seal;
/// either way the window at the end counts exactly what was admitted and kept.
#[test]
fn a_refund_races_an_admission_and_the_seal_of_its_cell() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let w = window(&clock);
        let (span, lease) = clock.timed(|| w.take(1, 3, u64::MAX).unwrap());
        assert_eq!(lease.granted(), 3);
        let mut admitted = vec![Admitted::at(span, 1)]; // the lease's served permit
        let r = {
            let w = w.clone();
            thread::spawn(move || w.give_back(&lease, 2))
        };
        let a = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&*w, &clock, 1, (0, 0)))
        };
        clock.advance(CELL);
        admitted.extend(take(&*w, &clock, 1, (0, 0)));
        let refunded = r.join().unwrap();
        let admitted = join_all(vec![a], admitted);
        // Real time 15: the window (cells 0 and 1) holds every admission and the lease.
        let kept = if refunded { 0 } else { 2 };
        let expected = admitted.iter().map(|a| a.n).sum::<u64>() + kept;
        let peek = w.peek(1).unwrap();
        assert_eq!(
            counted(peek),
            expected,
            "refunded: {refunded}, {peek:?}, {admitted:?}"
        );
        let (most, at) = max_in_span(&admitted, CELL - 1);
        assert!(
            most <= u64::from(LIMIT),
            "{most} admitted in [{at}, {at}+9]: {admitted:?}"
        );
    });
}

/// The lease (3 at real time 5, 1 served) is given back while the driver moves time 4 cells on,
/// to the cell that reuses the lease's slot (the next round), and takes 1 there: whoever writes
/// the slot first, the refund never takes permits out of the later cell's count. It lands only
/// in the lease's own cell, before the slot is reset.
#[test]
fn a_refund_races_the_reuse_of_its_slot() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let w = window(&clock);
        let lease = w.take(1, 3, u64::MAX).unwrap();
        assert_eq!(lease.granted(), 3);
        let r = {
            let w = w.clone();
            thread::spawn(move || w.give_back(&lease, 2))
        };
        clock.advance(4 * CELL);
        let admitted = take(&*w, &clock, 1, (0, 0));
        assert_eq!(
            admitted.len(),
            1,
            "cell 4's window (cells 3 and 4) is empty"
        );
        r.join().unwrap();
        // Real time 45 (cell 4): the window (cells 3 and 4) holds only the driver's permit.
        let peek = w.peek(1).unwrap();
        assert_eq!(counted(peek), 1, "{peek:?}");
    });
}

/// The lease (2 at real time 5, in cell 0, slot 0) is forgotten by a leap: the driver's next
/// read is in cell `LEAPED` (slot 0, another round), whose crossing stamps slot 0 for that cell.
/// Then R, at real time 5, finds the leaped head, rewinds the ring to cell 0 (re-opening it at
/// zero) and takes 1, while G gives the lease's 1 unused permit back. The refund never lands:
/// before the rewind the slot holds the leaped cell, after it the rewind has begun since the
/// lease. Before that check, the refund after R took R's permit out of cell 0 (counted 0).
#[test]
fn a_refund_races_a_rewind_that_reopens_its_cell() {
    // More than the horizon (10 s, 10^9 cells of 10 ns) ahead, a multiple of the 4 slots.
    const LEAPED: u64 = 1_000_000_004;
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let w = window(&clock);
        let lease = w.take(1, 2, u64::MAX).unwrap();
        assert_eq!(lease.granted(), 2);
        ModelClock::leap_next_read(LEAPED * CELL + 2 - 5);
        assert!(w.try_acquire(1).unwrap().is_allowed(), "the leaper's own");
        let g = {
            let w = w.clone();
            thread::spawn(move || w.give_back(&lease, 1))
        };
        let r = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&*w, &clock, 1, (0, 0)))
        };
        let refunded = g.join().unwrap();
        let admitted = join_all(vec![r], Vec::new());
        assert_eq!(admitted.len(), 1, "cell 0, re-opened, holds R's permit");
        assert!(!refunded, "the lease's count was forgotten by the leap");
        // Real time 5 (cell 0): the window counts R's permit.
        let peek = w.peek(1).unwrap();
        assert_eq!(counted(peek), 1, "{peek:?}");
    });
}
