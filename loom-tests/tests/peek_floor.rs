//! A path the other models left unexercised (found by the ordering audit): `AtomicLimiter::peek`
//! (and `available`, which runs it) on a time-floored bucket (`Gcra`) racing a take. The peek
//! loads the state word with Acquire, pairing with the take's AcqRel compare-exchange, and then
//! reads the time floor the take raised before it, so that a lagging peek is decided at the
//! taker's time.
//!
//! What the model pins: a lagging peek answers as before or after the take. With the peek's
//! Acquire weakened to Relaxed it fails (`available() read 0, neither before (2) nor after (1)
//! the take`): the peek sees the take's word with the floor's initial 0 and decides at its
//! lagging read. The peek runs on a model thread of its own: run on the thread that built the
//! limiter, as this model first did, loom explored one execution only (the peek before the
//! take), so the model passed with Relaxed too.
//!
//! Gcra: capacity 2, one permit per 100 ns. The first take of a model raises the time floor to
//! its read (START is past the floor's grain), so a reader lagging it by less than a grain is
//! decided at the writer's time.
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test peek_floor`
#![cfg(floodgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use floodgate::{AtomicLimiter, Gcra, Limiter, Rate};
use floodgate_loom_tests::{ModelClock, model};
use loom::thread;

/// Nanoseconds per permit.
const T: u64 = 100;
/// Capacity.
const C: u32 = 2;
/// Real time at the start of every model: past the time floor's grain (16,384 ns).
const START: u64 = 100_000;

fn limiter(clock: &ModelClock) -> Arc<AtomicLimiter<Gcra, ModelClock>> {
    let rate = Rate::new(C, Duration::from_nanos(u64::from(C) * T));
    Arc::new(AtomicLimiter::with_clock(
        Gcra::new(rate, C).unwrap(),
        clock.clone(),
    ))
}

/// A takes 1 (the first take: it raises the floor to START) while B, whose reads lag half an
/// interval, asks `available()`. The answer is the count before the take (2) or after it (1): a
/// peek that sees the take's word also sees the floor the take raised (Acquire on the word, then
/// the floor), so its lagging read is raised to the take's time. A peek that paired the new word
/// with the old floor would judge it half an interval early: 0 available, a permit refused
/// because of the reader's lag.
#[test]
fn a_lagging_peek_racing_the_first_take_sees_before_or_after_it() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let l = limiter(&clock);
        let a = {
            let l = l.clone();
            thread::spawn(move || l.try_acquire(1).unwrap().is_allowed())
        };
        // B is spawned, not the driver: see the module docs.
        let b = {
            let l = l.clone();
            thread::spawn(move || {
                ModelClock::set_thread_lag(T / 2);
                l.available()
            })
        };
        assert!(
            a.join().unwrap(),
            "the first take of a full bucket is allowed"
        );
        let seen = b.join().unwrap();
        assert!(
            seen == 2 || seen == 1,
            "available() read {seen}, neither before (2) nor after (1) the take"
        );
        assert_eq!(l.available(), 1, "after the take");
    });
}
