//! The exact checker of the real-clock stress (`tests/time_stress.rs`).
//!
//! # What an admission's stamps prove
//!
//! Each admission is recorded with `[lo, hi]`: `hi` is a read of the limiter's *base* clock (the
//! real clock without injected faults) taken right after the call returned, `lo` one taken right
//! before the call, minus the lag the fault clock injected into this call's reads, minus the
//! clock's cross-core slack (TSC skew, 0 for clocks that are one shared counter). The stamps are
//! on the limiter's own timeline, not on `Instant`'s: the guarantees are stated on the limiter's
//! clock, and a TSC clock's calibration drifts from `CLOCK_MONOTONIC` by parts in 10⁴, which over
//! a run would need a slack as large as the bugs sought. (For `MonotonicClock` the timeline *is*
//! `Instant`'s.)
//!
//! A correct limiter decides an admission at some time `e` (its *effective time*) with:
//! * `e ≥ lo`: `e` is at least the call's own reading (a fixed window counts into its own window
//!   or a newer stored one; a bucket decides at `max(reading, floor)`), and that reading was taken
//!   after `lo` up to the injected lag;
//! * `e ≤ hi`: every clock reading that can have reached the decision (its own, a stored window,
//!   a time floor) was taken before the call returned.
//!
//! So whatever the scheduling, every admission's effective time lies in its `[lo, hi]`.
//!
//! # The bounds (sound: a correct limiter never fails them)
//! * **Aligned units** ([`span_excess`]): for `span` consecutive units `[j, j + span)` of
//!   `unit` ns, the admissions whose whole `[lo, hi]` lies in them were decided in them, so their
//!   permits are at most the bound of `span` units: `limit` for `cells` cells of a sliding window
//!   or for one aligned fixed window, `2 × limit` for two aligned windows.
//! * **Anchored windows** ([`window_end_excess`]): an admission's `reset_after` is the end of
//!   the window it was counted in minus `e`, so that end lies in `[lo + reset, hi + reset]`.
//!   Anchored windows are disjoint and at least `window` long, so two ends are at least `window`
//!   apart: admissions whose end intervals all lie in one span shorter than `window` were counted
//!   in one window, at most `limit`.
//! * **Rate** ([`rate_excess`]): for every `x ≤ y`, the admissions with `lo ≥ x` and `hi ≤ y`
//!   were decided in `[x, y]`, so their permits are at most `burst + (y − x) / T`. For GCRA (and
//!   the token and leaky buckets, the same decision): each admission raises the TAT to at least
//!   `max(TAT, e) + n·T`, so after the admissions decided in `[x, y]` the TAT is at least
//!   `x + N·T`, and the last one needed TAT ≤ `e + C·T ≤ y + C·T`: `N ≤ C + (y − x)/T`, exactly.
//!   Checked over all pairs in O(n log n): sweep `y` over the `hi` stamps, and keep for every
//!   candidate `x` (a `lo` stamp) the value `x + T·Σ{n : lo ≥ x, inserted}` in a max segment
//!   tree with range add.
//!
//! With live reconfiguration the bound uses the most permissive configuration the run ever set
//! (largest limit, capacity, rate): whatever was in force during an interval is covered.
//!
//! Every function returns the worst *excess*: admitted minus bound, in permits (≤ 0 passes).
#![allow(dead_code)] // each test binary uses its own part

/// One admission: its stamps on the limiter's timeline, its permits, its `reset_after` in ns.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    pub lo: u64,
    pub hi: u64,
    pub n: u64,
    pub reset_nanos: u64,
}

/// The worst excess over every `span` consecutive aligned units of `unit` ns (see the module
/// doc), and the unit index where it starts. `(−limit, 0)` when no admission is checkable.
pub fn span_excess(admissions: &[Admission], unit: u64, span: u64, limit: u64) -> (i64, u64) {
    spans(
        admissions.iter().map(|a| (a.lo / unit, a.hi / unit, a.n)),
        span,
        limit,
    )
}

