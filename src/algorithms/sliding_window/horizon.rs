//! The ring's lag horizon: where a caller goes when `head` is not its cell. A head ahead by at
//! most the horizon is a lagging read's to follow; a head further ahead, judged on a clock read
//! taken after it was loaded, is a leaping clock's, and the caller rewinds the ring to its own
//! cell. See the parent module's docs ("Time") for the bound.

use super::marks::EPOCH_STEP;
use super::{SlidingWindowLimiter, unpack_cell, visit};
use crate::clock::{Clock, MAX_CLOCK_LAG_NANOS};
use crate::packed::{TAG_MASK, unpack_window};
use crate::sync::{AtomicU64, Ordering};

/// The horizon in cells for cells of `cell_nanos`: `max(cells, ⌈H / cell⌉)`, where `H` is
/// [`MAX_CLOCK_LAG_NANOS`]. Two correct clocks' reads (at most `H` apart) are at most
/// `⌈H / cell⌉` cells apart.
pub(super) fn horizon_cells(cells: u64, cell_nanos: u64) -> u64 {
    MAX_CLOCK_LAG_NANOS.div_ceil(cell_nanos).max(cells)
}

/// The widest raise of `head` past the horizon in one epoch (between two rewinds): what a
/// rewind narrows the cells never reached to when the raise into the head it moves back from
/// was not the leap (a leaping clock's later calls raise `head` from the leaped cell). Written
/// by a raise after its compare-exchange ([`record_leap`](SlidingWindowLimiter::record_leap)),
/// read by the rewind that ends its epoch
/// ([`recorded_leap`](SlidingWindowLimiter::recorded_leap)); cold: only a raise past the
/// horizon (a leap, or a crossing after that much idleness) writes it.
///
/// `claim` is a try-lock that also names the gap's epoch: `epoch << 1 | busy`. A writer or
/// the reader takes it by one compare-exchange from an idle (even) value and so holds `from`
/// and `to` alone (no sequence to re-check, and no wait: whoever finds it busy, or loses the
/// compare-exchange, goes without); a writer releases it as its own epoch's idle value, the
/// reader as it found it. The shift drops the epoch name's top bit, so two epochs 2^63 rewinds
/// apart share a tag (`EPOCH_STEP` is odd: names `k` and `k + 2^63` rewinds apart differ in
/// the top bit only): exact for fewer than 2^63 rewinds in a limiter's life (292 years at one
/// a nanosecond).
pub(super) struct LeapRecord {
    /// `epoch << 1 | busy`: the epoch (the rewinds begun before the raise) `(from, to)` lies
    /// in, and whether a writer or the reader holds the record.
    claim: AtomicU64,
    /// The head the raise left, and the cell it raised `head` to: `(from, to)` held no cell in
    /// that epoch. Both 0 at first: an empty gap, harmless in any epoch.
    from: AtomicU64,
    to: AtomicU64,
}

/// The claim word of `epoch`'s record, idle.
fn idle(epoch: u64) -> u64 {
    epoch << 1
}

impl LeapRecord {
    /// No leap recorded: the empty gap `(0, 0)`, tagged with the epoch before the first (so a
    /// first raise past the horizon writes without reading the gap; the empty gap is harmless
    /// in any epoch anyway).
    pub(super) fn new() -> Self {
        LeapRecord {
            claim: AtomicU64::new(idle(EPOCH_STEP.wrapping_neg())),
            from: AtomicU64::new(0),
            to: AtomicU64::new(0),
        }
    }
}

/// One call's view of time: its clock read, whether it may read the clock again, and the newest
/// head it has seen (a head below that means the ring was rewound under the call).
pub(super) struct Caller<'a, C> {
    /// The time the call is decided at (a fresh read replaces it).
    pub(super) now: u64,
    /// The cell of `now`.
    pub(super) own: u64,
    /// The clock to re-read; `None` for the explicit-time API, whose `now` counts as fresh.
    clock: Option<&'a C>,
    /// The head value `now` was read after: `now` may judge that head a leaping clock's.
    fresh_for: Option<u64>,
    /// The highest head this call has loaded or raised it to (or rewound it to, since).
    seen: u64,
}

