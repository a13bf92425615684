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
            let log =
                SlidingLogLimiter::with_clock(3, Duration::from_secs(1), clock.clone()).unwrap();
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

/// A bucket's time word keeps 62 bits of nanoseconds (the README said it saturated at
/// `u64::MAX`): it books up to 2^62 − 1 ns, and past that every request is refused as "never",
/// with the blocking calls ending in `PastEndOfTime` rather than sleeping.
#[test]
fn a_bucket_books_up_to_two_to_the_62_nanoseconds_then_refuses_as_never() {
    use floodgate::{AtomicLimiter, Gcra, Rate};
    const END: u64 = (1 << 62) - 1;
    within_hang_guard(|| {
        let clock = ManualClock::starting_at(END - 1_000_000_000);
        let bucket =
            AtomicLimiter::with_clock(Gcra::new(Rate::per_second(2), 2).unwrap(), clock.clone());
        assert!(bucket.try_acquire(2).unwrap().is_allowed()); // books up to END − 0 s
        let never = bucket.try_acquire(1).unwrap();
        assert!(!never.is_allowed());
        assert_eq!(never.retry_after(), Duration::from_nanos(u64::MAX));
        let err = bucket.acquire(1).unwrap_err();
        assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
        clock.set(END + 1);
        let fresh =
            AtomicLimiter::with_clock(Gcra::new(Rate::per_second(2), 2).unwrap(), clock.clone());
        assert!(!fresh.try_acquire(1).unwrap().is_allowed());
        let err = fresh.try_acquire_for(1, Duration::MAX).unwrap_err();
        assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
    });
}

