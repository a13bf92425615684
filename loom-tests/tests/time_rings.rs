//! The ring protocols under the time model (`floodgate_loom_tests::ModelClock`): the
//! `SlidingWindow` ring (2 cells of 10 ns plus 2 future cells: 4 slots, tight; the marks model:
//! 3 cells plus 1) and the `RollingCounter` (2 cells plus 1 future cell: 3 slots), reading the
//! model clock through their own `try_acquire` / `add` / `sum`.
//!
//! * Sliding window promise: the permits of admissions lying inside any closed real span of
//!   `window − cell − 1` = 9 ns (which lies inside 2 consecutive cells) ≤ limit.
//! * Rolling counter promise: a sum read in real interval `[sb, sa]` counts at least every add
//!   that finished before `sb` and started in a cell of the window of `sa`'s cell, and at most
//!   the adds that started before `sa` and finished in a cell of the window of `sb`'s cell
//!   (an add counts in the cell of its read, or a newer one up to the newest cell read so far).
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_rings`
#![cfg(floodgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use floodgate::stats::RollingCounter;
use floodgate::{Limiter, SlidingWindowLimiter};
use floodgate_loom_tests::{Admitted, MAX_LAG, ModelClock, Span, join_all, max_in_span, model};
use loom::thread;

const CELL: u64 = 10;

fn window(limit: u32, clock: &ModelClock) -> Arc<SlidingWindowLimiter<ModelClock>> {
    let w =
        SlidingWindowLimiter::with_clock(limit, Duration::from_nanos(2 * CELL), 2, clock.clone())
            .unwrap()
            .with_future_cells(2)
            .unwrap();
    Arc::new(w)
}

fn take(
    w: &SlidingWindowLimiter<ModelClock>,
    clock: &ModelClock,
    skew: (u64, u64),
) -> Vec<Admitted> {
    let (span, d) = clock.timed(|| w.try_acquire(1).unwrap());
    if d.is_allowed() {
        vec![Admitted::skewed(span, 1, skew.0, skew.1)]
    } else {
        Vec::new()
    }
}

fn check_window(admitted: &[Admitted], limit: u64) {
    let (most, at) = max_in_span(admitted, CELL - 1);
    assert!(
        most <= limit,
        "{most} admitted in [{at}, {at}+{}] (limit {limit}): {admitted:?}",
        CELL - 1
    );
}

/// (a) Limit 1, real time 5. A takes twice; B moves time across the cell edge and takes once: the promise holds wherever the move falls among A's steps.
#[test]
fn window_clock_moves_between_steps() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let w = window(1, &clock);
        let a = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&w, &clock, (0, 0));
                got.extend(take(&w, &clock, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the window, loom
        // explored 10,187 executions of this race.
        let b = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(CELL / 2);
                take(&w, &clock, (0, 0))
            })
        };
        let admitted = join_all(vec![a, b], Vec::new());
        check_window(&admitted, 1);
    });
}

/// (b) S may stall after its clock read while the driver moves on exactly one ring (4 cells:
/// the ring has 4 slots, so cell 4 shares cell 0's slot) and takes the limit; then the driver
/// takes once more. S's stale cell is behind the head: it is decided in the newest cell, never
/// re-opening it.
#[test]
fn window_stalled_reader() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let w = window(1, &clock);
        let s = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&w, &clock, (0, 0)))
        };
        clock.advance(4 * CELL);
        let mut admitted = join_all(vec![s], take(&w, &clock, (0, 0)));
        admitted.extend(take(&w, &clock, (0, 0)));
        check_window(&admitted, 1);
    });
}

/// (c) Limit 2 at real time 15; L lags one cell. T and L take 1 each: both fit and are
/// admitted. Then the driver takes once more: L never moved the state back. T runs on a model
/// thread of its own (on the driver, loom explored 1023 executions of this model; now 2638).
#[test]
fn window_lagging_reader() {
    model(None, || {
        let clock = ModelClock::starting_at(15);
        let w = window(2, &clock);
        let lagging = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(CELL);
                take(&w, &clock, (CELL, 0))
            })
        };
        let taker = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&w, &clock, (0, 0)))
        };
        let mut admitted = join_all(vec![lagging, taker], Vec::new());
        assert_eq!(
            admitted.len(),
            2,
            "a lagging read refused a permit that fit"
        );
        admitted.extend(take(&w, &clock, (0, 0)));
        check_window(&admitted, 2);
    });
}

/// (d) P's one read leaps 10 s + 1 µs while T takes 1 (limit 1; T runs on a model thread of its
/// own: on the driver, loom explored 573 executions of this model; now 20530); the driver takes
/// once more at the same time (any answer), and two windows later must be admitted: a leap never
/// freezes the ring (before issue 14's fix, head followed the leap and every later call was
/// decided in the leapt cell: the ring refused for 10 s). The bound around a leap is the ring's
/// documented one (`sliding_window` module docs, "Time"): moving the ring back forgets what the
/// window held before the leaping call's crossing (≤ limit) and the leaping request (n), so a
/// window-long span around it holds at most 2 × limit + n = 3.
#[test]
fn window_leaping_reader() {
    let lead = MAX_LAG + 1_000;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let w = window(1, &clock);
        let leaper = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::leap_next_read(lead);
                take(&w, &clock, (0, lead))
            })
        };
        let taker = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&w, &clock, (0, 0)))
        };
        let mut admitted = join_all(vec![leaper, taker], Vec::new());
        admitted.extend(take(&w, &clock, (0, 0)));
        clock.advance(4 * CELL);
        let again = take(&w, &clock, (0, 0));
        assert!(!again.is_empty(), "a leap froze the sliding window");
        admitted.extend(again);
        check_window(&admitted, 2 + 1);
    });
}

/// (e) The limit drops from 2 to 1 while A takes once and B twice, then the driver once more:
/// 4 requests, and no span holds more than the larger limit.
#[test]
fn window_set_limit_races_takes() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let w = window(2, &clock);
        let setter = {
            let w = w.clone();
            thread::spawn(move || {
                w.set_limit(1).unwrap();
                Vec::new()
            })
        };
        let a = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&w, &clock, (0, 0)))
        };
        // B's two takes run on a model thread of their own: run on the thread that built the
        // window, loom explored 1,716 executions of this race.
        let b = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&w, &clock, (0, 0));
                got.extend(take(&w, &clock, (0, 0)));
                got
            })
        };
        let mut admitted = join_all(vec![setter, a, b], Vec::new());
        admitted.extend(take(&w, &clock, (0, 0)));
        check_window(&admitted, 2);
    });
}

/// (f) The marks under the time model: 3 cells of 10 ns (blocks {3, 4, 5}, {6, 7, 8}), limit 2,
/// both taken at real time 45 (cell 4). S takes once, reading its clock anywhere in the run
/// (and stalling anywhere in its crossing), while the driver crosses into cell 5 (the same
/// block: an incremental crossing) and into cell 6 (a new block: the window walked again and
/// cell 4's prefix mark rewritten as a suffix mark). A crossing S began in an older cell must
/// never land its marks over the newer ones: the driver's last denial and peek, read through the
/// marks, say exactly when cell 4's permits leave (cell 7, at 70).
#[test]
fn window_marks_under_a_stalled_crosser() {
    model(None, || {
        let clock = ModelClock::starting_at(45);
        let w = Arc::new(
            SlidingWindowLimiter::with_clock(2, Duration::from_nanos(3 * CELL), 3, clock.clone())
                .unwrap()
                .with_future_cells(1)
                .unwrap(),
        );
        let mut admitted = Vec::new();
        let (span, d) = clock.timed(|| w.try_acquire(2).unwrap());
        assert!(d.is_allowed());
        admitted.push(Admitted::at(span, 2));
        let s = {
            let (w, clock) = (w.clone(), clock.clone());
            thread::spawn(move || take(&w, &clock, (0, 0)))
        };
        clock.advance(CELL);
        let mut mine = take(&w, &clock, (0, 0));
        clock.advance(CELL);
        mine.extend(take(&w, &clock, (0, 0)));
        admitted.extend(join_all(vec![s], mine));
        // The 3-cell window's promise: any span of window − cell − 1 = 19 ns holds at most 2.
        assert!(max_in_span(&admitted, 2 * CELL - 1).0 <= 2, "{admitted:?}");
        assert_eq!(
            admitted.len(),
            1,
            "cells 4–6 hold the 2 taken at 45: {admitted:?}"
        );
        let leaves = floodgate::Decision::deny(2, 0, 5, 5);
        assert_eq!(w.try_acquire(1).unwrap(), leaves);
        assert_eq!(w.peek(1).unwrap(), leaves);
    });
}

// ---------------------------------------------------------------------------------------------
// RollingCounter

fn counter(clock: &ModelClock) -> Arc<RollingCounter<ModelClock>> {
    let c = RollingCounter::with_clock(Duration::from_nanos(2 * CELL), 2, 1, clock.clone())
        .unwrap()
        .with_future_cells(1)
        .unwrap();
    Arc::new(c)
}

/// One stamped add of `n`; `skew` = (lag, lead) widens it.
fn add(c: &RollingCounter<ModelClock>, clock: &ModelClock, n: u32, skew: (u64, u64)) -> Admitted {
    let (span, ()) = clock.timed(|| c.add(0, n).unwrap());
    Admitted::skewed(span, u64::from(n), skew.0, skew.1)
}

/// One stamped sum.
fn sum(c: &RollingCounter<ModelClock>, clock: &ModelClock) -> (Span, u64) {
    clock.timed(|| c.sum(0).unwrap())
}

/// The counter's promise for one sum (see the module docs). Window of cell `c`: `[c − 1, c]`.
fn check_sum(adds: &[Admitted], (span, seen): (Span, u64)) {
    let cell = |t: u64| t / CELL;
    let window_start = |t: u64| cell(t).saturating_sub(1);
    let lower: u64 = adds
        .iter()
        .filter(|a| a.hi < span.before && cell(a.lo) >= window_start(span.after))
        .map(|a| a.n)
        .sum();
    let upper: u64 = adds
        .iter()
        .filter(|a| a.lo <= span.after && cell(a.hi) >= window_start(span.before))
        .map(|a| a.n)
        .sum();
    assert!(
        (lower..=upper).contains(&seen),
        "sum {seen} read in {span:?} outside [{lower}, {upper}]: adds {adds:?}"
    );
}

/// (a) A adds 1 then 2; B moves time on one cell, adds 4 and sums (racing A); after both, the
/// driver's final sum. Every sum is within the bounds of the adds' real times.
#[test]
fn counter_clock_moves_between_steps() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let c = counter(&clock);
        let a = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || vec![add(&c, &clock, 1, (0, 0)), add(&c, &clock, 2, (0, 0))])
        };
        // B runs on a model thread of its own: run on the thread that built the counter, loom
        // explored 1,578 executions of this race.
        let b = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(CELL);
                let mine = add(&c, &clock, 4, (0, 0));
                (mine, sum(&c, &clock))
            })
        };
        let (mine, racing) = b.join().unwrap();
        let adds = join_all(vec![a], vec![mine]);
        check_sum(&adds, racing);
        check_sum(&adds, sum(&c, &clock));
    });
}

/// (b) S adds 1 and may stall after its clock read while D moves on more than a ring (4 cells,
/// slot of cell 1 = slot of cell 4), adds 2 and sums. S's stale add must neither be lost nor
/// erase D's newer cell.
#[test]
fn counter_stalled_adder() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let c = counter(&clock);
        let s = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || vec![add(&c, &clock, 1, (0, 0))])
        };
        // D runs on a model thread of its own: run on the thread that built the counter, loom
        // explored 1,272 executions of this race.
        let d = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(3 * CELL);
                let mine = add(&c, &clock, 2, (0, 0));
                (mine, sum(&c, &clock))
            })
        };
        let (mine, racing) = d.join().unwrap();
        let adds = join_all(vec![s], vec![mine]);
        check_sum(&adds, racing);
        check_sum(&adds, sum(&c, &clock));
    });
}

/// (c) L lags two cells (its reads fall a whole window behind) and adds 1 while W adds 2 and R
/// sums. W runs on a model thread of its own (on the driver, loom explored 43 executions
/// of this model; now 529).
#[test]
fn counter_lagging_adder() {
    model(None, || {
        let clock = ModelClock::starting_at(25);
        let c = counter(&clock);
        let lagging = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(2 * CELL);
                vec![add(&c, &clock, 1, (2 * CELL, 0))]
            })
        };
        let writer = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || vec![add(&c, &clock, 2, (0, 0))])
        };
        // The racing sum runs on a model thread of its own: run on the thread that built the
        // counter, loom explored 529 executions of this race.
        let reader = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || sum(&c, &clock))
        };
        let adds = join_all(vec![lagging, writer], Vec::new());
        check_sum(&adds, reader.join().unwrap());
        check_sum(&adds, sum(&c, &clock));
    });
}

/// (d) P's one read leaps 10 s + 1 µs and adds 1 while W adds 2 (a model thread of its own: on
/// the driver, loom explored 20 executions of this model; now 158); one cell later the driver
/// adds 4 and sums: the adds at real time are never lost to the leapt cell.
#[test]
fn counter_leaping_adder() {
    let lead = MAX_LAG + 1_000;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let c = counter(&clock);
        let leaper = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::leap_next_read(lead);
                vec![add(&c, &clock, 1, (0, lead))]
            })
        };
        let writer = {
            let (c, clock) = (c.clone(), clock.clone());
            thread::spawn(move || vec![add(&c, &clock, 2, (0, 0))])
        };
        let mut adds = join_all(vec![leaper, writer], Vec::new());
        clock.advance(CELL);
        adds.push(add(&c, &clock, 4, (0, 0)));
        check_sum(&adds, sum(&c, &clock));
    });
}
