//! TokenBucket, LeakyBucket and Gcra on ManualClock: exact decisions, drift, live rate changes,
//! lagging clocks, overflow.

use std::time::Duration;

use floodgate::{
    AcquireError, AtomicLimiter, ConfigError, Gcra, LeakyBucket, Limiter, ManualClock, Rate,
    TokenBucket,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// (allowed, remaining, retry_after ns, reset_after ns)
fn take(l: &dyn Limiter, n: u32) -> (bool, u64, u64, u64) {
    let d = l.try_acquire(n).unwrap();
    (
        d.is_allowed(),
        d.remaining(),
        d.retry_after().as_nanos() as u64,
        d.reset_after().as_nanos() as u64,
    )
}

fn on_clock<A: floodgate::Algorithm>(
    a: A,
    start: u64,
) -> (AtomicLimiter<A, ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(start);
    (AtomicLimiter::with_clock(a, clock.clone()), clock)
}

#[test]
fn token_bucket_exact_sequence() {
    let (b, clock) = on_clock(TokenBucket::new(Rate::per_second(10), 3).unwrap(), 5 * SEC);
    assert_eq!(take(&b, 1), (true, 2, 0, 100 * MS));
    assert_eq!(take(&b, 1), (true, 1, 0, 200 * MS));
    assert_eq!(take(&b, 1), (true, 0, 0, 300 * MS));
    assert_eq!(take(&b, 1), (false, 0, 100 * MS, 300 * MS));
    clock.advance_nanos(50 * MS);
    assert_eq!(take(&b, 1), (false, 0, 50 * MS, 250 * MS));
    clock.advance_nanos(50 * MS);
    assert_eq!(take(&b, 1), (true, 0, 0, 300 * MS));
    clock.advance_nanos(SEC); // refills to the brim, not beyond
    assert_eq!(take(&b, 3), (true, 0, 0, 300 * MS));
    assert_eq!(take(&b, 2), (false, 0, 200 * MS, 300 * MS));
}

#[test]
fn fractional_refill_is_never_lost_however_often_it_is_checked() {
    // 7 tokens per second: 142_857_143 ns a token (rounded once). Poll every 10 µs for 2 s,
    // taking a token whenever one is whole: exactly the tokens that accrued, no drift.
    let (b, clock) = on_clock(TokenBucket::new(Rate::per_second(7), 10).unwrap(), 0);
    assert!(take(&b, 10).0);
    let mut admitted = 0u64;
    for _ in 0..200_000 {
        clock.advance_nanos(10_000);
        if b.try_acquire(1).unwrap().is_allowed() {
            admitted += 1;
        }
    }
    let interval = b.algorithm().nanos_per_permit();
    assert_eq!(interval, 142_857_143);
    assert_eq!(admitted, 2 * SEC / interval); // 13
    assert_eq!(admitted, 13);
}

#[test]
fn leaky_bucket_meter_sequence() {
    let (m, clock) = on_clock(LeakyBucket::new(Rate::per_second(2), 4).unwrap(), 0);
    assert_eq!(take(&m, 3), (true, 1, 0, 1500 * MS));
    assert_eq!(take(&m, 2), (false, 1, 500 * MS, 1500 * MS)); // would overflow: pours nothing
    clock.advance_nanos(500 * MS);
    assert_eq!(take(&m, 2), (true, 0, 0, 2 * SEC));
    clock.advance_nanos(10 * SEC);
    assert_eq!(take(&m, 1), (true, 3, 0, 500 * MS)); // drained, never below empty
}

#[test]
fn gcra_matches_governor_semantics() {
    // governor: Quota::per_second(2).allow_burst(3) — 3 at once, then one per 500 ms.
    let (g, clock) = on_clock(Gcra::new(Rate::per_second(2), 3).unwrap(), 0);
    for remaining in [2, 1, 0] {
        assert_eq!(take(&g, 1).1, remaining);
    }
    assert_eq!(take(&g, 1), (false, 0, 500 * MS, 1500 * MS));
    clock.advance_nanos(499 * MS);
    assert!(!take(&g, 1).0);
    clock.advance_nanos(MS);
    assert!(take(&g, 1).0);
    // n > 1: a batch of 2 needs two emission intervals.
    clock.advance_nanos(500 * MS);
    assert_eq!(take(&g, 2), (false, 1, 500 * MS, 1000 * MS));
    clock.advance_nanos(500 * MS);
    assert_eq!(take(&g, 2), (true, 0, 0, 1500 * MS));
}

#[test]
fn set_rate_mid_stream_keeps_the_debt_in_permits() {
    let (b, clock) = on_clock(TokenBucket::new(Rate::per_second(1), 2).unwrap(), 0);
    assert!(take(&b, 2).0); // 2 permits of debt
    b.algorithm().set_rate(Rate::per_second(10), 0).unwrap();
    assert_eq!(b.algorithm().rate(), Rate::per_second(10));
    // Still 2 permits of debt, repaid at 100 ms each: full at 200 ms, one whole at 100 ms.
    assert_eq!(take(&b, 1), (false, 0, 100 * MS, 200 * MS));
    clock.set(100 * MS);
    assert!(take(&b, 1).0);
    clock.set(10 * SEC);
    // set_limit sets the capacity (the limit every decision reports); the rate stays.
    b.set_limit(1).unwrap();
    assert_eq!((b.limit(), b.algorithm().nanos_per_permit()), (1, 100 * MS));
    assert_eq!(take(&b, 1), (true, 0, 0, 100 * MS));
    clock.set(20 * SEC);
    b.algorithm().set_capacity(5, 20 * SEC).unwrap();
    // Raising the capacity keeps the one token held; the new room fills at the rate.
    assert_eq!(take(&b, 2), (false, 1, 100 * MS, 400 * MS));
    clock.set(20 * SEC + 400 * MS);
    assert_eq!(take(&b, 3), (true, 2, 0, 300 * MS));
}

#[test]
fn bad_requests_and_settings() {
    let (g, _) = on_clock(Gcra::new(Rate::per_second(5), 5).unwrap(), 0);
    assert_eq!(g.try_acquire(0), Err(AcquireError::ZeroPermits));
    assert_eq!(
        g.try_acquire(6),
        Err(AcquireError::ExceedsCapacity {
            requested: 6,
            capacity: 5
        })
    );
    assert!(g.acquire(6).is_err(), "no wait forever for the impossible");
    assert_eq!(
        TokenBucket::new(Rate::per_second(1), 0).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        TokenBucket::new(Rate::per_second(0), 1).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        LeakyBucket::new(Rate::new(1, Duration::ZERO), 1).unwrap_err(),
        ConfigError::ZeroPeriod
    );
    assert_eq!(
        Gcra::new(Rate::new(u32::MAX, Duration::from_nanos(1)), 1).unwrap_err(),
        ConfigError::RateTooHigh {
            finest: Duration::from_nanos(1)
        }
    );
    assert_eq!(
        Gcra::new(Rate::new(1, Duration::MAX), 1).unwrap_err(),
        ConfigError::DurationOverflow
    );
    assert!(matches!(
        TokenBucket::new(Rate::per_hour(1), u32::MAX).unwrap_err(),
        ConfigError::DurationOutOfRange { .. }
    ));
    assert_eq!(g.set_limit(0), Err(ConfigError::ZeroLimit));
    assert_eq!(g.limit(), 5, "a refused setting leaves the old one");
}

/// A rate above one permit per nanosecond is `RateTooHigh` (the finest step, as `Gcra::new`
/// documents), also where rounding to 1 ns would stay within a factor of two (0.5 to 1 ns per
/// permit): it was reported as `RateRounding` ("cannot be kept within 0.1%"), which names a
/// rounding problem instead of the step. A live `set_rate` gets the same answer and keeps the
/// old rate. A rate within 0.1% of one per nanosecond is still kept as 1 ns.
#[test]
fn a_rate_finer_than_one_nanosecond_is_rate_too_high() {
    let finest = ConfigError::RateTooHigh {
        finest: Duration::from_nanos(1),
    };
    let clock = ManualClock::new();
    let bucket = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 5).unwrap(), clock);
    for rate in [
        Rate::new(2, Duration::from_nanos(1)),
        Rate::new(3, Duration::from_nanos(2)),
        Rate::new(1_999, Duration::from_nanos(1_000)),
        Rate::per_second(1_500_000_000),
        Rate::per_second(u32::MAX),
    ] {
        assert_eq!(rate.nanos_per_permit(), Err(finest), "{rate:?}");
        assert_eq!(Gcra::new(rate, 1).unwrap_err(), finest, "{rate:?}");
        assert_eq!(bucket.set_rate(rate), Err(finest), "{rate:?}");
        assert_eq!(bucket.algorithm().rate(), Rate::per_second(10));
    }
    // One permit per nanosecond within 0.1%: kept as 1 ns; finer by just past 0.1%: too high.
    assert_eq!(
        Rate::new(1_001, Duration::from_nanos(1_000)).nanos_per_permit(),
        Ok(1)
    );
    assert!(matches!(
        Rate::new(1_000, Duration::from_nanos(999)).nanos_per_permit(),
        Err(ConfigError::RateTooHigh { .. })
    ));
}

