//! A sliding window in one packed word: a small ring of cell counts plus the newest cell's tag,
//! for keyed limiting and anywhere one `AtomicU64` per limiter is the budget.

use std::time::Duration;

use super::ring::until_start;
use crate::clock::MAX_CLOCK_LAG_NANOS;
use crate::decision::AcquireError;
use crate::decision::{ConfigError, Decision, check_permits, validate_limit};
use crate::limiter::{Algorithm, Step};
use crate::sync::{AtomicU32, Ordering};

/// Sliding window over `cells` cells (2 to 8) in one `u64`, run by
/// [`AtomicLimiter`](crate::AtomicLimiter): at most `limit` permits in any `cells` consecutive
/// cells aligned to the clock, exactly (the word is decided and replaced by one compare-exchange),
/// with the same unaligned-span bound as [`SlidingWindow`](super::SlidingWindow).
///
/// # Layout
/// With `b = ⌊32 / cells⌋` bits per cell and `T = 64 − cells·b ≥ 32` tag bits:
/// ```text
///  63            cells·b   cells·b−1                              0
/// ┌──────────────────────┬──────────────┬─────┬──────────┬──────────┐
/// │ tag: T bits          │ cell cells−1 │ ... │ cell 1   │ cell 0   │
/// └──────────────────────┴──────────────┴─────┴──────────┴──────────┘
/// ```
/// `tag` is the newest cell's index (`now / cell`) modulo 2^T; cell `j` counts the permits taken
/// `j` cells before it. Moving to a newer cell shifts the counts up (the oldest fall off the top);
/// a count never exceeds the limit, which is at most `2^b − 1`:
///
/// | cells | bits per cell | tag bits | largest limit |
/// |------:|--------------:|---------:|--------------:|
/// | 2     | 16            | 32       | 65,535        |
/// | 3     | 10            | 34       | 1,023         |
/// | 4     | 8             | 32       | 255           |
/// | 5     | 6             | 34       | 63            |
/// | 6     | 5             | 34       | 31            |
/// | 7, 8  | 4             | 36, 32   | 15            |
///
/// A state whose counts are all zero is fresh whatever its tag (so `0` is fresh). A tag ahead of
/// the caller's cell whose cell starts at most [`MAX_CLOCK_LAG_NANOS`] after the caller's read
/// was written by a thread whose clock read later: the request is decided in that newer cell,
/// never moving the state back. A tag further ahead — judged only on a clock read taken after the word was loaded, so a
/// thread preempted between its clock read and its compare-exchange can never mistake newer
/// state for it — is a leaping clock's: its counts are folded into the caller's cell (no
/// admission forgotten; they leave within one window) and the folded word is written. A tag
/// behind is aged: after a whole window all its counts have dropped, so a request after any
/// idle time is decided afresh. The tag wraps after 2^T cells (at least 2^32: 136 years for 1 s
/// cells, 49 days for 1 ms cells): a state idle for within the lag horizon of a multiple of that
/// reads as recent, and its old counts hold for at most that horizon plus one window.
///
/// ```
/// use floodgate::{AtomicLimiter, Limiter, ManualClock, PackedSlidingWindow};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// // 2 per minute, in 4 cells of 15 s.
/// let limiter = AtomicLimiter::with_clock(
///     PackedSlidingWindow::new(2, Duration::from_secs(60), 4)?,
///     clock.clone(),
/// );
/// clock.set(59_000_000_000);
/// assert!(limiter.try_acquire(2)?.is_allowed());
/// clock.set(60_000_000_000); // a fixed window would start afresh here
/// assert!(!limiter.try_acquire(1)?.is_allowed());
/// clock.set(105_000_000_000); // the 45–60 s cell has left the window
/// assert!(limiter.try_acquire(2)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PackedSlidingWindow {
    limit: AtomicU32,
    cell_nanos: u64,
    cells: u32,
    count_bits: u32,
    /// How long after the caller's read a stored newest cell may start and still be a later
    /// clock read's (lag), in nanoseconds: [`MAX_CLOCK_LAG_NANOS`] (a read at most that far
    /// ahead lies in its cell), within half the tag space. Starting later (on a clock read newer
    /// than the word, which the engine makes sure of) is a leaping clock's: its counts are
    /// folded into the caller's cell. (Counted in cells as max(one window, ⌈H / cell⌉ + 1), a
    /// leap of up to one whole window was kept, freezing the limiter for up to two windows.)
    max_lead: u64,
}

