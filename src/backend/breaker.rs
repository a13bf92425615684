//! [`CircuitBreaker`]: stop calling a store that keeps failing, for an exponentially growing
//! (capped) back-off, then let one probe through.
//!
//! # Protocol (one `AtomicU64`; the loom model is `loom-tests/tests/breaker.rs`)
//! The word packs a mode, the consecutive failures (closed) or trips (open, half-open), an
//! *epoch*, and (open, half-open) a time in whole milliseconds since the breaker was made:
//!
//! * **Closed** `(failures, epoch)`: every call goes to the store. [`CircuitBreaker::admit`] is
//!   one atomic load. A failure CASes the word from exactly the word the call's admission
//!   loaded to `failures + 1` (calls out together that fail together, such as one coalesced
//!   round trip's callers, count once: the first to report); the one that reaches the threshold
//!   CASes the word to Open. A success resets a non-zero `failures` with one CAS (no store at
//!   all when the word it saw had none: the healthy path is that single load). Every change of
//!   the closed word (a counted failure, a reset, a close after a probe) moves the epoch on, so
//!   a call's word stands only while no failure was counted and no success reset the run since
//!   its admission, across trips too: the epoch goes through Open and HalfOpen with the trips
//!   (16 bits, wrapping: a call out through 65,536 changes of the word is the one case this does
//!   not catch).
//! * **Open** `(trips, until)`: calls before `until` are short-circuited (no store call; the
//!   failure policy decides). The first call at or after `until` CASes the word to HalfOpen: it
//!   alone is the **probe**.
//! * **HalfOpen** `(trips, expires)`: one probe is out; other calls are short-circuited. The
//!   probe's success CASes the exact word it installed to Closed; its failure to Open with
//!   `trips + 1` and the back-off `open_for × 2^trips` (capped at `max_open_for`). A probe
//!   dropped unreported (a cancelled future) CASes its word back to Open, due now, so the next
//!   call probes; a probe forgotten entirely (`mem::forget`) expires after `max_open_for` and
//!   the next call takes over (so keep `max_open_for` above the store's timeout: then a probe
//!   still out that long cannot be a live call), moving the epoch on, so the superseded probe's
//!   word never comes back. A report whose CAS fails (its word was replaced) changes nothing.
//!
//! Times are the breaker's [`Clock`]: a lagging read only short-circuits a little longer, a
//! leaping read can start a probe early, and one that leaps past a probe's expiry
//! (`max_open_for` after the probe went out; leaps of up to
//! [`MAX_CLOCK_LAG_NANOS`](crate::clock::MAX_CLOCK_LAG_NANOS), 10 s, are in the time model, and
//! the default `max_open_for` is 10 s) takes the probe over while it is still out: two probes
//! are out then, and only the later one's report counts (the earlier one's word no longer
//! stands).

use std::fmt;
use std::time::Duration;

use crate::clock::{Clock, QuantaClock};
use crate::decision::ConfigError;
use crate::sync::{AtomicU64, Ordering};

const MODE_BITS: u32 = 2;
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const COUNT_SHIFT: u32 = MODE_BITS;
const COUNT_BITS: u32 = 22;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const TIME_SHIFT: u32 = COUNT_SHIFT + COUNT_BITS;
/// Open and half-open words hold the trips in the low bits of the count (at most 63: the
/// back-off stops doubling long before) and the epoch above them.
const TRIPS_BITS: u32 = 6;
const TRIPS_MASK: u64 = (1 << TRIPS_BITS) - 1;
/// The epoch: 16 bits (the count's bits above the trips; a closed word's time bits).
const EPOCH_MASK: u64 = (1 << (COUNT_BITS - TRIPS_BITS)) - 1;
/// 40 bits of milliseconds: 34 years after the breaker was made (later times saturate).
const TIME_MAX: u64 = (1 << (64 - TIME_SHIFT)) - 1;
const NANOS_PER_MS: u64 = 1_000_000;

/// The most consecutive failures [`BreakerConfig::failures`] accepts.
pub const MAX_BREAKER_FAILURES: u32 = 1_000_000;

