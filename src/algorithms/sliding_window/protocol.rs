//! The ring's protocol: admission on the open cell, the crossing (head raise, seals and marks,
//! base), and the pre-stamp sweep. See the parent module's docs; the marks and the denial's
//! retry/reset search are in `marks`.

use super::horizon::Caller;
use super::marks::{Closed, Walk};
use super::{
    ROUND_MASK, SEALED, SlidingWindowLimiter, named_sum, open_count, pack_cell, unpack_cell, visit,
};
use crate::clock::Clock;
use crate::decision::{AcquireError, Decision, check_permits};
use crate::packed::{MAX_COUNT, TAG_MASK, pack_window, unpack_window};
use crate::sync::{AtomicU64, Ordering};

/// A crossing's walk: `(suffix, prefix, stamp from, what it walked)`.
type Walked = (u64, u64, u64, Walk);

/// What [`short`](SlidingWindowLimiter::short) found.
enum Short {
    /// Admitted in the caller's cell, leaving this many permits in its window.
    Allowed(u64),
    /// Refused on `base`'s sum `prev` and the open cell's `count`; `short` is how far
    /// `prev + count + n` is above the limit (at least 1).
    Refused { prev: u64, count: u64, short: u64 },
    /// Not the common case: the general loop decides.
    General,
}

impl<C: Clock> SlidingWindowLimiter<C> {
    /// Decides `n` for a call at `now` (`clock`: the clock it may re-read, `None` for the
    /// explicit-time API). The fast path is: load `base`, load the cell, one compare-exchange;
    /// `head` is read (and the horizon judged, see [`follow`](Self::follow)) only when the cell is
    /// not the current one.
    #[inline]
    pub(super) fn acquire_at(&self, n: u64, limit: u64, now: u64, clock: Option<&C>) -> Decision {
        self.acquire_counted(n, limit, now, clock).0
    }

    /// [`acquire_at`](Self::acquire_at), with the cell the call was decided in (an allowed
    /// call's permits are counted in it): a lease's expiry is that cell's end.
    ///
    /// The common case is [`short`](Self::short)'s; a refusal there is answered as a burst
    /// (reading nothing), from the published ends by
    /// [`published_waits`](Self::published_waits) (inlined; its answer in two registers, the
    /// `Decision` built here), or through the marks by
    /// [`after_short`](Self::after_short) (cold; one call site keeps this path short), which
    /// also takes everything else (a crossing, a sealed or stale slot, marks that changed under
    /// a denial, a lost compare-exchange) to [`acquire_general`](Self::acquire_general).
    #[inline(always)]
    pub(super) fn acquire_counted(
        &self,
        n: u64,
        limit: u64,
        now: u64,
        clock: Option<&C>,
    ) -> (Decision, u64) {
        let (short, cell) = self.short(n, limit, now);
        match short {
            Short::Allowed(left) => return (self.allowed_left(cell, now, limit, left), cell),
            Short::Refused { prev, count, short } => {
                // `cell` is the cell of `now` (`short` located it), so its start is at most
                // `now`: the product cannot overflow.
                let start = cell.wrapping_mul(self.geometry.cell_nanos);
                // `count + n > limit` (the burst denial's test) as `short > prev`: `short` is
                // `prev + count + n − limit` (checked below), so the two agree, and `short` is
                // in hand where `count + n` is another sum (1 instruction a denial).
                let burst = short > prev;
                debug_assert_eq!(burst, count + n > limit);
                if let Some(denied) =
                    self.burst_denial_if(burst, (cell, start), now, prev, count, limit)
                {
                    return (denied, cell);
                }
                // The closed cells must free some of it: from the published ends when the
                // oldest used closed cell frees enough (no mark read, see
                // `published_waits`), else through the marks (`after_short`). `short`
                // refused on `prev + count + n > limit` by that much: `need`, at least 1 (as
                // the refusal computed it, negated: the sum is not added up again here).
                let need = short;
                debug_assert_eq!(need, prev + count + n - limit);
                if let Some((retry, reset)) = self.published_waits(cell, now, prev, count, need) {
                    let remaining = limit.saturating_sub(prev + count);
                    let denied = Decision::denied_in_units(limit, remaining, 1, retry, reset);
                    return (denied, cell);
                }
            }
            Short::General => {}
        }
        self.after_short(n, limit, now, clock)
    }