/// The worst excess over the anchored windows (see the module doc): spans of 7 eighths of a
/// window of the end estimates hold at most `limit`.
pub fn window_end_excess(admissions: &[Admission], window: u64, limit: u64) -> (i64, u64) {
    let unit = (window / 8).max(1);
    spans(
        admissions.iter().map(|a| {
            (
                a.lo.saturating_add(a.reset_nanos) / unit,
                a.hi.saturating_add(a.reset_nanos) / unit,
                a.n,
            )
        }),
        7,
        limit,
    )
}

/// Admissions as unit ranges `[a, b]`: the largest sum over the ones inside `span` consecutive
/// units, minus `limit`. A range of `span` units or more lies in no span and is skipped (a
/// lagged reading, or a call stalled for long: it proves nothing, which is sound).
fn spans(ranges: impl Iterator<Item = (u64, u64, u64)>, span: u64, limit: u64) -> (i64, u64) {
    let ranges: Vec<(u64, u64, u64)> = ranges.filter(|&(a, b, _)| b - a < span).collect();
    let Some(first) = ranges
        .iter()
        .map(|&(a, b, _)| (b + 1).saturating_sub(span).min(a))
        .min()
    else {
        return (-(limit as i64), 0);
    };
    let last = ranges.iter().map(|&(a, _, _)| a).max().unwrap_or(first);
    // Window starts j with a range inside [j, j + span): b + 1 − span ≤ j ≤ a. A difference
    // array over j, then prefix sums.
    let mut diff = vec![0i64; (last - first + 2) as usize];
    for &(a, b, n) in &ranges {
        let from = (b + 1).saturating_sub(span).max(first);
        diff[(from - first) as usize] += n as i64;
        diff[(a + 1 - first) as usize] -= n as i64;
    }
    let (mut sum, mut worst, mut at) = (0i64, i64::MIN, first);
    for (i, d) in diff.iter().enumerate() {
        sum += d;
        if sum > worst {
            worst = sum;
            at = first + i as u64;
        }
    }
    (worst - limit as i64, at)
}

/// The worst excess over every interval `[x, y]` of `admitted − (burst + (y − x) / T)`, with
/// `T = nanos_per_permit` (see the module doc), in permits, and the `y` where it occurs.
pub fn rate_excess(admissions: &[Admission], burst: u64, nanos_per_permit: u64) -> (f64, u64) {
    if admissions.is_empty() {
        return (-(burst as f64), 0);
    }
    let t = i128::from(nanos_per_permit);
    let mut xs: Vec<u64> = admissions.iter().map(|a| a.lo).collect();
    xs.sort_unstable();
    xs.dedup();
    let mut by_hi: Vec<&Admission> = admissions.iter().collect();
    by_hi.sort_unstable_by_key(|a| a.hi);
    let mut tree = MaxAddTree::new(xs.iter().map(|&x| i128::from(x)).collect());
    let (mut best, mut best_y) = (i128::MIN, 0);
    let mut i = 0;
    while i < by_hi.len() {
        let y = by_hi[i].hi;
        while i < by_hi.len() && by_hi[i].hi == y {
            let a = by_hi[i];
            // Every candidate x ≤ lo now counts this admission.
            let k = xs.partition_point(|&x| x <= a.lo);
            tree.add(0, k, t * i128::from(a.n));
            i += 1;
        }
        let m = xs.partition_point(|&x| x <= y);
        let value = tree.max(0, m) - i128::from(y);
        if value > best {
            best = value;
            best_y = y;
        }
    }
    let excess = best - t * i128::from(burst);
    (excess as f64 / nanos_per_permit as f64, best_y)
}

/// A segment tree over `i128` with range add and range max (both half-open `[from, to)`).
struct MaxAddTree {
    size: usize,
    max: Vec<i128>,
    add: Vec<i128>,
}

