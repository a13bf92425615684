//! A lease's refund: giving permits back to the cell a lease was counted in, exactly or not at
//! all (the rule of [`crate::lease`]).
//!
//! A cell's count is a sum, and while the cell is open (not sealed) nothing derived from it has
//! been published: `base`'s sum and the marks are computed only from sealed cells, by the
//! crossing that seals them, and every other reader (an admission, a denial's or a peek's reading
//! of the open cell) loads the count live. So lowering an open cell's count by a lease's unused
//! permits leaves the ring exactly as if the lease had asked for that many fewer, whatever was
//! counted in the cell since. Once the cell is sealed, its count is in published sums (`base`,
//! the marks of its block) that one compare-exchange cannot correct together: the refund does
//! not happen. The rule is therefore: **a refund lands only in the lease's own cell, open**: its
//! slot holds the cell's round, unsealed, with at least the refunded count, checked in the same
//! compare-exchange as the decrement. A crossing that seals the cell and a refund are two
//! compare-exchanges on the one slot word: whichever comes second sees the other's word (the
//! seal then counts the refunded count; the refund then finds the cell sealed).
//!
//! A rewind (after a leap, see [Time](super#time)) can re-open the lease's cell afresh: the
//! leaper's crossing overwrites the cell's slot with the leaped era's round (forgetting the
//! lease's count, as a leap forgets what came before it), and the crossing into the rewound
//! head stamps the slot with the cell's round again, open, counting only what is admitted
//! after. A refund there would take the lease's permits out of those later admissions. So a
//! lease reads the rewinds begun before it is counted (`rewinds`: none may be under way; each
//! is counted begun before and ended after the compare-exchange that moves `head` back), and its
//! refund is refused once another has begun. The write that forgets the lease's count loads
//! the slot after the count and then `head` (still the leaped one), so the rewind that re-opens
//! the cell moves `head` back after the count: it had begun after the lease's read, or was
//! under way at it. And a slot word written after a rewind began (by the rewinder after its
//! compare-exchange, or by a writer that read the moved-back head) comes to a refund that loads
//! it with that begin. The counters are `SeqCst`: they change once per rewind and are read only
//! by a lease and its refund.
//!
//! A slot's round tag is 39 bits: `2^39 × slots` cells after the lease the slot can hold the
//! lease's tag for another cell, whose count the lease was never part of. A refund is refused
//! once the clock has moved half that far past the lease's cell (at least `2^39` cells: 9
//! minutes of 1 ns cells; a lagging read trails by at most the lag horizon, far less).

use super::{ROUND_BITS, SlidingWindowLimiter, open_count, pack_cell};
use crate::clock::Clock;
use crate::sync::Ordering;

impl<C: Clock> SlidingWindowLimiter<C> {
    /// The rewinds begun so far, read before a lease is counted; `None` while one is under way
    /// (a lease counted then gets no refund). See the [module docs](self).
    pub(crate) fn rewinds(&self) -> Option<u64> {
        let begun = self.rewinds_begun.load(Ordering::SeqCst);
        (self.rewinds_ended.load(Ordering::SeqCst) == begun).then_some(begun)
    }

    /// Takes `unused` permits out of the count of cell `cell` (the cell a lease was counted in,
    /// after `rewinds` rewinds had begun) if that cell is open and its slot still holds it (see
    /// the [module docs](self)); returns whether they were taken out. Refused when the count is
    /// below `unused` (not this lease's cell), once another rewind has begun (the cell may have
    /// been re-opened), and once the clock is half a tag period past `cell` (the tag may have
    /// wrapped).
    pub(crate) fn refund(&self, cell: u64, rewinds: u64, unused: u64) -> bool {
        let half_period = (self.slot_mask + 1) << (ROUND_BITS - 1);
        let now = self.geometry.cell_of(self.clock.now_nanos());
        if unused == 0 || now.saturating_sub(cell) >= half_period {
            return false;
        }
        let (slot, round) = self.place(cell);
        // Acquire: as every slot load (pairs with the Release of the slot's writers: the
        // admissions, seals and stamps); the refund needs only the word itself, and that a
        // word written after a rewind began comes with the rewind's count (below).
        let mut word = slot.load(Ordering::Acquire);
        loop {
            if self.rewinds_begun.load(Ordering::SeqCst) != rewinds {
                return false;
            }
            // The lease's cell, open, holding at least the permits given back.
            let Some(left) = open_count(word, round).and_then(|count| count.checked_sub(unused))
            else {
                return false;
            };
            // AcqRel: as the admission's compare-exchange on the slot (`acquire_general`): the
            // refund publishes only the count it writes, read by the slot's next Acquire loader
            // (an admission, or the seal that then counts it). Acquire on failure, as the load.
            match slot.compare_exchange_weak(
                word,
                pack_cell(round, false, left),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::marks::EPOCH_STEP;
    use crate::clock::ManualClock;
    use crate::lease::LeaseSource;
    use crate::sync::Ordering;
    use crate::{Limiter, SlidingWindowLimiter};

    /// A lease counted while a rewind of the ring is under way (begun, its compare-exchange on
    /// `head` not yet ended) gets no refund: the rewind may re-open its cell afresh after it was
    /// counted. A lease counted before a rewind began has its refund refused once one has begun.
    /// (A real rewind is `tests/per_core.rs`
    /// `a_sliding_window_refund_is_refused_after_a_leap_and_rewind_reopened_its_cell`; here the
    /// counters stand in for a rewinder stalled at its compare-exchange.)
    #[test]
    fn a_lease_counted_during_a_rewind_or_before_one_gets_no_refund() {
        let w = SlidingWindowLimiter::with_clock(10, Duration::from_secs(1), 4, ManualClock::new())
            .unwrap();
        // A rewind begun, not ended: the lease is counted, but gets no refund.
        w.rewinds_begun.fetch_add(EPOCH_STEP, Ordering::SeqCst);
        let lease = w.take(1, 4, u64::MAX).unwrap();
        assert_eq!(lease.granted(), 4);
        assert!(
            !w.give_back(&lease, 3),
            "counted while a rewind was under way"
        );
        w.rewinds_ended.fetch_add(EPOCH_STEP, Ordering::SeqCst);
        assert!(!w.give_back(&lease, 3), "the rewind has ended since");
        assert_eq!(w.peek(1).unwrap().remaining(), 10 - 4 - 1);
        // No rewind under way: the refund lands, until a rewind begins.
        let lease = w.take(1, 4, u64::MAX).unwrap();
        assert!(w.give_back(&lease, 1));
        w.rewinds_begun.fetch_add(EPOCH_STEP, Ordering::SeqCst);
        assert!(!w.give_back(&lease, 1), "a rewind began since the lease");
        assert_eq!(w.peek(1).unwrap().remaining(), 10 - 4 - 3 - 1);
        assert!(w.try_acquire(2).unwrap().is_allowed());
    }
}
