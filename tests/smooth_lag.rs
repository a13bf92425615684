//! The smooth limiters and a clock read that lags the last booking's (another core's TSC): the
//! request is decided at the booking's time, never refused for the lag (as the packed-word
//! limiters, through the same time floor).

use std::time::Duration;

use floodgate::{Limiter, ManualClock, SmoothBursty, SmoothWarmingUp};

const SEC: u64 = 1_000_000_000;

#[test]
fn bursty_is_decided_at_the_bookings_time_for_a_lagging_reader() {
    // 5 per second, idle for 5 s: one second (5 permits) stored, all taken at 5 s. At 5 s the
    // limiter is free (the next request is granted on credit, Guava's pre-consumption); a core
    // whose clock reads 3 µs behind would, at its own time, still be before the free time and
    // be refused for the lag alone.
    let clock = ManualClock::new();
    let limiter = SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap();
    clock.set(5 * SEC);
    assert!(limiter.try_acquire(5).unwrap().is_allowed());
    clock.set(5 * SEC - 3_000);
    let lagged = limiter.try_acquire(1).unwrap();
    assert!(lagged.is_allowed(), "{lagged:?}");
    clock.set(5 * SEC);
    assert!(
        !limiter.try_acquire(1).unwrap().is_allowed(),
        "that one was on credit"
    );
}

#[test]
fn warming_up_try_acquire_for_is_decided_at_the_bookings_time() {
    let clock = ManualClock::new();
    let limiter =
        SmoothWarmingUp::create_with_clock(5.0, Duration::from_secs(1), clock.clone()).unwrap();
    clock.set(5 * SEC);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    // Free again after `wait`; a try whose timeout is exactly `wait` is granted at 5 s.
    let wait = limiter.try_acquire(1).unwrap().retry_after();
    assert!(wait > Duration::ZERO);
    assert!(clock.sleeps().is_empty());
    clock.set(5 * SEC - 3_000); // 3 µs behind the booking: still granted, sleeping `wait`
    assert!(limiter.try_acquire_for(1, wait).unwrap().is_allowed());
    assert_eq!(clock.sleeps(), vec![wait]);
}
