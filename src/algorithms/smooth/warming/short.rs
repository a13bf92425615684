//! [`SmoothWarmingUp`]'s short path: `try_acquire` / `admit` in one pass over the 128-bit word.

use std::num::NonZeroU64;

use super::{SmoothWarmingUp, pack, unpack};
use crate::algorithms::smooth::warm_up_math::WarmingMath;
use crate::algorithms::smooth::{decide, wait_refusal};
use crate::clock::Clock;
use crate::decision::{AcquireError, Answer};
use crate::limiter::{MICROS_FLOOR, raise_floor};
use crate::sync::{Ordering, fence};

impl<C: Clock> SmoothWarmingUp<C> {
    /// `try_acquire(n)` for `n > 0` (Guava's `tryAcquire(n)`, no timeout): the common case in
    /// one pass, deciding with the engine's own [`decide`] on the word as `decide_at` does, without
    /// its retry loop.
    ///
    /// The clock is read *after* the word and the floor are loaded, so the read is always fresh
    /// (the engine's second read, which it takes before it trusts a booking beyond the lag
    /// horizon, is never needed). Served here: a finite rate, a word that is not *never*, a floor
    /// within the horizon of the read (no leap); a refusal by a booking beyond the horizon
    /// re-checks the count of leap repairs (a repair may have replaced the word and lowered the
    /// floor since, as in `decide_at`). A refusal answered as a `bool` computes no terms. A lost compare-exchange and every other case go to the general engine,
    /// which decides them from scratch.
    #[inline(always)]
    pub(super) fn try_acquire_now<A: Answer>(&self, n: u32) -> Result<A, AcquireError> {
        // The leap repairs counted so far, loaded before the word. Acquire: pairs with the
        // Release increment in `decide_at`, which follows the repair's compare-exchange: a
        // caller that sees a repair's count loads its repaired word (or a later one).
        let repairs = self.words.repairs.load(Ordering::Acquire);
        // Acquire: as in `decide_at` (a word comes with the interval and the floor its writer
        // saw).
        let word = self.load_word();
        // Relaxed: ordered after the Acquire load above, as in `decide_at`.
        let floor_now = self.words.floor.load(Ordering::Relaxed);
        let clock_now = self.now_micros();
        let general = || self.try_acquire_general(n, clock_now).map(A::of);
        // A decision that writes nothing, by a booking beyond the horizon, stands only on a word
        // that no repair replaced before the floor this call loaded was lowered: the word may
        // be a leaped one that a repair has replaced since, lowering that floor. A repair
        // counts itself before it lowers the floor (`decide_at`), so a count unchanged since
        // before the word rules it out, without loading the 128-bit word again: had the floor
        // load seen a lowering, the Acquire fence (pairing with the lowering's Release) would
        // make its count visible to the second load; had the first count load seen it, the
        // word loaded after it would be the repaired one. `Err`: decide again, in the engine.
        // The `bool` refusal's re-check is pinned by loom `time_smooth_admit_repair.rs`.
        let still = |beyond_horizon| {
            if beyond_horizon {
                fence(Ordering::Acquire);
                // Relaxed: ordered by the fence above.
                if self.words.repairs.load(Ordering::Relaxed) != repairs {
                    return Err(general());
                }
            }
            Ok(())
        };
        // `max(clock, floor)`, served only while the floor is within the lag horizon of the read
        // (`limiter::floored`; the lead is checked only when the floor leads). Both are reads of
        // `now_micros`, in `0..=i64::MAX`.
        let clock = clock_now as u64;
        let now = if floor_now > clock {
            if floor_now - clock > MICROS_FLOOR.horizon {
                return general();
            }
            floor_now
        } else {
            clock
        };
        // Rate ∞ or *never*: the general engine. One comparison of the word's high half for
        // both: with the ∞ bit (63) set it is at least 2⁶³, and *never* is `nf = i64::MAX`
        // (2⁶³ − 1); every other word is below (issue 17: the two tests were 3 instructions
        // more a call, `instructions_smooth`; `never_or_infinite_is_one_comparison`).
        if never_or_infinite(word) {
            return general();
        }
        let (ticket, _) = unpack(word);
        // No overflow: `now` is a read of `now_micros` or a floor (at most `i64::MAX`), the
        // horizon 10⁷ µs.
        let beyond_horizon = ticket.next_free as u64 > now + MICROS_FLOOR.horizon;
        // Guava's `canAcquire` with no timeout fails (`nf > now`, as in `refusal`): a `bool`
        // carries no terms, so its refusal loads no interval and computes neither the limit (a
        // per-thread memo) nor the reset (the refill's float arithmetic). Issue 17: 91 -> 80
        // instructions per `admit` refusal (`instructions_smooth`).
        if !A::REPORTS_TERMS && ticket.next_free > now as i64 {
            // More than one permit: the engine judges the request as booked when the wait
            // ends (`refusal`: a booking longer than a year is the error, not a refusal).
            if n != 1 {
                return general();
            }
            if let Err(again) = still(beyond_horizon) {
                return again;
            }
            return Ok(A::denied(0, 0, 1, NonZeroU64::MIN, 0));
        }
        // The limiter's own math by reference where the interval is still the one it was
        // created with (a copy was 8 instructions an admission, `instructions_smooth`).
        let interval = self.interval.load();
        let memo;
        let math = if self.base.is_for(interval) {
            &self.base
        } else {
            memo = WarmingMath::memo(interval, self.warmup_micros, self.cold_factor);
            &memo
        };
        if let Some(refused) = wait_refusal(ticket, now as i64, 0, Some(math)) {
            // More than one permit: to the engine, as above.
            if n != 1 {
                return general();
            }
            if let Err(again) = still(beyond_horizon) {
                return again;
            }
            return Ok(A::of(refused.decision));
        }
        // Granted (Guava's `canAcquire` passed): booked as `reserve` books.
        let outcome = decide(ticket, now as i64, n, None, Some(math));
        outcome.check_booking(n)?;
        // Not compared with `word` (issue 17: 7 to 9 instructions an admission,
        // `instructions_warming_states`): a grant here starts at `max(nf, now)` with `nf ≤ now`
        // and moves the next free ticket on by its cost, at least 1 µs (costs are truncated as
        // Guava's only from a stable interval of 3004 µs, rounded up below), so the new word
        // differs. Were it the same, the compare-exchange below would write the word it found:
        // nothing would change, and its success would confirm the word the decision stands on.
        let Some(next) = outcome.next.map(|ticket| pack(ticket, false)) else {
            // Not reached: `decide` books every grant that `check_booking` passes.
            if let Err(again) = still(beyond_horizon) {
                return again;
            }
            return Ok(A::of(outcome.decision));
        };
        // `now − floor ≥ grain`: `now` is `max(clock, floor)`, so the difference cannot wrap
        // (a saturating `floor + grain` was 3 instructions more an admission, issue 17).
        if now - floor_now >= MICROS_FLOOR.grain {
            // Published by the Release compare-exchange below, as in `decide_at`.
            raise_floor(&self.words.floor, floor_now, now);
        }
        // AcqRel / Acquire: as in `decide_at` (a spurious failure only sends the call to the
        // engine).
        match self.words.state.compare_exchange_weak(
            word,
            next,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(A::of(outcome.decision)),
            Err(_) => general(),
        }
    }
}

/// Whether `word` is at rate ∞ (bit 127) or *never* (`nf = i64::MAX`): its high half is at
/// least `i64::MAX` (see `pack`).
#[inline(always)]
fn never_or_infinite(word: u128) -> bool {
    (word >> 64) as u64 >= i64::MAX as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::smooth::Ticket;

    /// The one comparison is the two tests it replaced (`infinite || nf == i64::MAX`) on the
    /// words at and around both edges.
    #[test]
    fn never_or_infinite_is_one_comparison() {
        for next_free in [0, 1, 25_000_000, i64::MAX - 1, i64::MAX] {
            for stored_time in [0.0, 0.5, 4e6] {
                for infinite in [false, true] {
                    let ticket = Ticket {
                        next_free,
                        stored_time,
                    };
                    let word = pack(ticket, infinite);
                    let (unpacked, inf) = unpack(word);
                    assert_eq!(
                        never_or_infinite(word),
                        inf || unpacked.next_free == i64::MAX,
                        "nf {next_free}, stored {stored_time}, ∞ {infinite}"
                    );
                }
            }
        }
    }
}
