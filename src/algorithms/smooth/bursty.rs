//! [`SmoothBursty`]: Guava's `RateLimiter.create(permitsPerSecond)` in one `AtomicU64`.
//!
//! # Word layout
//! ```text
//!  63 62                                              12 11            0
//! ┌──┬─────────────────────────────────────────────────┬───────────────┐
//! │∞ │ whole µs of V + offset: 51 bits                  │ 2⁻¹² µs: 12   │
//! └──┴─────────────────────────────────────────────────┴───────────────┘
//! ```
//! * bit 63: the rate is `+∞` (see the module docs of `smooth`).
//! * bits 0..=62: `E = (V + offset) · 2¹²`, the virtual time `V = nf − stored_time` in
//!   fixed point with 12 fractional bits (2⁻¹² µs ≈ 0.24 ns). `offset = ⌈W⌉` µs keeps `E`
//!   non-negative (`stored_time ≤ W` and `nf ≥ 0`, so `V ≥ −W`). A fresh limiter is
//!   `nf = 0, stored = 0`: `E = offset · 2¹²`.
//! * `E = 2⁶³ − 1` (all ones) is *never*: Guava's `nextFreeTicket = Long.MAX_VALUE`, reached
//!   by a booking past the end of the range (e.g. rate `Double.MIN_VALUE`).
//!
//! Decoding at `now` (µs since creation): if `V ≥ now`, the limiter is in debt: `nf = V`,
//! nothing stored. Otherwise it is free: `nf = now`, `stored_time = min(W, now − V)`, which is
//! exactly Guava's resync (`stored + (now − nf)`, capped). This is lossless because bursty
//! stored permits only exist while `nf ≤ now`: a resync sets `nf = now`, spending stored
//! permits is free (so `nf` stays), and fresh permits are only booked once every stored one is
//! spent. Whole-µs values of `nf` (all of Guava's) are exact; `stored_time` is rounded to
//! 2⁻¹² µs.
//!
//! Range: 2⁵¹ µs (71 years) minus the offset after the limiter's creation. A clock read past
//! it is taken as the end of the range; a booking past it becomes *never*.

use std::fmt;

use crossbeam_utils::CachePadded;

use super::bursty_fixed::{GUAVA_MIN_INTERVAL, Terms, decide_finite};
use super::bursty_word::{BurstyCodec, FRACTION_BITS, INFINITE_BIT, NEVER, VALUE_MASK};
use super::{
    IntervalCell, Outcome, RateSetting, SmoothSnapshot, StoredPermits, Ticket, decide,
    micros_since, parse_rate, resync,
};
use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, Answer, ConfigError, Decision};
use crate::limiter::{MICROS_FLOOR, Step, raise_floor, reads_after, update, update_floored_leap};
use crate::sync::{AtomicU64, Ordering, fence};

/// The longest burst accepted: one year of stored permits.
const MAX_BURST_SECONDS: f64 = 365.0 * 24.0 * 3600.0;
/// Placeholder decision for steps whose answer nobody reads (`set_rate`'s CAS).
const UNREAD: Decision = Decision::allow(0, 0, 0);

/// Guava's `SmoothBursty`: a steady rate that saves up to `max_burst_seconds` (1 s for
/// `create`) of unused permits and spends them at no cost; a request is never delayed by its
/// own size, the next one pays for it.
///
/// One `AtomicU64` holds the whole state (layout in the source of `bursty.rs`); every call is
/// one load, one pure decision and at most one compare-exchange; a refusal writes nothing.
///
/// ```
/// use floodgate::{Limiter, ManualClock, SmoothBursty};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let limiter = SmoothBursty::create_with_clock(5.0, clock.clone())?;
/// // Guava's testSimple: R0.00, R0.20, R0.20 (Guava's f64 seconds: `compat::guava`)
/// assert_eq!(limiter.acquire(1)?, Duration::ZERO);
/// assert_eq!(limiter.acquire(1)?, Duration::from_millis(200));
/// assert_eq!(limiter.acquire(1)?, Duration::from_millis(200));
/// assert_eq!(clock.sleeps(), vec![Duration::from_millis(200); 2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SmoothBursty<C = QuantaClock> {
    /// The state word and its time floor, on one cache line (an admission that raises the floor
    /// touches no second line).
    words: CachePadded<Words>,
    interval: IntervalCell,
    codec: BurstyCodec,
    clock: C,
    origin_nanos: u64,
}

