//! Adaptive concurrency limits: an [`InFlight`] whose limit an algorithm moves from what each
//! request reports (its latency, and whether it was dropped), as in Netflix's
//! concurrency-limits: [`Aimd`], [`Gradient2`] and [`Vegas`] with their defaults.
//!
//! Samples are grouped in [`SampleWindow`]s (Netflix's `WindowedLimit`): the algorithm sees
//! one sample per window (average RTT, largest in-flight count, any drop), so the limit moves,
//! and backs off, at most once per window. In a simulated queueing server (`tests/adaptive.rs`)
//! all three then settle within 0.6–1.3 × its capacity and follow a step of it, when told what
//! latency is too much: Vegas with its defaults, AIMD with a [`timeout`](Aimd::timeout) of
//! 1.2 × the unloaded latency, Gradient2 with an [`rtt_tolerance`](Gradient2::rtt_tolerance) of
//! 1.0. At their defaults the other two settle higher: AIMD's 5 s timeout is far above such a
//! server's latencies, so it backs off on drops only (1.84, 2.74, 2.72 × capacity in the three
//! phases), and Gradient2's tolerance of 1.5 lets latency reach 1.5 × the long-term RTT (1.49
//! ×, then 2.38 and 2.63 × as the long-term RTT follows the queue up). Fed every sample instead
//! ([`AdaptiveInFlight::window`] with `None`), AIMD backs off once per request of an overshoot
//! and sinks to ~0.4 × capacity, and Vegas swings between 0.1 × and 2 ×.
//!
//! The request path stays lock-free: a sample is one compare-exchange loop on the 128-bit open
//! window; once per window (per sample, unwindowed) one more on the algorithm's 128-bit state
//! (a pure function of the old state and the sample); and only a change of the whole-number
//! limit touches the in-flight word (one more compare-exchange; the waiter queue's lock only
//! when waiters are queued).
//!
//! ```
//! use floodgate::ManualClock;
//! use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
//! use std::time::Duration;
//! let clock = ManualClock::new();
//! let limiter = AdaptiveInFlight::with_clock(Aimd::new(10, 1, 100)?, clock.clone());
//! for _ in 0..10 {
//!     let permit = limiter.try_acquire().expect("free");
//!     clock.advance(Duration::from_millis(20));
//!     permit.dropped(); // the server shed it
//! }
//! clock.advance(Duration::from_secs(1)); // the window (1 s, 10 samples) ends:
//! limiter.try_acquire().expect("free").success();
//! assert_eq!(limiter.limit(), 9); // one back-off for the whole window
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod algorithms;
pub(crate) mod window;

use std::fmt;

pub use algorithms::{Aimd, Gradient2, Vegas};
pub use window::SampleWindow;

use super::in_flight::{InFlight, InFlightPermit};
use crate::algorithms::smooth::wide::AtomicWide;
use crate::clock::{Clock, QuantaClock};
use crate::sync::Ordering;
use window::Windows;

/// What one finished request reports.
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Aimd, Sample};
/// let aimd = Aimd::new(10, 1, 100)?;
/// let state = aimd.initial_state();
/// // A drop multiplies the limit by the backoff (0.9 unless set), rounded down.
/// let dropped = Sample { rtt_nanos: 1_000_000, in_flight: 10, dropped: true };
/// assert_eq!(aimd.limit_of(aimd.on_sample(state, &dropped)), 9);
/// // A success with the limit at least half in use adds one.
/// let busy = Sample { rtt_nanos: 1_000_000, in_flight: 5, dropped: false };
/// assert_eq!(aimd.limit_of(aimd.on_sample(state, &busy)), 11);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Its round-trip time in nanoseconds; 0 measures nothing (a clock that did not move):
    /// [`Gradient2`] and [`Vegas`] then learn from its drop only.
    pub rtt_nanos: u64,
    /// Requests in flight when it started (itself included).
    pub in_flight: u32,
    /// Whether it was dropped (rejected or timed out downstream): a congestion signal.
    pub dropped: bool,
}

