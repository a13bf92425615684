//! Rolling counter: event counts over the last window, in a ring of tagged cells, for one or more
//! series (requests and failures, for an error rate).
//!
//! Each slot packs `(round, count)` in one `AtomicU64` ([`pack_counter_cell`]). Adding is one
//! `fetch_add` on the current cell; its result tells whether the slot held the current round:
//! * yes: done (and if the cell was empty, this caller is the first of a new cell: it runs the
//!   sweep inline, pre-stamping the future cells of every series);
//! * an older round (the sweep has not stamped this cell yet): the add landed in a stale cell that
//!   every reader ignores; the caller raises `head` to its cell, then resets the slot to
//!   `(round, n)` by compare-exchange. A reset discards whatever the stale word held, including
//!   other callers' stray adds, and each such caller sees the round change and adds again, so no
//!   count is lost or counted twice;
//! * a newer round (this thread's clock read lags a thread that is a whole ring ahead): the count
//!   stays in that newer cell, as if it happened then.
//!
//! Telling a newer round from an older one rests on one rule: a round is written into a slot (a
//! sweep's stamp of cell `i`, or a reset for cell `i`) only after `head` was raised to at least
//! `i − future`, and the write is a release. A caller that finds another round in its slot
//! (acquire) and then reads `head` sees that raise, so the candidates newer than its cell are
//! those up to `head + future`; as the ring has `cells + future` slots, a slot can only hold a
//! newer cell than the caller's when `head` is past the caller's cell. A reset raising `head`
//! before its write (never after) is what keeps a lagging caller from taking the round of a reset
//! a ring ahead for a stale one and resetting it away (a lost count); by the same rule a sweep
//! never stamps over a newer round: it re-reads `head` after reading the slot.
//!
//! A reader sums the cells whose round matches their index in the window and ignores the rest,
//! so a late or missing sweep costs a reset, never a wrong sum.

mod protocol;

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algorithms::ring::RingGeometry;
use crate::clock::{Clock, QuantaClock};
use crate::decision::ConfigError;
use crate::sync::{AtomicU64, Ordering};

/// Bits of a counter cell's round tag.
pub const COUNTER_ROUND_BITS: u32 = 28;
/// Bits of a counter cell's count field.
pub const COUNTER_COUNT_BITS: u32 = 36;
const COUNTER_ROUND_MASK: u64 = (1 << COUNTER_ROUND_BITS) - 1;
const COUNTER_COUNT_MASK: u64 = (1 << COUNTER_COUNT_BITS) - 1;
/// A cell's count saturates here (2^35 − 1, 34 billion). The field holds up to 2^36 − 1; the upper
/// half is headroom for adds in flight before a saturating caller clamps the cell back.
pub const MAX_CELL_COUNT: u64 = (1 << 35) - 1;
/// Adds up to this size take the one-`fetch_add` path; larger ones use compare-exchange. With
/// the headroom above, the count cannot spill into the round unless 2^19 threads are between
/// their `fetch_add` and their clamp at the same moment.
pub const FAST_ADD_MAX: u64 = 1 << 16;

/// Packs a counter cell word.
///
/// ```text
///  63                    36 35                          0
/// ┌────────────────────────┬─────────────────────────────┐
/// │ round: 28 bits         │ count: 36 bits              │
/// └────────────────────────┴─────────────────────────────┘
/// ```
/// `round` is the cell index divided by the ring's slot count, modulo 2^28. A slot left
/// untouched for exactly a multiple of `2^28 × slots` cells (200 days for 1 ms cells and a ring of
/// 64) reads as current and lends its old count to one cell's sum.
///
/// ```
/// use floodgate::stats::rolling::{pack_counter_cell, unpack_counter_cell};
/// assert_eq!(unpack_counter_cell(pack_counter_cell((1 << 28) + 5, 9)), (5, 9));
/// ```
#[inline]
pub const fn pack_counter_cell(round: u64, count: u64) -> u64 {
    debug_assert!(count <= COUNTER_COUNT_MASK);
    ((round & COUNTER_ROUND_MASK) << COUNTER_COUNT_BITS) | count
}

