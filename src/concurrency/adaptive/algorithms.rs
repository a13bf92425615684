//! The three limit algorithms of Netflix's concurrency-limits, as pure functions over a packed
//! 128-bit state: the estimated limit (`f64`, high 64 bits) and one algorithm-specific word.

use std::time::Duration;

use crate::clock::duration_to_nanos;
use crate::decision::ConfigError;

use super::{AdaptiveAlgorithm, Sample};

/// The packed state: `limit` as `f64` bits in the high half, `extra` in the low half.
#[inline]
pub(crate) fn pack(limit: f64, extra: u64) -> u128 {
    (u128::from(limit.to_bits()) << 64) | u128::from(extra)
}

/// The `(limit, extra)` of a packed state.
#[inline]
pub(crate) fn unpack(state: u128) -> (f64, u64) {
    (f64::from_bits((state >> 64) as u64), state as u64)
}

fn check_bounds(initial: u32, min: u32, max: u32) -> Result<(), ConfigError> {
    if min == 0 {
        return Err(ConfigError::ZeroLimit);
    }
    if !(min..=max).contains(&initial) {
        return Err(ConfigError::Invalid {
            what: "adaptive limit bounds",
            why: "need 1 ≤ min ≤ initial ≤ max",
        });
    }
    super::super::InFlight::new(max).map(drop)
}

fn clamp(limit: f64, min: u32, max: u32) -> f64 {
    limit.clamp(f64::from(min), f64::from(max))
}

/// `max(1, ⌊log10(limit)⌋)`: the step of Vegas' functions (Netflix's `Log10RootFunction`).
fn log10_step(limit: f64) -> f64 {
    limit.log10().floor().max(1.0)
}

/// Additive increase, multiplicative decrease: +1 per sample while the limit is in use
/// (`in_flight × 2 ≥ limit`), × `backoff` (0.9) on a drop or an RTT above `timeout` (5 s).
/// Under an [`AdaptiveInFlight`](super::AdaptiveInFlight) a sample is a whole window by
/// default, so the limit backs off at most once per window however many requests it dropped.
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Aimd, Sample};
/// let aimd = Aimd::new(10, 1, 100)?;
/// let s = aimd.initial_state();
/// let ok = Sample { rtt_nanos: 1_000, in_flight: 10, dropped: false };
/// assert_eq!(aimd.limit_of(aimd.on_sample(s, &ok)), 11);
/// let drop = Sample { dropped: true, ..ok };
/// assert_eq!(aimd.limit_of(aimd.on_sample(s, &drop)), 9);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Aimd {
    initial: u32,
    min: u32,
    max: u32,
    backoff: f64,
    timeout_nanos: u64,
}

impl Aimd {
    /// AIMD from `initial` within `min..=max`, backoff 0.9, timeout 5 s.
    ///
    /// # Errors
    /// [`ConfigError`] unless `1 ≤ min ≤ initial ≤ max ≤`
    /// [`MAX_IN_FLIGHT_LIMIT`](crate::concurrency::MAX_IN_FLIGHT_LIMIT).
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::Aimd;
    /// assert!(Aimd::new(20, 1, 200).is_ok());
    /// assert!(Aimd::new(0, 0, 200).is_err());
    /// ```
    pub fn new(initial: u32, min: u32, max: u32) -> Result<Self, ConfigError> {
        check_bounds(initial, min, max)?;
        Ok(Aimd {
            initial,
            min,
            max,
            backoff: 0.9,
            timeout_nanos: 5_000_000_000,
        })
    }