/// A limit algorithm: a pure update of a packed 128-bit state by one [`Sample`].
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Aimd};
/// let aimd = Aimd::new(7, 1, 10)?;
/// assert_eq!(aimd.limit_of(aimd.initial_state()), 7);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
pub trait AdaptiveAlgorithm: Send + Sync + 'static {
    /// The state before any sample.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Vegas};
    /// let vegas = Vegas::new(12, 1, 100)?;
    /// assert_eq!(vegas.limit_of(vegas.initial_state()), 12);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn initial_state(&self) -> u128;
    /// The state after `sample`. Pure: it reads its arguments and the configuration only.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Aimd, Sample};
    /// let aimd = Aimd::new(10, 1, 100)?;
    /// let state = aimd.initial_state();
    /// let drop = Sample { rtt_nanos: 0, in_flight: 10, dropped: true };
    /// let after = aimd.on_sample(state, &drop);
    /// assert_eq!(aimd.limit_of(after), 9);
    /// assert_eq!(aimd.on_sample(state, &drop), after); // pure: same input, same state
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn on_sample(&self, state: u128, sample: &Sample) -> u128;
    /// The whole-number limit a state stands for (within the algorithm's bounds).
    /// [`AdaptiveInFlight`] holds it within `1..=`[`MAX_IN_FLIGHT_LIMIT`](crate::concurrency::MAX_IN_FLIGHT_LIMIT).
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Aimd, Sample};
    /// let aimd = Aimd::new(2, 2, 8)?;
    /// let drop = Sample { rtt_nanos: 0, in_flight: 2, dropped: true };
    /// // 2 × 0.9 rounds down to 1, below the minimum: held at 2.
    /// assert_eq!(aimd.limit_of(aimd.on_sample(aimd.initial_state(), &drop)), 2);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn limit_of(&self, state: u128) -> u32;

    /// The sample window an [`AdaptiveInFlight`] groups this algorithm's samples in by
    /// default (`None`: every sample goes to the algorithm): [`SampleWindow::default`], 1 s
    /// windows of at least 10 samples, for all three algorithms here.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, SampleWindow, Vegas};
    /// assert_eq!(Vegas::new(7, 1, 10)?.default_window(), Some(SampleWindow::default()));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn default_window(&self) -> Option<SampleWindow> {
        Some(SampleWindow::default())
    }
}

/// An [`InFlight`] limit moved by an [`AdaptiveAlgorithm`] from the samples its permits report.
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Vegas};
/// let limiter = AdaptiveInFlight::new(Vegas::new(20, 1, 1_000)?);
/// let permit = limiter.try_acquire().expect("free");
/// permit.success();
/// assert_eq!(limiter.in_flight().in_flight(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AdaptiveInFlight<A, C = QuantaClock> {
    in_flight: InFlight,
    state: AtomicWide,
    algorithm: A,
    clock: C,
    /// The open sample window (`None`: each sample goes to the algorithm).
    windows: Option<Windows>,
}

impl<A, C> fmt::Debug for AdaptiveInFlight<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveInFlight")
            .field("in_flight", &self.in_flight)
            .field("window", &self.windows.as_ref().map(Windows::window))
            .finish_non_exhaustive()
    }
}

impl<A: AdaptiveAlgorithm> AdaptiveInFlight<A, QuantaClock> {
    /// An adaptive limit on the default clock.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Gradient2};
    /// let limiter = AdaptiveInFlight::new(Gradient2::new(20, 1, 1_000)?);
    /// assert_eq!(limiter.limit(), 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, QuantaClock::new())
    }
}

