//! `SmoothWarmingUp::admit` racing a leap repair, under the time model
//! (`floodgate_loom_tests::ModelClock`): the re-check on the short path's `bool` refusal by a
//! booking beyond the lag horizon (`warming/short.rs`, `still`).
//!
//! A refusal writes nothing, so no compare-exchange checks the word it was decided on. A caller
//! that loads a leaped booking before a repair replaced it, and the floor the repair lowered
//! after, finds the floor in range and the booking beyond the horizon: a long booking, or a
//! stale leaped one. It tells them apart by the count of leap repairs, which a repair raises
//! before it lowers the floor: the caller loads it before the word and again after an Acquire
//! fence that pairs with the repair's Release floor store, and decides again in the engine when
//! it changed. `time_smooth_leap.rs` races the same repair with an `admit`, but judges a `bool`
//! by the admissions alone, and a refusal is always allowed there: it passes with the re-check
//! removed. The count is a loom atomic, so loom checks the fence's pairing and the count's
//! orderings against the floor; the 128-bit word is a loom mutex (`smooth/wide.rs`), whose
//! loads follow the model's schedule, so the Acquire load of the count before the word (a
//! caller that sees a repair's count loads its repaired word) is argued at its site.
//!
//! Here a refusal is checked against the limiter's own next answer: real time stays at `START`
//! from the leap on and nothing is released, so a refusal at real time `START` must stand for a
//! call at `START` after it. The repairer's reads lag by [`LAG`] (more than the one permit the leap
//! booked costs), so its repaired booking (moved back by the leap, its debt counted from its
//! read) is already paid at `START`: after its repair a present caller is admitted.
//! * The leap (created at `CREATED`, idle until `START`): the main thread's one read is
//!   `START + LEAD`; it admits 1 (a stored permit of the cold limiter: its booking is at most
//!   three intervals) and raises the floor to its read.
//! * **the repairer** (lagging `LAG`): `try_acquire(1)` sees the leaped floor, moves the booking
//!   back to its read and lowers the floor to it after its word has landed; it is refused (its
//!   own debt is counted from its read).
//! * **the caller** (present): `admit(1)`. Admitted on the repaired word; on the leaped word
//!   with the leaped floor it repairs itself, and is then refused (debt counted from `START`),
//!   and the repairer, on that word, is refused without writing: both refusals stand.
//!
//! Checked when written, and again with the count of repairs (issue 17): with the `bool`
//! refusal's `still(..)` in `try_acquire_now` removed, the model fails (the caller refused by
//! the leaped word under the repairer's lowered floor, a present `try_acquire` after it
//! admitted). The repairer's read must be after the creation: a read before it counts as the
//! creation instant (`micros_since` saturates), and with the limiter created at `START` the
//! repaired booking was not yet paid at `START`, so the model passed with the re-check removed.
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_smooth_admit_repair`
#![cfg(floodgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Limiter, SmoothWarmingUp};
use floodgate_loom_tests::{MAX_LAG, ModelClock, model};
use loom::thread;

/// Nanoseconds per permit at the stable rate (10 per second).
const T: u64 = 100_000_000;
/// Real time when the limiter is created: 1 s, whole microseconds.
const CREATED: u64 = 1_000_000_000;
/// Real time for the rest of the model, which never moves it: 2 s after creation, so the
/// repairer's lagging read is after the creation (a read before it counts as the creation).
const START: u64 = CREATED + 2_000_000_000;
/// The leaper's lead: its booking lies beyond the horizon of every present read.
const LEAD: u64 = MAX_LAG + 1_000_000_000;
/// The repairer's lag: more than the cold permit the leap booked (3 `T`), within `MAX_LAG`.
const LAG: u64 = 10 * T;

#[test]
fn a_present_admit_refused_by_a_repaired_leap_is_refused_again() {
    model(None, || {
        let clock = ModelClock::starting_at(CREATED);
        // 10/s warming up over 1 s (cold factor 3), created cold.
        let limiter = Arc::new(
            SmoothWarmingUp::create_with_clock(10.0, Duration::from_secs(1), clock.clone())
                .unwrap(),
        );
        clock.advance(START - CREATED);
        ModelClock::leap_next_read(LEAD);
        assert!(
            limiter.admit(1).unwrap(),
            "a cold limiter grants its first permit"
        );
        let repairer = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                ModelClock::set_thread_lag(LAG);
                limiter.try_acquire(1).unwrap().is_allowed()
            })
        };
        let caller = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.admit(1).unwrap())
        };
        assert!(
            !repairer.join().unwrap(),
            "the repairer's debt is counted from its read"
        );
        let admitted = caller.join().unwrap();
        assert_eq!(clock.real_now(), START, "real time stays at START");
        if !admitted {
            let after = limiter.try_acquire(1).unwrap();
            assert!(
                !after.is_allowed(),
                "a present admit was refused at real time {START} ns, and a present try_acquire \
                 at the same real time after it was admitted (nothing was released): the \
                 refusal was decided on a word a repair had replaced"
            );
        }
    });
}
