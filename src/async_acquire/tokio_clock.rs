//! [`TokioClock`]: a [`Clock`] that reads tokio's time.

use std::time::Duration;

use crate::clock::{Clock, QuantaClock, duration_to_nanos};

/// A clock reading tokio's time ([`tokio::time::Instant`]): real monotonic time normally, and
/// tokio's paused test clock inside a runtime started with `start_paused` (or after
/// `tokio::time::pause()`), where time moves only when tokio advances it. A limiter on this clock
/// and the sleeps of [`AsyncLimiter`](super::AsyncLimiter) then share one timeline, so tests of
/// async code are exact and never wait for real.
///
/// [`new`](Self::new) puts the clock on the Unix-epoch timeline of [`QuantaClock`] (so aligned
/// windows line up with the wall clock); [`starting_at`](Self::starting_at) picks the origin, for
/// tests that must not depend on the wall clock at all. The blocking [`Clock::sleep`] is a thread
/// sleep: in async code use the async calls instead.
///
/// ```
/// use floodgate::{Clock, TokioClock};
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::starting_at(0);
/// tokio::time::sleep(Duration::from_millis(250)).await; // paused: returns at once
/// assert_eq!(clock.now_nanos(), 250_000_000);
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    base: tokio::time::Instant,
    base_nanos: u64,
}

impl TokioClock {
    /// A clock reading tokio's time on the Unix-epoch timeline (nanoseconds since 1970, taken
    /// from [`QuantaClock`] once, here).
    ///
    /// ```
    /// use floodgate::{Clock, TokioClock};
    /// let year_2020 = 1_577_836_800 * 1_000_000_000; // Unix time, in nanoseconds
    /// assert!(TokioClock::new().now_nanos() > year_2020);
    /// ```
    pub fn new() -> Self {
        Self::starting_at(QuantaClock::new().now_nanos())
    }

    /// A clock reading `nanos` now, then moving with tokio's time.
    ///
    /// ```
    /// use floodgate::{Clock, TokioClock};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = TokioClock::starting_at(5);
    /// assert_eq!(clock.now_nanos(), 5); // paused: tokio's time stands still
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(clock.now_nanos(), 1_000_000_005);
    /// # }
    /// ```
    pub fn starting_at(nanos: u64) -> Self {
        TokioClock {
            base: tokio::time::Instant::now(),
            base_nanos: nanos,
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.base);
        self.base_nanos.saturating_add(duration_to_nanos(elapsed))
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}