impl<A: AdaptiveAlgorithm, C: Clock> AdaptiveInFlight<A, C> {
    /// An adaptive limit timing requests on `clock`, grouping samples in the algorithm's
    /// [default window](AdaptiveAlgorithm::default_window) (see [`window`](Self::window)).
    ///
    /// ```
    /// use floodgate::ManualClock;
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// let limiter = AdaptiveInFlight::with_clock(Aimd::new(3, 1, 10)?, ManualClock::new());
    /// assert_eq!(limiter.limit(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        let state = algorithm.initial_state();
        let in_flight = InFlight::new(in_flight_limit(&algorithm, state))
            .expect("in_flight_limit is within 1..=MAX_IN_FLIGHT_LIMIT");
        let windows = algorithm
            .default_window()
            .map(|window| Windows::new(window, clock.now_nanos()));
        AdaptiveInFlight {
            in_flight,
            state: AtomicWide::new(state),
            clock,
            windows,
            algorithm,
        }
    }

    /// Groups samples in `window` (or, with `None`, feeds each sample to the algorithm): the
    /// algorithm then sees one sample per window — its average RTT, its largest in-flight
    /// count, and whether any request in it was dropped — so the limit moves, and backs off,
    /// at most once per window (Netflix's `WindowedLimit`). A window with fewer samples than
    /// [`SampleWindow::min_samples`] is discarded. The first window starts now.
    ///
    /// ```
    /// use floodgate::ManualClock;
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd, SampleWindow};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let window = SampleWindow::new(Duration::from_millis(100), 3)?;
    /// let limiter = AdaptiveInFlight::with_clock(Aimd::new(10, 1, 100)?, clock.clone())
    ///     .window(Some(window));
    /// for _ in 0..5 {
    ///     limiter.try_acquire().expect("free").dropped(); // five drops in one window
    /// }
    /// assert_eq!(limiter.limit(), 10); // the window is still open
    /// clock.advance(Duration::from_millis(100));
    /// limiter.try_acquire().expect("free").dropped(); // closes it: one back-off for all six
    /// assert_eq!(limiter.limit(), 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn window(mut self, window: Option<SampleWindow>) -> Self {
        let now = self.clock.now_nanos();
        self.windows = window.map(|window| Windows::new(window, now));
        self
    }

    /// Takes one permit if the current limit has room (never blocks). Report how the request
    /// went with [`AdaptivePermit::success`] or [`AdaptivePermit::dropped`]; a permit dropped
    /// without a report is given back and teaches the algorithm nothing.
    ///
    /// ```
    /// use floodgate::ManualClock;
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// let limiter = AdaptiveInFlight::with_clock(Aimd::new(1, 1, 10)?, ManualClock::new())
    ///     .window(None); // every sample counts
    /// let first = limiter.try_acquire().expect("free");
    /// assert!(limiter.try_acquire().is_none());
    /// first.success(); // in use at the limit: AIMD adds one
    /// assert_eq!(limiter.limit(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> Option<AdaptivePermit<'_, A, C>> {
        let permit = self.in_flight.try_acquire(1).ok().flatten()?;
        Some(AdaptivePermit {
            limiter: self,
            in_flight: self.in_flight.in_flight(),
            started: self.clock.now_nanos(),
            permit: Some(permit),
        })
    }

    /// Records one sample: into the open window (see [`window`](Self::window)), or straight to
    /// the algorithm when there is none. Lock-free: a compare-exchange loop on the window, and
    /// once per window (or per sample, unwindowed) one on the algorithm's state, and one on the
    /// in-flight word when the whole-number limit changes.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd, Sample};
    /// let limiter = AdaptiveInFlight::new(Aimd::new(10, 1, 100)?).window(None);
    /// limiter.record(&Sample { rtt_nanos: 1_000_000, in_flight: 10, dropped: true });
    /// assert_eq!(limiter.limit(), 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record(&self, sample: &Sample) {
        self.record_at(sample, self.clock.now_nanos());
    }

    /// [`record`](Self::record) of a sample that ended at `now` on the clock.
    fn record_at(&self, sample: &Sample, now: u64) {
        let Some(windows) = &self.windows else {
            self.apply(sample);
            return;
        };
        let closed = windows.record(sample, now);
        if let Some(aggregate) = closed.and_then(|closed| windows.window().aggregate(closed)) {
            self.apply(&aggregate);
        }
    }

    /// Feeds one sample to the algorithm and applies the new limit.
    fn apply(&self, sample: &Sample) {
        // AcqRel / Acquire: the state's updates form one total order; nothing else rides on it.
        let Ok(old) = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                Some(self.algorithm.on_sample(state, sample))
            })
        else {
            return;
        };
        let new = self.algorithm.on_sample(old, sample);
        if in_flight_limit(&self.algorithm, new) != in_flight_limit(&self.algorithm, old) {
            self.apply_newest_limit();
        }
    }

    /// Puts the newest state's whole-number limit in force. Racing samples may apply their
    /// limits out of order, so each one that changed the whole-number limit applies the limit
    /// of the state it reads *now*, and again until the state's limit is unchanged after its
    /// `set_limit`: the last `set_limit` of all is then the limit of the newest state (a later
    /// change of the whole-number limit would be followed by its own, later, `set_limit`).
    fn apply_newest_limit(&self) {
        // Acquire: as the state's updates in `apply`.
        let mut limit = in_flight_limit(&self.algorithm, self.state.load(Ordering::Acquire));
        loop {
            if self.in_flight.limit() != limit {
                // Within 1..=MAX_IN_FLIGHT_LIMIT (`in_flight_limit`): never refused.
                let _ = self.in_flight.set_limit(limit);
            }
            // Acquire: as above.
            let newest = in_flight_limit(&self.algorithm, self.state.load(Ordering::Acquire));
            if newest == limit {
                return;
            }
            limit = newest;
        }
    }

    /// The limit in force.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// assert_eq!(AdaptiveInFlight::new(Aimd::new(4, 1, 10)?).limit(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limit(&self) -> u32 {
        self.in_flight.limit()
    }

    /// The underlying in-flight limit (for blocking or async acquires; permits taken there
    /// report nothing).
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// let limiter = AdaptiveInFlight::new(Aimd::new(4, 1, 10)?);
    /// assert_eq!(limiter.in_flight().in_flight(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The algorithm.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// let limiter = AdaptiveInFlight::new(Aimd::new(4, 1, 10)?);
    /// let _: &Aimd = limiter.algorithm();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }
}