/// The longest back-off [`BreakerConfig`] accepts: one hour.
pub const MAX_OPEN_FOR: Duration = Duration::from_secs(3600);

fn pack(mode: u64, count: u64, ms: u64) -> u64 {
    mode | (count.min(COUNT_MASK) << COUNT_SHIFT) | (ms.min(TIME_MAX) << TIME_SHIFT)
}

fn mode(word: u64) -> u64 {
    word & ((1 << MODE_BITS) - 1)
}

fn count(word: u64) -> u64 {
    (word >> COUNT_SHIFT) & COUNT_MASK
}

fn time_ms(word: u64) -> u64 {
    word >> TIME_SHIFT
}

/// A closed word: `failures` consecutive failures counted in `epoch`.
fn closed(failures: u64, epoch: u64) -> u64 {
    pack(CLOSED, failures, epoch & EPOCH_MASK)
}

/// An open or half-open word: `trips` (at most 63), the epoch carried from the closed word that
/// tripped, and `ms` (open: when a probe is due; half-open: when the probe is presumed lost).
fn tripped(mode: u64, trips: u64, epoch: u64, ms: u64) -> u64 {
    pack(
        mode,
        trips.min(TRIPS_MASK) | ((epoch & EPOCH_MASK) << TRIPS_BITS),
        ms,
    )
}

/// The trips of an open or half-open word.
fn trips(word: u64) -> u64 {
    count(word) & TRIPS_MASK
}

/// The epoch of any word.
fn epoch(word: u64) -> u64 {
    if mode(word) == CLOSED {
        time_ms(word) & EPOCH_MASK
    } else {
        count(word) >> TRIPS_BITS
    }
}

/// When a [`CircuitBreaker`] opens and for how long.
///
/// ```
/// use floodgate::backend::BreakerConfig;
/// use std::time::Duration;
/// // Keep max_open_for above the store's timeout: a probe out that long is presumed lost.
/// let config = BreakerConfig::new(3, Duration::from_millis(100), Duration::from_secs(5))?;
/// assert_eq!(config.failures(), 3);
/// assert_eq!(config.open_for(4), Duration::from_millis(800)); // 100 ms × 2³
/// assert_eq!(config.open_for(10), Duration::from_secs(5)); // capped
/// assert!(BreakerConfig::new(0, Duration::from_millis(100), Duration::from_secs(5)).is_err());
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    failures: u32,
    open_ms: u64,
    max_open_ms: u64,
}

impl Default for BreakerConfig {
    /// Opens after 5 consecutive failures, for 250 ms, doubling on each failed probe up to 10 s.
    fn default() -> Self {
        BreakerConfig {
            failures: 5,
            open_ms: 250,
            max_open_ms: 10_000,
        }
    }
}

impl BreakerConfig {
    /// Opens after `failures` consecutive failures, for `open_for`; each failed probe doubles
    /// the back-off, up to `max_open_for`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `failures = 0`, [`ConfigError::TooLarge`] above
    /// [`MAX_BREAKER_FAILURES`]; [`ConfigError::DurationOutOfRange`] for an `open_for` under
    /// 1 ms or over `max_open_for`, or a `max_open_for` over [`MAX_OPEN_FOR`]. Durations are
    /// counted in whole milliseconds (rounded down).
    ///
    /// ```
    /// use floodgate::{ConfigError, backend::BreakerConfig};
    /// use std::time::Duration;
    /// let err = BreakerConfig::new(5, Duration::from_secs(2), Duration::from_secs(1)).unwrap_err();
    /// assert!(matches!(err, ConfigError::DurationOutOfRange { what: "breaker open_for", .. }));
    /// assert!(err.to_string().contains("2s"), "{err}");
    /// ```
    pub fn new(
        failures: u32,
        open_for: Duration,
        max_open_for: Duration,
    ) -> Result<Self, ConfigError> {
        if failures == 0 {
            return Err(ConfigError::Invalid {
                what: "breaker failures",
                why: "must be at least 1 (0 given): the consecutive failures that open the breaker",
            });
        }
        if failures > MAX_BREAKER_FAILURES {
            return Err(ConfigError::TooLarge {
                what: "breaker failures",
                value: u64::from(failures),
                max: u64::from(MAX_BREAKER_FAILURES),
            });
        }
        let ms = Duration::from_millis(1);
        if max_open_for < ms || max_open_for > MAX_OPEN_FOR {
            return Err(ConfigError::DurationOutOfRange {
                what: "breaker max_open_for",
                value: max_open_for,
                min: ms,
                max: MAX_OPEN_FOR,
            });
        }
        if open_for < ms || open_for > max_open_for {
            return Err(ConfigError::DurationOutOfRange {
                what: "breaker open_for",
                value: open_for,
                min: ms,
                max: max_open_for,
            });
        }
        // Both at most an hour: the casts fit.
        Ok(BreakerConfig {
            failures,
            open_ms: open_for.as_millis() as u64,
            max_open_ms: max_open_for.as_millis() as u64,
        })
    }

