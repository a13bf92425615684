//! `SlidingLog`: exact against a brute-force log over random schedules (ManualClock, lagging
//! reads included), the time rules (a lagging read is decided at the floor, a leap never
//! freezes the log), live limits and bad input.

use std::time::Duration;

use floodgate::algorithms::{MAX_CLOCK_LAG_NANOS, MAX_SLIDING_LOG_CAPACITY};
use floodgate::{
    AcquireError, Clock, ConfigError, Decision, Limiter, ManualClock, SlidingLogLimiter,
};
use proptest::prelude::*;

/// The textbook sliding log: every admission `(time, permits)`, a request admitted iff the
/// permits stamped in `(t − window, t]` plus `n` stay within the limit, decided at the newest
/// admission's time when the clock reads earlier (the floor).
struct Model {
    limit: u64,
    window: u64,
    log: Vec<(u64, u64)>,
}

impl Model {
    fn live(&self, t: u64) -> u64 {
        self.log
            .iter()
            .filter(|(at, _)| at + self.window > t)
            .map(|(_, n)| n)
            .sum()
    }

    fn decide(&mut self, clock: u64, n: u64) -> Decision {
        let t = self.log.last().map_or(clock, |&(at, _)| at.max(clock));
        let live = self.live(t);
        if live + n <= self.limit {
            self.log.push((t, n));
            return Decision::allow(self.limit, self.limit - live - n, self.window);
        }
        // The earliest time at which enough of the oldest live permits have expired.
        let mut freed = 0;
        let mut retry = 0;
        for &(at, k) in self.log.iter().filter(|(at, _)| at + self.window > t) {
            freed += k;
            if live - freed + n <= self.limit {
                retry = at + self.window - t;
                break;
            }
        }
        let newest = self.log.last().map_or(t, |&(at, _)| at);
        Decision::deny(
            self.limit,
            self.limit - live,
            retry,
            newest + self.window - t,
        )
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Move the clock forward.
    Advance(u64),
    /// Read the clock behind the newest admission (a lagging core), within the horizon.
    Lag(u64),
    Take(u32),
}

fn ops(limit: u32, window: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..window * 2).prop_map(Op::Advance),
        1 => (0..window).prop_map(Op::Lag),
        6 => (1..=limit).prop_map(Op::Take),
    ];
    prop::collection::vec(op, 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decides_exactly_as_the_brute_force_log(
        (limit, window, ops) in (1u32..=6, 1u64..50)
            .prop_flat_map(|(limit, window)| (Just(limit), Just(window), ops(limit, window)))
    ) {
        let clock = ManualClock::starting_at(1_000);
        let log = SlidingLogLimiter::with_clock(limit, Duration::from_nanos(window), clock.clone()).unwrap();
        let mut model = Model { limit: u64::from(limit), window, log: Vec::new() };
        let mut real = 1_000;
        for op in ops {
            match op {
                Op::Advance(d) => {
                    real += d;
                    clock.set(real);
                }
                Op::Lag(d) => clock.set(real - d.min(real)),
                Op::Take(n) => {
                    let got = log.try_acquire(n).unwrap();
                    let want = model.decide(clock.now_nanos(), u64::from(n));
                    prop_assert_eq!(got, want);
                    clock.set(real);
                }
            }
        }
    }
}

