//! A `set_rate` that leaves rate ∞ on a leaping clock read must not freeze a smooth limiter for
//! the leap (found by a review, issue 17, session 28: the word it wrote, stamped with the leapt
//! time, came with no floor raised, so no reader judged it a leap).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::{Clock, Limiter, SmoothBursty, SmoothWarmingUp};

/// A manual clock whose next read can be made to leap (a lead added to that read only).
#[derive(Clone, Default)]
struct LeapClock(Arc<Inner>);

#[derive(Default)]
struct Inner {
    now: AtomicU64,
    lead: AtomicU64,
}

impl LeapClock {
    fn set(&self, nanos: u64) {
        self.0.now.store(nanos, Ordering::SeqCst);
    }
    fn leap_next_read(&self, lead: u64) {
        self.0.lead.store(lead, Ordering::SeqCst);
    }
}

impl Clock for LeapClock {
    fn now_nanos(&self) -> u64 {
        self.0.now.load(Ordering::SeqCst) + self.0.lead.swap(0, Ordering::SeqCst)
    }
    fn sleep(&self, duration: Duration) {
        self.0.now.fetch_add(
            u64::try_from(duration.as_nanos()).unwrap(),
            Ordering::SeqCst,
        );
    }
}

const SECOND: u64 = 1_000_000_000;

/// A `set_rate` that leaves rate ∞ on a leaping read writes a full burst at the leapt time;
/// with the floor raised first, the next present caller sees a leaped floor, the engine
/// repairs the word, and the burst is there.
#[test]
fn bursty_leaving_infinity_on_a_leaping_read_does_not_freeze() {
    let clock = LeapClock::default();
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

/// The same for `SmoothWarmingUp`, which leaves rate ∞ fully warm (nothing stored) at the
/// setter's read: the next present caller is admitted, and the one after it waits one interval
/// (100 ms at 10/s), not the leap.
#[test]
fn warming_leaving_infinity_on_a_leaping_read_does_not_freeze() {
    let clock = LeapClock::default();
    clock.set(SECOND);
    let limiter =
        SmoothWarmingUp::create_with_clock(f64::INFINITY, Duration::from_secs(1), clock.clone())
            .unwrap();
    clock.set(2 * SECOND);
    clock.leap_next_read(60 * SECOND);
    limiter.set_rate(10.0).unwrap();
    let first = limiter.try_acquire(1).unwrap();
    let second = limiter.try_acquire(1).unwrap();
    assert!(
        first.is_allowed() && second.retry_after() <= Duration::from_millis(100),
        "frozen by a leaping set_rate: {first:?}, then {second:?}"
    );
}