    /// Consecutive failures that open the breaker.
    ///
    /// ```
    /// assert_eq!(floodgate::backend::BreakerConfig::default().failures(), 5);
    /// ```
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The back-off after the `trips`-th consecutive opening (1 for the first):
    /// `open_for × 2^(trips − 1)`, at most `max_open_for`.
    ///
    /// ```
    /// use floodgate::backend::BreakerConfig;
    /// use std::time::Duration;
    /// let config = BreakerConfig::default();
    /// assert_eq!(config.open_for(1), Duration::from_millis(250));
    /// assert_eq!(config.open_for(2), Duration::from_millis(500));
    /// assert_eq!(config.open_for(60), Duration::from_secs(10));
    /// ```
    pub fn open_for(&self, trips: u32) -> Duration {
        Duration::from_millis(self.open_ms_for(u64::from(trips)))
    }

    fn open_ms_for(&self, trips: u64) -> u64 {
        let doublings = trips.saturating_sub(1).min(63) as u32;
        self.open_ms
            .checked_shl(doublings)
            .filter(|ms| ms >> doublings == self.open_ms)
            .unwrap_or(u64::MAX)
            .min(self.max_open_ms)
    }
}

/// Where a [`CircuitBreaker`] stands.
///
/// ```
/// use floodgate::backend::{BreakerState, CircuitBreaker};
/// let breaker = CircuitBreaker::new(Default::default());
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to the store.
    Closed,
    /// Calls are short-circuited until a probe is due.
    Open,
    /// One probe is out; other calls are short-circuited.
    HalfOpen,
}

/// A lock-free circuit breaker for any backend (its protocol is described in
/// `src/backend/breaker.rs` and model-checked in `loom-tests/tests/breaker.rs`):
/// after [`BreakerConfig::failures`] consecutive failures (calls out together that fail
/// together count once: a failure counts only if, since its call was admitted, no other was
/// counted, no success reset the run and the breaker did not trip) it **opens**, and calls are
/// short-circuited (the caller decides by its failure policy, without calling the store) for a
/// back-off that doubles on each failed probe; then it lets **one probe** through, and closes on
/// its success. While closed, [`admit`](Self::admit) costs one atomic load.
///
/// ```
/// use floodgate::backend::{BreakerConfig, BreakerState, CircuitBreaker};
/// use floodgate::ManualClock;
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let config = BreakerConfig::new(2, Duration::from_millis(100), Duration::from_secs(1))?;
/// let breaker = CircuitBreaker::with_clock(config, clock.clone());
/// for _ in 0..2 {
///     breaker.admit().expect("closed").failed();
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// assert!(breaker.admit().is_none()); // short-circuited
/// clock.advance(Duration::from_millis(100));
/// let probe = breaker.admit().expect("the probe");
/// assert!(breaker.admit().is_none()); // one probe at a time
/// probe.succeeded();
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// assert_eq!(breaker.short_circuited(), 2);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
pub struct CircuitBreaker<C = QuantaClock> {
    word: AtomicU64,
    short_circuited: AtomicU64,
    config: BreakerConfig,
    clock: C,
    /// The clock's reading when the breaker was made: times in the word count from it.
    base: u64,
}

