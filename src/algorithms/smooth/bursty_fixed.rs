//! [`SmoothBursty`](super::SmoothBursty)'s decision on a finite word, in the word's own fixed
//! point (2⁻¹² µs): the one decision both the short path and the general engine run.
//!
//! # Stored permits are spent in integer arithmetic
//! A free limiter (`V ≤ now`) holds `stored = min(now − V, W)` of stored time. A request whose
//! stored permits cover it (`n · I ≤ stored`, `I` the stable interval) costs nothing and leaves
//! `stored − n · I`: the new word is `max(V, now − W) + n · I`, one multiplication and one
//! addition on integers (the virtual time of GCRA). `I` is held in fixed point with 32 more
//! fractional bits ([`Terms::cost`]), and the cost of a request, `n · I`, is rounded **up** to
//! 2⁻¹² µs once per request (not once per permit: at 10⁹ permits per second a permit is 4.096
//! units, and rounding each up to 5 would spend stored permits 22 % short). Guava spends
//! `storedPermits -= n` in `double`; the two agree to within 2⁻¹¹ µs per request (see `tests`),
//! far below Guava's own `(long)` truncation of every booking.
//!
//! # Bookings keep Guava's `double` math
//! A request that books fresh permits (stored permits do not cover it) computes its cost exactly
//! as Guava does: `(long)((n − stored / I) · I)` with `stored / I` in `double`, so the waits of
//! Guava's scenarios come out to the microsecond (`tests/guava_conformance.rs`).
//!
//! # `remaining` without a division
//! An admission's `remaining` is the stored time left in units of [`Terms::permit_fixed`]
//! ([`Decision`] divides only when asked): whole stored permits, exactly.

use std::cell::Cell;

use super::bursty_word::{BurstyCodec, FRACTION_BITS, FRACTION_MASK, NEVER};
use super::{MAX_BOOKING_MICROS, Outcome, f64_to_u64, limit_of, micros_to_nanos, round_micros};
use crate::decision::{Answer, at_least_one};

std::thread_local! {
    /// [`Terms::memo`]'s `[interval bits, limit, permit_whole, permit_frac, permit_fixed]`;
    /// starts at bits no interval has (a NaN).
    static LAST: Cell<[u64; 5]> = const { Cell::new([u64::MAX, 0, 1, 0, 1]) };
}

/// The fractional bits of [`Terms::permit_frac`] (below the word's 2⁻¹² µs).
const WIDE_BITS: u32 = 32;

/// What a decision needs of the stable interval: a pure function of its bits, computed once per
/// interval ([`Terms::memo`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Terms {
    /// µs per fresh permit (Guava's `stableIntervalMicros`).
    pub(super) interval: f64,
    /// The rate as whole permits per second ([`Decision`]'s `limit`).
    pub(super) limit: u64,
    /// One stored permit in 2⁻¹² µs, whole part: `⌊I · 2¹²⌋`, saturating (an interval of `+∞`
    /// is `u64::MAX`).
    permit_whole: u64,
    /// The rest of it in 2⁻⁴⁴ µs, rounded up: `⌈(I · 2¹² − permit_whole) · 2³²⌉ ≤ 2³²` (at
    /// least 1 where `permit_whole` is 0, so that a permit never costs nothing).
    permit_frac: u64,
    /// One stored permit in 2⁻¹² µs, rounded up: [`cost(1)`](Self::cost), saturating. The unit
    /// of an admission's `remaining`.
    pub(super) permit_fixed: u64,
}

/// Guava's truncation is kept from this stable interval up (µs): one truncation of < 1 µs and
/// one stored-time rounding of < 2⁻¹¹ µs per request, against a cost of at least one interval:
/// `I / (I − 1.000489) ≤ 1.001` from `I = 1002` µs (rates up to about 998 per second).
pub(super) const GUAVA_MIN_INTERVAL: f64 = 1002.0;

