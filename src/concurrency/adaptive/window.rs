//! Sample windows (Netflix's `WindowedLimit`): samples are summed into the current window, and
//! the algorithm sees one sample per window — the window's average RTT, its largest in-flight
//! count, and whether any request in it was dropped — so it moves (and backs off) at most once
//! per window instead of once per request.
//!
//! # The window word
//! One 128-bit atomic holds the open window:
//!
//! | bits    | field        | width   | range |
//! |---------|--------------|---------|-------|
//! | 0..64   | `rtt_sum`    | 64 bits | sum of the samples' RTTs in ns |
//! | 64..96  | `count`      | 32 bits | samples in the window |
//! | 96..127 | `max_in_flight` | 31 bits | `0..=MAX_IN_FLIGHT_LIMIT` |
//! | 127     | `dropped`    | 1 bit   | a sample in the window was dropped |
//!
//! **Overflow.** `rtt_sum` and `count` saturate: nothing wraps, and a sample is never left out
//! (its drop and in-flight count always count). A window whose RTTs sum past 584 years (a
//! sample recorded with a huge RTT) averages to at least 584 years ÷ its count: huge, as it
//! should read; one of more than 2³² − 1 samples averages a little high. In-flight counts above [`MAX_IN_FLIGHT_LIMIT`] (no limit is that high) are
//! recorded as that maximum.
//!
//! # Closing a window
//! A sample adds itself to the open window (one compare-exchange loop), then compares its
//! clock reading with the window's end (a second atomic, `u64` ns). The first sample to find the
//! end passed moves it one window on (a compare-exchange: exactly one winner), swaps the window
//! word for an empty one, and — if the closed window holds at least `min_samples` — feeds its
//! aggregate to the algorithm. Every sample lands in exactly one window: the one open at its
//! own compare-exchange. A sample that lands just after the winner moved the end, before the
//! swap, joins the closing window: harmless.
//!
//! Time (see DESIGN "Time is part of the protocol"): a reader lagging behind the end simply
//! does not close the window. An end more than two windows ahead of a reader can only have
//! been set from a leaped clock reading; such a reader closes the window too, so a leap holds
//! the limit still for at most two windows of real time, and a reader that lags by more than a
//! window can at worst close a window early (it is judged on fewer samples, still at least
//! `min_samples`).

use std::time::Duration;

use super::Sample;
use crate::algorithms::smooth::wide::AtomicWide;
use crate::clock::duration_to_nanos;
use crate::concurrency::MAX_IN_FLIGHT_LIMIT;
use crate::decision::ConfigError;
use crate::sync::{AtomicU64, Ordering};

/// How samples are grouped before the algorithm sees them (Netflix's `WindowedLimit`).
///
/// Netflix's window lasts twice the window's smallest RTT, clamped to a minimum and a maximum
/// time, both 1 s by default, so by default always 1 s; here a window has one duration.
/// Netflix also ignores RTTs under 100 µs; here every sample counts.
///
/// ```
/// use floodgate::concurrency::adaptive::SampleWindow;
/// use std::time::Duration;
/// let window = SampleWindow::default(); // Netflix's defaults
/// assert_eq!((window.duration(), window.min_samples()), (Duration::from_secs(1), 10));
/// assert!(SampleWindow::new(Duration::from_millis(100), 10).is_ok());
/// assert!(SampleWindow::new(Duration::ZERO, 10).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleWindow {
    duration_nanos: u64,
    min_samples: u32,
}

impl Default for SampleWindow {
    /// 1 s windows that need at least 10 samples (Netflix's defaults).
    fn default() -> Self {
        SampleWindow {
            duration_nanos: 1_000_000_000,
            min_samples: 10,
        }
    }
}

