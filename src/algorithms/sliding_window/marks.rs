//! The ring's marks: running sums of sealed cells, published by the crossing next to each cell,
//! so that a crossing reads only the cells that are new to it, and a denial or a peek finds when
//! enough of its window leaves by a binary search instead of reading every closed cell.
//!
//! # Blocks and marks
//! Cells are grouped in aligned *blocks* of `cells` cells (block `k` is cells `k·cells ..
//! (k+1)·cells`). The closed cells `[ws, c)` of the window of cell `c` (block `K`, first cell
//! `bs`) are a suffix `[ws, bs)` of block `K − 1` and a prefix `[bs, c)` of block `K`. The crossing
//! into `c` publishes, next to each of them, a *mark* `(round, kind, value)` ([`pack_cell`]'s
//! layout, the kind in the sealed bit):
//! * a **prefix** mark on a cell `i` of block `K`: the sum of the sealed counts of `[bs, i]`;
//! * a **suffix** mark on a cell `i` of block `K − 1`: the sum of the sealed counts of `[i, bs)`.
//!
//! Both are sums over cells of the crosser's own window, all sealed (final) before it computes
//! them, so every crosser of a block computes the same mark for a cell: a mark never depends on
//! who wrote it or when. A cell's mark changes kind once, when the first crossing into the next
//! block turns the block's prefix marks into suffix marks. Values saturate at
//! [`MAX_COUNT`] (a block never holds more than the limit but after a leap).
//!
//! # Writing (the crossing)
//! A mark is written like a seal: by compare-exchange, only while `head` is the crosser's cell
//! (a crosser that finds another head stops, as for seals), and only where it differs from the
//! one already there. Every mark of a window is written (or found) before the window's `base` is
//! published, so a reader that loads `base` for a cell with Acquire sees that window's marks.
//!
//! The crossing into `c` is *incremental* when the newest published crossing `p` (the one `base`
//! names) lies in `c`'s block: `p`'s window `[ws(p), p)` is sealed and marked, its suffix marks
//! cover `c`'s older part and its prefix marks `c`'s newer part up to `p`, so only cells
//! `[p, c)` are sealed and marked, and `base` is `suffix(ws) + prefix(c − 1)`: a crossing per
//! cell costs O(1). The first crossing into a block (and any crossing after a gap or a leap)
//! walks its whole window: O(cells), once per block.
//!
//! # Reading (a denial, a peek)
//! With `L(x)` = `prefix(x − 1)` for `x > bs`, `0` for `x = bs`, and `−suffix(x)` for `x < bs`,
//! the sum of the closed cells `[a, b)` of a window is `L(b) − L(a)`, one mark read per end. The
//! oldest cell by which the window has taken `x` is then found by binary search over `L`:
//! O(log cells) mark reads, in the block whose part of the window holds it (`L(bs)` = 0 picks
//! it without a read), with splits that reach the newest cell in fewer reads than halving does
//! (`first_reaching`; never more for a denial, see there for a peek past the crossing). Every
//! mark read is checked against the cell's round and the kind the reader expects, and the marks must add up to the sum the decision used. A mismatch means a
//! newer crossing (into a new block, or a whole ring later) changed the marks under the reader:
//! the call is decided again, once, from a fresh `base` (a decision in a cell that a newer
//! crossing has sealed follows head into the newer cell, as always). If the marks changed under
//! it again, or did not change because of a newer crossing (after a leap), that one call reads
//! the cells one by one, as every call did before the marks. Never a wait on another thread.

use super::{SEALED, SlidingWindowLimiter, count_if_above, named_sum, pack_cell, visit};
use crate::algorithms::ring::RingGeometry;
use crate::clock::Clock;
use crate::decision::{Decision, at_least_one};
use crate::packed::{MAX_COUNT, TAG_MASK, pack_window};
use crate::sync::Ordering;
use std::num::NonZeroU64;

/// Bits of the oldest end's payload below its offset: [`END_SOLE`] and the oldest used cell's
/// count, capped at [`END_COUNT_MAX`].
const END_COUNT_BITS: u32 = 8;
/// The oldest end's flag that the oldest used closed cell is the only one (so it is the newest
/// too): its crossing then stores no `newest` word, and a reader loads none.
const END_SOLE: u64 = 1 << (END_COUNT_BITS - 1);
/// The largest oldest-cell count an end carries (a larger count is carried as this: a denial
/// that needs more searches the marks).
const END_COUNT_MAX: u64 = END_SOLE - 1;

/// The kind of a mark: a prefix mark (a cell of the newest block of a window) or a suffix mark
/// (a cell of the block before it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    /// The sum of the block's sealed cells from its first cell up to this one.
    Prefix,
    /// The sum of the block's sealed cells from this one to its last cell.
    Suffix,
}

/// The closed cells `[from, crossing)` of the window a decision was made in, as the marks of the
/// crossing into `crossing` describe them, and, for a peek past that crossing, `crossing`'s own
/// count (`live`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Closed {
    /// The published crossing whose marks are read.
    pub(super) crossing: u64,
    /// The first cell of the window asked about (at or after `crossing`'s window start).
    pub(super) from: u64,
    /// The sum of cells `[from, crossing)`.
    pub(super) marked: u64,
    /// The count of cell `crossing` when it is one of the window's closed cells (a peek in a
    /// cell past the newest crossing); 0 when `crossing` is the decision's own cell.
    pub(super) live: u64,
    /// The marks could not be used: read the cells one by one.
    pub(super) scan: bool,
}