impl SmoothBursty<QuantaClock> {
    /// Guava's `RateLimiter.create(permitsPerSecond)` on the default clock: up to 1 s of
    /// unused permits is saved. `f64::INFINITY` is accepted (every request free).
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] for a rate that is zero, negative or NaN, or below one
    /// permit a year (`1e6 / rate` µs of at least a year and a µs: one permit would book more
    /// than a year, which every request would be refused as
    /// [`AcquireError::BookingTooLong`]). A rate below about 5.6·10⁻³⁰³ (Guava's
    /// `Double.MIN_VALUE`) is accepted: one permit, then never.
    ///
    /// ```
    /// let limiter = floodgate::SmoothBursty::create(100.0).unwrap();
    /// assert_eq!(limiter.rate(), 100.0);
    /// assert!(floodgate::SmoothBursty::create(0.0).is_err());
    /// assert!(floodgate::SmoothBursty::create(1.0 / (400.0 * 86_400.0)).is_err()); // 400 days
    /// ```
    pub fn create(permits_per_second: f64) -> Result<Self, ConfigError> {
        Self::create_with_clock(permits_per_second, QuantaClock::new())
    }
}

impl<C: Clock> SmoothBursty<C> {
    /// [`create`](SmoothBursty::create) on `clock`.
    ///
    /// # Errors
    /// As [`create`](SmoothBursty::create).
    ///
    /// ```
    /// use floodgate::{ManualClock, SmoothBursty};
    /// let limiter = SmoothBursty::create_with_clock(2.0, ManualClock::new()).unwrap();
    /// assert_eq!(limiter.snapshot().stored_permits, 0.0); // a new limiter stores nothing
    /// ```
    pub fn create_with_clock(permits_per_second: f64, clock: C) -> Result<Self, ConfigError> {
        Self::with_max_burst(permits_per_second, 1.0, clock)
    }

