//! loom models of `backend::CircuitBreaker`: one probe at a time when a probe falls due (with
//! success closing, failure re-opening, and an abandoned probe handing over), no lost failure
//! on the closed path (calls out together count once), a success racing the trip never
//! re-closing an open breaker, and a failure of a call admitted before a trip never counting
//! across the probe that closes it again (the closed word's epoch).
#![cfg(floodgate_loom)]

use std::time::Duration;

use floodgate::backend::{BreakerConfig, BreakerState, CircuitBreaker};
use floodgate_loom_tests::{ModelClock, model};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Notify};
use loom::thread;

const MS: u64 = 1_000_000;

/// Opens after `failures`, for 1 ms (then 2 ms, 4 ms, …).
fn breaker(failures: u32, clock: &ModelClock) -> CircuitBreaker<ModelClock> {
    let config =
        BreakerConfig::new(failures, Duration::from_millis(1), Duration::from_millis(8)).unwrap();
    CircuitBreaker::with_clock(config, clock.clone())
}

/// What one model thread does with an admission: `Some(true)` if it was the probe.
#[derive(Clone, Copy)]
enum Report {
    Succeed,
    Fail,
    Abandon,
}

fn call(b: &CircuitBreaker<ModelClock>, out: &AtomicUsize, report: Report) -> bool {
    let Some(permit) = b.admit() else {
        return false;
    };
    let probe = permit.is_probe();
    if probe {
        // SeqCst: the checker's own counter.
        let now = out.fetch_add(1, Ordering::SeqCst) + 1;
        assert_eq!(now, 1, "two probes out at once");
        out.fetch_sub(1, Ordering::SeqCst);
    }
    match report {
        Report::Succeed => permit.succeeded(),
        Report::Fail => permit.failed(),
        Report::Abandon => drop(permit),
    }
    probe
}

/// The breaker is open and its probe is due: three callers race. Exactly one probes (the
/// others are short-circuited or, once it closed, pass as closed calls) and its success closes.
#[test]
fn a_due_breaker_lets_exactly_one_probe_through_and_closes_on_its_success() {
    model(None, || {
        let clock = ModelClock::starting_at(0);
        let b = Arc::new(breaker(1, &clock));
        b.admit().unwrap().failed();
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(MS);
        let out = Arc::new(AtomicUsize::new(0));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (b, out) = (b.clone(), out.clone());
                thread::spawn(move || call(&b, &out, Report::Succeed))
            })
            .collect();
        let mut probes = usize::from(call(&b, &out, Report::Succeed));
        probes += others
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum::<usize>();
        assert_eq!(probes, 1);
        assert_eq!(b.state(), BreakerState::Closed);
    });
}

/// A failing probe, an abandoned one and a caller race while the clock moves on: never two
/// probes out at once, and the breaker ends open or probing, never closed.
#[test]
fn failed_and_abandoned_probes_never_overlap_and_never_close() {
    model(None, || {
        let clock = ModelClock::starting_at(0);
        let b = Arc::new(breaker(1, &clock));
        b.admit().unwrap().failed();
        clock.advance(MS);
        let out = Arc::new(AtomicUsize::new(0));
        let spawn = |report| {
            let (b, out) = (b.clone(), out.clone());
            thread::spawn(move || call(&b, &out, report))
        };
        let failing = spawn(Report::Fail);
        let abandoning = spawn(Report::Abandon);
        // The driver: time passes a probe's back-off (but not `max_open_for`, after which a
        // probe still out is presumed lost) while the callers run.
        clock.advance(3 * MS);
        failing.join().unwrap();
        abandoning.join().unwrap();
        assert_ne!(b.state(), BreakerState::Closed);
    });
}

/// Closed path (threshold 2): a failure whose call was admitted after another failure was
/// counted is never lost (the two trip the breaker), calls out together count once (one more
/// failure, admitted after both, always trips it), and a success admitted before the trip,
/// reported after it, does not re-close it.
#[test]
fn concurrent_failures_trip_and_a_late_success_does_not_reclose() {
    model(None, || {
        let clock = ModelClock::starting_at(0);
        let b = Arc::new(breaker(2, &clock));
        let early = b.admit().unwrap();
        let first_counted = Arc::new(AtomicBool::new(false));
        let first = {
            let (b, counted) = (b.clone(), first_counted.clone());
            thread::spawn(move || {
                b.admit().unwrap().failed();
                // SeqCst: the model's own flag; the simplest ordering.
                counted.store(true, Ordering::SeqCst);
            })
        };
        // SeqCst: as the store.
        let after_first = first_counted.load(Ordering::SeqCst);
        b.admit().expect("one failure cannot trip").failed();
        first.join().unwrap();
        if after_first {
            assert_eq!(
                b.state(),
                BreakerState::Open,
                "a failure admitted after the first was counted was lost"
            );
        }
        if let Some(permit) = b.admit() {
            permit.failed();
        }
        assert_eq!(b.state(), BreakerState::Open);
        early.succeeded();
        assert_eq!(b.state(), BreakerState::Open);
    });
}

/// A success racing a failure on the closed path (threshold 3, one failure already counted):
/// whatever the order, the success resets the count (to 0, or to 1 if the racing failure came
/// after it), so one more failure still leaves the breaker closed.
#[test]
fn a_success_racing_a_failure_resets_the_run() {
    model(None, || {
        let clock = ModelClock::starting_at(0);
        let b = Arc::new(breaker(3, &clock));
        b.admit().unwrap().failed();
        let succeed = {
            let b = b.clone();
            thread::spawn(move || b.admit().unwrap().succeeded())
        };
        // The failure runs on a model thread of its own: run on the thread that built the
        // breaker, loom explored 11 executions of this race.
        let fail = {
            let b = b.clone();
            thread::spawn(move || b.admit().unwrap().failed())
        };
        succeed.join().unwrap();
        fail.join().unwrap();
        b.admit().unwrap().failed();
        assert_eq!(b.state(), BreakerState::Closed);
    });
}

/// A call admitted while closed, out across a trip (another failure tripped the breaker,
/// threshold 1), reports its failure racing the probe that closes the breaker again: its
/// failure overlapped the one that tripped, so it never counts, whenever it lands (while open,
/// while the probe is out, or after the close). The epoch is what tells its word from the
/// closed word after the probe: with neither the trip nor the close moving the epoch, a report
/// landing after the close re-opened the breaker.
#[test]
fn a_failure_from_before_a_trip_never_counts_across_the_probe_that_closes() {
    model(None, || {
        let clock = ModelClock::starting_at(0);
        let b = Arc::new(breaker(1, &clock));
        let (admitted, tripped) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let late = {
            let (b, admitted, tripped) = (b.clone(), admitted.clone(), tripped.clone());
            thread::spawn(move || {
                let stale = b.admit().expect("closed");
                admitted.notify();
                tripped.wait();
                stale.failed();
            })
        };
        admitted.wait();
        b.admit().expect("closed").failed();
        assert_eq!(b.state(), BreakerState::Open);
        tripped.notify();
        clock.advance(MS);
        b.admit().expect("the probe is due").succeeded();
        late.join().unwrap();
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "a failure admitted before the trip re-opened the breaker"
        );
    });
}
