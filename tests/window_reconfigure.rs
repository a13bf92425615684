//! Window algorithms under live `set_limit`, judged by replay: every decision's terms are checked
//! against what a fresh copy of the limiter, given the same history, actually does at the time
//! the decision names. A denial's `retry_after` is exact (a retry at it is admitted, one
//! nanosecond earlier is not), `reset_after` is exact (the whole limit is admitted at it and not
//! a nanosecond before), and `remaining` is what can be taken now (exactly: `remaining` is
//! admitted, one more is not). Limits are lowered below what the window already holds and raised
//! above it at random, windows are crossed by `n > 1` at their last and first nanoseconds.

use std::time::Duration;

use floodgate::{
    AtomicLimiter, FixedWindow, IntoLimiter, Limiter, ManualClock, PackedSlidingWindow, SlidingLog,
    SlidingWindow,
};

#[derive(Clone, Copy, Debug)]
enum Op {
    Advance(u64),
    Take(u32),
    SetLimit(u32),
}

/// xorshift64: a fixed, seeded sequence (no dependence on the run).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

type Build = fn(ManualClock) -> Box<dyn Limiter>;

/// A fresh limiter on a clock at `start`, after `ops`.
fn replay(build: Build, start: u64, ops: &[Op]) -> Box<dyn Limiter> {
    let clock = ManualClock::starting_at(start);
    let limiter = build(clock.clone());
    for op in ops {
        match *op {
            Op::Advance(nanos) => clock.advance_nanos(nanos),
            Op::Take(n) => {
                let _ = limiter.try_acquire(n);
            }
            Op::SetLimit(limit) => limiter.set_limit(limit).unwrap(),
        }
    }
    limiter
}

/// Whether `n` permits are admitted `after` nanoseconds past the end of `ops`.
fn admitted_after(build: Build, start: u64, ops: &[Op], after: u64, n: u32) -> bool {
    let mut ops = ops.to_vec();
    ops.push(Op::Advance(after));
    let limiter = replay(build, start, &ops);
    limiter.try_acquire(n).unwrap().is_allowed()
}

/// Runs `seeds` random histories of 40 steps; `cell` is the algorithm's finest time step (a
/// window, or a cell), which the advances are drawn around.
fn check(name: &str, build: Build, max_limit: u32, cell: u64, seeds: u64) {
    let mut denials = 0;
    for seed in 1..=seeds {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let start = rng.below(1_000) * cell / 7 + rng.below(2) * 123_456_789_000;
        let clock = ManualClock::starting_at(start);
        let limiter = build(clock.clone());
        let mut ops = Vec::new();
        for _ in 0..40 {
            let op = match rng.below(10) {
                0..=3 => Op::Advance(match rng.below(4) {
                    0 => 1,
                    1 => cell - 1,
                    2 => rng.below(cell),
                    _ => rng.below(3 * cell),
                }),
                4 => Op::SetLimit(1 + rng.below(u64::from(max_limit)) as u32),
                _ => Op::Take(1 + rng.below(limiter.limit()) as u32),
            };
            let n = match op {
                Op::Advance(nanos) => {
                    clock.advance_nanos(nanos);
                    ops.push(op);
                    continue;
                }
                Op::SetLimit(limit) => {
                    limiter.set_limit(limit).unwrap();
                    ops.push(op);
                    continue;
                }
                Op::Take(n) => n,
            };
            let decision = limiter.try_acquire(n).unwrap();
            let limit = limiter.limit() as u32;
            let at = format!("{name}, seed {seed}: {decision:?} for {n} after {ops:?}");
            assert_eq!(decision.limit(), u64::from(limit), "{at}");
            // The history the decision's terms speak of: with the request if it was admitted
            // (a denial writes nothing).
            let before = ops.clone();
            if decision.is_allowed() {
                ops.push(op);
            } else {
                denials += 1;
                let retry = decision.retry_after().as_nanos() as u64;
                assert!(retry > 0, "{at}");
                assert!(
                    admitted_after(build, start, &before, retry, n),
                    "retry too early: {at}"
                );
                assert!(
                    !admitted_after(build, start, &before, retry - 1, n),
                    "retry too late: {at}"
                );
            }
            let reset = decision.reset_after().as_nanos() as u64;
            assert!(
                admitted_after(build, start, &ops, reset, limit),
                "reset too early: {at}"
            );
            if reset > 0 {
                assert!(
                    !admitted_after(build, start, &ops, reset - 1, limit),
                    "reset too late: {at}"
                );
            }
            let remaining = decision.remaining() as u32;
            assert!(remaining <= limit, "{at}");
            if remaining > 0 {
                assert!(
                    admitted_after(build, start, &ops, 0, remaining),
                    "remaining too high: {at}"
                );
            }
            if remaining < limit {
                assert!(
                    !admitted_after(build, start, &ops, 0, remaining + 1),
                    "remaining too low: {at}"
                );
            }
        }
    }
    // The histories reach full windows (else the denial checks above checked nothing).
    assert!(denials > seeds, "{name}: only {denials} denials");
}

const SEC: u64 = 1_000_000_000;

#[test]
fn fixed_windows_anchored_and_aligned() {
    check(
        "anchored",
        |clock| {
            let window = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
            Box::new(AtomicLimiter::with_clock(window, clock))
        },
        8,
        SEC,
        150,
    );
    // A window that is not a whole number of its start units (2^13 ns here).
    check(
        "anchored, odd window",
        |clock| {
            let window = FixedWindow::new(5, Duration::from_nanos(1_000_003_001)).unwrap();
            Box::new(AtomicLimiter::with_clock(window, clock))
        },
        8,
        SEC,
        150,
    );
    check(
        "aligned",
        |clock| {
            let window = FixedWindow::aligned(5, Duration::from_secs(1)).unwrap();
            Box::new(AtomicLimiter::with_clock(window, clock))
        },
        8,
        SEC,
        150,
    );
}

#[test]
fn sliding_windows_ring_and_packed() {
    check(
        "ring, 4 cells",
        |clock| {
            let config = SlidingWindow::new(5, Duration::from_secs(1), 4).unwrap();
            Box::new(config.into_limiter_with_clock(clock))
        },
        8,
        SEC / 4,
        150,
    );
    // Two blocks of marks a window apart: retry and reset read through both.
    check(
        "ring, 16 cells",
        |clock| {
            let config = SlidingWindow::new(20, Duration::from_secs(16), 16).unwrap();
            Box::new(config.into_limiter_with_clock(clock))
        },
        30,
        SEC,
        150,
    );
    check(
        "packed, 4 cells",
        |clock| {
            let window = PackedSlidingWindow::new(5, Duration::from_secs(1), 4).unwrap();
            Box::new(AtomicLimiter::with_clock(window, clock))
        },
        8,
        SEC / 4,
        150,
    );
}

#[test]
fn sliding_log() {
    check(
        "log",
        |clock| {
            let config = SlidingLog::new(5, Duration::from_secs(1)).unwrap();
            Box::new(
                config
                    .with_capacity(8)
                    .unwrap()
                    .into_limiter_with_clock(clock),
            )
        },
        8,
        SEC / 4,
        150,
    );
}
