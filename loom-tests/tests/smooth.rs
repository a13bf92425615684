#![cfg(floodgate_loom)]
//! loom models of the smooth limiters' protocols: requests racing each other and racing
//! `set_rate` (including the ∞ flag). Every execution must be explained by a sequential order
//! of the same calls (respecting each thread's own order) that gives every call the same answer
//! and leaves the same state.
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test smooth`

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Decision, Limiter, ManualClock, SmoothBursty, SmoothSnapshot, SmoothWarmingUp};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Reserve(u32),
    TryAcquire(u32),
    SetRate(f64),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Waited(Duration),
    Decided(Decision),
    RateSet,
}

/// What the models need of both flavours.
trait Smooth: Limiter + Send + Sync + 'static {
    fn reserve_permits(&self, n: u32) -> Duration;
    fn change_rate(&self, rate: f64);
    fn state(&self) -> SmoothSnapshot;
}

impl Smooth for SmoothBursty<ManualClock> {
    fn reserve_permits(&self, n: u32) -> Duration {
        self.reserve(n).unwrap()
    }
    fn change_rate(&self, rate: f64) {
        self.set_rate(rate).unwrap()
    }
    fn state(&self) -> SmoothSnapshot {
        self.snapshot()
    }
}

impl Smooth for SmoothWarmingUp<ManualClock> {
    fn reserve_permits(&self, n: u32) -> Duration {
        self.reserve(n).unwrap()
    }
    fn change_rate(&self, rate: f64) {
        self.set_rate(rate).unwrap()
    }
    fn state(&self) -> SmoothSnapshot {
        self.snapshot()
    }
}

fn apply(limiter: &impl Smooth, op: Op) -> Answer {
    match op {
        Op::Reserve(n) => Answer::Waited(limiter.reserve_permits(n)),
        Op::TryAcquire(n) => Answer::Decided(limiter.try_acquire(n).unwrap()),
        Op::SetRate(rate) => {
            limiter.change_rate(rate);
            Answer::RateSet
        }
    }
}

/// Every merge of the threads' call lists that keeps each thread's own order.
fn interleavings(threads: &[Vec<Op>]) -> Vec<Vec<(usize, usize)>> {
    fn go(
        threads: &[Vec<Op>],
        next: &mut Vec<usize>,
        prefix: &mut Vec<(usize, usize)>,
        out: &mut Vec<Vec<(usize, usize)>>,
    ) {
        let mut done = true;
        for t in 0..threads.len() {
            if next[t] < threads[t].len() {
                done = false;
                prefix.push((t, next[t]));
                next[t] += 1;
                go(threads, next, prefix, out);
                next[t] -= 1;
                prefix.pop();
            }
        }
        if done {
            out.push(prefix.clone());
        }
    }
    let mut out = Vec::new();
    go(
        threads,
        &mut vec![0; threads.len()],
        &mut Vec::new(),
        &mut out,
    );
    out
}

/// A limiter created at 1 s on its own clock, 250 ms later (so stored permits are in play).
fn started<L: Smooth>(make: fn(&ManualClock) -> L) -> (ManualClock, L) {
    let clock = ManualClock::starting_at(1_000_000_000);
    let limiter = make(&clock);
    clock.advance(Duration::from_millis(250));
    (clock, limiter)
}

/// Runs `threads` concurrently on a limiter from `make` (each thread's calls in order; the
/// first list on the model's main thread), then asserts that some sequential order explains
/// every answer and the final state.
fn check_linearizable<L: Smooth>(make: fn(&ManualClock) -> L, threads: Vec<Vec<Op>>) {
    let bound = std::env::var("LOOM_MAX_PREEMPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    let threads = Arc::new(threads);
    builder.check(move || {
        let (_clock, limiter) = started(make);
        let limiter = Arc::new(limiter);
        let handles: Vec<_> = (1..threads.len())
            .map(|t| {
                let limiter = Arc::clone(&limiter);
                let threads = Arc::clone(&threads);
                loom::thread::spawn(move || {
                    threads[t]
                        .iter()
                        .map(|&op| apply(&*limiter, op))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut answers = vec![
            threads[0]
                .iter()
                .map(|&op| apply(&*limiter, op))
                .collect::<Vec<_>>(),
        ];
        answers.extend(handles.into_iter().map(|h| h.join().unwrap()));
        let final_state = limiter.state();

        let orders = interleavings(&threads);
        assert!(
            orders.len() > 1,
            "the model must have several orders to choose from"
        );
        let explained = orders.into_iter().any(|order| {
            let (_clock, sequential) = started(make);
            let mut replay: Vec<Vec<Answer>> = threads.iter().map(|_| Vec::new()).collect();
            for &(t, i) in &order {
                replay[t].push(apply(&sequential, threads[t][i]));
            }
            replay == answers && sequential.state() == final_state
        });
        assert!(
            explained,
            "no sequential order explains {answers:?} / {final_state:?}"
        );
    });
}

fn bursty(clock: &ManualClock) -> SmoothBursty<ManualClock> {
    SmoothBursty::create_with_clock(10.0, clock.clone()).unwrap()
}

fn bursty_infinite(clock: &ManualClock) -> SmoothBursty<ManualClock> {
    SmoothBursty::create_with_clock(f64::INFINITY, clock.clone()).unwrap()
}

fn warming(clock: &ManualClock) -> SmoothWarmingUp<ManualClock> {
    SmoothWarmingUp::create_with_clock(10.0, Duration::from_secs(1), clock.clone()).unwrap()
}

#[test]
fn bursty_requests_race() {
    // 2.5 permits stored: who gets the stored ones, who books debt, who is refused.
    check_linearizable(
        bursty,
        vec![
            vec![Op::Reserve(2)],
            vec![Op::Reserve(1)],
            vec![Op::TryAcquire(1)],
        ],
    );
}

#[test]
fn bursty_set_rate_races_requests() {
    check_linearizable(
        bursty,
        vec![
            vec![Op::SetRate(20.0), Op::Reserve(3)],
            vec![Op::Reserve(3), Op::TryAcquire(1)],
        ],
    );
}

#[test]
fn bursty_leaving_and_entering_infinity_races_requests() {
    check_linearizable(
        bursty_infinite,
        vec![
            vec![Op::SetRate(2.0), Op::Reserve(1)],
            vec![Op::Reserve(1), Op::Reserve(1)],
        ],
    );
    check_linearizable(
        bursty,
        vec![
            vec![Op::Reserve(5), Op::SetRate(f64::INFINITY)],
            vec![Op::Reserve(1), Op::TryAcquire(1)],
        ],
    );
}

#[test]
fn warming_requests_and_set_rate_race() {
    check_linearizable(
        warming,
        vec![
            vec![Op::Reserve(2)],
            vec![Op::Reserve(1)],
            vec![Op::TryAcquire(1)],
        ],
    );
    check_linearizable(
        warming,
        vec![
            vec![Op::SetRate(20.0), Op::Reserve(1)],
            vec![Op::Reserve(2)],
        ],
    );
}