impl<'a, C: Clock> Caller<'a, C> {
    /// A call at `now` (cell `own`); `clock` is the clock it may re-read, if any.
    #[inline]
    pub(super) fn new(now: u64, own: u64, clock: Option<&'a C>) -> Self {
        Caller {
            now,
            own,
            clock,
            fresh_for: None,
            seen: 0,
        }
    }

    /// Whether `now` may judge `head` a leaping clock's: it was read after `head` was loaded (or
    /// given explicitly, which counts as fresh).
    fn fresh(&self, head: u64) -> bool {
        self.clock.is_none() || self.fresh_for == Some(head)
    }

    /// Whether `head` is below one this call saw: the ring was rewound under it.
    #[inline]
    pub(super) fn rewound(&self, head: u64) -> bool {
        head < self.seen
    }

    /// Records that head reached `cell` under this call (its own raise or crossing).
    #[inline]
    pub(super) fn reached(&mut self, cell: u64) {
        self.seen = self.seen.max(cell);
    }
}

impl<C: Clock> SlidingWindowLimiter<C> {
    /// Where a caller at `cell` goes after loading `head` (not `cell`): `(next cell, cross)`,
    /// where `cross` asks it to run the crossing into that cell whatever `base` says (head is
    /// below it). `past`: `cell` is sealed, so the caller must leave it.
    ///
    /// * `head` below a head this call saw before: a fresher clock judged that head a leap and
    ///   rewound the ring under us. A clocked caller re-reads its clock; an explicit-time caller
    ///   more than the horizon ahead of the rewound head is a leaping read itself and is decided
    ///   in the rewound head's cell. So the call that leaped never raises the ring there again.
    /// * `head` more than the horizon ahead of the caller's cell: on a clock read taken after
    ///   loading it, a leaping clock's. Rewound by compare-exchange from that value to the
    ///   caller's cell; the crossing then resets the window (its slots hold the leaped rounds).
    /// * Otherwise the newer of `head` and the caller's own cell (a lagging read follows head;
    ///   a caller never follows head beyond its own cell plus the horizon, but a caller whose
    ///   cell is sealed and is `head` walks on to the next cell, however far that is).
    pub(super) fn follow(
        &self,
        mut head: u64,
        cell: u64,
        past: bool,
        me: &mut Caller<'_, C>,
    ) -> (u64, bool) {
        loop {
            if me.rewound(head) {
                if let Some(clock) = me.clock {
                    self.reread(me, clock, head);
                } else if me.own > head.saturating_add(self.horizon) {
                    me.own = head;
                    me.now = self.geometry.start_of(head);
                }
                me.seen = head;
            }
            me.seen = me.seen.max(head);
            // `past` with `head` at the caller's cell: the caller is walking forward over cells
            // sealed before a rewind (it crossed into `cell` itself, or followed head there
            // within the horizon, and found it sealed), so `head` is its own walk's, not a
            // leaping clock's: it goes on to the next cell however far past `own + horizon`.
            // Judging it a leap would rewind the ring to `own` and walk the same sealed cells
            // again, forever. The walk ends at the first cell not sealed in its round; a cell
            // is sealed only by a crossing into a later cell, so at most one step per cell
            // between `own` and the newest head a crossing held (without new crossings by
            // others, which only ever end it sooner or move head past `cell`).
            let walking = past && head == cell;
            if head > me.own.saturating_add(self.horizon) && !walking {
                if !me.fresh(head) {
                    if let Some(clock) = me.clock {
                        self.reread(me, clock, head);
                    }
                    continue;
                }
                // Begun before head moves back (so before any slot write that follows the
                // rewind) and ended after: see `SlidingWindowLimiter::refund`.
                let epoch = self.rewinds_begun.fetch_add(EPOCH_STEP, Ordering::SeqCst);
                // Before head moves back: a peek that loads the rewound head (or a later one)
                // reads the cells up to this one that it would take for empty
                // (`closed_for_peek`). SeqCst, as the rewinds begun.
                let read_below = self
                    .rewound_from
                    .fetch_max(head.saturating_add(1), Ordering::SeqCst)
                    .max(head.saturating_add(1));
                // Before head moves back: no crossing after the rewind reads the ends of one
                // before it (see [Ends](super#ends)).
                self.clear_ends(me.own);
                // AcqRel: Release orders the rewind before our crossing's seals and stamps (a
                // reader that sees those re-reads head); Acquire as every head load.
                let moved = self.head.cell.compare_exchange(
                    head,
                    me.own,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                if moved.is_ok() {
                    // Before the rewind ends: a peek skips the cells never reached only once
                    // every rewind it may have seen has ended (`unreached_cells`).
                    self.narrow_unreached(head, epoch, read_below);
                }
                self.rewinds_ended.fetch_add(EPOCH_STEP, Ordering::SeqCst);
                match moved {
                    Ok(_) => {
                        me.seen = me.own;
                        return (me.own, true);
                    }
                    Err(actual) => {
                        head = actual;
                        continue;
                    }
                }
            }
            let mut next = head.max(me.own);
            if past && next == cell {
                next = cell.saturating_add(1);
            }
            return (next, head < next);
        }
    }

    /// After a rewind moved `head` back from `head` (its compare-exchange succeeded; `epoch`:
    /// the rewinds begun before it, as its `fetch_add` returned them): narrows the cells never
    /// reached, `[unreached_from, unreached_to)`, by one of three gaps that `head` held no cell
    /// of since the previous rewind: the top one, `(raised_from, head)`; the widest raise past
    /// the horizon recorded in this rewind's epoch ([`recorded_leap`](Self::recorded_leap)),
    /// `(from, to)` of that raise; and the cells above `head`, `(head, u64::MAX)`. It takes the
    /// one with the most cells below `read_below` (what its raise of
    /// [`rewound_from`](SlidingWindowLimiter::rewound_from) left it at: a peek reads only cells
    /// below that), so the choice costs no access to shared memory. After a
    /// leaping clock's calls in several cells the top gap is the last of them (empty); the
    /// recorded one is the leap's, from the head it left to the leaped cell. After a leap to the
    /// end of time and its rewind, a later rewind from a head past the horizon keeps the leaped
    /// era's range above that head (`raised_from` stays at the leaped era's head, so the top gap
    /// is empty from then on, for the limiter's life).
    ///
    /// Why this is exact: a count is only ever written in a cell `head` has held (a writer
    /// needs its cell's `base`, published after `head` reached the cell), so only cells `head`
    /// held before a rewind can hold counts no crossing since has counted; and between two
    /// rewinds `head` only rises, so a raise from `a` to `b` leaves `(a, b)` unheld in its epoch.
    /// The top gap: every raise records the head it raises from before its compare-exchange
    /// ([`raise`](Self::raise)), and our compare-exchange read the change that put `head` at
    /// `head`: a raise (so `raised_from` is at least the head it raised from, and since the
    /// rewind before it, or the start, `head` held no cell in between) or a rewind to `head`
    /// (then `head` held only `head` since). Reading `raised_from` before our compare-exchange
    /// instead could miss a rewind and a raise back to `head` in between; this read, after it,
    /// cannot. The recorded gap: [`recorded_leap`](Self::recorded_leap) returns only a raise
    /// that happened in the epoch this rewind ends (it says why). The gap above: our
    /// compare-exchange moved `head` back from `head`, and since the previous rewind `head`
    /// only rose, so it held no cell above `head`. So each gap holds no cell
    /// `head` held since the previous rewind, and the range as it stood, none held before it (by
    /// induction: it starts as every cell, and only ever narrows, by these two
    /// read-modify-writes, which commute, so rewinds that race narrow it by both). The other
    /// cells below [`rewound_from`](SlidingWindowLimiter::rewound_from) are read by a peek as
    /// before. An empty range (a narrowing only ever narrows it) reads every cell below
    /// `rewound_from`, as before.
    fn narrow_unreached(&self, head: u64, epoch: u64, read_below: u64) {
        // Relaxed: our compare-exchange on `head` (AcqRel) read the raise into `head`, whose
        // record (`raise`, ordered before its Release) this load therefore sees, or a later one.
        let below = self.head.raised_from.load(Ordering::Relaxed);
        let leap = self.recorded_leap(epoch);
        // The cells of the open gap `(from, to)` below `read_below`: those a peek may read.
        let kept =
            |(from, to): (u64, u64)| to.min(read_below).saturating_sub(from.saturating_add(1));
        let (mut from, mut to) = (below, head);
        for gap in leap.into_iter().chain([(head, u64::MAX)]) {
            if kept(gap) > kept((from, to)) {
                (from, to) = gap;
            }
        }
        // SeqCst: as the rewinds ended, which a peek reads before these (`unreached_cells`).
        self.unreached_from
            .fetch_max(from.saturating_add(1), Ordering::SeqCst);
        self.unreached_to.fetch_min(to, Ordering::SeqCst);
    }

    /// The rewinds' epoch a raise of `head` past the horizon may lie in, read before its
    /// compare-exchange on `head`: the rewinds ended. The raise records its gap
    /// ([`record_leap`](Self::record_leap)) only if the rewinds begun, read after that
    /// compare-exchange, are this same count: then every rewind begun before this load had
    /// ended (see [`recorded_leap`](Self::recorded_leap)).
    #[cold]
    pub(super) fn leap_epoch(&self) -> u64 {
        // SeqCst: as the rewinds' counters everywhere (`follow` adds to them around its
        // compare-exchange on `head`).
        self.rewinds_ended.load(Ordering::SeqCst)
    }

    /// Records the raise of `head` from `from` to `to` (its compare-exchange succeeded, past
    /// the horizon) as its epoch's leap, the rewinds ended read before that compare-exchange
    /// by [`leap_epoch`](Self::leap_epoch), if the rewinds begun are still that count and the
    /// gap is wider than the epoch's leap recorded so far. The writer holds the record by its
    /// claim word ([`LeapRecord`]): one that finds it busy, or loses the claim, records nothing
    /// (a rewind then narrows by less; never a wait).
    #[cold]
    pub(super) fn record_leap(&self, epoch: u64, from: u64, to: u64) {
        let leap = &self.leap;
        // SeqCst (every access to the record and the rewinds' counters): the epoch's proof
        // (`recorded_leap`) is an argument over their single total order.
        if self.rewinds_begun.load(Ordering::SeqCst) != epoch {
            return;
        }
        let claim = leap.claim.load(Ordering::SeqCst);
        if claim & 1 == 1
            || leap
                .claim
                .compare_exchange(claim, claim | 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return;
        }
        // The epoch's own record, no narrower: left as it is.
        if claim == idle(epoch)
            && to - from
                <= leap
                    .to
                    .load(Ordering::SeqCst)
                    .saturating_sub(leap.from.load(Ordering::SeqCst))
        {
            leap.claim.store(claim, Ordering::SeqCst);
            return;
        }
        leap.from.store(from, Ordering::SeqCst);
        leap.to.store(to, Ordering::SeqCst);
        leap.claim.store(idle(epoch), Ordering::SeqCst);
    }

    /// For the rewind whose `fetch_add` on the rewinds begun returned `epoch` and whose
    /// compare-exchange on `head` then succeeded: the widest raise past the horizon in the
    /// epoch that compare-exchange ends, `(from, to)`, if one is recorded, no other rewind has
    /// begun since this one and no writer holds the record.
    ///
    /// Why the raise lies in that epoch (between the previous successful rewind and ours, in
    /// `head`'s modification order), all loads SeqCst: the raise read the rewinds ended
    /// `epoch` before its compare-exchange ([`leap_epoch`](Self::leap_epoch)) and the rewinds
    /// begun `epoch` after it ([`record_leap`](Self::record_leap)). The begun count only grows
    /// and is never below the ended one, so it was `epoch` at the first load as well: every
    /// rewind begun before the raise's compare-exchange had ended, its compare-exchange done,
    /// before it (each counts itself ended after it). The rewinds begun still `epoch` after
    /// the raise's compare-exchange, before our `fetch_add`: had our compare-exchange come
    /// first on `head`, the raise's (Acquire) would have read it or a raise after it (every
    /// write of `head` is a read-modify-write) and so seen our count. And we read the rewinds
    /// begun as we left them after our compare-exchange: a rewind begun since cannot have moved
    /// `head` before us (ours would have read its move, and then its count). So no rewind moved
    /// `head` between the raise and ours, and the raise's gap holds no cell `head` held in our
    /// epoch. The record is one consistent write of that raise's: we hold its claim word, taken
    /// from `epoch`'s idle value, which only a writer of `epoch` leaves, after storing its gap
    /// while it held the word alone.
    fn recorded_leap(&self, epoch: u64) -> Option<(u64, u64)> {
        let leap = &self.leap;
        // SeqCst: as in `record_leap`.
        if self.rewinds_begun.load(Ordering::SeqCst) != epoch.wrapping_add(EPOCH_STEP) {
            return None;
        }
        let claim = idle(epoch);
        if leap.claim.load(Ordering::SeqCst) != claim
            || leap
                .claim
                .compare_exchange(claim, claim | 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return None;
        }
        let gap = (
            leap.from.load(Ordering::SeqCst),
            leap.to.load(Ordering::SeqCst),
        );
        leap.claim.store(claim, Ordering::SeqCst);
        Some(gap)
    }

    /// A fresh clock read for a caller that has just loaded `head`.
    #[cold]
    fn reread(&self, me: &mut Caller<'_, C>, clock: &C, head: u64) {
        me.now = clock.now_nanos();
        me.own = self.geometry.cell_of(me.now);
        me.fresh_for = Some(head);
    }

    /// The cell a peek at `me` reads, and the head it judged: as [`follow`](Self::follow)
    /// decides, without writing (a leaped head is read past, not rewound).
    pub(super) fn peek_cell(&self, me: &mut Caller<'_, C>) -> (u64, u64) {
        loop {
            // Acquire: see `acquire_at`.
            let head = self.head.cell.load(Ordering::Acquire);
            if head <= me.own.saturating_add(self.horizon) {
                return (head.max(me.own), head);
            }
            match me.clock {
                Some(clock) if !me.fresh(head) => self.reread(me, clock, head),
                _ => return (me.own, head),
            }
        }
    }

    /// Where a call that reaches `cell` is decided, for a peek: `(cell, its count)` for the
    /// first cell from `cell` on whose slot does not hold its round sealed (a call that finds
    /// its cell sealed walks on to the next, see [`follow`](Self::follow)). The last cell of
    /// time, which no crossing seals, reads as sealed only through its round tag's wrap: the
    /// call resets it as stale, so the walk ends there with a count of zero. The first cell's
    /// slot is read once, for its count as well.
    ///
    /// The walk stops, with a count of zero, at the first cell whose slot the call's crossing
    /// into `cell` seals for a cell of `cell`'s window (a round earlier: the call then finds it
    /// stale), if the ring had not been crossed into `cell` yet.
    pub(super) fn past_sealed(&self, mut cell: u64) -> (u64, u64) {
        // (None past the end of time: no slot of a later cell is resealed.)
        let resealed = self
            .geometry
            .window_start(cell)
            .checked_add(self.slot_mask + 1);
        loop {
            if resealed.is_some_and(|resealed| cell >= resealed) {
                return (cell, 0);
            }
            visit();
            let (slot, round) = self.place(cell);
            // Acquire: a snapshot read, as `count_of`.
            let (word_round, sealed, count) = unpack_cell(slot.load(Ordering::Acquire));
            if word_round != round {
                return (cell, 0);
            }
            if !sealed {
                return (cell, count);
            }
            match cell.checked_add(1) {
                Some(next) => cell = next,
                // The last cell, aliased: the call resets it (`acquire_general`).
                None => return (cell, 0),
            }
        }
    }

    /// The sweep at `me`: prepares the caller's cell. A clocked sweep rewinds a leaped head first
    /// (on a fresh read, as a caller would); an explicit-time sweep never does, since a sweep
    /// at a late time is allowed and changes nothing.
    pub(super) fn sweep_with(&self, mut me: Caller<'_, C>) {
        let cell = me.own;
        // Acquire: as in `acquire_at`.
        let (tag, _) = unpack_window(self.base.word.load(Ordering::Acquire));
        if tag == cell & TAG_MASK {
            self.pre_stamp(cell, cell);
            return;
        }
        match self.advance(cell, &mut me) {
            Ok(()) => {}
            Err(head) if head > cell && me.clock.is_some() => {
                let (next, cross) = self.follow(head, cell, false, &mut me);
                // Only a rewind (or a fresh read past head) asks for a crossing; a sweep never
                // follows a head ahead of it.
                if cross && next == me.own {
                    let _ = self.advance(next, &mut me);
                }
            }
            Err(_) => {} // rewound under us: the rewinder's crossing prepares the ring
        }
    }
}
