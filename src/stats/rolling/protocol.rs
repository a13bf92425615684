//! The counter's add protocol (one `fetch_add`, stray-add recovery, saturation) and its sweep.
//! See the parent module's docs.

use super::{
    COUNTER_ROUND_MASK, FAST_ADD_MAX, MAX_CELL_COUNT, RollingCounter, pack_counter_cell,
    unpack_counter_cell,
};
use crate::clock::Clock;
use crate::sync::{AtomicU64, Ordering};

impl<C: Clock> RollingCounter<C> {
    pub(super) fn add_in(&self, series: usize, n: u64, cell: u64) {
        let (slot, round) = self.place(series, cell);
        loop {
            let stray = if n <= FAST_ADD_MAX {
                // AcqRel: Acquire so a newer round seen here comes with the head raise made
                // before it was stamped; Release so a resetter that reads our add is ordered
                // after it.
                let old = slot.fetch_add(n, Ordering::AcqRel);
                let (old_round, count) = unpack_counter_cell(old);
                if old_round == round {
                    if count + n > MAX_CELL_COUNT {
                        self.clamp(slot, round);
                    }
                    if count == 0 {
                        self.sweep_cell(cell); // first add of a new cell
                    }
                    return;
                }
                old_round
            } else {
                match self.add_checked(slot, round, n) {
                    Ok(()) => return,
                    Err(other_round) => {
                        if self.is_newer(other_round, cell) {
                            // A thread a whole ring ahead stamped this slot: count it there.
                            if self.add_checked(slot, other_round, n).is_ok() {
                                return;
                            }
                            continue;
                        }
                        // Stale: reset below; nothing of ours is in the slot.
                        if self.reset(slot, other_round, round, n, cell) {
                            return;
                        }
                        continue;
                    }
                }
            };
            // Our add landed in another round's word.
            if self.is_newer(stray, cell) {
                // A thread a whole ring ahead stamped this slot: the add counts there.
                self.clamp(slot, stray);
                return;
            }
            if self.reset(slot, stray, round, n, cell) {
                return;
            }
            // Someone else reset the slot, discarding our stray add with it: add again.
        }
    }

    /// Compare-exchange add into a slot holding `round`, saturating. `Err(r)` when it holds round
    /// `r` instead (nothing added).
    pub(super) fn add_checked(&self, slot: &AtomicU64, round: u64, n: u64) -> Result<(), u64> {
        // Acquire: as the fetch_add in `add_in`.
        let mut word = slot.load(Ordering::Acquire);
        loop {
            let (word_round, count) = unpack_counter_cell(word);
            if word_round != round {
                return Err(word_round);
            }
            let next = pack_counter_cell(round, (count + n).min(MAX_CELL_COUNT));
            // AcqRel: as the fetch_add in `add_in`.
            match slot.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    /// Replaces a stale word of round `stale` by `(round, n)`, after raising head to `cell`, then
    /// runs the sweep for `cell`. `false` when the slot changed round first (someone else reset
    /// it, discarding any stray add of ours with it).
    pub(super) fn reset(
        &self,
        slot: &AtomicU64,
        stale: u64,
        round: u64,
        n: u64,
        cell: u64,
    ) -> bool {
        // Raise head before writing `cell`'s round, as the sweep does before its stamps: a
        // lagging adder that then finds this round in the slot sees head past its own cell and
        // counts there ([`is_newer`](Self::is_newer)) instead of resetting it away.
        // Acquire: as in `is_newer`.
        if self.head.load(Ordering::Acquire) < cell {
            // AcqRel: Release orders the raise before our reset (a reader of the reset reads
            // head at least this high); Acquire as above.
            self.head.fetch_max(cell, Ordering::AcqRel);
        }
        // Acquire: as the fetch_add in `add_in`.
        let mut word = slot.load(Ordering::Acquire);
        while unpack_counter_cell(word).0 == stale {
            // AcqRel: as the fetch_add in `add_in`.
            match slot.compare_exchange_weak(
                word,
                pack_counter_cell(round, n),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.sweep_cell(cell);
                    return true;
                }
                Err(actual) => word = actual,
            }
        }
        false
    }

    /// Brings a saturated cell of `round` back to [`MAX_CELL_COUNT`].
    pub(super) fn clamp(&self, slot: &AtomicU64, round: u64) {
        // Relaxed: the clamp only bounds the value; the round check below keeps it to one cell.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let (word_round, count) = unpack_counter_cell(word);
            if word_round != round || count <= MAX_CELL_COUNT {
                return;
            }
            let next = pack_counter_cell(round, MAX_CELL_COUNT);
            // Relaxed: as above.
            match slot.compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// Whether a slot of `cell`'s index holding `other_round` holds a newer index than `cell`:
    /// only a sweep for a cell at most `future` behind it can have stamped it, so its round is at
    /// most that of `head + future`.
    pub(super) fn is_newer(&self, other_round: u64, cell: u64) -> bool {
        // Acquire: the stamp we saw was made after its sweeper raised head.
        let head = self.head.load(Ordering::Acquire);
        if head <= cell {
            return false;
        }
        let ahead = other_round.wrapping_sub(self.geometry.round_of(cell)) & COUNTER_ROUND_MASK;
        let reach = self
            .geometry
            .round_of(head.saturating_add(self.geometry.future))
            - self.geometry.round_of(cell);
        ahead != 0 && ahead <= reach
    }

    /// The sweep for `cell`: raise head, then stamp `cell..=cell + future` in every series.
    pub(super) fn sweep_cell(&self, cell: u64) {
        // Acquire: as in `is_newer`.
        let head = self.head.load(Ordering::Acquire);
        if head > cell {
            return;
        }
        // AcqRel: Release orders the raise before our stamps; Acquire as above.
        if head < cell && self.head.fetch_max(cell, Ordering::AcqRel) > cell {
            return;
        }
        for series in 0..self.series {
            for index in cell..=cell.saturating_add(self.geometry.future) {
                let (slot, round) = self.place(series, index);
                // Acquire: as the fetch_add in `add_in`.
                let mut word = slot.load(Ordering::Acquire);
                while unpack_counter_cell(word).0 != round {
                    // Acquire: a newer sweep may own this slot now.
                    if self.head.load(Ordering::Acquire) > cell {
                        return;
                    }
                    // AcqRel: Release publishes the stamp after the head raise.
                    match slot.compare_exchange(
                        word,
                        pack_counter_cell(round, 0),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(actual) => word = actual,
                    }
                }
            }
        }
    }
}
