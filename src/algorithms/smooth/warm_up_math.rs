//! Guava's `SmoothWarmingUp` math for [`SmoothWarmingUp`](super::SmoothWarmingUp): the
//! interval function and its integral, from the stable interval, warm-up and cold factor.

use std::cell::OnceCell;

use super::StoredPermits;
use super::bursty_fixed::Terms;

/// Guava's `SmoothWarmingUp.doSetRate` quantities for one stable interval. The derived ones
/// (three divisions) are computed on first use: a refusal, or a warm limiter with nothing
/// stored, never needs them.
#[derive(Clone, Debug)]
pub(super) struct WarmingMath {
    interval: f64,
    warmup_micros: f64,
    cold_factor: f64,
    derived: OnceCell<Derived>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Derived {
    pub(super) threshold_permits: f64,
    pub(super) max_permits: f64,
    slope: f64,
}

impl WarmingMath {
    #[inline]
    pub(super) fn new(interval: f64, warmup_micros: f64, cold_factor: f64) -> Self {
        WarmingMath {
            interval,
            warmup_micros,
            cold_factor,
            derived: OnceCell::new(),
        }
    }

    #[inline]
    pub(super) fn derived(&self) -> Derived {
        *self.derived.get_or_init(|| {
            let interval = self.interval;
            let cold_interval = interval * self.cold_factor;
            let threshold_permits = 0.5 * self.warmup_micros / interval;
            let max_permits =
                threshold_permits + 2.0 * self.warmup_micros / (interval + cold_interval);
            let slope = (cold_interval - interval) / (max_permits - threshold_permits);
            Derived {
                threshold_permits,
                max_permits,
                slope,
            }
        })
    }

    #[inline]
    fn permits_to_time(&self, permits: f64, slope: f64) -> f64 {
        self.interval + permits * slope
    }
}

impl StoredPermits for WarmingMath {
    #[inline]
    fn interval(&self) -> f64 {
        self.interval
    }
    /// Remembered per thread (`Terms::memo`): no division per decision.
    #[inline]
    fn limit(&self) -> u64 {
        Terms::memo(self.interval).limit
    }
    #[inline]
    fn full_time(&self) -> f64 {
        self.warmup_micros
    }
    /// Through Guava's own `coolDownInterval = W / maxPermits` double, which follows Guava's
    /// rounding more closely than `stored_time × max / W`.
    #[inline]
    fn permits_of(&self, stored_time: f64) -> f64 {
        if stored_time <= 0.0 {
            0.0
        } else if stored_time >= self.warmup_micros {
            self.derived().max_permits
        } else {
            stored_time / (self.warmup_micros / self.derived().max_permits)
        }
    }
    #[inline]
    fn time_of(&self, permits: f64) -> f64 {
        let max_permits = self.derived().max_permits;
        if permits >= max_permits {
            self.warmup_micros
        } else if permits <= 0.0 {
            0.0
        } else {
            permits * (self.warmup_micros / max_permits)
        }
    }
    /// Guava's `storedPermitsToWaitTime`: the area under the interval function between
    /// `stored − take` and `stored` (a trapezoid above the threshold, a rectangle below).
    #[inline]
    fn wait_for_stored(&self, stored_permits: f64, take: f64) -> i64 {
        let mut take = take;
        let mut micros: i64 = 0;
        if stored_permits <= 0.0 {
            return self.micros(self.interval * take);
        }
        let Derived {
            threshold_permits,
            slope,
            ..
        } = self.derived();
        let above_threshold = stored_permits - threshold_permits;
        if above_threshold > 0.0 {
            let take_above = above_threshold.min(take);
            let length = self.permits_to_time(above_threshold, slope)
                + self.permits_to_time(above_threshold - take_above, slope);
            micros = self.micros(take_above * length / 2.0);
            take -= take_above;
        }
        micros.saturating_add(self.micros(self.interval * take))
    }
    /// Up to three truncations of < 1 µs per request (above the threshold, below it, fresh)
    /// against a cost of at least one stable interval: `I / (I − 3) ≤ 1.001` from `I = 3004` µs
    /// (rates up to about 332 per second).
    const GUAVA_MIN_INTERVAL: f64 = 3004.0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guava_worked_example() {
        // rate 2/s, warm-up 4 s, cold factor 3 (reference A.0).
        let m = WarmingMath::new(500_000.0, 4e6, 3.0);
        let d = m.derived();
        assert_eq!(d.threshold_permits, 4.0);
        assert_eq!(d.max_permits, 8.0);
        assert_eq!(d.slope, 250_000.0);
        // 8 → 4 takes the warm-up period, 4 → 0 takes 2 s.
        assert_eq!(m.wait_for_stored(8.0, 4.0), 4_000_000);
        assert_eq!(m.wait_for_stored(4.0, 4.0), 2_000_000);
        assert_eq!(m.permits_of(4e6), 8.0);
        assert_eq!(m.time_of(5.0), 2.5e6);
    }

    #[test]
    fn zero_warmup_and_tiny_rates_stay_finite() {
        let zero = WarmingMath::new(200_000.0, 0.0, 3.0);
        assert_eq!(zero.permits_of(0.0), 0.0);
        assert_eq!(zero.wait_for_stored(0.0, 0.0), 0);
        let tiny = WarmingMath::new(f64::INFINITY, 4e6, 3.0);
        assert_eq!(tiny.derived().max_permits, 0.0);
        assert_eq!(tiny.permits_of(4e6), 0.0);
    }
}
