//! Sliding window limiter: a ring of sealed, tagged cell counters.
//!
//! # Guarantee
//! Time is cut into cells of `window / cells`, aligned to the clock's timeline. A request is
//! attributed to one cell: the cell of its clock read, or a later one when its thread lagged behind
//! a thread that had already moved on, by at most the lag horizon (state never moves back; see
//! [Time](#time) for a head further ahead), or, when its cell was sealed before a rewind, the
//! first cell after it that was not (fewer than the ring's slots later). Under every
//! interleaving:
//!
//! * **Aligned spans:** the permits attributed to any `cells` consecutive cells (one window-long
//!   span aligned to cell boundaries) never exceed the limit.
//! * **Unaligned spans:** any span of length `window − cell` lies inside `cells` consecutive cells,
//!   so it never holds more than the limit either. A window-long span that starts inside a cell
//!   also overlaps the tail of that cell: it holds at most the limit plus what was admitted in
//!   that one cell (at worst `2 × limit`, when the whole limit was spent at the very end of a cell
//!   and nothing until a window later). The fixed window's `2 × limit` needs only a moment
//!   across its edge; here it needs a gap of a whole window minus one cell, and shrinks with
//!   finer cells.
//!
//! A request is admitted iff the closed cells of its window plus the current cell plus `n` stay
//! within the limit, and a denial is a real one: there are no false denials from racing callers.
//!
//! # Time
//! The horizon is `h = max(cells, ⌈H / cell⌉)` cells, `H` =
//! [`MAX_CLOCK_LAG_NANOS`](crate::clock::MAX_CLOCK_LAG_NANOS) (10 s): the clocks of correct
//! threads agree within `H`, so their cells within `h`.
//! * **Lag.** A caller whose cell is at most `h` behind `head` is decided in `head`'s cell.
//! * **Leap.** A `head` more than `h` ahead of a clock read taken *after* `head` was loaded (a
//!   thread preempted between its clock read and its loads reads again, so it never takes a newer
//!   head for a leap) was raised by a leaping clock. The caller moves `head` back to its own cell
//!   by compare-exchange from the value it judged, and crosses into it: the window's slots hold
//!   the leaped era's rounds, so they read as zero and are reset. A caller never follows `head`
//!   past its own cell + `h` (it may walk past it itself, over cells sealed before the rewind,
//!   up to the first cell not sealed: that head is its own walk's, never taken for a leap), and
//!   a call that saw the ring moved back under it never raises `head` again (a clocked call
//!   re-reads its clock; an explicit `now` more than `h` ahead of the moved-back head is decided
//!   in that head's cell), so a call in flight in the leaped cell cannot re-leap the ring.
//! * **What a one-shot leap costs** (one read more than `h` cells ahead, every other within `H`):
//!   no freeze at all: the first call with a fresh read after it rewinds the ring and is decided
//!   in its own cell. What the ring forgets: (a) what was admitted in the window before the
//!   leaper's crossing (that crossing resets the ring, as after that much idleness: at most the
//!   limit), and (b) the leaped era's admissions (the leaper's own request, `n ≤ limit`). A
//!   window-long span around the leap holds at most `limit + a + b ≤ 2 × limit + n`; spans whose
//!   cells all come after the last cell used before the leap hold at most the limit, as always.
//! * **A leap within the horizon** (a read at most `h` cells ahead: for a window longer than `H`,
//!   up to one window) is taken for a lagging read: callers follow `head` into the leaper's cell
//!   and are decided there until real time reaches it, so a window full there refuses them until
//!   the leaper's cell leaves it: for up to the lead plus one window (two windows; the fixed and
//!   packed windows, which judge a lead in time, stop at one window plus `H`). `h` is not
//!   smaller than the window because a leaper less than a window ahead seals the present's own
//!   cell in its crossing, and a rewound caller that finds its cell sealed walks forward to the
//!   leaper's cell again (`tests/time_long_windows.rs`, ignored).
//! * **A persistent leaper** (a core whose clock runs more than `H` ahead) is outside this model:
//!   each of its calls is a new leap and costs what one leap costs, so while it lasts the limit
//!   does not hold (up to `limit + n` more per leaping call); it never freezes the limiter.
//! * **Explicit times.** [`try_acquire_at`](SlidingWindowLimiter::try_acquire_at) and
//!   [`peek_at`](SlidingWindowLimiter::peek_at) take their `now` as fresh: a `now` more than `h` behind
//!   `head` moves the ring back to it, and a leaped `now` given again leaps again.
//!   [`sweep_at`](SlidingWindowLimiter::sweep_at) never moves the ring back (a late sweep is allowed).
//!
//! # Protocol
//! Each slot packs `(round, sealed, count)` in one `AtomicU64` ([`pack_cell`]). The window's closed
//! cells are summed once per cell, by the first caller that crosses into a new cell (or the
//! sweep): it raises `head` (the newest cell index, a full `u64`), *seals* the window's closed
//! cells that are not sealed yet (a sealed cell never changes again: a writer that finds its cell
//! sealed moves to the newer cell), *marks* them (a running sum of sealed counts published next to
//! each cell, see [Marks](#marks)), and publishes their sum in `base` as `(cell tag, sum)`.
//! The crosser whose compare-exchange published it (the cell's other crossers stop there) then
//! pre-stamps the `future` cells ahead with their round and a zero count, and leaves beside
//! `base` a *hint* of where that cell lives, so a call in it finds its cell and slot without
//! dividing (a hint is checked before use: any value a crossing stores is safe). Every other call is: load `base` and the
//! hint, load the current cell, and one compare-exchange that adds `n` iff
//! `base sum + count + n ≤ limit`. The check and the add are one atomic step on the only cell that
//! is still open, and the rest of the window is frozen, so the check is exact. A denial writes
//! nothing, except that the first call in a new cell does the crossing work above whether it is
//! then admitted or denied.
//!
//! A slot whose round is not the current one counts as zero, and is reset by compare-exchange by
//! whoever writes it next; before resetting, a writer re-reads `head`: if some thread is already
//! past this cell, the slot may hold a *newer* round, and the writer moves forward instead. So a
//! late or missing sweep only costs the first writer of a cell one more compare-exchange, and
//! never changes a decision.
//!
//! `head` only rises, except for a rewind ([Time](#time)). So every check of `head` made before
//! writing a slot, a mark or `base` for a cell (seal, mark, reset, publish, pre-stamp) asks for
//! `head` to be that cell: a head past it means a newer crossing, a head below it a rewind, and
//! either way the write is void and the caller judges the new head. The fast path reads no
//! `head`: the horizon is judged only on the paths that already read it.
//!
//! # Marks
//! Cells are grouped in aligned blocks of `cells` cells, so a window's closed cells are a suffix
//! of one block and a prefix of the next. Next to each closed cell the crossing publishes the sum
//! of the sealed counts from it to its block's end (older block) or from its block's start to it
//! (newer block): sums over sealed cells of the crosser's own window, so every crosser computes
//! the same mark. Then:
//! * **a crossing costs O(1)** when the previous published crossing is in the same block: only
//!   the cells after it are new, and the window's sum is one older-block mark plus one newer-block
//!   mark; it pre-stamps only the future cells the previous crossing did not. The first crossing
//!   into a block walks its window: O(cells), once per block.
//! * **a denial and a peek cost O(log cells)** (O(1) when the published [ends](#ends)
//!   settle them, always for `n = 1` in a cell the crossing published): the sum of any run of closed cells is the
//!   difference of two marks, so when enough of the window leaves (the retry time) and when the
//!   newest used cell leaves (the reset time) are two binary searches over the marks. A denial
//!   still writes nothing. A reader checks every mark it reads against the cell's round and the
//!   kind it expects, and their total against the sum it decided on. When a newer crossing changed
//!   them under it (into a new block, or a ring later), the call is decided again, once, from a
//!   fresh `base` (its cell is then sealed, so it follows head); if they change again, or changed
//!   with head still there (after a leap), that one call reads the cells one by one, as every call
//!   did before. Never a wait on another thread. [`admit`](crate::Limiter::admit), which needs
//!   no retry or reset time, reads no marks: its refusal in the common case (its cell is the
//!   published crossing, open) costs O(1), the loads it was decided on.
//! * **after a rewind** ([Time](#time)), cells between a rewound `head` and the head it moved
//!   back from may hold counts no crossing since has sealed: a peek in a cell past the newest
//!   crossing reads those of its window's cells it would take for empty (none once its window
//!   starts past the newest head a rewind moved back from), and the whole window, one by one,
//!   if one holds a count. It skips the cells `head` never held before the newest rewind (a
//!   rewind narrows them to a gap `head` jumped since the rewind before: of the one below the
//!   head it moved back from, the widest raise past the horizon, recorded by that raise, and
//!   the cells above that head, the one that leaves the most cells a peek may read), so after
//!   a leap to the end of time and back, however many calls the leaped clock made there, and
//!   after a shorter leap past the horizon and back since, a quiet peek reads none.
//!
//! The memory cost is one more word per slot. The details are in `marks.rs`.
//!
//! # Ends
//! Beside `base`, on its cache line, the crossing also publishes the window's *ends*: its oldest
//! used closed cell with that cell's count (capped at 127), and its newest used closed cell, each
//! as a distance back from the crossed cell in a word named by the cell as `base` is
//! (`(cell tag, payload)`). Only the crosser whose compare-exchange published `base` publishes
//! them, right after it, by plain stores (`newest`, then `oldest`, which a reader loads first;
//! when the oldest used cell is the only one, `oldest` alone, flagged so); the other crossers of
//! the cell do nothing for them. A crossing that walks its window
//! finds them in the walk; an incremental one in O(1) from the previous crossing's ends and the
//! cells it seals (and one cell read, the window's first, when the previous oldest used cell
//! leaves); where that does not settle them (the new oldest used cell further in, or the
//! previous ends not published yet), two searches over the marks, O(log cells) once per
//! crossing. A window with no used closed cell publishes nothing.
//!
//! The words are *self-validating*: a word is named by its crossing's cell mixed with the
//! crossing's *epoch* (the rewinds begun when it began, read before and after it looked at
//! `head`: a crossing that raced a rewind publishes nothing), and a reader uses it only when it
//! carries the name of the cell its `base` names in the epoch it reads after that `base`. Every
//! crossing of a cell within one epoch computes the same ends from sealed (final) counts. So a
//! word with that name holds that crossing's ends whenever and by whomever it was stored: ends
//! not stored yet (a reader between the winner's `base` and its ends) and a stale store (a
//! stalled winner's, after a newer crossing's) carry another name, and the reader searches the
//! marks instead. A rewind ([Time](#time)) moves the ring back to a cell that may have been
//! crossed before, with other counts (the leaped era reset some of its window's slots): it
//! counts itself before it moves `head` back, every crossing after it reads that count after
//! the `head` it goes on from, and every reader reads it after such a crossing's `base`; so ends
//! stored before the rewind, even by a winner stalled across the whole leap, the rewind and a
//! new crossing of its own cell, carry an older epoch's name and are not used
//! (`ends_stored_by_a_winner_stalled_across_a_rewind_are_ignored`). The rewind also stores
//! "none" named by its cell (offset 0) before moving `head` back. Names are 40-bit tags: two
//! epochs name one cell alike only 2^40 rewinds apart, and two cells' names in two epochs
//! coincide by chance, as a cell 2^40 cells away does without epochs.
//!
//! A denial whose window is short of `need` permits frees them, oldest first, and the oldest used
//! closed cell frees its count when it leaves: so when `need` is at most that count (always for
//! `n = 1`: a window at the limit is short of exactly 1), the retry time is when that cell leaves,
//! and the reset time is when the current cell leaves (it holds permits) or else the newest used
//! closed cell: a denial after the short path then reads two words of `base`'s line and no mark,
//! whatever the cells (`examples/instructions_spent`). Ends that name another cell (a newer
//! crossing's, or none published) are not used: the denial searches the marks, as above.
//!
//! # Leases
//! As a [`LeaseSource`](crate::lease::LeaseSource), the window leases permits in batches, each
//! counted in one cell, and takes a lease's unused permits back **only into that cell, while it
//! is open**: one compare-exchange on its slot that checks the cell's round and the open flag
//! and lowers the count. An open cell's count is read live by every reader and is in no published
//! sum, so the window is then exactly as if the lease had been smaller. A sealed cell's count is
//! in `base` and its block's marks, which one compare-exchange cannot correct together: once a
//! crossing has sealed the cell (or its slot holds another cell), the refund is refused and the
//! permits stay counted until the cell leaves the window. A refund is also refused once the ring
//! has begun a rewind ([Time](#time)) since the lease (the rewind can re-open the lease's cell
//! afresh, at zero), and once the clock is half a round-tag period (`2^38 × slots` cells) past the cell: the slot may then hold the
//! lease's tag for another cell. The bound this gives a [`PerCore`](crate::lease::PerCore) is in
//! the [lease module's table](crate::lease#the-bound).
//!
//! ```
//! use floodgate::lease::LeaseSource;
//! use floodgate::{Limiter, ManualClock, SlidingWindowLimiter};
//! use std::time::Duration;
//! let clock = ManualClock::new();
//! let window = SlidingWindowLimiter::with_clock(10, Duration::from_secs(1), 4, clock.clone())?;
//! let first = window.take(1, 4, u64::MAX)?; // 4 permits, counted in cell 0
//! assert!(window.give_back(&first, 3)); // cell 0 is open: as if `first` had been of 1
//! let second = window.take(1, 4, u64::MAX)?;
//! clock.advance(Duration::from_millis(250));
//! assert!(window.try_acquire(1)?.is_allowed()); // crosses into cell 1, sealing cell 0
//! assert!(!window.give_back(&second, 4)); // cell 0 is sealed: its 4 stay counted
//! assert_eq!(window.peek(1)?.remaining(), 3); // 10 − 1 − 4 − 1, less the one peeked
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod horizon;
mod marks;
mod protocol;
mod refund;

