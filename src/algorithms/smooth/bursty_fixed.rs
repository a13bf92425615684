//! [`SmoothBursty`](super::SmoothBursty)'s decision on a finite word, in the word's own fixed
//! point (2⁻¹² µs): the one decision both the short path and the general engine run.
//!
//! # Stored permits are spent in integer arithmetic
//! A free limiter (`V ≤ now`) holds `stored = min(now − V, W)` of stored time. A request whose
//! stored permits cover it (`n · I ≤ stored`, `I` the stable interval) costs nothing and leaves
//! `stored − n · I`: the new word is `max(V, now − W) + n · I`, one multiplication and one
//! addition on integers (the virtual time of GCRA). `I` is held in fixed point as well
//! ([`Terms::permit_fixed`]): rounded to nearest where Guava's truncation is kept (a stable
//! interval of at least 1,002 µs: the ≤ 2⁻¹³ µs rounding per permit is within the rounding
//! budget of *Rates above Guava's precision* in the module docs), rounded **up** above it, so a
//! stored permit is never spent short. Guava spends `storedPermits -= n` in `double`; the two
//! agree to within 2⁻¹³ µs per permit spent (see `tests`), far below Guava's own `(long)`
//! truncation of every booking.
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
use crate::decision::Answer;

std::thread_local! {
    /// [`Terms::memo`]'s `[interval bits, limit, permit_fixed]`; starts at bits no interval has
    /// (a NaN).
    static LAST: Cell<[u64; 3]> = const { Cell::new([u64::MAX, 0, 1]) };
}

/// What a decision needs of the stable interval: a pure function of its bits, computed once per
/// interval ([`Terms::memo`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Terms {
    /// µs per fresh permit (Guava's `stableIntervalMicros`).
    pub(super) interval: f64,
    /// The rate as whole permits per second ([`Decision`]'s `limit`).
    pub(super) limit: u64,
    /// One stored permit in 2⁻¹² µs: the interval rounded to nearest where Guava's truncation is
    /// kept, up (and at least 1) otherwise; saturating (an interval of `+∞` is `u64::MAX`).
    pub(super) permit_fixed: u64,
}

/// Guava's truncation is kept from this stable interval up (µs): one truncation of < 1 µs and
/// one stored-time rounding of ≤ 2⁻¹³ µs per request, against a cost of at least one interval:
/// `I / (I − 1.000122) ≤ 1.001` from `I = 1002` µs (rates up to about 998 per second).
pub(super) const GUAVA_MIN_INTERVAL: f64 = 1002.0;

impl Terms {
    /// The terms of a stable interval (µs per permit, > 0, or `+∞`).
    pub(super) fn of(interval: f64) -> Self {
        let truncate = interval >= GUAVA_MIN_INTERVAL;
        // `× 2¹²` is exact; `as` saturates (`+∞` → `u64::MAX`).
        let scaled = interval * (1u64 << FRACTION_BITS) as f64;
        let permit_fixed = if truncate {
            f64_to_u64(scaled + 0.5)
        } else {
            // Rounded up; below `GUAVA_MIN_INTERVAL` µs, `scaled` < 2²³ (exact conversions).
            let whole = scaled as u64;
            let up = whole + u64::from((whole as f64) < scaled);
            up.max(1)
        };
        Terms {
            interval,
            limit: limit_of(interval),
            permit_fixed,
        }
    }

    /// [`Terms::of`], its costly parts (`limit`: a division; `permit_fixed`: conversions)
    /// remembered per thread for the last interval asked about: a pure function of the
    /// interval's bits, so the memo is exact whoever changed the rate since (a new interval is
    /// a miss), and it costs no shared write.
    #[inline]
    pub(super) fn memo(interval: f64) -> Self {
        let bits = interval.to_bits();
        let [last_bits, limit, permit_fixed] = LAST.with(Cell::get);
        let (limit, permit_fixed) = if last_bits == bits {
            (limit, permit_fixed)
        } else {
            Self::remember(interval)
        };
        Terms {
            interval,
            limit,
            permit_fixed,
        }
    }