#[test]
fn at_most_the_limit_in_any_window_long_span_to_the_nanosecond() {
    let clock = ManualClock::starting_at(0);
    let log = SlidingLogLimiter::with_clock(3, Duration::from_nanos(100), clock.clone()).unwrap();
    for t in [0, 40, 99] {
        clock.set(t);
        assert!(log.try_acquire(1).unwrap().is_allowed(), "t = {t}");
    }
    clock.set(99);
    assert!(!log.try_acquire(1).unwrap().is_allowed());
    // (0, 100] holds 40 and 99: the stamp at 0 left the window exactly at 100.
    clock.set(100);
    let d = log.try_acquire(1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    clock.set(139);
    let denied = log.try_acquire(1).unwrap();
    assert_eq!(denied.retry_after(), Duration::from_nanos(1)); // 40 expires at 140
    clock.set(140);
    assert!(log.try_acquire(1).unwrap().is_allowed());
}

#[test]
fn a_lagging_read_is_decided_at_the_newest_admission_never_before_it() {
    let clock = ManualClock::starting_at(10_000);
    let log = SlidingLogLimiter::with_clock(2, Duration::from_nanos(100), clock.clone()).unwrap();
    assert!(log.try_acquire(1).unwrap().is_allowed());
    clock.set(9_000); // a core 1 µs behind: not refused for it, stamped at 10,000
    assert!(log.try_acquire(1).unwrap().is_allowed());
    clock.set(10_099);
    assert!(!log.try_acquire(1).unwrap().is_allowed());
    clock.set(10_100); // both stamps (10,000) expired together
    assert!(log.try_acquire(2).unwrap().is_allowed());
}

#[test]
fn a_leaping_read_never_freezes_the_log() {
    let day = 86_400_000_000_000;
    let clock = ManualClock::starting_at(1_000_000);
    let log = SlidingLogLimiter::with_clock(2, Duration::from_nanos(1_000), clock.clone()).unwrap();
    assert!(log.try_acquire(1).unwrap().is_allowed());
    clock.set(1_000_000 + day); // one read a day ahead
    assert!(log.try_acquire(1).unwrap().is_allowed());
    clock.set(1_000_500); // back to the present: the leaped floor is not obeyed
    // The log judges in admission order: permit 0 (stamped 1,000,000) still counts.
    assert!(!log.try_acquire(1).unwrap().is_allowed());
    // No freeze: once permit 0 expires, the leaped stamp (more than the horizon ahead) counts as
    // expired too — the leaper's one permit is what the log forgets.
    clock.set(1_001_000);
    assert!(log.try_acquire(1).unwrap().is_allowed());
    assert!(log.try_acquire(1).unwrap().is_allowed());
    assert!(!log.try_acquire(1).unwrap().is_allowed());
    // The floor was put back to the present: a read lagging 10 ns is decided at 1,001,000.
    clock.set(1_000_990);
    assert!(!log.try_acquire(1).unwrap().is_allowed());
    clock.set(1_002_000);
    assert!(log.try_acquire(2).unwrap().is_allowed());
    assert!(MAX_CLOCK_LAG_NANOS < day);
}

#[test]
fn set_limit_moves_within_the_capacity_and_keeps_stamps() {
    let clock = ManualClock::new();
    let log =
        SlidingLogLimiter::with_capacity(2, Duration::from_secs(1), 4, clock.clone()).unwrap();
    assert!(log.try_acquire(2).unwrap().is_allowed());
    assert!(!log.try_acquire(1).unwrap().is_allowed());
    log.set_limit(4).unwrap();
    assert!(log.try_acquire(2).unwrap().is_allowed());
    log.set_limit(1).unwrap();
    assert_eq!(log.limit(), 1);
    clock.advance(Duration::from_millis(999));
    assert!(!log.try_acquire(1).unwrap().is_allowed()); // the 4 stamps still count
    clock.advance(Duration::from_millis(1));
    assert!(log.try_acquire(1).unwrap().is_allowed());
    assert_eq!(
        log.set_limit(5),
        Err(ConfigError::LimitTooLarge { limit: 5, max: 4 })
    );
    assert_eq!(log.set_limit(0), Err(ConfigError::ZeroLimit));
}

#[test]
fn bad_input_is_a_clear_error() {
    let clock = ManualClock::new;
    let second = Duration::from_secs(1);
    assert_eq!(
        SlidingLogLimiter::with_clock(0, second, clock()).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        SlidingLogLimiter::with_clock(MAX_SLIDING_LOG_CAPACITY + 1, second, clock()).unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: 4_097,
            max: 4_096
        }
    );
    assert_eq!(
        SlidingLogLimiter::with_capacity(5, second, 4, clock()).unwrap_err(),
        ConfigError::LimitTooLarge { limit: 5, max: 4 }
    );
    assert_eq!(
        SlidingLogLimiter::with_clock(1, Duration::ZERO, clock()).unwrap_err(),
        ConfigError::ZeroPeriod
    );
    assert_eq!(
        SlidingLogLimiter::with_clock(1, Duration::MAX, clock()).unwrap_err(),
        ConfigError::DurationOutOfRange {
            what: "sliding log window",
            value: Duration::MAX,
            min: Duration::from_nanos(1),
            max: Duration::from_nanos(u64::MAX),
        }
    );
    let log = SlidingLogLimiter::with_clock(3, second, clock()).unwrap();
    assert_eq!(log.try_acquire(0).unwrap_err(), AcquireError::ZeroPermits);
    assert_eq!(
        log.try_acquire(4).unwrap_err(),
        AcquireError::ExceedsCapacity {
            requested: 4,
            capacity: 3
        }
    );
    let largest = SlidingLogLimiter::with_clock(MAX_SLIDING_LOG_CAPACITY, second, clock()).unwrap();
    assert!(
        largest
            .try_acquire(MAX_SLIDING_LOG_CAPACITY)
            .unwrap()
            .is_allowed()
    );
    assert!(!largest.try_acquire(1).unwrap().is_allowed());
}