pub use config::SlidingWindow;

use std::time::Duration;

use crossbeam_utils::CachePadded;

use self::horizon::{Caller, LeapRecord, horizon_cells};
use self::marks::Closed;
use super::ring::RingGeometry;
use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision, check_permits, validate_limit};
use crate::limiter::Limiter;
use crate::packed::{COUNT_BITS, MAX_COUNT, TAG_MASK, pack_window, unpack_window};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Bits of a cell's round tag.
pub const ROUND_BITS: u32 = 39;
/// Mask of a round tag (after shifting down).
pub const ROUND_MASK: u64 = (1 << ROUND_BITS) - 1;
/// The sealed flag of a cell word.
pub const SEALED: u64 = 1 << 24;
/// Largest count a cell holds, and so the largest sliding-window limit (16,777,215).
pub const MAX_LIMIT: u64 = MAX_COUNT;

/// Packs a sliding-window cell word.
///
/// ```text
///  63                         25   24   23               0
/// ┌────────────────────────────┬────────┬──────────────────┐
/// │ round: 39 bits             │ sealed │ count: 24 bits   │
/// └────────────────────────────┴────────┴──────────────────┘
/// ```
/// `round` is the cell index divided by the ring's slot count, modulo 2^39; `count` (at most the
/// limit, checked before every write, so it never spills) is the permits taken in the cell.
/// A slot left untouched for exactly a multiple of `2^39 × slots` cells reads as current: it then
/// carries its old count. The slots are a power of two (at least 2), so `2^39 × slots` cells is
/// a multiple of `2^40` and `base`'s 40-bit cell tag aliases at the same time; only
/// over-counting follows (old counts kept, in the cell and in `base`'s sum), which can only deny
/// more, never admit more. Unreachable with cells of 1 s or more (any of at least `2^24` ns):
/// `2^40` of them span more than the `u64` nanosecond clock's 584 years.
///
/// ```
/// use floodgate::algorithms::sliding_window::{pack_cell, unpack_cell, ROUND_MASK};
/// assert_eq!(unpack_cell(pack_cell(ROUND_MASK + 3, true, 7)), (2, true, 7));
/// assert_eq!(unpack_cell(0), (0, false, 0));
/// ```
#[inline]
pub const fn pack_cell(round: u64, sealed: bool, count: u64) -> u64 {
    debug_assert!(count <= MAX_COUNT);
    ((round & ROUND_MASK) << 25) | if sealed { SEALED } else { 0 } | count
}