impl<C: Clock> fmt::Debug for CircuitBreaker<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("config", &self.config)
            .field("state", &self.state())
            .field("short_circuited", &self.short_circuited())
            .finish_non_exhaustive()
    }
}

impl CircuitBreaker<QuantaClock> {
    /// A breaker on the default clock.
    ///
    /// ```
    /// use floodgate::backend::CircuitBreaker;
    /// let breaker = CircuitBreaker::new(Default::default());
    /// assert!(breaker.admit().is_some());
    /// ```
    pub fn new(config: BreakerConfig) -> Self {
        Self::with_clock(config, QuantaClock::new())
    }
}

/// What [`CircuitBreaker::admit`] hands out: report the store call's result on it. Dropped
/// unreported, it counts as neither (a dropped probe lets the next call probe).
///
/// ```
/// use floodgate::backend::CircuitBreaker;
/// let breaker = CircuitBreaker::new(Default::default());
/// let permit = breaker.admit().unwrap();
/// assert!(!permit.is_probe());
/// permit.succeeded();
/// ```
#[must_use = "report the call's result with succeeded() or failed()"]
pub struct BreakerPermit<'a, C: Clock> {
    breaker: &'a CircuitBreaker<C>,
    /// The word seen (closed) or installed (probe) when admitted.
    word: u64,
    reported: bool,
}

impl<C: Clock> fmt::Debug for BreakerPermit<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerPermit")
            .field("probe", &self.is_probe())
            .finish_non_exhaustive()
    }
}

impl<C: Clock> BreakerPermit<'_, C> {
    /// Whether this call is the half-open probe.
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, CircuitBreaker};
    /// use floodgate::ManualClock;
    /// let breaker = CircuitBreaker::with_clock(BreakerConfig::default(), ManualClock::new());
    /// assert!(!breaker.admit().unwrap().is_probe());
    /// ```
    pub fn is_probe(&self) -> bool {
        mode(self.word) == HALF_OPEN
    }

    /// The store answered.
    ///
    /// ```
    /// use floodgate::backend::CircuitBreaker;
    /// CircuitBreaker::new(Default::default()).admit().unwrap().succeeded();
    /// ```
    pub fn succeeded(mut self) {
        self.reported = true;
        self.breaker.succeeded(self.word);
    }

    /// The store failed (a timeout or an error).
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, BreakerState, CircuitBreaker};
    /// let breaker = CircuitBreaker::new(BreakerConfig::new(1, std::time::Duration::from_secs(1), std::time::Duration::from_secs(1))?);
    /// breaker.admit().unwrap().failed();
    /// assert_eq!(breaker.state(), BreakerState::Open);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn failed(mut self) {
        self.reported = true;
        self.breaker.failed(self.word);
    }
}

