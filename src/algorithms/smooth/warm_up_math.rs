//! Guava's `SmoothWarmingUp` math for [`SmoothWarmingUp`](super::SmoothWarmingUp): the
//! interval function and its integral, from the stable interval, warm-up and cold factor.
//!
//! # The derived constants are computed once per stable interval
//! Guava's `doSetRate` derives `thresholdPermits`, `maxPermits`, the slope and
//! `coolDownInterval = W / maxPermits` from the stable interval (four divisions), and the
//! [`Decision`](crate::Decision)'s `limit` is one more. They are a pure function of the bits of
//! `(interval, W, cold factor)`, so [`WarmingMath::new`] computes them and a limiter keeps them:
//! for its interval at construction ([`WarmingMath::for_interval`] checks the live interval's
//! bits against them), and per thread for the last other interval asked about
//! ([`WarmingMath::memo`]: a rate changed by `set_rate`). A decision uses the same `f64` values
//! as if it had derived them itself, so a live `set_rate` stays exact whichever copy it reads.

use std::cell::Cell;

use super::{StoredPermits, Ticket, book_general, limit_of, resync, round_micros};

std::thread_local! {
    /// [`WarmingMath::memo`]'s last math, keyed by the bits of its interval, warm-up and cold
    /// factor; starts with an interval of bits no interval has (a NaN).
    static LAST: Cell<(u64, u64, WarmingMath)> = const {
        Cell::new((0, 0, WarmingMath {
            interval: f64::from_bits(u64::MAX),
            warmup_micros: 0.0,
            threshold_permits: 0.0,
            max_permits: 0.0,
            slope: 0.0,
            cool_down: 0.0,
            limit: 1,
            one_micros: 0,
            truncate: false,
            full_wait: 0,
            full_left: 0.0,
            top_wait: None,
        }))
    };
}

/// Guava's `SmoothWarmingUp.doSetRate` quantities for one stable interval, all derived at
/// [`new`](Self::new) (a decision divides only where Guava's integral itself does).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct WarmingMath {
    interval: f64,
    warmup_micros: f64,
    pub(super) threshold_permits: f64,
    pub(super) max_permits: f64,
    slope: f64,
    /// Guava's `coolDownInterval = W / maxPermits`: stored time per stored permit.
    cool_down: f64,
    /// The rate as whole permits per second ([`limit_of`]).
    limit: u64,
    /// One stable interval as booked ([`StoredPermits::micros`]): the cost of one permit below
    /// the threshold.
    one_micros: i64,
    /// Whether costs are truncated as Guava's (`interval ≥ GUAVA_MIN_INTERVAL`), else rounded
    /// up: the test `StoredPermits::micros` makes, once per interval instead of per cost.
    truncate: bool,
    /// The wait of one permit spent from a full (cold) limiter, in whole µs, booked in
    /// [`new`](Self::new) by the steps [`reserve_one`](StoredPermits::reserve_one) would take
    /// ([`one_stored`](Self::one_stored), or the general path for a full store that straddles
    /// the threshold). Unused with a warm-up of 0 (nothing is ever stored).
    full_wait: i64,
    /// The stored time left after that permit.
    full_left: f64,
    /// The wait of every whole permit above the threshold, where they all book the same whole
    /// µs ([`top_wait_of`](Self::top_wait_of)): the trapezoid need not be computed.
    top_wait: Option<i64>,
}