/// Copies the configuration in force (the limit as last set).
///
/// ```
/// use floodgate::{Algorithm, PackedSlidingWindow};
/// let w = PackedSlidingWindow::new(100, std::time::Duration::from_secs(60), 4)?;
/// w.set_limit(7, 0)?;
/// assert_eq!(w.clone().limit(), 7);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
impl Clone for PackedSlidingWindow {
    fn clone(&self) -> Self {
        PackedSlidingWindow {
            // Relaxed: see set_limit.
            limit: AtomicU32::new(self.limit.load(Ordering::Relaxed)),
            cell_nanos: self.cell_nanos,
            cells: self.cells,
            count_bits: self.count_bits,
            max_lead: self.max_lead,
        }
    }
}

/// A state word read at a given cell: the newest cell's index and tag, and the counts shifted so
/// that cell 0 is that newest cell.
struct View {
    newest: u64,
    tag: u64,
    counts: u64,
    /// The stored tag was a leaping clock's: its counts were folded into the current cell.
    leap: bool,
}

impl PackedSlidingWindow {
    /// `limit` permits per `window`, cut into `cells` cells aligned to the clock.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::LimitTooLarge`] above the table's limit for
    /// `cells`, [`ConfigError::ZeroPeriod`], [`ConfigError::DurationOutOfRange`], and
    /// [`ConfigError::Invalid`] for `cells` outside 2..=8, [`ConfigError::Indivisible`] for a
    /// window that does not divide into whole-nanosecond cells.
    ///
    /// ```
    /// use floodgate::PackedSlidingWindow;
    /// use std::time::Duration;
    /// assert!(PackedSlidingWindow::new(255, Duration::from_secs(1), 4).is_ok());
    /// assert!(PackedSlidingWindow::new(256, Duration::from_secs(1), 4).is_err());
    /// ```
    pub fn new(limit: u32, window: Duration, cells: u32) -> Result<Self, ConfigError> {
        let Some(max) = Self::max_limit(cells) else {
            return Err(ConfigError::Invalid {
                what: "cells",
                why: "a packed sliding window has 2 to 8 cells",
            });
        };
        let window_nanos = crate::decision::window_nanos("packed sliding window", window)?;
        if window_nanos % u64::from(cells) != 0 {
            return Err(ConfigError::Indivisible { window, cells });
        }
        validate_limit(limit, max)?;
        let cell_nanos = window_nanos / u64::from(cells);
        let count_bits = 32 / cells;
        Ok(PackedSlidingWindow {
            limit: AtomicU32::new(limit),
            cell_nanos,
            cells,
            count_bits,
            max_lead: MAX_CLOCK_LAG_NANOS,
        })
    }

    /// The largest limit a window of `cells` cells can hold, or `None` outside 2..=8.
    ///
    /// ```
    /// assert_eq!(floodgate::PackedSlidingWindow::max_limit(2), Some(65_535));
    /// assert_eq!(floodgate::PackedSlidingWindow::max_limit(9), None);
    /// ```
    pub const fn max_limit(cells: u32) -> Option<u64> {
        if cells < 2 || cells > 8 {
            None
        } else {
            Some((1 << (32 / cells)) - 1)
        }
    }