    /// The miss of [`memo`](Self::memo), out of line: `(limit, permit_fixed)`.
    #[cold]
    #[inline(never)]
    fn remember(interval: f64) -> (u64, u64) {
        let terms = Terms::of(interval);
        LAST.with(|last| last.set([interval.to_bits(), terms.limit, terms.permit_fixed]));
        (terms.limit, terms.permit_fixed)
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
#[inline(always)]
pub(super) fn decide_finite<A: Answer>(
    codec: &BurstyCodec,
    value: u64,
    now: i64,
    now_fixed: u64,
    n: u32,
    timeout: Option<i64>,
    terms: &Terms,
) -> Outcome<u64, A> {
    if value > now_fixed {
        // In debt: `nf − now` whole µs (`V` is whole µs unless a lagging clock read it: rounded
        // up, as `BurstyCodec::decode`), nothing stored. Both < 2⁵² (written so that no step
        // overflows even for a word with the ∞ bit, which a short path may decide on before it
        // looks at the bit: a refusal it then discards).
        let debt = (((value - now_fixed - 1) >> FRACTION_BITS) + 1) as i64;
        if timeout.is_some_and(|timeout| debt > timeout) {
            // Guava's `canAcquire` fails (`nf − timeout > now`): nothing written. The reset adds
            // a whole refill, `⌈W⌉ = offset`. The nanoseconds cannot overflow (< 2⁵² µs).
            let retry = debt as u64;
            let reset = retry + codec.offset as u64;
            return Outcome {
                next: None,
                decision: A::denied(terms.limit, 0, 1, retry * 1000, reset * 1000),
                wait_micros: 0,
                refused_booking: None,
            };
        }
        // Every permit fresh, booked after the debt: Guava's `(long)(n · I)`.
        let cost = f64::from(n) * terms.interval;
        return book(codec, now, debt, terms.micros(cost), terms);
    }
    // Free: `nf = now` after the resync, `stored` the idle time (capped).
    let stored = (now_fixed - value).min(codec.full_fixed);
    // A product past `u64` is more than any stored time (< 2⁶³).
    let covered = u64::from(n)
        .checked_mul(terms.permit_fixed)
        .filter(|&cost| cost <= stored);
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
    // the same value in one instruction.
    let stored_time = stored as i64 as f64 / (1u64 << FRACTION_BITS) as f64;
    let fresh = f64::from(n) - stored_time / terms.interval;
    book(codec, now, 0, terms.micros(fresh * terms.interval), terms)
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
            decision: A::denied(terms.limit, 0, 1, cost, cost),
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
        // Guava's precision: to nearest (200,000 µs is exact; 1e6 / 3 is not).
        assert_eq!(Terms::of(200_000.0).permit_fixed, 200_000 << FRACTION_BITS);
        let third = Terms::of(1e6 / 3.0);
        assert_eq!(
            third.permit_fixed,
            ((1e6 / 3.0) * 4096.0_f64).round() as u64
        );
        assert!(third.truncate());
        // Above it: up, and never 0.
        let fine = Terms::of(0.3);
        assert_eq!(fine.permit_fixed, 1229); // 0.3 · 4096 = 1228.8
        assert!(!fine.truncate());
        assert_eq!(Terms::of(1e-9).permit_fixed, 1);
        assert_eq!(Terms::of(f64::INFINITY).permit_fixed, u64::MAX);
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
        let out = decide_finite::<Decision>(&codec, word, now, now_fixed, 2, Some(0), &terms);
        assert_eq!(out.decision, Decision::allow(5, 3, 400_000_000));
        assert_eq!(out.next, Some(now_fixed - (600_000 << FRACTION_BITS)));
        assert_eq!(out.wait_micros, 0);
        // 3 stored, 4 asked: granted (pre-consumption), 1 fresh permit booked: nf = now + 0.2 s.
        let word = out.next.unwrap();
        let out = decide_finite::<Decision>(&codec, word, now, now_fixed, 4, Some(0), &terms);
        assert_eq!(out.next, Some(now_fixed + (200_000 << FRACTION_BITS)));
        assert_eq!(out.decision, Decision::allow(5, 0, 1_200_000_000));
        // In debt: refused for 0.2 s without a write; granted with a timeout that covers it.
        let word = out.next.unwrap();
        let out = decide_finite::<Decision>(&codec, word, now, now_fixed, 1, Some(0), &terms);
        assert_eq!(
            (out.next, out.decision.retry_after().as_micros()),
            (None, 200_000)
        );
        let out = decide_finite::<Decision>(&codec, word, now, now_fixed, 1, Some(200_000), &terms);
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
        /// the rounding of the fixed-point interval (2⁻¹³ µs per permit, or up to one permit's
        /// rounding above Guava's precision) plus the word's own rounding (2⁻¹² µs).
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
            let ours = decide_finite::<Decision>(&codec, word, now, now_fixed, n, timeout, &terms);
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
                    // The fixed-point interval's rounding over `n` permits, and the word's.
                    let slack = f64::from(n) * (terms.permit_fixed as f64 / 4096.0 - interval).abs()
                        + 1.0 / 4096.0 + t.stored_time * 1e-12;
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
