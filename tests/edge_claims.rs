//! Claims of the algorithms' docs at their edges (the end of a bucket's time, a sleep that ends
//! late, a reconfigured `Sharded`, a check that can never be granted), each pinned by the test
//! that failed against the docs or the code before; every test on a `ManualClock` or a clock of
//! its own (no sleeps).

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

/// A bucket's debt is kept in permits across a change of capacity (the tokens are kept, capped
/// at the new capacity), "rounded toward more debt". Near the end of a bucket's timeline
/// (2^62 ns) a raise that pushed the debt past it was cut to the end, so the debt beyond was
/// forgotten: raising the capacity of an empty bucket, then lowering it back, at one instant,
/// freed permits that were never available.
#[test]
fn a_raise_and_a_lowering_of_capacity_near_the_end_of_a_buckets_time_free_nothing() {
    use floodgate::{AtomicLimiter, Gcra, Rate};
    const END: u64 = (1 << 62) - 1;
    let clock = ManualClock::starting_at(END - 5_000_000_000);
    let bucket =
        AtomicLimiter::with_clock(Gcra::new(Rate::per_second(1), 1).unwrap(), clock.clone());
    assert!(bucket.try_acquire(1).unwrap().is_allowed());
    assert!(!bucket.try_acquire(1).unwrap().is_allowed());
    // Empty: the raise keeps its 0 tokens (10 permits of debt, 10 s: past the end).
    bucket.set_capacity(10).unwrap();
    assert!(!bucket.try_acquire(1).unwrap().is_allowed());
    // Still 0 tokens, capped at 5.
    bucket.set_capacity(5).unwrap();
    let after = bucket.try_acquire(1).unwrap();
    assert!(!after.is_allowed(), "{after:?}");
    assert_eq!(bucket.available(), 0);
}

/// A clock whose every sleep ends `LATE` after the time asked (a loaded machine's), moving only
/// when slept on: no real sleep.
#[derive(Clone, Default)]
struct LateClock {
    now: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

const LATE: Duration = Duration::from_millis(3);

impl Clock for LateClock {
    fn now_nanos(&self) -> u64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn sleep(&self, duration: Duration) {
        let nanos = u64::try_from((duration + LATE).as_nanos()).unwrap();
        self.now
            .fetch_add(nanos, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `Limiter::acquire` returns the time it waited on the limiter's clock, "a sleep that ends
/// late counts in full", for the packed-word limiters; the smooth limiters answer as Guava's
/// `acquire` does, with the sleep they asked for, as their docs and `Limiter::acquire`'s say.
/// (Counting the time across a smooth limiter's sleep was tried and undone: on a clock whose
/// sleeps move a shared time, as the loom models', it counted other callers' sleeps too, and
/// `time_smooth_leap`'s models failed.)
#[test]
fn acquire_counts_a_sleep_that_ends_late_in_full_except_guavas() {
    use floodgate::{AtomicLimiter, Gcra, Rate, SmoothBursty, SmoothWarmingUp};
    let clocks: [LateClock; 3] = Default::default();
    let gcra = AtomicLimiter::with_clock(
        Gcra::new(Rate::per_second(10), 1).unwrap(),
        clocks[0].clone(),
    );
    let bursty = SmoothBursty::create_with_clock(10.0, clocks[1].clone()).unwrap();
    let warming =
        SmoothWarmingUp::create_with_clock(10.0, Duration::ZERO, clocks[2].clone()).unwrap();
    let limiters: [(&str, &dyn Limiter, bool); 3] = [
        ("gcra", &gcra, true),
        ("bursty", &bursty, false),
        ("warming", &warming, false),
    ];
    for ((name, limiter, in_full), clock) in limiters.into_iter().zip(&clocks) {
        assert_eq!(limiter.acquire(1).unwrap(), Duration::ZERO, "{name}");
        let before = clock.now_nanos();
        let waited = limiter.acquire(1).unwrap();
        let passed = Duration::from_nanos(clock.now_nanos() - before);
        assert!(passed > LATE, "{name}: slept {passed:?}");
        let asked = passed - LATE; // one sleep, ended LATE after the time it asked for
        assert_eq!(waited, if in_full { passed } else { asked }, "{name}");
    }
}

/// `Sharded::set_limit` lowering the limit charges a stripe's excess over its new share to the
/// other stripes for the rest of the window, even when the window as a whole admitted no more
/// than the new limit (the excess is per stripe). A raise later in the same window keeps that
/// charge: one-permit requests are then denied before the window's `limit` permits are taken.
/// The docs said one-permit requests are never denied early except for the all-full hint after
/// a raise and charges "against the excess the window had already admitted" (asserting 7 here
/// failed: 6).
#[test]
fn a_sharded_charge_made_by_a_lowering_outlives_a_raise_in_the_same_window() {
    use floodgate::{AtomicLimiter, FixedWindow, Sharded};
    let clock = ManualClock::new();
    let window = Duration::from_secs(1);
    let sharded = Sharded::with_clock(12, window, 2, clock.clone()).unwrap();
    let fixed = AtomicLimiter::with_clock(FixedWindow::aligned(12, window).unwrap(), clock.clone());
    // Shares 6 / 6: stripe 0 takes 4, stripe 1 takes 5 (9 in the window).
    for home in [0, 0, 0, 0, 1, 1, 1, 1, 1] {
        assert!(sharded.try_acquire_on(home, 1).unwrap().is_allowed());
        assert!(fixed.try_acquire(1).unwrap().is_allowed());
    }
    // Shares 5 / 4: the window holds 9, the new limit, but stripe 1 holds one more than its
    // share: that one is charged to stripe 0.
    sharded.set_limit(9).unwrap();
    fixed.set_limit(9).unwrap();
    assert!(!sharded.try_acquire_on(0, 1).unwrap().is_allowed());
    assert!(!fixed.try_acquire(1).unwrap().is_allowed());
    // Shares 8 / 8: 7 more permits in this window for the fixed window, 6 for the sharded one.
    sharded.set_limit(16).unwrap();
    fixed.set_limit(16).unwrap();
    let fixed_admitted = (0..16)
        .filter(|_| fixed.try_acquire(1).unwrap().is_allowed())
        .count();
    let sharded_admitted = (0..16)
        .filter(|i| sharded.try_acquire_on(i % 2, 1).unwrap().is_allowed())
        .count();
    assert_eq!(fixed_admitted, 7);
    // The charge (1) stays until the window ends, as the docs now say.
    assert_eq!(sharded_admitted, 6);
    clock.advance(window);
    let next_window = (0..17)
        .filter(|i| sharded.try_acquire_on(i % 2, 1).unwrap().is_allowed())
        .count();
    assert_eq!(next_window, 16);
}