/// A burst window (`capacity × interval per permit`) past 2^62 ns is refused naming the burst,
/// its value and the bound, at construction and by `set_capacity` / `set_rate` / `set_limit`
/// (the old setting stays). It was `DurationOverflow`, "duration overflows u64 nanoseconds
/// arithmetic", also for a burst that fits in `u64` (100,000,000 permits at one per minute:
/// 6 × 10^18 ns, above 2^62 ≈ 4.6 × 10^18, below 2^64): the message named neither the bound
/// nor the setting.
#[test]
fn a_burst_window_past_2_to_the_62_nanoseconds_names_the_bound() {
    let bound = Duration::from_nanos(1 << 62);
    let is_burst_error = |err: ConfigError, value: Duration| {
        let message = err.to_string();
        assert!(
            matches!(err, ConfigError::DurationOutOfRange { what, value: v, max, .. }
                if what.contains("capacity") && v == value && max == bound),
            "{err:?}"
        );
        assert!(message.contains("capacity"), "{message}");
    };
    let per_minute = Duration::from_secs(60);
    is_burst_error(
        TokenBucket::new(Rate::per_minute(1), 100_000_000).unwrap_err(),
        per_minute * 100_000_000,
    );
    // Past u64 nanoseconds too: the value is still the burst's.
    is_burst_error(
        TokenBucket::new(Rate::per_hour(1), u32::MAX).unwrap_err(),
        Duration::from_secs(3_600) * u32::MAX,
    );
    let clock = ManualClock::new();
    let bucket = AtomicLimiter::with_clock(Gcra::new(Rate::per_minute(1), 10).unwrap(), clock);
    is_burst_error(
        bucket.set_capacity(100_000_000).unwrap_err(),
        per_minute * 100_000_000,
    );
    is_burst_error(
        bucket.set_limit(100_000_000).unwrap_err(),
        per_minute * 100_000_000,
    );
    // 10 permits at one per 2^60 ns: 10 × 2^60 ns.
    let slow = Rate::new(1, Duration::from_nanos(1 << 60));
    is_burst_error(
        bucket.set_rate(slow).unwrap_err(),
        Duration::from_nanos(1 << 60) * 10,
    );
    assert_eq!(bucket.algorithm().capacity(), 10);
    assert_eq!(bucket.algorithm().rate(), Rate::per_minute(1));
    // The bound itself is accepted.
    assert!(TokenBucket::new(Rate::new(1, Duration::from_nanos(1 << 61)), 2).is_ok());
}