/// Unpacks a cell word into `(round, sealed, count)`.
///
/// ```
/// use floodgate::algorithms::sliding_window::unpack_cell;
/// assert_eq!(unpack_cell(u64::MAX), ((1 << 39) - 1, true, (1 << 24) - 1));
/// ```
#[inline]
pub const fn unpack_cell(word: u64) -> (u64, bool, u64) {
    (word >> 25, word & SEALED != 0, word & MAX_COUNT)
}

/// The low bits of `word` (a count, with a seal bit where the word has one) if its bits from
/// `shift` up hold `high` (unreduced: its bits past the word's top drop off in the shift, as a
/// reduction modulo the field would): one subtraction and one comparison. `high << shift` has no
/// low bits, so the difference keeps them and is the high fields' difference above them: at most
/// `MAX_COUNT` exactly when the fields agree and the bits between the count and `shift` (the
/// seal bit) are clear, and then the count.
#[inline(always)]
fn count_if_above(word: u64, high: u64, shift: u32) -> Option<u64> {
    let rest = word.wrapping_sub(high << shift);
    (rest <= MAX_COUNT).then_some(rest)
}

/// The count of cell word `word` if it holds round `round` (unreduced: reduced here, modulo
/// 2^39), open: `unpack_cell(word)` is `(round & ROUND_MASK, false, count)`.
#[inline(always)]
fn open_count(word: u64, round: u64) -> Option<u64> {
    count_if_above(word, round, 25)
}