impl Closed {
    /// The closed cells of the window of `cell` when `cell` is the published crossing and `base`
    /// their sum.
    pub(super) fn of_crossing(cell: u64, from: u64, base: u64) -> Self {
        Closed {
            crossing: cell,
            from,
            marked: base,
            live: 0,
            scan: false,
        }
    }

    /// The sum of the closed cells.
    pub(super) fn sum(&self) -> u64 {
        self.marked + self.live
    }
}

/// The name the ends of the crossing into `cell` carry in their tag (`base`'s layout): the cell,
/// mixed with the rewinds begun when its crossing began (its *epoch*, see `advance`), so that
/// ends a winner computed before a rewind never pass for those of a crossing of the same cell
/// after it. `epoch` is the counter `rewinds_begun` as read: it counts in steps of
/// [`EPOCH_STEP`], so it is already the number of rewinds times that odd factor (modulo
/// 2^64), and the name is one `xor` (no product on a denial: 2 instructions fewer than the
/// product here cost). Epoch 0 (no rewind yet) names the cell itself; two epochs name one cell
/// alike only when their rewind counts are equal modulo 2^40 (the factor is odd), and the
/// names of two different cells in two epochs coincide in their 40-bit tags only by chance,
/// as a cell 2^40 cells away does today.
#[inline(always)]
pub(super) fn ends_name(cell: u64, epoch: u64) -> u64 {
    cell ^ epoch
}

/// What one rewind adds to `rewinds_begun` and `rewinds_ended` (wrapping): an odd factor that
/// spreads consecutive rewind counts over the 40-bit name ([`ends_name`]). The counters are
/// only ever compared for equality (a lease's refund, the crossing's two reads of its epoch),
/// so the step changes nothing else; the leases' `NO_REFUND` (`u64::MAX`) is reached after
/// about 10^18 rewinds, where a step of 1 reached it after 2^64 − 1.
pub(super) const EPOCH_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The payload of `newest` word `word` if it carries the name `name` and lies in `1..=back`
/// (`back` the oldest end's offset, below 2^16): `named_sum(word, name)` and that range in one
/// subtraction and one comparison. `word − (name << 24)` is the payload when the names agree
/// and above `MAX_COUNT` (or wrapped past it) when they do not (`named_sum`'s test); less one,
/// it is below `back` exactly when it is a payload in `1..=back`, since `back ≤ MAX_COUNT`
/// (4 instructions a published denial with the current cell empty, against the two tests).
#[inline(always)]
pub(super) fn newest_back(word: u64, name: u64, back: u64) -> Option<u64> {
    debug_assert!(back <= MAX_COUNT);
    let less_one = word
        .wrapping_sub(name << crate::packed::COUNT_BITS)
        .wrapping_sub(1);
    (less_one < back).then(|| less_one + 1)
}

/// The waits of a denial in `cell` at `now` from its published ends: until the cell `back` cells
/// back leaves the window (the retry's, raw) and until the cell `newest` back does (the reset's),
/// where `newest ≤ back ≤ cell`. Each is [`until_start`](RingGeometry::until_start) of that cell
/// plus `cells`, computed from the end of `cell`'s own window, `(cell + cells) × cell_nanos`
/// (`cell`'s start plus the window: one product and one sum, checked once): a cell `b` back
/// leaves `b × cell_nanos` before that end (at most `cell × cell_nanos`: no overflow), so each
/// wait is one product and one saturating subtraction from the time left until that end, where
/// `until_start` adds with saturation, multiplies with a check and subtracts for each. Where
/// that end is past the `u64` timeline, `until_start` itself ([`waits_back_past_the_end`]).
#[inline(always)]
pub(super) fn waits_back(
    geometry: &RingGeometry,
    window_nanos: u64,
    cell: u64,
    now: u64,
    back: u64,
    newest: u64,
) -> (u64, u64) {
    debug_assert!(newest <= back && back <= cell);
    let cell_nanos = geometry.cell_nanos;
    match cell
        .checked_mul(cell_nanos)
        .and_then(|start| start.checked_add(window_nanos))
    {
        Some(end) => {
            let until_end = end.saturating_sub(now);
            (
                until_end.saturating_sub(back * cell_nanos),
                until_end.saturating_sub(newest * cell_nanos),
            )
        }
        None => waits_back_past_the_end(geometry, cell, now, back, newest),
    }
}

/// [`waits_back`] for a `now` in `cell` and `back` at most `cells − 1` (the oldest used closed
/// cell lies in the window): then `cell`'s start is at most `now` (its product needs no check:
/// 2 instructions a published denial that is not the spent one), `now < end`, and the time left until the end, more than
/// `window − cell_nanos`, exceeds `back × cell_nanos ≤ window − cell_nanos`, so neither
/// subtraction saturates (and the retry is at least 1 ns): three saturating subtractions (3
/// instructions each) are plain ones. The same waits as [`waits_back`] under those bounds.
#[inline(always)]
pub(super) fn waits_back_in_cell(
    geometry: &RingGeometry,
    window_nanos: u64,
    cell: u64,
    now: u64,
    back: u64,
    newest: u64,
) -> (u64, u64) {
    debug_assert!(newest <= back && back < geometry.cells);
    let cell_nanos = geometry.cell_nanos;
    // `now` lies in `cell`, so its start is at most `now`: the product does not wrap.
    let start = cell.wrapping_mul(cell_nanos);
    debug_assert!(start <= now && now - start < cell_nanos);
    match start.checked_add(window_nanos) {
        Some(end) => {
            let until_end = end - now;
            (
                until_end - back * cell_nanos,
                until_end - newest * cell_nanos,
            )
        }
        None => waits_back_past_the_end(geometry, cell, now, back, newest),
    }
}

