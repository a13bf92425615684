//! Bad-input sweep: absurd settings, times and requests on the local limiters, each answered
//! within the documented bound, with an honest wait, or with an error — never an over-admission,
//! a panic or a hang. Every limiter runs on a `ManualClock` (nothing really sleeps); a blocking
//! call runs under a generous hang guard that fails only if it never returns.

use std::sync::mpsc;
use std::time::Duration;

use floodgate::{AcquireError, Limiter, ManualClock, SlidingLogLimiter};

/// Runs `f` on its own thread; fails if it has not returned within 60 s (a hang).
fn within_hang_guard<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the call never returned")
}

/// At the last nanosecond of the clock's timeline a stamp's window end (`stamp + window`) does
/// not fit in `u64`: it never expires, rather than expiring at once (the log admitted every
/// request at `u64::MAX`, whatever its limit). A wait that would end past the timeline is
/// "never", so the blocking calls end with `PastEndOfTime` instead of spinning on a zero wait.
#[test]
fn a_sliding_log_at_the_end_of_time_keeps_its_limit() {
    within_hang_guard(|| {
        for start in [u64::MAX, u64::MAX - 1] {
            let clock = ManualClock::starting_at(start);
            let log = SlidingLogLimiter::with_clock(3, Duration::from_secs(1), clock.clone())
                .unwrap();
            let admitted = (0..20)
                .filter(|_| log.try_acquire(1).unwrap().is_allowed())
                .count();
            assert_eq!(admitted, 3, "start {start}");
            assert!(!log.admit(1).unwrap());
            clock.set(u64::MAX);
            let denied = log.try_acquire(1).unwrap();
            assert!(!denied.is_allowed());
            assert!(denied.retry_after() > Duration::from_nanos(1), "{denied:?}");
            let err = log.acquire(1).unwrap_err();
            assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
            let err = log.try_acquire_for(1, Duration::MAX).unwrap_err();
            assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
        }
    });
}
