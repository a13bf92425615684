//! Review of ccca31d (h-review2): deterministic reproductions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::{Clock, Limiter, SmoothBursty};

type Hook = Box<dyn FnOnce() + Send>;

/// A manual clock: a hook armed runs inside the next read (after its value is taken), and a
/// lead armed is added to the next read only (one leaping read).
#[derive(Clone, Default)]
struct HookClock(Arc<Inner>);

#[derive(Default)]
struct Inner {
    now: AtomicU64,
    lead: AtomicU64,
    hook: Mutex<Option<Hook>>,
}

impl HookClock {
    fn set(&self, nanos: u64) {
        self.0.now.store(nanos, Ordering::SeqCst);
    }
    fn arm(&self, hook: Hook) {
        *self.0.hook.lock().unwrap() = Some(hook);
    }
    fn leap_next_read(&self, lead: u64) {
        self.0.lead.store(lead, Ordering::SeqCst);
    }
}

impl Clock for HookClock {
    fn now_nanos(&self) -> u64 {
        let value = self.0.now.load(Ordering::SeqCst) + self.0.lead.swap(0, Ordering::SeqCst);
        let hook = self.0.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        value
    }
    fn sleep(&self, duration: Duration) {
        self.0.now.fetch_add(
            u64::try_from(duration.as_nanos()).unwrap(),
            Ordering::SeqCst,
        );
    }
}

const SECOND: u64 = 1_000_000_000;

/// A lost race on the short path keeps its read, where the engine of `decide_at`
/// (`update_floored_leap`) reads again: A's retry is refused with a `retry_after` that had
/// already passed (by 6 s) before A's call returned; the engine's retry reads 210 s and admits.
/// Linearizable (C's booking was outstanding at 200 s, inside A's call), but not "as the engine".
#[test]
#[ignore = "review finding (doubtful claim): fails at ccca31d and 7cbecac"]
fn a_lost_race_keeps_its_read_and_is_refused_by_a_booking_paid_since() {
    let clock = HookClock::default();
    clock.set(SECOND);
    let limiter = Arc::new(SmoothBursty::create_with_clock(0.01, clock.clone()).unwrap());
    // X books 100 s of debt at 1 s (beyond the horizon), then the rate becomes 5 s a permit.
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    limiter.set_rate(0.2).unwrap();
    clock.set(5 * SECOND);
    // A reads 5 s (stale: the clock then jumps to 200 s), loads X's word, is refused by a
    // booking beyond the horizon, reads again (200 s), decides again on a read at 200 s, during
    // which C takes a permit at 200 s (booking to 204 s) and real time reaches 210 s; A's
    // compare-exchange on X's word fails, and its retry keeps its read of 200 s.
    let c = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        move || {
            assert!(limiter.try_acquire(1).unwrap().is_allowed(), "C at 200 s");
            clock.set(210 * SECOND);
        }
    };
    let hook2 = {
        let clock = clock.clone();
        move || clock.arm(Box::new(c))
    };
    let hook1 = {
        let clock2 = clock.clone();
        move || {
            clock2.set(200 * SECOND);
            clock2.arm(Box::new(hook2));
        }
    };
    clock.arm(Box::new(hook1));
    let a = limiter.try_acquire(1).unwrap();
    assert_eq!(clock.now_nanos(), 210 * SECOND);
    assert!(
        a.is_allowed(),
        "A refused at 210 s by C's booking that ended at 204 s: {a:?}"
    );
}

/// A `set_rate` that leaves rate ∞ on a leaping read books the full burst at the leapt time,
/// with no floor raised: no reader judges it a leap (the floor is in range), so every present
/// caller is refused for the whole leap. (Not the short path's: `set_finite` / `leave_infinite`.)
#[test]
#[ignore = "review finding (defect, not ccca31d's): fails on the engine and the short path"]
fn leaving_infinity_on_a_leaping_read_freezes_the_limiter() {
    let clock = HookClock::default();
    clock.set(SECOND);
    let limiter = SmoothBursty::create_with_clock(f64::INFINITY, clock.clone()).unwrap();
    clock.set(2 * SECOND);
    clock.leap_next_read(60 * SECOND);
    limiter.set_rate(10.0).unwrap();
    let engine = limiter.try_acquire_for(1, Duration::ZERO).unwrap();
    let short = limiter.try_acquire(1).unwrap();
    assert!(
        engine.is_allowed() && short.is_allowed(),
        "frozen by a leaping set_rate: engine {engine:?}, short path {short:?}"
    );
}