impl WarmingMath {
    /// Guava's `doSetRate` for a stable interval (µs per permit), warm-up `W` (µs) and cold
    /// factor.
    pub(super) fn new(interval: f64, warmup_micros: f64, cold_factor: f64) -> Self {
        let cold_interval = interval * cold_factor;
        let threshold_permits = 0.5 * warmup_micros / interval;
        let max_permits = threshold_permits + 2.0 * warmup_micros / (interval + cold_interval);
        let slope = (cold_interval - interval) / (max_permits - threshold_permits);
        let math = WarmingMath {
            interval,
            warmup_micros,
            threshold_permits,
            max_permits,
            slope,
            cool_down: warmup_micros / max_permits,
            limit: limit_of(interval),
            one_micros: 0,
            truncate: interval >= Self::GUAVA_MIN_INTERVAL,
            full_wait: 0,
            full_left: 0.0,
            top_wait: None,
        };
        let math = WarmingMath {
            one_micros: math.micros(interval),
            ..math
        };
        let math = WarmingMath {
            top_wait: math.top_wait_of(),
            ..math
        };
        // A full limiter's permit, booked once per interval by the steps `reserve_one` would
        // take from a full store (issue 17: the trapezoid and the stored time left were about
        // 50 instructions of a cold admission, `instructions_warming_states cold`). Booked
        // from `nf = now = 0` (no resync), the general path's next free ticket is its wait.
        let (full_wait, full_left) = math
            .one_stored(math.permits_of(warmup_micros))
            .unwrap_or_else(|| {
                let full = Ticket {
                    next_free: 0,
                    stored_time: warmup_micros,
                };
                let booked = book_general(full, 0, 1, &math);
                (booked.next_free, booked.stored_time)
            });
        WarmingMath {
            full_wait,
            full_left,
            ..math
        }
    }

    /// The math of the live `interval`: `base` (a limiter's math, derived at construction) when
    /// `interval` has its bits, else [`memo`](Self::memo)'s.
    #[inline(always)]
    pub(super) fn for_interval(base: &Self, interval: f64, cold_factor: f64) -> Self {
        if base.is_for(interval) {
            *base
        } else {
            Self::memo(interval, base.warmup_micros, cold_factor)
        }
    }

    /// Whether this is the math of `interval` (its bits).
    #[inline(always)]
    pub(super) fn is_for(&self, interval: f64) -> bool {
        interval.to_bits() == self.interval.to_bits()
    }

    /// [`new`](Self::new), remembered per thread for the last `(interval, W, cold factor)` asked
    /// about: exact whoever changed the rate since (a new interval is a miss), no shared write.
    #[cold]
    #[inline(never)]
    pub(super) fn memo(interval: f64, warmup_micros: f64, cold_factor: f64) -> Self {
        let (warmup_bits, cold_bits) = (warmup_micros.to_bits(), cold_factor.to_bits());
        LAST.with(|last| {
            let (w, c, math) = last.get();
            if math.interval.to_bits() == interval.to_bits() && w == warmup_bits && c == cold_bits {
                return math;
            }
            let math = Self::new(interval, warmup_micros, cold_factor);
            last.set((warmup_bits, cold_bits, math));
            math
        })
    }

    #[inline]
    fn permits_to_time(&self, permits: f64) -> f64 {
        self.interval + permits * self.slope
    }

    /// The cost of one whole permit `above` permits above the threshold (`above ≥ 1`): Guava's
    /// trapezoid with `take_above = 1`, unrounded.
    #[inline(always)]
    fn top_cost(&self, above: f64) -> f64 {
        let length = self.permits_to_time(above) + self.permits_to_time(above - 1.0);
        length / 2.0
    }

