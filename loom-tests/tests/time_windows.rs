//! The window limiters under the time model (`floodgate_loom_tests::ModelClock`): fixed window
//! (aligned and anchored) and `PackedSlidingWindow` through `AtomicLimiter`, and `Sharded`.
//! Each model records every admission's real-time interval `[before, after]` and asserts the
//! limiter's promise over them exactly:
//! * aligned fixed window: admissions lying inside one aligned window ≤ limit;
//! * anchored fixed window: admissions at one real instant ≤ limit, and inside any span shorter
//!   than a window ≤ 2 × limit (it touches at most two windows);
//! * packed sliding window (2 cells of 10 ns): admissions inside any closed span of
//!   `window − cell − 1` ns (which lies inside 2 consecutive cells) ≤ limit;
//! * sharded (aligned, 2 stripes): as the aligned fixed window, over all stripes together.
//!
//! Section (f) runs the fixed windows' `admit` (the bool answer, whose short path skips the
//! window's terms) against `try_acquire` across a window crossing, with the same promises.
//!
//! Windows are tiny (10 ns) so that a stall, a lag or a leap of a few steps is meaningful; the
//! "far ahead" horizon is a window (a packed cell) starting more than `MAX_CLOCK_LAG_NANOS`
//! after the read, crossed by one `advance` of the driver. (Windows longer than that horizon:
//! `tests/time_long_windows.rs`.)
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_windows`
#![cfg(floodgate_loom)]

use std::time::Duration;

use floodgate::{
    Algorithm, AtomicLimiter, Decision, FixedWindow, Limiter, PackedSlidingWindow, Sharded,
};
use floodgate_loom_tests::{
    Admitted, MAX_LAG, ModelClock, Span, max_in_aligned_window, max_in_span, model,
};
use loom::sync::Arc;
use loom::thread;

/// Window length (ns) of the fixed windows; the packed window is 2 cells of `W`.
const W: u64 = 10;

/// The promise of each window kind, as a bound over admissions' real times.
#[derive(Clone, Copy, Debug)]
enum Promise {
    Aligned,
    Anchored,
    /// Packed sliding window of 2 cells of `W`.
    Sliding,
}

impl Promise {
    fn check(self, admitted: &[Admitted], limit: u64) {
        match self {
            Promise::Aligned => {
                let (most, k) = max_in_aligned_window(admitted, W);
                assert!(
                    most <= limit,
                    "{most} admitted inside window {k} (limit {limit}): {admitted:?}"
                );
            }
            Promise::Anchored => {
                let (most, at) = max_in_span(admitted, 0);
                assert!(
                    most <= limit,
                    "{most} admitted at instant {at} (limit {limit}): {admitted:?}"
                );
                let (most, at) = max_in_span(admitted, W - 1);
                assert!(
                    most <= 2 * limit,
                    "{most} admitted in [{at}, {at}+{}] (2 × limit {limit}): {admitted:?}",
                    W - 1
                );
            }
            Promise::Sliding => {
                let (most, at) = max_in_span(admitted, 2 * W - W - 1);
                assert!(
                    most <= limit,
                    "{most} admitted in [{at}, {at}+{}] (limit {limit}): {admitted:?}",
                    W - 1
                );
            }
        }
    }
}

/// What a model needs of a limiter: a take, stamped, from a given home (stripe, for `Sharded`).
trait Take: Limiter + 'static {
    fn take_on(&self, home: usize, n: u32) -> Decision;
}

impl<A: Algorithm> Take for AtomicLimiter<A, ModelClock> {
    fn take_on(&self, _: usize, n: u32) -> Decision {
        self.try_acquire(n).unwrap()
    }
}

impl Take for Sharded<ModelClock> {
    fn take_on(&self, home: usize, n: u32) -> Decision {
        self.try_acquire_on(home, n).unwrap()
    }
}

/// One stamped take: the admission, if any, with its skew (`lag`, `lead`) widening it.
fn take<L: Take>(
    l: &L,
    clock: &ModelClock,
    home: usize,
    n: u32,
    skew: (u64, u64),
) -> Vec<Admitted> {
    let (span, d): (Span, Decision) = clock.timed(|| l.take_on(home, n));
    if d.is_allowed() {
        vec![Admitted::skewed(span, u64::from(n), skew.0, skew.1)]
    } else {
        Vec::new()
    }
}

/// A window kind under test: its constructor and its promise.
struct Kind<L> {
    make: fn(u32, &ModelClock) -> L,
    promise: Promise,
}

fn aligned() -> Kind<AtomicLimiter<FixedWindow, ModelClock>> {
    Kind {
        make: |limit, clock| {
            AtomicLimiter::with_clock(
                FixedWindow::aligned(limit, Duration::from_nanos(W)).unwrap(),
                clock.clone(),
            )
        },
        promise: Promise::Aligned,
    }
}

fn anchored() -> Kind<AtomicLimiter<FixedWindow, ModelClock>> {
    Kind {
        make: |limit, clock| {
            AtomicLimiter::with_clock(
                FixedWindow::new(limit, Duration::from_nanos(W)).unwrap(),
                clock.clone(),
            )
        },
        promise: Promise::Anchored,
    }
}

fn packed() -> Kind<AtomicLimiter<PackedSlidingWindow, ModelClock>> {
    Kind {
        make: |limit, clock| {
            AtomicLimiter::with_clock(
                PackedSlidingWindow::new(limit, Duration::from_nanos(2 * W), 2).unwrap(),
                clock.clone(),
            )
        },
        promise: Promise::Sliding,
    }
}

/// Two stripes; every model gives the limit as a multiple of 2 (one share per stripe).
fn sharded() -> Kind<Sharded<ModelClock>> {
    Kind {
        make: |limit, clock| {
            Sharded::with_clock(limit, Duration::from_nanos(W), 2, clock.clone()).unwrap()
        },
        promise: Promise::Aligned,
    }
}

// ---------------------------------------------------------------------------------------------
// (a) The clock moves between any two steps while two threads take permits.

/// Limit `limit`; real time starts at 5 (mid-window). A takes twice; B moves time across the
/// window edge (+5 ns) and then takes once. Whatever the interleaving of
/// the clock move with A's reads, state loads and CASes, the promise holds.
fn clock_moves_between_steps<L: Take>(kind: Kind<L>, limit: u32) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let l = Arc::new(make(limit, &clock));
        let a = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&*l, &clock, 0, 1, (0, 0));
                got.extend(take(&*l, &clock, 1, 1, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 179 (aligned), 119 (anchored, packed) and 124 (sharded) executions of this
        // race.
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(5);
                take(&*l, &clock, 1, 1, (0, 0))
            })
        };
        let admitted = floodgate_loom_tests::join_all(vec![a, b], Vec::new());
        promise.check(&admitted, u64::from(limit));
    });
}

#[test]
fn fixed_aligned_clock_moves_between_steps() {
    clock_moves_between_steps(aligned(), 1);
}

#[test]
fn fixed_anchored_clock_moves_between_steps() {
    clock_moves_between_steps(anchored(), 1);
}

#[test]
fn packed_clock_moves_between_steps() {
    clock_moves_between_steps(packed(), 1);
}

#[test]
fn sharded_clock_moves_between_steps() {
    clock_moves_between_steps(sharded(), 2);
}

// ---------------------------------------------------------------------------------------------
// (b) A thread stalled between its clock read and its commit while the state moves far ahead.

/// S takes 1 (its clock read may come before D's move, its state load and CAS after it). D
/// moves real time on by `stall` and takes the whole limit (`limit` requests of 1, spread over
/// the stripes); after S and D are done the driver takes once more, at the same real time. The
/// window D is in must not be admitted twice: S's stale commit must never replace the
/// newer window with its old one.
fn stalled_reader<L: Take>(kind: Kind<L>, limit: u32, stall: u64) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let l = Arc::new(make(limit, &clock));
        let s = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 0, 1, (0, 0)))
        };
        // D runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 55 (fixed windows, packed) and 131 (sharded) executions of this race.
        let d = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(stall);
                let mut got = Vec::new();
                for home in 0..limit as usize {
                    got.extend(take(&*l, &clock, home, 1, (0, 0)));
                }
                got
            })
        };
        let mut admitted = floodgate_loom_tests::join_all(vec![s, d], Vec::new());
        admitted.extend(take(&*l, &clock, 0, 1, (0, 0)));
        promise.check(&admitted, u64::from(limit));
    });
}

/// A stall shorter than the horizon (2.5 windows): the newer state is taken as a later clock
/// read and kept.
#[test]
fn fixed_aligned_stall_within_the_horizon() {
    stalled_reader(aligned(), 1, 2 * W + W / 2);
}

#[test]
fn fixed_anchored_stall_within_the_horizon() {
    stalled_reader(anchored(), 1, 2 * W + W / 2);
}

/// One cell: within the packed window's one-window horizon.
#[test]
fn packed_stall_within_the_horizon() {
    stalled_reader(packed(), 1, W);
}

#[test]
fn sharded_stall_within_the_horizon() {
    stalled_reader(sharded(), 2, 2 * W + W / 2);
}

/// A stall longer than the fixed window's lag horizon (10 s): on today's code S takes the
/// newer window for a clock glitch, resets it to its own old window, and the driver's window is
/// admitted again in full.
#[test]
fn fixed_aligned_stall_beyond_the_horizon() {
    stalled_reader(aligned(), 1, MAX_LAG + 2 * W);
}

#[test]
fn fixed_anchored_stall_beyond_the_horizon() {
    stalled_reader(anchored(), 1, MAX_LAG + 2 * W);
}

/// Three cells: beyond the packed window's one-window horizon.
#[test]
fn packed_stall_beyond_the_horizon() {
    stalled_reader(packed(), 1, 3 * W);
}

#[test]
fn sharded_stall_beyond_the_horizon() {
    stalled_reader(sharded(), 2, MAX_LAG + 2 * W);
}

// ---------------------------------------------------------------------------------------------
// (c) A lagging reader: never refused because of its lag, never moves the state back.

/// Lag of one window (10 ns, far within the 10 s bound). Real time 15: the lagging thread L
/// reads 5 (the previous window). Limit 2; the writer W takes 1 and L takes 1: both fit, so
/// both are admitted whatever the order (the lag refuses nothing that fits). W runs on a model
/// thread of its own: run on the thread that built the limiter, loom explored 7 executions of
/// this model (1 on `Sharded`) against 112 (34).
fn lag_refuses_nothing_that_fits<L: Take>(kind: Kind<L>) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(15);
        let l = Arc::new(make(2, &clock));
        let lagging = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(W);
                take(&*l, &clock, 1, 1, (W, 0))
            })
        };
        let writer = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 0, 1, (0, 0)))
        };
        let admitted = floodgate_loom_tests::join_all(vec![lagging, writer], Vec::new());
        assert_eq!(
            admitted.len(),
            2,
            "a lagging read refused a permit that fit"
        );
        promise.check(&admitted, 2);
    });
}

/// The writer (main) takes the whole limit (2) at real time 15 while L (lag one window) takes 1,
/// then the writer takes 1 more at the same real time. If L's commit moved the state back to its
/// window, the writer's window would open afresh and admit a third permit.
fn lag_never_moves_the_state_back<L: Take>(kind: Kind<L>) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(15);
        let l = Arc::new(make(2, &clock));
        let lagging = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(W);
                take(&*l, &clock, 1, 1, (W, 0))
            })
        };
        let mut mine = take(&*l, &clock, 0, 1, (0, 0));
        mine.extend(take(&*l, &clock, 1, 1, (0, 0)));
        let mut admitted = floodgate_loom_tests::join_all(vec![lagging], mine);
        admitted.extend(take(&*l, &clock, 0, 1, (0, 0)));
        promise.check(&admitted, 2);
    });
}

#[test]
fn fixed_aligned_lagging_reader() {
    lag_refuses_nothing_that_fits(aligned());
    lag_never_moves_the_state_back(aligned());
}

#[test]
fn fixed_anchored_lagging_reader() {
    lag_refuses_nothing_that_fits(anchored());
    lag_never_moves_the_state_back(anchored());
}

#[test]
fn packed_lagging_reader() {
    lag_refuses_nothing_that_fits(packed());
    lag_never_moves_the_state_back(packed());
}

#[test]
fn sharded_lagging_reader() {
    lag_refuses_nothing_that_fits(sharded());
    lag_never_moves_the_state_back(sharded());
}

// ---------------------------------------------------------------------------------------------
// (d) A leaping reader: afterwards the limiter admits again within the documented horizon.

/// Limit 1 (2 for sharded). P's one clock read leaps `lead` ahead of real time 5; a writer W
/// takes 1 meanwhile, on a model thread of its own (run on the thread that built the limiter,
/// loom explored 7 executions of this model, 1 on `Sharded`; now 112, and 34 on `Sharded`).
/// Then, at the same real time, the main thread takes what P left (any answer), and `recover`
/// ns later once more, which must be admitted: the leap froze the limiter for at most
/// `recover`. The promise holds with P's interval widened by its lead.
fn leaping_reader<L: Take>(kind: Kind<L>, limit: u32, lead: u64, recover: u64) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let l = Arc::new(make(limit, &clock));
        let leaper = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::leap_next_read(lead);
                take(&*l, &clock, 1, 1, (0, lead))
            })
        };
        let writer = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 0, 1, (0, 0)))
        };
        let mut admitted = floodgate_loom_tests::join_all(vec![leaper, writer], Vec::new());
        for home in 0..limit as usize {
            admitted.extend(take(&*l, &clock, home, 1, (0, 0)));
        }
        clock.advance(recover);
        let again = take(&*l, &clock, 0, 1, (0, 0));
        assert!(
            !again.is_empty(),
            "still frozen {recover} ns after a leap of {lead} ns"
        );
        admitted.extend(again);
        promise.check(&admitted, u64::from(limit));
    });
}

/// A leap beyond the horizon (10 s + 1 µs): it freezes at most one window. On today's code the
/// leaper's commit replaces the current window (holding main's permit) with its far-future one,
/// which the next fresh reader distrusts as garbage and resets: the current window is admitted
/// twice (the lead's fix folds a far-ahead window into the current one, keeping its count).
#[test]
fn fixed_aligned_leap_beyond_the_horizon() {
    leaping_reader(aligned(), 1, MAX_LAG + 1_000, W);
}

#[test]
fn fixed_anchored_leap_beyond_the_horizon() {
    leaping_reader(anchored(), 1, MAX_LAG + 1_000, W);
}

#[test]
fn packed_leap_beyond_the_horizon() {
    leaping_reader(packed(), 1, MAX_LAG + 1_000, 2 * W);
}

#[test]
fn sharded_leap_beyond_the_horizon() {
    leaping_reader(sharded(), 2, MAX_LAG + 1_000, W);
}

/// A leap within the horizon (3 windows; one cell for the packed window) is taken as a later
/// read by another core and kept: it freezes the limiter for at most the lead plus one window.
#[test]
fn fixed_windows_leap_within_the_horizon() {
    leaping_reader(aligned(), 1, 3 * W, 4 * W);
    leaping_reader(anchored(), 1, 3 * W, 4 * W);
    leaping_reader(packed(), 1, W, 3 * W);
}

// ---------------------------------------------------------------------------------------------
// (e) Races with set_limit.

/// The limit drops from `from` to `to` while two threads take (main twice, another once, then
/// main once more after the change): 4 requests, more than either limit, and a window never
/// holds more than the larger of the two limits.
fn set_limit_races_takes<L: Take>(kind: Kind<L>, from: u32, to: u32) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let l = Arc::new(make(from, &clock));
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                l.set_limit(to).unwrap();
                Vec::new()
            })
        };
        let other = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, 1, (0, 0)))
        };
        let mut mine = take(&*l, &clock, 0, 1, (0, 0));
        mine.extend(take(&*l, &clock, 1, 1, (0, 0)));
        let mut admitted = floodgate_loom_tests::join_all(vec![setter, other], mine);
        // The new limit is in force now: the window is full under it.
        admitted.extend(take(&*l, &clock, 0, 1, (0, 0)));
        promise.check(&admitted, u64::from(from.max(to)));
    });
}

#[test]
fn fixed_windows_set_limit_races_takes() {
    set_limit_races_takes(aligned(), 2, 1);
    set_limit_races_takes(anchored(), 2, 1);
    set_limit_races_takes(packed(), 2, 1);
}

#[test]
fn sharded_set_limit_races_takes() {
    set_limit_races_takes(sharded(), 3, 2);
}

// ---------------------------------------------------------------------------------------------
// (f) `admit` (the bool answer, its own short path) racing `try_acquire` across a window edge.

/// One stamped `admit`: the admission, if any.
fn admit<L: Limiter>(l: &L, clock: &ModelClock, n: u32) -> Vec<Admitted> {
    let (span, allowed) = clock.timed(|| l.admit(n).unwrap());
    if allowed {
        vec![Admitted::at(span, u64::from(n))]
    } else {
        Vec::new()
    }
}

/// Limit 1; real time starts at 5 (mid-window). A calls `admit(1)` twice; B takes with
/// `try_acquire(1)`, moves time across the window edge (+5 ns), then calls `admit(1)` and
/// `try_acquire(1)`. Whatever the interleaving, the promise holds over every admission of both
/// calls (an `admit` that answered true on a full window would put two admissions in one
/// window, at one instant). Then, a whole window after the last call (a window that must be
/// fresh), `admit(1)` must answer true: the bool path refuses nothing that fits.
fn admit_races_try_acquire<L: Take>(kind: Kind<L>) {
    let make = kind.make;
    let promise = kind.promise;
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let l = Arc::new(make(1, &clock));
        let a = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = admit(&*l, &clock, 1);
                got.extend(admit(&*l, &clock, 1));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 279 (aligned) and 115 (anchored) executions of this race.
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&*l, &clock, 0, 1, (0, 0));
                clock.advance(5);
                got.extend(admit(&*l, &clock, 1));
                got.extend(take(&*l, &clock, 0, 1, (0, 0)));
                got
            })
        };
        let mut admitted = floodgate_loom_tests::join_all(vec![a, b], Vec::new());
        promise.check(&admitted, 1);
        clock.advance(2 * W);
        let fresh = admit(&*l, &clock, 1);
        assert!(
            !fresh.is_empty(),
            "admit refused a fresh window: {admitted:?}"
        );
        admitted.extend(fresh);
        promise.check(&admitted, 1);
    });
}

#[test]
fn fixed_aligned_admit_races_try_acquire() {
    admit_races_try_acquire(aligned());
}

#[test]
fn fixed_anchored_admit_races_try_acquire() {
    admit_races_try_acquire(anchored());
}
