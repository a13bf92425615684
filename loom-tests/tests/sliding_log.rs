//! loom models of the sliding log's ring: admitters racing their commit (`head`) and their
//! stamps (128-bit slots) while the model clock moves, checked by the exact span checker: at
//! most `limit` admissions lie in any closed span of `window − 1` ns (the half-open
//! `(x − window, x]`), whatever the interleaving.
#![cfg(floodgate_loom)]

use std::time::Duration;

use floodgate::{Limiter, SlidingLogLimiter};
use floodgate_loom_tests::{Admitted, ModelClock, join_all, max_in_span, model};
use loom::sync::Arc;
use loom::thread;

const WINDOW: u64 = 10;

fn log(limit: u32, clock: &ModelClock) -> Arc<SlidingLogLimiter<ModelClock>> {
    Arc::new(
        SlidingLogLimiter::with_clock(limit, Duration::from_nanos(WINDOW), clock.clone()).unwrap(),
    )
}

/// Takes `n` on another thread, stamped by real time around the call.
fn taker(
    log: &Arc<SlidingLogLimiter<ModelClock>>,
    clock: &ModelClock,
    n: u32,
) -> thread::JoinHandle<Vec<Admitted>> {
    let (log, clock) = (log.clone(), clock.clone());
    thread::spawn(move || {
        let (span, d) = clock.timed(|| log.try_acquire(n).unwrap());
        if d.is_allowed() {
            vec![Admitted::at(span, u64::from(n))]
        } else {
            vec![]
        }
    })
}

fn check(admitted: &[Admitted], limit: u64) {
    let (most, at) = max_in_span(admitted, WINDOW - 1);
    assert!(
        most <= limit,
        "{most} permits in [{at}, {}]: {admitted:?}",
        at + WINDOW - 1
    );
}

/// Limit 1: two takers race a third that moves time a whole window on, mid-race. A commit's
/// stamp may still be pending when another taker judges it: it must count.
#[test]
fn racing_takers_across_a_window_never_pass_the_limit() {
    model(None, || {
        let clock = ModelClock::starting_at(100);
        let log = log(1, &clock);
        let others = vec![taker(&log, &clock, 1), taker(&log, &clock, 1)];
        clock.advance(WINDOW);
        let (span, d) = clock.timed(|| log.try_acquire(1).unwrap());
        let mine = if d.is_allowed() {
            vec![Admitted::at(span, 1)]
        } else {
            vec![]
        };
        let admitted = join_all(others, mine);
        check(&admitted, 1);
        assert!(!admitted.is_empty(), "someone is admitted in an empty log");
    });
}

/// Limit 2 with a request for the whole limit racing single ones while time moves: a batch's
/// stamps (two slots) are written one by one after its commit.
#[test]
fn a_batch_and_singles_never_pass_the_limit() {
    model(Some(20_000), || {
        let clock = ModelClock::starting_at(100);
        let log = log(2, &clock);
        let others = vec![taker(&log, &clock, 2), taker(&log, &clock, 1)];
        clock.advance(WINDOW / 2);
        let (span, d) = clock.timed(|| log.try_acquire(1).unwrap());
        let mine = if d.is_allowed() {
            vec![Admitted::at(span, 1)]
        } else {
            vec![]
        };
        check(&join_all(others, mine), 2);
    });
}

/// Limit 1: a taker whose clock lags 5 ns races one on time and a driver moving time: the
/// lagging one is decided at the floor (never stamped before the newest admission), so the
/// bound holds for its read widened by its lag.
#[test]
fn a_lagging_taker_never_reopens_the_log() {
    model(None, || {
        let clock = ModelClock::starting_at(100);
        let log = log(1, &clock);
        let lagging = {
            let (log, clock) = (log.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(5);
                let (span, d) = clock.timed(|| log.try_acquire(1).unwrap());
                if d.is_allowed() {
                    vec![Admitted::skewed(span, 1, 5, 0)]
                } else {
                    vec![]
                }
            })
        };
        let on_time = taker(&log, &clock, 1);
        clock.advance(WINDOW);
        let admitted = join_all(vec![lagging, on_time], vec![]);
        check(&admitted, 1);
    });
}