    /// The whole µs that every permit spent above the threshold books, if they all book the
    /// same: where their costs (from `I` to `cold × I`) round up to one whole µs (with a cold
    /// factor of 3, from about 3·10⁶ permits per second, where each costs under a µs and books
    /// 1), and with a cold factor of 1 (every permit costs one stable interval); never at
    /// Guava's own rates with a cold factor above 1 (the trapezoid then spans thousands of µs
    /// from `I ≥ 3004`).
    ///
    /// Exact: [`top_cost`](Self::top_cost) is non-decreasing in `above` (a product by a slope
    /// that is not negative, sums and a halving, each rounded to nearest, a monotone rounding),
    /// and so is [`micros`](StoredPermits::micros) (a truncation or a rounding up). `above` is
    /// at least 1 (the branch that spends a whole permit above the threshold) and at most
    /// `S − threshold` (rounded), `S` the most stored permits a stored time of `0..=W` decodes
    /// to: `maxPermits` for `W`, `W / coolDown` rounded for the times below it (a division by a
    /// positive cool-down, also monotone). Where the bounds' costs round to the same whole µs,
    /// every cost between them does (`top_wait_is_every_top_permit_s_wait`).
    fn top_wait_of(&self) -> Option<i64> {
        let below_full = self.warmup_micros / self.cool_down;
        let most_stored = if below_full > self.max_permits {
            below_full
        } else {
            self.max_permits
        };
        let most_above = most_stored - self.threshold_permits;
        let (low, high) = (self.top_cost(1.0), self.top_cost(most_above));
        let exact = self.slope >= 0.0
            && self.slope.is_finite()
            && most_above >= 1.0
            && low.is_finite()
            && high.is_finite();
        let wait = self.micros(low);
        (exact && self.micros(high) == wait).then_some(wait)
    }

    /// One permit spent from `stored` permits (those of a stored time above 0, resynced):
    /// its wait in whole µs and the stored time left, in the states
    /// [`reserve_one`](StoredPermits::reserve_one) books itself (`None`: a permit that
    /// straddles the threshold, booked by the general path).
    #[inline(always)]
    fn one_stored(&self, stored: f64) -> Option<(i64, f64)> {
        let above_threshold = stored - self.threshold_permits;
        // Spending one whole stored permit leaves `stored − 1` (none if that was all).
        let left = || {
            if 1.0 >= stored {
                0.0
            } else {
                // `time_of(stored − 1).clamp(0.0, W)` without the steps that cannot apply
                // (6 instructions, issue 17): `stored − 1` is above 0 (`stored > 1`), so
                // `time_of`'s `≤ 0` branch never runs, and its product of a positive count
                // and the cool-down (`W / maxPermits`, not negative) is not below 0, so
                // the clamp's lower bound never applies (a NaN passes both unchanged, as
                // through the clamp's comparisons). Nor the clamp's assertion that `0 ≤ W`.
                let permits = stored - 1.0;
                let time = if permits >= self.max_permits {
                    self.warmup_micros
                } else {
                    permits * self.cool_down
                };
                if time > self.warmup_micros {
                    self.warmup_micros
                } else {
                    time
                }
            }
        };
        Some(if above_threshold >= 1.0 {
            // The trapezoid of one permit above the threshold (`take_above = 1`).
            let wait = match self.top_wait {
                Some(wait) => wait,
                None => self.micros(self.top_cost(above_threshold)),
            };
            (wait, left())
        } else if above_threshold > 0.0 {
            return None;
        } else if stored >= 1.0 {
            // The rectangle of one stored permit: one stable interval.
            (self.one_micros, left())
        } else {
            // `stored` (< 1) from stored time, the rest fresh: two truncations, as Guava.
            let wait = add_waits(
                self.micros(self.interval * stored),
                self.micros((1.0 - stored) * self.interval),
            );
            (wait, 0.0)
        })
    }
}