    /// A bursty limiter that saves up to `max_burst_seconds` of unused permits (Guava's
    /// `SmoothBursty(stopwatch, maxBurstSeconds)`; `create` uses 1.0). `0.0` saves nothing.
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] for a bad rate, or a burst that is negative, NaN or
    /// longer than a year.
    ///
    /// ```
    /// use floodgate::{ManualClock, SmoothBursty};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let limiter = SmoothBursty::with_max_burst(10.0, 3.0, clock.clone()).unwrap();
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!(limiter.snapshot().stored_permits, 30.0);
    /// ```
    pub fn with_max_burst(
        permits_per_second: f64,
        max_burst_seconds: f64,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if !(0.0..=MAX_BURST_SECONDS).contains(&max_burst_seconds) {
            return Err(ConfigError::InvalidNumber {
                what: "max_burst_seconds",
                value: max_burst_seconds,
                expected: "in [0, 31536000] (one year)",
            });
        }
        let setting = parse_rate(permits_per_second)?;
        let codec = BurstyCodec::new(max_burst_seconds * 1e6);
        let (interval, infinite) = match setting {
            RateSetting::Finite(interval) => (interval, false),
            // Unused until a finite rate is set.
            RateSetting::Infinite => (0.0, true),
        };
        let fresh = Ticket {
            next_free: 0,
            stored_time: 0.0,
        };
        Ok(SmoothBursty {
            words: CachePadded::new(Words {
                state: AtomicU64::new(codec.encode(fresh, infinite)),
                floor: AtomicU64::new(0),
            }),
            interval: IntervalCell::new(interval),
            codec,
            origin_nanos: clock.now_nanos(),
            clock,
        })
    }

    #[inline]
    fn now_micros(&self) -> i64 {
        micros_since(self.clock.now_nanos(), self.origin_nanos).min(self.codec.max_micros)
    }

    /// The short path's clock read: µs since creation, as [`now_micros`](Self::now_micros) but
    /// unchecked (a read behind the origin wraps far above the range, and a read past the range
    /// is above `max_micros`): the caller sends a read outside `0..=max_micros` to the engine,
    /// which saturates both.
    #[inline(always)]
    fn short_micros(&self) -> i64 {
        (self.clock.now_nanos().wrapping_sub(self.origin_nanos) / 1000) as i64
    }

    fn validate_rate(&self, permits_per_second: f64) -> Result<RateSetting, ConfigError> {
        parse_rate(permits_per_second)
    }

    /// `try_acquire(n)` / `admit(n)` for `n > 0` (Guava's `tryAcquire(n)`, no timeout): the
    /// common case in one pass, deciding exactly as the engine of [`decide_at`](Self::decide_at)
    /// does (the same [`decide_finite`]).
    ///
    /// The clock is read *before* the word and the floor are loaded, as the engine's loop
    /// reads it, so that as little as possible runs between the word's load and its
    /// compare-exchange: with the read in between (it takes ~20 ns here), two threads lost
    /// each other's races far more often (issue 17: 2 threads at 0.45-0.62x governor's
    /// throughput, 38% of the time in the engine; 0.9-1.1x after). A read older than the word
    /// is decided at `max(read, floor)`, as the engine decides it: the word's writer raised the
    /// floor before publishing it. Served here: a finite rate, a floor within the horizon of
    /// the read (no leap), a word that is not *never*. A refusal by a booking beyond the lag
    /// horizon is trusted only on a read taken after the word's load (the engine reads the
    /// clock again before it trusts such a booking: a thread stalled between its read and its
    /// load must not be refused by a booking paid since), or, answering a `bool`, on a read at
    /// least the floor's grain past the floor (the booking was then decided before the read):
    /// otherwise the clock is read again, and unless
    /// that read is within the floor's grain of the first, the word is decided again on it
    /// (`short_retry`); the refusal then stands only on a word still current (a repair may
    /// have replaced a leaped word and lowered the floor, as in
    /// `limiter::update_floored_leap`). A booking longer than a year is refused here, as the
    /// engine refuses it. A lost compare-exchange is decided again here, on the winner's word
    /// with the floor loaded again (`short_retry` says on which read). Every other case goes to the general engine, which decides it from
    /// scratch.
    #[inline(always)]
    fn try_acquire_now<A: Answer>(&self, n: u32) -> Result<A, AcquireError> {
        let clock_now = self.short_micros();
        if !(0..=self.codec.max_micros).contains(&clock_now) {
            return self.try_acquire_general(n, self.now_micros()).map(A::of);
        }
        // Acquire: as in `limiter::update` (a word comes with the floor its writer raised).
        let word = self.words.state.load(Ordering::Acquire);
        self.short_pass(n, clock_now, false, word, 0)
    }

    /// [`try_acquire_now`](Self::try_acquire_now)'s pass again, out of line (the common path
    /// stays one straight pass): after its `lost`-th lost compare-exchange, on the winner's word
    /// `word`, or for a second look at a refusal by a booking beyond the lag horizon, on the
    /// same word, with the read `read` says.
    ///
    /// A lost race keeps its read ([`RetryRead::Kept`]), where `limiter::update_floored_leap`
    /// (the engine's loop) reads the clock again on every retry: a new read, ~20 ns here,
    /// widened the window between the load and the compare-exchange and the losses fed each
    /// other (2 threads at 0.56-0.67x governor's throughput instead of 0.9-1.1x). Kept, the
    /// retry is decided as a call whose read came before the winner's word (linearizable; a
    /// refusal's `retry_after` is counted from that read). Except for a leaping read: kept, it
    /// would land a leaped booking after a repairer's word, under the floor the repairer then
    /// lowers, freezing the limiter for the whole leap (loom: `time_smooth_leap.rs`,
    /// `bursty_leaper_on_the_short_path_*`, `bursty_leaper_keeps_its_read_after_a_winner_in_debt`);
    /// a read more than the horizon past the floor the pass loaded, or past the winner's time
    /// as its word bounds it, reads again ([`RetryRead::Again`]). After [`SHORT_RETRIES`] passes
    /// in a row, the engine decides (so the recursion is bounded).
    ///
    /// Answers a whole `Decision` whatever the caller's answer, as the engine does: returned
    /// through memory, an answer generic over the caller's cost the common path 7 instructions
    /// of spills (callgrind, `instructions_smooth`: admit 65.6 -> 72.6 allowing).
    #[cold]
    #[inline(never)]
    fn short_retry(
        &self,
        n: u32,
        read: RetryRead,
        word: u64,
        lost: u32,
    ) -> Result<Decision, AcquireError> {
        if lost > SHORT_RETRIES {
            return self.try_acquire_general(n, self.now_micros());
        }
        let (clock_now, fresh) = match read {
            RetryRead::Kept(read) => (read, false),
            RetryRead::Fresh(read) => (read, true),
            RetryRead::Again => (self.short_micros(), true),
        };
        if !(0..=self.codec.max_micros).contains(&clock_now) {
            return self.try_acquire_general(n, self.now_micros());
        }
        self.short_pass(n, clock_now, fresh, word, lost)
    }

    /// One pass of the short path on `word` (loaded with Acquire, or returned by a failed
    /// compare-exchange: the `lost`-th) at the read `clock_now` (in `0..=max_micros`), taken
    /// after `word` was loaded when `fresh`.
    #[inline(always)]
    fn short_pass<A: Answer>(
        &self,
        n: u32,
        clock_now: i64,
        fresh: bool,
        word: u64,
        lost: u32,
    ) -> Result<A, AcquireError> {
        let general = || self.try_acquire_general(n, clock_now).map(A::of);
        // Relaxed: ordered after the Acquire load (or failed compare-exchange) that produced
        // `word`, which synchronizes with its writer's Release, after that writer's floor raise
        // (as in `limiter::update_floored`).
        let floor_now = self.words.floor.load(Ordering::Relaxed);
        // `max(clock, floor)`, served only while the floor is within the lag horizon of the read
        // (`limiter::floored`; the lead is checked only when the floor leads). `now_micros` is
        // in `0..=max_micros`, and so is every floor (it holds such reads).
        let now = if floor_now > clock_now as u64 {
            if floor_now - clock_now as u64 > MICROS_FLOOR.horizon {
                return general();
            }
            floor_now as i64
        } else {
            clock_now
        };
        let codec = &self.codec;
        let now_fixed = ((now + codec.offset) as u64) << FRACTION_BITS;
        let terms = || Terms::memo(self.interval.load());
        // A word at rate ∞ (bit 63) or *never* is above `now_fixed` (≤ 2⁶³ − 2¹³): decided here
        // as a refusal, it goes to the engine below.
        let outcome = decide_finite::<A>(codec, word, now, now_fixed, n, Some(0), false, terms);
        // A booking longer than a year (from a free limiter: never beyond the horizon).
        outcome.check_booking(n)?;
        let decision = outcome.decision;
        let Some(next) = outcome.next else {
            // Rate ∞ or *never*: the general engine. Tested before the horizon: near the end of
            // the range, `now_fixed` plus the horizon reaches 2⁶³ − 1 and such a word is not
            // beyond it.
            if word >= NEVER {
                return general();
            }
            // More than one permit: the engine judges the refusal (`decide_finite`'s
            // `judge_many`: a booking longer than a year when the debt is paid is the error).
            if n != 1 {
                return general();
            }
            // A booking `nf` beyond the lag horizon: a refusal that stands only on a word that
            // is still current. It may be a leaped one that a repair has replaced since,
            // lowering the floor this call loaded (a leaped word comes with a floor beyond the
            // horizon, which went to the engine above, until its repair lowers it after
            // replacing the word).
            if word > now_fixed + (MICROS_FLOOR.horizon << FRACTION_BITS) {
                // On the first pass the read is older than the word: a booking that landed
                // after it (a thread stalled between the two) is judged on a fresh read, as the
                // engine judges it (`Step::after_leap`); the stale read would refuse a request
                // whose booking has long been paid (`tests/smooth_stalled_read.rs`). So the clock
                // is read again, after the word's load (one more read for such a refusal; the
                // engine took ~280 instructions more). A read at most the floor's grain (16 µs)
                // after the first lets the refusal stand as decided on the first, at most that
                // much early: the staleness the floor already grants a lagging reader. Any other
                // read decides the same word again, by a whole pass on a read taken after its
                // load (`short_retry`).
                //
                // A `bool` answer skips that read when this call's time is at least a grain past
                // the floor loaded after the word: the word's writer raised the floor to within a
                // grain of its own time before publishing the word (`limiter::update_floored`),
                // so the booking was decided at a time before this read and the refusal is
                // Guava's answer at this read. A read again would change a `bool` only for a
                // thread stalled between its read and its load, whose refusal is then as old as
                // that of a thread stalled after its load; a `Decision` reads again, its
                // `retry_after` being counted from the read it stands on
                // (`a_stalled_refusal_is_at_most_one_grain_stale`). A booking decided within a
                // grain of this read may have landed after it: read again (`stalled_reader`).
                // Issue 17: the read was 27 of a `bool` refusal's 87 instructions
                // (`instructions_smooth`).
                let booked_before_the_read =
                    !A::REPORTS_TERMS && now as u64 >= floor_now + MICROS_FLOOR.grain;
                if !fresh && !booked_before_the_read {
                    let later = self.short_micros();
                    if later.wrapping_sub(clock_now) as u64 > MICROS_FLOOR.grain {
                        return self
                            .short_retry(n, RetryRead::Fresh(later), word, lost + 1)
                            .map(A::of);
                    }
                }
                // Acquire fence: pairs with the Release of a repairer's floor lowering, which
                // `floor_now` may have read; the word loaded next then shows its repair.
                fence(Ordering::Acquire);
                // Acquire: as the first load.
                if self.words.state.load(Ordering::Acquire) != word {
                    return general();
                }
            }
            return Ok(decision);
        };
        if next == word {
            return Ok(decision);
        }
        // No overflow: the floor is at most `max_micros`.
        if now as u64 >= floor_now + MICROS_FLOOR.grain {
            // Published by the Release compare-exchange below, as in `update_floored`.
            raise_floor(&self.words.floor, floor_now, now as u64);
        }
        // AcqRel / Acquire: as in `limiter::update`.
        match self
            .words
            .state
            .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(decision),
            // Another writer landed first: decided again on its word (`short_retry`). Sending
            // the call to the engine instead made a lost race cost a whole second pass, and at
            // two threads the losses fed each other. The read is kept unless it leads the
            // winner's time by more than the horizon (a leaping read: read again). The winner
            // decided at some `t` with `actual` at least `t − W` (free, `W` stored at most) in
            // the word's fixed point; `now` is at least this call's read.
            Err(actual) => {
                // The word alone does not bound the winner's time from above: a winner in debt
                // publishes `nf` beyond its time, and a leaping read less than `W + H` past `nf`
                // passed the word test (loom: `time_smooth_leap.rs`,
                // `bursty_leaper_keeps_its_read_after_a_winner_in_debt`).
                // The floor this pass loaded is a past read (a leaper's own raise comes after
                // it): a read more than the horizon past it is a leaping one.
                let leads = now as u64 > floor_now + MICROS_FLOOR.horizon
                    || now_fixed
                        > actual.saturating_add(
                            codec.full_fixed + (MICROS_FLOOR.horizon << FRACTION_BITS),
                        );
                let read = match leads {
                    true => RetryRead::Again,
                    false => RetryRead::Kept(clock_now),
                };
                self.short_retry(n, read, actual, lost + 1).map(A::of)
            }
        }
    }

    fn infinite(&self) -> bool {
        // Relaxed: a snapshot of one self-contained word.
        self.words.state.load(Ordering::Relaxed) & INFINITE_BIT != 0
    }

    fn interval(&self) -> f64 {
        self.interval.load()
    }

    /// One decision at `now`, published with the one CAS loop.
    #[inline]
    fn decide_at(&self, permits: u32, now: i64, timeout: Option<i64>) -> Outcome<u64> {
        let mut outcome = Outcome::UNDECIDED;
        // The first read is the caller's; the engine reads again only to confirm a floor that
        // looks like a leaping clock's (see `limiter::update_floored`).
        let read_clock = reads_after(u64::try_from(now).unwrap_or(0), || {
            u64::try_from(self.now_micros()).unwrap_or(0)
        });
        let decide_word = |word, floored, leap| {
            // A booking made on a leaping clock (its floor beyond the lag horizon of this fresh
            // read) is moved back by the leap: its debt stays, counted from the present.
            // Written even when the request is denied (once per leap), so the booking stays
            // where this read put it instead of moving with every later reader.
            // The floor only ever holds values of `now_micros`, which fit in an i64.
            let now = i64::try_from(floored).unwrap_or(now);
            // Only a booking that is itself beyond the horizon is moved: the floor and the word
            // are two atomics, so a leaper's floor can be seen with a present word (which must
            // keep its debt).
            let horizon = i64::try_from(MICROS_FLOOR.horizon).unwrap_or(i64::MAX);
            let beyond_horizon = {
                let (ticket, _) = self.codec.decode(word, now);
                ticket.next_free != i64::MAX && ticket.next_free > now.saturating_add(horizon)
            };
            let leaped_word = leap > 0 && beyond_horizon;
            let (word, repair) = if leaped_word {
                let shifted = self.codec.shift_back(word, leap);
                (shifted, Some(shifted))
            } else {
                (word, None)
            };
            let value = word & VALUE_MASK;
            outcome = if word & INFINITE_BIT != 0 || value == NEVER {
                // Rate ∞, or *never*: Guava's model on the decoded ticket.
                let (ticket, infinite) = self.codec.decode(word, now);
                let math = (!infinite).then(|| BurstyMath {
                    interval: self.interval.load(),
                    full_time: self.codec.full_time,
                });
                decide(ticket, now, permits, timeout, math.as_ref())
                    .map_next(|t| self.codec.encode(t, infinite))
            } else {
                let (now, now_fixed) = self.codec.fixed_now(now);
                let terms = || Terms::memo(self.interval.load());
                decide_finite(
                    &self.codec,
                    value,
                    now,
                    now_fixed,
                    permits,
                    timeout,
                    true,
                    terms,
                )
            };
            let step = Step::new(outcome.next.or(repair), outcome.decision);
            // A booking beyond the horizon is judged on a fresh read, and a refusal by one under
            // an in-range floor only on a word that is still current (`Step::leap`): the word
            // may be a leaped one that a repair has replaced since, lowering the floor.
            if beyond_horizon {
                step.after_leap()
            } else {
                step
            }
        };
        update_floored_leap(
            &self.words.state,
            &self.words.floor,
            MICROS_FLOOR,
            read_clock,
            decide_word,
        );
        outcome
    }

    fn set_infinite(&self) {
        update(&self.words.state, |word| {
            Step::new(
                (word & INFINITE_BIT == 0).then_some(word | INFINITE_BIT),
                UNREAD,
            )
        });
    }

    fn set_finite(&self, interval: f64, now: i64) {
        // Relaxed: only tells whether this call leaves ∞ (module docs: racing set_rate calls).
        let before = self.words.state.load(Ordering::Relaxed);
        self.interval.publish(interval);
        if before & INFINITE_BIT != 0 {
            // The word written is stamped with `now` (a full burst from then): publish the floor
            // first, as every writer does, so that a leaping read's burst, ahead of every
            // present reader, is judged a leap and repaired instead of refusing them for the
            // whole leap (`tests/smooth_leaping_set_rate.rs`). Relaxed: published by the
            // Release compare-exchange of `update` below. `now` is a read of `now_micros`.
            self.words
                .floor
                .fetch_max(u64::try_from(now).unwrap_or(0), Ordering::Relaxed);
            update(&self.words.state, |word| {
                Step::new(
                    (word & INFINITE_BIT != 0).then(|| self.codec.leave_infinite(word, now)),
                    UNREAD,
                )
            });
        }
    }

    fn snapshot_at(&self, now: i64) -> SmoothSnapshot {
        // Relaxed: a snapshot of one self-contained word.
        let (ticket, infinite) = self
            .codec
            .decode(self.words.state.load(Ordering::Relaxed), now);
        let ticket = resync(ticket, now, self.codec.full_time);
        let stored_permits = if infinite {
            f64::INFINITY
        } else {
            ticket.stored_time / self.interval.load()
        };
        SmoothSnapshot {
            next_free_micros: ticket.next_free,
            stored_permits,
            rate: self.rate(),
        }
    }
}