impl<C: Clock> Drop for BreakerPermit<'_, C> {
    fn drop(&mut self) {
        if !self.reported && self.is_probe() {
            // An abandoned probe: open again, due now, so the next call probes.
            let now = self.breaker.now_ms();
            let open = tripped(OPEN, trips(self.word), epoch(self.word), now);
            let _ = self.breaker.word.compare_exchange(
                self.word,
                open,
                // SeqCst: the breaker's word is read and written only by its own CASes and
                // loads; SeqCst keeps the model simple, and this path is off the hot path.
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
    }
}

impl<C: Clock> CircuitBreaker<C> {
    /// A closed breaker whose back-offs run on `clock`.
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, CircuitBreaker};
    /// use floodgate::ManualClock;
    /// let breaker = CircuitBreaker::with_clock(Default::default(), ManualClock::new());
    /// assert_eq!(breaker.state(), BreakerState::Closed);
    /// ```
    pub fn with_clock(config: BreakerConfig, clock: C) -> Self {
        let base = clock.now_nanos();
        CircuitBreaker {
            word: AtomicU64::new(closed(0, 0)),
            short_circuited: AtomicU64::new(0),
            config,
            clock,
            base,
        }
    }

    /// The configuration.
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, CircuitBreaker};
    /// assert_eq!(*CircuitBreaker::new(BreakerConfig::default()).config(), BreakerConfig::default());
    /// ```
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_nanos().saturating_sub(self.base) / NANOS_PER_MS
    }

    /// Whether a store call may go out now: `Some` permit to report its result on, or `None`
    /// when the breaker is open (or half-open with its probe out): decide without the store.
    /// Each `None` is counted in [`short_circuited`](Self::short_circuited).
    ///
    /// ```
    /// use floodgate::backend::CircuitBreaker;
    /// let breaker = CircuitBreaker::new(Default::default());
    /// match breaker.admit() {
    ///     Some(permit) => permit.succeeded(), // call the store, then report
    ///     None => unreachable!("a new breaker is closed"),
    /// }
    /// ```
    #[inline]
    pub fn admit(&self) -> Option<BreakerPermit<'_, C>> {
        // Relaxed: the word is self-contained (it guards no other memory); every change to it
        // is a CAS on the same word, which this load only needs to see eventually.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if mode(word) == CLOSED {
                return Some(BreakerPermit {
                    breaker: self,
                    word,
                    reported: false,
                });
            }
            let now = self.now_ms();
            if now < time_ms(word) {
                // Relaxed: a statistics counter; no other memory depends on it.
                self.short_circuited.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            // Due (open), or a probe out for longer than `max_open_for` (half-open), presumed
            // lost: this call probes.
            let trips = trips(word).max(1);
            let expires = now.saturating_add(self.config.max_open_ms);
            // A probe taking over one presumed lost moves the epoch on: the superseded probe
            // may still be out, and its word must not come back (a drop of this probe opens the
            // breaker due at this call's time, and the next probe in the superseded one's
            // millisecond would otherwise install that very word again).
            let epoch = epoch(word) + u64::from(mode(word) == HALF_OPEN);
            let probe = tripped(HALF_OPEN, trips, epoch, expires);
            // SeqCst: see `BreakerPermit::drop`; only one CAS from a given word wins, so only
            // one probe is out per word.
            match self
                .word
                .compare_exchange(word, probe, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    return Some(BreakerPermit {
                        breaker: self,
                        word: probe,
                        reported: false,
                    });
                }
                Err(current) => word = current,
            }
        }
    }

    fn succeeded(&self, seen: u64) {
        match mode(seen) {
            // Closed: reset a run of failures, whenever this call was admitted (failures that
            // completed while it was out are broken up by its success all the same), unless
            // the word moved on to a trip: a success does not re-close a breaker that opened
            // meanwhile. The healthy path (no failures) reads the word and writes nothing.
            CLOSED => {
                // Relaxed: as in `admit`.
                let mut word = self.word.load(Ordering::Relaxed);
                while mode(word) == CLOSED && count(word) > 0 {
                    // SeqCst: see `BreakerPermit::drop`.
                    match self.word.compare_exchange(
                        word,
                        closed(0, epoch(word) + 1),
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => break,
                        Err(current) => word = current,
                    }
                }
            }
            // The probe: close, if its word still stands, in the epoch after the one that
            // tripped (no call admitted before the trip finds its word again).
            _ => {
                // SeqCst: see `BreakerPermit::drop`.
                let _ = self.word.compare_exchange(
                    seen,
                    closed(0, epoch(seen) + 1),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
        }
    }

    fn failed(&self, seen: u64) {
        if mode(seen) == HALF_OPEN {
            // The probe failed: open again, for a longer back-off.
            let trips = (trips(seen) + 1).min(TRIPS_MASK);
            let until = self.now_ms().saturating_add(self.config.open_ms_for(trips));
            // SeqCst: see `BreakerPermit::drop`.
            let _ = self.word.compare_exchange(
                seen,
                tripped(OPEN, trips, epoch(seen), until),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            return;
        }
        // Counted only from the very word the call was admitted on. A call admitted before
        // another failure was counted (or a success reset the run, or the breaker tripped and
        // closed again) overlapped that failure: the stall or the round trip that failed them
        // both is one failure of the run, counted by the first to report (a coalesced batch's
        // callers, or every call in flight when a server froze). So `failures` consecutive
        // failures are that many calls each admitted after the previous failure counted. A
        // word moved on to a trip, or probing, is not the call's either: a late failure of a
        // call admitted while closed adds nothing to it.
        // Relaxed: as in `admit` (the compare-exchange below decides; this spares a moved-on
        // word the clock read).
        if self.word.load(Ordering::Relaxed) != seen {
            return;
        }
        let failures = count(seen) + 1;
        let next = if failures >= u64::from(self.config.failures) {
            let until = self.now_ms().saturating_add(self.config.open_ms_for(1));
            tripped(OPEN, 1, epoch(seen) + 1, until)
        } else {
            closed(failures, epoch(seen) + 1)
        };
        // SeqCst: see `BreakerPermit::drop`.
        let _ = self
            .word
            .compare_exchange(seen, next, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Where the breaker stands now.
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, CircuitBreaker};
    /// assert_eq!(CircuitBreaker::new(Default::default()).state(), BreakerState::Closed);
    /// ```
    pub fn state(&self) -> BreakerState {
        // Relaxed: as in `admit`; a snapshot.
        match mode(self.word.load(Ordering::Relaxed)) {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// How long until the next probe is due (zero when closed, or when one is due now).
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, CircuitBreaker};
    /// use floodgate::ManualClock;
    /// use std::time::Duration;
    /// let config = BreakerConfig::new(1, Duration::from_millis(300), Duration::from_secs(1))?;
    /// let breaker = CircuitBreaker::with_clock(config, ManualClock::new());
    /// breaker.admit().unwrap().failed();
    /// assert_eq!(breaker.retry_in(), Duration::from_millis(300));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn retry_in(&self) -> Duration {
        // Relaxed: as in `admit`; a snapshot.
        let word = self.word.load(Ordering::Relaxed);
        if mode(word) == CLOSED {
            return Duration::ZERO;
        }
        let due = self
            .base
            .saturating_add(time_ms(word).saturating_mul(NANOS_PER_MS));
        Duration::from_nanos(due.saturating_sub(self.clock.now_nanos()))
    }

    /// Calls short-circuited so far (answered without the store).
    ///
    /// ```
    /// use floodgate::backend::CircuitBreaker;
    /// assert_eq!(CircuitBreaker::new(Default::default()).short_circuited(), 0);
    /// ```
    pub fn short_circuited(&self) -> u64 {
        // Relaxed: a statistics counter; no other memory depends on it.
        self.short_circuited.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    fn breaker(failures: u32) -> (CircuitBreaker<ManualClock>, ManualClock) {
        let clock = ManualClock::starting_at(1_700_000_000_000_000_000);
        let config =
            BreakerConfig::new(failures, Duration::from_millis(100), Duration::from_secs(1))
                .unwrap();
        (CircuitBreaker::with_clock(config, clock.clone()), clock)
    }

    fn fail(b: &CircuitBreaker<ManualClock>) {
        b.admit().expect("admitted").failed();
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let (b, _) = breaker(3);
        fail(&b);
        fail(&b);
        b.admit().unwrap().succeeded(); // resets the run
        fail(&b);
        fail(&b);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.admit().is_none());
        assert_eq!(b.short_circuited(), 1);
    }

    /// Calls out at once that fail together (one coalesced round trip, or one stall seen by
    /// every call in flight) are one failure of the run, not one each: a run of `failures`
    /// needs that many failures each admitted after the one before was counted. Before, five
    /// callers of one timed-out batch opened a breaker of the default threshold (5) at once.
    #[test]
    fn failures_of_calls_out_together_count_once() {
        let (b, _) = breaker(2);
        let out: Vec<_> = (0..5).map(|_| b.admit().expect("closed")).collect();
        for permit in out {
            permit.failed();
        }
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "five overlapping failures: one"
        );
        fail(&b); // admitted after that failure was counted: the second of the run
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn a_success_admitted_before_the_failures_still_breaks_their_run() {
        let (b, _) = breaker(2);
        // Admitted while the breaker had no failures, answered after one failed.
        let early = b.admit().expect("closed");
        fail(&b);
        early.succeeded();
        fail(&b);
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "opened on two failures with a success between them"
        );
        fail(&b);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn back_off_doubles_on_failed_probes_up_to_the_cap_and_success_closes() {
        let (b, clock) = breaker(1);
        fail(&b);
        let mut expected = [100, 200, 400, 800, 1000, 1000].into_iter();
        loop {
            let wait = expected.next().unwrap();
            assert_eq!(b.retry_in(), Duration::from_millis(wait));
            clock.advance(Duration::from_millis(wait - 1));
            assert!(b.admit().is_none(), "early at {wait} ms");
            clock.advance(Duration::from_millis(1));
            let probe = b.admit().expect("a probe is due");
            assert!(probe.is_probe());
            assert!(b.admit().is_none(), "a second probe");
            assert_eq!(b.state(), BreakerState::HalfOpen);
            if wait == 1000 && expected.len() == 0 {
                probe.succeeded();
                break;
            }
            probe.failed();
            assert_eq!(b.state(), BreakerState::Open);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.retry_in(), Duration::ZERO);
        // Closed afresh: the next trip starts from the base back-off again.
        fail(&b);
        assert_eq!(b.retry_in(), Duration::from_millis(100));
    }

    #[test]
    fn a_dropped_probe_lets_the_next_call_probe_and_a_forgotten_one_expires() {
        let (b, clock) = breaker(1);
        fail(&b);
        clock.advance(Duration::from_millis(100));
        drop(b.admit().expect("probe"));
        assert_eq!(b.state(), BreakerState::Open);
        let probe = b.admit().expect("the next call probes at once");
        std::mem::forget(probe);
        clock.advance(Duration::from_millis(999));
        assert!(
            b.admit().is_none(),
            "a probe out for less than max_open_for is exclusive"
        );
        clock.advance(Duration::from_millis(1));
        let probe = b
            .admit()
            .expect("a forgotten probe expires after max_open_for");
        probe.succeeded();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn late_reports_of_calls_admitted_while_closed_change_nothing() {
        let (b, clock) = breaker(1);
        let late = b.admit().unwrap();
        let late_failure = b.admit().unwrap();
        fail(&b);
        late.succeeded(); // admitted before the trip: does not re-close
        late_failure.failed(); // does not extend the back-off
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.retry_in(), Duration::from_millis(100));
        clock.advance(Duration::from_millis(100));
        let probe = b.admit().unwrap();
        let stale = probe.word;
        probe.failed();
        // A report against a word that no longer stands is ignored.
        b.succeeded(stale);
        assert_eq!(b.state(), BreakerState::Open);
    }

    /// A call admitted while closed, still out when the breaker tripped (its failure or the
    /// trip's: one stall) and answered only after a probe closed the breaker again, belongs to
    /// the run before the trip: a failure was counted since its admission (the one that
    /// tripped), so its late failure is not one of the new run. Before, the closed word after
    /// the probe was the same as the one it was admitted on (no failures), and with a threshold
    /// of 1 its failure opened the breaker again right after the probe had closed it.
    #[test]
    fn a_late_failure_from_before_a_trip_does_not_count_after_the_probe_closes() {
        let (b, clock) = breaker(1);
        let stale = b.admit().expect("closed");
        fail(&b);
        clock.advance(Duration::from_millis(100));
        b.admit().expect("the probe").succeeded();
        assert_eq!(b.state(), BreakerState::Closed);
        stale.failed();
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "re-opened by a stale failure"
        );
        fail(&b); // a call admitted after the close: the new run's first failure
        assert_eq!(b.state(), BreakerState::Open);
        // The same after a run broken by a success: a failure of a call admitted before the
        // failure that the success reset was already counted with it.
        let (b, _) = breaker(2);
        let overlapping = b.admit().expect("closed");
        fail(&b);
        b.admit().expect("closed").succeeded();
        overlapping.failed();
        fail(&b);
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "two failures of one run of one"
        );
        fail(&b);
        assert_eq!(b.state(), BreakerState::Open);
    }

    /// A breaker of threshold 1 tripped, its first probe out, and a second probe that took it
    /// over on one read leaping by `max_open_for` (the clock back at the first's time after).
    fn a_probe_taken_over<'b>(
        b: &'b CircuitBreaker<ManualClock>,
        clock: &ManualClock,
    ) -> (
        BreakerPermit<'b, ManualClock>,
        BreakerPermit<'b, ManualClock>,
    ) {
        fail(b);
        clock.advance(Duration::from_millis(100));
        let first = b.admit().expect("the probe");
        let now = clock.now_nanos();
        clock.set(now + 1_000 * MS_NANOS); // one read leaps by max_open_for
        let second = b
            .admit()
            .expect("a probe out for max_open_for is presumed lost");
        clock.set(now);
        (first, second)
    }

    /// The limit of "one probe at a time" stated in the module docs: a read that leaps past a
    /// probe's expiry takes it over while it is out, and the first probe's report is then
    /// ignored (it would otherwise close a breaker whose current probe has not answered).
    #[test]
    fn a_read_leaping_past_a_probes_expiry_takes_it_over_and_the_first_report_is_ignored() {
        let (b, clock) = breaker(1);
        let (first, second) = a_probe_taken_over(&b, &clock);
        assert!(b.admit().is_none(), "a third probe");
        first.succeeded();
        assert_eq!(
            b.state(),
            BreakerState::HalfOpen,
            "closed by the superseded probe"
        );
        second.failed();
        assert_eq!(b.state(), BreakerState::Open);
    }

    /// The superseded probe's word must not come back: a read leaping past the first probe's
    /// expiry takes it over, the second probe is dropped (open again, due at the unleaped
    /// time), and a third call probes in the same millisecond as the first. Before, the third
    /// probe's word was the first's bit for bit, so the first's report (it is still out)
    /// counted again: it closed the breaker while the current probe had not answered.
    #[test]
    fn a_superseded_probe_s_word_does_not_come_back_with_a_later_probe() {
        let (b, clock) = breaker(1);
        let (first, second) = a_probe_taken_over(&b, &clock);
        drop(second); // abandoned: open, due now
        let third = b.admit().expect("the next call probes");
        first.succeeded();
        assert_eq!(
            b.state(),
            BreakerState::HalfOpen,
            "closed by the superseded probe while the current one is out"
        );
        third.succeeded();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    const MS_NANOS: u64 = 1_000_000;

    #[test]
    fn configuration_errors_name_the_value() {
        let ms = Duration::from_millis;
        assert!(matches!(
            BreakerConfig::new(0, ms(1), ms(1)),
            Err(ConfigError::Invalid { .. })
        ));
        assert_eq!(
            BreakerConfig::new(MAX_BREAKER_FAILURES + 1, ms(1), ms(1)),
            Err(ConfigError::TooLarge {
                what: "breaker failures",
                value: u64::from(MAX_BREAKER_FAILURES) + 1,
                max: u64::from(MAX_BREAKER_FAILURES),
            })
        );
        assert_eq!(
            BreakerConfig::new(1, Duration::from_micros(999), ms(5)),
            Err(ConfigError::DurationOutOfRange {
                what: "breaker open_for",
                value: Duration::from_micros(999),
                min: ms(1),
                max: ms(5),
            })
        );
        assert!(matches!(
            BreakerConfig::new(1, ms(1), Duration::MAX),
            Err(ConfigError::DurationOutOfRange {
                what: "breaker max_open_for",
                value: Duration::MAX,
                ..
            })
        ));
        let c = BreakerConfig::new(1, MAX_OPEN_FOR, MAX_OPEN_FOR).unwrap();
        assert_eq!(c.open_for(u32::MAX), MAX_OPEN_FOR);
    }

    #[test]
    fn a_clock_that_reads_before_the_base_or_far_ahead_never_panics() {
        let clock = ManualClock::starting_at(u64::MAX - 1);
        let b = CircuitBreaker::with_clock(
            BreakerConfig::new(1, Duration::from_millis(1), Duration::from_millis(1)).unwrap(),
            clock.clone(),
        );
        fail(&b);
        clock.advance_nanos(1);
        let _ = b.admit();
        let lagging = CircuitBreaker::with_clock(BreakerConfig::default(), ManualClock::new());
        assert!(lagging.admit().is_some());
    }
}