impl MaxAddTree {
    fn new(leaves: Vec<i128>) -> Self {
        let size = leaves.len().next_power_of_two();
        let mut max = vec![i128::MIN / 4; 2 * size];
        max[size..size + leaves.len()].copy_from_slice(&leaves);
        for node in (1..size).rev() {
            max[node] = max[2 * node].max(max[2 * node + 1]);
        }
        MaxAddTree {
            size,
            max,
            add: vec![0; 2 * size],
        }
    }

    fn add(&mut self, from: usize, to: usize, value: i128) {
        self.add_in(1, 0, self.size, from, to, value);
    }

    fn add_in(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, value: i128) {
        if to <= lo || hi <= from {
            return;
        }
        if from <= lo && hi <= to {
            self.max[node] += value;
            self.add[node] += value;
            return;
        }
        let mid = (lo + hi) / 2;
        self.add_in(2 * node, lo, mid, from, to, value);
        self.add_in(2 * node + 1, mid, hi, from, to, value);
        self.max[node] = self.add[node] + self.max[2 * node].max(self.max[2 * node + 1]);
    }

    fn max(&self, from: usize, to: usize) -> i128 {
        self.max_in(1, 0, self.size, from, to)
    }

    fn max_in(&self, node: usize, lo: usize, hi: usize, from: usize, to: usize) -> i128 {
        if to <= lo || hi <= from {
            return i128::MIN / 4;
        }
        if from <= lo && hi <= to {
            return self.max[node];
        }
        let mid = (lo + hi) / 2;
        self.add[node]
            + self.max_in(2 * node, lo, mid, from, to).max(self.max_in(
                2 * node + 1,
                mid,
                hi,
                from,
                to,
            ))
    }
}

#[cfg(test)]
mod checker_tests {
    use super::*;

    fn at(lo: u64, hi: u64, n: u64) -> Admission {
        Admission {
            lo,
            hi,
            n,
            reset_nanos: 0,
        }
    }

    /// Brute force over every (x, y) pair of stamps, for the tree's answer.
    fn rate_brute(adm: &[Admission], burst: u64, t: u64) -> f64 {
        let mut best = f64::MIN;
        for x in adm.iter().map(|a| a.lo) {
            for y in adm.iter().map(|a| a.hi).filter(|&y| y >= x) {
                let sum: u64 = adm
                    .iter()
                    .filter(|a| a.lo >= x && a.hi <= y)
                    .map(|a| a.n)
                    .sum();
                best = best.max(sum as f64 - burst as f64 - (y - x) as f64 / t as f64);
            }
        }
        best
    }

    #[test]
    fn the_rate_checker_matches_brute_force() {
        for seed in 1..40u64 {
            let mut x = seed;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let adm: Vec<Admission> = (0..60)
                .map(|_| {
                    let lo = next() % 1000;
                    at(lo, lo + next() % 50, 1 + next() % 3)
                })
                .collect();
            let (tree, _) = rate_excess(&adm, 5, 20);
            assert!((tree - rate_brute(&adm, 5, 20)).abs() < 1e-9, "seed {seed}");
        }
    }

    #[test]
    fn a_burst_beyond_the_bucket_is_found_and_a_paced_one_passes() {
        // 10 permits every 10 ns at 1 permit per ns with burst 10: exactly the bound.
        let paced: Vec<Admission> = (0..100).map(|i| at(i * 10, i * 10, 10)).collect();
        assert_eq!(rate_excess(&paced, 10, 1).0, 0.0);
        let mut burst = paced.clone();
        burst.push(at(500, 500, 3));
        assert_eq!(rate_excess(&burst, 10, 1).0, 3.0);
    }

    #[test]
    fn spans_count_only_ranges_inside_them() {
        // Two admissions of 5 inside unit 3, one straddling 3–4: one window holds 10.
        let adm = [at(30, 39, 5), at(31, 32, 5), at(35, 41, 7)];
        assert_eq!(span_excess(&adm, 10, 1, 10), (0, 3));
        assert_eq!(span_excess(&adm, 10, 2, 10), (7, 3));
        assert_eq!(span_excess(&adm, 10, 1, 9).0, 1);
    }
}