#[test]
fn a_lagging_clock_read_never_moves_state_back() {
    let (g, clock) = on_clock(Gcra::new(Rate::per_second(10), 5).unwrap(), 10 * SEC);
    assert!(take(&g, 3).0); // tat = 10.3 s
    clock.set(10 * SEC - 1000); // another core's TSC, 1 µs behind
    let lagged = take(&g, 1);
    assert!(lagged.0, "room remains: the lag alone refuses nothing here");
    clock.set(10 * SEC);
    // The lagging request was booked after the others: 4 taken, tat = 10.4 s.
    assert_eq!(take(&g, 1), (true, 0, 0, 500 * MS));
    // A denial with a lagging read writes nothing.
    clock.set(10 * SEC - 1000);
    assert!(!take(&g, 1).0);
    clock.set(10 * SEC);
    assert_eq!(g.peek(1).unwrap().retry_after(), Duration::from_millis(100));
}

#[test]
fn a_lagging_clock_read_is_not_refused_for_the_lag() {
    // The governor#299 / quanta#111 case. A bucket of 2 at 10 per second: after one request at
    // 10 s, one token is left. A core whose TSC reads 3 ns behind would see 0.99999997 tokens;
    // floodgate decides it at the latest published time instead.
    let (g, clock) = on_clock(Gcra::new(Rate::per_second(10), 2).unwrap(), 10 * SEC);
    assert!(take(&g, 1).0);
    clock.set(10 * SEC - 3);
    assert_eq!(take(&g, 1), (true, 0, 0, 200 * MS));
    // A skew of 1.6 s (seen on unsynchronized TSCs): the burst is still all there.
    let (b, clock) = on_clock(TokenBucket::new(Rate::per_second(1), 5).unwrap(), 100 * SEC);
    assert!(take(&b, 1).0);
    clock.set(100 * SEC - 1600 * MS);
    assert_eq!(take(&b, 4), (true, 0, 0, 5 * SEC));
    assert!(!take(&b, 1).0);
}