    /// The window length.
    ///
    /// ```
    /// use floodgate::PackedSlidingWindow;
    /// use std::time::Duration;
    /// let w = PackedSlidingWindow::new(100, Duration::from_secs(60), 4)?;
    /// assert_eq!(w.window(), Duration::from_secs(60));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.cell_nanos * u64::from(self.cells))
    }

    /// Cells per window.
    ///
    /// ```
    /// use floodgate::PackedSlidingWindow;
    /// use std::time::Duration;
    /// let w = PackedSlidingWindow::new(100, Duration::from_secs(60), 4)?;
    /// assert_eq!(w.cells(), 4);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn cells(&self) -> u32 {
        self.cells
    }

    fn counts_bits(&self) -> u32 {
        self.cells * self.count_bits
    }

    fn tag_mask(&self) -> u64 {
        u64::MAX >> self.counts_bits()
    }

    fn count(&self, counts: u64, age: u32) -> u64 {
        (counts >> (age * self.count_bits)) & ((1 << self.count_bits) - 1)
    }

    /// The state read at cell `index`, `into` nanoseconds into it (the read is
    /// `index × cell + into`).
    fn view(&self, state: u64, index: u64, into: u64) -> View {
        let counts_bits = self.counts_bits();
        let counts = state & ((1 << counts_bits) - 1);
        let tag = state >> counts_bits;
        let tag_mask = self.tag_mask();
        let current = index & tag_mask;
        if counts == 0 {
            return View {
                newest: index,
                tag: current,
                counts: 0,
                leap: false,
            };
        }
        let cells = u64::from(self.cells);
        let ahead = tag.wrapping_sub(current) & tag_mask;
        // The stored newest cell starts `ahead × cell − into` after the read (`ahead ≥ 1`).
        let lagging = |ahead: u64| ahead.saturating_mul(self.cell_nanos) - into <= self.max_lead;
        if ahead != 0 && ahead <= tag_mask >> 1 && lagging(ahead) {
            // Written by a thread whose clock read later (within the lag horizon): decide in
            // that newer cell.
            return View {
                newest: index.saturating_add(ahead),
                tag,
                counts,
                leap: false,
            };
        }
        if ahead != 0 && ahead <= tag_mask >> 1 {
            // Further ahead than the lag horizon: a leaping clock's (or a state idle for about
            // 2^T cells whose tag wrapped). Its counts are kept, as the current cell's and the
            // ones before it: no admission is forgotten, and they leave within one window.
            return View {
                newest: index,
                tag: current,
                counts,
                leap: true,
            };
        }
        // The same cell, or `behind` cells old: shift the counts up, dropping the oldest.
        let behind = current.wrapping_sub(tag) & tag_mask;
        let counts = if behind >= cells {
            0
        } else {
            (counts << (behind as u32 * self.count_bits)) & ((1 << counts_bits) - 1)
        };
        View {
            newest: index,
            tag: current,
            counts,
            leap: false,
        }
    }
}