    /// What [`short`](Self::short) and the published ends left undecided, decided again: the
    /// short path once more (from fresh loads: the call is decided on the state it reads now,
    /// as any call), then a refusal that the closed cells must free read through the marks, as
    /// the general loop's first round would read it, in a frame smaller than that loop's; else
    /// (or when the marks changed under it) [`acquire_general`](Self::acquire_general). Handed
    /// only what the call was asked (`n`, the limit, `now`, the clock), so that the short path
    /// keeps no more than that across its call of [`published_waits`](Self::published_waits)
    /// (then out of line): handing it the refusal's `(cell, prev, count)` as well cost the short
    /// path's admission and burst denial a register spilled (`self`) and 1 to 2 instructions a
    /// call. Reading the short path again costs this path: a two-permit denial through the
    /// marks 392 -> 434 instructions, a crossing 787.6 -> 814.6 (a scratch measure,
    /// `CHANGELOG`).
    #[cold]
    #[inline(never)]
    fn after_short(&self, n: u64, limit: u64, now: u64, clock: Option<&C>) -> (Decision, u64) {
        let (short, cell) = self.short(n, limit, now);
        let refused = match short {
            Short::Allowed(left) => return (self.allowed_left(cell, now, limit, left), cell),
            Short::Refused { prev, count, .. } => {
                let start = cell.wrapping_mul(self.geometry.cell_nanos);
                if let Some(denied) = self.burst_denial((cell, start), now, prev, count, n, limit) {
                    return (denied, cell);
                }
                Some((prev, count))
            }
            Short::General => None,
        };
        if let Some((prev, count)) = refused {
            // As `marked_denial`, inlined here (one frame for this path).
            let closed = Closed::of_crossing(cell, self.geometry.window_start(cell), prev);
            if let Some(denied) = self.denial(cell, now, closed, count, n, limit) {
                return (denied, cell);
            }
        }
        self.acquire_general(n, limit, now, cell, clock, refused)
    }

    /// [`acquire_at`](Self::acquire_at) answering only whether the permits were taken
    /// ([`Limiter::admit`](crate::Limiter::admit)), with its errors: a decision (and effect)
    /// `acquire_at` could have made (called alone, the same one; under races, not necessarily
    /// the one a racing `acquire_at` call makes). A refusal on the short path is final as it
    /// stands (exact for a caller whose clock is in that cell, as `acquire_at`'s refusal there
    /// is, without its retry and reset times), so it reads no marks. `n` above the limit can
    /// never be admitted (the short path refuses it, writing nothing), so that error is looked
    /// for only on the paths that do not admit.
    #[inline(always)]
    pub(super) fn admit_at(
        &self,
        n: u32,
        limit: u64,
        now: u64,
        clock: Option<&C>,
    ) -> Result<bool, AcquireError> {
        if n == 0 {
            check_permits(n, limit)?;
        }
        let permits = u64::from(n);
        match self.short(permits, limit, now) {
            (Short::Allowed(_), _) => Ok(true),
            (Short::Refused { .. }, _) => check_permits(n, limit).map(|()| false),
            (Short::General, cell) => {
                check_permits(n, limit)?;
                let (decision, _) = self.acquire_general(permits, limit, now, cell, clock, None);
                Ok(decision.is_allowed())
            }
        }
    }