impl Terms {
    /// The terms of a stable interval (µs per permit, > 0, or `+∞`).
    pub(super) fn of(interval: f64) -> Self {
        // `× 2¹²` is exact; `as` saturates (`+∞` → `u64::MAX`).
        let scaled = interval * (1u64 << FRACTION_BITS) as f64;
        let permit_whole = f64_to_u64(scaled);
        // From 2⁵² on an `f64` has no fraction (and `+∞ − +∞` would be a NaN).
        let permit_frac = if scaled < (1u64 << 52) as f64 {
            // Exact: `scaled − ⌊scaled⌋` (same binade or smaller), `× 2³²` (a power of two).
            let frac = ((scaled - permit_whole as f64) * (1u64 << WIDE_BITS) as f64).ceil() as u64;
            frac.max(u64::from(permit_whole == 0))
        } else {
            0
        };
        Terms {
            interval,
            limit: limit_of(interval),
            permit_whole,
            permit_frac,
            permit_fixed: permit_whole.saturating_add(u64::from(permit_frac != 0)),
        }
    }

    /// The cost of `n` permits from stored time, in 2⁻¹² µs: `n · I · 2¹²` rounded up once (to
    /// within the 2⁻⁴⁴ µs of `permit_frac` per permit, below one unit for any `n` < 2³²);
    /// `None` past `u64` (more than any stored time, < 2⁶³).
    #[inline]
    pub(super) fn cost(&self, n: u32) -> Option<u64> {
        if n == 1 {
            // The common request, remembered (the same value: see `tests`).
            return Some(self.permit_fixed);
        }
        self.cost_of_many(u64::from(n))
    }

    /// [`cost`](Self::cost) from the wide interval, for `n` < 2³².
    #[inline]
    fn cost_of_many(&self, n: u64) -> Option<u64> {
        // `n · permit_frac ≤ (2³² − 1) · 2³²`: no overflow, nor with the rounding added.
        let frac = (n * self.permit_frac + ((1 << WIDE_BITS) - 1)) >> WIDE_BITS;
        n.checked_mul(self.permit_whole)?.checked_add(frac)
    }

    /// [`Terms::of`], its costly parts (`limit`: a division; `permit_fixed`: conversions)
    /// remembered per thread for the last interval asked about: a pure function of the
    /// interval's bits, so the memo is exact whoever changed the rate since (a new interval is
    /// a miss), and it costs no shared write.
    #[inline]
    pub(super) fn memo(interval: f64) -> Self {
        let bits = interval.to_bits();
        let mut last = LAST.with(Cell::get);
        if last[0] != bits {
            // Read back from the cell: a `Terms` returned by the call would be passed on the
            // stack (and copied there on a hit as well).
            Self::remember(interval);
            last = LAST.with(Cell::get);
        }
        let [_, limit, permit_whole, permit_frac, permit_fixed] = last;
        Terms {
            interval,
            limit,
            permit_whole,
            permit_frac,
            permit_fixed,
        }
    }

    /// The miss of [`memo`](Self::memo), out of line: remembers the terms of `interval`.
    #[cold]
    #[inline(never)]
    fn remember(interval: f64) {
        let terms = Terms::of(interval);
        LAST.with(|last| {
            last.set([
                interval.to_bits(),
                terms.limit,
                terms.permit_whole,
                terms.permit_frac,
                terms.permit_fixed,
            ]);
        });
    }

    /// Whether booked costs are truncated as Guava's `(long)` (else rounded up; see
    /// [`GUAVA_MIN_INTERVAL`]).
    #[inline]
    pub(super) fn truncate(&self) -> bool {
        self.interval >= GUAVA_MIN_INTERVAL
    }

    /// A booked cost in whole µs: Guava's `(long)` truncation, or rounded up
    /// ([`truncate`](Self::truncate)).
    #[inline]
    fn micros(&self, cost: f64) -> i64 {
        round_micros(cost, self.truncate())
    }
}