/// `Keyed::peek` on a key the map does not hold, in a shard full of live keys that refuses new
/// keys: the next `try_acquire` is refused, so `peek` is too, with the same wait (it answered
/// as for a fresh key, allowed with the whole limit). Once a key can be dropped, both allow.
#[test]
fn keyed_peek_on_a_new_key_in_a_full_map_agrees_with_the_next_try() {
    use floodgate::{FixedWindow, Gcra, Keyed, Rate};
    let clock = ManualClock::new();
    let window: Keyed<u32, _, _> =
        Keyed::builder(FixedWindow::new(2, Duration::from_secs(1)).unwrap())
            .max_keys(1)
            .shards(1)
            .clock(clock.clone())
            .build()
            .unwrap();
    assert!(window.try_acquire(&1, 1).unwrap().is_allowed());
    let peeked = window.peek(&2, 1).unwrap();
    assert!(!peeked.is_allowed(), "{peeked:?}");
    assert_eq!(window.try_acquire(&2, 1).unwrap(), peeked);
    assert_eq!(window.len(), 1);
    clock.advance(peeked.retry_after());
    let peeked = window.peek(&2, 1).unwrap();
    assert!(peeked.is_allowed(), "{peeked:?}");
    assert_eq!(window.try_acquire(&2, 1).unwrap(), peeked);

    // A bucket, past the map's sweep schedule: the sweep finds no idle key.
    let bucket: Keyed<u32, _, _> = Keyed::builder(Gcra::new(Rate::per_second(2), 2).unwrap())
        .max_keys(1)
        .shards(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(bucket.try_acquire(&1, 2).unwrap().is_allowed());
    clock.advance(Duration::from_millis(900));
    assert!(bucket.try_acquire(&1, 1).unwrap().is_allowed());
    for _ in 0..2 {
        let peeked = bucket.peek(&2, 1).unwrap();
        assert!(!peeked.is_allowed(), "{peeked:?}");
        assert_eq!(bucket.try_acquire(&2, 1).unwrap(), peeked);
    }
}

/// The errors the rustdoc now lists are the ones returned: a log window past `u64` nanoseconds
/// is `DurationOutOfRange` (documented as `DurationOverflow`), and a bucket whose rate rounds
/// badly is `RateRounding` (not listed by `Gcra::new`).
#[test]
fn documented_errors_are_the_ones_returned() {
    use floodgate::{ConfigError, Gcra, Rate};
    let err =
        SlidingLogLimiter::with_capacity(1, Duration::MAX, 1, ManualClock::new()).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::DurationOutOfRange {
                value: Duration::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    let err = Gcra::new(Rate::new(3, Duration::from_nanos(4)), 1).unwrap_err();
    assert!(matches!(err, ConfigError::RateRounding { .. }), "{err:?}");
    let err = Gcra::new(Rate::new(1, Duration::MAX), 1).unwrap_err();
    assert_eq!(err, ConfigError::DurationOverflow);
}

/// A sliding window whose oldest permits leave only after the end of the `u64` timeline says so:
/// its `retry_after` is the real wait (past `u64::MAX` ns), as a fixed window's is, not a wait
/// until the last nanosecond that would be refused again; a blocking call then ends at once
/// with `PastEndOfTime` instead of sleeping to the end and being refused there.
#[test]
fn a_sliding_window_retry_at_the_end_of_time_is_the_real_wait() {
    use floodgate::{AtomicLimiter, PackedSlidingWindow, SlidingWindowLimiter};
    within_hang_guard(|| {
        // Cells of 2 ns: `u64::MAX - 3` opens the cell [2^64 − 4, 2^64 − 3]; its permits leave
        // the 2-cell window when the cell starting at 2^64 opens, 4 ns later.
        let window = Duration::from_nanos(4);
        let clock = ManualClock::starting_at(u64::MAX - 3);
        let ring = SlidingWindowLimiter::with_clock(2, window, 2, clock.clone()).unwrap();
        let packed = AtomicLimiter::with_clock(
            PackedSlidingWindow::new(2, window, 2).unwrap(),
            clock.clone(),
        );
        let limiters: [&dyn Limiter; 2] = [&ring, &packed];
        for limiter in limiters {
            let taken = limiter.try_acquire(2).unwrap();
            assert_eq!(taken.reset_after(), Duration::from_nanos(4), "{taken:?}");
            let denied = limiter.try_acquire(1).unwrap();
            assert_eq!(denied.retry_after(), Duration::from_nanos(4), "{denied:?}");
            assert_eq!(denied.reset_after(), Duration::from_nanos(4), "{denied:?}");
            let err = limiter.acquire(1).unwrap_err();
            assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
        }
        assert!(clock.sleeps().is_empty(), "{:?}", clock.sleeps());
        assert_eq!(ring.peek(1).unwrap().retry_after(), Duration::from_nanos(4));
    });
}

/// `Keyed::set_limit` on a core whose clock lags the map's latest admission (by less than the
/// lag horizon, as the time model allows) takes effect at the map's time floor, as
/// `AtomicLimiter::set_limit` does: raising a bucket's capacity keeps the tokens held (a full
/// bucket stays at its old capacity), where the lagging instant back-dated the change and let the
/// bucket accrue the new room over the lag (10 fresh permits here).
#[test]
fn keyed_set_limit_on_a_lagging_clock_frees_nothing() {
    use floodgate::{AtomicLimiter, Gcra, Keyed, Rate};
    const SECOND: u64 = 1_000_000_000;
    let clock = ManualClock::starting_at(10 * SECOND);
    let gcra = || Gcra::new(Rate::per_second(10), 10).unwrap();
    let keyed: Keyed<u32, _, _> = Keyed::builder(gcra())
        .max_keys(8)
        .clock(clock.clone())
        .build()
        .unwrap();
    let single = AtomicLimiter::with_clock(gcra(), clock.clone());
    assert!(keyed.try_acquire(&1, 10).unwrap().is_allowed());
    assert!(single.try_acquire(10).unwrap().is_allowed());
    // 2 s later both buckets are full again (10 tokens); an admission raises the time floors.
    clock.set(12 * SECOND);
    assert!(keyed.try_acquire(&2, 1).unwrap().is_allowed());
    assert!(single.try_acquire(1).unwrap().is_allowed());
    // A setter whose clock reads 9.5 s behind raises the capacity to 20.
    clock.set(12 * SECOND - 9_500_000_000);
    keyed.set_limit(20).unwrap();
    single.set_limit(20).unwrap();
    clock.set(12 * SECOND);
    let admitted = (0..30).filter(|_| keyed.admit(&1, 1).unwrap()).count();
    assert_eq!(admitted, 10, "keyed: raising the capacity freed permits");
    let admitted = (0..30).filter(|_| single.admit(1).unwrap()).count();
    assert_eq!(admitted, 9, "atomic (one permit taken at 12 s)");
}

/// A warming limiter's warm-up zone is `4 / (1 + cold_factor)` of its threshold's permits, held
/// in an `f64` next to them: from a cold factor of about 1e17 it rounds away entirely, and the
/// limiter silently had no warm-up at all (a cold permit cost one stable interval, 200 ms here,
/// where the warm-up costs 1 s more); from about 1e13 the warm-up's cost drifted by 0.01% to
/// 30%. Cold factors above 1e9 are refused, naming the bound; 1e9 keeps the warm-up's cost.
#[test]
fn a_cold_factor_too_large_for_its_warm_up_is_refused() {
    use floodgate::{ConfigError, SmoothWarmingUp};
    for cold_factor in [1e9 + 1.0, 1e13, 1e17, 1e300, f64::MAX] {
        let error = SmoothWarmingUp::with_cold_factor(
            5.0,
            Duration::from_secs(1),
            cold_factor,
            ManualClock::new(),
        )
        .unwrap_err();
        assert!(
            matches!(error, ConfigError::InvalidNumber { what: "cold_factor", value, .. } if value == cold_factor),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(text.contains("at most 1e9"), "{text}");
    }
    // The largest accepted: a cold limiter's first permit is free, and the next waits for the
    // whole warm-up (1 s: the zone is narrower than one permit) plus one stable interval.
    let limiter =
        SmoothWarmingUp::with_cold_factor(5.0, Duration::from_secs(1), 1e9, ManualClock::new())
            .unwrap();
    assert_eq!(limiter.reserve(1).unwrap(), Duration::ZERO);
    let wait = limiter.reserve(1).unwrap();
    let expected = Duration::from_millis(1200);
    assert!(
        wait.abs_diff(expected) <= Duration::from_micros(2),
        "{wait:?}"
    );
}
