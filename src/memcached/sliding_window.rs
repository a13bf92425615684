//! The sliding window of cells on memcached: its configuration and the pure decision over the
//! counts one multi-get returned.

use std::time::Duration;

use crate::clock::duration_to_nanos;
use crate::decision::{ConfigError, Decision};

/// Most cells per window (a decision reads every cell, plus one, in one multi-get).
pub const MAX_CELLS: u64 = 1024;

/// Longest relative expiry memcached accepts (30 days); a larger number means a Unix time.
const MAX_RELATIVE_TTL_SECS: u64 = 30 * 24 * 3600;

/// A [`SlidingWindow`](crate::SlidingWindow) as memcached keeps it: at most `limit` permits in
/// any `window`, counted in cells of `precision` (one memcached key per cell, keyed by the
/// caller's clock), with the expiry each cell key gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cells {
    limit: u32,
    cell_nanos: u64,
    cells: u64,
    ttl_secs: u32,
}

impl Cells {
    /// The cells of `config`, with memcached's own checks.
    pub(crate) fn of(config: &crate::SlidingWindow) -> Result<Self, ConfigError> {
        if u64::from(config.cells()) > MAX_CELLS {
            return Err(ConfigError::TooLarge {
                what: "memcached sliding window cells",
                value: u64::from(config.cells()),
                max: MAX_CELLS,
            });
        }
        Self::new(config.limit(), config.window(), config.cell())
    }