    /// The common case in one pass, as the first round of the general loop decides it, and the
    /// caller's cell: `base` names the caller's cell, and its slot holds the cell's round, open.
    /// Then the request is admitted by one compare-exchange ([`Short::Allowed`]) or refused on
    /// the `(base sum, count)` it read ([`Short::Refused`]); anything else is
    /// [`Short::General`]'s. A refusal is exact: `base`'s sum covers the window's closed cells,
    /// all sealed, and the one open cell's count was read after it, so the state it was decided
    /// on was the state at that load.
    #[inline(always)]
    fn short(&self, n: u64, limit: u64, now: u64) -> (Short, u64) {
        // Acquire: as in `acquire_general`. The hint beside it: any value is checked before use.
        let base = self.base.word.load(Ordering::Acquire);
        // Relaxed: a hint, checked (see `BaseLine::hint`).
        let (cell, slot_index, round) = self.locate(self.base.hint.load(Ordering::Relaxed), now);
        let Some(prev) = named_sum(base, cell) else {
            return (Short::General, cell);
        };
        let slot = &self.slots[slot_index];
        // Acquire: as in `acquire_general`.
        let word = slot.load(Ordering::Acquire);
        let Some(count) = open_count(word, round) else {
            return (Short::General, cell);
        };
        let taken = prev + count + n;
        // `limit − taken` (wrapping), the admission's `remaining` when it is not negative; the
        // refusal hands on its negation, `taken − limit` (an admission keeps its registers).
        let left = limit.wrapping_sub(taken);
        if taken > limit {
            let short = left.wrapping_neg();
            return (Short::Refused { prev, count, short }, cell);
        }
        // AcqRel / Acquire: as in `acquire_general`.
        match slot.compare_exchange(word, word + n, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => (Short::Allowed(left), cell),
            Err(_) => (Short::General, cell),
        }
    }

    /// Whether `cell` ends within the `u64` timeline, `(cell + 1) × cell_nanos ≤ u64::MAX`:
    /// exactly when it lies below `last_cell` (`u64::MAX / cell_nanos`, the last cell that
    /// starts within it). The cells a crossing leaves as the hint ([`locate`](Self::locate)).
    #[inline(always)]
    fn ends_in_timeline(&self, cell: u64) -> bool {
        cell < self.last_cell
    }

    /// The cell of `now`, its slot and its round (unreduced): the `hint` when `now` lies in the
    /// cell it names (no division), else computed; the slot and the round are then the cell
    /// index's low bits and the rest (the ring's slots are a power of two).
    ///
    /// `hint` is a value of [`BaseLine::hint`](super::BaseLine::hint): 0, or a cell a crossing
    /// stored, which it stores only when the cell ends within the `u64` timeline
    /// ([`advance`](Self::advance)): `start + cell_nanos ≤ u64::MAX` for its `start`, `hint ×
    /// cell_nanos`, which therefore does not wrap. Then `now` lies in the cell exactly when `now −
    /// start`, wrapping, is below `cell_nanos`: for `now ≥ start` that is the plain difference,
    /// and for `now < start` the wrapped one is `2^64 − (start − now) ≥ 2^64 − start >
    /// cell_nanos`. (The timeline's last cell, which ends past `u64::MAX` unless `cell_nanos`
    /// divides `2^64`, is never a hint: with its start at `u64::MAX − (u64::MAX mod cell_nanos)`,
    /// a `now` below `cell_nanos − 1 − (u64::MAX mod cell_nanos)` would wrap below
    /// `cell_nanos`.) One product, one subtraction and one comparison, where the checked
    /// product and the two comparisons cost 4 instructions more a call (`examples/instructions
    /// sliding-window-60 allow quanta` 71.0 -> 67.0; issue 17, fifth round).
    #[inline(always)]
    pub(super) fn locate(&self, hint: u64, now: u64) -> (u64, usize, u64) {
        let cell_nanos = self.geometry.cell_nanos;
        debug_assert!(
            self.ends_in_timeline(hint),
            "a hint ends within the timeline"
        );
        if now.wrapping_sub(hint.wrapping_mul(cell_nanos)) < cell_nanos {
            return self.place_of(hint);
        }
        self.place_of(self.geometry.cell_of(now))
    }

    /// Nanoseconds from `now` until cell `cell` leaves the window (the start of cell
    /// `cell + cells`), given `start`: the cell's start, or any value at which `start + window`
    /// overflows (`u64::MAX`, as `RingGeometry::start_of`
    /// saturates). One addition where the caller has the start in hand; where it overflows, the
    /// exact `RingGeometry::until_start` of that cell.
    #[inline(always)]
    fn until_leaves(&self, cell: u64, start: u64, now: u64) -> u64 {
        match start.checked_add(self.window_nanos) {
            // `start + window` is `(cell + cells) × cell_nanos`, in range.
            Some(end) => end.saturating_sub(now),
            None => self
                .geometry
                .until_start(cell.saturating_add(self.geometry.cells), now),
        }
    }

