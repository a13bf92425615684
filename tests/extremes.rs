//! Extreme settings and times reachable through the public API: answers, never panics (these
//! overflowed in debug builds before).

use std::time::Duration;

use floodgate::{
    AtomicLimiter, ConfigError, FixedWindow, Limiter, ManualClock, Rate, Sharded,
    SlidingWindowLimiter, TokenBucket,
};

#[test]
fn the_longest_period_and_the_largest_amount_round_without_overflow() {
    let rate = Rate::new(u32::MAX, Duration::from_nanos(u64::MAX));
    // u64::MAX / u32::MAX = 4_294_967_297 exactly.
    assert_eq!(rate.nanos_per_permit().unwrap(), 4_294_967_297);
    assert!(TokenBucket::new(rate, 1).is_ok());
    // Rounding that would change the rate by more than 0.1% is refused, naming the result:
    // 1.67 ns → 2 (−17%), 1.25 ns → 1 (+25%), 600,000,000/s → 2 ns (−17%).
    for (rate, rounded) in [
        (Rate::new(3, Duration::from_nanos(5)), 2),
        (Rate::new(4, Duration::from_nanos(5)), 1),
        (Rate::new(3, Duration::from_nanos(4)), 1),
        (Rate::per_second(600_000_000), 2),
    ] {
        assert_eq!(
            rate.nanos_per_permit(),
            Err(ConfigError::RateRounding {
                amount: rate.amount(),
                period: rate.period(),
                nanos_per_permit: rounded,
            })
        );
        assert!(TokenBucket::new(rate, 1).is_err());
    }
    let message = Rate::new(3, Duration::from_nanos(4))
        .nanos_per_permit()
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("3 per 4ns") && message.contains("0.1%"),
        "{message}"
    );
    // Within 0.1%: kept (1 s / 3 = 333,333,333.3 ns, −0.0000001%).
    assert_eq!(Rate::per_second(3).nanos_per_permit(), Ok(333_333_333));
    assert_eq!(Rate::per_second(1_000_000_000).nanos_per_permit(), Ok(1));
}

#[test]
fn a_window_of_u64_max_nanoseconds_opens_without_overflow() {
    let clock = ManualClock::starting_at(12_345);
    let limiter = AtomicLimiter::with_clock(
        FixedWindow::new(1, Duration::from_nanos(u64::MAX)).unwrap(),
        clock.clone(),
    );
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let denied = limiter.try_acquire(1).unwrap();
    assert!(!denied.is_allowed());
    assert!(denied.retry_after() > Duration::from_secs(100 * 365 * 86_400));
}

#[test]
fn one_nanosecond_cells_at_the_end_of_time() {
    let clock = ManualClock::starting_at(u64::MAX);
    let sliding =
        SlidingWindowLimiter::with_clock(2, Duration::from_nanos(4), 4, clock.clone()).unwrap();
    assert!(sliding.try_acquire(1).unwrap().is_allowed());
    assert!(sliding.try_acquire(1).unwrap().is_allowed());
    assert!(!sliding.try_acquire(1).unwrap().is_allowed());
    let sharded = Sharded::with_clock(2, Duration::from_nanos(1), 2, clock).unwrap();
    assert!(sharded.try_acquire(1).unwrap().is_allowed());
    assert!(sharded.try_acquire(1).unwrap().is_allowed());
    assert!(!sharded.try_acquire(1).unwrap().is_allowed());
}