/// Guava's `tryAcquire(n, timeout)` (`timeout: Some(µs)`) or `reserve(n)` (`None`) on the
/// finite word `value` (below [`NEVER`], rate finite) at `now` (µs, `0..=max_micros`), whose
/// fixed point `(now + offset) · 2¹²` is `now_fixed`. The outcome's `next` is the value to
/// publish (no ∞ bit); `None` for a denial or a booking refused for its length.
///
/// `judge_many`: a refusal in debt of `n > 1` permits is judged as booked when the debt is paid
/// ([`refusal_of_many`]); a caller passing `false` must not answer such a refusal itself.
///
/// `terms` gives the interval's [`Terms`] (loading the interval after the word): called only
/// where the answer needs them, so a refusal answered as a `bool` loads none (issue 17: the
/// interval's load and the memo's check were 5 of a refusal's instructions).
#[inline(always)]
#[allow(clippy::too_many_arguments)] // each a plain value the callers hold; a struct would be built per call
pub(super) fn decide_finite<A: Answer>(
    codec: &BurstyCodec,
    value: u64,
    now: i64,
    now_fixed: u64,
    n: u32,
    timeout: Option<i64>,
    judge_many: bool,
    terms: impl FnOnce() -> Terms,
) -> Outcome<u64, A> {
    if value > now_fixed {
        // In debt: `nf − now` whole µs (`V` is whole µs unless a lagging clock read it: rounded
        // up, as `BurstyCodec::decode`), nothing stored. Both < 2⁵² (written so that no step
        // overflows even for a word with the ∞ bit, which a short path may decide on before it
        // looks at the bit: a refusal it then discards).
        let debt = (((value - now_fixed - 1) >> FRACTION_BITS) + 1) as i64;
        if timeout.is_some_and(|timeout| debt > timeout) {
            // A request of more than one permit is judged first as it would be booked when
            // the wait ends, as `refusal` does (one permit never books more than a year), unless
            // the caller does not `judge_many` (the short path, which sends such a refusal to
            // the engine: the check here cost its `try_acquire` 39 to 45 instructions a call,
            // `instructions_smooth`). Not on a word at rate ∞ or *never*.
            if judge_many && n != 1 && value < NEVER {
                return refusal_of_many(codec, now, debt, n, terms());
            }
            // Guava's `canAcquire` fails (`nf − timeout > now`): nothing written. The reset adds
            // a whole refill, `⌈W⌉ = offset`. The nanoseconds cannot overflow (< 2⁵² µs).
            let retry = debt as u64;
            let reset = retry + codec.offset as u64;
            let limit = if A::REPORTS_TERMS { terms().limit } else { 0 };
            return Outcome {
                next: None,
                decision: A::denied(limit, 0, 1, at_least_one(retry * 1000), reset * 1000),
                wait_micros: 0,
                refused_booking: None,
            };
        }
        // Every permit fresh, booked after the debt: Guava's `(long)(n · I)`.
        let terms = terms();
        let cost = f64::from(n) * terms.interval;
        return book(codec, now, debt, terms.micros(cost), &terms);
    }
    let terms = terms();
    // Free: `nf = now` after the resync, `stored` the idle time (capped).
    let stored = (now_fixed - value).min(codec.full_fixed);
    // A product past `u64` is more than any stored time (< 2⁶³).
    let covered = terms.cost(n).filter(|&cost| cost <= stored);
    if let Some(cost) = covered {
        // Spent from stored permits only: free, nothing booked. `nf = now`: the word's base is
        // `now_fixed`, less the stored time left (≤ `now_fixed − value`, so no underflow).
        let left = stored - cost;
        // Time until full again: the missing stored time, in whole µs rounded up (< 2⁵² µs).
        let refill = (codec.full_fixed - left + FRACTION_MASK) >> FRACTION_BITS;
        return Outcome {
            next: Some(now_fixed - left),
            decision: A::allowed(terms.limit, left, terms.permit_fixed, refill * 1000),
            wait_micros: 0,
            refused_booking: None,
        };
    }
    // Every stored permit spent, the rest booked fresh, in Guava's `double` math:
    // `(long)((n − stored / I) · I)`. `stored` ≤ `full_fixed` < 2⁶³: the signed conversion is
    // the same value in one instruction. Not covered by its rounded-up cost, a request may still
    // be covered in `double` (by less than a unit): it books nothing (`fresh` ≥ 0), as a booking
    // of a negative cost would hand back stored time.
    let stored_time = stored as i64 as f64 / (1u64 << FRACTION_BITS) as f64;
    let fresh = (f64::from(n) - stored_time / terms.interval).max(0.0);
    book(codec, now, 0, terms.micros(fresh * terms.interval), &terms)
}