/// The sum of `base` word `word` if it names cell `cell` (its tag is `cell & TAG_MASK`).
#[inline(always)]
fn named_sum(word: u64, cell: u64) -> Option<u64> {
    count_if_above(word, cell, COUNT_BITS)
}

/// Sliding window limiter: at most `limit` permits in any `cells` consecutive cells of
/// `window / cells` each (see the [module docs](self) for the exact guarantee and protocol).
///
/// Memory: two cache-padded lines (`head`; `base`, its hint and the window's ends) plus 16 bytes per slot (a cell
/// word and its mark; `cells + future` rounded up to a power of two, so a cell's slot and round
/// are a mask and a shift of its index), see [`memory_bytes`](SlidingWindowLimiter::memory_bytes).
///
/// ```
/// use floodgate::{Limiter, ManualClock, SlidingWindowLimiter};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// // 2 per minute, in 60 one-second cells.
/// let limiter = SlidingWindowLimiter::with_clock(2, Duration::from_secs(60), 60, clock.clone())?;
/// clock.set(59_000_000_000); // 0:59
/// assert!(limiter.try_acquire(2)?.is_allowed());
/// clock.set(60_000_000_000); // 1:00: a fixed window would admit 2 more here
/// let denied = limiter.try_acquire(1)?;
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Duration::from_secs(59)); // 1:59, when 0:59 leaves the window
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SlidingWindowLimiter<C = QuantaClock> {
    /// The configuration's geometry, but with the ring's slot count: `cells + future` rounded
    /// up to a power of two (see [`ring_geometry`]).
    geometry: RingGeometry,
    /// `log2(slots)`: a cell's round is its index shifted down by this, its slot the bits below.
    slot_bits: u32,
    /// `slots − 1`: a cell's slot is its index's bits under this mask.
    slot_mask: u64,
    /// The window in nanoseconds, `cells × cell_nanos`: a cell whose start the call has in hand
    /// leaves the window at that start plus this ([`until_leaves`](Self::until_leaves)).
    window_nanos: u64,
    /// `u64::MAX / cell_nanos`: the last cell that starts within the `u64` timeline. A cell at
    /// most this has a start, `index × cell_nanos`, that needs no checked product (the spent
    /// denial's wait, [`sole_wait_in_cell`](marks::sole_wait_in_cell)); a cell below it also
    /// ends within the timeline, as every hint does (`ends_in_timeline`).
    last_cell: u64,
    limit: AtomicU32,
    /// The newest cell index any caller or sweep has crossed into, and beside it the highest
    /// head a raise started from ([`HeadLine`]).
    head: CachePadded<HeadLine>,
    /// `base`: `(cell index mod 2^40, sum of the window's closed cells)` for the newest crossed
    /// cell, and on its cache line the [`hint`](BaseLine::hint) of where that cell lives.
    base: CachePadded<BaseLine>,
    /// The cell words, `(round, sealed, count)` ([`pack_cell`]).
    slots: Box<[AtomicU64]>,
    /// Beside each slot, the mark the crossing publishes once its cell is closed (see
    /// [Marks](self#marks)): `(round, suffix, sum)` in [`pack_cell`]'s layout. A separate array,
    /// so the admission's slot index stays a scaled 8-byte offset.
    marks: Box<[AtomicU64]>,
    /// Attempts to move `head` back (a rewind after a leap, [Time](self#time)) begun, counted
    /// before each attempt's compare-exchange, and ended, counted after it: a lease records
    /// them, and its refund is refused once a rewind has begun since (a rewind can re-open the
    /// lease's cell afresh, see [`refund`](Self::refund)). Each rewind adds
    /// [`EPOCH_STEP`](marks::EPOCH_STEP) (wrapping), so the count read is an epoch's name
    /// factor already ([`ends_name`](marks::ends_name)); only ever compared for equality.
    rewinds_begun: AtomicU64,
    rewinds_ended: AtomicU64,
    /// One past the newest `head` any rewind moved back from (raised before its compare-exchange,
    /// so possibly one that then failed); 0 before the first rewind. Only cells below it can hold
    /// counts that no crossing after the rewind has sealed and counted (a count is written only
    /// in a cell `head` reached, and `head` is below this until it passes it), so a peek reads
    /// the cells it would take for empty only below it ([`closed_for_peek`](Self::closed_for_peek)).
    rewound_from: AtomicU64,
    /// `[unreached_from, unreached_to)`: cells `head` never held before the newest rewind
    /// (every cell before the first), so cells no count can be left in; narrowed by every
    /// rewind to a gap `head` jumped since the rewind before: the cells between the head the
    /// last raise started from and the head it moved back from, those of the widest raise past
    /// the horizon recorded in its epoch ([`leap`](Self::leap)), or those above the head it
    /// moved back from, whichever leaves the most cells below `rewound_from`
    /// ([`narrow_unreached`](Self::narrow_unreached), which says why each is exact).
    /// A peek skips them below [`rewound_from`](Self::rewound_from) once every rewind it may
    /// have seen has ended ([`unreached_cells`](Self::unreached_cells)). Empty when
    /// `unreached_from ≥ unreached_to`.
    unreached_from: AtomicU64,
    unreached_to: AtomicU64,
    /// The widest raise of `head` past the horizon in the newest epoch that recorded one (the
    /// rewinds begun before it), which the rewind ending that epoch narrows
    /// `[unreached_from, unreached_to)` by when it is wider than the gap below the head it
    /// moves back from ([`LeapRecord`]). Three words, off the hot lines; written only by a raise
    /// past the horizon.
    leap: LeapRecord,
    /// How many cells ahead of a caller's own cell `head` may be and still be a lagging read's:
    /// `max(cells, ⌈MAX_CLOCK_LAG_NANOS / cell⌉)`. Further ahead, on a fresh read, a leap's.
    horizon: u64,
    clock: C,
}