    /// The backoff ratio, in `[0.5, 1)`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] outside `[0.5, 1)`.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::Aimd;
    /// assert!(Aimd::new(20, 1, 200)?.backoff(0.75).is_ok());
    /// assert!(Aimd::new(20, 1, 200)?.backoff(1.0).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn backoff(mut self, backoff: f64) -> Result<Self, ConfigError> {
        if !(0.5..1.0).contains(&backoff) {
            return Err(ConfigError::InvalidNumber {
                what: "AIMD backoff",
                value: backoff,
                expected: "in [0.5, 1)",
            });
        }
        self.backoff = backoff;
        Ok(self)
    }

    /// An RTT above `timeout` counts as a drop (default 5 s). Longer than `u64::MAX` ns
    /// (`Duration::MAX`): no RTT counts as one.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero (every RTT would count as a drop).
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::Aimd;
    /// use std::time::Duration;
    /// let aimd = Aimd::new(20, 1, 200)?.timeout(Duration::from_secs(1))?;
    /// assert!(Aimd::new(20, 1, 200)?.timeout(Duration::ZERO).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        if timeout.is_zero() {
            return Err(ConfigError::Invalid {
                what: "AIMD timeout",
                why: "must be longer than zero (an RTT above it counts as a drop)",
            });
        }
        self.timeout_nanos = duration_to_nanos(timeout);
        Ok(self)
    }
}

impl AdaptiveAlgorithm for Aimd {
    fn initial_state(&self) -> u128 {
        pack(f64::from(self.initial), 0)
    }

    fn on_sample(&self, state: u128, sample: &Sample) -> u128 {
        let (limit, extra) = unpack(state);
        let next = if sample.dropped || sample.rtt_nanos > self.timeout_nanos {
            (limit * self.backoff).floor()
        } else if f64::from(sample.in_flight) * 2.0 >= limit {
            limit + 1.0
        } else {
            limit
        };
        pack(clamp(next, self.min, self.max), extra)
    }

    fn limit_of(&self, state: u128) -> u32 {
        unpack(state).0 as u32
    }
}

/// Gradient2: the limit follows the ratio of a long-window RTT average (600 samples) to the
/// sample's RTT, with a tolerance of 1.5 and a queue allowance of 4, smoothed by 0.2. Under an
/// [`AdaptiveInFlight`](super::AdaptiveInFlight) a sample is a whole window's average RTT by
/// default (Netflix recalculates the limit "every sampling window"). It settles where the RTT
/// is the tolerance × the long-term RTT: see [`rtt_tolerance`](Self::rtt_tolerance). A dropped
/// sample shrinks the limit as far as one sample can (gradient 0.5: about × 0.9), whatever its
/// RTT and however much of the limit was in use; Netflix's Gradient2 ignores drops, so there a
/// storm of drops that fail fast reads as falling latency and grows the limit. An RTT of zero
/// (the clock did not move) is no measurement: such a sample changes nothing unless dropped.
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Gradient2, Sample};
/// let g = Gradient2::new(20, 1, 200)?;
/// let mut s = g.initial_state();
/// for _ in 0..50 {
///     s = g.on_sample(s, &Sample { rtt_nanos: 10_000_000, in_flight: 20, dropped: false });
/// }
/// assert!(g.limit_of(s) > 20); // steady latency: grows by the queue allowance
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Gradient2 {
    initial: u32,
    min: u32,
    max: u32,
    smoothing: f64,
    tolerance: f64,
    queue_size: f64,
    long_window: u32,
}

/// Samples averaged plainly before the long RTT turns into an exponential average (Netflix's
/// `ExpAvgMeasurement` warm-up).
const GRADIENT2_WARMUP: u32 = 10;

impl Gradient2 {
    /// Gradient2 from `initial` within `min..=max` with Netflix's defaults (smoothing 0.2,
    /// RTT tolerance 1.5, queue size 4, long window 600).
    ///
    /// # Errors
    /// As [`Aimd::new`].
    ///
    /// ```
    /// assert!(floodgate::concurrency::adaptive::Gradient2::new(20, 1, 200).is_ok());
    /// ```
    pub fn new(initial: u32, min: u32, max: u32) -> Result<Self, ConfigError> {
        check_bounds(initial, min, max)?;
        Ok(Gradient2 {
            initial,
            min,
            max,
            smoothing: 0.2,
            tolerance: 1.5,
            queue_size: 4.0,
            long_window: 600,
        })
    }

