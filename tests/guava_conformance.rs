//! Guava's own `RateLimiterTest` scenarios (G1–G25 of `shared/reference/guava.md`), replayed
//! on a `ManualClock`: same inputs, same outputs, to the microsecond.
//!
//! Events are written as Guava's `FakeStopwatch` writes them: `R<seconds>` for every acquire
//! and every successful tryAcquire (even a zero wait), `U<seconds>` for the test's own sleeps,
//! both with Java's `%3.2f` (HALF_UP). Every scenario also checks that the clock's recorded
//! sleeps are exactly the non-zero events, in order.

use std::time::Duration;

use floodgate::compat::guava::GuavaRateLimiter;
use floodgate::{
    AcquireError, Clock, ConfigError, Limiter, ManualClock, SmoothBursty, SmoothWarmingUp,
};

/// Guava's `FakeStopwatch` around one limiter.
struct Stopwatch<L> {
    clock: ManualClock,
    limiter: L,
    events: Vec<String>,
    /// Every R/U event in µs, in order (zero waits included).
    raw: Vec<u64>,
}

/// Java's `String.format("%3.2f", micros / 1e6)`: HALF_UP to hundredths.
fn seconds(micros: u64) -> String {
    let hundredths = (micros + 5_000) / 10_000;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

fn bursty(rate: f64) -> Stopwatch<SmoothBursty<ManualClock>> {
    let clock = ManualClock::new();
    let limiter = SmoothBursty::create_with_clock(rate, clock.clone()).unwrap();
    Stopwatch::new(clock, limiter)
}

fn warming(rate: f64, warmup_ms: u64, cold: f64) -> Stopwatch<SmoothWarmingUp<ManualClock>> {
    let clock = ManualClock::new();
    let warmup = Duration::from_millis(warmup_ms);
    let limiter = SmoothWarmingUp::with_cold_factor(rate, warmup, cold, clock.clone()).unwrap();
    Stopwatch::new(clock, limiter)
}

impl<L: Limiter> Stopwatch<L> {
    fn new(clock: ManualClock, limiter: L) -> Self {
        Stopwatch {
            clock,
            limiter,
            events: Vec::new(),
            raw: Vec::new(),
        }
    }

    fn record(&mut self, caption: &str, micros: u64) {
        self.events.push(format!("{caption}{}", seconds(micros)));
        self.raw.push(micros);
    }

    fn acquire(&mut self, permits: u32) -> u64 {
        let slept = self.limiter.acquire(permits).unwrap().as_micros() as u64;
        self.record("R", slept);
        slept
    }

    fn acquire_times(&mut self, times: usize) {
        for _ in 0..times {
            self.acquire(1);
        }
    }

    fn sleep_ms(&mut self, millis: u64) {
        self.clock.sleep(Duration::from_millis(millis));
        self.record("U", millis * 1000);
    }

    fn try_acquire(&mut self, permits: u32, timeout: Duration) -> bool {
        let before = self.clock.now_nanos();
        let granted = self
            .limiter
            .try_acquire_for(permits, timeout)
            .unwrap()
            .is_allowed();
        if granted {
            self.record("R", (self.clock.now_nanos() - before) / 1000);
        } else {
            assert_eq!(self.clock.now_nanos(), before, "a refusal never sleeps");
        }
        granted
    }

    /// Asserts and clears the events; also checks the clock's recorded sleeps.
    fn assert_events(&mut self, expected: &str) {
        let expected: Vec<&str> = expected.split(", ").collect();
        assert_eq!(self.events, expected);
        let slept: Vec<Duration> = self.clock.take_sleeps();
        let nonzero: Vec<Duration> = self
            .raw
            .iter()
            .filter(|&&m| m > 0)
            .map(|&m| Duration::from_micros(m))
            .collect();
        assert_eq!(slept, nonzero, "recorded sleeps are the non-zero events");
        self.events.clear();
        self.raw.clear();
    }

    fn assert_raw(&mut self, expected: &[u64]) {
        assert_eq!(self.raw, expected);
        let nonzero: Vec<Duration> = expected
            .iter()
            .filter(|&&m| m > 0)
            .map(|&m| Duration::from_micros(m))
            .collect();
        assert_eq!(self.clock.take_sleeps(), nonzero);
        self.events.clear();
        self.raw.clear();
    }
}

const WARM_2_4: [u64; 8] = [
    0, 1_375_000, 1_125_000, 875_000, 625_000, 500_000, 500_000, 500_000,
];
const WARM_5_4_COLD10: [u64; 8] = [
    0, 1_752_500, 1_257_500, 762_500, 300_227, 200_000, 200_000, 200_000,
];

#[test]
fn g1_simple() {
    let mut s = bursty(5.0);
    s.acquire_times(3);
    assert_eq!(s.raw, [0, 200_000, 200_000]);
    s.assert_events("R0.00, R0.20, R0.20");
}

#[test]
fn g2_simple_with_wait_and_return_values() {
    let mut s = bursty(5.0);
    s.acquire(1);
    s.sleep_ms(200);
    s.acquire(1);
    s.acquire(1);
    s.assert_events("R0.00, U0.20, R0.00, R0.20");

    let clock = ManualClock::new();
    let limiter = SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap();
    assert_eq!(limiter.acquire_permits(1).unwrap(), 0.0);
    clock.sleep(Duration::from_millis(200));
    assert_eq!(limiter.acquire_permits(1).unwrap(), 0.0);
    assert!((limiter.acquire_permits(1).unwrap() - 0.2).abs() < 1e-8);
}

#[test]
fn g3_earliest_available_in_the_past() {
    let clock = ManualClock::new();
    let limiter = SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap();
    assert_eq!(limiter.acquire_permits(1).unwrap(), 0.0);
    clock.sleep(Duration::from_millis(400));
    assert_eq!(limiter.acquire_permits(1).unwrap(), 0.0);
    assert_eq!(limiter.acquire_permits(1).unwrap(), 0.0);
    assert_eq!(limiter.acquire_permits(1).unwrap(), 0.2);
}

#[test]
fn g4_one_second_burst() {
    let mut s = bursty(5.0);
    s.sleep_ms(1000);
    s.sleep_ms(1000);
    for permits in [1, 1, 3, 1, 1] {
        s.acquire(permits);
    }
    s.assert_events("U1.00, U1.00, R0.00, R0.00, R0.00, R0.00, R0.20");
}

#[test]
fn g5_weights_are_paid_by_the_next_caller() {
    let mut s = bursty(1.0);
    for permits in [1, 1, 2, 4, 8, 1] {
        s.acquire(permits);
    }
    s.assert_events("R0.00, R1.00, R1.00, R2.00, R4.00, R8.00");
}

#[test]
fn g6_large_pre_consumption() {
    let mut s = bursty(1.0);
    s.acquire(100);
    s.acquire(1);
    s.assert_events("R0.00, R100.00");

    let mut s = bursty(1.0);
    assert!(s.try_acquire(100, Duration::ZERO));
    assert!(!s.try_acquire(1, Duration::from_secs(99)));
    assert!(!s.try_acquire(1, Duration::from_micros(99_999_999)));
    assert!(s.try_acquire(1, Duration::from_secs(100)));
    s.assert_events("R0.00, R100.00");
    assert_eq!(s.limiter.snapshot().next_free_micros, 101_000_000);
}

#[test]
fn g7_set_rate_keeps_the_old_debt() {
    let mut s = bursty(1.0);
    s.acquire(1);
    s.acquire(1);
    s.limiter.set_rate(2.0).unwrap();
    for permits in [1, 2, 4, 1] {
        s.acquire(permits);
    }
    s.assert_events("R0.00, R1.00, R1.00, R0.50, R1.00, R2.00");
}

#[test]
fn g8_try_acquire_no_wait_allowed() {
    let mut s = bursty(5.0);
    assert!(s.try_acquire(1, Duration::ZERO));
    assert!(!s.try_acquire(1, Duration::ZERO));
    assert!(!s.try_acquire(1, Duration::ZERO));
    s.sleep_ms(100);
    assert!(!s.try_acquire(1, Duration::ZERO));
    // The refusal's retry_after is the time to nf = 200 ms.
    let refused = s.limiter.try_acquire(1).unwrap();
    assert_eq!(refused.retry_after(), Duration::from_millis(100));
    s.assert_events("R0.00, U0.10");
}

#[test]
fn g9_try_acquire_some_wait_allowed() {
    let mut s = bursty(5.0);
    assert!(s.try_acquire(1, Duration::ZERO));
    assert!(s.try_acquire(1, Duration::from_millis(200)));
    assert!(!s.try_acquire(1, Duration::from_millis(100)));
    s.sleep_ms(100);
    assert!(s.try_acquire(1, Duration::from_millis(100)));
    s.assert_events("R0.00, R0.20, U0.10, R0.10");
}

#[test]
fn g10_try_acquire_with_a_huge_timeout_does_not_overflow() {
    for huge in [Duration::from_micros(i64::MAX as u64), Duration::MAX] {
        let mut s = bursty(5.0);
        assert!(s.try_acquire(1, Duration::ZERO));
        s.sleep_ms(100);
        assert!(s.try_acquire(1, huge));
        s.assert_events("R0.00, U0.10, R0.10");
    }
}

#[test]
fn g11_negative_timeouts_count_as_zero() {
    // A Rust Duration cannot be negative; Guava clamps negative timeouts to 0 = Duration::ZERO.
    let mut s = bursty(5.0);
    assert!(s.try_acquire(5, Duration::ZERO));
    s.sleep_ms(900);
    assert!(!s.try_acquire(1, Duration::ZERO));
    s.sleep_ms(100);
    assert!(s.try_acquire(1, Duration::ZERO));
    s.assert_events("R0.00, U0.90, U0.10, R0.00");
}

#[test]
fn g12_warm_up() {
    let mut s = warming(2.0, 4000, 3.0);
    s.acquire_times(8);
    s.assert_events("R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50");
    s.sleep_ms(500); // repays the last acquire
    s.sleep_ms(4000); // cold again
    s.raw.clear();
    s.events.clear();
    s.clock.take_sleeps();
    s.acquire_times(8);
    s.assert_raw(&WARM_2_4);
    s.sleep_ms(500);
    s.sleep_ms(2000); // 4 permits stored = the threshold: still warm
    s.acquire_times(8);
    s.assert_events("U0.50, U2.00, R0.00, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50");
}

#[test]
fn g13_warm_up_with_cold_factor_10() {
    let mut s = warming(5.0, 4000, 10.0);
    s.acquire_times(8);
    assert_eq!(
        s.events.join(", "),
        "R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20"
    );
    s.assert_raw(&WARM_5_4_COLD10);
    s.sleep_ms(200);
    s.sleep_ms(4000);
    s.assert_raw(&[200_000, 4_000_000]);
    s.acquire_times(8);
    s.assert_raw(&WARM_5_4_COLD10);
    s.sleep_ms(200);
    s.sleep_ms(1000);
    s.acquire_times(8);
    s.assert_events("U0.20, U1.00, R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20");
}

#[test]
fn g14_cold_factor_1_is_flat() {
    let mut s = warming(5.0, 4000, 1.0);
    s.acquire_times(8);
    s.assert_events("R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20");
    s.sleep_ms(340);
    s.acquire_times(8);
    s.assert_events("U0.34, R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20");
}

#[test]
fn g15_set_rate_rescales_a_warming_limiter() {
    let mut s = warming(2.0, 4000, 3.0);
    s.acquire_times(8);
    s.assert_events("R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50");
    s.sleep_ms(4500);
    s.acquire_times(3);
    s.assert_events("U4.50, R0.00, R1.38, R1.13");
    let snap = s.limiter.snapshot();
    assert_eq!(snap.stored_permits, 5.0);
    s.limiter.set_rate(4.0).unwrap();
    assert_eq!(s.limiter.snapshot().stored_permits, 10.0);
    s.acquire(1);
    s.assert_raw(&[875_000]); // the old-rate debt
    s.acquire_times(4);
    s.assert_raw(&[343_750, 281_250, 250_000, 250_000]);
    s.sleep_ms(4250);
    s.raw.clear();
    s.events.clear();
    s.clock.take_sleeps();
    s.acquire_times(11);
    s.assert_raw(&[
        0, 718_750, 656_250, 593_750, 531_250, 468_750, 406_250, 343_750, 281_250, 250_000, 250_000,
    ]);
}

#[test]
fn g16_set_rate_rescales_with_cold_factor_10() {
    let mut s = warming(5.0, 4000, 10.0);
    s.acquire_times(8);
    s.assert_raw(&WARM_5_4_COLD10);
    s.sleep_ms(4200);
    s.acquire_times(3);
    s.assert_events("U4.20, R0.00, R1.75, R1.26");
    s.limiter.set_rate(10.0).unwrap();
    s.acquire(1);
    s.assert_events("R0.76");
    s.acquire_times(4);
    s.assert_raw(&[195_625, 104_602, 100_000, 100_000]);
    s.sleep_ms(4100);
    s.raw.clear();
    s.events.clear();
    s.clock.take_sleeps();
    s.acquire_times(11);
    s.assert_raw(&[
        0, 938_125, 814_375, 690_625, 566_875, 443_125, 319_375, 195_625, 104_602, 100_000, 100_000,
    ]);
}

#[test]
fn g17_infinity_bursty() {
    let mut s = bursty(f64::INFINITY);
    for permits in [u32::MAX / 4, u32::MAX / 2, i32::MAX as u32] {
        s.acquire(permits);
    }
    s.assert_events("R0.00, R0.00, R0.00");
    assert_eq!(s.limiter.rate(), f64::INFINITY);
    s.limiter.set_rate(2.0).unwrap();
    s.acquire_times(5);
    s.assert_events("R0.00, R0.00, R0.00, R0.50, R0.50");
    s.limiter.set_rate(f64::INFINITY).unwrap();
    s.acquire_times(3);
    s.assert_events("R0.50, R0.00, R0.00");
}

#[test]
fn g18_infinity_bursty_time_elapsed() {
    let mut s = bursty(f64::INFINITY);
    s.clock.advance(Duration::from_millis(1));
    s.limiter.set_rate(2.0).unwrap();
    s.acquire_times(5);
    s.assert_events("R0.00, R0.00, R0.00, R0.50, R0.50");
}

#[test]
fn g19_infinity_warm_up() {
    let mut s = warming(f64::INFINITY, 10_000, 3.0);
    for permits in [u32::MAX / 4, u32::MAX / 2, i32::MAX as u32] {
        s.acquire(permits);
    }
    s.assert_events("R0.00, R0.00, R0.00");
    s.limiter.set_rate(1.0).unwrap();
    s.acquire_times(3);
    s.assert_events("R0.00, R1.00, R1.00");
    s.limiter.set_rate(f64::INFINITY).unwrap();
    s.acquire_times(3);
    s.assert_events("R1.00, R0.00, R0.00");

    let mut s = warming(f64::INFINITY, 10_000, 3.0);
    s.clock.advance(Duration::from_millis(1));
    s.limiter.set_rate(1.0).unwrap();
    s.acquire_times(5);
    s.assert_events("R0.00, R1.00, R1.00, R1.00, R1.00");
}

#[test]
fn g20_double_min_value_acquires_exactly_once() {
    for idle_ms in [i32::MAX as u64, 5000] {
        let mut s = bursty(f64::from_bits(1)); // Double.MIN_VALUE
        assert!(s.try_acquire(1, Duration::ZERO));
        assert!(!s.try_acquire(1, Duration::ZERO));
        s.sleep_ms(idle_ms);
        assert!(!s.try_acquire(1, Duration::ZERO));
        assert_eq!(s.limiter.snapshot().next_free_micros, i64::MAX);
        assert_eq!(s.limiter.rate(), 0.0);
    }
    let clock = ManualClock::new();
    let warming =
        SmoothWarmingUp::create_with_clock(f64::from_bits(1), Duration::from_secs(1), clock)
            .unwrap();
    assert!(warming.try_acquire(1).unwrap().is_allowed());
    assert!(!warming.try_acquire(1).unwrap().is_allowed());
}

#[test]
fn g21_immediate_try_acquire() {
    let mut s = bursty(1.0);
    assert!(s.try_acquire(1, Duration::ZERO));
    assert!(!s.try_acquire(1, Duration::ZERO));
}

/// Java's `java.util.Random` (the same 48-bit LCG), so the splits look like Guava's.
struct JavaRandom(u64);

impl JavaRandom {
    fn new(seed: u64) -> Self {
        JavaRandom((seed ^ 0x5DEECE66D) & ((1 << 48) - 1))
    }
    fn next_int(&mut self, bound: u32) -> u32 {
        loop {
            self.0 = (self.0.wrapping_mul(0x5DEECE66D).wrapping_add(0xB)) & ((1 << 48) - 1);
            let bits = (self.0 >> 17) as u32;
            let value = bits % bound;
            if bits.wrapping_sub(value).wrapping_add(bound - 1) < (1 << 31) {
                return value;
            }
        }
    }
}

/// Guava's `measureTotalTimeMillis`: acquire `permits` in random chunks, then 1 to repay.
fn measure_total_millis(
    limiter: &impl Limiter,
    clock: &ManualClock,
    permits: u32,
    rng: &mut JavaRandom,
) -> u64 {
    let start = clock.now_nanos();
    let mut left = permits;
    while left > 0 {
        let chunk = rng.next_int(left).max(1);
        left -= chunk;
        limiter.acquire(chunk).unwrap();
    }
    limiter.acquire(1).unwrap();
    (clock.now_nanos() - start) / 1_000_000
}

#[test]
fn g22_never_a_burst_of_more_than_one_second() {
    for seed in 0..20 {
        let clock = ManualClock::new();
        let limiter = SmoothBursty::create_with_clock(1.0, clock.clone()).unwrap();
        let mut rng = JavaRandom::new(seed);
        for rate in [1000u32, 1, 10, 1_000_000, 10, 1] {
            clock.sleep(Duration::from_millis(u64::from(rate) * 1000));
            limiter.set_rate(f64::from(rate)).unwrap();
            let burst = measure_total_millis(&limiter, &clock, rate, &mut rng);
            assert!(burst <= 1000, "rate {rate}: burst took {burst} ms");
            let after = measure_total_millis(&limiter, &clock, rate, &mut rng);
            assert!(
                after >= 1000,
                "rate {rate}: after the burst took {after} ms"
            );
        }
    }
}

#[test]
fn g23_time_to_warm_up_is_honoured_even_with_weights() {
    let mut rng = JavaRandom::new(42);
    for _trial in 0..100 {
        for cold_factor in [2.0, 3.0, 10.0] {
            for qps in [4.0, 2.0, 1.0, 0.5, 0.1] {
                let warmup_millis = ((1.0 + cold_factor) * 10.0 / (2.0 * qps) * 1000.0) as u64;
                let clock = ManualClock::starting_at(7_000_000_000);
                let limiter = SmoothWarmingUp::with_cold_factor(
                    qps,
                    Duration::from_millis(warmup_millis),
                    cold_factor,
                    clock.clone(),
                )
                .unwrap();
                let took = measure_total_millis(&limiter, &clock, 10, &mut rng);
                assert_eq!(took, warmup_millis, "cold factor {cold_factor}, qps {qps}");
            }
        }
    }
}

#[test]
fn g24_warm_up_integral_is_additive() {
    let mut s = warming(2.0, 4000, 3.0);
    s.acquire(8);
    s.acquire(1);
    s.assert_events("R0.00, R6.00");
    let mut s = warming(2.0, 4000, 3.0);
    for permits in [4, 4, 1] {
        s.acquire(permits);
    }
    s.assert_events("R0.00, R4.00, R2.00");
}

#[test]
fn g25_bursty_set_rate_rescales_stored_permits() {
    let mut s = bursty(10.0);
    s.sleep_ms(500);
    s.acquire(1);
    assert_eq!(s.limiter.snapshot().stored_permits, 4.0);
    s.limiter.set_rate(20.0).unwrap();
    assert_eq!(s.limiter.snapshot().stored_permits, 8.0);
    s.acquire_times(10);
    s.assert_events(
        "U0.50, R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.05",
    );
}

#[test]
fn bad_input_is_an_error_never_a_panic() {
    let clock = ManualClock::new();
    let bursty = SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap();
    let warm =
        SmoothWarmingUp::create_with_clock(5.0, Duration::from_secs(5), clock.clone()).unwrap();
    assert_eq!(bursty.acquire(0), Err(AcquireError::ZeroPermits));
    assert_eq!(bursty.acquire_permits(0), Err(AcquireError::ZeroPermits));
    assert_eq!(bursty.try_acquire(0), Err(AcquireError::ZeroPermits));
    assert_eq!(
        bursty.try_acquire_timeout(0, Duration::from_secs(1)),
        Err(AcquireError::ZeroPermits)
    );
    assert_eq!(bursty.reserve(0), Err(AcquireError::ZeroPermits));
    assert_eq!(warm.acquire(0), Err(AcquireError::ZeroPermits));
    assert_eq!(
        warm.try_acquire_for(0, Duration::from_secs(1)),
        Err(AcquireError::ZeroPermits)
    );
    for bad in [0.0, -10.0, f64::NAN, f64::NEG_INFINITY] {
        assert!(matches!(
            bursty.set_rate(bad),
            Err(ConfigError::InvalidNumber { .. })
        ));
        assert!(matches!(
            warm.set_rate(bad),
            Err(ConfigError::InvalidNumber { .. })
        ));
        assert!(SmoothBursty::create_with_clock(bad, clock.clone()).is_err());
        assert!(
            SmoothWarmingUp::create_with_clock(bad, Duration::from_secs(1), clock.clone()).is_err()
        );
    }
    assert_eq!(bursty.set_limit(0), Err(ConfigError::ZeroLimit));
    // The failed calls left the rate alone.
    assert_eq!((bursty.rate(), warm.rate()), (5.0, 5.0));
    warm.set_rate(10.0).unwrap();
    assert_eq!(warm.rate(), 10.0);
    bursty.set_limit(7).unwrap();
    // Guava's getRate() is 1e6 / (1e6 / 7) = 6.999999999999999 too.
    assert_eq!((bursty.rate(), bursty.limit()), (1e6 / (1e6 / 7.0), 7));
    for bad in [f64::NAN, 0.5, f64::INFINITY, -1.0] {
        assert!(
            SmoothWarmingUp::with_cold_factor(1.0, Duration::from_secs(1), bad, clock.clone())
                .is_err()
        );
    }
    for bad in [f64::NAN, -1.0, f64::INFINITY, 1e9] {
        assert!(SmoothBursty::with_max_burst(1.0, bad, clock.clone()).is_err());
    }
    assert!(matches!(
        SmoothWarmingUp::create_with_clock(1e307, Duration::from_secs(1000), clock.clone()),
        Err(ConfigError::Invalid { .. })
    ));
    // Guava's create(1.0, 0, ns) is fine; floodgate makes it a limiter without stored permits.
    let flat = SmoothWarmingUp::create_with_clock(5.0, Duration::ZERO, clock.clone()).unwrap();
    clock.advance(Duration::from_secs(10));
    assert_eq!(flat.reserve(1).unwrap(), Duration::ZERO);
    assert_eq!(flat.reserve(1).unwrap(), Duration::from_millis(200));
    assert_eq!(flat.snapshot().stored_permits, 0.0);
}

/// A grant that waited (`try_acquire_for` sleeps until the previous booking is paid) reports its
/// `reset_after` from after the sleep, as every decision counts from when it is returned: at
/// 10/s (1 s of stored permits), a booking 100 ms ahead waited for, then 100 ms of debt and 1 s
/// of permits to accrue: 1.1 s, not the 1.2 s seen before the sleep.
#[test]
fn a_waited_grant_reports_its_reset_from_after_the_wait() {
    let clock = ManualClock::new();
    let limiter = SmoothBursty::create_with_clock(10.0, clock.clone()).unwrap();
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let granted = limiter.try_acquire_for(1, Duration::from_secs(1)).unwrap();
    assert_eq!(clock.now_nanos(), 100_000_000, "slept 100 ms");
    assert!(granted.is_allowed());
    assert_eq!(
        granted.reset_after(),
        Duration::from_millis(1_100),
        "counted from before the sleep"
    );
}

/// Guava takes any warm-up up to `Long.MAX_VALUE` µs; floodgate takes up to 2^52 µs (142 years),
/// and a longer one is refused naming the warm-up and that bound, not as "duration overflows u64
/// nanoseconds arithmetic", which is false for a warm-up of 500 years (1.6 × 10^19 ns fits in a
/// `u64`).
#[test]
fn a_warm_up_past_2_to_the_52_micros_names_the_bound() {
    let clock = ManualClock::new();
    let max = Duration::from_micros(1 << 52);
    let just_fits = SmoothWarmingUp::create_with_clock(2.0, max, clock.clone()).unwrap();
    assert_eq!(just_fits.rate(), 2.0);
    let five_hundred_years = Duration::from_secs(500 * 365 * 86_400);
    for value in [
        max + Duration::from_micros(1),
        five_hundred_years,
        Duration::MAX,
    ] {
        let expected = ConfigError::DurationOutOfRange {
            what: "warm-up",
            value,
            min: Duration::ZERO,
            max,
        };
        assert_eq!(
            SmoothWarmingUp::create_with_clock(2.0, value, clock.clone()).unwrap_err(),
            expected
        );
        assert_eq!(
            SmoothWarmingUp::with_cold_factor(2.0, value, 3.0, clock.clone()).unwrap_err(),
            expected
        );
        let message = expected.to_string();
        assert!(
            message.starts_with("warm-up must be within 0ns..="),
            "{message}"
        );
    }
}