/// Unpacks a counter cell word into `(round, count)`.
///
/// ```
/// use floodgate::stats::rolling::unpack_counter_cell;
/// assert_eq!(unpack_counter_cell(u64::MAX), ((1 << 28) - 1, (1 << 36) - 1));
/// ```
#[inline]
pub const fn unpack_counter_cell(word: u64) -> (u64, u64) {
    (word >> COUNTER_COUNT_BITS, word & COUNTER_COUNT_MASK)
}

/// A series index beyond the counter's series.
///
/// ```
/// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 10, 2).unwrap();
/// let err = c.add(2, 1).unwrap_err();
/// assert_eq!((err.series, err.series_count), (2, 2));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSuchSeries {
    /// The series asked for.
    pub series: usize,
    /// How many series the counter has.
    pub series_count: usize,
}

impl fmt::Display for NoSuchSeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "series {} does not exist: the counter has {} series",
            self.series, self.series_count
        )
    }
}

impl std::error::Error for NoSuchSeries {}

/// Counts of events over the last window, per series, without locks.
///
/// The sum is over the `cells` cells that end with the current one (the window, with its oldest
/// cell partly expired); adding is one `fetch_add` in the common case; see the
/// [module docs](self).
///
/// ```
/// use floodgate::{ManualClock, stats::RollingCounter};
/// use std::time::Duration;
/// const REQUESTS: usize = 0;
/// const FAILURES: usize = 1;
/// let clock = ManualClock::new();
/// let counter = RollingCounter::with_clock(Duration::from_secs(10), 10, 2, clock.clone())?;
/// for _ in 0..8 { counter.add(REQUESTS, 1)?; }
/// counter.add(FAILURES, 2)?;
/// assert_eq!(counter.ratio(FAILURES, REQUESTS)?, Some(0.25));
/// clock.advance(Duration::from_secs(10)); // all of it leaves the window
/// assert_eq!(counter.sum(REQUESTS)?, 0);
/// assert_eq!(counter.ratio(FAILURES, REQUESTS)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RollingCounter<C = QuantaClock> {
    geometry: RingGeometry,
    series: usize,
    /// The newest cell a sweep or a reset has claimed (raised before either writes its rounds).
    head: CachePadded<AtomicU64>,
    /// `series × slots` cells, series-major.
    slots: Box<[AtomicU64]>,
    clock: C,
}

impl<C> fmt::Debug for RollingCounter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RollingCounter")
            .field("window", &self.window())
            .field("cells", &self.geometry.cells)
            .field("future_cells", &self.geometry.future)
            .field("series", &self.series)
            .finish_non_exhaustive()
    }
}

impl<C> RollingCounter<C> {
    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = floodgate::stats::RollingCounter::new(Duration::from_secs(10), 5, 1)?;
    /// assert_eq!(c.window(), Duration::from_secs(10));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.geometry.window_nanos())
    }

    /// Cells per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = floodgate::stats::RollingCounter::new(Duration::from_secs(10), 5, 1)?;
    /// assert_eq!(c.cells(), 5);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn cells(&self) -> u32 {
        self.geometry.cells as u32
    }

    /// Future cells the sweep pre-stamps.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = floodgate::stats::RollingCounter::new(Duration::from_secs(10), 8, 1)?;
    /// assert_eq!(c.future_cells(), 2); // default: a quarter of the cells, at least one
    /// assert_eq!(c.with_future_cells(5)?.future_cells(), 5);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn future_cells(&self) -> u32 {
        self.geometry.future as u32
    }

    /// How many series the counter keeps.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = floodgate::stats::RollingCounter::new(Duration::from_secs(10), 5, 3)?;
    /// assert_eq!(c.series_count(), 3);
    /// assert!(c.add(3, 1).is_err()); // series are 0..3
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn series_count(&self) -> usize {
        self.series
    }

    /// Bytes this counter occupies: the struct plus 8 per slot per series.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(60), 60, 2).unwrap();
    /// assert!(c.memory_bytes() >= 2 * 8 * 75);
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.slots.len() * std::mem::size_of::<AtomicU64>()
    }
}

