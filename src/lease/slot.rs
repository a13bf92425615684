//! [`LeaseSlot`]: one lease served by many threads, replaced by one owner at a time.
//!
//! The serving side is one compare-exchange on one word (`generation | left`): no lock, no
//! await. The owner (whoever holds the replacement lock of the slot's user: an async mutex for
//! [`LeasedKey`](crate::redis::LeasedKey)) retires the lease with one swap, which tells it
//! exactly how many permits were not served (no serve succeeds after it), and publishes the
//! next one. Rule 1 of the [module docs](crate::lease#the-bound): a permit is served at most
//! once, only from a published lease, and only on a clock read taken after the lease was
//! published and before its expiry.

use crate::clock::Clock;
use crate::sync::{AtomicU64, Ordering};

/// The permits left to serve: the low 32 bits of the word.
const LEFT: u64 = u32::MAX as u64;
/// One generation later: the top 32 bits (wraps; a serve that stalled through 2^32 replacements
/// of the lease between its load and its compare-exchange is the one case it does not catch).
const GENERATION_ONE: u64 = 1 << 32;

/// One lease, served lock-free; retired and replaced by its owner.
#[derive(Debug)]
pub(crate) struct LeaseSlot {
    /// `generation (32 bits) | left (32 bits)`.
    state: AtomicU64,
    /// The clock time from which the published lease may no longer be served.
    expires_at: AtomicU64,
}

impl LeaseSlot {
    /// A slot without a lease.
    pub(crate) fn new() -> Self {
        LeaseSlot {
            state: AtomicU64::new(0),
            expires_at: AtomicU64::new(0),
        }
    }

    /// Serves `n` permits from the published lease if it has them and `clock`, read after the
    /// lease was seen, is before its expiry: the permits left after them and that clock read,
    /// or `None` (the caller then goes to the owner's path).
    #[inline]
    pub(crate) fn serve(&self, n: u32, clock: &dyn Clock) -> Option<(u64, u64)> {
        let need = u64::from(n);
        // Acquire: pairs with the Release store of `publish`, so the clock read below comes
        // after the lease's own clock read (its expiry is counted from a read taken before it
        // was asked for) and `expires_at` is this lease's or a later one's.
        let mut state = self.state.load(Ordering::Acquire);
        let mut now = None;
        loop {
            if state & LEFT < need {
                return None;
            }
            let read = *now.get_or_insert_with(|| clock.now_nanos());
            // Acquire: pairs with the Release store of `expires_at` in `publish`. A later
            // lease's expiry read here was written after that lease's `retire`, which then
            // happens before the compare-exchange below: it fails (the generation moved).
            if read >= self.expires_at.load(Ordering::Acquire) {
                return None;
            }
            // Relaxed on success: a serve publishes nothing (the count is the promise); Acquire
            // on failure, as the load above.
            match self.state.compare_exchange_weak(
                state,
                state - need,
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(((state & LEFT) - need, read)),
                Err(actual) => {
                    if actual & !LEFT != state & !LEFT {
                        // Another lease: read the clock again after seeing it.
                        now = None;
                    }
                    state = actual;
                }
            }
        }
    }

    /// Retires the published lease (owner only): no serve of it succeeds afterwards. Returns
    /// its unserved permits, exactly.
    pub(crate) fn retire(&self) -> u64 {
        // Relaxed: only the owner changes the generation, so this read of it is current.
        let generation = self.state.load(Ordering::Relaxed) & !LEFT;
        // AcqRel: the swap reads the last serve's decrement (Acquire, as in `serve`), and
        // publishes the empty word (Release, pairing with the serves' Acquire loads).
        let old = self
            .state
            .swap(generation.wrapping_add(GENERATION_ONE), Ordering::AcqRel);
        old & LEFT
    }

    /// Publishes a lease of `left` permits, served until `expires_at` (owner only, after
    /// [`retire`](Self::retire)).
    pub(crate) fn publish(&self, left: u32, expires_at: u64) {
        // Release: pairs with the Acquire load of `serve` (see there).
        self.expires_at.store(expires_at, Ordering::Release);
        // Relaxed: only the owner changes the generation (set by `retire`).
        let generation = self.state.load(Ordering::Relaxed) & !LEFT;
        // Release: pairs with the Acquire loads of `serve`, which then see `expires_at`.
        self.state
            .store(generation | u64::from(left), Ordering::Release);
    }

    /// The permits the published lease has left (a snapshot).
    pub(crate) fn left(&self) -> u64 {
        // Relaxed: a snapshot, for statistics and for `LeasedKey`'s guess whether a refill
        // has a refund to send (read under the owner's lock, after the owner's own `publish`:
        // never less than what serves have left, so a stale read only guesses "yes").
        self.state.load(Ordering::Relaxed) & LEFT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn serves_until_empty_or_expired_and_retire_counts_the_rest() {
        let clock = ManualClock::starting_at(100);
        let slot = LeaseSlot::new();
        assert_eq!(slot.serve(1, &clock), None, "no lease yet");
        assert_eq!(slot.retire(), 0);
        slot.publish(5, 200);
        assert_eq!(slot.serve(2, &clock), Some((3, 100)));
        assert_eq!(slot.serve(4, &clock), None, "only 3 left");
        assert_eq!(slot.left(), 3);
        clock.set(200);
        assert_eq!(slot.serve(1, &clock), None, "expired");
        assert_eq!(slot.retire(), 3);
        assert_eq!(slot.serve(1, &clock), None, "retired");
        slot.publish(2, 300);
        assert_eq!(slot.serve(2, &clock), Some((0, 200)));
        assert_eq!(slot.retire(), 0);
    }
}
