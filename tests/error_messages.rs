//! Every bad setting the API review (issue 15) found described wrongly is refused with an error
//! that states the real constraint and the value given (checked through `Display`, what a user
//! reads).

use std::time::Duration;

use floodgate::backend::FailurePolicy;
use floodgate::{
    ConfigError, FixedWindow, ManualClock, PenaltyBox, SlidingLog, SlidingWindow, SmoothWarmingUp,
};

fn message(error: ConfigError) -> String {
    error.to_string()
}

#[test]
fn a_cold_factor_below_one_says_it_must_be_at_least_one() {
    let error =
        SmoothWarmingUp::with_cold_factor(5.0, Duration::from_secs(1), 0.5, ManualClock::new())
            .unwrap_err();
    assert_eq!(
        error,
        ConfigError::InvalidNumber {
            what: "cold_factor",
            value: 0.5,
            expected: "finite and at least 1",
        }
    );
    let text = message(error);
    assert!(
        text.contains("at least 1") && text.contains("0.5"),
        "{text}"
    );
}

#[test]
fn a_fallback_share_above_one_says_the_range() {
    let error = FailurePolicy::local_fallback(1.5).unwrap_err();
    let text = message(error);
    assert!(text.contains("(0, 1]") && text.contains("1.5"), "{text}");
    assert!(FailurePolicy::local_fallback(1.0).is_ok());
}

#[test]
fn a_window_past_u64_nanoseconds_names_the_window_and_the_range() {
    for (what, error) in [
        (
            "fixed window",
            FixedWindow::new(1, Duration::MAX).unwrap_err(),
        ),
        (
            "window",
            SlidingWindow::new(1, Duration::MAX, 1).unwrap_err(),
        ),
        (
            "sliding log window",
            SlidingLog::new(1, Duration::MAX).unwrap_err(),
        ),
    ] {
        assert!(
            matches!(error, ConfigError::DurationOutOfRange { what: w, value: Duration::MAX, .. } if w == what),
            "{error:?}"
        );
        let text = message(error);
        assert!(
            text.starts_with(&format!("{what} must be within")),
            "{text}"
        );
    }
}

/// A penalty box's span or block past `u64` nanoseconds is refused as a window is, naming the
/// setting, the range and the value; it was clamped to 584 years without a word.
#[test]
fn a_penalty_span_or_block_past_u64_nanoseconds_names_the_setting_and_the_range() {
    let secs = Duration::from_secs;
    let longest = Duration::from_nanos(u64::MAX);
    let beyond = longest + Duration::from_nanos(1);
    for (what, value, error) in [
        (
            "penalty span",
            Duration::MAX,
            PenaltyBox::new(3, Duration::MAX, secs(60)).err(),
        ),
        (
            "penalty block",
            Duration::MAX,
            PenaltyBox::new(3, secs(10), Duration::MAX).err(),
        ),
        (
            "penalty span",
            beyond,
            PenaltyBox::new(3, beyond, secs(60)).err(),
        ),
        (
            "penalty block",
            beyond,
            PenaltyBox::new(3, secs(10), beyond).err(),
        ),
    ] {
        let error = error.unwrap_or_else(|| panic!("{what} {value:?} accepted"));
        assert_eq!(
            error,
            ConfigError::DurationOutOfRange {
                what,
                value,
                min: Duration::from_nanos(1),
                max: longest,
            }
        );
        let text = message(error);
        assert!(
            text.starts_with(&format!("{what} must be within"))
                && text.contains(&format!("{value:?}")),
            "{text}"
        );
    }
    // The longest accepted is kept exactly.
    let penalty = PenaltyBox::new(3, longest, longest).unwrap();
    assert_eq!((penalty.span(), penalty.block()), (longest, longest));
    assert_eq!(
        PenaltyBox::new(3, Duration::ZERO, secs(60)),
        Err(ConfigError::ZeroPeriod)
    );
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    use floodgate::{Gcra, Rate};

    /// A lazy backend: nothing listens on port 1, and nothing is asked of it.
    fn backend() -> RedisBackend {
        RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:1").lazy()).unwrap()
    }

    #[test]
    fn a_rate_finer_than_a_microsecond_names_the_microsecond() {
        // 2,000,000 per second is 500 ns a permit: fine locally, finer than Redis's clock.
        let gcra = Gcra::new(Rate::per_second(2_000_000), 10).unwrap();
        let error =
            RedisLimiter::new(&backend(), "api", gcra, FailurePolicy::FailOpen).unwrap_err();
        assert_eq!(
            error,
            ConfigError::RateTooHigh {
                finest: Duration::from_micros(1)
            }
        );
        assert!(message(error).contains("1µs"), "{error}");
    }

    #[test]
    fn a_window_longer_than_redis_keeps_names_the_range_not_the_milliseconds() {
        // 100 years: fine locally (under 584), past the 2^51 µs Redis scripts keep exact.
        let century = Duration::from_secs(100 * 365 * 86_400);
        let window = FixedWindow::new(1, century).unwrap();
        let error =
            RedisLimiter::new(&backend(), "api", window, FailurePolicy::FailOpen).unwrap_err();
        assert!(
            matches!(error, ConfigError::DurationOutOfRange { value, .. } if value == century),
            "{error:?}"
        );
        let text = message(error);
        assert!(text.contains("Redis fixed window must be within"), "{text}");
        assert!(!text.contains("milliseconds"), "{text}");
    }

    #[test]
    fn a_window_that_is_not_whole_milliseconds_says_so_with_the_value() {
        let window = SlidingWindow::new(10, Duration::from_millis(10), 4).unwrap(); // 2.5 ms cells
        let error =
            RedisLimiter::new(&backend(), "api", window, FailurePolicy::FailOpen).unwrap_err();
        assert_eq!(
            error,
            ConfigError::NotWhole {
                what: "Redis sliding window cell (window / cells)",
                value: Duration::from_micros(2_500),
                unit: Duration::from_millis(1),
            }
        );
        let text = message(error);
        assert!(
            text.contains("whole number of 1ms") && text.contains("2.5ms"),
            "{text}"
        );
    }
}

/// A sample window that needs no samples is refused naming `min_samples` (it was `ZeroLimit`,
/// read as "limit, capacity or rate amount must be at least 1": no such setting was given).
#[test]
fn a_sample_window_of_zero_min_samples_names_min_samples() {
    use floodgate::concurrency::adaptive::SampleWindow;
    let error = SampleWindow::new(Duration::from_secs(1), 0).unwrap_err();
    assert!(
        matches!(
            error,
            ConfigError::Invalid {
                what: "min_samples",
                ..
            }
        ),
        "{error:?}"
    );
    let text = message(error);
    assert!(
        text.contains("min_samples") && text.contains("at least one"),
        "{text}"
    );
    assert_eq!(
        SampleWindow::new(Duration::from_secs(1), 1)
            .unwrap()
            .min_samples(),
        1
    );
}