/// The spent denial's retry and reset for a `now` in `cell` and `back` at most `cells − 1`:
/// both the wait until the start of cell `cell + (cells − back)`, when the cell `back` cells
/// back leaves the window (`until_start` of it, as a peek's sole-cell branch computes it: the
/// same value wherever `back ≤ cell`), the retry at least 1 ns. That cell is at least `cell +
/// 1`, which starts after `now`: within the timeline the wait is at least 1 ns, so it needs no
/// saturating subtraction, and the sum before the product is checked, not saturated. Past the
/// end of the timeline (a cold path), `until_start` of the saturated index, as the peek's
/// branch: at the very end of time that wait can be 0 (the retry 1 ns, the reset 0, as the
/// marks answer). `None` only where the plain subtraction gave 0, which these bounds exclude
/// (the caller would then search the marks). The product is checked by comparing the index with
/// `last_cell`, `u64::MAX / cell_nanos` (the last cell that starts within the timeline, kept by
/// the limiter), and then formed unchecked: where the checked product took `rax`/`rdx` and two
/// register moves around it (3 instructions a spent denial).
#[inline(always)]
pub(super) fn sole_wait_in_cell(
    geometry: &RingGeometry,
    last_cell: u64,
    cell: u64,
    now: u64,
    back: u64,
) -> Option<(NonZeroU64, u64)> {
    debug_assert!(back < geometry.cells);
    debug_assert_eq!(last_cell, u64::MAX / geometry.cell_nanos);
    let index = cell.checked_add(geometry.cells - back);
    // `index ≤ u64::MAX / cell_nanos` exactly when `index × cell_nanos ≤ u64::MAX`.
    match index.filter(|&index| index <= last_cell) {
        Some(index) => {
            let start = index.wrapping_mul(geometry.cell_nanos);
            debug_assert!(start > now);
            NonZeroU64::new(start.wrapping_sub(now)).map(|wait| (wait, wait.get()))
        }
        None => Some(sole_wait_past_the_end(geometry, cell, now, back)),
    }
}

/// [`sole_wait_in_cell`] where that cell starts past the `u64` timeline (or its index is past
/// `u64::MAX`): `until_start` of the saturated index, off the common path.
#[cold]
fn sole_wait_past_the_end(
    geometry: &RingGeometry,
    cell: u64,
    now: u64,
    back: u64,
) -> (NonZeroU64, u64) {
    let index = cell.saturating_add(geometry.cells - back);
    let wait = geometry.until_start(index, now);
    (at_least_one(wait), wait)
}

/// [`waits_back`] where the end of `cell`'s window is past the `u64` timeline: each wait by
/// `RingGeometry::until_start`, off the common path.
#[cold]
pub(super) fn waits_back_past_the_end(
    geometry: &RingGeometry,
    cell: u64,
    now: u64,
    back: u64,
    newest: u64,
) -> (u64, u64) {
    // (`cell − b` saturates only for ends of a colliding name in `waits_back_in_cell`, which
    // does not test `b ≤ cell`.)
    let until =
        |b: u64| geometry.until_start(cell.saturating_sub(b).saturating_add(geometry.cells), now);
    (until(back), until(newest))
}

/// The used cells of a run of cells a crossing sealed: the oldest and its count, the newest.
#[derive(Clone, Copy, Debug)]
pub(super) struct Used {
    oldest: (u64, u64),
    newest: u64,
}

impl Used {
    /// The ends' payloads `(oldest, newest)` for the crossing into `cell`, whose window these
    /// are: no `newest` when the oldest used cell is the only one ([`END_SOLE`]).
    fn ends(self, cell: u64) -> (u64, Option<u64>) {
        let (oldest, first) = self.oldest;
        let sole = self.newest == oldest;
        let end = ((cell - oldest) << END_COUNT_BITS)
            | if sole { END_SOLE } else { 0 }
            | first.min(END_COUNT_MAX);
        (end, (!sole).then(|| cell - self.newest))
    }
}

/// What a crossing walked, for its ends.
#[derive(Clone, Copy, Debug)]
pub(super) enum Walk {
    /// An incremental crossing from the published crossing `(p, its sum)`, and the used cells
    /// of the cells it sealed.
    From((u64, u64), Option<Used>),
    /// The whole window, and its used cells.
    Whole(Option<Used>),
}

/// `L`, the levels of one published crossing's marks (see the module docs).
struct Levels<'a, C> {
    ring: &'a SlidingWindowLimiter<C>,
    /// The crossing's block start.
    block: u64,
}

impl<'a, C: Clock> Levels<'a, C> {
    /// The levels of the crossing into `crossing`.
    fn new(ring: &'a SlidingWindowLimiter<C>, crossing: u64) -> Self {
        Levels {
            ring,
            block: ring.block_start(crossing),
        }
    }

    /// `L(x)` for `x` in the crossing's window or `x` the crossing; `None` when the mark read is
    /// not the one this crossing published (the marks changed under the reader).
    #[inline(always)]
    fn at(&self, x: u64) -> Option<i64> {
        if x == self.block {
            return Some(0);
        }
        let suffix = x < self.block;
        let index = if suffix { x } else { x - 1 };
        // A mark's value is at most `MAX_COUNT` (< 2^24): it fits an `i64`.
        let value = self.ring.mark_value(index, suffix)? as i64;
        Some(if suffix { -value } else { value })
    }

