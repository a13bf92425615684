//! Bit layouts of the packed state words, as pure functions.
//!
//! # Window word (fixed window)
//! ```text
//!  63                                   24 23                    0
//! ┌──────────────────────────────────────┬───────────────────────┐
//! │ tag: 40 bits                         │ count: 24 bits        │
//! └──────────────────────────────────────┴───────────────────────┘
//! ```
//! * `count` is the permits taken in the tagged window, `0..=MAX_COUNT` (16,777,215). Limits are
//!   validated against `MAX_COUNT`, and `count + n <= limit` is checked before any write, so the
//!   field never overflows into the tag.
//! * `tag` identifies the window, modulo 2^40: the window index for wall-clock-aligned windows,
//!   the window's start time in units of 2^shift ns (at most `window / 2^16`) for anchored
//!   windows. Tags are compared with wrapping arithmetic ([`tag_distance`]): a tag up to 2^39
//!   behind the current one is an old window; one ahead of it that starts at most 10 s
//!   ([`MAX_CLOCK_LAG_NANOS`](crate::algorithms::MAX_CLOCK_LAG_NANOS)) after our read (anchored:
//!   plus the round-up of its start) is a window written by a thread whose clock read was later
//!   than ours, and is never replaced by an older one; further ahead (judged only on a clock read
//!   taken after the word was loaded) is a leaping clock's window, whose count is folded into
//!   the window opening now.
//! * Aliasing, the one documented wrap-around: a state left untouched for a multiple of 2^40 tag
//!   units (2^40 windows aligned: 34 years for 1 ms windows; at least 2^24 windows anchored: 194
//!   days for 1 s windows), give or take the lag allowance above, can read as current or ahead
//!   again: its old count then applies (kept, or folded into the current window) until that
//!   window ends, at most 10 s (plus a unit, anchored) plus one window. Never longer; exercised
//!   by tests.
//!
//! # Time word (token bucket, leaky bucket, GCRA)
//! The low 62 bits are one time in nanoseconds on the clock's timeline: the "theoretical arrival
//! time" at which the bucket is full again; the top two bits carry the generation (modulo 4) of
//! the configuration it was written under. `0` (any time in the past) is a full bucket. Times end
//! at 2^62 − 1 ns (the year 2116 on the Unix timeline); a request whose new time would pass it is
//! denied rather than wrapped.

/// Bits of the window tag.
pub const TAG_BITS: u32 = 40;
/// Bits of the window count.
pub const COUNT_BITS: u32 = 24;
/// Largest count a window word holds, and so the largest fixed-window limit.
pub const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;
/// Mask of a tag value (after shifting down).
pub const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// Packs a window word. `tag` is reduced modulo 2^40; `count` must be `<= MAX_COUNT`.
#[inline]
pub const fn pack_window(tag: u64, count: u64) -> u64 {
    debug_assert!(count <= MAX_COUNT);
    ((tag & TAG_MASK) << COUNT_BITS) | count
}

/// Unpacks a window word into `(tag, count)`.
#[inline]
pub const fn unpack_window(word: u64) -> (u64, u64) {
    (word >> COUNT_BITS, word & MAX_COUNT)
}

/// Where a stored tag lies relative to the current one, modulo 2^40.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagDistance {
    /// The same window.
    Same,
    /// The stored window is this many windows (or units) behind the current one.
    Behind(u64),
    /// The stored window is this many ahead: written by a thread whose clock read later.
    Ahead(u64),
}

/// Compares a stored tag with the current one, modulo 2^40.
#[inline]
pub const fn tag_distance(stored: u64, current: u64) -> TagDistance {
    let behind = current.wrapping_sub(stored) & TAG_MASK;
    if behind == 0 {
        TagDistance::Same
    } else if behind <= TAG_MASK >> 1 {
        TagDistance::Behind(behind)
    } else {
        TagDistance::Ahead((TAG_MASK + 1) - behind)
    }
}

/// Division of `u64` values by a divisor fixed at configuration, with a multiply and shifts
/// instead of a `div`. Exact for every dividend.
///
/// Two Granlund–Montgomery reciprocals ("Division by invariant integers using multiplication",
/// 1994): for a dividend below 2^63 (every time on the Unix timeline until 2262), one multiply
/// and one shift by `l − 1` with the 64-bit `short_magic = ⌈2^(63+l) / d⌉`, `l = ⌈log2 d⌉`
/// (their Theorem 4.2 with N = 63: the error `short_magic·d − 2^(63+l) < d ≤ 2^l` moves the
/// quotient by less than `n / 2^63 < 1` of `1/d`, never across an integer); for larger dividends
/// and `d = 1` (no 64-bit reciprocal), the "round-up" method with the add indicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divisor {
    divisor: u64,
    magic: u64,
    shift: u32,
    /// `⌈2^(63+l) / d⌉` (below 2^64 for `d ≥ 2`); unused for `d = 1`.
    short_magic: u64,
    /// `l − 1` (0 for `d = 1`).
    short_shift: u32,
    /// Bit 63 set for `d = 1`, so the one test `(n | long_only) ≥ 2^63` sends both a dividend of
    /// 2^63 or more and the divisor 1 to the general method.
    long_only: u64,
}

