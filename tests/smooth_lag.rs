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

/// The floor's grain (16 µs for the smooth limiters): a booking less than a grain after the
/// floor leaves it where it was, so a lagging reader may be decided up to 15 µs before the last
/// booking's time, never more; a booking a whole grain past it raises it to its time. Seen in a
/// refusal's `retry_after`: counted from the time the reader was decided at.
fn bursty_lagging_retry(step_micros: u64) -> Duration {
    // 5 per second (200 ms a permit), idle 5 s: 5 stored, all taken at 5 s (the floor goes to
    // 5 s); the next permit is taken at 5 s + `step` (what accrued since, then credit), so the
    // limiter is free again at 5.2 s. A reader 1 ms behind that booking is refused.
    let clock = ManualClock::new();
    let limiter = SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap();
    clock.set(5 * SEC);
    assert!(limiter.try_acquire(5).unwrap().is_allowed());
    let writer = 5 * SEC + step_micros * 1_000;
    clock.set(writer);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    clock.set(writer - 1_000_000);
    let lagged = limiter.try_acquire(1).unwrap();
    assert!(!lagged.is_allowed(), "{lagged:?}");
    lagged.retry_after()
}

#[test]
fn bursty_lagging_reader_is_decided_at_most_one_grain_before_the_booking() {
    // Decided at the booking's time, a refusal waits until 5.2 s.
    let at_writer = |step| Duration::from_millis(200) - Duration::from_micros(step);
    for step in [1, 8, 15] {
        let (retry, at_writer) = (bursty_lagging_retry(step), at_writer(step));
        assert!(
            retry >= at_writer && retry - at_writer <= Duration::from_micros(16),
            "booking {step} µs after the floor: a reader 1 ms behind it must wait {retry:?} \
             ({at_writer:?} from the booking, plus less than one 16 µs grain)"
        );
    }
    for step in [16, 17, 1_000] {
        assert_eq!(
            bursty_lagging_retry(step),
            at_writer(step),
            "a booking {step} µs (a grain or more) after the floor raises it to its time"
        );
    }
}

/// [`bursty_lagging_reader_is_decided_at_most_one_grain_before_the_booking`] for
/// `SmoothWarmingUp` (its own floor raise, `decide_at` and the short path): the booking at
/// 5 s + `step` is a `try_acquire_for` that waits; a refusal at the booking's time and one
/// 1 ms behind it (neither writes) give the retry at the writer's time and the lagging one.
fn warming_lagging_retries(step_micros: u64) -> (Duration, Duration) {
    let clock = ManualClock::new();
    let limiter =
        SmoothWarmingUp::create_with_clock(5.0, Duration::from_secs(1), clock.clone()).unwrap();
    clock.set(5 * SEC);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let writer = 5 * SEC + step_micros * 1_000;
    clock.set(writer);
    assert!(
        limiter
            .try_acquire_for(1, Duration::from_secs(10))
            .unwrap()
            .is_allowed()
    );
    clock.set(writer); // ManualClock's sleep moved it on by the wait
    let at_writer = limiter.try_acquire(1).unwrap();
    assert!(!at_writer.is_allowed(), "{at_writer:?}");
    clock.set(writer - 1_000_000);
    let lagged = limiter.try_acquire(1).unwrap();
    assert!(!lagged.is_allowed(), "{lagged:?}");
    (at_writer.retry_after(), lagged.retry_after())
}

#[test]
fn warming_up_lagging_reader_is_decided_at_most_one_grain_before_the_booking() {
    for step in [1, 8, 15] {
        let (at_writer, lagged) = warming_lagging_retries(step);
        assert!(
            lagged >= at_writer && lagged - at_writer <= Duration::from_micros(16),
            "booking {step} µs after the floor: a reader 1 ms behind it must wait {lagged:?} \
             ({at_writer:?} from the booking, plus less than one 16 µs grain)"
        );
    }
    for step in [16, 17, 1_000] {
        let (at_writer, lagged) = warming_lagging_retries(step);
        assert_eq!(
            lagged, at_writer,
            "a booking {step} µs (a grain or more) after the floor raises it to its time"
        );
    }
}