impl RollingCounter<QuantaClock> {
    /// A counter of `series` series over `window`, cut into `cells` cells, on the default clock,
    /// with `max(1, cells / 4)` future cells.
    ///
    /// # Errors
    /// [`ConfigError::ZeroPeriod`], [`ConfigError::DurationOutOfRange`], and
    /// [`ConfigError::Indivisible`] for a window that does not divide into whole-nanosecond
    /// cells, [`ConfigError::TooLarge`] for more than 65,536 slots, and [`ConfigError::Invalid`]
    /// for zero cells or series or more than 2^24 words in all.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(60), 6, 1).unwrap();
    /// assert_eq!(c.series_count(), 1);
    /// ```
    pub fn new(window: Duration, cells: u32, series: usize) -> Result<Self, ConfigError> {
        Self::with_clock(window, cells, series, QuantaClock::new())
    }
}

impl<C: Clock> RollingCounter<C> {
    /// As [`RollingCounter::new`], on `clock`.
    ///
    /// # Errors
    /// As [`RollingCounter::new`].
    ///
    /// ```
    /// let clock = floodgate::ManualClock::new();
    /// assert!(floodgate::stats::RollingCounter::with_clock(std::time::Duration::from_secs(1), 4, 0, clock).is_err());
    /// ```
    pub fn with_clock(
        window: Duration,
        cells: u32,
        series: usize,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::build(window, cells, (cells / 4).max(1), series, clock)
    }

    /// The same counter (emptied) with `future` pre-stamped cells.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero future cells or too many slots.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 1).unwrap();
    /// assert_eq!(c.with_future_cells(8).unwrap().future_cells(), 8);
    /// ```
    pub fn with_future_cells(self, future: u32) -> Result<Self, ConfigError> {
        let cells = self.geometry.cells as u32;
        Self::build(self.window(), cells, future, self.series, self.clock)
    }

    fn build(
        window: Duration,
        cells: u32,
        future: u32,
        series: usize,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let geometry = RingGeometry::new(window, cells, future)?;
        if series == 0 {
            return Err(ConfigError::Invalid {
                what: "series",
                why: "a counter needs at least one series",
            });
        }
        let words = (geometry.slots as usize)
            .checked_mul(series)
            .filter(|w| *w <= 1 << 24)
            .ok_or(ConfigError::Invalid {
                what: "series",
                why: "series × (cells + future cells) must not exceed 2^24 words",
            })?;
        Ok(RollingCounter {
            geometry,
            series,
            head: CachePadded::new(AtomicU64::new(0)),
            slots: (0..words).map(|_| AtomicU64::new(0)).collect(),
            clock,
        })
    }

    /// Adds `n` events to `series` now.
    ///
    /// # Errors
    /// [`NoSuchSeries`] for a series index out of range.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 1).unwrap();
    /// c.add(0, 3).unwrap();
    /// assert_eq!(c.sum(0).unwrap(), 3);
    /// ```
    #[inline]
    pub fn add(&self, series: usize, n: u32) -> Result<(), NoSuchSeries> {
        self.add_at(series, n, self.clock.now_nanos())
    }