/// `head` and the record beside it, on one cache line (a raise writes both).
struct HeadLine {
    /// The newest cell index any caller or sweep has crossed into (`head`).
    cell: AtomicU64,
    /// The highest head any raise of `head` started from (0 before the first): each raise
    /// records it before its compare-exchange ([`raise`](SlidingWindowLimiter::raise)), so a
    /// rewind that moves `head` back from a cell knows that `head` held no cell between this
    /// and that one ([`narrow_unreached`](SlidingWindowLimiter::narrow_unreached)).
    raised_from: AtomicU64,
}

/// `base`, the hint beside it and the window's ends, on one cache line (a call reads `base` and
/// the hint, a denial that needs an old cell to leave the ends).
struct BaseLine {
    /// `(cell index mod 2^40, sum of the window's closed cells)` for the newest crossed cell.
    word: AtomicU64,
    /// The index of the newest crossed cell, stored by its crossing: a call whose clock read
    /// falls in that cell finds its cell with a multiplication instead of a division (its slot
    /// and round are a mask and a shift of it). Only a hint: a call checks that its clock read
    /// lies in the cell it names, which makes every hint it uses exact whenever and by whomever
    /// it was written; any other value (stale, not yet written) is ignored and the call
    /// divides. Its values are 0 and cells that end within the `u64` timeline (a crossing into
    /// the timeline's last cell stores none): that is what lets the check be one wrapping
    /// subtraction and one comparison ([`locate`](SlidingWindowLimiter::locate)).
    hint: AtomicU64,
    /// The window's *ends* for a crossed cell, published by the crosser that published its
    /// `base`, after it (see [Ends](self#ends)): `(cell index mod 2^40, e)` in `base`'s layout,
    /// where `e` is `oldest offset << 8 | sole << 7 | min(oldest count, 127)`: the oldest used
    /// closed cell's distance back from the crossed cell, whether it is the only used one (then
    /// it is the newest too, and `newest` is not stored), and its count; `e = 0` is none
    /// (stored by a rewind).
    oldest: AtomicU64,
    /// As `oldest`, `e` the newest used closed cell's distance back from the crossed cell.
    newest: AtomicU64,
}

/// The local ring's geometry for `config`'s: its slots, `cells + future`, rounded up to a power
/// of two (at most [`MAX_SLOTS`](super::ring::MAX_SLOTS), itself one), so that the slot and the
/// round of a cell are its index's low bits and the rest. The extra slots are never pre-stamped
/// ahead: they only put a ring's reuse of a slot further away.
fn ring_geometry(config: RingGeometry) -> RingGeometry {
    RingGeometry {
        slots: config.slots.next_power_of_two(),
        ..config
    }
}

#[cfg(test)]
std::thread_local! {
    /// Slot words (cells and marks) this thread has read or written through the ring's protocol:
    /// what the unit tests count to show that a denial or a peek costs O(log cells).
    static VISITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one slot word visited (unit tests only; nothing in other builds).
#[inline(always)]
fn visit() {
    #[cfg(test)]
    VISITS.with(|v| v.set(v.get() + 1));
}

impl<C> std::fmt::Debug for SlidingWindowLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlidingWindowLimiter")
            .field("limit", &self.current_limit())
            .field("window", &self.window())
            .field("cells", &self.geometry.cells)
            .field("future_cells", &self.geometry.future)
            .finish_non_exhaustive()
    }
}

impl<C> SlidingWindowLimiter<C> {
    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// let w = floodgate::SlidingWindowLimiter::new(100, Duration::from_secs(60), 60)?;
    /// assert_eq!(w.window(), Duration::from_secs(60));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.geometry.window_nanos())
    }

    /// Cells per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// let w = floodgate::SlidingWindowLimiter::new(100, Duration::from_secs(60), 60)?;
    /// assert_eq!(w.cells(), 60);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn cells(&self) -> u32 {
        self.geometry.cells as u32
    }

    /// Future cells the sweep pre-stamps.
    ///
    /// ```
    /// use std::time::Duration;
    /// let w = floodgate::SlidingWindowLimiter::new(100, Duration::from_secs(60), 60)?;
    /// assert_eq!(w.future_cells(), 15); // default: a quarter of the cells, at least one
    /// assert_eq!(w.with_future_cells(4)?.future_cells(), 4);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn future_cells(&self) -> u32 {
        self.geometry.future as u32
    }

    /// Bytes this limiter occupies: the struct (two cache-padded words) plus 16 per slot (a cell
    /// word and its mark).
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(5, std::time::Duration::from_secs(60), 60).unwrap();
    /// assert!(w.memory_bytes() >= 16 * 75);
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + 2 * self.slots.len() * std::mem::size_of::<AtomicU64>()
    }

    /// The limit in force.
    #[inline]
    fn current_limit(&self) -> u64 {
        // Relaxed: a self-contained config value; a racing decision may use either limit.
        u64::from(self.limit.load(Ordering::Relaxed))
    }
}