    /// The oldest cell `i` in `[from, crossing)` with `sum([from, i]) >= x`, and that sum, where
    /// `from_level` is `L(from)`, `crossing_level` is `L(crossing)` and the cells
    /// `[from, crossing)` hold at least `x`: a binary search over `L`.
    ///
    /// `L(block)` is 0 without a read, so the search first picks the block the cell is in by
    /// one comparison, then searches that block's part of the window, `m` cells, in at most
    /// `k = ⌈log2 m⌉` mark reads (as many as halving needs), splitting each range as high as
    /// that bound allows. A peek past the crossing whose window starts after the block start
    /// (`from > block`) searches the newer block's cells from the block start on,
    /// `(block, crossing]`, not from `from`: the same answer (the levels up to `from` are below
    /// the target), in up to `⌈log2 (crossing − block)⌉` reads, more than halving
    /// `(from, crossing]` takes when `from` is well past the block start. Starting it at `from`
    /// costs the denial's search (where `from ≤ block` always): measured on
    /// `examples/instructions_spent`, 1.5 to 2 instructions more a spent denial with that case
    /// out of line, 19 to 19.5 as a `max` (the review of issue 17). The newest closed cell, the answer in the attack of issue 17 (the
    /// whole limit spent at the end of the cell before), is then found in
    /// `k − ⌊log2 (2^k − m + 1)⌋` reads (for `m` = 59: 4, halving 6; 5,999: 2, halving 13;
    /// 33: 1, halving 6).
    #[inline(always)]
    fn first_reaching(
        &self,
        (from, from_level): (u64, i64),
        (crossing, crossing_level): (u64, i64),
        x: u64,
    ) -> Option<(u64, u64)> {
        // The least `y` in (from, crossing] with L(y) >= L(from) + x; the cell is y − 1.
        let target = from_level + i64::try_from(x).ok()?;
        // In the older block's part (from, block] when L(block) = 0 reaches the target, else in
        // the newer block's (block, crossing]. `block` ≤ `crossing`; `from` ≤ `block` for a
        // denial (`crossing` is its cell: its window is no longer than a block); for a peek past
        // the crossing `from` may be past `block`, then `L(from)` ≥ 0 and `x` ≥ 1 put the answer
        // in the newer part, past `from` (the cells `(block, from]` never reach the target).
        let suffix = target <= 0;
        // At the end of the `u64` timeline (cells of a few ns) `from` or `block` can be the last
        // index: no mark to search then (`None`: the caller scans).
        let (mut low, mut high, mut high_level) = if suffix {
            (from.checked_add(1)?, self.block, 0)
        } else {
            (self.block.checked_add(1)?, crossing, crossing_level)
        };
        // Reads left: the `high − low + 1` candidates never outnumber `2^reads` (`low` ≥ 1 and
        // `high` ≥ `low − 1`, so the count is in range even for `high` the last index).
        let mut reads = (high - (low - 1)).next_power_of_two().trailing_zeros();
        while low < high {
            // The lower part `[low, mid]` as large as the reads left after this one can search,
            // short of the whole range: the rest, `(mid, high]`, is as small as it can be.
            reads -= 1;
            let mid = low + (high - low).min(1 << reads) - 1;
            // L(mid): −suffix(mid) below the block, prefix(mid − 1) above it.
            let level = if suffix {
                -(self.ring.mark_value(mid, true)? as i64)
            } else {
                self.ring.mark_value(mid - 1, false)? as i64
            };
            if level >= target {
                (high, high_level) = (mid, level);
            } else {
                low = mid + 1;
            }
        }
        Some((low - 1, u64::try_from(high_level - from_level).ok()?))
    }
}

impl<C: Clock> SlidingWindowLimiter<C> {
    /// The first cell of the block of `cell`.
    #[inline]
    pub(super) fn block_start(&self, cell: u64) -> u64 {
        cell - cell % self.geometry.cells
    }

    /// Publishes `value` as the `kind` mark of closed cell `index` for the crossing into `cell`;
    /// `Err(head)` when head is no longer `cell` (as a seal: the crossing is void).
    pub(super) fn write_mark(
        &self,
        index: u64,
        cell: u64,
        kind: Kind,
        value: u64,
    ) -> Result<(), u64> {
        visit();
        let (slot, round) = self.place_mark(index);
        let want = pack_cell(round, kind == Kind::Suffix, value.min(MAX_COUNT));
        // Acquire: pairs with the Release of the compare-exchange below by another crosser; a
        // mark found in place comes with the seals its writer read, like a seal found in place.
        let mut mark = slot.load(Ordering::Acquire);
        while mark != want {
            // Acquire: as in `seal`; a head other than `cell` is a newer crossing (or a rewind)
            // that owns the marks now.
            let head = self.head.cell.load(Ordering::Acquire);
            if head != cell {
                return Err(head);
            }
            // AcqRel: Release publishes the mark before our `base` compare-exchange publishes
            // the window (readers Acquire `base`); Acquire on failure as the load above.
            match slot.compare_exchange(mark, want, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(actual) => mark = actual,
            }
        }
        Ok(())
    }