/// The limit an [`InFlight`] holds for `state`: the algorithm's, within
/// `1..=`[`MAX_IN_FLIGHT_LIMIT`](super::MAX_IN_FLIGHT_LIMIT) (an algorithm of the user's may
/// return any `u32`).
fn in_flight_limit<A: AdaptiveAlgorithm>(algorithm: &A, state: u128) -> u32 {
    algorithm
        .limit_of(state)
        .clamp(1, super::MAX_IN_FLIGHT_LIMIT)
}

/// A permit of an [`AdaptiveInFlight`]; report the outcome with [`success`](Self::success) or
/// [`dropped`](Self::dropped). Dropped unreported (a panic, a cancelled future), it gives its
/// permit back and reports nothing.
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
/// let limiter = AdaptiveInFlight::new(Aimd::new(4, 1, 10)?);
/// drop(limiter.try_acquire());
/// assert_eq!((limiter.limit(), limiter.in_flight().in_flight()), (4, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "report the outcome with success() or dropped()"]
pub struct AdaptivePermit<'a, A: AdaptiveAlgorithm, C: Clock> {
    limiter: &'a AdaptiveInFlight<A, C>,
    in_flight: u32,
    started: u64,
    permit: Option<InFlightPermit<'a>>,
}

impl<A: AdaptiveAlgorithm, C: Clock> AdaptivePermit<'_, A, C> {
    /// The request succeeded: its latency is a sample.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// let limiter = AdaptiveInFlight::new(Aimd::new(1, 1, 10)?).window(None);
    /// limiter.try_acquire().unwrap().success();
    /// assert_eq!(limiter.limit(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn success(self) {
        self.report(false);
    }

    /// The request was dropped (rejected or timed out downstream): a congestion sample.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::{AdaptiveInFlight, Aimd};
    /// let limiter = AdaptiveInFlight::new(Aimd::new(10, 1, 10)?).window(None);
    /// limiter.try_acquire().unwrap().dropped();
    /// assert_eq!(limiter.limit(), 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dropped(self) {
        self.report(true);
    }

    fn report(mut self, dropped: bool) {
        // Give the permit back first: the new limit applies to a count without this request.
        drop(self.permit.take());
        let now = self.limiter.clock.now_nanos();
        let sample = Sample {
            rtt_nanos: now.saturating_sub(self.started),
            in_flight: self.in_flight,
            dropped,
        };
        self.limiter.record_at(&sample, now);
    }
}

impl<A: AdaptiveAlgorithm, C: Clock> fmt::Debug for AdaptivePermit<'_, A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptivePermit")
            .field("in_flight", &self.in_flight)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}