    /// `(cell, slot, round)` of cell `cell` (round unreduced): its index's low bits and the rest.
    #[inline(always)]
    pub(super) fn place_of(&self, cell: u64) -> (u64, usize, u64) {
        (
            cell,
            (cell & self.slot_mask) as usize,
            cell >> self.slot_bits,
        )
    }

    /// The answer for an admission in `cell` that left `left` permits in the window.
    #[inline(always)]
    fn allowed_left(&self, cell: u64, now: u64, limit: u64, left: u64) -> Decision {
        let reset = self
            .geometry
            .until_start(cell.saturating_add(self.geometry.cells), now);
        Decision::allow(limit, left, reset)
    }

    /// The answer for an admission in `cell` that brought the window to `taken`.
    #[inline(always)]
    fn allowed(&self, cell: u64, now: u64, limit: u64, taken: u64) -> Decision {
        let reset = self
            .geometry
            .until_start(cell.saturating_add(self.geometry.cells), now);
        Decision::allow(limit, limit - taken, reset)
    }

    /// The denial of `n` in `cell` when this cell's own count (`count`) already leaves no room
    /// for it: only this cell leaving frees enough, and it is the newest used one, so nothing is
    /// read (the usual denial under attack). `None` otherwise. `start` is the cell's start, or
    /// `u64::MAX` (see [`until_leaves`](Self::until_leaves)). Every caller has checked
    /// `n ≤ limit` (`check_permits`, on the limit it passes), so `count + n > limit` means
    /// `count ≥ 1`: this cell is used, and no test of `count > 0` is needed (3 instructions a
    /// denial, `examples/instructions sliding-window-60 deny`).
    #[inline(always)]
    fn burst_denial(
        &self,
        (cell, start): (u64, u64),
        now: u64,
        prev: u64,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Option<Decision> {
        debug_assert!(
            n <= limit,
            "callers check the permits against the limit first"
        );
        self.burst_denial_if(count + n > limit, (cell, start), now, prev, count, limit)
    }

    /// [`burst_denial`](Self::burst_denial), its test `count + n > limit` made by the caller
    /// (`burst`).
    #[inline(always)]
    fn burst_denial_if(
        &self,
        burst: bool,
        (cell, start): (u64, u64),
        now: u64,
        prev: u64,
        count: u64,
        limit: u64,
    ) -> Option<Decision> {
        burst.then(|| {
            let leaves = self.until_leaves(cell, start, now);
            let remaining = limit.saturating_sub(prev + count);
            Decision::deny(limit, remaining, leaves, leaves)
        })
    }

    /// The general loop of [`acquire_counted`](Self::acquire_counted): crossings, stale and
    /// sealed slots, lagging and leaping reads, denials through the marks, lost races.
    /// `changed`: the short path refused the call in `own` on `(prev, count)` (the published
    /// crossing's sum and the cell's count), and the denial read through the marks found them
    /// changed under it ([`after_short`](Self::after_short)): the loop's first round from there.
    #[inline(never)]
    fn acquire_general(
        &self,
        n: u64,
        limit: u64,
        now: u64,
        own: u64,
        clock: Option<&C>,
        changed: Option<(u64, u64)>,
    ) -> (Decision, u64) {
        let mut me = Caller::new(now, own, clock);
        let mut cell = me.own;
        // Cross into `cell` whatever `base` says: head is below it (`follow` says so).
        let mut cross = false;
        // Whether a denial already found the marks changed under it once (`marks_changed`).
        let mut again = false;
        if let Some((prev, count)) = changed {
            // The loop's first round, from the marks found changed on.
            let asked = (prev, count, n, limit);
            if let Some(denied) = self.marks_changed(cell, now, asked, &mut again) {
                return (denied, cell);
            }
        }
        'cell: loop {
            // Acquire: a base word comes with the seals and the head raise made before it.
            let (tag, prev) = unpack_window(self.base.word.load(Ordering::Acquire));
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
                // No crossing seals the last cell of time (1 ns cells): there is no later cell
                // to cross into. Its slot reads as sealed only through its round tag's wrap (it
                // holds a cell's a tag period, 2^39 rounds, before it): stale, reset below.
                let aliased = sealed && cell == u64::MAX;
                let (next, taken) = if word_round == round && !aliased {
                    if sealed {
                        // Someone crossed past this cell: the request belongs to a newer one.
                        // Acquire: the sealer raised head before sealing.
                        let head = self.head.cell.load(Ordering::Acquire);
                        // (`cell` is not the last cell: `follow` moves it on.)
                        (cell, cross) = self.follow(head, cell, true, &mut me);
                        continue 'cell;
                    }
                    let taken = prev + count + n;
                    if taken > limit {
                        let asked = (prev, count, n, limit);
                        match self.deny(cell, me.now, prev, count, n, limit) {
                            Some(denied) => return (denied, cell),
                            None => match self.marks_changed(cell, me.now, asked, &mut again) {
                                Some(denied) => return (denied, cell),
                                None => continue 'cell,
                            },
                        }
                    }
                    (word + n, taken)
                } else {
                    // Another round (or the last cell's aliased seal): stale (reset it), unless a
                    // newer thread stamped it, or the ring was rewound below this cell.
                    // Acquire: pairs with the stamper's head raise, ordered before its stamp.
                    let head = self.head.cell.load(Ordering::Acquire);
                    if head != cell {
                        (cell, cross) = self.follow(head, cell, false, &mut me);
                        continue 'cell;
                    }
                    let taken = prev + n;
                    if taken > limit {
                        let asked = (prev, 0, n, limit);
                        match self.deny(cell, me.now, prev, 0, n, limit) {
                            Some(denied) => return (denied, cell),
                            None => match self.marks_changed(cell, me.now, asked, &mut again) {
                                Some(denied) => return (denied, cell),
                                None => continue 'cell,
                            },
                        }
                    }
                    (pack_cell(round, false, n), taken)
                };
                // AcqRel: Release keeps a later acquirer of this slot ordered after our head
                // reads; Acquire on failure as the load above.
                match slot.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return (self.allowed(cell, me.now, limit, taken), cell),
                    Err(actual) => word = actual,
                }
            }
        }
    }

    /// The denial of `n` in `cell`, the published crossing (`prev` its `base` sum, `count` taken
    /// in it), through the marks; `None` when they changed under the call (see `marks`).
    #[inline(never)]
    fn deny(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Option<Decision> {
        let start = self.geometry.start_of(cell);
        match self.burst_denial((cell, start), now, prev, count, n, limit) {
            Some(denied) => Some(denied),
            None => self.marked_denial(cell, now, prev, count, n, limit),
        }
    }

    /// [`deny`](Self::deny) when the closed cells must free some of the request: through the
    /// marks (out of line: a search).
    #[inline(never)]
    fn marked_denial(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Option<Decision> {
        let closed = Closed::of_crossing(cell, self.geometry.window_start(cell), prev);
        self.denial(cell, now, closed, count, n, limit)
    }

    /// A denial whose marks changed under the call: `None` to decide the call again from a fresh
    /// `base` when a newer crossing moved head on (once: `decided_again`), else the denial read
    /// from the cells one by one (the marks changed again, or after a leap).
    #[cold]
    fn marks_changed(
        &self,
        cell: u64,
        now: u64,
        (prev, count, n, limit): (u64, u64, u64, u64),
        decided_again: &mut bool,
    ) -> Option<Decision> {
        // Acquire: as every head load; a newer head means the call's cell is (being) sealed.
        if !*decided_again && self.head.cell.load(Ordering::Acquire) != cell {
            *decided_again = true;
            return None;
        }
        Some(self.denial_by_scan(cell, now, prev, count, n, limit))
    }

    /// Crossing into `cell` for `me`: raise head, seal and mark the window's closed cells that
    /// are new to it, publish their sum, pre-stamp the future. `Err(head)` when some thread is
    /// already past `cell`, or when the ring was rewound under this call (head below one it
    /// saw): a call never raises head again after the ring was rewound under it.
    pub(super) fn advance(&self, cell: u64, me: &mut Caller<'_, C>) -> Result<(), u64> {
        // SeqCst: the rewinds begun before this crossing looked at `head` (the epoch its ends
        // are named in, see `ends_name`), read again after it: a rewind counts itself before
        // it moves `head` back, so when both reads agree, no rewind began between them, and
        // the `head` this crossing goes on from is of that epoch (a crossing that saw a rewound
        // `head` reads the rewind's count after it). A crossing that raced a rewind publishes
        // no ends (readers search the marks until the next crossing).
        let epoch = self.rewinds_begun.load(Ordering::SeqCst);
        // Acquire: a head value comes with the stamps and seals made before it was raised.
        let head = self.head.cell.load(Ordering::Acquire);
        if head > cell || me.rewound(head) {
            return Err(head);
        }
        if head < cell {
            self.raise(head, cell)?;
        }
        // SeqCst: as the first read of the epoch, above.
        let epoch = (self.rewinds_begun.load(Ordering::SeqCst) == epoch).then_some(epoch);
        me.reached(cell);
        // Acquire: a base word comes with its crossing's seals and marks.
        let mut current = self.base.word.load(Ordering::Acquire);
        // The newest published crossing at or before `cell` with the base's tag (its tag read as
        // every call reads it: a crossing less than 2^40 cells back; the marks it is trusted for
        // are checked against their cells' rounds besides).
        let published = cell.checked_sub(cell.wrapping_sub(unpack_window(current).0) & TAG_MASK);
        let block = self.block_start(cell);
        let future = self.geometry.future;
        let (suffix, prefix, stamp_from, walked) = match published {
            // Published by another crosser (who got here first: the usual race of a cell's first
            // callers): done, unless a leap overwrote the window's marks; then the window is
            // walked again (and the published sum kept: a rewind only ever
            // makes sealed counts read lower).
            Some(p) if p == cell && self.marks_of(cell, cell).is_some() => return Ok(()),
            // The previous crossing is in this block: its window is sealed and marked, only the
            // cells from it on are new. O(1) per cell crossed.
            Some(p) if p >= block && p < cell => match self.marks_of(p, cell) {
                Some((suffix, prefix)) => {
                    let (prefix, newest) = self.walk_prefix(block, p, cell, prefix)?;
                    let p_sum = unpack_window(current).1;
                    let walked = Walk::From((p, p_sum), newest);
                    (suffix, prefix, p.saturating_add(future + 1), walked)
                }
                None => self.whole_window(cell)?,
            },
            // The first crossing into a block, or after a gap or a leap: the whole window.
            _ => self.whole_window(cell)?,
        };
        let sum = (suffix + prefix).min(MAX_COUNT);
        let want = pack_window(cell & TAG_MASK, sum);
        loop {
            if unpack_window(current).0 == cell & TAG_MASK {
                // Published by another crosser (the same sum: sealed cells are final), who
                // publishes the ends, pre-stamps and leaves the hint: nothing is left to do.
                return Ok(());
            }
            // Acquire: a newer base was published after its head raise. A head below `cell` was
            // rewound under us (a leap judged by a fresher clock): our crossing is void.
            let head = self.head.cell.load(Ordering::Acquire);
            if head != cell {
                return Err(head);
            }
            // AcqRel: Release publishes our seals and marks with the base; Acquire on failure.
            match self.base.word.compare_exchange(
                current,
                want,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        // Only the crosser that published `base` goes on, after it: the ends (see
        // [Ends](super#ends)), the pre-stamps and the hint. The other crossers of the cell do
        // none of it (each is only ever an optimisation, so a stalled winner's costs a writer
        // one compare-exchange at most, or a reader a search of the marks).
        self.publish_ends(cell, sum, walked, epoch);
        self.pre_stamp(cell, stamp_from);
        // Relaxed: a hint, checked by every reader (see `BaseLine::hint`). Only a cell that
        // ends within the `u64` timeline (all but the timeline's last): `locate` multiplies it
        // unchecked and checks `now` against it with one wrapping subtraction, which that
        // cell's start would let wrap into it from the timeline's first nanoseconds.
        if self.ends_in_timeline(cell) {
            self.base.hint.store(cell, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Raises `head` from `from` (as loaded) to `cell`, as `fetch_max` would, recording first
    /// the head it raises from in [`raised_from`](super::HeadLine::raised_from) (by compare-exchange,
    /// so the recorded head is the one the raise replaces: no cell between the two is reached).
    /// A raise of more than the horizon reads the rewinds ended before its compare-exchange
    /// and, once that succeeds, records itself as the epoch's leap
    /// ([`record_leap`](Self::record_leap)): a rewind narrows the cells never reached by that
    /// gap when the raise into the head it moves back from was a later, smaller one
    /// ([`narrow_unreached`](Self::narrow_unreached)). `Err(head)` when some thread is already
    /// past `cell`.
    #[inline]
    fn raise(&self, mut from: u64, cell: u64) -> Result<(), u64> {
        loop {
            // A raise past the horizon (a leap, or a crossing after that much idleness) is
            // recorded as its epoch's leap after it succeeds, with the epoch read before it.
            let leap = (cell - from > self.horizon).then(|| self.leap_epoch());
            // Relaxed: ordered before the compare-exchange below by its Release; a rewind whose
            // compare-exchange on `head` reads this raise (Acquire) loads it after
            // (`narrow_unreached`).
            self.head.raised_from.fetch_max(from, Ordering::Relaxed);
            // AcqRel: Release orders this raise (and the record above) before our seals and
            // stamps (readers that see those re-read head) and before a rewind that reads it;
            // Acquire as the load in `advance`.
            match self
                .head
                .cell
                .compare_exchange(from, cell, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if let Some(epoch) = leap {
                        self.record_leap(epoch, from, cell);
                    }
                    return Ok(());
                }
                Err(actual) if actual > cell => return Err(actual),
                // Another crosser of the cell raised it.
                Err(actual) if actual == cell => return Ok(()),
                // Raised (or rewound) meanwhile, still below `cell`: raise from there.
                Err(actual) => from = actual,
            }
        }
    }

    /// The crossing's walk over the whole window of `cell`: `(suffix, prefix, stamp from, the
    /// window's used cells)`.
    fn whole_window(&self, cell: u64) -> Result<Walked, u64> {
        let (suffix, prefix, used) = self.walk_window(cell)?;
        Ok((suffix, prefix, cell.saturating_add(1), Walk::Whole(used)))
    }

    /// Seals closed cell `index` (seen from `cell`) and returns its final count.
    pub(super) fn seal(&self, index: u64, cell: u64) -> Result<u64, u64> {
        visit();
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
                let head = self.head.cell.load(Ordering::Acquire);
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

    /// Stamps `cell`, and the cells from `from` (at least `cell + 1`) to `cell + future`, with
    /// their round and a zero count (a slot that already holds its round is left alone). An
    /// incremental crossing starts after the cells the previous crossing stamped; a stamp is only
    /// ever an optimisation (see the module docs), so one that a stalled crosser skipped costs a
    /// writer one compare-exchange at most.
    pub(super) fn pre_stamp(&self, cell: u64, from: u64) {
        let from = from.max(cell.saturating_add(1));
        let last = cell.saturating_add(self.geometry.future);
        for index in std::iter::once(cell).chain(from..=last) {
            visit();
            let (slot, round) = self.place(index);
            // Acquire: as in `acquire_at`.
            let mut word = slot.load(Ordering::Acquire);
            while unpack_cell(word).0 != round {
                // Acquire: a newer round in this slot means a newer sweep owns it; a head below
                // `cell` that the ring was rewound under us.
                if self.head.cell.load(Ordering::Acquire) != cell {
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
        let (_, slot, round) = self.place_of(index);
        (&self.slots[slot], round & ROUND_MASK)
    }

    /// The mark of cell `index` and the round tag it has there.
    #[inline]
    pub(super) fn place_mark(&self, index: u64) -> (&AtomicU64, u64) {
        let (_, slot, round) = self.place_of(index);
        (&self.marks[slot], round & ROUND_MASK)
    }

    /// The count of cell `index` as it reads now (zero when its slot holds another round).
    pub(super) fn count_of(&self, index: u64) -> u64 {
        visit();
        let (slot, round) = self.place(index);
        // Acquire: a snapshot read; pairs with writers' releases like every other slot load.
        let (word_round, _, count) = unpack_cell(slot.load(Ordering::Acquire));
        if word_round == round { count } else { 0 }
    }
}