    /// The ends of the crossing into `cell` (see [Ends](super#ends)), whose closed cells sum
    /// to `sum` and whose marks are written: `(oldest, newest)`, the payloads of
    /// [`BaseLine::oldest`](super::BaseLine::oldest) and `newest`. `None` when no closed cell
    /// is used, or the marks do not add up to `sum` (a newer crossing changed them, or they
    /// saturated): nothing is published then, and readers search the marks. Two searches over
    /// the marks, once per crossing: O(log cells).
    pub(super) fn ends_of(&self, cell: u64, sum: u64) -> Option<(u64, Option<u64>)> {
        if sum == 0 {
            return None;
        }
        let levels = Levels::new(self, cell);
        let from = self.geometry.window_start(cell);
        let from = (from, levels.at(from)?);
        let crossing = (cell, levels.at(cell)?);
        if u64::try_from(crossing.1 - from.1).ok()? != sum {
            return None;
        }
        // The oldest cell by which the window holds 1 is the oldest used one, and what it holds
        // then is that cell's count (the cells before it are empty).
        let (oldest, first) = levels.first_reaching(from, crossing, 1)?;
        let newest = if first == sum {
            oldest
        } else {
            levels.first_reaching(from, crossing, sum)?.0
        };
        Some(
            Used {
                oldest: (oldest, first),
                newest,
            }
            .ends(cell),
        )
    }

    /// The ends of an incremental crossing into `cell` from the published crossing `p` (in
    /// `cell`'s block, before it; `p_sum` its `base` sum), whose newly sealed cells `[p, cell)`
    /// used `new`: from `p`'s ends, in O(1) (one cell read when `p`'s oldest used cell has left
    /// the window: the window's first cell, if used). `None` when that does not settle them
    /// (`p`'s ends not published, or the new oldest used cell further in): the caller searches
    /// ([`ends_of`](Self::ends_of)).
    fn ends_after(
        &self,
        epoch: u64,
        (p, p_sum): (u64, u64),
        cell: u64,
        sum: u64,
        new: Option<Used>,
    ) -> Option<(u64, Option<u64>)> {
        if sum == 0 {
            return None;
        }
        if p_sum == 0 {
            // `p`'s window held nothing: the used cells are the new ones.
            return new.map(|new| new.ends(cell));
        }
        // Acquire: pairs with the Release store of `publish_ends` (`p`'s crossing's, or a
        // newer one's, which names another cell): the `newest` word it stored before comes
        // with it. The words are self-contained: nothing else is read on their strength.
        let oldest = named_sum(
            self.base.oldest.load(Ordering::Acquire),
            ends_name(p, epoch),
        )?;
        if oldest >> END_COUNT_BITS == 0 {
            return None; // none published for `p`
        }
        let from = self.geometry.window_start(cell);
        let p_oldest = p.checked_sub(oldest >> END_COUNT_BITS)?;
        let newest = match new {
            Some(new) => new.newest,
            None => {
                let p_newest = if oldest & END_SOLE != 0 {
                    p_oldest
                } else {
                    // Relaxed: ordered after `p`'s `newest` store by the Acquire above (stored
                    // before `oldest`); a later store names another cell.
                    let newest = named_sum(
                        self.base.newest.load(Ordering::Relaxed),
                        ends_name(p, epoch),
                    )?;
                    if newest == 0 {
                        return None;
                    }
                    p.checked_sub(newest)?
                };
                if p_newest < from {
                    return None;
                }
                p_newest
            }
        };
        let (oldest, first) = if p_oldest >= from {
            (p_oldest, oldest & END_COUNT_MAX)
        } else {
            // `p`'s oldest used cell left: the window's first cell (sealed by `p`'s crossing,
            // or this one's) is the oldest if used; else search.
            let count = self.count_of(from);
            if count == 0 {
                return None;
            }
            (from, count)
        };
        Some(
            Used {
                oldest: (oldest, first),
                newest,
            }
            .ends(cell),
        )
    }

    /// Publishes the ends of the crossing into `cell` (`sum`: its closed cells' sum), by the
    /// crosser whose compare-exchange published its `base`, after it: from the previous
    /// crossing's (`walked`: that crossing and the used cells sealed since) where they settle
    /// them, else by searching the marks; nothing when there are none (no used closed cell, or
    /// the marks changed under it): the words then name an older crossing, which readers do
    /// not use; nothing either when `epoch` is `None` (the crossing raced a rewind, see
    /// `advance`). Plain stores: each word is self-validating (named by the cell in the
    /// crossing's epoch, [`ends_name`], and every crossing of the cell in one epoch computes
    /// the same ends from sealed counts), so a late store is right whenever it is read, and a
    /// stale one (an older crossing's, after a newer one's; or one from before a rewind) only
    /// makes readers search the marks.
    pub(super) fn publish_ends(&self, cell: u64, sum: u64, walked: Walk, epoch: Option<u64>) {
        // A crossing that raced a rewind (see `advance`) publishes nothing.
        let Some(epoch) = epoch else { return };
        let ends = match walked {
            Walk::From(p, new) => self.ends_after(epoch, p, cell, sum, new),
            // The whole window walked: its used cells are the window's (when they add up).
            Walk::Whole(used) => used.filter(|_| sum > 0).map(|used| used.ends(cell)),
        }
        .or_else(|| self.ends_of(cell, sum));
        if let Some((oldest, newest)) = ends {
            let tag = ends_name(cell, epoch) & TAG_MASK;
            if let Some(newest) = newest {
                // Relaxed: made visible with `oldest` by its Release store next (a reader
                // reads `newest` only after an Acquire load of `oldest` naming this cell,
                // without `END_SOLE`).
                self.base
                    .newest
                    .store(pack_window(tag, newest), Ordering::Relaxed);
            }
            // Release: pairs with the Acquire loads of `oldest` in `published_denial` and
            // `ends_after`, and carries the `newest` store above to them.
            self.base
                .oldest
                .store(pack_window(tag, oldest), Ordering::Release);
        }
    }