impl SlidingWindowLimiter<QuantaClock> {
    /// `limit` permits per `window`, cut into `cells` cells, on the default clock: the shortcut
    /// for `SlidingWindow::new(limit, window, cells)?.into_limiter()`.
    ///
    /// # Errors
    /// As [`SlidingWindow::new`].
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(100, std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!((w.cells(), w.future_cells()), (6, 1));
    /// ```
    pub fn new(limit: u32, window: Duration, cells: u32) -> Result<Self, ConfigError> {
        Self::with_clock(limit, window, cells, QuantaClock::new())
    }
}

impl<C: Clock> SlidingWindowLimiter<C> {
    /// As [`SlidingWindowLimiter::new`], on `clock`.
    ///
    /// # Errors
    /// As [`SlidingWindow::new`].
    ///
    /// ```
    /// let clock = floodgate::ManualClock::new();
    /// let w = floodgate::SlidingWindowLimiter::with_clock(5, std::time::Duration::from_secs(1), 10, clock);
    /// assert!(w.is_ok());
    /// ```
    pub fn with_clock(
        limit: u32,
        window: Duration,
        cells: u32,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Ok(Self::from_config(
            &SlidingWindow::new(limit, window, cells)?,
            clock,
        ))
    }

    /// The same limiter with `future` pre-stamped cells (see
    /// [`SlidingWindow::with_future_cells`]); its state starts afresh.
    ///
    /// # Errors
    /// As [`SlidingWindow::with_future_cells`].
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(5, std::time::Duration::from_secs(1), 10).unwrap();
    /// assert_eq!(w.with_future_cells(30).unwrap().future_cells(), 30);
    /// ```
    pub fn with_future_cells(self, future: u32) -> Result<Self, ConfigError> {
        let config = self.config().with_future_cells(future)?;
        Ok(Self::from_config(&config, self.clock))
    }

    /// A fresh limiter running `config` on `clock` (what
    /// [`IntoLimiter`](crate::IntoLimiter) does).
    pub(crate) fn from_config(config: &SlidingWindow, clock: C) -> Self {
        let geometry = ring_geometry(config.geometry);
        // Every slot starts as round 0, count 0: slot `i` is a fresh, open cell `i`. Its mark (0:
        // round 0, prefix, 0) is only read once a crossing has written or checked it.
        let slots = (0..geometry.slots).map(|_| AtomicU64::new(0)).collect();
        let marks = (0..geometry.slots).map(|_| AtomicU64::new(0)).collect();
        SlidingWindowLimiter {
            geometry,
            slot_bits: geometry.slots.trailing_zeros(),
            slot_mask: geometry.slots - 1,
            window_nanos: geometry.window_nanos(),
            last_cell: u64::MAX / geometry.cell_nanos,
            limit: AtomicU32::new(config.limit),
            head: CachePadded::new(HeadLine {
                cell: AtomicU64::new(0),
                raised_from: AtomicU64::new(0),
            }),
            // Cell 0 has no closed cells before it.
            base: CachePadded::new(BaseLine {
                word: AtomicU64::new(pack_window(0, 0)),
                hint: AtomicU64::new(0),
                // Cell 0 has no used closed cell: offset 0 is none (a reader falls back).
                oldest: AtomicU64::new(pack_window(0, 0)),
                newest: AtomicU64::new(pack_window(0, 0)),
            }),
            slots,
            marks,
            rewinds_begun: AtomicU64::new(0),
            rewinds_ended: AtomicU64::new(0),
            rewound_from: AtomicU64::new(0),
            // Before the first rewind no cell can hold a count left by one.
            unreached_from: AtomicU64::new(0),
            unreached_to: AtomicU64::new(u64::MAX),
            leap: LeapRecord::new(),
            horizon: horizon_cells(geometry.cells, geometry.cell_nanos),
            clock,
        }
    }

    /// The configuration in force (the limit as last set).
    ///
    /// ```
    /// use floodgate::{Limiter, SlidingWindow, SlidingWindowLimiter};
    /// use std::time::Duration;
    /// let w = SlidingWindowLimiter::new(10, Duration::from_secs(60), 60)?;
    /// w.set_limit(4)?;
    /// assert_eq!(w.config(), SlidingWindow::new(4, Duration::from_secs(60), 60)?);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn config(&self) -> SlidingWindow {
        SlidingWindow {
            limit: self.current_limit() as u32,
            // The configuration's slot count, `cells + future` (the ring rounds it up).
            geometry: RingGeometry {
                slots: self.geometry.cells + self.geometry.future,
                ..self.geometry
            },
        }
    }

    /// [`try_acquire`](Limiter::try_acquire) at a time the caller already read (one clock read
    /// shared by several limiters, or a simulation). A `now` behind the newest cell by at most the
    /// lag horizon is decided in that newer cell; further behind, `now` counts as a fresh read
    /// and the newest cell as a leaping clock's (see [Time](self#time)).
    ///
    /// # Errors
    /// [`AcquireError`] for `n = 0` or `n` above the limit.
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(1, std::time::Duration::from_secs(2), 2).unwrap();
    /// assert!(w.try_acquire_at(1, 0).unwrap().is_allowed());
    /// assert!(!w.try_acquire_at(1, 1_500_000_000).unwrap().is_allowed());
    /// assert!(w.try_acquire_at(1, 2_000_000_000).unwrap().is_allowed());
    /// ```
    pub fn try_acquire_at(&self, n: u32, now: u64) -> Result<Decision, AcquireError> {
        let limit = self.current_limit();
        check_permits(n, limit)?;
        Ok(self.acquire_at(u64::from(n), limit, now, None))
    }

    /// [`Limiter::try_acquire`], with the cell the call was decided in (where an allowed call's
    /// permits are counted, and a lease's refund goes: [`refund`](Self::refund)) and that cell's
    /// end (a lease is served only until then). The cell can be earlier than that of a clock
    /// read taken before the call, on a core whose clock trails.
    pub(crate) fn try_acquire_counted(
        &self,
        n: u32,
    ) -> Result<(Decision, (u64, u64)), AcquireError> {
        let limit = self.current_limit();
        check_permits(n, limit)?;
        let now = self.clock.now_nanos();
        let (decision, cell) = self.acquire_counted(u64::from(n), limit, now, Some(&self.clock));
        Ok((
            decision,
            (cell, self.geometry.start_of(cell.saturating_add(1))),
        ))
    }