    /// How far the window's RTT may rise above the long-term average before the limit shrinks:
    /// `tolerance` ≥ 1 (default 1.5, Netflix's). In a server whose latency grows with its queue,
    /// Gradient2 settles where latency is `tolerance` × the long-term RTT, i.e. near
    /// `tolerance` × capacity + the queue allowance; 1.0 keeps it near capacity.
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] below 1 or NaN.
    ///
    /// ```
    /// use floodgate::concurrency::adaptive::Gradient2;
    /// assert!(Gradient2::new(20, 1, 200)?.rtt_tolerance(1.0).is_ok());
    /// assert!(Gradient2::new(20, 1, 200)?.rtt_tolerance(0.9).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn rtt_tolerance(mut self, tolerance: f64) -> Result<Self, ConfigError> {
        // Also refuses NaN, and infinity (a limit that never shrinks).
        if !(1.0..f64::INFINITY).contains(&tolerance) {
            return Err(ConfigError::InvalidNumber {
                what: "Gradient2 RTT tolerance",
                value: tolerance,
                expected: "at least 1 and finite",
            });
        }
        self.tolerance = tolerance;
        Ok(self)
    }
}

impl Gradient2 {
    /// The limit after a sample of `gradient`, smoothed, within the bounds.
    fn next_limit(&self, limit: f64, gradient: f64) -> f64 {
        let target = limit * gradient + self.queue_size;
        clamp(
            limit * (1.0 - self.smoothing) + target * self.smoothing,
            self.min,
            self.max,
        )
    }

    /// The limit after a drop: congestion whatever its RTT (one that failed fast reads as
    /// latency falling), so the strongest shrink, gradient 0.5, however much of the limit was
    /// in use. Netflix's Gradient2 ignores drops, so a storm of fast drops grew its limit.
    fn shrunk(&self, limit: f64) -> f64 {
        self.next_limit(limit, 0.5)
    }
}

impl AdaptiveAlgorithm for Gradient2 {
    fn initial_state(&self) -> u128 {
        pack(f64::from(self.initial), 0)
    }

    /// `extra` packs the long RTT (`f32` bits, ns, high half) and the samples seen (low half).
    fn on_sample(&self, state: u128, sample: &Sample) -> u128 {
        let (limit, extra) = unpack(state);
        if sample.rtt_nanos == 0 {
            // An RTT of zero (the clock did not move) measures nothing: it is no "latency
            // fell to nothing" to grow on, nor a term of the long average. A drop still counts.
            return if sample.dropped {
                pack(self.shrunk(limit), extra)
            } else {
                state
            };
        }
        let (long_bits, count) = ((extra >> 32) as u32, extra as u32);
        let short = sample.rtt_nanos as f64;
        let old_long = f64::from(f32::from_bits(long_bits));
        let count = count.saturating_add(1);
        let mut long = if count <= GRADIENT2_WARMUP {
            old_long + (short - old_long) / f64::from(count)
        } else {
            let factor = 2.0 / (f64::from(self.long_window) + 1.0);
            old_long * (1.0 - factor) + short * factor
        };
        // A long RTT far above the short one decays (the backlog it measured has drained).
        if long / short > 2.0 {
            long *= 0.95;
        }
        let extra = (u64::from((long as f32).to_bits()) << 32) | u64::from(count);
        if sample.dropped {
            return pack(self.shrunk(limit), extra);
        }
        if f64::from(sample.in_flight) < limit / 2.0 {
            // Application-limited: no evidence to grow on.
            return pack(limit, extra);
        }
        let gradient = (self.tolerance * long / short).clamp(0.5, 1.0);
        pack(self.next_limit(limit, gradient), extra)
    }