/// [`decide_finite`]'s refusal in debt (`debt` µs) of `n > 1` permits: as booked when the debt
/// is paid (every permit fresh, Guava's `(long)(n · I)`), a booking longer than a year is the
/// refusal for its length, as [`refusal`](super::refusal) judges it (issue 17: it was a
/// `retry_after` after which the same request got the error); otherwise the plain refusal.
#[cold]
#[inline(never)]
fn refusal_of_many<A: Answer>(
    codec: &BurstyCodec,
    now: i64,
    debt: i64,
    n: u32,
    terms: Terms,
) -> Outcome<u64, A> {
    // Booked as `decide_finite` books it after the debt under a covering timeout: only its
    // refusal for its length is kept (the word it would write is not).
    let booked = book(
        codec,
        now,
        debt,
        terms.micros(f64::from(n) * terms.interval),
        &terms,
    );
    if booked.refused_booking.is_some() {
        return booked;
    }
    let retry = debt as u64;
    let reset = retry + codec.offset as u64;
    Outcome {
        next: None,
        decision: A::denied(terms.limit, 0, 1, at_least_one(retry * 1000), reset * 1000),
        wait_micros: 0,
        refused_booking: None,
    }
}

/// A booking of `wait` µs after a debt of `debt` µs (`nf = now + debt`): the word, and the
/// admission (nothing stored is left), or the refusal of a booking longer than a year.
#[inline(always)]
fn book<A: Answer>(
    codec: &BurstyCodec,
    now: i64,
    debt: i64,
    wait: i64,
    terms: &Terms,
) -> Outcome<u64, A> {
    if wait > MAX_BOOKING_MICROS && terms.interval.is_finite() {
        // One request may not book more than a year: beyond it, a single call could push the
        // limiter past its time range (never again) and no `set_rate` could repair it.
        // `wait` > a year: the nanoseconds are at least 1.
        let cost = micros_to_nanos(wait);
        return Outcome {
            next: None,
            decision: A::denied(terms.limit, 0, 1, at_least_one(cost), cost),
            wait_micros: 0,
            refused_booking: Some(wait),
        };
    }
    // `now + debt` < 2⁵²; `wait` ≤ a year, or `i64::MAX` for an interval of `+∞`.
    let next_free = (now + debt).saturating_add(wait);
    let next = if next_free > codec.max_micros {
        NEVER
    } else {
        ((next_free + codec.offset) as u64) << FRACTION_BITS
    };
    // The debt after the booking and a whole refill, `⌈W⌉ = offset`.
    let reset = (next_free - now).saturating_add(codec.offset);
    Outcome {
        next: Some(next),
        decision: A::allowed(terms.limit, 0, 1, micros_to_nanos(reset)),
        wait_micros: debt,
        refused_booking: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::bursty::BurstyMath;
    use super::super::decide;
    use super::*;
    use crate::decision::Decision;
    use proptest::prelude::*;

    #[test]
    fn terms_round_the_permit_as_documented() {
        // 200,000 µs is exact; 1e6 / 3 is not: rounded up.
        assert_eq!(Terms::of(200_000.0).permit_fixed, 200_000 << FRACTION_BITS);
        assert_eq!(
            Terms::of(200_000.0).cost(7),
            Some((7 * 200_000) << FRACTION_BITS)
        );
        let third = Terms::of(1e6 / 3.0);
        assert_eq!(third.permit_fixed, ((1e6 / 3.0) * 4096.0_f64).ceil() as u64);
        assert!(third.truncate());
        // Rounded up once per request, not per permit: 0.3 · 4096 = 1228.8.
        let fine = Terms::of(0.3);
        assert_eq!(fine.permit_fixed, 1229);
        // Within a unit of the exact cost (rounding once per permit: 122,900 and 5,278,514,805,555).
        for (n, exact) in [(100, 122_880), (u32::MAX, 5_277_655_812_096)] {
            let cost = fine.cost(n).unwrap();
            assert!((exact..=exact + 1).contains(&cost), "{n}: {cost}");
        }
        assert!(!fine.truncate());
        // 10⁹ permits per second: 4.096 units a permit (the `f64` 1e-3 is a hair above), a
        // million of them 4,096,001 units (not 5,000,000).
        assert_eq!(Terms::of(1e-3).cost(1_000_000), Some(4_096_001));
        // One permit: `permit_fixed` is the cost computed for any `n`.
        for interval in [0.3, 1e-3, 1e-9, 1e6 / 3.0, 2e5, 3.6e9, 1e300, f64::INFINITY] {
            let terms = Terms::of(interval);
            assert_eq!(
                terms.cost_of_many(1),
                Some(terms.permit_fixed),
                "{interval}"
            );
        }
        // Never 0, and saturating.
        assert_eq!(Terms::of(1e-9).permit_fixed, 1);
        assert_eq!(Terms::of(1e-9).cost(1), Some(1));
        assert_eq!(Terms::of(f64::INFINITY).permit_fixed, u64::MAX);
        assert_eq!(Terms::of(f64::INFINITY).cost(1), Some(u64::MAX));
        assert_eq!(Terms::of(f64::INFINITY).cost(2), None);
        assert_eq!(
            (Terms::of(200_000.0).limit, Terms::of(1e6 / 7.4).limit),
            (5, 7)
        );
    }

    #[test]
    fn the_memo_answers_as_the_terms() {
        // Alternating intervals: every change is a miss, every repeat a hit.
        for interval in [
            2e5,
            2e5,
            1000.0,
            2e5,
            f64::INFINITY,
            0.001,
            1e6 / 3.0,
            1e6 / 3.0,
        ] {
            assert_eq!(Terms::memo(interval), Terms::of(interval), "{interval}");
        }
    }

    #[test]
    fn spending_stored_permits_is_exact_integer_arithmetic() {
        let codec = BurstyCodec::new(1e6);
        let terms = Terms::of(200_000.0);
        // Idle for 1 s: 5 permits stored. Take 2: 3 left, nf = now, nothing to wait.
        let now = 3_000_000;
        let now_fixed = ((now + codec.offset) as u64) << FRACTION_BITS;
        let word = (codec.offset as u64) << FRACTION_BITS;
        let out =
            decide_finite::<Decision>(&codec, word, now, now_fixed, 2, Some(0), true, || terms);
        assert_eq!(out.decision, Decision::allow(5, 3, 400_000_000));
        assert_eq!(out.next, Some(now_fixed - (600_000 << FRACTION_BITS)));
        assert_eq!(out.wait_micros, 0);
        // 3 stored, 4 asked: granted (pre-consumption), 1 fresh permit booked: nf = now + 0.2 s.
        let word = out.next.unwrap();
        let out =
            decide_finite::<Decision>(&codec, word, now, now_fixed, 4, Some(0), true, || terms);
        assert_eq!(out.next, Some(now_fixed + (200_000 << FRACTION_BITS)));
        assert_eq!(out.decision, Decision::allow(5, 0, 1_200_000_000));
        // In debt: refused for 0.2 s without a write; granted with a timeout that covers it.
        let word = out.next.unwrap();
        let out =
            decide_finite::<Decision>(&codec, word, now, now_fixed, 1, Some(0), true, || terms);
        assert_eq!(
            (out.next, out.decision.retry_after().as_micros()),
            (None, 200_000)
        );
        let out =
            decide_finite::<Decision>(&codec, word, now, now_fixed, 1, Some(200_000), true, || {
                terms
            });
        assert_eq!(out.next, Some(now_fixed + (400_000 << FRACTION_BITS)));
        assert_eq!(out.wait_micros, 200_000);
    }

    fn intervals() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.001),
            Just(1001.999),
            Just(1002.0),
            Just(1e6 / 3.0),
            Just(1e6 / 7.0),
            Just(3.6e9),
            1e-4f64..10.0,
            10.0f64..1e4,
            1e4f64..1e10,
        ]
    }

    fn bursts() -> impl Strategy<Value = f64> {
        prop_oneof![Just(0.0), Just(1.0), Just(1e6), 0.0f64..2e6, 0.0f64..3.6e9,]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// The fixed-point decision against Guava's `double` math on the decoded word: the same
        /// answer, the same wait and retry, the same next free ticket, and stored time within
        /// a constant rounding per request (the cost's, under 2⁻¹¹ µs, and the word's, 2⁻¹² µs),
        /// whatever the number of permits.
        #[test]
        fn fixed_point_decides_as_guavas_double_math(
            interval in intervals(),
            burst in bursts(),
            n in prop_oneof![1u32..4, 1u32..100_000],
            now in 0i64..1_000_000_000_000,
            offset_share in -1.0f64..1.0,
            timeout in prop_oneof![Just(None), Just(Some(0)), (0i64..10_000_000).prop_map(Some)],
        ) {
            let codec = BurstyCodec::new(burst);
            let now_fixed = ((now + codec.offset) as u64) << FRACTION_BITS;
            // Stored permits, or a little debt.
            let span = (codec.full_fixed as f64 * 1.5 + 1e9) * offset_share;
            let word = (now_fixed as f64 + span).clamp(0.0, (NEVER - 1) as f64) as u64;
            let terms = Terms::of(interval);
            let ours = decide_finite::<Decision>(&codec, word, now, now_fixed, n, timeout, true, || terms);
            let (ticket, _) = codec.decode(word, now);
            let model = BurstyMath { interval, full_time: codec.full_time };
            let theirs = decide(ticket, now, n, timeout, Some(&model));
            prop_assert_eq!(ours.decision.is_allowed(), theirs.decision.is_allowed());
            prop_assert_eq!(ours.refused_booking, theirs.refused_booking);
            prop_assert_eq!(ours.wait_micros, theirs.wait_micros);
            prop_assert_eq!(ours.decision.retry_after(), theirs.decision.retry_after());
            prop_assert_eq!(ours.decision.limit(), theirs.decision.limit());
            match (ours.next, theirs.next) {
                (Some(next), Some(t)) => {
                    // The cost's rounding, once per request whatever `n` (up, by less than a
                    // unit, plus `n` times at most 2⁻⁴⁴ µs: under another unit), the word's
                    // (a unit), and `double`'s own.
                    let slack = 3.0 / 4096.0 + t.stored_time * 1e-12;
                    let (back, _) = codec.decode(next, now);
                    // A request on Guava's boundary between "stored permits cover it" and "books
                    // the rest" may book that rounding as whole µs.
                    prop_assert!(
                        (back.next_free - t.next_free).abs() as f64 <= slack.ceil(),
                        "next free {} vs {} (slack {})", back.next_free, t.next_free, slack
                    );
                    prop_assert!(
                        (back.stored_time - t.stored_time).abs() <= slack,
                        "stored {} vs {} (slack {})", back.stored_time, t.stored_time, slack
                    );
                    // `remaining`: whole stored permits at the cost one is spent at
                    // (`permit_fixed`), up to the same rounding.
                    let per_permit = terms.permit_fixed as f64 / 4096.0;
                    let exact = t.stored_time / per_permit;
                    let remaining = ours.decision.remaining() as f64;
                    prop_assert!(
                        remaining <= exact + slack / per_permit + 1e-9
                            && remaining + 1.0 >= exact - slack / per_permit - 1e-9,
                        "remaining {} of {}", remaining, exact
                    );
                }
                (None, None) => {}
                (ours, theirs) => prop_assert!(false, "{:?} vs {:?}", ours, theirs),
            }
        }
    }
}