impl Divisor {
    /// A divisor; `None` for zero.
    pub const fn new(divisor: u64) -> Option<Self> {
        if divisor == 0 {
            return None;
        }
        if divisor == 1 {
            return Some(Divisor {
                divisor,
                magic: 0,
                shift: 0,
                short_magic: 0,
                short_shift: 0,
                long_only: 1 << 63,
            });
        }
        // l = ceil(log2(divisor)), 1 <= l <= 64.
        let l = 64 - (divisor - 1).leading_zeros();
        let numerator = (1u128 << 64) * ((1u128 << l) - divisor as u128);
        let magic = (numerator / divisor as u128 + 1) as u64;
        // ⌈2^(63+l) / d⌉ < 2^64, since d > 2^(l−1) (and 2^(63+l) ≤ 2^127 fits).
        let short_magic = (1u128 << (63 + l)).div_ceil(divisor as u128) as u64;
        Some(Divisor {
            divisor,
            magic,
            shift: l,
            short_magic,
            short_shift: l - 1,
            long_only: 0,
        })
    }

    /// The divisor.
    pub const fn get(&self) -> u64 {
        self.divisor
    }

    /// `n / divisor`, rounded down.
    #[inline]
    pub const fn divide(&self, n: u64) -> u64 {
        if (n | self.long_only) < 1 << 63 {
            return ((n as u128 * self.short_magic as u128) >> 64) as u64 >> self.short_shift;
        }
        if self.shift == 0 {
            return n;
        }
        let high = ((n as u128 * self.magic as u128) >> 64) as u64;
        (high + ((n - high) >> 1)) >> (self.shift - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn divisor_is_exact(d in 1u64.., n in any::<u64>()) {
            prop_assert_eq!(Divisor::new(d).unwrap().divide(n), n / d);
        }

        #[test]
        fn divisor_is_exact_below_2_to_the_63(
            d in 1u64..,
            small in 1u64..2000,
            k in 0u32..64,
            n in 0u64..(1 << 63),
        ) {
            for d in [d, small, 1 << k, (1 << k) + 1, (1u64 << k).wrapping_sub(1).max(1)] {
                prop_assert_eq!(Divisor::new(d).unwrap().divide(n), n / d, "{} / {}", n, d);
            }
        }

        #[test]
        fn divisor_is_exact_for_small_and_power_of_two_divisors(k in 0u32..64, small in 1u64..2000, n in any::<u64>()) {
            prop_assert_eq!(Divisor::new(1 << k).unwrap().divide(n), n >> k);
            prop_assert_eq!(Divisor::new(small).unwrap().divide(n), n / small);
        }
    }

    #[test]
    fn divisor_edges() {
        for d in [
            1,
            2,
            3,
            7,
            10,
            1_000_000_007,
            u64::MAX - 1,
            u64::MAX,
            1 << 63,
            (1 << 63) + 1,
        ] {
            let div = Divisor::new(d).unwrap();
            let top = (1u64 << 63) - 1;
            for n in [
                0,
                1,
                d - 1,
                d,
                d.saturating_add(1),
                top - 1,
                top,
                top + 1,
                u64::MAX - 1,
                u64::MAX,
            ] {
                assert_eq!(div.divide(n), n / d, "{n} / {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn window_word_round_trips(tag in 0..=TAG_MASK, count in 0..=MAX_COUNT) {
            prop_assert_eq!(unpack_window(pack_window(tag, count)), (tag, count));
        }

        #[test]
        fn distance_is_antisymmetric(a in 0..=TAG_MASK, d in 1u64..(1 << 39)) {
            let b = (a + d) & TAG_MASK;
            prop_assert_eq!(tag_distance(a, b), TagDistance::Behind(d));
            prop_assert_eq!(tag_distance(b, a), TagDistance::Ahead(d));
        }
    }

    #[test]
    fn count_cannot_spill_into_tag() {
        let w = pack_window(1, MAX_COUNT);
        assert_eq!(unpack_window(w), (1, MAX_COUNT));
        assert_eq!(
            unpack_window(w + 1),
            (2, 0),
            "the layout itself has no guard"
        );
    }
}

#[cfg(test)]
mod internal_examples {
    //! The examples of the layout items (doc tests run only on public items).

    #[test]
    fn example_0() {
        use crate::packed::*;
        let w = pack_window(TAG_MASK + 5, 7);
        assert_eq!(unpack_window(w), (4, 7));
    }

    #[test]
    fn example_1() {
        use crate::packed::*;
        assert_eq!(unpack_window(0), (0, 0));
        assert_eq!(unpack_window(u64::MAX), (TAG_MASK, MAX_COUNT));
    }

    #[test]
    fn example_2() {
        use crate::packed::*;
        assert_eq!(tag_distance(5, 5), TagDistance::Same);
        assert_eq!(tag_distance(3, 5), TagDistance::Behind(2));
        assert_eq!(tag_distance(6, 5), TagDistance::Ahead(1));
        assert_eq!(tag_distance(TAG_MASK, 0), TagDistance::Behind(1)); // wrap-around
    }

    #[test]
    fn example_3() {
        use crate::packed::Divisor;
        let d = Divisor::new(60_000_000_000).unwrap();
        assert_eq!(d.divide(u64::MAX), u64::MAX / 60_000_000_000);
        assert_eq!(d.divide(59_999_999_999), 0);
        assert!(Divisor::new(0).is_none());
    }

    #[test]
    fn example_4() {
        use crate::packed::Divisor;
        let d = Divisor::new(7).unwrap();
        assert_eq!(d.divide(50), 7);
        assert!(Divisor::new(0).is_none());
    }

    #[test]
    fn example_5() {
        assert_eq!(crate::packed::Divisor::new(1_000).unwrap().get(), 1_000);
    }

    #[test]
    fn example_6() {
        let d = crate::packed::Divisor::new(3).unwrap();
        assert_eq!(
            (d.divide(8), d.divide(9), d.divide(u64::MAX)),
            (2, 3, u64::MAX / 3)
        );
    }
}

/// The short reciprocal against plain division: every edge of every divisor width, random
/// pairs over every bit width, and every small dividend of the tiny divisors.
#[cfg(test)]
mod divisor_exactness {
    use super::Divisor;

    fn check(d: u64, n: u64) {
        let got = Divisor::new(d).unwrap().divide(n);
        assert_eq!(got, n / d, "{n} / {d}");
    }

    fn dividends(d: u64, rng: &mut u64) -> Vec<u64> {
        let top = (1u64 << 63) - 1;
        let mut v = vec![
            0,
            1,
            2,
            d - 1,
            d,
            d.wrapping_add(1),
            top - 1,
            top,
            top + 1,
            top + 2,
            u64::MAX,
            u64::MAX - 1,
        ];
        // Multiples of d around the largest quotients below 2^63 and 2^64, and random ones.
        for limit in [top, u64::MAX] {
            let qmax = limit / d;
            for q in [qmax.saturating_sub(2), qmax.saturating_sub(1), qmax, 1, 2] {
                let m = q.wrapping_mul(d);
                for n in [
                    m.wrapping_sub(1),
                    m,
                    m.wrapping_add(1),
                    m.wrapping_add(d - 1),
                ] {
                    v.push(n);
                }
            }
        }
        for _ in 0..8 {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            let q = *rng % (top / d + 1);
            let m = q * d;
            v.extend([
                m,
                m.wrapping_sub(1),
                m + (d - 1).min(top - m),
                *rng,
                *rng >> 1,
            ]);
        }
        v
    }

    #[test]
    fn exhaustive_small_divisors_and_edges() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut divisors: Vec<u64> = (1..=1 << 16).collect();
        for k in 1..64u32 {
            let p = 1u64 << k;
            for j in 0..=64u64 {
                divisors.push(p.wrapping_add(j));
                divisors.push(p - j.min(p - 1));
            }
        }
        for j in 0..=4096u64 {
            divisors.push(u64::MAX - j);
            divisors.push((1u64 << 63) - 1 - j);
            divisors.push(u64::MAX / (j + 1));
            divisors.push((1u64 << 63) / (j + 1) + 1);
        }
        let mut count = 0u64;
        for d in divisors {
            let d = d.max(1);
            for n in dividends(d, &mut rng) {
                check(d, n);
                count += 1;
            }
        }
        assert!(count > 3_000_000, "{count}");
    }

    #[test]
    fn random_pairs() {
        let mut rng = 0x1234_5678_9ABC_DEF1u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..2_000_000 {
            let (a, b) = (next(), next());
            // Divisors spread over every bit width, dividends over every width too.
            let d = (a >> (a % 64)).max(1);
            let n = b >> (b % 65).min(63);
            check(d, n);
            check(d, n & ((1 << 63) - 1));
        }
    }

    #[test]
    fn every_dividend_for_tiny_divisors() {
        for d in 1..=64u64 {
            let div = Divisor::new(d).unwrap();
            for n in 0..1u64 << 20 {
                assert_eq!(div.divide(n), n / d);
                let hi = ((1u64 << 63) - 1) - n;
                assert_eq!(div.divide(hi), hi / d, "{hi} / {d}");
                let top = u64::MAX - n;
                assert_eq!(div.divide(top), top / d, "{top} / {d}");
            }
        }
    }
}
