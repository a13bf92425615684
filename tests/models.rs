//! Property tests: each atomic limiter against a plain sequential model written independently of
//! the packed representation, over random operation/time sequences.

use std::time::Duration;

use floodgate::{
    Anchor, AtomicLimiter, Decision, FixedWindow, Gcra, LeakyBucket, Limiter, ManualClock, Rate,
    TokenBucket,
};
use proptest::prelude::*;

/// A fixed window as the textbook describes it: a start time and a count.
struct WindowModel {
    limit: u64,
    window: u64,
    anchor: Anchor,
    unit: u64,
    start: u64,
    count: u64,
}

impl WindowModel {
    fn acquire(&mut self, now: u64, n: u64) -> Decision {
        match self.anchor {
            Anchor::WallClock => {
                let start = now / self.window * self.window;
                if start > self.start || self.count == 0 {
                    self.start = start;
                    self.count = 0;
                }
            }
            Anchor::FirstRequest => {
                if self.count == 0 || now >= self.start + self.window {
                    self.start = now.div_ceil(self.unit) * self.unit;
                    self.count = 0;
                }
            }
        }
        let until_end = self.start + self.window - now;
        if self.count + n <= self.limit {
            self.count += n;
            Decision::allow(self.limit, self.limit - self.count, until_end)
        } else {
            let reset = if self.count == 0 { 0 } else { until_end };
            Decision::deny(
                self.limit,
                self.limit.saturating_sub(self.count),
                until_end,
                reset,
            )
        }
    }
}

/// A token bucket as the textbook describes it: tokens (kept in nanoseconds of refill, so the
/// model is exact) and the time of the last update.
struct BucketModel {
    capacity: u64,
    interval: u64,
    credit: u64,
    last: u64,
}

impl BucketModel {
    fn acquire(&mut self, now: u64, n: u64) -> Decision {
        let full = self.capacity * self.interval;
        if now > self.last {
            self.credit = (self.credit + (now - self.last)).min(full);
            self.last = now;
        }
        let cost = n * self.interval;
        if self.credit >= cost {
            self.credit -= cost;
            Decision::allow(
                self.capacity,
                self.credit / self.interval,
                full - self.credit,
            )
        } else {
            Decision::deny(
                self.capacity,
                self.credit / self.interval,
                cost - self.credit,
                full - self.credit,
            )
        }
    }
}

fn steps(max_dt: u64, max_n: u32) -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec((0..max_dt, 1..=max_n), 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fixed_window_matches_model(
        limit in 1u32..20,
        window_ms in 1u64..5_000,
        aligned in any::<bool>(),
        start in 0u64..(1 << 50),
        ops in steps(3_000_000_000, 25),
    ) {
        let window = window_ms * 1_000_000;
        let anchor = if aligned { Anchor::WallClock } else { Anchor::FirstRequest };
        let clock = ManualClock::starting_at(start);
        let limiter = AtomicLimiter::with_clock(
            FixedWindow::with_anchor(limit, Duration::from_nanos(window), anchor).unwrap(),
            clock.clone(),
        );
        let shift = (63 - window.leading_zeros()).saturating_sub(16);
        let mut model = WindowModel { limit: limit.into(), window, anchor, unit: 1 << shift, start: 0, count: 0 };
        for (dt, n) in ops {
            clock.advance_nanos(dt);
            let now = clock.now_nanos_for_test();
            match limiter.try_acquire(n) {
                Ok(d) => prop_assert_eq!(d, model.acquire(now, n.into())),
                Err(_) => prop_assert!(n > limit),
            }
        }
    }

    #[test]
    fn buckets_match_model(
        capacity in 1u32..20,
        amount in 1u32..1_000,
        period_ms in 1u64..10_000,
        kind in 0u8..3,
        start in 0u64..(1 << 50),
        ops in steps(500_000_000, 25),
    ) {
        let rate = Rate::new(amount, Duration::from_millis(period_ms));
        let clock = ManualClock::starting_at(start);
        let limiter: Box<dyn Limiter> = match kind {
            0 => Box::new(AtomicLimiter::with_clock(TokenBucket::new(rate, capacity).unwrap(), clock.clone())),
            1 => Box::new(AtomicLimiter::with_clock(LeakyBucket::new(rate, capacity).unwrap(), clock.clone())),
            _ => Box::new(AtomicLimiter::with_clock(Gcra::new(rate, capacity).unwrap(), clock.clone())),
        };
        let interval = rate.nanos_per_permit().unwrap();
        let mut model = BucketModel {
            capacity: capacity.into(),
            interval,
            credit: u64::from(capacity) * interval,
            last: start,
        };
        for (dt, n) in ops {
            clock.advance_nanos(dt);
            let now = clock.now_nanos_for_test();
            match limiter.try_acquire(n) {
                Ok(d) => prop_assert_eq!(d, model.acquire(now, n.into())),
                Err(_) => prop_assert!(n > capacity),
            }
        }
    }
}

trait NowForTest {
    fn now_nanos_for_test(&self) -> u64;
}

impl NowForTest for ManualClock {
    fn now_nanos_for_test(&self) -> u64 {
        floodgate::Clock::now_nanos(self)
    }
}