    /// [`add`](RollingCounter::add) at a time the caller already read.
    ///
    /// # Errors
    /// As [`add`](RollingCounter::add).
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(2), 2, 1).unwrap();
    /// c.add_at(0, 1, 0).unwrap();
    /// c.add_at(0, 1, 1_000_000_000).unwrap();
    /// assert_eq!(c.sum_at(0, 1_000_000_000).unwrap(), 2);
    /// assert_eq!(c.sum_at(0, 2_000_000_000).unwrap(), 1);
    /// ```
    pub fn add_at(&self, series: usize, n: u32, now: u64) -> Result<(), NoSuchSeries> {
        self.check_series(series)?;
        if n > 0 {
            self.add_in(series, u64::from(n), self.geometry.cell_of(now));
        }
        Ok(())
    }

    /// The events of `series` in the window ending now.
    ///
    /// # Errors
    /// [`NoSuchSeries`] for a series index out of range.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 1).unwrap();
    /// assert_eq!(c.sum(0).unwrap(), 0);
    /// ```
    pub fn sum(&self, series: usize) -> Result<u64, NoSuchSeries> {
        self.sum_at(series, self.clock.now_nanos())
    }

    /// [`sum`](RollingCounter::sum) for the window ending with the cell of `now`. Writes nothing.
    ///
    /// # Errors
    /// As [`sum`](RollingCounter::sum).
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 1).unwrap();
    /// c.add_at(0, 5, 0).unwrap();
    /// assert_eq!(c.sum_at(0, 999_999_999).unwrap(), 5);
    /// assert_eq!(c.sum_at(0, 1_000_000_000).unwrap(), 0);
    /// ```
    pub fn sum_at(&self, series: usize, now: u64) -> Result<u64, NoSuchSeries> {
        self.check_series(series)?;
        let cell = self.geometry.cell_of(now);
        Ok((self.geometry.window_start(cell)..=cell)
            .map(|index| {
                let (slot, round) = self.place(series, index);
                // Relaxed: a statistic; one word read on its own, no other memory hangs off it.
                let (word_round, count) = unpack_counter_cell(slot.load(Ordering::Relaxed));
                if word_round == round { count } else { 0 }
            })
            .sum())
    }

    /// `sum(numerator) / sum(denominator)` now (e.g. failures over requests), or `None` when the
    /// denominator is zero.
    ///
    /// # Errors
    /// [`NoSuchSeries`] for a series index out of range.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 2).unwrap();
    /// c.add(0, 4).unwrap();
    /// c.add(1, 1).unwrap();
    /// assert_eq!(c.ratio(1, 0).unwrap(), Some(0.25));
    /// ```
    pub fn ratio(&self, numerator: usize, denominator: usize) -> Result<Option<f64>, NoSuchSeries> {
        let now = self.clock.now_nanos();
        let above = self.sum_at(numerator, now)?;
        let below = self.sum_at(denominator, now)?;
        Ok((below > 0).then(|| above as f64 / below as f64))
    }

    /// Pre-stamps the current and future cells of every series, so that adds find their cell
    /// ready. Adders do it inline when it has not been done: calling this is only ever an
    /// optimisation; see [`Maintenance`](crate::Maintenance) to run it from a thread.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 1).unwrap();
    /// c.sweep();
    /// ```
    pub fn sweep(&self) {
        self.sweep_at(self.clock.now_nanos());
    }

    /// [`sweep`](RollingCounter::sweep) as of `now`. A `now` behind the newest swept cell does
    /// nothing.
    ///
    /// ```
    /// let c = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 4, 1).unwrap();
    /// c.sweep_at(9_000_000_000);
    /// c.sweep_at(0);
    /// ```
    pub fn sweep_at(&self, now: u64) {
        self.sweep_cell(self.geometry.cell_of(now));
    }

    fn check_series(&self, series: usize) -> Result<(), NoSuchSeries> {
        if series < self.series {
            Ok(())
        } else {
            Err(NoSuchSeries {
                series,
                series_count: self.series,
            })
        }
    }

    /// The slot of cell `index` in `series`, and the round tag it has there.
    #[inline]
    fn place(&self, series: usize, index: u64) -> (&AtomicU64, u64) {
        let (slot, round) = self.geometry.place(index);
        let slot = &self.slots[series * self.geometry.slots as usize + slot];
        (slot, round & COUNTER_ROUND_MASK)
    }
}

#[cfg(not(floodgate_loom))]
impl<C: Clock> crate::algorithms::Sweep for RollingCounter<C> {
    fn sweep(&self) {
        RollingCounter::sweep(self);
    }
}