smooth_limiter_api!(
    SmoothBursty,
    "SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap()"
);

impl<C> fmt::Debug for SmoothBursty<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmoothBursty")
            // Relaxed: diagnostics only.
            .field(
                "word",
                &format_args!("{:#x}", self.words.state.load(Ordering::Relaxed)),
            )
            .field("max_burst_micros", &self.codec.full_time)
            .finish_non_exhaustive()
    }
}

/// [`SmoothBursty`]'s state word and its time floor.
struct Words {
    state: AtomicU64,
    /// The time floor of `limiter::update_at` (µs since `origin_nanos`): a request whose clock
    /// read lags the last booking's is decided at that booking's time.
    floor: AtomicU64,
}

/// Bursty stored permits: free, accrued at the stable interval (Guava's `double` model: the
/// engine runs it at rate ∞ and on a word that is *never*; `bursty_fixed` follows it).
pub(super) struct BurstyMath {
    pub(super) interval: f64,
    pub(super) full_time: f64,
}

impl StoredPermits for BurstyMath {
    #[inline]
    fn interval(&self) -> f64 {
        self.interval
    }
    #[inline]
    fn full_time(&self) -> f64 {
        self.full_time
    }
    #[inline]
    fn permits_of(&self, stored_time: f64) -> f64 {
        stored_time / self.interval
    }
    #[inline]
    fn time_of(&self, permits: f64) -> f64 {
        permits * self.interval
    }
    #[inline]
    fn wait_for_stored(&self, _stored_permits: f64, _take: f64) -> i64 {
        0
    }
    /// See [`bursty_fixed::GUAVA_MIN_INTERVAL`](GUAVA_MIN_INTERVAL).
    const GUAVA_MIN_INTERVAL: f64 = GUAVA_MIN_INTERVAL;
}

