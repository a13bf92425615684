//! Sliding log on Redis: a sorted set of timestamps, exact.
//!
//! Runs the local [`crate::SlidingLog`] configuration: one sorted-set entry per admitted permit,
//! scored with the server's time in microseconds. Exact: at most `limit` permits in any
//! `window`-long interval. A denial adds no entry. Memory is one entry per permit in the window,
//! so the limit is as modest as the local log's (logins, password resets, expensive calls). The
//! window must be whole milliseconds, checked when the limiter is built.

use std::sync::LazyLock;

use super::lua_script::LuaScript;

use super::limiter::{RedisAlgorithm, sealed, whole_millis};
use crate::algorithms::SlidingLog;
use crate::decision::ConfigError;

pub(super) static SCRIPT: LazyLock<LuaScript> = lua_script!("exact.lua", "sliding_log.lua");
/// The batch script: `sliding_log_batch.lua` decides a batch's decisions in order as
/// `sliding_log.lua` would one call after another, reading each log once (not once per decision).
pub(super) static BATCH: LazyLock<LuaScript> = lua_script!(
    "exact.lua",
    "batch_frame.lua",
    "sliding_log_batch.lua",
    "batch_run.lua"
);

impl sealed::Script for SlidingLog {
    /// During an outage: a local fixed window of the same length (coarser, same bound per window).
    type Local = crate::FixedWindow;

    fn validate(&self) -> Result<(), ConfigError> {
        whole_millis(self.window(), "Redis sliding log window").map(|_| ())
    }

    fn script(&self) -> &'static LuaScript {
        &SCRIPT
    }

    fn batch_script(&self) -> sealed::Batch {
        sealed::Batch::Each(&BATCH)
    }

    fn key_suffixes(&self) -> &'static [&'static str] {
        &["sl", "sl:seq"]
    }

    fn args(&self, n: u32) -> [u64; 4] {
        let window_micros = u64::try_from(self.window().as_micros()).unwrap_or(u64::MAX);
        [u64::from(self.limit()), window_micros, u64::from(n), 0]
    }

    fn limit_u32(&self) -> u32 {
        self.limit()
    }

    /// The `n` entries an admitted decision adds, and up to `limit` expired ones it trims.
    fn entries(&self, n: u32) -> u64 {
        u64::from(n) + u64::from(self.limit())
    }

    fn local(&self, limit: u32) -> Result<crate::FixedWindow, ConfigError> {
        crate::FixedWindow::new(limit, self.window())
    }
}

/// The sliding log on Redis.
impl RedisAlgorithm for SlidingLog {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::limiter::sealed::Script as _;
    use std::time::Duration;

    #[test]
    fn the_window_must_be_whole_milliseconds() {
        let log = SlidingLog::new(5, Duration::from_secs(60)).unwrap();
        assert_eq!(log.validate(), Ok(()));
        assert_eq!(log.args(2), [5, 60_000_000, 2, 0]);
        let fine = SlidingLog::new(5, Duration::from_micros(10)).unwrap();
        assert!(matches!(
            fine.validate(),
            Err(ConfigError::NotWhole { value, .. }) if value == Duration::from_micros(10)
        ));
    }
}