    /// `limit` permits per sliding `window`, counted in cells of `precision`.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`]; [`ConfigError::Invalid`] when the
    /// window is not a whole number of cells or there are more than [`MAX_CELLS`] cells;
    /// [`ConfigError::DurationOutOfRange`] when `window + precision` exceeds 30 days less 1 s
    /// (memcached reads a longer expiry as a date).
    pub(crate) fn new(
        limit: u32,
        window: Duration,
        precision: Duration,
    ) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if window.is_zero() || precision.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        // Checked first, in `Duration` arithmetic: no sum or count below can overflow then.
        let lifetime = window.saturating_add(precision);
        let max_lifetime = Duration::from_secs(MAX_RELATIVE_TTL_SECS - 1);
        if lifetime > max_lifetime {
            return Err(ConfigError::DurationOutOfRange {
                what: "memcached window + one cell (a cell key's lifetime)",
                value: lifetime,
                min: Duration::from_nanos(2),
                max: max_lifetime,
            });
        }
        let window_nanos =
            u64::try_from(window.as_nanos()).map_err(|_| ConfigError::DurationOverflow)?;
        let cell_nanos = duration_to_nanos(precision);
        if window_nanos % cell_nanos != 0 {
            return Err(ConfigError::Invalid {
                what: "precision",
                why: "the window must be a whole number of cells",
            });
        }
        let cells = window_nanos / cell_nanos;
        if cells > MAX_CELLS {
            return Err(ConfigError::Invalid {
                what: "precision",
                why: "at most 1024 cells per window",
            });
        }
        // A cell must outlive every read of it: `window + precision` (see the module docs),
        // rounded up to whole seconds, plus one because memcached's clock ticks once a second
        // (an expiry of T seconds can fire after T - 1).
        // `lifetime ≤ 30 days − 1 s` (checked above), so `ttl_secs ≤ 30 days`.
        let ttl_secs = lifetime.as_secs() + u64::from(lifetime.subsec_nanos() > 0) + 1;
        Ok(Cells {
            limit,
            cell_nanos,
            cells,
            // At most 30 days: fits.
            ttl_secs: ttl_secs as u32,
        })
    }

    /// The limit per window.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// The window length.
    pub(crate) fn window(&self) -> Duration {
        Duration::from_nanos(self.cell_nanos * self.cells)
    }

    /// Cells per window.
    #[cfg(test)]
    pub(crate) fn cells(&self) -> u64 {
        self.cells
    }

    /// The expiry set on each cell key, in seconds: `window + precision` rounded up, plus 1.
    pub(crate) fn ttl_secs(&self) -> u32 {
        self.ttl_secs
    }

    /// The cell that holds time `now_nanos` (on the callers' clock).
    pub(crate) fn cell_index(&self, now_nanos: u64) -> u64 {
        now_nanos / self.cell_nanos
    }

    /// The cells a decision in cell `current` reads, oldest first: the window's `cells` cells
    /// ending at `current`, plus `current + 1` (written by callers whose clock runs ahead).
    pub(crate) fn read_cells(&self, current: u64) -> std::ops::RangeInclusive<u64> {
        current.saturating_sub(self.cells - 1)..=current.saturating_add(1)
    }

    /// Nanoseconds from `now` until cell `index` leaves the window (its last moment in the window
    /// is the end of cell `index + cells - 1`).
    fn leaves(&self, index: u64, now: u64) -> u64 {
        let end = (u128::from(index) + u128::from(self.cells)) * u128::from(self.cell_nanos);
        u64::try_from(end.saturating_sub(u128::from(now))).unwrap_or(u64::MAX)
    }

    /// The decision for `n` permits at `now` in cell `current`, given the counts read *after* the
    /// request's own `n` was added to `current`: `(cell index, count)` for every cell of
    /// [`read_cells`](Self::read_cells) found, oldest first.
    ///
    /// * allowed when the sum (the request's own `n` included) is at most the limit: `remaining`
    ///   is `limit - sum`, `reset_after` the time until the newest counted cell leaves the window;
    /// * denied otherwise (the caller then takes its `n` back): `remaining` is what the others
    ///   left, `retry_after` the time until enough of the oldest cells leave for `n` to fit (if no
    ///   one else takes permits meanwhile), `reset_after` until the others' newest cell leaves.
    pub(crate) fn decide(&self, now: u64, current: u64, n: u32, counts: &[(u64, u64)]) -> Decision {
        let limit = u64::from(self.limit);
        let n = u64::from(n);
        let sum = counts.iter().fold(0u64, |s, &(_, c)| s.saturating_add(c));
        if sum <= limit {
            let newest = counts
                .iter()
                .filter(|&&(_, c)| c > 0)
                .map(|&(i, _)| i)
                .max()
                .unwrap_or(current);
            return Decision::allow(limit, limit - sum, self.leaves(newest, now));
        }
        // The counts of everyone else: this request's n comes off its own cell.
        let others = counts.iter().map(|&(index, count)| {
            let own = if index == current { n } else { 0 };
            (index, count.saturating_sub(own))
        });
        let others_sum = sum.saturating_sub(n);
        let needed = others_sum.saturating_add(n).saturating_sub(limit);
        let mut freed = 0u64;
        let mut retry = None;
        let mut reset = 0;
        for (index, count) in others.filter(|&(_, c)| c > 0) {
            freed = freed.saturating_add(count);
            if retry.is_none() && freed >= needed {
                retry = Some(self.leaves(index, now));
            }
            reset = self.leaves(index, now);
        }
        // Counts that moved under us (an eviction): wait for the newest cell.
        let retry = retry.unwrap_or_else(|| self.leaves(current.saturating_add(1), now));
        Decision::deny(limit, limit.saturating_sub(others_sum), retry, reset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn window(limit: u32) -> Cells {
        Cells::new(limit, Duration::from_secs(10), Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn configuration_is_validated() {
        let s = Duration::from_secs;
        assert_eq!(
            Cells::new(0, s(10), s(1)).unwrap_err(),
            ConfigError::ZeroLimit
        );
        assert_eq!(
            Cells::new(5, s(0), s(1)).unwrap_err(),
            ConfigError::ZeroPeriod
        );
        assert_eq!(
            Cells::new(5, s(10), s(0)).unwrap_err(),
            ConfigError::ZeroPeriod
        );
        assert!(Cells::new(5, s(10), s(3)).is_err());
        assert!(Cells::new(5, s(1025), s(1)).is_err());
        assert!(Cells::new(5, s(1024), s(1)).is_ok());
        assert!(Cells::new(5, s(30 * 86_400), s(86_400)).is_err());
        let max = Duration::from_secs(MAX_RELATIVE_TTL_SECS - 1);
        for (window, precision) in [(Duration::MAX, Duration::MAX), (Duration::MAX, s(1))] {
            assert_eq!(
                Cells::new(5, window, precision).unwrap_err(),
                ConfigError::DurationOutOfRange {
                    what: "memcached window + one cell (a cell key's lifetime)",
                    value: Duration::MAX,
                    min: Duration::from_nanos(2),
                    max,
                }
            );
        }
        // The longest lifetime accepted (18 + 1 cells of 136,421 s = 30 days − 1 s): a TTL of
        // exactly 30 days.
        let longest = Cells::new(5, s(18 * 136_421), s(136_421)).unwrap();
        assert_eq!(u64::from(longest.ttl_secs()), MAX_RELATIVE_TTL_SECS);
        assert!(Cells::new(5, s(19 * 136_421), s(136_421)).is_err());
        let w = Cells::new(5, Duration::from_millis(500), Duration::from_millis(250)).unwrap();
        assert_eq!((w.cells(), w.ttl_secs()), (2, 2));
        assert_eq!(window(5).ttl_secs(), 12);
    }

    /// The lifetime error names what the caller configured (`SlidingWindow::new(limit, window,
    /// cells)`: a window and its cells), not the seeds' word "precision", which no public
    /// parameter uses.
    #[test]
    fn a_lifetime_too_long_for_memcached_names_the_window_and_its_cell() {
        let config = crate::SlidingWindow::new(5, Duration::from_secs(31 * 86_400), 31).unwrap();
        assert_eq!(
            Cells::of(&config).unwrap_err(),
            ConfigError::DurationOutOfRange {
                what: "memcached window + one cell (a cell key's lifetime)",
                value: Duration::from_secs(32 * 86_400),
                min: Duration::from_nanos(2),
                max: Duration::from_secs(MAX_RELATIVE_TTL_SECS - 1),
            }
        );
    }

    #[test]
    fn cells_read_are_the_window_plus_one_ahead() {
        let w = window(5);
        assert_eq!(w.read_cells(100), 91..=101);
        assert_eq!(w.read_cells(3), 0..=4);
        assert_eq!(w.cell_index(12 * SEC + 999), 12);
        assert_eq!(w.read_cells(u64::MAX), u64::MAX - 9..=u64::MAX);
    }

    #[test]
    fn allowed_decisions_report_what_is_left_and_when_the_window_empties() {
        let w = window(5);
        let now = 100 * SEC + SEC / 4;
        // 2 permits in cell 95, this request's 1 in cell 100.
        let d = w.decide(now, 100, 1, &[(95, 2), (100, 1)]);
        assert_eq!(d, Decision::allow(5, 2, 110 * SEC - now));
        // A cell ahead (a caller whose clock runs fast) counts and sets the reset.
        let d = w.decide(now, 100, 1, &[(100, 1), (101, 4)]);
        assert_eq!(d, Decision::allow(5, 0, 111 * SEC - now));
    }

    #[test]
    fn denials_wait_for_the_oldest_cells_that_make_room() {
        let w = window(5);
        let now = 100 * SEC;
        // Others: 2 in cell 91, 1 in 95, 2 in 100; this request asks 2 (so cell 100 reads 4).
        let d = w.decide(now, 100, 2, &[(91, 2), (95, 1), (100, 4)]);
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        // Needs 2 freed: cell 91 leaves at 101 s.
        assert_eq!(d.retry_after(), Duration::from_secs(1));
        assert_eq!(d.reset_after(), Duration::from_secs(10));
        // Needs 3 freed: cells 91 and 95 (leaves at 105 s).
        let d = w.decide(now, 100, 3, &[(91, 2), (95, 1), (100, 5)]);
        assert_eq!(d.retry_after(), Duration::from_secs(5));
        // Counts that include other denied requests' transient permits only lengthen the wait.
        let d = w.decide(now, 100, 1, &[(100, 6)]);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after(), Duration::from_secs(10));
    }

    #[test]
    fn inconsistent_counts_never_panic() {
        let w = window(5);
        // The own cell reads less than n (evicted and recreated): still a denial, no panic.
        let d = w.decide(0, 0, 3, &[(0, 1), (1, u64::MAX)]);
        assert!(!d.is_allowed());
        let d = w.decide(u64::MAX, u64::MAX / SEC, 5, &[(u64::MAX / SEC, 9)]);
        assert!(!d.is_allowed());
    }
}
