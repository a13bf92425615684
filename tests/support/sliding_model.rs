//! The textbook sliding window over aligned cells, the sequential model the ring and packed
//! sliding windows and the rolling counter are checked against (`tests/sliding_window_model.rs`,
//! `tests/sliding_window_timeline_ends.rs`): a map from cell index to count. Its waits are
//! computed in `u128` (a cell past the end of the `u64` timeline is waited for as long as its
//! start says, saturated at `u64::MAX`), its cell index saturated as the ring saturates it
//! (`i + cells`, at most `u64::MAX`); away from the timeline's end that is the plain
//! `(i + cells) × cell_nanos − now`.

use std::collections::BTreeMap;

use floodgate::Decision;

pub struct Model {
    pub cells: u64,
    pub cell_nanos: u64,
    pub limit: u64,
    pub counts: BTreeMap<u64, u64>,
}

impl Model {
    /// A window of `cells` cells of `cell_nanos` each, admitting `limit`, nothing counted.
    pub fn new(cells: u32, cell_nanos: u64, limit: u64) -> Self {
        Model {
            cells: u64::from(cells),
            cell_nanos,
            limit,
            counts: BTreeMap::new(),
        }
    }

    /// What the window ending with cell `cell` holds.
    #[allow(dead_code)] // the rolling counter's check only
    pub fn used(&self, cell: u64) -> u64 {
        self.window(cell).map(|(_, c)| c).sum()
    }

    fn window(&self, cell: u64) -> impl Iterator<Item = (&u64, &u64)> {
        self.counts
            .range(cell.saturating_sub(self.cells - 1)..=cell)
    }

    /// Nanoseconds from `now` until cell `i` leaves the window.
    fn end(&self, i: u64, now: u64) -> u64 {
        let start = u128::from(i.saturating_add(self.cells)) * u128::from(self.cell_nanos);
        u64::try_from(start.saturating_sub(u128::from(now))).unwrap_or(u64::MAX)
    }

    /// The decision on `n` at `now`; counted if admitted and `take`.
    pub fn decide(&mut self, now: u64, n: u64, take: bool) -> Decision {
        let cell = now / self.cell_nanos;
        let used = self.window(cell).map(|(_, c)| c).sum::<u64>();
        if used + n <= self.limit {
            if take {
                *self.counts.entry(cell).or_default() += n;
            }
            return Decision::allow(self.limit, self.limit - used - n, self.end(cell, now));
        }
        let need = used + n - self.limit;
        let mut freed = 0;
        let mut retry = self.end(cell, now);
        for (&i, &c) in self.window(cell) {
            freed += c;
            if freed >= need {
                retry = self.end(i, now);
                break;
            }
        }
        let reset = self
            .window(cell)
            .filter(|(_, c)| **c > 0)
            .map(|(&i, _)| self.end(i, now))
            .max();
        Decision::deny(
            self.limit,
            self.limit.saturating_sub(used),
            retry,
            reset.unwrap_or(0),
        )
    }
}
