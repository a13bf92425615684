//! The ring's protocol: admission on the open cell, the crossing (head raise, seals, base),
//! the pre-stamp sweep, and the denial's retry/reset arithmetic. See the parent module's docs.

use super::horizon::Caller;
use super::{ROUND_MASK, SEALED, SlidingWindow, pack_cell, unpack_cell};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::packed::{MAX_COUNT, TAG_MASK, pack_window, unpack_window};
use crate::sync::{AtomicU64, Ordering};

impl<C: Clock> SlidingWindow<C> {
    /// Decides `n` for `me`. The fast path is: load `base`, load the cell, one compare-exchange;
    /// `head` is read (and the horizon judged, see [`follow`](Self::follow)) only when the cell is
    /// not the current one.
    #[inline]
    pub(super) fn acquire_at(&self, n: u64, limit: u64, mut me: Caller<'_, C>) -> Decision {
        let mut cell = me.own;
        // Cross into `cell` whatever `base` says: head is below it (`follow` says so).
        let mut cross = false;
        'cell: loop {
            // Acquire: a base word comes with the seals and the head raise made before it.
            let (tag, prev) = unpack_window(self.base.load(Ordering::Acquire));
            if cross || tag != cell & TAG_MASK {
                cross = false;
                if let Err(head) = self.advance(cell, &mut me) {
                    (cell, cross) = self.follow(head, cell, false, &mut me);
                }
                continue 'cell;
            }
            let (slot, round) = self.place(cell);
            // Acquire: a stamp or seal seen here comes with the head raise made before it.
            let mut word = slot.load(Ordering::Acquire);
            loop {
                let (word_round, sealed, count) = unpack_cell(word);
                let (next, taken) = if word_round == round {
                    if sealed {
                        // Someone crossed past this cell: the request belongs to a newer one.
                        // Acquire: the sealer raised head before sealing.
                        let head = self.head.load(Ordering::Acquire);
                        (cell, cross) = self.follow(head, cell, true, &mut me);
                        continue 'cell;
                    }
                    let taken = prev + count + n;
                    if taken > limit {
                        return self.denial(cell, me.now, prev, count, n, limit);
                    }
                    (word + n, taken)
                } else {
                    // Another round: stale (reset it), unless a newer thread stamped it, or the
                    // ring was rewound below this cell.
                    // Acquire: pairs with the stamper's head raise, ordered before its stamp.
                    let head = self.head.load(Ordering::Acquire);
                    if head != cell {
                        (cell, cross) = self.follow(head, cell, false, &mut me);
                        continue 'cell;
                    }
                    let taken = prev + n;
                    if taken > limit {
                        return self.denial(cell, me.now, prev, 0, n, limit);
                    }
                    (pack_cell(round, false, n), taken)
                };
                // AcqRel: Release keeps a later acquirer of this slot ordered after our head
                // reads; Acquire on failure as the load above.
                match slot.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        let reset = self
                            .geometry
                            .start_of(cell.saturating_add(self.geometry.cells));
                        return Decision::allow(limit, limit - taken, reset.saturating_sub(me.now));
                    }
                    Err(actual) => word = actual,
                }
            }
        }
    }

    /// Crossing into `cell` for `me`: raise head, seal and sum the window's closed cells, publish
    /// the sum, pre-stamp the future. `Err(head)` when some thread is already past `cell`, or
    /// when the ring was rewound under this call (head below one it saw): a call never raises
    /// head again after the ring was rewound under it.
    pub(super) fn advance(&self, cell: u64, me: &mut Caller<'_, C>) -> Result<(), u64> {
        // Acquire: a head value comes with the stamps and seals made before it was raised.
        let head = self.head.load(Ordering::Acquire);
        if head > cell || me.rewound(head) {
            return Err(head);
        }
        if head < cell {
            // AcqRel: Release orders this raise before our seals and stamps (readers that see
            // those re-read head); Acquire as the load above.
            let prior = self.head.fetch_max(cell, Ordering::AcqRel);
            if prior > cell {
                return Err(prior);
            }
        }
        me.reached(cell);
        let mut prev = 0;
        for index in self.geometry.window_start(cell)..cell {
            prev += self.seal(index, cell)?;
        }
        let want = pack_window(cell & TAG_MASK, prev.min(MAX_COUNT));
        // Acquire: as in `acquire_at`.
        let mut current = self.base.load(Ordering::Acquire);
        loop {
            if unpack_window(current).0 == cell & TAG_MASK {
                break; // published by another crosser: the same sum, sealed cells are final
            }
            // Acquire: a newer base was published after its head raise. A head below `cell` was
            // rewound under us (a leap judged by a fresher clock): our crossing is void.
            let head = self.head.load(Ordering::Acquire);
            if head != cell {
                return Err(head);
            }
            // AcqRel: Release publishes our seals with the base; Acquire on failure.
            match self
                .base
                .compare_exchange(current, want, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        self.pre_stamp(cell);
        Ok(())
    }

    /// Seals closed cell `index` (seen from `cell`) and returns its final count.
    pub(super) fn seal(&self, index: u64, cell: u64) -> Result<u64, u64> {
        let (slot, round) = self.place(index);
        // Acquire: as in `acquire_at`.
        let mut word = slot.load(Ordering::Acquire);
        loop {
            let (word_round, sealed, count) = unpack_cell(word);
            let next = if word_round == round {
                if sealed {
                    return Ok(count);
                }
                word | SEALED
            } else {
                // Acquire: as in `acquire_at`; a newer round means we are the lagging one, and a
                // head below `cell` that the ring was rewound under us.
                let head = self.head.load(Ordering::Acquire);
                if head != cell {
                    return Err(head);
                }
                pack_cell(round, true, 0)
            };
            // AcqRel: Release publishes the seal after our head raise; Acquire on failure.
            match slot.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(unpack_cell(next).2),
                Err(actual) => word = actual,
            }
        }
    }

    /// Stamps `cell` and the `future` cells after it with their round and a zero count (a slot that
    /// already holds its round is left alone).
    pub(super) fn pre_stamp(&self, cell: u64) {
        for index in cell..=cell.saturating_add(self.geometry.future) {
            let (slot, round) = self.place(index);
            // Acquire: as in `acquire_at`.
            let mut word = slot.load(Ordering::Acquire);
            while unpack_cell(word).0 != round {
                // Acquire: a newer round in this slot means a newer sweep owns it; a head below
                // `cell` that the ring was rewound under us.
                if self.head.load(Ordering::Acquire) != cell {
                    return;
                }
                // AcqRel: Release publishes the stamp after our head raise; Acquire on failure.
                match slot.compare_exchange(
                    word,
                    pack_cell(round, false, 0),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(actual) => word = actual,
                }
            }
        }
    }

    /// The slot of cell `index` and the round tag it has there.
    #[inline]
    pub(super) fn place(&self, index: u64) -> (&AtomicU64, u64) {
        let (slot, round) = self.geometry.place(index);
        (&self.slots[slot], round & ROUND_MASK)
    }

    /// The count of cell `index` as it reads now (zero when its slot holds another round).
    pub(super) fn count_of(&self, index: u64) -> u64 {
        let (slot, round) = self.place(index);
        // Acquire: a snapshot read; pairs with writers' releases like every other slot load.
        let (word_round, _, count) = unpack_cell(slot.load(Ordering::Acquire));
        if word_round == round { count } else { 0 }
    }

    /// The denial for `n` in `cell` given the window's closed-cell sum and the cell's count.
    /// Reads the closed cells one by one to find when enough of them leave the window.
    pub(super) fn denial(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Decision {
        let cells = self.geometry.cells;
        let need = (prev + count + n).saturating_sub(limit);
        let closed = self.geometry.window_start(cell)..cell;
        // Closed cell `i` leaves the window when the clock reaches cell `i + cells`, oldest
        // first. When all of them together cannot free enough (a burst in this cell, the usual
        // case under attack), only this cell leaving can, and nothing needs reading.
        let mut retry_cell = cell.saturating_add(cells);
        if need <= prev {
            let mut freed = 0;
            for index in closed.clone() {
                freed += self.count_of(index);
                if freed >= need {
                    retry_cell = index.saturating_add(cells);
                    break;
                }
            }
        }
        // Back to full capacity when the newest used cell leaves.
        let newest_used = if count > 0 {
            Some(cell)
        } else if prev == 0 {
            None
        } else {
            closed.rev().find(|&index| self.count_of(index) > 0)
        };
        let reset = newest_used.map_or(0, |index| {
            self.geometry
                .start_of(index.saturating_add(cells))
                .saturating_sub(now)
        });
        let retry = self.geometry.start_of(retry_cell).saturating_sub(now);
        Decision::deny(limit, limit.saturating_sub(prev + count), retry, reset)
    }
}