impl SampleWindow {
    /// Windows of `duration`; a window closed with fewer than `min_samples` samples is
    /// discarded (too few to judge by).
    ///
    /// # Errors
    /// [`ConfigError::DurationOutOfRange`] for a duration of zero or above one year;
    /// [`ConfigError::Invalid`] (naming `min_samples`) for `min_samples = 0`.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::SampleWindow;
    /// use std::time::Duration;
    /// let window = SampleWindow::new(Duration::from_millis(250), 20)?;
    /// assert_eq!(window.duration(), Duration::from_millis(250));
    /// assert!(SampleWindow::new(Duration::from_secs(1), 0).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn new(duration: Duration, min_samples: u32) -> Result<Self, ConfigError> {
        let year = Duration::from_secs(365 * 24 * 3600);
        if duration.is_zero() || duration > year {
            return Err(ConfigError::DurationOutOfRange {
                what: "sample window",
                value: duration,
                min: Duration::from_nanos(1),
                max: year,
            });
        }
        if min_samples == 0 {
            return Err(ConfigError::Invalid {
                what: "min_samples",
                why: "a sample window needs at least one sample to judge by",
            });
        }
        Ok(SampleWindow {
            duration_nanos: duration_to_nanos(duration),
            min_samples,
        })
    }

    /// How long a window lasts.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::SampleWindow;
    /// assert_eq!(SampleWindow::default().duration().as_secs(), 1);
    /// ```
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.duration_nanos)
    }

    /// The fewest samples a window needs to count.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::SampleWindow;
    /// assert_eq!(SampleWindow::default().min_samples(), 10);
    /// ```
    pub fn min_samples(&self) -> u32 {
        self.min_samples
    }

    /// Whether a reader at `now` closes the window ending at `end` (see the module docs): the
    /// end has passed, or it lies more than two windows ahead (set from a leaped reading).
    fn closes(&self, end: u64, now: u64) -> bool {
        now >= end || end - now > self.duration_nanos.saturating_mul(2)
    }

    /// The sample standing for a closed `window`, if it holds enough samples.
    pub(crate) fn aggregate(&self, window: u128) -> Option<Sample> {
        let fields = Fields::unpack(window);
        (fields.count >= self.min_samples && fields.count > 0).then(|| Sample {
            rtt_nanos: fields.rtt_sum / u64::from(fields.count),
            in_flight: fields.max_in_flight,
            dropped: fields.dropped,
        })
    }
}

/// An empty window word.
const EMPTY: u128 = 0;

/// The open window of an [`AdaptiveInFlight`](super::AdaptiveInFlight) and when it ends.
#[derive(Debug)]
pub(crate) struct Windows {
    window: SampleWindow,
    /// The open window's word (see the module docs).
    open: AtomicWide,
    /// When the open window ends, in ns on the limiter's clock.
    end: AtomicU64,
}

impl Windows {
    /// Windows of `window`, the first one opening at `now`.
    pub(crate) fn new(window: SampleWindow, now: u64) -> Self {
        Windows {
            window,
            open: AtomicWide::new(EMPTY),
            end: AtomicU64::new(now.saturating_add(window.duration_nanos)),
        }
    }

    pub(crate) fn window(&self) -> &SampleWindow {
        &self.window
    }

    /// Adds `sample`, taken at `now`, to the open window; if that closes the window (see the
    /// module docs), returns the closed window's word, which only this call receives.
    pub(crate) fn record(&self, sample: &Sample, now: u64) -> Option<u128> {
        // AcqRel / Acquire: the window word's updates form one total order (every sample and
        // the closing swap are read-modify-writes of it); nothing else rides on it.
        let _ = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                Some(add(open, sample))
            });
        // Acquire: pairs with the AcqRel compare-exchange that moved the end.
        let end = self.end.load(Ordering::Acquire);
        if !self.window.closes(end, now) {
            return None;
        }
        let next = now.saturating_add(self.window.duration_nanos);
        // AcqRel / Relaxed: one winner per end; a loser does nothing with what it read.
        self.end
            .compare_exchange(end, next, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        // AcqRel / Acquire: as the samples' updates above.
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |_| Some(EMPTY))
            .ok()
    }

    /// Samples in the open window (for the loom models).
    #[cfg(floodgate_loom)]
    pub(crate) fn open_count(&self) -> u32 {
        // Acquire: as the samples' updates.
        count(self.open.load(Ordering::Acquire))
    }
}