    fn limit_of(&self, state: u128) -> u32 {
        unpack(state).0 as u32
    }
}

/// Vegas: estimates the queue from the lowest RTT seen (`rtt_noload`) and the sample's,
/// `queue = limit × (1 − rtt_noload / rtt)`, and grows the limit while the queue is below
/// `alpha = 3·log10(limit)`, shrinks it above `beta = 6·log10(limit)` or on a drop. A drop
/// shrinks it whatever its RTT and never becomes `rtt_noload` (Netflix's Vegas takes a drop
/// faster than any request served as the new no-load RTT and does not shrink). An RTT of zero
/// (the clock did not move) is no measurement: such a sample changes nothing unless dropped.
///
/// ```
/// use floodgate::concurrency::adaptive::{AdaptiveAlgorithm, Sample, Vegas};
/// let v = Vegas::new(20, 1, 200)?;
/// let s = v.on_sample(v.initial_state(), &Sample { rtt_nanos: 10_000_000, in_flight: 20, dropped: false });
/// let s = v.on_sample(s, &Sample { rtt_nanos: 10_000_000, in_flight: 20, dropped: false });
/// assert!(v.limit_of(s) > 20); // no queue: grows
/// let s = v.on_sample(s, &Sample { rtt_nanos: 40_000_000, in_flight: 20, dropped: false });
/// assert!(v.limit_of(s) < 30); // a queue of 3/4 of the limit: shrinks
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Vegas {
    initial: u32,
    min: u32,
    max: u32,
}

impl Vegas {
    /// Vegas from `initial` within `min..=max` (alpha 3·log10(L), beta 6·log10(L), threshold
    /// log10(L), steps of log10(L), smoothing 1). Netflix's periodic reset of `rtt_noload`
    /// (probing) is not included.
    ///
    /// # Errors
    /// As [`Aimd::new`].
    ///
    /// ```
    /// assert!(floodgate::concurrency::adaptive::Vegas::new(20, 1, 200).is_ok());
    /// ```
    pub fn new(initial: u32, min: u32, max: u32) -> Result<Self, ConfigError> {
        check_bounds(initial, min, max)?;
        Ok(Vegas { initial, min, max })
    }
}

impl AdaptiveAlgorithm for Vegas {
    fn initial_state(&self) -> u128 {
        pack(f64::from(self.initial), 0)
    }

    /// `extra` is `rtt_noload` in ns (0: none yet).
    fn on_sample(&self, state: u128, sample: &Sample) -> u128 {
        let (limit, rtt_noload) = unpack(state);
        let rtt = sample.rtt_nanos;
        let step = log10_step(limit);
        // A drop backs off whatever its RTT, and its RTT is no no-load RTT: one that failed
        // faster than any request was served would otherwise take `rtt_noload`'s place (as in
        // Netflix's Vegas, which checks for a new minimum first) and change nothing, and then
        // make every normal request after it read as a long queue.
        if sample.dropped {
            return pack(clamp(limit - step, self.min, self.max), rtt_noload);
        }
        if rtt == 0 {
            // The clock did not move: no measurement. As a no-load RTT of 1 ns it would make
            // every later request read as a queue of the whole limit (Netflix's Vegas refuses
            // an RTT of zero).
            return state;
        }
        if rtt_noload == 0 || rtt < rtt_noload {
            return pack(limit, rtt);
        }
        let queue = (limit * (1.0 - rtt_noload as f64 / rtt as f64)).ceil();
        let next = if f64::from(sample.in_flight) * 2.0 < limit {
            limit
        } else if queue <= step {
            limit + 6.0 * step
        } else if queue < 3.0 * step {
            limit + step
        } else if queue > 6.0 * step {
            limit - step
        } else {
            limit
        };
        pack(clamp(next, self.min, self.max), rtt_noload)
    }

    fn limit_of(&self, state: u128) -> u32 {
        unpack(state).0 as u32
    }
}
