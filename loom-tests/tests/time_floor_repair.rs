//! Two leap repairs of the time floor racing, under the time model
//! (`floodgate_loom_tests::ModelClock`), on the GCRA bucket (`AtomicLimiter`, `update_at`).
//!
//! A clock read that leaps beyond the lag horizon raises the time floor to the leapt time `L`.
//! A later *fresh* reader finds the floor more than the horizon ahead of its read, repairs the
//! leaped word and, once its word has landed, puts the floor back to its read
//! (`limiter::engine::floored_loop`). Two such repairers: **early** reads the clock at `START`;
//! **late** first moves real time on by `D` (four floor grains) and reads `START + D`. Each asks
//! for one permit; the first to decide on the leaped word writes its repair even when it is
//! denied (the bucket reads a leaped word as "empty now"), and the words land in either order.
//!
//! Then, at real time `START + D`, a reader lagging by `D` (its read is `START`) must be decided
//! at the latest writer's time less at most one grain (`update_at`'s promise: a reader that sees
//! the word sees a floor at most one grain behind its writer's clock), so its view of the bucket
//! (`peek`'s `reset_after`) is at most one grain longer than a present reader's.
//!
//! What the model found (fixed): early's word lands, then late's (decided at `START + D`), then
//! early puts the floor from `L` back to `START`; late's compare-exchange from `L` then fails
//! and its value was dropped. The floor stayed at `START`, `D` behind the word's writer, and the
//! lagging reader was decided at `START`: `reset_after` `D` longer than a present reader's. A
//! repair whose compare-exchange fails now raises the floor to its read (`fetch_max`), so the
//! floor ends at the latest of the repairers' reads.
//!
//! The sliding log repairs its floor the same way (`SlidingLogLimiter`, grain 1 ns): the second
//! model races the same two repairers there, and a lagging reader refused by the full log must
//! be told the same `retry_after` as a present one (it is decided at the newest stamp). Before
//! the fix it was told `D` more.
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_floor_repair`
#![cfg(floodgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use floodgate::{AtomicLimiter, Gcra, Limiter, Rate, SlidingLogLimiter};
use floodgate_loom_tests::{MAX_LAG, ModelClock, model};
use loom::thread;

/// Nanoseconds per permit.
const T: u64 = 100;
/// Bucket capacity.
const C: u32 = 2;
/// Real time at the start: past the floor's grain, so raises are not skipped as within a grain.
const START: u64 = 100_000;
/// The floor's grain: a writer raises the floor only once its time passed it by this much.
const GRAIN: u64 = floodgate::clock::FLOOR_GRAIN_NANOS;
/// How far late's read is after early's: more than a grain.
const D: u64 = 4 * GRAIN;
/// The leaper's lead: beyond the lag horizon of every present read (`START + D` too).
const LEAD: u64 = MAX_LAG + 1_000_000_000;

#[test]
fn two_leap_repairs_leave_the_floor_within_a_grain_of_the_later_writer() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let rate = Rate::new(C, Duration::from_nanos(u64::from(C) * T));
        let limiter = Arc::new(AtomicLimiter::with_clock(
            Gcra::new(rate, C).unwrap(),
            clock.clone(),
        ));
        // The leap: the floor goes to START + LEAD.
        ModelClock::leap_next_read(LEAD);
        assert!(limiter.try_acquire(1).unwrap().is_allowed());
        let early = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.try_acquire(1).unwrap();
            })
        };
        let late = {
            let (limiter, clock) = (limiter.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(D);
                limiter.try_acquire(1).unwrap();
            })
        };
        early.join().unwrap();
        late.join().unwrap();
        assert_eq!(clock.real_now(), START + D);
        ModelClock::set_thread_lag(D);
        let lagging = limiter.peek(1).unwrap();
        ModelClock::set_thread_lag(0);
        let present = limiter.peek(1).unwrap();
        assert!(
            lagging.reset_after() <= present.reset_after() + Duration::from_nanos(GRAIN),
            "a reader lagging {D} ns was decided more than a grain before the latest writer: \
             {lagging:?}, a present reader {present:?}"
        );
    });
}

/// The sliding log's window: both repairers' stamps stay in it to the end.
const LOG_WINDOW: Duration = Duration::from_secs(1);

#[test]
fn two_leap_repairs_of_the_sliding_log_leave_its_floor_at_the_later_stamp() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let log = Arc::new(SlidingLogLimiter::with_clock(2, LOG_WINDOW, clock.clone()).unwrap());
        // The leap: the floor and the leaper's stamp go to START + LEAD.
        ModelClock::leap_next_read(LEAD);
        assert!(log.try_acquire(1).unwrap().is_allowed());
        let early = {
            let log = log.clone();
            thread::spawn(move || {
                log.try_acquire(1).unwrap();
            })
        };
        let late = {
            let (log, clock) = (log.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(D);
                log.try_acquire(1).unwrap();
            })
        };
        early.join().unwrap();
        late.join().unwrap();
        ModelClock::set_thread_lag(D);
        let lagging = log.try_acquire(1).unwrap();
        ModelClock::set_thread_lag(0);
        let present = log.try_acquire(1).unwrap();
        assert!(
            lagging.retry_after() <= present.retry_after(),
            "a reader lagging {D} ns was decided before the newest stamp: {lagging:?}, a \
             present reader {present:?}"
        );
    });
}