impl Algorithm for PackedSlidingWindow {
    #[inline]
    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        check_permits(n, self.limit())
    }

    fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        let limit = self.limit();
        let n = u64::from(n);
        let View {
            newest,
            tag,
            counts,
            leap,
        } = self.view(state, now / self.cell_nanos, now % self.cell_nanos);
        let used: u64 = (0..self.cells).map(|age| self.count(counts, age)).sum();
        let cells = u64::from(self.cells);
        if used + n <= limit {
            // Cell 0 stays within the limit, so the add never carries into cell 1.
            let next = (tag << self.counts_bits()) | (counts + n);
            let reset = until_start(newest.saturating_add(cells), self.cell_nanos, now);
            let step = Step::allow(next, Decision::allow(limit, limit - used - n, reset));
            return if leap { step.after_leap() } else { step };
        }
        // Cell of age j leaves the window when the clock reaches cell `newest + cells − j`.
        let need = used + n - limit;
        let mut freed = 0;
        let mut retry_cell = newest.saturating_add(cells);
        for age in (0..self.cells).rev() {
            freed += self.count(counts, age);
            if freed >= need {
                retry_cell = newest.saturating_add(cells - u64::from(age));
                break;
            }
        }
        let reset = (0..self.cells)
            .find(|&age| self.count(counts, age) > 0)
            .map_or(0, |age| {
                until_start(
                    newest.saturating_add(cells - u64::from(age)),
                    self.cell_nanos,
                    now,
                )
            });
        let retry = until_start(retry_cell, self.cell_nanos, now);
        let denial = Decision::deny(limit, limit.saturating_sub(used), retry, reset);
        if leap {
            // The folded word is written even on a denial, so every later caller sees the same
            // cells leave the window (one write per leap).
            Step::repair((tag << self.counts_bits()) | counts, denial).after_leap()
        } else {
            Step::deny(denial)
        }
    }

    fn is_idle(&self, state: u64, now: u64) -> bool {
        self.view(state, now / self.cell_nanos, now % self.cell_nanos)
            .counts
            == 0
    }

    fn set_limit(&self, limit: u32, _now: u64) -> Result<(), ConfigError> {
        validate_limit(limit, (1 << self.count_bits) - 1)?;
        // Relaxed: a self-contained config value; a racing decision may use either limit.
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    fn limit(&self) -> u64 {
        // Relaxed: see set_limit.
        u64::from(self.limit.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(limit: u32, cells: u32) -> PackedSlidingWindow {
        PackedSlidingWindow::new(limit, Duration::from_nanos(u64::from(cells) * 10), cells).unwrap()
    }

    #[test]
    fn layout_keeps_counts_below_the_tag() {
        for cells in 2..=8 {
            let w = window(PackedSlidingWindow::max_limit(cells).unwrap() as u32, cells);
            assert!(64 - w.counts_bits() >= 32, "{cells} cells");
            let full = w.decide(0, 5, w.limit() as u32).next.unwrap();
            assert_eq!(full >> w.counts_bits(), 0, "tag of cell 0");
            assert_eq!(w.count(full, 0), w.limit());
            // A cell later the full count moves to age 1 and the tag to 1.
            let later = w.decide(full, 15, 1);
            assert!(!later.decision.is_allowed());
            let view = w.view(full, 1, 0);
            assert_eq!(
                (view.newest, view.tag, w.count(view.counts, 1)),
                (1, 1, w.limit())
            );
        }
    }

    #[test]
    fn ahead_state_is_kept() {
        let w = window(3, 3);
        let state = w.decide(0, 100, 2).next.unwrap(); // cell 10
        let lagging = w.decide(state, 85, 1); // cell 8: decided in cell 10
        assert!(lagging.decision.is_allowed());
        assert_eq!(w.view(lagging.next.unwrap(), 10, 0).counts, 3);
        assert!(!w.is_idle(lagging.next.unwrap(), 85));
        assert!(w.is_idle(lagging.next.unwrap(), 130));
    }

    #[test]
    fn a_state_beyond_the_lag_horizon_is_folded_not_forgotten() {
        let w = window(3, 3); // 10 ns cells
        // A cell starting `H` after the read: the most a lagging read sees.
        let cells_ahead = w.max_lead / 10;
        assert_eq!(cells_ahead, MAX_CLOCK_LAG_NANOS / 10);
        let at = 2 * cells_ahead; // the writer's cell
        let state = w.decide(0, at * 10, 3).next.unwrap(); // full
        // Ahead by exactly the horizon: a lagging clock, decided in the writer's cell.
        let lagging = w.decide(state, (at - cells_ahead) * 10, 1);
        assert!(!lagging.decision.is_allowed() && !lagging.is_after_leap());
        assert_eq!(lagging.next, None);
        // One cell further: a leaping clock's state. Its counts are folded into this cell and
        // written, even though the request is denied.
        let reader = at - cells_ahead - 1;
        let folded = w.decide(state, reader * 10, 1);
        assert!(folded.is_after_leap() && !folded.decision.is_allowed());
        let repaired = folded.next.unwrap();
        assert_eq!(w.view(repaired, reader, 0).tag, reader & w.tag_mask());
        assert!(!w.is_idle(state, reader * 10));
        // The folded word is an ordinary state: it leaves the window one window later.
        assert!(
            !w.decide(repaired, (reader + 2) * 10, 1)
                .decision
                .is_allowed()
        );
        let later = w.decide(repaired, (reader + 3) * 10, 3);
        assert!(later.decision.is_allowed() && !later.is_after_leap());
    }
}
