//! Geometry shared by the ring-based window structures ([`RollingCounter`](crate::stats::RollingCounter)
//! and [`SlidingWindow`](super::SlidingWindow)): a window of `cells` equal cells, kept in a ring of
//! `cells + future` slots.
//!
//! Time is cut into cells of `cell_nanos` aligned to the clock's timeline: cell index
//! `i = now / cell_nanos` (a full `u64`, it never wraps). Index `i` lives in slot `i % slots`, in
//! round `i / slots`; a slot word stores the round (modulo the width of its tag field), so a reader
//! can tell whether the slot holds index `i` or an older (or, for a lagging thread, newer) index
//! that maps to the same slot.

use std::time::Duration;

use crate::decision::ConfigError;

/// The most slots a ring may have (`cells + future`): 65,536, so a ring is at most 512 KiB per
/// 8-byte word its slots hold (the sliding window's hold two: 1 MiB).
pub const MAX_SLOTS: usize = 1 << 16;

/// Window, cell and ring sizes, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingGeometry {
    /// Length of one cell in nanoseconds (`window / cells`, exactly).
    pub(crate) cell_nanos: u64,
    /// Cells in one window.
    pub(crate) cells: u64,
    /// Future cells the sweep pre-stamps ahead of the current one.
    pub(crate) future: u64,
    /// Slots in the ring: `cells + future`.
    pub(crate) slots: u64,
}

impl RingGeometry {
    /// Validates a window of `cells` cells with a buffer of `future` pre-stamped cells.
    pub(crate) fn new(window: Duration, cells: u32, future: u32) -> Result<Self, ConfigError> {
        let window_nanos = crate::decision::window_nanos("window", window)?;
        if cells == 0 {
            return Err(ConfigError::Invalid {
                what: "cells",
                why: "a window needs at least one cell",
            });
        }
        if future == 0 {
            return Err(ConfigError::Invalid {
                what: "future cells",
                why: "the ring needs at least one future cell for the sweep to pre-stamp",
            });
        }
        if window_nanos % u64::from(cells) != 0 {
            return Err(ConfigError::Indivisible { window, cells });
        }
        let slots = u64::from(cells) + u64::from(future);
        if slots > MAX_SLOTS as u64 {
            return Err(ConfigError::TooLarge {
                what: "cells + future cells",
                value: slots,
                max: MAX_SLOTS as u64,
            });
        }
        Ok(RingGeometry {
            cell_nanos: window_nanos / u64::from(cells),
            cells: u64::from(cells),
            future: u64::from(future),
            slots,
        })
    }

    /// The window length in nanoseconds.
    pub(crate) fn window_nanos(&self) -> u64 {
        self.cell_nanos * self.cells
    }

    /// The cell index of a time.
    #[inline]
    pub(crate) fn cell_of(&self, now: u64) -> u64 {
        now / self.cell_nanos
    }

    /// The round of index `i` (unreduced; the caller masks it to its tag width).
    #[inline]
    pub(crate) fn round_of(&self, index: u64) -> u64 {
        index / self.slots
    }

    /// The slot cell `index` lives in (`index % slots`) and its round (`index / slots`, unreduced),
    /// with one division.
    #[inline]
    pub(crate) fn place(&self, index: u64) -> (usize, u64) {
        let round = index / self.slots;
        // The remainder is below `slots <= MAX_SLOTS`, so it fits a usize.
        ((index - round * self.slots) as usize, round)
    }

    /// Start of cell `index` in nanoseconds, saturating at `u64::MAX`.
    #[inline]
    pub(crate) fn start_of(&self, index: u64) -> u64 {
        index.saturating_mul(self.cell_nanos)
    }

    /// Nanoseconds from `now` until cell `index` starts (0 if it has), exact also for a cell
    /// that starts past the end of the `u64` timeline (a wait no clock read can see end, which
    /// a blocking call then reports as `PastEndOfTime`), saturating at `u64::MAX`.
    #[inline(always)]
    pub(crate) fn until_start(&self, index: u64, now: u64) -> u64 {
        until_start(index, self.cell_nanos, now)
    }

    /// The first cell index of the window that ends with cell `index`.
    #[inline]
    pub(crate) fn window_start(&self, index: u64) -> u64 {
        index.saturating_sub(self.cells - 1)
    }
}

/// Nanoseconds from `now` until cell `index` of `cell_nanos` starts (0 if it has), computed
/// past the end of the `u64` timeline, saturating at `u64::MAX`.
#[inline(always)]
pub(crate) fn until_start(index: u64, cell_nanos: u64, now: u64) -> u64 {
    match index.checked_mul(cell_nanos) {
        Some(start) => start.saturating_sub(now),
        None => until_start_past_the_end(index, cell_nanos, now),
    }
}

/// [`until_start`] of a cell that starts past the end of the `u64` timeline, in `u128`, off the
/// common path: a denial computes two waits, and in `u128` on every call they cost 11
/// instructions more a denial (callgrind, `instructions sliding-window-60 deny`: 103; 94 so).
#[cold]
fn until_start_past_the_end(index: u64, cell_nanos: u64, now: u64) -> u64 {
    let start = u128::from(index) * u128::from(cell_nanos);
    u64::try_from(start.saturating_sub(u128::from(now))).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        let s = Duration::from_secs(1);
        assert_eq!(
            RingGeometry::new(Duration::ZERO, 1, 1),
            Err(ConfigError::ZeroPeriod)
        );
        assert!(RingGeometry::new(s, 0, 1).is_err());
        assert!(RingGeometry::new(s, 1, 0).is_err());
        assert!(RingGeometry::new(Duration::from_nanos(10), 3, 1).is_err());
        assert!(RingGeometry::new(s, 60_000, 10_000).is_err());
        assert!(RingGeometry::new(Duration::MAX, 1, 1).is_err());
        let g = RingGeometry::new(Duration::from_secs(60), 6, 2).unwrap();
        assert_eq!(
            (g.cell_nanos, g.cells, g.future, g.slots),
            (10_000_000_000, 6, 2, 8)
        );
        assert_eq!(g.window_nanos(), 60_000_000_000);
    }

    #[test]
    fn maps_indices_to_slots_and_rounds() {
        let g = RingGeometry::new(Duration::from_nanos(30), 3, 2).unwrap();
        assert_eq!(g.cell_of(29), 2);
        assert_eq!((g.place(7), g.round_of(7)), ((2, 1), 1));
        assert_eq!(g.place(u64::MAX), ((u64::MAX % 5) as usize, u64::MAX / 5));
        assert_eq!(g.window_start(1), 0);
        assert_eq!(g.window_start(7), 5);
        assert_eq!(g.start_of(u64::MAX), u64::MAX);
    }
}
