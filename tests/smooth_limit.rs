//! What `Limiter::limit` reports for the smooth limiters, and `set_limit(limit())` round trips:
//! the rate rounded to whole permits per second, never 0 for a limiter that admits (a rate below
//! 0.5/s reported 0 while admitting, and 0 was what the RateLimit fields published), saturating at
//! `u64::MAX`; and writing the reported limit back keeps the rate exactly.

use std::time::Duration;

use floodgate::{AcquireError, ConfigError, Limiter, ManualClock, SmoothBursty, SmoothWarmingUp};

/// Rates across the range: far below one a second (one permit in 116 days), around the rounding edges, whole, large,
/// and near the largest `f64`.
const RATES: [f64; 14] = [
    1e-7,
    1e-6,
    0.001,
    0.3,
    0.499,
    0.5,
    1.0,
    1.49,
    2.4,
    7.0,
    1e6,
    3e9,
    1e20,
    f64::MAX,
];

fn bursty(rate: f64) -> SmoothBursty<ManualClock> {
    SmoothBursty::create_with_clock(rate, ManualClock::new()).unwrap()
}

fn warming(rate: f64) -> SmoothWarmingUp<ManualClock> {
    SmoothWarmingUp::create_with_clock(rate, Duration::from_secs(2), ManualClock::new()).unwrap()
}

/// The limit `limit()` must report for a finite rate: the rate rounded half up, at least 1,
/// saturating.
fn expected(rate: f64) -> u64 {
    if rate >= 18_446_744_073_709_551_615.0 {
        u64::MAX
    } else {
        ((rate + 0.5).floor() as u64).max(1)
    }
}

#[test]
fn a_slow_limiter_that_admits_reports_a_limit_of_at_least_one() {
    for rate in [0.001, 0.3, 0.499] {
        let limiter = bursty(rate);
        let granted = limiter.try_acquire(1).unwrap();
        assert!(granted.is_allowed(), "{rate}/s admits");
        assert_eq!(limiter.limit(), 1, "bursty {rate}/s");
        assert_eq!(granted.limit(), 1, "bursty {rate}/s: the decision's limit");
        let denied = limiter.try_acquire(1).unwrap();
        assert!(!denied.is_allowed());
        assert_eq!(denied.limit(), 1, "bursty {rate}/s: a denial's limit");
        let limiter = warming(rate);
        let granted = limiter.try_acquire(1).unwrap();
        assert!(granted.is_allowed());
        assert_eq!(
            (limiter.limit(), granted.limit()),
            (1, 1),
            "warming {rate}/s"
        );
    }
}

#[test]
fn the_reported_limit_is_the_rate_rounded_at_least_one_and_saturating() {
    for rate in RATES {
        assert_eq!(bursty(rate).limit(), expected(rate), "bursty {rate}");
        assert_eq!(bursty(rate).try_acquire(1).unwrap().limit(), expected(rate));
    }
    // Warming refuses rates whose warm-up would hold more than f64::MAX permits.
    for rate in RATES.into_iter().filter(|&r| r < 1e20) {
        assert_eq!(warming(rate).limit(), expected(rate), "warming {rate}");
    }
    // A subnormal rate: a stable interval of +∞, Guava's "one permit, then never".
    let subnormal = bursty(f64::from_bits(1));
    assert!(subnormal.try_acquire(1).unwrap().is_allowed());
    assert_eq!(subnormal.limit(), 1);
    assert_eq!(bursty(f64::INFINITY).limit(), u64::MAX);
    assert_eq!(warming(f64::INFINITY).limit(), u64::MAX);
}

/// `set_limit(limit())` keeps the rate exactly, wherever the limit fits a `u32` (a larger one
/// cannot be written back; `u32::MAX` is then a lower rate, set as asked).
#[test]
fn writing_the_reported_limit_back_keeps_the_rate() {
    for rate in RATES {
        let limiter = bursty(rate);
        let before = limiter.rate();
        if let Ok(limit) = u32::try_from(limiter.limit()) {
            limiter.set_limit(limit).unwrap();
            assert_eq!(limiter.rate(), before, "bursty {rate}");
            assert_eq!(limiter.limit(), u64::from(limit));
        }
        if rate < 1e20 {
            let limiter = warming(rate);
            let before = limiter.rate();
            if let Ok(limit) = u32::try_from(limiter.limit()) {
                limiter.set_limit(limit).unwrap();
                assert_eq!(limiter.rate(), before, "warming {rate}");
            }
        }
    }
    // Another limit sets the rate to exactly that many permits per second.
    let limiter = bursty(2.4);
    limiter.set_limit(3).unwrap();
    assert_eq!((limiter.rate(), limiter.limit()), (3.0, 3));
    let limiter = bursty(f64::INFINITY);
    limiter.set_limit(u32::MAX).unwrap();
    assert_eq!(limiter.rate(), f64::from(u32::MAX));
    assert_eq!(limiter.set_limit(0).unwrap_err(), ConfigError::ZeroLimit);
    assert_eq!(
        limiter.rate(),
        f64::from(u32::MAX),
        "a refused limit changes nothing"
    );
}