    /// A call at `now`, which may re-read `clock` (the explicit-time API passes none: its `now`
    /// counts as fresh).
    #[inline]
    fn caller<'a>(&self, now: u64, clock: Option<&'a C>) -> Caller<'a, C> {
        Caller::new(now, self.geometry.cell_of(now), clock)
    }

    /// The decision `n` permits would get now, without taking them and without writing anything.
    ///
    /// # Errors
    /// As [`try_acquire_at`](SlidingWindowLimiter::try_acquire_at).
    ///
    /// ```
    /// use floodgate::{Limiter, ManualClock, SlidingWindowLimiter};
    /// let w = SlidingWindowLimiter::with_clock(3, std::time::Duration::from_secs(1), 4, ManualClock::new()).unwrap();
    /// w.try_acquire(2).unwrap();
    /// assert_eq!(w.peek(1).unwrap().remaining(), 0);
    /// assert!(!w.peek(2).unwrap().is_allowed());
    /// ```
    pub fn peek(&self, n: u32) -> Result<Decision, AcquireError> {
        self.peek_with(n, self.caller(self.clock.now_nanos(), Some(&self.clock)))
    }

    /// [`peek`](SlidingWindowLimiter::peek) at a given time.
    ///
    /// # Errors
    /// As [`try_acquire_at`](SlidingWindowLimiter::try_acquire_at).
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(3, std::time::Duration::from_secs(1), 4).unwrap();
    /// assert_eq!(w.peek_at(1, 0).unwrap().remaining(), 2);
    /// ```
    pub fn peek_at(&self, n: u32, now: u64) -> Result<Decision, AcquireError> {
        self.peek_with(n, self.caller(now, None))
    }

    fn peek_with(&self, n: u32, mut me: Caller<'_, C>) -> Result<Decision, AcquireError> {
        let limit = self.current_limit();
        check_permits(n, limit)?;
        let n = u64::from(n);
        // Whether the marks already changed under this peek once: it is then read again from a
        // fresh `base`, once; a second time, the cells are read one by one (see `marks`).
        let mut read_again = false;
        loop {
            // Acquire: a base comes with its crossing's seals and marks (and its head raise, so
            // the head loaded next is at or past the crossing, unless the ring was rewound).
            let (tag, base) = unpack_window(self.base.word.load(Ordering::Acquire));
            let (cell, head) = self.peek_cell(&mut me);
            // The call goes on past a cell sealed in its round (sealed before a rewind: see
            // [Time](self#time)), to the first one that is not: so does the peek.
            let (cell, count) = self.past_sealed(cell);
            let now = me.now;
            let closed = match self.closed_for_peek(cell, head, tag, base) {
                Some(closed) => closed,
                None if !read_again => {
                    read_again = true;
                    continue;
                }
                None => self.closed_by_scan(cell),
            };
            let prev = closed.sum();
            if prev + count + n <= limit {
                let reset = self
                    .geometry
                    .until_start(cell.saturating_add(self.geometry.cells), now);
                return Ok(Decision::allow(limit, limit - prev - count - n, reset));
            }
            // Where `base` names this cell, its ends first (no mark read, see `ends`).
            if closed.crossing == cell
                && !closed.scan
                && let Some(denied) = self.published_denial(cell, now, prev, count, n, limit)
            {
                return Ok(denied);
            }
            match self.denial(cell, now, closed, count, n, limit) {
                Some(denied) => return Ok(denied),
                None if !read_again => read_again = true,
                None => return Ok(self.denial_by_scan(cell, now, prev, count, n, limit)),
            }
        }
    }

    /// The closed cells of the window of `cell` for a peek that loaded `base` = `(tag, sum)` and
    /// then `head`. The crossing `base` names is the newest at or before `head` with that tag:
    /// * `cell` itself: its closed cells sum to `base`'s sum;
    /// * an older cell `p` of `cell`'s window: nobody has written a cell after `p` (a writer
    ///   needs its cell's `base`), so the closed cells are `[ws, p)`, read through `p`'s marks
    ///   (`None` if they changed under the peek), and `p` with its live count;
    /// * a cell before `cell`'s window: every cell of the window is still empty;
    /// * past `cell` (a leaped head, read past): the cells are read one by one.
    ///
    /// "Nobody has written a cell after" the crossing holds only for cells past every head a
    /// rewind moved back from ([Time](self#time)): cells after a rewound `head`, up to the head
    /// it moved back from, can still hold counts from before the rewind (the leaped era's, or
    /// those of cells past the cell it rewound to), which a call's crossing seals and counts.
    /// So the cells the peek would take for empty that lie below
    /// [`rewound_from`](Self::rewound_from) are read first: if one holds a count, the peek reads
    /// the window's cells one by one. Once no such cell is in the window (a window after the
    /// newest head ever rewound from, or a crossing past it), that costs one load; until then,
    /// a read of each cell between the crossing and `cell` (one or none for a peek in a cell
    /// crossed every cell), but none of the cells `head` never held before the newest rewind
    /// ([`unreached_from`](Self::unreached_from)): after a leap to the end of time, a quiet
    /// peek between the cell the leap left and the leaped cell reads none.
    fn closed_for_peek(&self, cell: u64, head: u64, tag: u64, base: u64) -> Option<Closed> {
        let from = self.geometry.window_start(cell);
        let Some(published) = head.checked_sub(head.wrapping_sub(tag) & TAG_MASK) else {
            return Some(if self.left_by_a_rewind(from, cell) {
                self.closed_by_scan(cell)
            } else {
                Closed::of_crossing(cell, from, 0)
            });
        };
        Some(if published == cell {
            Closed::of_crossing(cell, from, base)
        } else if published > cell || self.left_by_a_rewind(from.max(published + 1), cell) {
            // (`published < cell` in the second test: no overflow.)
            self.closed_by_scan(cell)
        } else if published < from {
            Closed::of_crossing(cell, from, 0)
        } else {
            Closed {
                crossing: published,
                from,
                marked: self.marked_sum(published, from)?,
                live: self.count_of(published),
                scan: false,
            }
        })
    }

    /// Whether one of cells `[first, cell)`, which a peek would take for empty, holds a count a
    /// rewind may have left: only cells below [`rewound_from`](Self::rewound_from) can, and
    /// those are read.
    #[inline(always)]
    fn left_by_a_rewind(&self, first: u64, cell: u64) -> bool {
        // SeqCst: as the rewinds begun (`follow` raises both before moving `head` back). The
        // peek loaded `base` and `head` (Acquire) first: a crossing after the rewind read the
        // rewound `head` (its Release) before publishing its `base`, and a raise of `head`
        // after it read it too, so this load sees the rewind's raise.
        let end = self.rewound_from.load(Ordering::SeqCst).min(cell);
        first < end && self.holds_a_count(first, end)
    }

    /// Whether one of cells `[first, end)` holds a count (cells a rewind may have left counts
    /// in: [`left_by_a_rewind`](Self::left_by_a_rewind)); the cells `head` never held before
    /// the newest rewind ([`unreached_cells`](Self::unreached_cells)) are skipped.
    #[cold]
    fn holds_a_count(&self, first: u64, end: u64) -> bool {
        let (from, to) = self.unreached_cells();
        (first..end.min(from))
            .chain(first.max(to)..end)
            .any(|c| self.count_of(c) != 0)
    }

    /// `[from, to)`: cells no rewind can have left a count in
    /// ([`unreached_from`](Self::unreached_from)), or `(u64::MAX, u64::MAX)` (none) while a
    /// rewind is under way or the range is empty.
    fn unreached_cells(&self) -> (u64, u64) {
        // SeqCst, the rewinds ended before the rewinds begun: equal, every rewind begun before
        // the second load had ended before the first (each ends after it begins), so every
        // rewind whose move of `head` this peek loaded (after it began) has narrowed the
        // range (`narrow_unreached`, before it ends) and these loads see it. One under way
        // (between its compare-exchange and its narrowing the range still holds the cells
        // that `head` held before it) leaves the range unused.
        let ended = self.rewinds_ended.load(Ordering::SeqCst);
        if self.rewinds_begun.load(Ordering::SeqCst) != ended {
            return (u64::MAX, u64::MAX);
        }
        let from = self.unreached_from.load(Ordering::SeqCst);
        let to = self.unreached_to.load(Ordering::SeqCst);
        if from < to {
            (from, to)
        } else {
            (u64::MAX, u64::MAX)
        }
    }

    /// The closed cells of the window of `cell`, read one by one.
    fn closed_by_scan(&self, cell: u64) -> Closed {
        let from = self.geometry.window_start(cell);
        let marked = (from..cell).map(|i| self.count_of(i)).sum();
        Closed {
            scan: true,
            ..Closed::of_crossing(cell, from, marked)
        }
    }

    /// Prepares the current cell ahead of callers: the crossing work (sealing the window's closed
    /// cells and publishing their sum) if nobody has done it yet, and pre-stamping the future
    /// cells (left to the caller whose crossing published the cell when the sweep raced one
    /// and lost). Callers do the same work inline when it has not been done, so calling this is only
    /// ever an optimisation; see [`Maintenance`](super::Maintenance) to run it from a thread.
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(3, std::time::Duration::from_secs(1), 4).unwrap();
    /// w.sweep();
    /// ```
    pub fn sweep(&self) {
        self.sweep_with(self.caller(self.clock.now_nanos(), Some(&self.clock)));
    }

    /// [`sweep`](SlidingWindowLimiter::sweep) as of `now`. A `now` behind the newest cell does nothing.
    ///
    /// ```
    /// let w = floodgate::SlidingWindowLimiter::new(3, std::time::Duration::from_secs(1), 4).unwrap();
    /// w.sweep_at(5_000_000_000);
    /// w.sweep_at(0); // late: changes nothing
    /// assert_eq!(w.peek_at(1, 5_000_000_000).unwrap().remaining(), 2);
    /// ```
    pub fn sweep_at(&self, now: u64) {
        self.sweep_with(self.caller(now, None));
    }
}