impl StoredPermits for WarmingMath {
    #[inline]
    fn interval(&self) -> f64 {
        self.interval
    }
    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }
    #[inline]
    fn full_time(&self) -> f64 {
        self.warmup_micros
    }
    /// The default's rounding, with its interval test made once in [`WarmingMath::new`]
    /// (`micros_rounds_as_the_interval_test`).
    #[inline]
    fn micros(&self, cost: f64) -> i64 {
        round_micros(cost, self.truncate)
    }
    /// Through Guava's own `coolDownInterval = W / maxPermits` double, which follows Guava's
    /// rounding more closely than `stored_time × max / W`.
    #[inline]
    fn permits_of(&self, stored_time: f64) -> f64 {
        if stored_time <= 0.0 {
            0.0
        } else if stored_time >= self.warmup_micros {
            self.max_permits
        } else {
            stored_time / self.cool_down
        }
    }
    #[inline]
    fn time_of(&self, permits: f64) -> f64 {
        if permits >= self.max_permits {
            self.warmup_micros
        } else if permits <= 0.0 {
            0.0
        } else {
            permits * self.cool_down
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
        let above_threshold = stored_permits - self.threshold_permits;
        if above_threshold > 0.0 {
            let take_above = above_threshold.min(take);
            let length = self.permits_to_time(above_threshold)
                + self.permits_to_time(above_threshold - take_above);
            micros = self.micros(take_above * length / 2.0);
            take -= take_above;
        }
        micros.saturating_add(self.micros(self.interval * take))
    }
    /// One permit, in the states a limiter is in: nothing stored (a limiter kept at its rate
    /// and booked ahead), less than one permit stored below the threshold (a busy limiter: the
    /// idle µs since the last booking fell due), one whole permit below the threshold, or one
    /// whole permit above it (a cold limiter). Each takes the general path's steps with the
    /// ones that add or multiply by 0 or 1 left out (the same `f64` operations, the same
    /// truncations), so it books to the bit what [`reserve_general`](super::reserve_general) books
    /// (`one_permit_books_as_the_general_path`); a permit that straddles the threshold goes
    /// there. A full limiter's permit is booked once per interval in [`new`](WarmingMath::new)
    /// (a stored time at or above `W` is `maxPermits` permits, so the steps book the same from
    /// all of them); below `W`, `permits_of` is the division alone.
    #[inline(always)]
    fn reserve_one(&self, ticket: Ticket, now: i64) -> (Ticket, i64) {
        let synced = resync(ticket, now, self.warmup_micros);
        let stored_time = synced.stored_time;
        let (wait, stored_time) = if stored_time <= 0.0 {
            // One fresh permit (the stored part, `micros(I × 0)`, is 0).
            (self.one_micros, 0.0)
        } else if stored_time >= self.warmup_micros {
            // A full limiter (a stored time is at most `W`, so this one is `W`): the permit
            // booked once in `new`.
            (self.full_wait, self.full_left)
        } else {
            // `permits_of` of a stored time in `0 < t < W` (issue 17: its test of `W` again
            // was 2 instructions of every other admission with anything stored).
            match self.one_stored(stored_time / self.cool_down) {
                Some(booked) => booked,
                None => return (book_general(ticket, now, 1, self), synced.next_free),
            }
        };
        let next = Ticket {
            next_free: add_waits(synced.next_free, wait),
            stored_time,
        };
        (next, synced.next_free)
    }
    /// Up to three truncations of < 1 µs per request (above the threshold, below it, fresh)
    /// against a cost of at least one stable interval: `I / (I − 3) ≤ 1.001` from `I = 3004` µs
    /// (rates up to about 332 per second).
    const GUAVA_MIN_INTERVAL: f64 = 3004.0;
}

