#![cfg(floodgate_loom)]
//! loom models of `Sharded::set_limit` (issue 17's reconfiguration fixes): a lowering racing an
//! admission on another stripe must leave the window at most the larger of what it admitted and
//! the new limit (the excess of a stripe over its new share is charged to the others by
//! compare-exchange), and two racing `set_limit` calls must leave shares that sum to the limit
//! in force.

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Limiter, ManualClock, Sharded};
use floodgate_loom_tests::model;
use loom::thread;

/// Every permit the window still admits, one at a time, from each home stripe in turn.
fn drain(limiter: &Sharded<ManualClock>) -> u64 {
    let mut more = 0;
    for home in 0..limiter.stripes() {
        while limiter.try_acquire_on(home, 1).unwrap().is_allowed() {
            more += 1;
        }
    }
    more
}

/// Limit 8 over two stripes (4 + 4); stripe 0's 4 are taken. `set_limit(4)` (shares 2 + 2,
/// stripe 0 two over) races one take on stripe 1. Afterwards the window admits nothing more
/// than max(admitted, 4): before the fix, stripe 1 still had its whole new share (6 in all).
#[test]
fn a_lowering_racing_a_take_caps_the_window() {
    model(None, || {
        let limiter = Arc::new(
            Sharded::with_clock(8, Duration::from_secs(1), 2, ManualClock::new()).unwrap(),
        );
        for _ in 0..4 {
            assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
        }
        let setter = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.set_limit(4).unwrap())
        };
        // The take runs on a model thread of its own: run on the thread that built the limiter,
        // loom explored 190 executions of this race.
        let taker = {
            let limiter = limiter.clone();
            thread::spawn(move || u64::from(limiter.try_acquire_on(1, 1).unwrap().is_allowed()))
        };
        setter.join().unwrap();
        let raced = taker.join().unwrap();
        let admitted = 4 + raced;
        let more = drain(&limiter);
        assert_eq!(admitted + more, admitted.max(4), "raced {raced}");
    });
}

/// Two `set_limit` calls race (to 2 and to 6, from 4, over two stripes). Whichever lands last,
/// the next window admits exactly the limit then in force: the shares are one call's split,
/// never a mix of both (1 + 3 or 3 + 1 sums to neither 2 nor 6).
#[test]
fn racing_set_limits_leave_one_split() {
    model(None, || {
        let clock = ManualClock::new();
        let limiter =
            Arc::new(Sharded::with_clock(4, Duration::from_secs(1), 2, clock.clone()).unwrap());
        // Both calls run on model threads of their own: with the set to 6 run on the thread that
        // built the limiter, loom explored 7 executions of this race.
        let setters: Vec<_> = [2, 6]
            .into_iter()
            .map(|limit| {
                let limiter = limiter.clone();
                thread::spawn(move || limiter.set_limit(limit).unwrap())
            })
            .collect();
        for setter in setters {
            setter.join().unwrap();
        }
        clock.advance(Duration::from_secs(1));
        assert_eq!(drain(&limiter), limiter.limit());
    });
}
