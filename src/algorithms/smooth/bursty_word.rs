//! The bit layout of [`SmoothBursty`](super::SmoothBursty)'s word (described in `bursty.rs`):
//! pure encode/decode, unit-tested without atomics.

use super::{Ticket, f64_to_u64};

pub(super) const FRACTION_BITS: u32 = 12;
pub(super) const FRACTION_MASK: u64 = (1 << FRACTION_BITS) - 1;
pub(super) const INFINITE_BIT: u64 = 1 << 63;
pub(super) const VALUE_MASK: u64 = INFINITE_BIT - 1;
/// Guava's `nextFreeTicket = Long.MAX_VALUE`.
pub(super) const NEVER: u64 = VALUE_MASK;

/// Encoding of the bursty word for one burst length.
#[derive(Clone, Copy, Debug)]
pub(super) struct BurstyCodec {
    /// `⌈W⌉` in µs: keeps `V + offset ≥ 0`.
    pub(super) offset: i64,
    /// `W` in 2⁻¹² µs.
    pub(super) full_fixed: u64,
    /// `W` in µs, exactly `full_fixed / 2¹²`.
    pub(super) full_time: f64,
    /// The largest `nf` (and clock read) the word holds.
    pub(super) max_micros: i64,
}

impl BurstyCodec {
    pub(super) fn new(full_micros: f64) -> Self {
        let full_fixed = (full_micros * (1u64 << FRACTION_BITS) as f64).round() as u64;
        let full_time = full_fixed as f64 / (1u64 << FRACTION_BITS) as f64;
        let offset = full_time.ceil() as i64;
        BurstyCodec {
            offset,
            full_fixed,
            full_time,
            max_micros: (NEVER >> FRACTION_BITS) as i64 - offset - 1,
        }
    }

    /// The state at `now` (already resynced when the limiter is free) and the ∞ flag.
    #[inline]
    pub(super) fn decode(&self, word: u64, now: i64) -> (Ticket, bool) {
        let infinite = word & INFINITE_BIT != 0;
        let value = word & VALUE_MASK;
        if value == NEVER {
            let never = Ticket {
                next_free: i64::MAX,
                stored_time: 0.0,
            };
            return (never, infinite);
        }
        let (now, now_fixed) = self.fixed_now(now);
        (self.decode_finite(value, now_fixed, now), infinite)
    }

    /// [`decode`](Self::decode) of a value that is not [`NEVER`] (no ∞ bit), at `now` in
    /// `0..=max_micros` whose fixed-point `(now + offset) · 2¹²` is `now_fixed`.
    #[inline]
    pub(super) fn decode_finite(&self, value: u64, now_fixed: u64, now: i64) -> Ticket {
        if value >= now_fixed {
            // In debt. V is whole µs unless a lagging clock read it; round up then.
            Ticket {
                next_free: ((value + FRACTION_MASK) >> FRACTION_BITS) as i64 - self.offset,
                stored_time: 0.0,
            }
        } else {
            let stored_fixed = (now_fixed - value).min(self.full_fixed);
            Ticket {
                next_free: now,
                // `stored_fixed` ≤ `full_fixed` < 2⁶³: the signed conversion is the same value
                // in one instruction.
                stored_time: stored_fixed as i64 as f64 / (1u64 << FRACTION_BITS) as f64,
            }
        }
    }

    /// The word for `ticket`, its stored time rounded to nearest. Requires
    /// `stored_time > 0 ⇒ next_free = now` (always true of a bursty booking).
    #[inline]
    pub(super) fn encode(&self, ticket: Ticket, infinite: bool) -> u64 {
        let value = if ticket.next_free > self.max_micros {
            NEVER
        } else {
            let base = ((ticket.next_free.max(0) + self.offset) as u64) << FRACTION_BITS;
            // Round to nearest (+0.5, truncate: stored_time ≥ 0; no libm call).
            let stored_fixed =
                f64_to_u64(ticket.stored_time * (1u64 << FRACTION_BITS) as f64 + 0.5)
                    .min(self.full_fixed)
                    .min(base);
            base - stored_fixed
        };
        value | if infinite { INFINITE_BIT } else { 0 }
    }

    /// `now` (µs since creation) within the word's range, and its fixed point
    /// `(now + offset) · 2¹²`.
    #[inline]
    pub(super) fn fixed_now(&self, now: i64) -> (i64, u64) {
        let now = now.clamp(0, self.max_micros);
        (now, ((now + self.offset) as u64) << FRACTION_BITS)
    }