/// `a.saturating_add(wait)` for a `wait` that is not negative (every wait is a cost in whole
/// µs: `micros` of a cost that is not negative, or NaN → 0): only the upper end can overflow,
/// so one overflow test (3 instructions an admission fewer than `saturating_add`'s two-sided
/// one, issue 17). The same value as `saturating_add` whenever `wait ≥ 0`
/// (`add_waits_is_saturating_add_for_waits_that_are_not_negative`).
#[inline(always)]
fn add_waits(a: i64, wait: i64) -> i64 {
    a.checked_add(wait).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::smooth::reserve_general;

    /// `add_waits` is `saturating_add` for every wait that is not negative, at the ends of the
    /// range and around the overflow.
    #[test]
    fn add_waits_is_saturating_add_for_waits_that_are_not_negative() {
        let values = [
            i64::MIN,
            i64::MIN + 1,
            -(1 << 40),
            -1,
            0,
            1,
            1 << 40,
            i64::MAX - 1,
            i64::MAX,
        ];
        for a in values {
            for wait in values.into_iter().filter(|&w| w >= 0) {
                assert_eq!(add_waits(a, wait), a.saturating_add(wait), "{a} + {wait}");
            }
        }
    }
    use proptest::prelude::*;

    #[test]
    fn guava_worked_example() {
        // rate 2/s, warm-up 4 s, cold factor 3 (reference A.0).
        let m = WarmingMath::new(500_000.0, 4e6, 3.0);
        assert_eq!(m.threshold_permits, 4.0);
        assert_eq!(m.max_permits, 8.0);
        assert_eq!(m.slope, 250_000.0);
        assert_eq!((m.cool_down, m.limit), (500_000.0, 2));
        // 8 → 4 takes the warm-up period, 4 → 0 takes 2 s.
        assert_eq!(m.wait_for_stored(8.0, 4.0), 4_000_000);
        assert_eq!(m.wait_for_stored(4.0, 4.0), 2_000_000);
        assert_eq!(m.permits_of(4e6), 8.0);
        assert_eq!(m.time_of(5.0), 2.5e6);
    }

    /// The rounding with the interval test made once is the default's, which tests the
    /// interval per cost, either side of `GUAVA_MIN_INTERVAL` and at the intervals' ends.
    #[test]
    fn micros_rounds_as_the_interval_test() {
        let intervals = [
            f64::INFINITY,
            1e300,
            3004.0_f64.next_up(),
            3004.0,
            3004.0_f64.next_down(),
            1.0,
            1e-300,
        ];
        let costs = [
            0.0,
            0.5,
            1.0,
            3.5,
            3004.0,
            1e18,
            9.3e18,
            f64::INFINITY,
            f64::NAN,
            -1.5,
        ];
        let mut truncated = 0;
        for interval in intervals {
            let math = WarmingMath::new(interval, 4e6, 3.0);
            let truncate = interval >= WarmingMath::GUAVA_MIN_INTERVAL;
            truncated += usize::from(truncate);
            for cost in costs {
                assert_eq!(
                    math.micros(cost),
                    round_micros(cost, truncate),
                    "{interval} {cost}"
                );
            }
        }
        assert_eq!(truncated, 4);
    }

    #[test]
    fn zero_warmup_and_tiny_rates_stay_finite() {
        let zero = WarmingMath::new(200_000.0, 0.0, 3.0);
        assert_eq!(zero.permits_of(0.0), 0.0);
        assert_eq!(zero.wait_for_stored(0.0, 0.0), 0);
        let tiny = WarmingMath::new(f64::INFINITY, 4e6, 3.0);
        assert_eq!(tiny.max_permits, 0.0);
        assert_eq!(tiny.permits_of(4e6), 0.0);
    }

    /// Issue 17: a full limiter's permit, booked once in `new`, is what the general path books
    /// from a full store, to the bit, whichever steps booked it (`one_stored`, or the general
    /// path for a full store straddling the threshold); and `reserve_one` from a full store
    /// books it.
    /// `reserve_one` books one permit from `ticket` at `now` as the general path (Guava's
    /// steps) books it, to the bit: the start, the next free ticket and the stored time left.
    fn assert_books_as_the_general_path(math: &WarmingMath, ticket: Ticket, now: i64, case: &str) {
        let (one, one_start) = math.reserve_one(ticket, now);
        let (general, general_start) = reserve_general(ticket, now, 1, math);
        assert_eq!(one_start, general_start, "{case}");
        assert_eq!(one.next_free, general.next_free, "{case}");
        assert_eq!(
            one.stored_time.to_bits(),
            general.stored_time.to_bits(),
            "{case}"
        );
    }

    #[test]
    fn a_full_limiter_s_permit_is_booked_once_as_the_steps_book_it() {
        // (interval, W, cold factor, whether the full store straddles the threshold)
        for (interval, warmup, cold, straddles) in [
            (10_000.0, 1e6, 3.0, false),   // instructions_warming_states: 100/s, 1 s
            (0.001, 10_000.0, 3.0, false), // instructions_smooth allow: 10⁹/s, 10 ms
            (500_000.0, 4e6, 3.0, false),  // Guava's worked example
            (200_000.0, 4e6, 1.0, false),  // a flat limiter
            (1e6, 5e5, 1.0, true),         // full: 0.75 permits, 0.5 above the threshold
            (1e6, 1.5e6, 3.0, true),       // full: 1.5 permits, 0.75 above the threshold
            (200_000.0, 0.0, 3.0, false),  // nothing to store (its full permit unused)
            (f64::INFINITY, 4e6, 3.0, false), // Guava's Double.MIN_VALUE: nothing above
        ] {
            let math = WarmingMath::new(interval, warmup, cold);
            let case = format!("{math:?}");
            assert_eq!(
                math.one_stored(math.max_permits).is_none(),
                straddles,
                "{case}"
            );
            let full = Ticket {
                next_free: 0,
                stored_time: warmup,
            };
            let booked = book_general(full, 0, 1, &math);
            assert_eq!(
                (math.full_wait, math.full_left.to_bits()),
                (booked.next_free, booked.stored_time.to_bits()),
                "{case}"
            );
            for now in [0, 1, 1 << 30] {
                assert_books_as_the_general_path(&math, full, now, &format!("{case} at {now}"));
            }
        }
    }

    /// The math a limiter uses for a live interval is the one derived from that interval's
    /// bits, whichever copy answers: the construction-time `base`, the thread's memo (hit or
    /// miss), across limiters with other warm-ups and cold factors.
    #[test]
    fn every_copy_of_the_math_is_the_derived_one() {
        let base = WarmingMath::new(500_000.0, 4e6, 3.0);
        for (interval, warmup, cold) in [
            (500_000.0, 4e6, 3.0),
            (250_000.0, 4e6, 3.0),
            (250_000.0, 4e6, 3.0),
            (250_000.0, 1e6, 3.0),
            (250_000.0, 4e6, 2.5),
            (0.001, 4e6, 3.0),
            (f64::INFINITY, 4e6, 3.0),
        ] {
            let base = WarmingMath {
                warmup_micros: warmup,
                ..base
            };
            let fresh = WarmingMath::new(interval, warmup, cold);
            let used = WarmingMath::for_interval(&base, interval, cold);
            // Debug: equal floats print alike, and a NaN slope (interval +∞) prints as NaN.
            let fresh = format!("{fresh:?}");
            assert_eq!(format!("{used:?}"), fresh, "{interval} {warmup} {cold}");
            let memo = WarmingMath::memo(interval, warmup, cold);
            assert_eq!(format!("{memo:?}"), fresh);
        }
    }

    /// The stored time of a state: empty, full, a fraction of a permit, whole permits near the
    /// threshold, or anywhere in between.
    fn stored_time(math: WarmingMath) -> impl Strategy<Value = f64> {
        let (w, cool_down, threshold) =
            (math.warmup_micros, math.cool_down, math.threshold_permits);
        prop_oneof![
            Just(0.0),
            Just(w),
            // One ulp below full: divided, not the kept full permit.
            Just(w.next_down()),
            (0.0f64..1.0).prop_map(move |f| f * w),
            // Exactly whole permits around the threshold (`threshold + 1`: the least stored
            // count whose permit is booked above it).
            (-3i32..4).prop_map(move |k| (threshold + f64::from(k)) * cool_down),
            (0.0f64..1.0).prop_map(move |f| (f * cool_down).min(w)),
            (-3i32..4, 0.0f64..1.0)
                .prop_map(move |(k, f)| { (threshold + f64::from(k) + f) * cool_down }),
        ]
        // In `0..=W` (a warm-up of 0 has a NaN cool-down and holds nothing).
        .prop_map(move |t| if t >= 0.0 { t.min(w) } else { 0.0 })
    }

    /// A math and a state: rates from 10⁻³/s to 10¹²/s (both sides of Guava's truncation),
    /// warm-ups from 0 to 10 s (a few µs included: a full store below one permit), cold factors
    /// 1 to 10 and within 10⁻³ of 1 (at a truncating rate, where every permit above the
    /// threshold can book the same whole µs with a slope above 0: `top_wait`), at or below
    /// the threshold included.
    fn math_and_state() -> impl Strategy<Value = (WarmingMath, Ticket, i64)> {
        let rate = prop_oneof![
            Just(2.0),
            Just(1e9),
            1e-3f64..0.5,
            0.5f64..400.0,
            400.0f64..1e9,
            1e9f64..1e12
        ];
        let warmup =
            prop_oneof![Just(0.0), Just(4e6), 1.0f64..10.0, 1.0f64..1e7].prop_map(f64::floor);
        let cold = prop_oneof![
            Just(3.0),
            Just(1.0),
            1.0f64..10.0,
            (0.0f64..1e-3).prop_map(|d| 1.0 + d)
        ];
        (rate, warmup, cold)
            .prop_map(|(rate, warmup, cold)| WarmingMath::new(1e6 / rate, warmup, cold))
            .prop_flat_map(|math| {
                let ticket =
                    (0i64..1 << 40, stored_time(math)).prop_map(|(next_free, stored_time)| {
                        Ticket {
                            next_free,
                            stored_time,
                        }
                    });
                // Now: before the booking (in debt), at it, or after it by up to 2 W.
                let lead = prop_oneof![
                    Just(0i64),
                    -(1i64 << 30)..0,
                    0i64..=(2.0 * math.warmup_micros) as i64 + 2
                ];
                (Just(math), ticket, lead)
            })
            .prop_map(|(math, ticket, lead)| (math, ticket, ticket.next_free + lead))
    }

    /// Review sweep: `reserve_one` books what the general path books at edge values the
    /// proptest's ranges leave out: intervals from a subnormal rate's `+∞` down to 10⁻³⁰⁰ µs
    /// and either side of Guava's truncation bound and of a year, warm-ups up to 2⁵² µs, cold
    /// factors 1 to 10⁶, stored times at 0, a subnormal, one ulp either side of the threshold
    /// and of the whole permits around it, at `W` and just below, and `now` far behind or
    /// far past the booking.
    #[test]
    fn one_permit_books_as_the_general_path_at_edge_values() {
        let intervals = [
            f64::INFINITY,
            1e300,
            3.2e13,
            31_536_000_000_001.0,
            31_536_000_000_000.0,
            3004.0,
            3_003.999_999_999_999_5,
            1.0,
            0.5,
            1e-300,
        ];
        let warmups = [0.0, 1.0, 3.0, 4e6, 1e13, (1u64 << 52) as f64];
        let colds = [1.0, 1.000_000_000_000_000_2, 3.0, 10.0, 1e6];
        let starts = [0i64, 1 << 40, -(1 << 40), i64::MAX];
        let leads = [0i64, 1, -1, 1 << 20, -(1 << 20), 1 << 50, -(1 << 50)];
        let mut compared = 0u64;
        for interval in intervals {
            for warmup in warmups {
                for cold in colds {
                    let math = WarmingMath::new(interval, warmup, cold);
                    let (w, cd, th) = (math.warmup_micros, math.cool_down, math.threshold_permits);
                    let mut times = vec![0.0, f64::from_bits(1), w, w.next_down(), w * 0.5];
                    for k in -2i32..3 {
                        let t = (th + f64::from(k)) * cd;
                        times.extend([t, t.next_up(), t.next_down()]);
                    }
                    for t in times {
                        if !(t >= 0.0 && t <= w) {
                            continue;
                        }
                        for start in starts {
                            for lead in leads {
                                let ticket = Ticket {
                                    next_free: start,
                                    stored_time: t,
                                };
                                let Some(now) = start.checked_add(lead) else {
                                    continue;
                                };
                                let case = format!("{math:?} {ticket:?} at {now}");
                                assert_books_as_the_general_path(&math, ticket, now, &case);
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 10_000, "{compared} states compared");
    }

    /// Issue 17: where `top_wait_of` answers, it is the wait of every whole permit above the
    /// threshold: at the bounds of the proof and at random stored times above the threshold, at
    /// rates around the one from which a cold permit costs under a µs; it answers for the
    /// allow row of `instructions_smooth` (10⁹/s, 10 ms) and a flat limiter, not at Guava's
    /// rates with a cold factor above 1.
    #[test]
    fn top_wait_is_every_top_permit_s_wait() {
        assert_eq!(WarmingMath::new(0.001, 10_000.0, 3.0).top_wait, Some(1));
        assert_eq!(WarmingMath::new(10_000.0, 1e6, 3.0).top_wait, None);
        // A flat limiter (cold factor 1): every permit costs one stable interval.
        assert_eq!(WarmingMath::new(3004.0, 1e6, 1.0).top_wait, Some(3004));
        let mut seed = 17u64;
        let mut unit = || {
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut answered, mut checked) = (0, 0);
        for _ in 0..3_000 {
            // Intervals from 10⁻³ to 1 µs (rates 10⁶ to 10⁹ per second), warm-ups from 1 µs to
            // 10 s, cold factors 1 to 10.
            let interval = 10f64.powf(-3.0 * unit());
            let warmup = (1.0 + 1e7 * unit()).floor();
            let cold = 1.0 + 9.0 * unit();
            let math = WarmingMath::new(interval, warmup, cold);
            let Some(wait) = math.top_wait else { continue };
            answered += 1;
            let mut times = vec![warmup, warmup.next_down()];
            let first_above = (math.threshold_permits + 1.0) * math.cool_down;
            times.extend([first_above, first_above.next_up(), first_above.next_down()]);
            times.extend((0..20).map(|_| first_above + (warmup - first_above) * unit()));
            for stored_time in times {
                if !(stored_time > 0.0 && stored_time <= warmup) {
                    continue;
                }
                let above = math.permits_of(stored_time) - math.threshold_permits;
                if above >= 1.0 {
                    let case = format!("{math:?} at {stored_time}");
                    assert_eq!(math.micros(math.top_cost(above)), wait, "{case}");
                    let full = Ticket {
                        next_free: 5,
                        stored_time,
                    };
                    let (one, _) = math.reserve_one(full, 5);
                    let (general, _) = reserve_general(full, 5, 1, &math);
                    assert_eq!(one.next_free, general.next_free, "{case}");
                    checked += 1;
                }
            }
        }
        assert!(answered > 500 && checked > 10_000, "{answered} {checked}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// `reserve_one` books to the bit what the general path books for one permit, in every
        /// state: empty, a fraction below the threshold, whole permits below it, straddling it,
        /// above it, full, and in debt (no resync).
        #[test]
        fn one_permit_books_as_the_general_path((math, ticket, now) in math_and_state()) {
            let (one, start) = math.reserve_one(ticket, now);
            let (general, general_start) = reserve_general(ticket, now, 1, &math);
            prop_assert_eq!(start, general_start);
            prop_assert_eq!(one.next_free, general.next_free, "{:?} {:?} at {}", math, ticket, now);
            prop_assert_eq!(
                one.stored_time.to_bits(),
                general.stored_time.to_bits(),
                "{:?} {:?} at {}", math, ticket, now
            );
        }
    }
}
