//! Sliding window of cells on Redis.
//!
//! Runs the local [`crate::SlidingWindow`] configuration: the window is divided into `cells`
//! cells (aligned to the server's clock), and a request is admitted if the permits taken in the
//! current cell and the ones before it, `window` in all, plus `n` fit the limit. One hash field
//! per cell, all in one key (so one hash tag, one slot). Redis keeps these in milliseconds, so
//! the window and the cell (`window / cells`) must be whole milliseconds, with at most
//! [`MAX_CELLS`] cells: checked when the limiter is built.

use std::sync::LazyLock;

use super::lua_script::LuaScript;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::algorithms::SlidingWindow;
use crate::decision::ConfigError;

pub(super) static SCRIPT: LazyLock<LuaScript> = lua_script!("exact.lua", "sliding_window.lua");
/// The batch script: `sliding_window_batch.lua` decides a batch's decisions in order as
/// `sliding_window.lua` would one call after another, reading each key's cells once (not once
/// per decision).
pub(super) static BATCH: LazyLock<LuaScript> = lua_script!(
    "exact.lua",
    "batch_frame.lua",
    "sliding_window_batch.lua",
    "batch_run.lua"
);

/// Most cells per window on Redis (a decision reads every cell).
///
/// ```
/// assert_eq!(floodgate::redis::MAX_CELLS, 1024);
/// ```
pub const MAX_CELLS: u64 = 1024;

/// The cell length in microseconds (validated whole milliseconds when the limiter was built).
fn cell_micros(window: &SlidingWindow) -> u64 {
    u64::try_from(window.cell().as_micros()).unwrap_or(u64::MAX)
}

impl sealed::Script for SlidingWindow {
    /// During an outage: a local fixed window of the same length (coarser, same bound per window).
    type Local = crate::FixedWindow;

    fn validate(&self) -> Result<(), ConfigError> {
        whole_millis(self.window(), "Redis sliding window")?;
        whole_millis(self.cell(), "Redis sliding window cell (window / cells)")?;
        if u64::from(self.cells()) > MAX_CELLS {
            return Err(ConfigError::TooLarge {
                what: "Redis sliding window cells",
                value: u64::from(self.cells()),
                max: MAX_CELLS,
            });
        }
        Ok(())
    }

    fn script(&self) -> &'static LuaScript {
        &SCRIPT
    }

    fn batch_script(&self) -> sealed::Batch {
        sealed::Batch::Each(&BATCH)
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        &["sw"]
    }

    /// The one-decision script reads all four arguments (`n` is the fourth).
    fn script_args(&self) -> usize {
        4
    }

    fn args(&self, n: u32) -> [u64; 4] {
        [
            u64::from(self.limit()),
            cell_micros(self),
            u64::from(self.cells()),
            u64::from(n),
        ]
    }

    fn limit_u32(&self) -> u32 {
        self.limit()
    }

    fn local(&self, limit: u32) -> Result<crate::FixedWindow, ConfigError> {
        crate::FixedWindow::new(limit, self.window())
    }
}

/// The sliding window on Redis.
impl RedisAlgorithm for SlidingWindow {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::limiter::sealed::Script as _;
    use std::time::Duration;

    #[test]
    fn redis_constraints_name_the_bad_value() {
        let minute = Duration::from_secs(60);
        let ok = SlidingWindow::new(100, minute, 60).unwrap();
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.args(3), [100, 1_000_000, 60, 3]);
        // 999 ms in 3 cells of 333 ms: whole milliseconds.
        let thirds = SlidingWindow::new(10, Duration::from_millis(999), 3).unwrap();
        assert_eq!(thirds.validate(), Ok(()));
        let fine = SlidingWindow::new(10, Duration::from_millis(1), 8).unwrap();
        assert_eq!(
            fine.validate(),
            Err(ConfigError::NotWhole {
                what: "Redis sliding window cell (window / cells)",
                value: Duration::from_micros(125),
                unit: Duration::from_millis(1),
            })
        );
        let many = SlidingWindow::new(10, Duration::from_secs(2000), 2000).unwrap();
        let err = many.validate().unwrap_err();
        assert_eq!(
            err,
            ConfigError::TooLarge {
                what: "Redis sliding window cells",
                value: 2000,
                max: 1024
            }
        );
        assert!(err.to_string().contains("2000"), "{err}");
    }

    #[test]
    fn a_window_that_does_not_divide_into_its_cells_names_the_window_and_the_cells() {
        // 1 s in 3 cells: 333,333,333.3 ns each. Refused before Redis could be given a cell
        // length that is not the window's third, naming both numbers.
        let err = SlidingWindow::new(10, Duration::from_secs(1), 3).unwrap_err();
        assert_eq!(
            err,
            ConfigError::Indivisible {
                window: Duration::from_secs(1),
                cells: 3
            }
        );
        let text = err.to_string();
        assert!(text.contains("1s") && text.contains('3'), "{text}");
        // More slots than the ring holds names the count and the maximum.
        let err = SlidingWindow::new(10, Duration::from_secs(60), 50_000)
            .unwrap()
            .with_future_cells(16_000)
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::TooLarge {
                what: "cells + future cells",
                value: 66_000,
                max: 65_536
            }
        );
        assert!(err.to_string().contains("66000"), "{err}");
    }
}