    /// Marks the ends as none for cell `cell`, before a rewind moves `head` back to it (see
    /// [Ends](super#ends)): no crossing of the ring after the rewind reads ends published
    /// before it, even for the same cell (whose window may hold other counts then).
    pub(super) fn clear_ends(&self, cell: u64) {
        // Relaxed: ordered before the rewind's compare-exchange on `head` (its Release), which
        // every later crossing loads (Acquire) before its `base`, which every reader loads
        // (Acquire) before the ends.
        self.base
            .oldest
            .store(pack_window(cell & TAG_MASK, 0), Ordering::Relaxed);
    }

    /// The denial of `n` in `cell`, the published crossing (`prev` its `base` sum, `count` taken
    /// in it; `prev + count + n > limit`), from its published ends, reading no mark: when the
    /// oldest used closed cell frees enough (`need` at most its count, as always for `n = 1`).
    /// `None` when it does not, or the ends are not `cell`'s (not published, or a newer
    /// crossing's): the caller searches the marks. [`published_waits`](Self::published_waits)
    /// in a [`Decision`].
    #[inline(always)]
    pub(super) fn published_denial(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Option<Decision> {
        let need = (prev + count + n).saturating_sub(limit);
        let (retry, reset) = self.ends_waits::<false>(cell, now, prev, count, need)?;
        Some(Decision::denied_in_units(
            limit,
            limit.saturating_sub(prev + count),
            1,
            retry,
            reset,
        ))
    }

    /// [`ends_waits`](Self::ends_waits) for the short path, inlined into it: its answer in two
    /// registers (a `NonZeroU64` retry, so `None` takes no third word), the caller building the
    /// `Decision` (see `acquire_counted`). Out of line (as it was from the spent denial's
    /// out-of-line ends until issue 17's fourth round) its call, argument moves and saved
    /// register cost a spent denial 16 instructions and an at-limit denial 12 (`examples/
    /// instructions sliding-window-60 spent quanta` 129.0 -> 113.0, `at-limit manual` 104.55 ->
    /// 98.55), and an admission and the burst denial 1 more (71.0 / 89.0 -> 70.0 / 88.0), where
    /// an earlier short path with it inlined had cost the burst denial 36 (not measured again
    /// which change since removed that cost). Before the out-of-line call, the ends were
    /// read in `after_short`'s frame (six registers saved, the refusal and the answer passed
    /// through memory: 185 instructions a spent denial).
    #[inline(always)]
    pub(super) fn published_waits(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        need: u64,
    ) -> Option<(NonZeroU64, u64)> {
        self.ends_waits::<true>(cell, now, prev, count, need)
    }

    /// The retry and reset waits of [`published_denial`](Self::published_denial), the window
    /// short of `need` permits (at least 1: every caller has refused the call). `IN_CELL`: `now` lies in
    /// `cell` (the short path's call, which located `cell` from `now`), so the waits need no
    /// saturation ([`waits_back_in_cell`]); a peek's `now` may lie before or after its cell.
    #[inline(always)]
    fn ends_waits<const IN_CELL: bool>(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        need: u64,
    ) -> Option<(NonZeroU64, u64)> {
        // SeqCst: the rewinds begun, as `advance` reads them. The caller loaded `base` naming
        // `cell` before this (Acquire); a rewind counts itself before it moves `head` back, and
        // every crossing after it saw that `head` before its `base`, so this is at least the
        // epoch of the crossing whose `base` was read: ends stored in an older epoch (a winner
        // stalled across a rewind, whose cell may have been crossed again since) are named
        // apart and not used (see [Ends](super#ends)).
        let name = ends_name(cell, self.rewinds_begun.load(Ordering::SeqCst));
        // Acquire: pairs with the Release store of `publish_ends`, and brings the `newest`
        // stored before it. Ends named `cell` in this epoch are its crossing's (a newer
        // crossing's name another cell). Self-contained: nothing else is read on their strength.
        let end = named_sum(self.base.oldest.load(Ordering::Acquire), name)?;
        let first = end & END_COUNT_MAX;
        // `first` is at most `prev` for the window `base` names. `need ≥ 1`: the short path
        // and a peek call this only for a refusal (`prev + count + n > limit`), so it is not
        // tested here (a test of 0 cost the denial its `dec` and a saved register).
        debug_assert!(need > 0, "a published denial's need");
        if need > first || first > prev {
            return None;
        }
        let back = end >> END_COUNT_BITS;
        if IN_CELL {
            // The oldest used closed cell lies in `cell`'s window, `[cell − cells + 1, cell)`:
            // ends that say otherwise are no crossing's (a name that only collides). For the
            // short path's waits `back < cells` is all the arithmetic needs (they are taken
            // from `cell`'s own window's end, and `cell − back` is never formed), so `back ≤
            // cell`, which a crossing's ends also meet (its oldest used cell is at or after cell
            // 0), is not tested here: ends with a colliding name get a wait within the window
            // either way (3 instructions a published denial).
            if back >= self.geometry.cells {
                return None;
            }
        } else if back > cell {
            return None;
        }
        // The newest used cell's distance back: 0 (this cell) when the current cell is used.
        let newest = if count > 0 {
            0
        } else if end & END_SOLE != 0 {
            // The oldest is the only used cell and the current cell is empty (the spent
            // denial): one wait, the retry's (raw, it is the reset), until the start of the
            // cell `back` cells before `cells` after this one (one product: cheaper here than
            // `waits_back`'s two).
            if IN_CELL {
                return sole_wait_in_cell(&self.geometry, self.last_cell, cell, now, back);
            }
            let oldest = cell - back;
            let leaves = self
                .geometry
                .until_start(oldest.saturating_add(self.geometry.cells), now);
            return Some((at_least_one(leaves), leaves));
        } else {
            // Relaxed: ordered after its crossing's store by the Acquire load of `oldest`
            // above (stored before it); a later store names another cell.
            // Published with `oldest` (1 to `back` cells back), unless none was: the name and
            // the range checked at once ([`newest_back`]).
            newest_back(self.base.newest.load(Ordering::Relaxed), name, back)?
        };
        // The retry is when the oldest used cell leaves; the reset when the newest does.
        let (leaves, reset) = if IN_CELL {
            waits_back_in_cell(&self.geometry, self.window_nanos, cell, now, back, newest)
        } else {
            waits_back(&self.geometry, self.window_nanos, cell, now, back, newest)
        };
        Some((at_least_one(leaves), reset))
    }

    /// The value of the `kind` mark of cell `index`, if that is what its slot holds.
    pub(super) fn read_mark(&self, index: u64, kind: Kind) -> Option<u64> {
        self.mark_value(index, kind == Kind::Suffix)
    }

    /// [`read_mark`](Self::read_mark), the kind given as the sealed bit it is packed in
    /// (`suffix`): one load, and one subtraction and one comparison that check the round and
    /// the kind together ([`pack_cell`]'s layout: the round above the bit, the value below).
    #[inline(always)]
    fn mark_value(&self, index: u64, suffix: bool) -> Option<u64> {
        visit();
        let (_, slot, round) = self.place_of(index);
        // Acquire: pairs with the Release of `write_mark`'s compare-exchange (and, through the
        // reader's Acquire load of `base`, with every mark of the window it names).
        let mark = self.marks[slot].load(Ordering::Acquire);
        // `(round, suffix)` as the bits from the sealed bit up (the round reduced modulo 2^39
        // by the shift, as `pack_cell` reduces it).
        count_if_above(
            mark,
            (round << 1) | u64::from(suffix),
            SEALED.trailing_zeros(),
        )
    }

    /// The sum of the closed cells `[from, crossing)` read through the marks of the published
    /// crossing into `crossing` (`from` at or after its window start); `None` if they changed.
    pub(super) fn marked_sum(&self, crossing: u64, from: u64) -> Option<u64> {
        let levels = Levels::new(self, crossing);
        u64::try_from(levels.at(crossing)? - levels.at(from)?).ok()
    }

    /// The crossing's walk over its window `[ws, cell)`: seals every cell and marks it, the newer
    /// block's cells oldest first (prefix marks), the older block's newest first (suffix marks).
    /// Returns `(suffix(ws), prefix(cell − 1), the window's used cells)`.
    pub(super) fn walk_window(&self, cell: u64) -> Result<(u64, u64, Option<Used>), u64> {
        let block = self.block_start(cell);
        let (prefix, mut used) = self.walk_prefix(block, block, cell, 0)?;
        let mut suffix = 0;
        for index in (self.geometry.window_start(cell)..block).rev() {
            let count = self.seal(index, cell)?;
            if count > 0 {
                // Newest first: each used cell is the oldest so far, the first the newest
                // unless the newer block's part has one.
                used = Some(Used {
                    oldest: (index, count),
                    newest: used.map_or(index, |used| used.newest),
                });
            }
            suffix = (suffix + count).min(MAX_COUNT);
            self.write_mark(index, cell, Kind::Suffix, suffix)?;
        }
        Ok((suffix, prefix, used))
    }

    /// Seals and prefix-marks cells `[start, cell)` of the block starting at `block`, going on
    /// from `prefix` = the sum of `[block, start)`. Returns the sum of `[block, cell)`, and the
    /// used cells of `[start, cell)`, if any.
    pub(super) fn walk_prefix(
        &self,
        block: u64,
        start: u64,
        cell: u64,
        mut prefix: u64,
    ) -> Result<(u64, Option<Used>), u64> {
        debug_assert!(block <= start);
        let mut used: Option<Used> = None;
        for index in start..cell {
            let count = self.seal(index, cell)?;
            if count > 0 {
                used = Some(match used {
                    Some(used) => Used {
                        newest: index,
                        ..used
                    },
                    None => Used {
                        oldest: (index, count),
                        newest: index,
                    },
                });
            }
            prefix = (prefix + count).min(MAX_COUNT);
            self.write_mark(index, cell, Kind::Prefix, prefix)?;
        }
        Ok((prefix, used))
    }

    /// What an incremental crossing into `cell` starts from, when the newest published crossing
    /// `published` lies in `cell`'s block before it: `(suffix(ws), prefix(published − 1))` from
    /// `published`'s marks, or `None` when they are not there (then the crossing walks its
    /// whole window).
    pub(super) fn marks_of(&self, published: u64, cell: u64) -> Option<(u64, u64)> {
        let block = self.block_start(cell);
        let window_start = self.geometry.window_start(cell);
        let suffix = if window_start < block {
            self.read_mark(window_start, Kind::Suffix)?
        } else {
            0
        };
        let prefix = if published > block {
            self.read_mark(published - 1, Kind::Prefix)?
        } else {
            0
        };
        Some((suffix, prefix))
    }

    /// The denial for `n` in `cell` (`count` taken in it) given the window's closed cells, read
    /// through the marks; `None` when they changed under the reader.
    #[inline(always)]
    pub(super) fn denial(
        &self,
        cell: u64,
        now: u64,
        closed: Closed,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Option<Decision> {
        let prev = closed.sum();
        let need = (prev + count + n).saturating_sub(limit);
        let departures = if closed.scan {
            self.departures_by_scan(cell, need, prev, count)
        } else {
            self.departures(cell, &closed, need, count)?
        };
        Some(self.deny_until(now, prev, count, limit, departures))
    }

    /// The denial for `n` in `cell` (`count` taken in it, `prev` in its closed cells) read from
    /// the cells one by one: when the marks changed under a reader twice, or after a leap.
    pub(super) fn denial_by_scan(
        &self,
        cell: u64,
        now: u64,
        prev: u64,
        count: u64,
        n: u64,
        limit: u64,
    ) -> Decision {
        let need = (prev + count + n).saturating_sub(limit);
        let departures = self.departures_by_scan(cell, need, prev, count);
        self.deny_until(now, prev, count, limit, departures)
    }

    /// The denial given `(retry cell, newest used cell)`.
    fn deny_until(
        &self,
        now: u64,
        prev: u64,
        count: u64,
        limit: u64,
        departures: (u64, Option<u64>),
    ) -> Decision {
        let (retry, reset) = self.waits_until(now, departures);
        Decision::denied_in_units(limit, limit.saturating_sub(prev + count), 1, retry, reset)
    }

    /// The retry wait (at least 1 ns, as [`Decision::deny`] makes it) and the reset wait given
    /// `(retry cell, newest used cell)`.
    #[inline(always)]
    fn waits_until(
        &self,
        now: u64,
        (retry_cell, newest_used): (u64, Option<u64>),
    ) -> (NonZeroU64, u64) {
        let cells = self.geometry.cells;
        let reset = newest_used.map_or(0, |index| {
            self.geometry.until_start(index.saturating_add(cells), now)
        });
        let retry = at_least_one(self.geometry.until_start(retry_cell, now));
        (retry, reset)
    }

    /// `(retry cell, newest used cell)` for a denial short of `need` in `cell`: closed cell `i`
    /// leaves the window when the clock reaches cell `i + cells`, oldest first, so the retry cell
    /// is the oldest closed cell by which the window holds `need`, plus `cells` (or this cell's,
    /// when all the closed cells together cannot free enough: a burst in this cell, the usual
    /// case under attack, which reads nothing); the window is back to full capacity when the
    /// newest used cell leaves. `None` when the marks changed under the reader.
    ///
    /// Inlined into its callers (`denial`, itself inlined into `after_short` and `peek`): out of
    /// line, its frame, the `Closed` passed through memory and the answer returned through it
    /// cost a spent denial 54 instructions more (`examples/instructions_spent 60 try all 2000`:
    /// 442.1, inlined 388.0).
    #[inline(always)]
    fn departures(
        &self,
        cell: u64,
        closed: &Closed,
        need: u64,
        count: u64,
    ) -> Option<(u64, Option<u64>)> {
        let cells = self.geometry.cells;
        let search_retry = need <= closed.marked;
        let search_newest = count == 0 && closed.live == 0 && closed.marked > 0;
        let mut retry_cell = cell.saturating_add(cells);
        if need <= closed.sum() && !search_retry {
            retry_cell = closed.crossing.saturating_add(cells); // the live cell frees enough
        }
        let newest_used = if count > 0 {
            Some(cell)
        } else if closed.live > 0 {
            Some(closed.crossing)
        } else {
            None
        };
        if !search_retry && !search_newest {
            return Some((retry_cell, newest_used));
        }
        let levels = Levels::new(self, closed.crossing);
        let from = (closed.from, levels.at(closed.from)?);
        let crossing = (closed.crossing, levels.at(closed.crossing)?);
        // The marks must add up to the sum the decision used (they do, unless they changed).
        if u64::try_from(crossing.1 - from.1).ok()? != closed.marked {
            return None;
        }
        let all = closed.marked;
        let mut oldest = None;
        if search_retry {
            let (cell, reached) = levels.first_reaching(from, crossing, need)?;
            retry_cell = cell.saturating_add(cells);
            oldest = Some((cell, reached));
        }
        let newest_used = if search_newest {
            // The cell by which the window holds everything is the newest used one. When the
            // retry's cell already reached it (the usual attack: the whole limit in one cell),
            // that is the one: no second search.
            match oldest {
                Some((cell, reached)) if reached == all => Some(cell),
                _ => Some(levels.first_reaching(from, crossing, all)?.0),
            }
        } else {
            newest_used
        };
        Some((retry_cell, newest_used))
    }

    /// [`departures`](Self::departures) by reading the closed cells of `cell`'s window one by
    /// one (as every denial did before the marks).
    fn departures_by_scan(
        &self,
        cell: u64,
        need: u64,
        prev: u64,
        count: u64,
    ) -> (u64, Option<u64>) {
        let cells = self.geometry.cells;
        let closed = self.geometry.window_start(cell)..cell;
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
        let newest_used = if count > 0 {
            Some(cell)
        } else if prev == 0 {
            None
        } else {
            closed.rev().find(|&index| self.count_of(index) > 0)
        };
        (retry_cell, newest_used)
    }
}
