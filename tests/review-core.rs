//! Review of the algorithms' time-model and bad-input claims (review-core): one regression test
//! per defect found, each on a `ManualClock` (no sleeps).

use std::time::Duration;

use floodgate::{AcquireError, Clock, ConfigError, Decision, Limiter, ManualClock};

/// A limiter that cannot grant even one permit: its `try_acquire` always errs, as a user's
/// limiter (or a future configuration) may.
struct NeverOne {
    clock: ManualClock,
}

impl Limiter for NeverOne {
    fn try_acquire(&self, _n: u32) -> Result<Decision, AcquireError> {
        Err(AcquireError::ExceedsCapacity {
            requested: 1,
            capacity: 0,
        })
    }
    fn clock(&self) -> &dyn Clock {
        &self.clock
    }
    fn set_limit(&self, _limit: u32) -> Result<(), ConfigError> {
        Ok(())
    }
    fn limit(&self) -> u64 {
        0
    }
}

/// `Limiter::check` reports a `try_acquire(1)` that errs as a denial; its docs promised a
/// `retry_after` of `Duration::MAX`, which a `Decision` (whole nanoseconds in a `u64`) cannot
/// hold: it is `u64::MAX` ns, the "never" of every other denial.
#[test]
fn check_reports_a_request_that_can_never_be_granted_as_never() {
    let limiter = NeverOne {
        clock: ManualClock::new(),
    };
    let denied = limiter.check();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_nanos(u64::MAX));
    assert_eq!(denied.reset_after(), Duration::from_nanos(u64::MAX));
}