/// One request may book at most a year (`AcquireError::BookingTooLong`'s `max`): 31,536,000 s.
const YEAR_MICROS: f64 = 31_536_000_000_000.0;

/// A rate at which even one permit books more than a year was accepted, and every request was
/// then refused with `BookingTooLong`. Now it is a `ConfigError` at construction and at
/// `set_rate` (the old rate stays), and the slowest rate accepted admits one permit: new, after
/// its debt is paid, and (warming) cold after idling past the warm-up.
#[test]
fn a_rate_whose_one_permit_books_more_than_a_year_is_a_config_error() {
    use floodgate::compat::guava::GuavaRateLimiter;
    // Bursty: one permit costs its stable interval, truncated to whole µs (Guava's `(long)`).
    let too_slow = 1e6 / (YEAR_MICROS + 1.5);
    for rate in [too_slow, 1e-9, 1e-300] {
        let refused = SmoothBursty::create_with_clock(rate, ManualClock::new()).unwrap_err();
        assert!(
            matches!(refused, ConfigError::InvalidNumber { what: "permits_per_second", value, .. } if value == rate),
            "{rate}: {refused:?}"
        );
        assert!(refused.to_string().contains("a year"), "{refused}");
        assert!(SmoothBursty::with_max_burst(rate, 0.0, ManualClock::new()).is_err());
        let limiter = bursty(1.0);
        assert!(limiter.set_rate(rate).is_err(), "{rate}");
        assert_eq!(limiter.rate(), 1.0, "the old rate stays");
        for cold_factor in [1.0, 3.0] {
            let warm = SmoothWarmingUp::with_cold_factor(
                rate,
                Duration::from_secs(2),
                cold_factor,
                ManualClock::new(),
            );
            assert!(warm.is_err(), "warming {rate}");
        }
        let limiter = warming(1.0);
        assert!(limiter.set_rate(rate).is_err(), "warming {rate}");
        assert_eq!(limiter.rate(), 1.0);
    }
    // The slowest bursty rate: its interval truncates to a year exactly.
    let slowest = 1e6 / YEAR_MICROS;
    let clock = ManualClock::new();
    let limiter = SmoothBursty::with_max_burst(slowest, 0.0, clock.clone()).unwrap();
    assert_eq!(limiter.acquire_permits(1), Ok(0.0));
    // The first permit booked a year, the second another: both paid, one more is admitted.
    let booked = limiter.reserve(1).unwrap();
    assert!(
        booked >= Duration::from_secs(365 * 86_400 - 1),
        "{booked:?}"
    );
    clock.advance(booked * 2);
    assert!(
        limiter.try_acquire(1).unwrap().is_allowed(),
        "paid: one more"
    );
    assert!(bursty(1.0).set_rate(slowest).is_ok());
    // Warming: the permits stored above the threshold cost up to `cold_factor` intervals, so
    // the slowest rate depends on the warm-up and cold factor. Whatever is accepted admits one
    // permit new (nothing stored) and cold (after idling the warm-up), and books one more.
    let warmups = [0, 2, 86_400 * 365, 86_400 * 365 * 100];
    let mut refused_above_bursty = 0;
    for warmup in warmups.map(Duration::from_secs) {
        for cold_factor in [1.0, 3.0, 10.0] {
            for step in 0..=40 {
                let rate = slowest * 1.1f64.powi(step);
                let clock = ManualClock::new();
                let Ok(limiter) =
                    SmoothWarmingUp::with_cold_factor(rate, warmup, cold_factor, clock.clone())
                else {
                    assert!(bursty(1.0).set_rate(rate).is_ok(), "bursty accepts {rate}");
                    let other = SmoothWarmingUp::with_cold_factor(
                        1.0,
                        warmup,
                        cold_factor,
                        ManualClock::new(),
                    )
                    .unwrap();
                    assert!(other.set_rate(rate).is_err(), "set_rate refuses {rate} too");
                    refused_above_bursty += 1;
                    continue;
                };
                assert!(limiter.try_acquire(1).unwrap().is_allowed(), "new {rate}");
                assert!(limiter.reserve(1).is_ok(), "in debt {rate} {warmup:?}");
                let clock = ManualClock::new();
                let limiter =
                    SmoothWarmingUp::with_cold_factor(rate, warmup, cold_factor, clock.clone())
                        .unwrap();
                clock.advance(warmup + Duration::from_secs(1));
                assert!(limiter.try_acquire(1).unwrap().is_allowed(), "cold {rate}");
                assert!(
                    limiter.reserve(1).is_ok(),
                    "cold, in debt {rate} {warmup:?}"
                );
                let other =
                    SmoothWarmingUp::with_cold_factor(1.0, warmup, cold_factor, ManualClock::new())
                        .unwrap();
                assert!(other.set_rate(rate).is_ok(), "set_rate accepts {rate} too");
            }
        }
    }
    assert!(
        refused_above_bursty > 0,
        "stored permits cost more than the interval"
    );
}