/// The clock read a pass of `SmoothBursty::short_retry` runs on.
#[derive(Clone, Copy)]
enum RetryRead {
    /// The read of the pass before, taken before the word was loaded.
    Kept(i64),
    /// A read taken after the word was loaded (a refusal beyond the horizon may stand on it).
    Fresh(i64),
    /// The clock read again now, after the word was loaded.
    Again,
}

/// Lost compare-exchanges in a row that the short path decides again itself (each one deeper in
/// the stack) before it hands the call to the engine's loop.
const SHORT_RETRIES: u32 = 8;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Limiter, ManualClock};

    /// A limiter advanced to `before_end_micros` before the end of its time range.
    fn near_the_end(limiter: &SmoothBursty<ManualClock>, clock: &ManualClock, before: i64) {
        let at = limiter.codec.max_micros - before;
        clock.set(limiter.origin_nanos + at as u64 * 1000);
    }

    #[test]
    fn infinite_rate_near_end_of_range_short_path_agrees_with_engine() {
        // Within the last 10 s (the lag horizon) of the range, and at its very end.
        for burst in [0.0, 1.0] {
            for before in [5_000_000, 1, 0] {
                let clock = ManualClock::new();
                let make = || SmoothBursty::with_max_burst(f64::INFINITY, burst, clock.clone());
                let (short, engine, admit) = (make().unwrap(), make().unwrap(), make().unwrap());
                near_the_end(&short, &clock, before);
                let engine_says = engine.try_acquire_for(1, Duration::ZERO).unwrap();
                assert!(engine_says.is_allowed(), "rate ∞ grants everything");
                assert_eq!(
                    short.try_acquire(1).unwrap(),
                    engine_says,
                    "{burst} {before}"
                );
                assert_eq!(admit.admit(1), Ok(true), "{burst} {before}");
            }
        }
    }

    #[test]
    fn never_near_end_of_range_retry_agrees_with_engine() {
        // Guava's Double.MIN_VALUE: one permit, then *never*.
        for before in [5_000_000, 1, 0] {
            let clock = ManualClock::new();
            let make = || SmoothBursty::create_with_clock(f64::from_bits(1), clock.clone());
            let (short, engine, admit) = (make().unwrap(), make().unwrap(), make().unwrap());
            for limiter in [&short, &engine, &admit] {
                assert!(limiter.try_acquire(1).unwrap().is_allowed());
            }
            near_the_end(&short, &clock, before);
            let engine_says = engine.try_acquire_for(1, Duration::ZERO).unwrap();
            assert!(!engine_says.is_allowed());
            assert_eq!(
                engine_says.retry_after(),
                Duration::from_nanos(u64::MAX),
                "never"
            );
            assert_eq!(short.try_acquire(1).unwrap(), engine_says, "{before}");
            assert_eq!(admit.admit(1), Ok(false), "{before}");
        }
    }

    /// A full 1 s burst at `rate` spent in chunks of `n` at once: the chunks granted (the last
    /// books the rest fresh: Guava's pre-consumption), beside Guava's `⌊rate / n⌋ + 1`.
    fn chunks_from_a_full_burst(rate: f64, n: u32) -> (u64, u64) {
        let clock = ManualClock::new();
        let limiter = SmoothBursty::create_with_clock(rate, clock.clone()).unwrap();
        clock.advance(Duration::from_secs(2));
        let guava = (rate / f64::from(n)).floor() as u64 + 1;
        let mut granted = 0;
        while limiter.try_acquire(n).unwrap().is_allowed() {
            granted += 1;
            assert!(granted <= guava + 1, "rate {rate}, n {n}: more than Guava");
        }
        (granted, guava)
    }

    #[test]
    fn high_rate_burst_spent_in_chunks_matches_guava() {
        for (rate, n) in [
            (1e9, 65_536),
            (1e9, 10_000),
            (3e8, 10_000),
            (1e8, 10_000),
            (2.5e9, 1_000_000),
            (1e7, 1_000),
            (1e6, 1_000),
            (7e8, 3),
        ] {
            let (granted, guava) = chunks_from_a_full_burst(rate, n);
            // Each request's cost is rounded up by less than one 2⁻¹² µs unit: over all the
            // requests, less than this many chunks.
            let chunk_units = f64::from(n) * 1e6 / rate * 4096.0;
            let slack = (guava as f64 / chunk_units).ceil() as u64;
            assert!(
                granted <= guava && granted + slack >= guava,
                "rate {rate}, n {n}: {granted} chunks granted, Guava {guava} (slack {slack})"
            );
        }
    }

    /// A request for more permits never leaves more stored (nor a larger `remaining`), around
    /// the boundary where the stored permits stop covering a request.
    #[test]
    fn asking_more_leaves_more() {
        let stored_after = |rate: f64, n: u32| {
            let clock = ManualClock::new();
            let limiter = SmoothBursty::create_with_clock(rate, clock.clone()).unwrap();
            clock.advance(Duration::from_secs(2));
            let decision = limiter.try_acquire(n).unwrap();
            assert!(decision.is_allowed());
            (limiter.snapshot().stored_permits, decision.remaining())
        };
        for (rate, boundary) in [
            // The boundary of a permit rounded up to 5 units (4.096e9 / 5), and the exact ones.
            (1e9, 819_200_000),
            (1e9, 1_000_000_000),
            (3_333_333.3, 3_333_333),
            (7e8 / 3.0, 233_333_333),
            (998.0, 998),
        ] {
            let mut last = (f64::INFINITY, u64::MAX);
            for n in boundary - 3..=boundary + 3 {
                let now = stored_after(rate, n);
                assert!(
                    now.0 <= last.0 && now.1 <= last.1,
                    "rate {rate}: {n} permits leave {now:?}, one fewer {last:?}"
                );
                last = now;
            }
        }
    }

    /// A [`ManualClock`] that counts its reads.
    #[derive(Clone, Default)]
    struct CountingClock {
        clock: ManualClock,
        reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl CountingClock {
        fn reads(&self) -> u64 {
            self.reads.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl Clock for CountingClock {
        fn now_nanos(&self) -> u64 {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.clock.now_nanos()
        }
        fn sleep(&self, duration: Duration) {
            self.clock.sleep(duration);
        }
    }

    /// Issue 17: a refusal by a booking beyond the lag horizon, booked before the read (the
    /// read is at least a grain past the floor), answered as a `bool`, reads the clock once;
    /// the `Decision` reads it again (its `retry_after` counts from a fresh read), and so does a
    /// `bool` whose booking may have landed after its read (within a grain of the floor).
    #[test]
    fn a_bool_refusal_by_a_booking_before_the_read_reads_the_clock_once() {
        let clock = CountingClock::default();
        // 0.01 per second: one permit books 100 s, beyond the 10 s horizon.
        let limiter = SmoothBursty::create_with_clock(0.01, clock.clone()).unwrap();
        clock.clock.advance(Duration::from_secs(1));
        assert_eq!(limiter.admit(1), Ok(true), "the booking, at 1 s");
        // Within a grain of the booking's time (the floor): the booking may have landed after
        // the read, which is confirmed by a second.
        let before = clock.reads();
        assert_eq!(limiter.admit(1), Ok(false));
        assert_eq!(clock.reads() - before, 2, "within a grain of the floor");
        clock
            .clock
            .advance(Duration::from_micros(MICROS_FLOOR.grain));
        for (admit, reads) in [(true, 1), (false, 2)] {
            let before = clock.reads();
            let allowed = if admit {
                limiter.admit(1).unwrap()
            } else {
                limiter.try_acquire(1).unwrap().is_allowed()
            };
            assert!(!allowed, "refused: the booking is paid at 101 s");
            assert_eq!(clock.reads() - before, reads, "admit {admit}");
        }
        // Paid: admitted, with one read.
        clock.clock.advance(Duration::from_secs(100));
        let before = clock.reads();
        assert_eq!(limiter.admit(1), Ok(true));
        assert_eq!(clock.reads() - before, 1);
    }

    #[test]
    fn the_reported_limit_follows_set_rate() {
        let limiter = SmoothBursty::create_with_clock(5.0, ManualClock::new()).unwrap();
        assert_eq!(limiter.try_acquire(1).unwrap().limit(), 5);
        limiter.set_rate(7.4).unwrap();
        assert_eq!(limiter.try_acquire(1).unwrap().limit(), 7);
        limiter.set_rate(5.0).unwrap();
        assert_eq!(limiter.try_acquire(1).unwrap().limit(), 5);
    }
}
