//! The blocking waits of the `Limiter` trait (`acquire`, `try_acquire_for`) measured against the
//! limiter's clock, when a sleep ends later than asked (a loaded machine: `thread::sleep` never
//! ends early, and often late) and other callers race for the permits meanwhile. Everything runs
//! on a test clock whose `sleep` advances it by the duration plus a fixed lateness: nothing
//! really sleeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::{AtomicLimiter, Clock, Gcra, Limiter, Rate};

const MS: u64 = 1_000_000;

type Hook = Box<dyn FnOnce() + Send>;

/// A clock whose every sleep ends `late` after the time asked for. A one-shot hook runs at the
/// moment the asked-for time is reached, before the sleeper wakes: another caller that wins the
/// permits while the sleeper is still waking.
#[derive(Clone)]
struct LateClock {
    now: Arc<AtomicU64>,
    late: u64,
    at_wake: Arc<Mutex<Option<Hook>>>,
}

impl LateClock {
    fn new(late: u64) -> Self {
        LateClock {
            now: Arc::new(AtomicU64::new(0)),
            late,
            at_wake: Arc::new(Mutex::new(None)),
        }
    }

    fn before_next_wake(&self, hook: impl FnOnce() + Send + 'static) {
        *self.at_wake.lock().unwrap() = Some(Box::new(hook));
    }
}

impl Clock for LateClock {
    fn now_nanos(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep(&self, duration: Duration) {
        self.now.fetch_add(
            u64::try_from(duration.as_nanos()).unwrap(),
            Ordering::SeqCst,
        );
        let hook = self.at_wake.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.now.fetch_add(self.late, Ordering::SeqCst);
    }
}

/// One permit per 100 ms, burst 1, on a clock whose sleeps end 60 ms late; empty at 0.
fn empty_gcra(clock: &LateClock) -> Arc<AtomicLimiter<Gcra, LateClock>> {
    let gcra = Gcra::new(Rate::per_second(10), 1).unwrap();
    let limiter = Arc::new(AtomicLimiter::with_clock(gcra, clock.clone()));
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    limiter
}

/// `try_acquire_for(1, 150 ms)`: the first wait (100 ms) fits; another caller takes the permit at
/// 100 ms, and the sleeper wakes at 160 ms, past its timeout. The next permit is 40 ms away: it
/// must give up now (the timeout is spent), not sleep on and be granted at 260 ms.
#[test]
fn try_acquire_for_never_waits_past_its_timeout_when_sleeps_end_late() {
    let clock = LateClock::new(60 * MS);
    let limiter = empty_gcra(&clock);
    let rival = Arc::clone(&limiter);
    clock.before_next_wake(move || assert!(rival.try_acquire(1).unwrap().is_allowed()));
    let decision = limiter
        .try_acquire_for(1, Duration::from_millis(150))
        .unwrap();
    assert!(
        clock.now_nanos() <= 160 * MS,
        "returned at {} ms, {decision:?}: slept again after its 150 ms timeout had passed",
        clock.now_nanos() / MS
    );
    assert!(!decision.is_allowed(), "{decision:?}");
    assert_eq!(decision.retry_after(), Duration::from_millis(40));
    // The refusal consumed nothing: the permit at 200 ms is still there.
    clock.now.store(200 * MS, Ordering::SeqCst);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
}

/// `acquire` returns how long it waited: 160 ms passed on the limiter's clock (a 100 ms sleep
/// that ended 60 ms late), not the 100 ms it asked for.
#[test]
fn acquire_returns_the_time_that_passed_on_the_clock_when_a_sleep_ends_late() {
    let clock = LateClock::new(60 * MS);
    let limiter = empty_gcra(&clock);
    assert_eq!(limiter.acquire(1).unwrap(), Duration::from_millis(160));
    assert_eq!(clock.now_nanos(), 160 * MS);
}

/// With a rival winning the first permit, `acquire` waits twice: 100 ms (+60 late), then 40 ms
/// (+60 late), 260 ms in all on the clock.
#[test]
fn acquire_counts_every_late_wake_up_across_retries() {
    let clock = LateClock::new(60 * MS);
    let limiter = empty_gcra(&clock);
    let rival = Arc::clone(&limiter);
    clock.before_next_wake(move || assert!(rival.try_acquire(1).unwrap().is_allowed()));
    assert_eq!(limiter.acquire(1).unwrap(), Duration::from_millis(260));
}