    /// The word booked on a clock that read `micros` ahead of the present, moved back by that
    /// much: its debt stays, counted from the present (a leaping clock's booking, see
    /// `limiter::update_floored_leap`).
    pub(super) fn shift_back(&self, word: u64, micros: u64) -> u64 {
        let value = word & VALUE_MASK;
        if value == NEVER {
            return word;
        }
        let shift = micros.saturating_mul(1 << FRACTION_BITS);
        value.saturating_sub(shift) | (word & INFINITE_BIT)
    }

    /// Guava's transition out of rate ∞ at `now`: a full burst (`stored = maxPermits`). If debt
    /// booked before ∞ is still outstanding, the debt stays and the burst accrues after it (the
    /// word cannot hold both; module docs).
    pub(super) fn leave_infinite(&self, word: u64, now: i64) -> u64 {
        let (ticket, _) = self.decode(word, now);
        if ticket.next_free > now {
            word & VALUE_MASK
        } else {
            let full = Ticket {
                next_free: ticket.next_free,
                stored_time: self.full_time,
            };
            self.encode(full, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn codec() -> BurstyCodec {
        BurstyCodec::new(1e6)
    }

    #[test]
    fn fresh_word_is_offset_and_decodes_to_guava_initial_state() {
        let c = codec();
        let fresh = Ticket {
            next_free: 0,
            stored_time: 0.0,
        };
        assert_eq!(c.encode(fresh, false), 1_000_000 << FRACTION_BITS);
        assert_eq!(c.decode(c.encode(fresh, false), 0), (fresh, false));
        // 400 ms later: 400 ms of stored time, nf = now (Guava's resync).
        let later = c.decode(c.encode(fresh, false), 400_000).0;
        assert_eq!((later.next_free, later.stored_time), (400_000, 400_000.0));
        // Capped at W after a long idle.
        assert_eq!(
            c.decode(c.encode(fresh, true), 10_000_000).0.stored_time,
            1e6
        );
        assert!(c.decode(c.encode(fresh, true), 0).1);
    }

    #[test]
    fn debt_decodes_as_next_free_and_never_saturates() {
        let c = codec();
        let debt = Ticket {
            next_free: 1_200_000,
            stored_time: 0.0,
        };
        assert_eq!(c.decode(c.encode(debt, false), 1_000_000).0, debt);
        let far = Ticket {
            next_free: c.max_micros + 1,
            stored_time: 0.0,
        };
        assert_eq!(c.encode(far, false), NEVER);
        assert_eq!(c.decode(NEVER, 5).0.next_free, i64::MAX);
        assert!(c.decode(NEVER | INFINITE_BIT, 5).1);
        // The range: 2^51 µs minus the offset, about 71 years.
        assert_eq!(c.max_micros, (1 << 51) - 1 - 1_000_000 - 1);
    }

    #[test]
    fn a_lagging_clock_read_never_moves_the_virtual_time_back() {
        let c = codec();
        // Written at t = 1 s with 0.25 permit-time stored: V = 1e6 - 0.3.
        let word = c.encode(
            Ticket {
                next_free: 1_000_000,
                stored_time: 0.3,
            },
            false,
        );
        // Read at a lagging 999_999 µs: V ≥ now, treated as debt ending at ⌈V⌉.
        let (t, _) = c.decode(word, 999_999);
        assert_eq!((t.next_free, t.stored_time), (1_000_000, 0.0));
    }

    #[test]
    fn leaving_infinity_grants_a_full_burst_unless_in_debt() {
        let c = codec();
        let free = c.encode(
            Ticket {
                next_free: 0,
                stored_time: 0.0,
            },
            true,
        );
        let left = c.leave_infinite(free, 0);
        assert_eq!(left & INFINITE_BIT, 0);
        assert_eq!(c.decode(left, 0).0.stored_time, 1e6);
        let debt = c.encode(
            Ticket {
                next_free: 500_000,
                stored_time: 0.0,
            },
            true,
        );
        assert_eq!(
            c.decode(c.leave_infinite(debt, 100), 100).0.next_free,
            500_000
        );
    }

    proptest! {
        #[test]
        fn round_trip_at_the_time_of_writing(
            now in 0i64..(1 << 45),
            debt in 0i64..(1 << 40),
            stored in 0.0f64..1e6,
        ) {
            let c = codec();
            let in_debt = Ticket { next_free: now + debt, stored_time: 0.0 };
            prop_assert_eq!(c.decode(c.encode(in_debt, false), now).0, in_debt);
            let free = Ticket { next_free: now, stored_time: stored };
            let back = c.decode(c.encode(free, false), now).0;
            prop_assert_eq!(back.next_free, now);
            prop_assert!((back.stored_time - stored).abs() <= 1.0 / 8192.0);
        }
    }
}