/// A smooth limiter of 1 permit a second on a manual clock: `"bursty"`, or warming up over 2 s.
fn one_per_second(flavour: &str) -> (Box<dyn Limiter>, ManualClock) {
    let clock = ManualClock::new();
    let limiter: Box<dyn Limiter> = match flavour {
        "bursty" => Box::new(SmoothBursty::create_with_clock(1.0, clock.clone()).unwrap()),
        _ => Box::new(
            SmoothWarmingUp::create_with_clock(1.0, Duration::from_secs(2), clock.clone()).unwrap(),
        ),
    };
    (limiter, clock)
}

/// A request whose booking is longer than a year is `BookingTooLong` on a free limiter; on a
/// busy one it was refused first (`Ok`, denied, with a `retry_after`) and a caller who waited
/// that out then got the error (issue 17). Now a refusal's request is judged as it would be
/// booked when its `retry_after` ends: too long then, it is the error at once. `u32::MAX` at
/// 1/s is too long in every state (fresh, busy, just paid, idle); for every count, a refusal's
/// `retry_after` waited out admits the same request.
#[test]
fn a_booking_too_long_is_the_error_whatever_the_state() {
    let too_long = |result: Result<floodgate::Decision, AcquireError>, what: &str| match result {
        Err(AcquireError::BookingTooLong { requested, .. }) => {
            assert_eq!(requested, u64::from(u32::MAX), "{what}")
        }
        other => panic!("{what}: {other:?}"),
    };
    for flavour in ["bursty", "warming"] {
        let (limiter, clock) = one_per_second(flavour);
        let all_forms = |state: &str| {
            too_long(limiter.try_acquire(u32::MAX), &format!("{flavour} {state}"));
            too_long(
                limiter.try_acquire_for(u32::MAX, Duration::ZERO),
                &format!("{flavour} {state}, try_acquire_for"),
            );
            match limiter.admit(u32::MAX) {
                Err(AcquireError::BookingTooLong { .. }) => {}
                other => panic!("{flavour} {state}, admit: {other:?}"),
            }
        };
        all_forms("fresh");
        assert!(limiter.try_acquire(1).unwrap().is_allowed());
        all_forms("busy");
        clock.advance(Duration::from_secs(5));
        all_forms("paid");
        clock.advance(Duration::from_secs(100));
        all_forms("idle");
    }
    // Around the year (31,536,000 permits at 1/s), and far beyond it: from a busy limiter, a
    // refusal's wait ends where the same request is admitted.
    for n in [
        2,
        1_000,
        31_535_999,
        31_536_000,
        31_536_001,
        31_536_002,
        40_000_000,
        u32::MAX,
    ] {
        for flavour in ["bursty", "warming"] {
            let (limiter, clock) = one_per_second(flavour);
            assert!(limiter.try_acquire(1).unwrap().is_allowed());
            match limiter.try_acquire(n) {
                Err(AcquireError::BookingTooLong { .. }) => {}
                Ok(refused) => {
                    assert!(!refused.is_allowed(), "{flavour} {n}: busy, yet admitted");
                    clock.advance(refused.retry_after());
                    let again = limiter.try_acquire(n);
                    assert!(
                        again.as_ref().is_ok_and(|d| d.is_allowed()),
                        "{flavour} {n}: refused for {:?}, then {again:?}",
                        refused.retry_after()
                    );
                }
                Err(other) => panic!("{flavour} {n}: {other:?}"),
            }
        }
    }
}
