//! `SmoothBursty`'s short path against the engine when a thread stalls between its clock read
//! and its word load (a deterministic stall: a clock whose read runs another caller first).
//!
//! The engine reads the clock again before it trusts a booking beyond the lag horizon
//! (`limiter::floored_loop`, `Step::after_leap`); a short path that decides such a refusal on
//! the read it took before the word (the booking landed after it) refuses a request that the
//! engine, with the same first read, admits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::{Clock, Limiter, SmoothBursty};

type Hook = Box<dyn FnOnce() + Send>;

/// A manual clock whose next read, once armed, runs `hook` after taking its value and before
/// returning it: whatever the hook does lands between the caller's read and its next step.
#[derive(Clone, Default)]
struct HookClock(Arc<Inner>);

#[derive(Default)]
struct Inner {
    now: AtomicU64,
    hook: Mutex<Option<Hook>>,
}

impl HookClock {
    fn set(&self, nanos: u64) {
        self.0.now.store(nanos, Ordering::SeqCst);
    }
    fn arm(&self, hook: Hook) {
        *self.0.hook.lock().unwrap() = Some(hook);
    }
}

impl Clock for HookClock {
    fn now_nanos(&self) -> u64 {
        let value = self.0.now.load(Ordering::SeqCst);
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

/// A reads the clock at 1 s and stalls; meanwhile B takes the one permit at 1 s (a booking of
/// 100 s at 0.01/s) and real time reaches 200 s, when B's debt is long paid. A then loads B's
/// word: the engine, given A's read, sees a booking beyond the horizon of it, reads again
/// (200 s) and admits; so does the pre-issue-17 short path (it read the clock after the word).
fn stalled_reader(call: impl Fn(&SmoothBursty<HookClock>) -> bool) {
    let clock = HookClock::default();
    clock.set(SECOND);
    let limiter = Arc::new(SmoothBursty::create_with_clock(0.01, clock.clone()).unwrap());
    let b = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        move || {
            assert!(
                limiter.try_acquire(1).unwrap().is_allowed(),
                "B takes the permit"
            );
            clock.set(200 * SECOND);
        }
    };
    clock.arm(Box::new(b));
    assert!(
        call(&limiter),
        "a read stalled past a long booking was refused on its stale read, where the engine \
         reads again and admits (its debt ended at 101 s; real time is 200 s)"
    );
}

#[test]
fn short_path_try_acquire_stalled_past_a_long_booking_is_decided_as_the_engine() {
    stalled_reader(|l| l.try_acquire(1).unwrap().is_allowed());
}

#[test]
fn short_path_admit_stalled_past_a_long_booking_is_decided_as_the_engine() {
    stalled_reader(|l| l.admit(1).unwrap());
}

/// The engine path (`try_acquire_for` with a zero timeout), for reference: it admits.
#[test]
fn engine_stalled_past_a_long_booking_admits() {
    stalled_reader(|l| l.try_acquire_for(1, Duration::ZERO).unwrap().is_allowed());
}

/// A stalled refusal stands on its first read only while a fresh read is within the floor's
/// grain (16 µs) of it: its `retry_after`, counted from the read it was decided on, is at most
/// one grain longer than one counted from the fresh read. B's booking (0.01/s: 100 s) is paid
/// at 101 s; A's first read is at 2 s, the clock then reads `stall` later.
fn stalled_refusal_retry(stall_micros: u64) -> Duration {
    let clock = HookClock::default();
    clock.set(SECOND);
    let limiter = SmoothBursty::create_with_clock(0.01, clock.clone()).unwrap();
    assert!(limiter.try_acquire(1).unwrap().is_allowed(), "B's booking");
    clock.set(2 * SECOND);
    let later = 2 * SECOND + stall_micros * 1_000;
    let c = clock.clone();
    clock.arm(Box::new(move || c.set(later)));
    let refused = limiter.try_acquire(1).unwrap();
    assert!(!refused.is_allowed(), "{refused:?}");
    refused.retry_after()
}

#[test]
fn a_stalled_refusal_is_at_most_one_grain_stale() {
    for stall in [0, 1, 15, 16, 17, 1_000, 5_000_000] {
        let retry = stalled_refusal_retry(stall);
        let fresh = Duration::from_secs(99) - Duration::from_micros(stall);
        assert!(
            retry >= fresh && retry - fresh <= Duration::from_micros(16),
            "stalled {stall} µs: retry_after {retry:?}, {fresh:?} from the fresh read"
        );
    }
}