/// Samples in a window word (for the loom models).
#[cfg(floodgate_loom)]
pub(crate) fn count(window: u128) -> u32 {
    Fields::unpack(window).count
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    rtt_sum: u64,
    count: u32,
    max_in_flight: u32,
    dropped: bool,
}

impl Fields {
    fn unpack(word: u128) -> Self {
        Fields {
            rtt_sum: word as u64,
            count: (word >> 64) as u32,
            max_in_flight: ((word >> 96) as u32) & MAX_IN_FLIGHT_LIMIT,
            dropped: word >> 127 != 0,
        }
    }

    fn pack(self) -> u128 {
        u128::from(self.rtt_sum)
            | u128::from(self.count) << 64
            | u128::from(self.max_in_flight & MAX_IN_FLIGHT_LIMIT) << 96
            | u128::from(self.dropped) << 127
    }
}

/// The window word with `sample` added. The RTT sum and the count saturate (a huge RTT keeps
/// the window's average huge; the later samples still count, their drops too).
fn add(window: u128, sample: &Sample) -> u128 {
    let fields = Fields::unpack(window);
    Fields {
        rtt_sum: fields.rtt_sum.saturating_add(sample.rtt_nanos),
        count: fields.count.saturating_add(1),
        max_in_flight: fields
            .max_in_flight
            .max(sample.in_flight.min(MAX_IN_FLIGHT_LIMIT)),
        dropped: fields.dropped || sample.dropped,
    }
    .pack()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rtt_nanos: u64, in_flight: u32, dropped: bool) -> Sample {
        Sample {
            rtt_nanos,
            in_flight,
            dropped,
        }
    }

    #[test]
    fn fields_round_trip_at_their_extremes() {
        for fields in [
            Fields {
                rtt_sum: 0,
                count: 0,
                max_in_flight: 0,
                dropped: false,
            },
            Fields {
                rtt_sum: u64::MAX,
                count: u32::MAX,
                max_in_flight: MAX_IN_FLIGHT_LIMIT,
                dropped: true,
            },
        ] {
            assert_eq!(Fields::unpack(fields.pack()), fields);
        }
    }

    #[test]
    fn a_window_averages_rtt_and_keeps_the_largest_in_flight_and_any_drop() {
        let window = SampleWindow::new(Duration::from_secs(1), 3).unwrap();
        let mut word = EMPTY;
        for s in [
            sample(10, 4, false),
            sample(20, 9, true),
            sample(30, 2, false),
        ] {
            word = add(word, &s);
        }
        assert_eq!(window.aggregate(word), Some(sample(20, 9, true)));
        // Too few samples: no verdict.
        let two = add(add(EMPTY, &sample(10, 1, false)), &sample(10, 1, false));
        assert_eq!(window.aggregate(two), None);
    }

    #[test]
    fn a_sample_that_would_overflow_saturates_and_in_flight_is_capped() {
        let full = add(EMPTY, &sample(u64::MAX, 1, false));
        let after = Fields::unpack(add(full, &sample(1, 7, true)));
        assert_eq!(
            after,
            Fields {
                rtt_sum: u64::MAX,
                count: 2,
                max_in_flight: 7,
                dropped: true
            }
        );
        let capped = add(EMPTY, &sample(1, u32::MAX, false));
        assert_eq!(Fields::unpack(capped).max_in_flight, MAX_IN_FLIGHT_LIMIT);
        assert!(!Fields::unpack(capped).dropped);
    }

    #[test]
    fn a_window_closes_when_its_end_passed_or_lies_beyond_two_windows() {
        let window = SampleWindow::new(Duration::from_nanos(100), 1).unwrap();
        assert!(!window.closes(1_000, 999)); // lagging: not yet
        assert!(window.closes(1_000, 1_000));
        assert!(!window.closes(1_000, 800)); // two windows of lag: still open
        assert!(window.closes(1_000, 799)); // the end was set from a leap
    }
}