impl<C: Clock> Limiter for SlidingWindowLimiter<C> {
    // Inlined into every caller (`inline(always)`): with a second caller in a program (a
    // `PerCore`'s `take_exact` calls it), a plain `#[inline]` was left out of line, and the
    // call, its six saved registers and its `Decision` copied through memory twice cost every
    // call about 60 instructions more (`examples/instructions sliding-window-60`, CHANGELOG).
    #[inline(always)]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        // The clock first: the limit and `n` are not kept across its read (fewer registers
        // saved around it; a call with bad permits reads the clock for nothing).
        let now = self.clock.now_nanos();
        let limit = self.current_limit();
        check_permits(n, limit)?;
        Ok(self.acquire_at(u64::from(n), limit, now, Some(&self.clock)))
    }

    /// A decision `try_acquire` could have made (called alone, the same one), from the same
    /// short path, without the retry and reset times: a refusal there reads no marks (it is
    /// exact for a caller whose clock is in that cell).
    #[inline]
    fn admit(&self, n: u32) -> Result<bool, AcquireError> {
        let limit = self.current_limit();
        let now = self.clock.now_nanos();
        self.admit_at(n, limit, now, Some(&self.clock))
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        validate_limit(limit, MAX_LIMIT)?;
        // Relaxed: a self-contained config value; a racing decision may use either limit.
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    fn limit(&self) -> u64 {
        self.current_limit()
    }
}

#[cfg(not(floodgate_loom))]
impl<C: Clock> super::Sweep for SlidingWindowLimiter<C> {
    fn sweep(&self) {
        SlidingWindowLimiter::sweep(self);
    }
}

#[cfg(test)]
mod hunt;
#[cfg(test)]
mod tests;