/// The price of the floor's grain, and its bound (README, "Time model": a lagging read is never
/// refused for more than one grain of its lag). The floor is raised only when a writer's time
/// passed it by `clock::FLOOR_GRAIN_NANOS`, so after an admission less than a grain past the
/// floor, a read lagging that writer by less than a grain is decided at its own read: a GCRA of
/// 2 at one per µs, full again at `t1`, admits 1 at `t1`; a read half a grain behind `t1` may be
/// refused the permit left at `t1`, but told to retry no later than `t1` (its wait is at most its
/// lag), and a read at `t1` gets it.
#[test]
fn a_lagging_read_is_refused_for_at_most_its_lag_within_one_grain() {
    use floodgate::clock::FLOOR_GRAIN_NANOS as GRAIN;
    let t0 = 10 * SEC;
    let (g, clock) = on_clock(
        Gcra::new(Rate::new(1, Duration::from_micros(1)), 2).unwrap(),
        t0,
    );
    assert!(take(&g, 1).0); // raises the floor to t0
    let t1 = t0 + GRAIN - 1; // within the grain: the floor stays at t0
    clock.set(t1);
    assert!(take(&g, 1).0); // one permit left at t1
    clock.set(t1 - GRAIN / 2);
    let (allowed, _, retry, _) = take(&g, 1);
    assert!(
        allowed || retry <= GRAIN / 2,
        "refused for more than its lag: retry {retry} ns, lag {} ns",
        GRAIN / 2
    );
    clock.set(t1);
    assert!(take(&g, 1).0, "the permit is there at the writer's time");
}

#[test]
fn the_end_of_the_timeline_denies_instead_of_wrapping() {
    // Times are stored in the low 62 bits (the top 2 carry the configuration generation): the
    // last one is 2^62 − 1 ns, the year 2116 on the Unix timeline.
    let end: u64 = (1 << 62) - 1;
    let (b, clock) = on_clock(
        TokenBucket::new(Rate::per_second(1), 2).unwrap(),
        end - 3 * SEC,
    );
    assert!(take(&b, 2).0);
    assert!(!take(&b, 1).0);
    clock.set(end - SEC);
    // One token accrued; taking it books time up to exactly the end.
    assert!(take(&b, 1).0);
    // The next would book past the end: denied, never wrapped to a time near zero.
    let (allowed, _, retry, _) = take(&b, 1);
    assert!(!allowed && retry > 0);
    clock.set(u64::MAX);
    assert!(!take(&b, 1).0);
}

#[test]
fn acquire_and_try_acquire_for_sleep_exactly() {
    let (g, clock) = on_clock(Gcra::new(Rate::per_second(10), 1).unwrap(), 0);
    assert_eq!(g.acquire(1).unwrap(), Duration::ZERO);
    assert_eq!(g.acquire(1).unwrap(), Duration::from_millis(100));
    assert_eq!(g.acquire(1).unwrap(), Duration::from_millis(100));
    assert_eq!(clock.take_sleeps(), vec![Duration::from_millis(100); 2]);
    let before = g.peek(1).unwrap();
    let d = g.try_acquire_for(1, Duration::from_millis(99)).unwrap();
    assert!(!d.is_allowed());
    assert!(clock.sleeps().is_empty());
    assert_eq!(g.peek(1).unwrap(), before, "a refused try consumes nothing");
    assert!(
        g.try_acquire_for(1, Duration::from_millis(100))
            .unwrap()
            .is_allowed()
    );
    assert_eq!(clock.take_sleeps(), vec![Duration::from_millis(100)]);
}

#[test]
fn rate_reads_back_as_set_even_when_the_interval_rounds() {
    // 3 per 2 s: 666_666_667 ns a permit (rounded); the rate still reads back as 3 per 2 s.
    let bucket = TokenBucket::new(Rate::new(3, Duration::from_secs(2)), 10).unwrap();
    assert_eq!(bucket.nanos_per_permit(), 666_666_667);
    assert_eq!(bucket.rate(), Rate::new(3, Duration::from_secs(2)));
    bucket
        .set_rate(Rate::new(7, Duration::from_secs(3)), 0)
        .unwrap();
    assert_eq!(bucket.rate(), Rate::new(7, Duration::from_secs(3)));
    floodgate::Algorithm::set_limit(&bucket, 5, 0).unwrap(); // the capacity; the rate stays
    assert_eq!(bucket.rate(), Rate::new(7, Duration::from_secs(3)));
    assert_eq!(floodgate::Algorithm::limit(&bucket), 5);
}
